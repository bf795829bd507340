//! The checks of a config that need nothing but the config: values that parse but
//! cannot work, settings that contradict each other, and type errors named by their
//! field without quoting a secret. Checks that need the catalog or storage code are in
//! `crate::validate`.

use super::*;

/// A type error with the path of the field at fault (`commit.max_retries: invalid
/// value: integer `-1`, expected u32`). A secret field's error never quotes the value
/// it was given.
pub(super) fn describe_type_error(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = e.path().to_string();
    match path.as_str() {
        "" | "." => e.inner().to_string(),
        _ if is_secret_path(&path) => format!("{path}: must be a string"),
        // A field in a section holding secrets, given a value of another type (a section
        // given as text, `credentials: "id/secret"`): serde's message would quote the value.
        _ if holds_secrets(&path) && e.inner().to_string().starts_with("invalid type") => {
            format!(
                "{path}: must be {} (its value is not shown)",
                expected_type(e.inner())
            )
        }
        _ => format!("{path}: {}", e.inner()),
    }
}

/// What a type error says was expected (`a boolean`, `a string`), with a struct or map
/// named as `a map`: the words a YAML user knows.
pub(super) fn expected_type(e: &serde_json::Error) -> String {
    let text = e.to_string();
    // The last ", expected": the value quoted before it may hold the words too.
    let expected = text
        .rsplit_once(", expected ")
        .map(|(_, expected)| expected)
        .unwrap_or("another type");
    // serde_json appends " at line 1 column 5" when it read from text.
    let expected = expected.split(" at line ").next().unwrap_or(expected);
    match expected.starts_with("struct ") || expected == "a map" {
        true => "a map".into(),
        false => expected.into(),
    }
}

/// Fields whose values are secrets (header values are often `Authorization`).
pub(super) fn is_secret_path(path: &str) -> bool {
    const SECRETS: [&str; 10] = [
        "catalog.auth.bearer",
        "catalog.auth.oauth2.client_secret",
        "catalog.auth.aws_sigv4.credentials.secret",
        "catalog.auth.aws_sigv4.credentials.token",
        "storage.aws_s3.credentials.secret",
        "storage.aws_s3.credentials.token",
        "storage.gcp_cloud_storage.credentials_json",
        "storage.azure_blob_storage.storage_sas_token",
        "storage.azure_blob_storage.storage_connection_string",
        "storage.azure_blob_storage.storage_access_key",
    ];
    SECRETS.contains(&path) || path.starts_with("catalog.headers")
}

/// Sections whose fields are secrets.
pub(super) fn holds_secrets(path: &str) -> bool {
    [
        "catalog.auth",
        "storage.aws_s3.credentials",
        "storage.aws_s3",
        "storage.gcp_cloud_storage",
        "storage.azure_blob_storage",
    ]
    .iter()
    .any(|section| path == *section || path.starts_with(&format!("{section}.")))
}

/// What cannot work in `catalog.auth.aws_sigv4`: where Redpanda Connect would silently
/// take one of two sources of credentials, floe asks for one.
pub(super) fn sigv4_problems(sigv4: &SigV4Config) -> Vec<String> {
    let mut problems = Vec::new();
    const AT: &str = "catalog.auth.aws_sigv4.credentials";
    if let Some(c) = &sigv4.credentials {
        let keys = c.id.is_some() || c.secret.is_some() || c.token.is_some();
        if keys && (c.id.is_none() || c.secret.is_none()) {
            problems.push(format!(
                "{AT}: id and secret must both be set (leave credentials out to use the \
                 environment or ~/.aws/credentials)"
            ));
        } else if !keys && c.profile.is_none() && c.role.is_none() && !c.from_ec2_role {
            problems.push(format!(
                "{AT}: id and secret must both be set, or profile, role or from_ec2_role \
                 (leave credentials out to use the environment or ~/.aws/credentials)"
            ));
        }
        if keys && c.profile.is_some() {
            problems.push(format!(
                "{AT}: set profile or id and secret, not both (Redpanda Connect would take \
                 the profile and ignore the keys)"
            ));
        }
        if c.from_ec2_role && (keys || c.profile.is_some() || c.role.is_some()) {
            problems.push(format!(
                "{AT}.from_ec2_role: the instance's role replaces every other source of \
                 credentials; leave out profile, id, secret and role (Redpanda Connect would \
                 ignore them)"
            ));
        }
        if c.role_external_id.is_some() && c.role.is_none() {
            problems.push(format!(
                "{AT}.role_external_id: only a role assumed (role) sends it; set role or \
                 leave it out"
            ));
        }
    }
    if let Some(endpoint) = &sigv4.endpoint
        && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
    {
        problems.push(format!(
            "catalog.auth.aws_sigv4.endpoint {:?} is not an http:// or https:// URL",
            redact_user_info(endpoint)
        ));
    }
    if let Some(tcp) = &sigv4.tcp
        && !tcp.tcp_user_timeout.is_zero()
        && let Some((idle, _, _)) = tcp.keep_alive.as_ref().and_then(KeepAliveConfig::effective)
        && idle <= tcp.tcp_user_timeout
    {
        problems.push(format!(
            "catalog.auth.aws_sigv4.tcp: keep_alive.idle ({}) must be greater than \
             tcp_user_timeout ({}) (RFC 5482)",
            format_duration(idle),
            format_duration(tcp.tcp_user_timeout)
        ));
    }
    problems
}

impl Config {
    /// Values that parse but cannot work, each named by its field.
    /// Paths floe would take differently from what the user meant: `~` is not expanded
    /// (a folder named `~` would be made), and a `file:` warehouse needs an absolute path
    /// (`file:wh` would split the catalog's folder from the tables').
    fn path_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let warehouse = self.catalog.warehouse.as_deref().unwrap_or("");
        let database = self
            .catalog
            .url
            .as_deref()
            .and_then(|u| u.strip_prefix("sqlite:"))
            .unwrap_or("");
        for (field, path) in [("catalog.warehouse", warehouse), ("catalog.url", database)] {
            if path.trim_start_matches('/').starts_with('~') {
                problems.push(format!(
                    "{field}: floe does not expand ~ (it would make a folder named ~): give \
                     the full path"
                ));
            }
        }
        if warehouse.starts_with("file:") && !warehouse.starts_with("file:/") {
            problems.push(format!(
                "catalog.warehouse {warehouse:?}: a file: URL takes an absolute path \
                 (file:///abs/path); give a relative folder as a plain path"
            ));
        }
        // `file://data/wh`: floe would write /data/wh, but other readers take `data` for
        // a host (Java reads /wh, pyiceberg the relative data/wh) and miss the files.
        if let Some((host, path)) = warehouse
            .strip_prefix("file://")
            .and_then(|rest| rest.split_once('/').or(Some((rest, ""))))
            .filter(|(host, _)| !host.is_empty())
        {
            // What was most likely meant: `localhost` is a host; another word a folder.
            let meant = match host {
                "localhost" => path.to_string(),
                _ => format!("{host}/{path}"),
            };
            problems.push(format!(
                "catalog.warehouse {warehouse:?}: floe's file: URLs name no host, and other \
                 readers would take {host:?} for one: write file:///{}",
                meant.trim_end_matches('/')
            ));
        }
        problems
    }

    pub(super) fn invalid_values(&self) -> Vec<String> {
        let mut problems = Vec::new();
        // Headers the HTTP client cannot send fail every connect; named, never quoted.
        for (name, value) in &self.catalog.headers {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                problems.push(format!("catalog.headers: {name:?} is not a header name"));
            } else if reqwest::header::HeaderValue::from_str(value).is_err() {
                problems.push(format!(
                    "catalog.headers: the value of {name:?} is not a valid header value \
                     (a line break or control character)"
                ));
            }
        }
        // Storage speaks with keys, never with a URL's user: a password there would
        // reach logs in the storage client's error texts.
        let storage = &self.storage;
        let endpoints = [
            (
                "aws_s3",
                storage.aws_s3.as_ref().and_then(|c| c.endpoint.as_ref()),
            ),
            (
                "gcp_cloud_storage",
                storage
                    .gcp_cloud_storage
                    .as_ref()
                    .and_then(|c| c.endpoint.as_ref()),
            ),
            (
                "azure_blob_storage",
                storage
                    .azure_blob_storage
                    .as_ref()
                    .and_then(|c| c.endpoint.as_ref()),
            ),
        ];
        for (section, endpoint) in endpoints {
            if endpoint.is_some_and(|e| redact_user_info(e) != *e) {
                problems.push(format!(
                    "storage.{section}.endpoint must not hold a user name or password; \
                     give credentials in storage.{section}'s own fields"
                ));
            } else if let Some(e) = endpoint.filter(|e| !e.trim().is_empty())
                && !(e.starts_with("http://") || e.starts_with("https://"))
            {
                // The storage client would take it as https://, failing a plain-http
                // store only at the first write.
                problems.push(format!(
                    "storage.{section}.endpoint {:?} must start with http:// or https://",
                    redact_user_info(e)
                ));
            }
        }
        problems.extend(self.path_problems());
        if let Err(e) = self.catalog_kind() {
            problems.push(e.message().to_string());
        }
        let parquet = &self.parquet;
        if let Some(level) = parquet.compression_level {
            // Unset compression is zstd, unless a table says otherwise.
            let (codec, levels) = match parquet.compression {
                None | Some(Compression::Zstd) => ("zstd", Some(1..=22)),
                Some(Compression::Gzip) => ("gzip", Some(1..=9)),
                Some(Compression::Snappy) => ("snappy", None),
                Some(Compression::Lz4) => ("lz4", None),
                Some(Compression::Uncompressed) => ("uncompressed", None),
            };
            match levels {
                Some(range) if !range.contains(&level) => problems.push(format!(
                    "parquet.compression_level {level} is outside {codec}'s {}..={} (0: the codec's default)",
                    range.start(),
                    range.end()
                )),
                None => problems.push(format!(
                    "parquet.compression_level: {codec} has no levels; leave it out"
                )),
                _ => {}
            }
        }
        let sizes = [
            ("commit.max_group_rows", self.commit.max_group_rows),
            ("commit.max_group_bytes", self.commit.max_group_bytes),
            ("commit.max_snapshots", self.commit.max_snapshots),
        ];
        for (name, _) in sizes.iter().filter(|(_, size)| *size == 0) {
            problems.push(format!("{name} must be greater than 0"));
        }
        if let Some(c) = self
            .storage
            .aws_s3
            .as_ref()
            .and_then(|s| s.credentials.as_ref())
            && (c.id.is_empty() || c.secret.is_empty())
        {
            problems.push(
                "storage.aws_s3.credentials: id and secret must both be set (leave credentials \
                 out for none)"
                    .into(),
            );
        }
        if let Some(sigv4) = &self.catalog.auth.aws_sigv4 {
            problems.extend(sigv4_problems(sigv4));
        }
        let auths = [
            self.catalog.auth.bearer.is_some(),
            self.catalog.auth.oauth2.is_some(),
            self.catalog.auth.aws_sigv4.is_some(),
        ];
        if auths.iter().filter(|set| **set).count() > 1 {
            problems.push("catalog.auth: set one of bearer, oauth2 and aws_sigv4".into());
        }
        if let Some(o) = &self.catalog.auth.oauth2
            && (o.client_id.is_empty() || o.client_secret.is_empty())
        {
            problems
                .push("catalog.auth.oauth2: client_id and client_secret must both be set".into());
        }
        if let Some(eo) = &self.commit.exactly_once
            && eo.writer_id.trim().is_empty()
        {
            problems.push("commit.exactly_once.writer_id must not be empty".into());
        }
        if let Some(name) = self.identifier_fields.iter().find(|n| n.trim().is_empty()) {
            problems.push(format!("identifier_fields: {name:?} is not a column name"));
        }
        problems.extend(self.schema_evolution.problems(self.case_sensitive_columns));
        match self.catalog_kind() {
            Ok(CatalogKind::Embedded { .. }) => {
                problems.extend(self.rest_only_settings().into_iter().map(|field| {
                    format!(
                        "catalog.{field}: only a REST catalog uses it, and catalog.url names \
                         none (unset or empty: the embedded catalog)"
                    )
                }));
            }
            Ok(CatalogKind::Rest { .. }) if self.catalog.name.is_some() => problems.push(
                "catalog.name: only the embedded catalog uses it (a REST catalog is named by \
                 its url)"
                    .into(),
            ),
            _ => {}
        }
        problems
    }

    /// Catalog settings given that only a REST catalog acts on. Given with the embedded
    /// catalog they would be ignored: most likely `catalog.url` came out empty (an unset
    /// environment variable), and the rows would go to a local folder instead.
    pub(super) fn rest_only_settings(&self) -> Vec<&'static str> {
        let c = &self.catalog;
        [
            ("auth.bearer", c.auth.bearer.is_some()),
            ("auth.oauth2", c.auth.oauth2.is_some()),
            ("auth.aws_sigv4", c.auth.aws_sigv4.is_some()),
            ("headers", !c.headers.is_empty()),
            ("tls_skip_verify", c.tls_skip_verify),
            ("tls_root_cas_file", c.tls_root_cas_file.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, set)| set.then_some(field))
        .collect()
    }
}

impl SchemaEvolution {
    /// Settings that cannot work together, found without a catalog: the static schema
    /// must be an Iceberg schema floe can create, and the partition spec must parse
    /// (against the static schema, when there is one).
    pub(super) fn problems(&self, case_sensitive: bool) -> Vec<String> {
        let mut problems = Vec::new();
        if !(2..=3).contains(&self.format_version) {
            problems.push(format!(
                "schema_evolution.format_version must be 2 or 3 (the Iceberg format of tables \
                 floe creates), not {}",
                self.format_version
            ));
        }
        if self.require_schema_metadata && self.schema_metadata.is_none() {
            problems.push(
                "schema_evolution.require_schema_metadata needs schema_evolution.schema_metadata \
                 (the metadata key holding the types)"
                    .into(),
            );
        }
        let schema = match &self.schema {
            Some(json) => match serde_json::from_value::<iceberg::spec::Schema>(json.clone()) {
                Ok(schema) => Some(schema),
                Err(e) => {
                    problems.push(format!(
                        "schema_evolution.schema is not an Iceberg schema: {e}"
                    ));
                    None
                }
            },
            None => None,
        };
        if let Some(spec) = &self.partition_spec {
            let parsed = match &schema {
                Some(schema) => {
                    crate::partition_spec::parse_spec(spec, schema, case_sensitive).map(|_| ())
                }
                None => crate::partition_spec::check_syntax(spec),
            };
            if let Err(e) = parsed {
                problems.push(format!("schema_evolution.{}", e.message()));
            }
        }
        problems
    }
}
