//! Storage: an Iceberg `FileIO` for the local filesystem and S3-compatible stores.
//!
//! The scheme of each path picks the backend (`file://` or `s3://`), so one `FileIO`
//! serves a catalog whose tables live in either.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use iceberg::io::{FileIO, FileIOBuilder};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;

use crate::config::StorageConfig;

/// FileIO properties for the configured storage. Catalog-supplied properties (e.g.
/// vended credentials from a REST `LoadTableResult`) are layered on top by the caller.
pub fn file_io_props(storage: &StorageConfig) -> HashMap<String, String> {
    let mut props = HashMap::new();
    if let Some(s3) = &storage.aws_s3 {
        if let Some(endpoint) = &s3.endpoint {
            props.insert("s3.endpoint".into(), endpoint.clone());
        }
        if let Some(region) = &s3.region {
            props.insert("s3.region".into(), region.clone());
        }
        if s3.force_path_style_urls {
            props.insert("s3.path-style-access".into(), "true".into());
        }
        if let Some(creds) = &s3.credentials {
            props.insert("s3.access-key-id".into(), creds.id.clone());
            props.insert("s3.secret-access-key".into(), creds.secret.clone());
            if let Some(token) = &creds.token {
                props.insert("s3.session-token".into(), token.clone());
            }
        }
    }
    props
}

pub fn build_file_io(props: HashMap<String, String>) -> FileIO {
    FileIOBuilder::new(Arc::new(OpenDalResolvingStorageFactory::new()))
        .with_props(props)
        .build()
}

/// The `FileIO` of one table: the configured storage properties with those the catalog
/// supplied for the table on top, so vended credentials win over static keys and static
/// keys serve when the catalog vends none.
pub fn table_file_io(
    configured: &HashMap<String, String>,
    from_catalog: &HashMap<String, String>,
) -> FileIO {
    let mut props = configured.clone();
    // Vended credentials replace the configured ones whole: a configured session token
    // beside vended keys would spoil every request.
    if has_vended_credentials(from_catalog) {
        props.retain(|k, _| !is_credential_key(k));
    }
    props.extend(from_catalog.iter().map(|(k, v)| (k.clone(), v.clone())));
    build_file_io(props)
}

/// Properties that carry storage credentials, in the names of Iceberg's FileIO
/// properties (S3, GCS, ADLS).
const CREDENTIAL_KEYS: &[&str] = &[
    "s3.access-key-id",
    "s3.session-token",
    "gcs.oauth2.token",
    "adls.sas-token.",
    "adls.auth.shared-key.account.key",
];

/// Whether a property is a credential or belongs to one (secrets, expiry times).
fn is_credential_key(key: &str) -> bool {
    CREDENTIAL_KEYS.iter().any(|c| key.starts_with(c))
        || key == "s3.secret-access-key"
        || key.starts_with("adls.sas-token-expires-at-ms.")
        || key == "gcs.oauth2.token-expires-at"
}

/// The values of a table's credential properties, for redaction.
pub fn credential_values(props: &HashMap<String, String>) -> impl Iterator<Item = &str> {
    props
        .iter()
        .filter(|(k, _)| is_credential_key(k) && !k.contains("expires-at"))
        .map(|(_, v)| v.as_str())
}

/// When vended credentials stop working, as the catalog announced it (milliseconds since
/// the epoch in `s3.session-token-expires-at-ms`, `gcs.oauth2.token-expires-at` or
/// `adls.sas-token-expires-at-ms.<account>`); the earliest when several are given.
pub fn credentials_expiry(props: &HashMap<String, String>) -> Option<SystemTime> {
    props
        .iter()
        .filter(|(k, _)| {
            *k == "s3.session-token-expires-at-ms"
                || *k == "gcs.oauth2.token-expires-at"
                || k.starts_with("adls.sas-token-expires-at-ms.")
        })
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
        .min()
}

/// Whether the catalog supplied credentials for the table (which may then need
/// refreshing), rather than only settings.
pub fn has_vended_credentials(props: &HashMap<String, String>) -> bool {
    props
        .keys()
        .any(|k| CREDENTIAL_KEYS.iter().any(|c| k.starts_with(c)))
}

/// Whether storage refused a request for its credentials (HTTP 403: expired, revoked or
/// unknown keys), the failure that fresh vended credentials may cure.
pub fn is_credential_refusal(e: &crate::Error) -> bool {
    let m = e.message();
    // opendal's kind for 403, the response status it quotes, and S3's error codes (an
    // expired token may come as 400, whose code is all that tells).
    [
        "PermissionDenied",
        "status: 403",
        "InvalidAccessKeyId",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "SignatureDoesNotMatch",
        "AccessDenied",
    ]
    .iter()
    .any(|sign| m.contains(sign))
}

/// Turns a local folder into an absolute `file://` URL; other URLs pass through.
pub fn location_url(location: &str) -> crate::Result<String> {
    if location.contains("://") {
        return Ok(location.trim_end_matches('/').to_string());
    }
    let path = std::path::Path::new(location);
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| crate::Error::config(format!("cannot resolve {location:?}: {e}")))?
            .join(path)
    };
    let text = absolute.to_string_lossy();
    let text = text.trim_end_matches('/').replace("/./", "/");
    Ok(format!("file://{}", text.trim_end_matches("/.")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vended_credentials_and_their_expiry_are_recognised() {
        let props: HashMap<String, String> = [
            ("s3.access-key-id", "AKID"),
            ("s3.session-token-expires-at-ms", "2000"),
            ("adls.sas-token-expires-at-ms.acct", "1500"),
            ("s3.endpoint", "http://x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert!(has_vended_credentials(&props));
        assert_eq!(
            credentials_expiry(&props),
            Some(UNIX_EPOCH + Duration::from_millis(1500))
        );
        let settings_only: HashMap<String, String> =
            [("s3.endpoint".to_string(), "http://x".to_string())].into();
        assert!(!has_vended_credentials(&settings_only));
        assert_eq!(credentials_expiry(&settings_only), None);
    }

    #[test]
    fn local_paths_become_file_urls() {
        assert_eq!(location_url("/tmp/w/").unwrap(), "file:///tmp/w");
        assert_eq!(location_url("s3://b/p/").unwrap(), "s3://b/p");
        assert!(location_url("./w").unwrap().starts_with("file:///"));
        assert!(location_url("./w").unwrap().ends_with("/w"));
    }
}

/// With `storage.aws_s3.bucket` set, a table's files must be in that bucket: the field
/// says where the data goes, so a table (or warehouse) elsewhere is refused instead of
/// the setting being ignored.
pub fn check_bucket(storage: &crate::config::StorageConfig, location: &str) -> crate::Result<()> {
    let Some(bucket) = storage.aws_s3.as_ref().and_then(|s3| s3.bucket.as_deref()) else {
        return Ok(());
    };
    let in_bucket = ["s3://", "s3a://", "s3n://"].iter().any(|scheme| {
        location
            .strip_prefix(scheme)
            .is_some_and(|rest| rest.split('/').next() == Some(bucket))
    });
    if in_bucket {
        return Ok(());
    }
    Err(crate::Error::config(format!(
        "storage.aws_s3.bucket is {bucket:?}, but the table's location is {location}; point the \
         catalog (or catalog.warehouse: s3://{bucket}/…) at that bucket, or remove the setting"
    )))
}

#[cfg(test)]
mod bucket_tests {
    use super::check_bucket;
    use crate::config::Config;

    #[test]
    fn a_configured_bucket_must_hold_the_table() {
        let with = Config::from_json(
            r#"{"catalog": {"url": "http://127.0.0.1:1"}, "storage": {"aws_s3": {"bucket": "lake"}}}"#,
        )
        .unwrap();
        assert!(check_bucket(&with.storage, "s3://lake/wh/ns/t").is_ok());
        assert!(check_bucket(&with.storage, "s3a://lake/t").is_ok());
        let e = check_bucket(&with.storage, "s3://other/wh/t").unwrap_err();
        assert!(e.to_string().contains("\"lake\""), "{e}");
        assert!(check_bucket(&with.storage, "file:///tmp/wh/t").is_err());
        assert!(check_bucket(&with.storage, "s3://lakehouse/t").is_err());
        let without = Config::from_json("{}").unwrap();
        assert!(check_bucket(&without.storage, "file:///tmp/wh/t").is_ok());
        // An embedded warehouse outside the bucket is a config problem, found before any
        // catalog is opened.
        let problems = Config::problems(
            r#"{"catalog": {"warehouse": "/tmp/wh"}, "storage": {"aws_s3": {"bucket": "lake"}}}"#,
        );
        assert!(
            problems[0].starts_with("catalog.warehouse: storage.aws_s3.bucket is \"lake\""),
            "{problems:?}"
        );
    }
}
