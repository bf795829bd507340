//! The whole config check: what the config alone can say (`Config`'s own checks), and
//! what needs the layers it configures: the catalog's rules for namespace and table
//! names, a CA file that the REST client can read, storage settings the storage code
//! can build, an embedded warehouse inside the configured bucket. It stands above
//! config, catalog and storage, so that the config (which every layer reads) imports
//! none of them. The host's lint and its start-up both print these lines.

use crate::config::{CatalogKind, Config};
use crate::error::{Error, Result};

/// Every problem with a config, one line each, naming the field; empty when it is valid.
pub fn problems(text: &str) -> Vec<String> {
    match Config::parse_with_problems(text) {
        Ok((config, mut problems)) => {
            problems.extend(layer_problems(&config));
            problems
        }
        Err(problems) => problems,
    }
}

/// Parses and validates a config; the error lists every problem.
pub fn config_from_json(text: &str) -> Result<Config> {
    let problems = problems(text);
    if !problems.is_empty() {
        return Err(Error::config(format!(
            "invalid config: {}",
            problems.join("; ")
        )));
    }
    Config::from_json(text)
}

/// The problems only the catalog and storage code can see.
fn layer_problems(config: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    // A schema the config gives (already reported if it is none).
    let static_schema = config
        .schema_evolution
        .schema
        .clone()
        .and_then(|json| serde_json::from_value::<iceberg::spec::Schema>(json).ok());
    // The key of a table floe would create from it, checked as the table's creation
    // checks it (top-level, primitive, not floating point), not at the first write
    // (where a refused batch is retried).
    if let Some(schema) = static_schema
        .as_ref()
        .filter(|_| !config.identifier_fields.is_empty())
    {
        let keys = crate::rowops::keys::with_identifier_fields(
            schema.clone(),
            &config.identifier_fields,
            config.case_sensitive_columns,
        );
        if let Err(e) = keys {
            let line = e.message();
            problems.push(match line.starts_with("identifier_fields") {
                true => line.to_string(),
                false => format!("identifier_fields: {line}"),
            });
        }
    }
    let mut push = |r: Result<()>, field: &str| {
        if let Err(e) = r {
            problems.push(format!("{field}{}", e.message()));
        }
    };
    // Static names are checked here; interpolated ones, per message.
    if let Some(ns) = &config.namespace {
        push(crate::catalog::parse_namespace(ns).map(|_| ()), "");
    }
    if let Some(table) = &config.table {
        push(crate::catalog::table_ident("ns", table).map(|_| ()), "");
    }
    // A missing or unreadable CA file is found by lint, not at the first connect.
    if let Some(path) = &config.catalog.tls_root_cas_file {
        push(crate::catalog::rest::root_cas(path).map(|_| ()), "");
    }
    push(
        crate::storage::file_io_props(&config.storage).map(|_| ()),
        "",
    );
    if let Ok(CatalogKind::Embedded { .. }) = config.catalog_kind() {
        let warehouse = crate::storage::location_url(config.warehouse_or_default())
            .and_then(|w| crate::storage::check_bucket(&config.storage, &w));
        push(warehouse, "catalog.warehouse: ");
    }
    // A column of that schema the tables floe creates cannot hold.
    if let Some(name) = static_schema
        .as_ref()
        .filter(|_| config.schema_evolution.format_version < 3)
        .and_then(crate::shred::infer::nanosecond_field)
    {
        problems.push(format!(
            "schema_evolution.schema: `{name}` is a nanosecond timestamp, which needs a v3 \
             table (set schema_evolution.format_version: 3)"
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layers_problems_follow_the_configs_own_all_reported() {
        let problems = problems(
            r#"{"catalog": {"url": "http://127.0.0.1:1", "auth": {"aws_sigv4": {"region": "x", "credentials": {"id": "", "secret": "s"}}}},
                "storage": {"gcp_cloud_storage": {"credentials_type": "service_account"}},
                "commit": {"max_snapshots": 0}}"#,
        );
        assert_eq!(
            problems,
            [
                "commit.max_snapshots must be greater than 0",
                "catalog.auth.aws_sigv4.credentials: id and secret must both be set (leave credentials out to use the environment or ~/.aws/credentials)",
                "storage.gcp_cloud_storage.credentials_type: service_account needs credentials_file or credentials_json",
            ]
        );
        assert!(
            config_from_json(
                r#"{"storage": {"gcp_cloud_storage": {"credentials_type": "service_account"}}}"#
            )
            .is_err()
        );
    }

    #[test]
    fn a_nanosecond_column_in_a_given_schema_is_a_config_problem() {
        let config = |ty: &str| {
            format!(
                r#"{{"schema_evolution": {{"schema": {{"type": "struct", "schema-id": 0, "fields": [
                    {{"id": 1, "name": "ts", "required": false, "type": "{ty}"}}]}}}}}}"#
            )
        };
        assert_eq!(
            problems(&config("timestamp_ns")),
            [
                "schema_evolution.schema: `ts` is a nanosecond timestamp, which needs a v3 table \
              (set schema_evolution.format_version: 3)"
            ]
        );
        assert!(problems(&config("timestamp")).is_empty());
        let v3 = config("timestamp_ns").replace(
            r#""schema_evolution": {"#,
            r#""schema_evolution": {"format_version": 3, "#,
        );
        assert!(problems(&v3).is_empty(), "{:?}", problems(&v3));
    }

    #[test]
    fn a_key_a_given_schema_cannot_hold_is_a_config_problem() {
        let config = |keys: &str| {
            format!(
                r#"{{"identifier_fields": {keys}, "schema_evolution": {{"schema": {{"type": "struct",
                    "schema-id": 0, "fields": [
                    {{"id": 1, "name": "id", "required": false, "type": "long"}},
                    {{"id": 2, "name": "price", "required": false, "type": "double"}},
                    {{"id": 3, "name": "user", "required": false, "type": {{"type": "struct",
                      "fields": [{{"id": 4, "name": "id", "required": false, "type": "long"}}]}}}}]}}}}}}"#
            )
        };
        for keys in [
            r#"["price"]"#,
            r#"["user.id"]"#,
            r#"["user"]"#,
            r#"["missing"]"#,
        ] {
            let problems = problems(&config(keys));
            assert_eq!(problems.len(), 1, "{keys}: {problems:?}");
            assert!(
                problems[0].starts_with("identifier_fields"),
                "{keys}: {problems:?}"
            );
        }
        assert!(problems(&config(r#"["id"]"#)).is_empty());
    }

    #[test]
    fn a_static_name_that_is_no_folder_name_is_a_config_problem() {
        let problems = problems(r#"{"namespace": "a.b/c", "table": "../t"}"#);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("a/c") || problems[0].contains("b/c"),
            "{problems:?}"
        );
        assert!(problems[1].contains("\"../t\""), "{problems:?}");
        assert!(super::problems(r#"{"namespace": "a.b", "table": "t"}"#).is_empty());
    }

    #[test]
    fn an_embedded_warehouse_outside_the_bucket_is_a_config_problem() {
        // Found before any catalog is opened.
        let problems = problems(
            r#"{"catalog": {"warehouse": "/tmp/wh"}, "storage": {"aws_s3": {"bucket": "lake"}}}"#,
        );
        assert!(
            problems[0].starts_with("catalog.warehouse: storage.aws_s3.bucket is \"lake\""),
            "{problems:?}"
        );
    }
}
