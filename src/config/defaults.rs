//! The values floe takes for fields a config leaves out, and the defaults document the
//! host shows as its fields' defaults.

use super::*;

pub(super) fn yes() -> bool {
    true
}

pub(super) fn default_keep_alive() -> Option<std::time::Duration> {
    Some(std::time::Duration::ZERO)
}

pub(super) fn default_sigv4_service() -> String {
    "execute-api".into()
}

pub(super) fn default_oauth_uri() -> String {
    "/v1/oauth/tokens".into()
}

pub(super) fn default_format_version() -> u8 {
    2
}

pub(super) fn default_max_retries() -> u32 {
    3
}

pub(super) fn default_max_snapshots() -> usize {
    500
}

pub(super) fn default_retry_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(120)
}

pub(super) fn default_snapshot_age() -> std::time::Duration {
    std::time::Duration::from_secs(24 * 3600)
}

pub(super) fn default_table_idle_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(300)
}

pub(super) fn default_group_rows() -> usize {
    2_000_000
}

pub(super) fn default_group_bytes() -> usize {
    256 << 20
}

impl Default for SchemaEvolution {
    fn default() -> Self {
        SchemaEvolution {
            enabled: false,
            unknown_fields: UnknownFieldPolicy::default(),
            schema_metadata: None,
            require_schema_metadata: false,
            partition_spec: None,
            table_location: None,
            schema: None,
            format_version: default_format_version(),
        }
    }
}

impl Default for CommitConfig {
    fn default() -> Self {
        CommitConfig {
            max_retries: default_max_retries(),
            retry_timeout: default_retry_timeout(),
            cleanup_on_failure: true,
            manifest_merge_enabled: true,
            max_snapshot_age: default_snapshot_age(),
            max_snapshots: default_max_snapshots(),
            linger: std::time::Duration::ZERO,
            max_group_rows: default_group_rows(),
            max_group_bytes: default_group_bytes(),
            table_idle_timeout: default_table_idle_timeout(),
            atomic_tables: false,
            exactly_once: None,
        }
    }
}

impl Config {
    /// The defaults floe applies to fields a config leaves out, as a config document
    /// (durations in Go's text form). The Go output shows them as its fields' defaults,
    /// so the host's docs and floe cannot drift apart. Sections that exist only when
    /// given (`catalog.auth.oauth2`, `catalog.auth.aws_sigv4`, `storage.aws_s3`) carry
    /// their fields' defaults too.
    pub fn defaults() -> serde_json::Value {
        let config = Config::from_json("{}").expect("the empty config is valid");
        let mut tree = serde_json::to_value(&config).expect("a config serialises");
        strip_nulls(&mut tree);
        tree["catalog"]["auth"]["oauth2"] =
            serde_json::json!({ "server_uri": default_oauth_uri() });
        // `tcp` as Benthos' section has it (zero values mean the client's defaults).
        tree["catalog"]["auth"]["aws_sigv4"] = serde_json::json!({
            "service": default_sigv4_service(),
            "tcp": {
                "connect_timeout": "0s",
                "keep_alive": { "idle": "15s", "interval": "15s", "count": 9 },
                "tcp_user_timeout": "0s",
            },
        });
        tree["storage"]["aws_s3"] = serde_json::json!({ "force_path_style_urls": false });
        tree
    }
}
