//! Storage: an Iceberg `FileIO` for the local filesystem and S3-compatible stores.
//!
//! The scheme of each path picks the backend (`file://` or `s3://`), so one `FileIO`
//! serves a catalog whose tables live in either. S3 paths go through operators kept per
//! bucket ([`s3`]); the others through iceberg-storage-opendal (local files read at
//! their own size: [`local`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use iceberg::io::{FileIO, FileIOBuilder};

mod local;
mod s3;

use crate::config::{AzureConfig, GcsConfig, GcsCredentialsType, StorageConfig};

/// FileIO properties for the configured storage. Catalog-supplied properties (e.g.
/// vended credentials from a REST `LoadTableResult`) are layered on top by the caller.
/// Fails (naming the field) for credentials that cannot be read.
pub fn file_io_props(storage: &StorageConfig) -> crate::Result<HashMap<String, String>> {
    let mut props = HashMap::new();
    if let Some(gcs) = &storage.gcp_cloud_storage {
        props.extend(gcs_props(gcs)?);
    }
    if let Some(azure) = &storage.azure_blob_storage {
        props.extend(azure_props(azure)?);
    }
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
    Ok(props)
}

/// `storage.gcp_cloud_storage` as Iceberg's `gcs.*` FileIO properties. opendal takes a
/// service account key only base64-encoded (and ignores anything else without a word),
/// so floe reads and encodes it here, refusing what is not a JSON key.
fn gcs_props(gcs: &GcsConfig) -> crate::Result<HashMap<String, String>> {
    let mut props = HashMap::new();
    if let Some(endpoint) = &gcs.endpoint {
        props.insert(
            "gcs.service.path".into(),
            endpoint.trim_end_matches('/').into(),
        );
    }
    let key_given = gcs.credentials_file.is_some() || gcs.credentials_json.is_some();
    let kind = gcs.credentials_type.unwrap_or(match key_given {
        true => GcsCredentialsType::ServiceAccount,
        false => GcsCredentialsType::ApplicationDefault,
    });
    let field = "storage.gcp_cloud_storage";
    match kind {
        GcsCredentialsType::ServiceAccount => {
            let key = match (&gcs.credentials_file, &gcs.credentials_json) {
                (Some(path), None) => std::fs::read_to_string(path).map_err(|e| {
                    crate::Error::config(format!(
                        "{field}.credentials_file: cannot read {path}: {e}"
                    ))
                })?,
                (None, Some(json)) => json.clone(),
                (None, None) => {
                    return Err(crate::Error::config(format!(
                        "{field}.credentials_type: service_account needs credentials_file or \
                         credentials_json"
                    )));
                }
                (Some(_), Some(_)) => {
                    return Err(crate::Error::config(format!(
                        "{field}: set one of credentials_file and credentials_json"
                    )));
                }
            };
            props.insert("gcs.credentials-json".into(), encoded_gcs_key(&key)?);
        }
        _ if key_given => {
            return Err(crate::Error::config(format!(
                "{field}: credentials_file / credentials_json are only used with \
                 credentials_type: service_account"
            )));
        }
        GcsCredentialsType::None => {
            props.insert("gcs.no-auth".into(), "true".into());
        }
        GcsCredentialsType::ApplicationDefault => {}
    }
    Ok(props)
}

/// A service account key, as JSON or base64 of JSON, base64-encoded.
fn encoded_gcs_key(key: &str) -> crate::Result<String> {
    use base64::Engine;
    let engine = base64::engine::general_purpose::STANDARD;
    let is_key = |bytes: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(bytes)
            .is_ok_and(|v| v.get("type").is_some_and(|t| t.is_string()))
    };
    let trimmed = key.trim();
    if is_key(trimmed.as_bytes()) {
        return Ok(engine.encode(trimmed));
    }
    match engine.decode(trimmed) {
        Ok(bytes) if is_key(&bytes) => Ok(trimmed.to_string()),
        // The key's text is a secret: not quoted.
        _ => Err(crate::Error::config(
            "storage.gcp_cloud_storage: the service account key is not a JSON key file \
             (an object with a \"type\"), nor base64 of one",
        )),
    }
}

/// `storage.azure_blob_storage` as Iceberg's `adls.*` FileIO properties. A connection
/// string is split into its account, key and SAS token (iceberg's Azure storage takes
/// none whole); endpoints other than the account's DFS endpoint are refused, since the
/// endpoint is taken from each `abfss://` location.
fn azure_props(azure: &AzureConfig) -> crate::Result<HashMap<String, String>> {
    let field = "storage.azure_blob_storage";
    let mut account = azure.storage_account.clone();
    let mut key = azure.storage_access_key.clone();
    let mut sas = azure.storage_sas_token.clone();
    if let Some(text) = &azure.storage_connection_string {
        for part in text.split(';').filter(|p| !p.trim().is_empty()) {
            let (name, value) = part.split_once('=').ok_or_else(|| {
                crate::Error::config(format!(
                    "{field}.storage_connection_string: expected Name=value parts separated by ;"
                ))
            })?;
            let slot = match name.trim() {
                "AccountName" => &mut account,
                "AccountKey" => &mut key,
                "SharedAccessSignature" => &mut sas,
                // The endpoint comes from each abfss:// location (see docs/catalogs-and-storage.md).
                "DefaultEndpointsProtocol" | "EndpointSuffix" => continue,
                known @ ("BlobEndpoint" | "DfsEndpoint" | "QueueEndpoint" | "TableEndpoint"
                | "FileEndpoint") => {
                    return Err(crate::Error::config(format!(
                        "{field}.storage_connection_string: {known} is not supported (floe \
                         takes the endpoint from each abfss:// location)"
                    )));
                }
                // Not quoted: a key pasted in the wrong place would be printed.
                _ => {
                    return Err(crate::Error::config(format!(
                        "{field}.storage_connection_string: a part is not one of AccountName, \
                         AccountKey, SharedAccessSignature, DefaultEndpointsProtocol, EndpointSuffix"
                    )));
                }
            };
            match slot {
                Some(given) if given != value => {
                    return Err(crate::Error::config(format!(
                        "{field}: storage_connection_string and the separate fields disagree \
                         on {}",
                        name.trim()
                    )));
                }
                _ => *slot = Some(value.to_string()),
            }
        }
    }
    if let (Some(endpoint), Some(account)) = (&azure.endpoint, &account) {
        let own = format!("https://{account}.dfs.");
        if !endpoint.starts_with(&own) {
            return Err(crate::Error::config(format!(
                "{field}.endpoint: only the account's DFS endpoint ({own}<suffix>) is supported; \
                 floe's Azure storage (opendal's ADLS Gen2 service) takes the endpoint from \
                 each abfss:// location, so emulators such as Azurite cannot be used"
            )));
        }
    } else if azure.endpoint.is_some() {
        return Err(crate::Error::config(format!(
            "{field}.endpoint: needs storage_account"
        )));
    }
    if key.is_some() && sas.is_some() {
        return Err(crate::Error::config(format!(
            "{field}: set one of an access key and a SAS token (opendal would use the SAS \
             token and ignore the key)"
        )));
    }
    let mut props = HashMap::new();
    if let Some(account) = account {
        props.insert("adls.account-name".into(), account);
    }
    if let Some(key) = key {
        props.insert("adls.account-key".into(), key);
    }
    if let Some(sas) = sas {
        props.insert(
            "adls.sas-token".into(),
            sas.trim_start_matches('?').to_string(),
        );
    }
    Ok(props)
}

pub fn build_file_io(props: HashMap<String, String>) -> FileIO {
    FileIOBuilder::new(Arc::new(s3::FloeStorageFactory))
        .with_props(props)
        .build()
}

/// The `FileIO` of one table: the configured storage properties with those the catalog
/// supplied for the table on top, so vended credentials win over static keys and static
/// keys serve when the catalog vends none.
pub fn table_file_io(
    configured: &HashMap<String, String>,
    from_catalog: &HashMap<String, String>,
    location: &str,
) -> FileIO {
    let mut props = configured.clone();
    // Vended credentials replace the configured ones whole: a configured session token
    // beside vended keys would spoil every request.
    if has_vended_credentials(from_catalog) {
        props.retain(|k, _| !is_credential_key(k));
    }
    props.extend(from_catalog.iter().map(|(k, v)| (k.clone(), v.clone())));
    if let Some(sas) = vended_sas_token(from_catalog, location) {
        props.insert("adls.sas-token".into(), sas);
    }
    build_file_io(props)
}

/// The SAS token a catalog vended for the account of an `abfss://` location: Iceberg
/// names it `adls.sas-token.<account host>` (or `.<account>`), while iceberg-rust's
/// Azure storage reads only `adls.sas-token`.
fn vended_sas_token(from_catalog: &HashMap<String, String>, location: &str) -> Option<String> {
    let host = ["abfss://", "abfs://"]
        .iter()
        .find_map(|s| location.strip_prefix(s))
        .and_then(|rest| rest.split('/').next())
        .and_then(|authority| authority.split_once('@'))
        .map(|(_, host)| host)?;
    let account = host.split('.').next()?;
    from_catalog.iter().find_map(|(k, v)| {
        let named = k.strip_prefix("adls.sas-token.")?;
        (named == host || named == account).then(|| v.clone())
    })
}

/// Properties that carry storage credentials, in the names of Iceberg's FileIO
/// properties (S3, GCS, ADLS).
const CREDENTIAL_KEYS: &[&str] = &[
    "s3.access-key-id",
    "s3.session-token",
    "gcs.oauth2.token",
    "adls.sas-token",
    "adls.account-key",
    "adls.auth.shared-key.account.key",
];

/// Whether a property is a credential or belongs to one (secrets, expiry times).
fn is_credential_key(key: &str) -> bool {
    CREDENTIAL_KEYS.iter().any(|c| key.starts_with(c))
        || key == "s3.secret-access-key"
        || key == "gcs.oauth2.token-expires-at"
        // Configured ways to authenticate that vended credentials replace.
        || key == "gcs.no-auth"
        || key == "gcs.credentials-json"
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
        .any(|k| CREDENTIAL_KEYS.iter().any(|c| k.starts_with(c)) && !k.contains("expires-at"))
}

/// Whether storage refused a request for its credentials (HTTP 403: expired, revoked or
/// unknown keys), the failure that fresh vended credentials may cure.
pub fn is_credential_refusal(e: &crate::Error) -> bool {
    is_credential_refusal_text(e.message())
}

/// [`is_credential_refusal`] of an error's text.
fn is_credential_refusal_text(m: &str) -> bool {
    // opendal's kind for 403, the response status it quotes, and S3's error codes (an
    // expired token may come as 400, whose code is all that tells).
    [
        "PermissionDenied",
        "status: 403",
        // GCS answers an expired or revoked token with 401.
        "status: 401",
        "Invalid Credentials",
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

    /// A storage error as floe tells it (one line, crate::error::describe_storage) is
    /// still recognised as refused credentials.
    #[test]
    fn a_refusal_told_in_one_line_is_a_credential_refusal() {
        let storage = opendal::Error::new(
            opendal::ErrorKind::PermissionDenied,
            r#"S3Error { code: "AccessDenied", message: "Access Denied", resource: "", request_id: "" }"#,
        )
        .with_operation("write")
        .with_context("uri", "http://127.0.0.1:9/b/k")
        .with_context("response", "Parts { status: 403, headers: {} }");
        let e = crate::Error::from(
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                "Failure in doing io operation",
            )
            .with_source(storage),
        );
        assert!(!e.message().contains("Parts {"), "{e}");
        assert!(is_credential_refusal(&e), "{e}");
    }

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
    check_azure_account(storage, location)?;
    let wanted = required_places(storage);
    if wanted.is_empty() || wanted.iter().any(|place| place.holds(location)) {
        return Ok(());
    }
    let place = &wanted[0];
    Err(crate::Error::config(format!(
        "{} is {:?}, but the table's location is {location}; point the catalog (or \
         catalog.warehouse: {}) there, or remove the setting",
        place.field, place.name, place.example
    )))
}

/// An `abfss://` location must name the configured storage account: iceberg-rust's Azure
/// storage would otherwise fail every file it touches.
fn check_azure_account(
    storage: &crate::config::StorageConfig,
    location: &str,
) -> crate::Result<()> {
    let Some(account) = storage
        .azure_blob_storage
        .as_ref()
        .and_then(|a| a.storage_account.as_deref())
    else {
        return Ok(());
    };
    let named = ["abfss://", "abfs://"]
        .iter()
        .find_map(|s| location.strip_prefix(s))
        .and_then(|rest| rest.split_once('@'))
        .and_then(|(_, host)| host.split('.').next());
    match named {
        Some(n) if n != account => Err(crate::Error::config(format!(
            "storage.azure_blob_storage.storage_account is {account:?}, but the table's location \
             {location} is in account {n:?}"
        ))),
        _ => Ok(()),
    }
}

/// A bucket or container the config says tables must be in.
struct RequiredPlace<'a> {
    field: &'static str,
    name: &'a str,
    schemes: &'static [&'static str],
    /// The bucket or container of a location, after its scheme.
    place_of: fn(&str) -> Option<&str>,
    example: String,
}

impl RequiredPlace<'_> {
    fn holds(&self, location: &str) -> bool {
        self.schemes.iter().any(|scheme| {
            location
                .strip_prefix(scheme)
                .is_some_and(|rest| (self.place_of)(rest) == Some(self.name))
        })
    }
}

fn required_places(storage: &crate::config::StorageConfig) -> Vec<RequiredPlace<'_>> {
    fn bucket(rest: &str) -> Option<&str> {
        rest.split('/').next()
    }
    fn container(rest: &str) -> Option<&str> {
        rest.split_once('@').map(|(c, _)| c)
    }
    let mut wanted = Vec::new();
    if let Some(b) = storage.aws_s3.as_ref().and_then(|s| s.bucket.as_deref()) {
        wanted.push(RequiredPlace {
            field: "storage.aws_s3.bucket",
            name: b,
            schemes: &["s3://", "s3a://", "s3n://"],
            place_of: bucket,
            example: format!("s3://{b}/…"),
        });
    }
    if let Some(b) = storage
        .gcp_cloud_storage
        .as_ref()
        .and_then(|g| g.bucket.as_deref())
    {
        wanted.push(RequiredPlace {
            field: "storage.gcp_cloud_storage.bucket",
            name: b,
            schemes: &["gs://"],
            place_of: bucket,
            example: format!("gs://{b}/…"),
        });
    }
    if let Some(c) = storage
        .azure_blob_storage
        .as_ref()
        .and_then(|a| a.container.as_deref())
    {
        wanted.push(RequiredPlace {
            field: "storage.azure_blob_storage.container",
            name: c,
            schemes: &["abfss://", "abfs://"],
            place_of: container,
            example: format!("abfss://{c}@<account>.dfs.core.windows.net/…"),
        });
    }
    wanted
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
    }
}

#[cfg(test)]
mod cloud_tests {
    use super::*;
    use crate::config::Config;

    fn storage(json: &str) -> crate::Result<HashMap<String, String>> {
        let config = Config::from_json(&format!(
            r#"{{"catalog": {{"url": "http://127.0.0.1:1"}}, "storage": {json}}}"#
        ))?;
        file_io_props(&config.storage)
    }

    #[test]
    fn gcs_settings_become_iceberg_properties() {
        let none = storage(
            r#"{"gcp_cloud_storage": {"endpoint": "http://127.0.0.1:4443/", "credentials_type": "none"}}"#,
        )
        .unwrap();
        assert_eq!(none["gcs.service.path"], "http://127.0.0.1:4443");
        assert_eq!(none["gcs.no-auth"], "true");
        // A key is handed to opendal base64-encoded, whether given as JSON or base64.
        use base64::Engine;
        let key = r#"{"type": "service_account", "client_email": "a@b"}"#;
        let encoded = base64::engine::general_purpose::STANDARD.encode(key);
        for given in [key.to_string(), encoded.clone()] {
            let text = serde_json::json!({"gcp_cloud_storage": {"credentials_json": given}});
            let props = storage(&text.to_string()).unwrap();
            assert_eq!(props["gcs.credentials-json"], encoded);
        }
        let defaults = storage(r#"{"gcp_cloud_storage": {"bucket": "b"}}"#).unwrap();
        assert!(defaults.is_empty(), "{defaults:?}");
        let e = storage(r#"{"gcp_cloud_storage": {"credentials_json": "SECRET-text"}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a JSON key") && !e.contains("SECRET"), "{e}");
        let e = storage(r#"{"gcp_cloud_storage": {"credentials_type": "service_account"}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("needs credentials_file or credentials_json"),
            "{e}"
        );
    }

    #[test]
    fn azure_settings_and_connection_strings_become_iceberg_properties() {
        let props = storage(
            r#"{"azure_blob_storage": {"storage_account": "acct", "storage_access_key": "KEY1"}}"#,
        )
        .unwrap();
        assert_eq!(props["adls.account-name"], "acct");
        assert_eq!(props["adls.account-key"], "KEY1");
        let sas =
            storage(r#"{"azure_blob_storage": {"storage_sas_token": "?sv=1&sig=x"}}"#).unwrap();
        assert_eq!(sas["adls.sas-token"], "sv=1&sig=x");
        let both = storage(
            r#"{"azure_blob_storage": {"storage_access_key": "KEY1", "storage_sas_token": "sv=1"}}"#,
        );
        assert!(both.unwrap_err().to_string().contains("set one of"));
        let pasted = storage(
            r#"{"azure_blob_storage": {"storage_connection_string": "AccountName=a;c2VjcmV0LWtleQ=="}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(!pasted.contains("c2VjcmV0"), "{pasted}");
        let disagree = storage(
            r#"{"azure_blob_storage": {"storage_account": "a", "storage_connection_string": "AccountName=b"}}"#,
        );
        assert!(
            disagree
                .unwrap_err()
                .to_string()
                .contains("disagree on AccountName")
        );
        let from_string = storage(
            r#"{"azure_blob_storage": {"storage_connection_string": "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=S2V5PT0=;EndpointSuffix=core.windows.net"}}"#,
        )
        .unwrap();
        assert_eq!(from_string["adls.account-name"], "acct");
        assert_eq!(from_string["adls.account-key"], "S2V5PT0=");
        let e = storage(
            r#"{"azure_blob_storage": {"storage_connection_string": "AccountName=devstoreaccount1;AccountKey=k;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1"}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("BlobEndpoint is not supported"), "{e}");
        let e = storage(
            r#"{"azure_blob_storage": {"storage_account": "devstoreaccount1", "endpoint": "http://127.0.0.1:10000/devstoreaccount1"}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("Azurite cannot be used"), "{e}");
        assert!(
            storage(
                r#"{"azure_blob_storage": {"storage_account": "acct", "endpoint": "https://acct.dfs.core.windows.net"}}"#
            )
            .is_ok()
        );
    }

    #[test]
    fn tables_must_be_in_the_configured_bucket_or_container() {
        let config = Config::from_json(
            r#"{"catalog": {"url": "http://127.0.0.1:1"}, "storage": {"gcp_cloud_storage": {"bucket": "g"}, "azure_blob_storage": {"container": "c"}}}"#,
        )
        .unwrap();
        assert!(check_bucket(&config.storage, "gs://g/wh/t").is_ok());
        assert!(check_bucket(&config.storage, "abfss://c@acct.dfs.core.windows.net/t").is_ok());
        let e = check_bucket(&config.storage, "gs://other/t").unwrap_err();
        assert!(e.to_string().contains("gcp_cloud_storage.bucket"), "{e}");
        assert!(check_bucket(&config.storage, "abfss://d@acct.dfs.core.windows.net/t").is_err());
        let with_account = Config::from_json(
            r#"{"catalog": {"url": "http://127.0.0.1:1"}, "storage": {"azure_blob_storage": {"storage_account": "acct"}}}"#,
        )
        .unwrap();
        assert!(
            check_bucket(
                &with_account.storage,
                "abfss://c@acct.dfs.core.windows.net/t"
            )
            .is_ok()
        );
        let e = check_bucket(
            &with_account.storage,
            "abfss://c@other.dfs.core.windows.net/t",
        );
        assert!(e.unwrap_err().to_string().contains("in account \"other\""));
    }

    #[test]
    fn a_vended_sas_token_is_used_for_its_account() {
        let vended: HashMap<String, String> = [
            ("adls.sas-token.acct.dfs.core.windows.net", "sv=mine"),
            ("adls.sas-token.other.dfs.core.windows.net", "sv=theirs"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert!(has_vended_credentials(&vended));
        let loc = "abfss://c@acct.dfs.core.windows.net/wh/t";
        assert_eq!(vended_sas_token(&vended, loc).as_deref(), Some("sv=mine"));
        assert_eq!(vended_sas_token(&vended, "s3://b/t"), None);
    }
}
