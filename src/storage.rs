//! Storage: an Iceberg `FileIO` for the local filesystem and S3-compatible stores.
//!
//! The scheme of each path picks the backend (`file://` or `s3://`), so one `FileIO`
//! serves a catalog whose tables live in either.

use std::collections::HashMap;
use std::sync::Arc;

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
