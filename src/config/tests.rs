use super::*;

#[test]
fn empty_config_is_the_embedded_default() {
    let c = Config::from_json("{}").unwrap();
    assert_eq!(
        c.catalog_kind().unwrap(),
        CatalogKind::Embedded {
            database: PathBuf::from("./warehouse/catalog.db")
        }
    );
    assert!(c.case_sensitive_columns);
}

#[test]
fn rest_and_sqlite_urls() {
    let c = Config::from_json(r#"{"catalog": {"url": "http://127.0.0.1:8181/"}}"#).unwrap();
    assert_eq!(
        c.catalog_kind().unwrap(),
        CatalogKind::Rest {
            url: "http://127.0.0.1:8181".into()
        }
    );
    // `sqlite:<path>` as it is; the URL form as SQLAlchemy (and pyiceberg) reads it.
    for (url, path) in [
        ("sqlite:/tmp/c.db", "/tmp/c.db"),
        ("sqlite:./c.db", "./c.db"),
        ("sqlite:c.db", "c.db"),
        ("sqlite:////tmp/c.db", "/tmp/c.db"),
        ("sqlite:///tmp/c.db", "tmp/c.db"),
    ] {
        let c = Config::from_json(&format!(r#"{{"catalog": {{"url": "{url}"}}}}"#)).unwrap();
        assert_eq!(
            c.catalog_kind().unwrap(),
            CatalogKind::Embedded {
                database: PathBuf::from(path)
            },
            "{url}"
        );
    }
    for url in ["sqlite://host/c.db", "sqlite:", "sqlite:///"] {
        let problems = Config::problems(&format!(r#"{{"catalog": {{"url": "{url}"}}}}"#));
        assert_eq!(problems.len(), 1, "{url}: {problems:?}");
    }
}

#[test]
fn paths_floe_would_take_otherwise_are_refused() {
    for (config, says) in [
        (r#"{"catalog": {"warehouse": "~/wh"}}"#, "does not expand ~"),
        (
            r#"{"catalog": {"url": "sqlite:~/c.db"}}"#,
            "does not expand ~",
        ),
        (r#"{"catalog": {"warehouse": "file:wh"}}"#, "absolute path"),
        (
            r#"{"catalog": {"warehouse": "file://data/wh"}}"#,
            "write file:///data/wh",
        ),
        (
            r#"{"storage": {"aws_s3": {"bucket": "b", "endpoint": "minio:9000"}}}"#,
            "must start with http:// or https://",
        ),
    ] {
        let problems = Config::problems(config);
        assert!(
            problems.iter().any(|p| p.contains(says)),
            "{config}: {problems:?}"
        );
    }
    let problems = Config::problems(r#"{"catalog": {"warehouse": "file://localhost/data/wh"}}"#);
    assert!(
        problems.iter().any(|p| p.contains("write file:///data/wh")),
        "{problems:?}"
    );
    for fine in ["file:///data/wh", "file:/data/wh", "/data/wh", "wh"] {
        let config = format!(r#"{{"catalog": {{"warehouse": "{fine}"}}}}"#);
        assert_eq!(Config::problems(&config), Vec::<String>::new(), "{fine}");
    }
    let problems = Config::problems(r#"{"catalog": {"url": "sqlite://admin:s3cret@db/c.db"}}"#);
    assert!(
        !problems.is_empty() && !problems.iter().any(|p| p.contains("s3cret")),
        "{problems:?}"
    );
}

#[test]
fn an_embedded_catalog_over_a_bucket_needs_a_local_database() {
    let problems = Config::problems(r#"{"catalog": {"warehouse": "s3://lake/wh"}}"#);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("catalog.url: sqlite:<path>"),
        "{problems:?}"
    );
    for ok in [
        r#"{"catalog": {"warehouse": "s3://lake/wh", "url": "sqlite:/tmp/c.db"}}"#,
        r#"{"catalog": {"warehouse": "/tmp/wh"}}"#,
        r#"{"catalog": {"warehouse": "./wh"}}"#,
        r#"{"catalog": {"warehouse": "file:///tmp/wh"}}"#,
    ] {
        assert!(
            Config::problems(ok).is_empty(),
            "{ok}: {:?}",
            Config::problems(ok)
        );
    }
    let c = Config::from_json(r#"{"catalog": {"warehouse": "file:///tmp/wh"}}"#).unwrap();
    assert_eq!(
        c.catalog_kind().unwrap(),
        CatalogKind::Embedded {
            database: PathBuf::from("/tmp/wh/catalog.db")
        }
    );
}

#[test]
fn bad_configs_say_why() {
    let e = Config::from_json(r#"{"catalog": {"url": "ftp://x"}}"#).unwrap_err();
    assert!(e.to_string().contains("must start with"), "{e}");
    let e = Config::from_json(r#"{"tabel": "x"}"#).unwrap_err();
    assert!(e.to_string().contains("unknown field `tabel`"), "{e}");
    let e = Config::from_json(r#"{"parquet": {"compression": "zstd", "compression_level": 99}}"#)
        .unwrap_err();
    assert!(e.to_string().contains("1..=22"), "{e}");
}

#[test]
fn durations_in_go_form() {
    let d = |t| parse_duration(t).unwrap();
    assert_eq!(d("24h0m0s"), std::time::Duration::from_secs(86_400));
    assert_eq!(d("1h30m"), std::time::Duration::from_secs(5_400));
    assert_eq!(d("250ms"), std::time::Duration::from_millis(250));
    assert_eq!(d("0s"), std::time::Duration::ZERO);
    assert!(parse_duration("5 minutes").is_err());
    assert!(parse_duration("").is_err());
    let c =
        Config::from_json(r#"{"commit": {"linger": "20ms", "max_snapshot_age": "1h"}}"#).unwrap();
    assert_eq!(c.commit.linger, std::time::Duration::from_millis(20));
    let e = Config::from_json(r#"{"commit": {"linger": "soon"}}"#).unwrap_err();
    assert!(e.to_string().contains("not a duration"), "{e}");
}

#[test]
fn defaults_parse_back_to_the_same_config() {
    let defaults = Config::defaults();
    assert_eq!(defaults["commit"]["max_snapshot_age"], "24h");
    assert_eq!(defaults["schema_evolution"]["unknown_fields"], "error");
    assert_eq!(defaults["json"]["epoch_unit"], "ms");
    let config = Config::from_json(&defaults.to_string()).unwrap_err();
    // The optional sections carry their defaults only; they are not a config alone.
    assert!(config.to_string().contains("client_id"), "{config}");
    let mut tree = defaults.clone();
    tree["catalog"]["auth"] = serde_json::json!({});
    tree["storage"] = serde_json::json!({});
    let mut again = serde_json::to_value(Config::from_json(&tree.to_string()).unwrap()).unwrap();
    strip_nulls(&mut again);
    assert_eq!(again, tree);
}

#[test]
fn durations_print_in_go_form_and_read_back() {
    for text in ["24h", "2m", "90s", "250ms", "0s", "1500us", "7ns"] {
        let d = parse_duration(text).unwrap();
        assert_eq!(parse_duration(&format_duration(d)).unwrap(), d, "{text}");
    }
    assert_eq!(
        format_duration(std::time::Duration::from_secs(86_400)),
        "24h"
    );
    assert_eq!(format_duration(std::time::Duration::from_secs(90)), "90s");
}

#[test]
fn problems_name_their_fields_and_are_all_reported() {
    let problems = Config::problems(
        r#"{"catalog": {"url": "http://127.0.0.1:1", "auth": {"aws_sigv4": {"region": "x", "credentials": {"id": "", "secret": "s"}}}},
            "commit": {"max_snapshots": 0}}"#,
    );
    assert_eq!(
        problems,
        [
            "commit.max_snapshots must be greater than 0",
            "catalog.auth.aws_sigv4.credentials: id and secret must both be set (leave credentials out to use the environment or ~/.aws/credentials)",
        ]
    );
    let problems = Config::problems(r#"{"commit": {"max_group_rows": 0, "linger": "soon"}}"#);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("commit.linger: "), "{problems:?}");
    let problems = Config::problems(
        r#"{"commit": {"max_group_rows": 0}, "parquet": {"page_size": 0},
            "schema_evolution": {"require_schema_metadata": true, "partition_spec": "(bucket(x, id))"}}"#,
    );
    assert_eq!(
        problems,
        [
            "commit.max_group_rows must be greater than 0",
            "schema_evolution.require_schema_metadata needs schema_evolution.schema_metadata \
             (the metadata key holding the types)",
            "schema_evolution.partition_spec term \"bucket(x, id)\": bucket count is not a whole number from 1",
        ]
    );
    assert!(Config::problems(r#"{"storage": {"gcp_cloud_storage": null}}"#).is_empty());
}

#[test]
fn the_format_of_created_tables_is_2_or_3() {
    assert_eq!(
        Config::from_json("{}")
            .unwrap()
            .schema_evolution
            .format_version,
        2
    );
    for (config, problem) in [
        (r#"{"schema_evolution": {"format_version": 3}}"#, None),
        (
            r#"{"schema_evolution": {"format_version": 1}}"#,
            Some(
                "schema_evolution.format_version must be 2 or 3 (the Iceberg format of tables floe creates), not 1",
            ),
        ),
        (
            r#"{"merge_strategy": "copy-on-write", "schema_evolution": {"format_version": 3}}"#,
            None,
        ),
        (
            r#"{"merge_strategy": "merge-on-read-positional", "schema_evolution": {"format_version": 3}}"#,
            None,
        ),
    ] {
        assert_eq!(
            Config::problems(config),
            problem.into_iter().collect::<Vec<_>>(),
            "{config}"
        );
    }
}

#[test]
fn durations_go_accepts_and_refuses() {
    let d = |t| parse_duration(t).unwrap();
    assert_eq!(d("+5s"), std::time::Duration::from_secs(5));
    assert_eq!(d("-0s"), std::time::Duration::ZERO);
    assert_eq!(d("1\u{3bc}s"), std::time::Duration::from_micros(1));
    assert_eq!(d("1.5h"), std::time::Duration::from_secs(5_400));
    assert!(parse_duration("-1s").unwrap_err().contains("negative"));
    assert!(parse_duration("2562048h").unwrap_err().contains("longest"));
    assert!(parse_duration("99999999999999999999h").is_err());
    assert!(parse_duration("2562047h").is_ok());
}

#[test]
fn blank_parquet_settings_are_unset_and_levels_fit_their_codec() {
    let c = Config::from_json(
        r#"{"parquet": {"compression": "", "string_encoding": "", "compression_level": 0,
            "row_group_size": 0, "page_size": 0, "page_row_limit": 0, "target_file_size_bytes": 0}}"#,
    )
    .unwrap();
    assert!(c.parquet.page_size.is_none() && c.parquet.page_row_limit.is_none());
    assert!(c.parquet.compression.is_none() && c.parquet.compression_level.is_none());
    assert!(c.parquet.row_group_size.is_none() && c.parquet.string_encoding.is_none());
    let problems = |json: &str| Config::problems(json);
    assert!(problems(r#"{"parquet": {"compression_level": -3}}"#)[0].contains("zstd's 1..=22"));
    assert!(
        problems(r#"{"parquet": {"compression": "gzip", "compression_level": 10}}"#)[0]
            .contains("gzip's 1..=9")
    );
    assert!(
        problems(r#"{"parquet": {"compression": "snappy", "compression_level": 3}}"#)[0]
            .contains("no levels")
    );
    assert!(problems(r#"{"parquet": {"compression": "gzip", "compression_level": 9}}"#).is_empty());
}

#[test]
fn a_schema_may_be_given_as_text() {
    let text = r#"{"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"}]}"#;
    let c =
        Config::from_json(&serde_json::json!({"schema_evolution": {"schema": text}}).to_string())
            .unwrap();
    assert_eq!(
        c.schema_evolution.schema.unwrap()["fields"][0]["name"],
        "id"
    );
    let problems = Config::problems(r#"{"schema_evolution": {"schema": "{nope"}}"#);
    assert!(
        problems[0].starts_with("schema_evolution.schema: not JSON"),
        "{problems:?}"
    );
}

#[test]
fn empty_credentials_are_refused() {
    let problems = Config::problems(
        r#"{"storage": {"aws_s3": {"credentials": {"id": "", "secret": ""}}},
            "catalog": {"url": "http://127.0.0.1:1", "auth": {"oauth2": {"client_id": "", "client_secret": ""}}}}"#,
    );
    assert_eq!(problems.len(), 2, "{problems:?}");
}

#[test]
fn problems_never_quote_secrets() {
    let problems = Config::problems(
        r#"{"catalog": {"url": "ftp://user:hunter2@host", "auth": {"bearer": 987654321},
            "headers": {"Authorization": 987654321}}}"#,
    );
    assert_eq!(problems, ["catalog.auth.bearer: must be a string"]);
    let problems = Config::problems(
        r#"{"catalog": {"url": "ftp://user:hunter2@host"},
            "storage": {"aws_s3": {"credentials": {"id": "k", "secret": 987654321}}}}"#,
    );
    assert_eq!(
        problems,
        ["storage.aws_s3.credentials.secret: must be a string"]
    );
    for url in [
        "ftp://user:hunter2@host",
        "user:hunter2@catalog.example:8181",
        "https//user:hunter2@host",
    ] {
        let problems = Config::problems(&serde_json::json!({"catalog": {"url": url}}).to_string());
        assert!(!problems[0].contains("hunter2"), "{problems:?}");
    }
}

#[test]
fn a_static_schema_is_checked_with_its_partition_spec() {
    let schema = r#"{"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"}]}"#;
    let config = |spec: &str| {
        format!(r#"{{"schema_evolution": {{"schema": {schema}, "partition_spec": "{spec}"}}}}"#)
    };
    assert!(Config::problems(&config("(bucket(4, id))")).is_empty());
    let problems = Config::problems(&config("(day(ts))"));
    assert_eq!(
        problems,
        ["schema_evolution.partition_spec: column \"ts\" is not in the table schema"]
    );
    let problems = Config::problems(r#"{"schema_evolution": {"schema": {"type": "list"}}}"#);
    assert!(
        problems[0].starts_with("schema_evolution.schema is not an Iceberg schema"),
        "{problems:?}"
    );
}

#[test]
fn empty_text_is_unset_so_env_defaults_work() {
    let c =
        Config::from_json(r#"{"catalog": {"url": "", "warehouse": ""}, "namespace": ""}"#).unwrap();
    assert_eq!(c.catalog.url, None);
    assert_eq!(c.namespace, None);
    assert_eq!(c.warehouse_or_default(), Config::DEFAULT_WAREHOUSE);
}

#[test]
fn urls_holding_secrets_where_floe_cannot_keep_them_out_of_logs_are_refused() {
    let problems =
        Config::problems(r#"{"catalog": {"url": "http://127.0.0.1:9/api?token=QUERYTOKEN55"}}"#);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("query string") && !problems[0].contains("QUERYTOKEN55"));
    let problems = Config::problems(
        r#"{"storage": {"aws_s3": {"bucket": "b", "endpoint": "http://u:PASSWORD99@127.0.0.1:9"}},
            "catalog": {"url": "http://127.0.0.1:9", "warehouse": "s3://b/wh"}}"#,
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("storage.aws_s3.endpoint") && !problems[0].contains("PASSWORD99"));
    assert!(
        Config::problems(r#"{"storage": {"aws_s3": {"bucket": "b", "endpoint": "http://127.0.0.1:9"}}, "catalog": {"url": "http://127.0.0.1:9", "warehouse": "s3://b/wh"}}"#)
            .is_empty()
    );
}

#[test]
fn headers_the_client_cannot_send_are_config_problems() {
    let problems = Config::problems(
        r#"{"catalog": {"url": "http://127.0.0.1:9",
            "headers": {"Bad Header": "v", "X-Ok": "a\nSECRET"}}}"#,
    );
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems.iter().all(|p| !p.contains("SECRET")),
        "{problems:?}"
    );
}

/// Redpanda Connect's `aws_sigv4` fields: its page's values parse, and where it would
/// silently take one of two sources of credentials floe says so.
#[test]
fn sigv4_takes_redpanda_connects_fields() {
    let with = |sigv4: &str| {
        Config::problems(&format!(
            r#"{{"catalog": {{"url": "http://127.0.0.1:1", "auth": {{"aws_sigv4": {sigv4}}}}}}}"#
        ))
    };
    let rpcn = r#"{"region": "us-east-1", "endpoint": "https://sts.us-east-1.amazonaws.com",
        "tcp": {"connect_timeout": "0s", "keep_alive": {"idle": "15s", "interval": "15s", "count": 9}, "tcp_user_timeout": "0s"},
        "credentials": {"profile": "", "id": "AKID", "secret": "SECRET9", "token": "", "from_ec2_role": false,
                        "role": "arn:aws:iam::1:role/r", "role_external_id": "x"}, "service": "glue"}"#;
    assert_eq!(with(rpcn), Vec::<String>::new());
    let config = Config::from_json(&format!(
        r#"{{"catalog": {{"url": "http://127.0.0.1:1", "auth": {{"aws_sigv4": {rpcn}}}}}}}"#
    ))
    .unwrap();
    let sigv4 = config.catalog.auth.aws_sigv4.unwrap();
    let c = sigv4.credentials.as_ref().unwrap();
    assert_eq!((c.profile.as_deref(), c.token.as_deref()), (None, None));
    assert_eq!(c.role_external_id.as_deref(), Some("x"));
    assert!(!format!("{sigv4:?}").contains("SECRET9"));
    let keep_alive = sigv4.tcp.unwrap().keep_alive.unwrap();
    assert_eq!(
        keep_alive
            .effective()
            .map(|(idle, _, count)| (idle.as_secs(), count)),
        Some((15, 9))
    );
    for (sigv4, problem) in [
        (
            r#"{"credentials": {"profile": "p", "id": "a", "secret": "b"}}"#,
            "set profile or id and secret, not both",
        ),
        (
            r#"{"credentials": {"from_ec2_role": true, "role": "r"}}"#,
            "the instance's role replaces every other source",
        ),
        (
            r#"{"credentials": {"role_external_id": "x", "profile": "p"}}"#,
            "only a role assumed (role) sends it",
        ),
        (
            r#"{"credentials": {"id": "", "secret": ""}}"#,
            "id and secret must both be set, or profile, role or from_ec2_role",
        ),
        (
            r#"{"endpoint": "sts.amazonaws.com"}"#,
            "is not an http:// or https:// URL",
        ),
        (
            r#"{"tcp": {"keep_alive": {"idle": "5s"}, "tcp_user_timeout": "10s"}}"#,
            "keep_alive.idle (5s) must be greater than tcp_user_timeout (10s)",
        ),
    ] {
        let problems = with(sigv4);
        assert!(
            problems.len() == 1 && problems[0].contains(problem),
            "{sigv4}: {problems:?}"
        );
    }
    // A negative idle turns probes off, and then no user timeout is compared with it.
    assert_eq!(
        with(r#"{"tcp": {"keep_alive": {"idle": "-1s"}, "tcp_user_timeout": "10s"}}"#),
        Vec::<String>::new()
    );
    assert_eq!(
        with(r#"{"tcp": {"connect_timeout": "soon"}}"#),
        [
            r#"catalog.auth.aws_sigv4.tcp.connect_timeout: "soon" is not a duration like 500ms, 30s, 24h or 1h30m"#
        ]
    );
}

#[test]
fn settings_of_the_other_catalog_kind_are_refused() {
    let problems = Config::problems(
        r#"{"catalog": {"url": "", "auth": {"bearer": "t0ken"}, "headers": {"X-A": "b"},
            "tls_skip_verify": true}}"#,
    );
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(
        problems[0].starts_with("catalog.auth.bearer: only a REST catalog uses it"),
        "{problems:?}"
    );
    assert!(
        problems.iter().all(|p| !p.contains("t0ken")),
        "{problems:?}"
    );
    let problems =
        Config::problems(r#"{"catalog": {"url": "http://127.0.0.1:1", "name": "lake"}}"#);
    assert_eq!(
        problems,
        ["catalog.name: only the embedded catalog uses it (a REST catalog is named by its url)"]
    );
    assert!(Config::problems(r#"{"catalog": {"name": "lake"}}"#).is_empty());
}

#[test]
fn empty_text_with_a_default_takes_the_default() {
    let auth = |section: &str| {
        let text = format!(r#"{{"catalog": {{"url": "http://127.0.0.1:1", "auth": {section}}}}}"#);
        Config::from_json(&text).unwrap().catalog.auth
    };
    let oauth2 = auth(r#"{"oauth2": {"server_uri": "", "client_id": "i", "client_secret": "s"}}"#);
    assert_eq!(oauth2.oauth2.unwrap().server_uri, default_oauth_uri());
    let sigv4 = auth(r#"{"aws_sigv4": {"service": ""}}"#);
    assert_eq!(sigv4.aws_sigv4.unwrap().service, default_sigv4_service());
}

#[test]
fn a_scalar_of_the_wrong_type_in_a_section_with_secrets_says_what_it_must_be() {
    let problems = Config::problems(r#"{"storage": {"aws_s3": {"force_path_style_urls": "yes"}}}"#);
    assert_eq!(
        problems,
        ["storage.aws_s3.force_path_style_urls: must be a boolean (its value is not shown)"]
    );
    let problems = Config::problems(
        r#"{"catalog": {"url": "http://127.0.0.1:1", "auth": {"aws_sigv4": {"region": 5}}}}"#,
    );
    assert_eq!(
        problems,
        ["catalog.auth.aws_sigv4.region: must be a string (its value is not shown)"]
    );
    let problems =
        Config::problems(r#"{"storage": {"aws_s3": {"credentials": "AKIA, expected hunter2"}}}"#);
    assert_eq!(
        problems,
        ["storage.aws_s3.credentials: must be a map (its value is not shown)"]
    );
    let problems = Config::problems(
        r#"{"catalog": {"url": "http://127.0.0.1:1", "auth": {"oauth2": "id:hunter2"}}}"#,
    );
    assert_eq!(
        problems,
        ["catalog.auth.oauth2: must be a map (its value is not shown)"]
    );
}

#[test]
fn secrets_stay_out_of_debug_output() {
    for auth in [
        r#"{"bearer": "tok-SECRET"}"#,
        r#"{"oauth2": {"client_id": "id", "client_secret": "SECRET2"}}"#,
        r#"{"aws_sigv4": {"region": "r", "credentials": {"id": "AKIA", "secret": "SECRET4", "token": "SECRET5"}}}"#,
    ] {
        let c = Config::from_json(&format!(
            r#"{{"catalog": {{"url": "http://127.0.0.1:1", "auth": {auth}}},
                "storage": {{"aws_s3": {{"credentials": {{"id": "AKIA", "secret": "SECRET3"}}}}}}}}"#
        ))
        .unwrap();
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("SECRET"), "{dbg}");
    }
    for wrong in [
        r#"{"catalog": {"auth": {"aws_sigv4": {"credentials": "AKIA/SECRET6"}}}}"#,
        r#"{"catalog": {"auth": {"aws_sigv4": "SECRET6"}}}"#,
        r#"{"storage": {"aws_s3": {"credentials": "AKIA/SECRET6"}}}"#,
    ] {
        let problems = Config::problems(wrong);
        assert!(
            problems.len() == 1 && !problems[0].contains("SECRET"),
            "{problems:?}"
        );
    }
    let two = Config::problems(
        r#"{"catalog": {"url": "http://127.0.0.1:1", "auth": {"bearer": "t", "aws_sigv4": {}}}}"#,
    );
    assert_eq!(
        two,
        ["catalog.auth: set one of bearer, oauth2 and aws_sigv4"]
    );
}
