//! One error type for the whole crate, with a kind that callers (and the C ABI) branch on.
//!
//! Messages never contain secrets: catalog tokens, S3 keys and OAuth2 secrets are kept
//! out of every `format!` that builds an error.

use std::fmt;

/// What kind of failure, grouped by what the caller should do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The configuration is invalid; fix it and restart.
    Config,
    /// A message could not be converted; replaying it will fail again.
    Data,
    /// The table, namespace or object does not exist.
    NotFound,
    /// Another writer changed the table first; reload and retry.
    Conflict,
    /// The commit may or may not have been applied (5xx, timeout, connection lost).
    CommitStateUnknown,
    /// The catalog or storage is unreachable or overloaded; retry later.
    Unavailable,
    /// The catalog or storage refused the request (auth, validation, bad request).
    Rejected,
    /// The table's schema or partition spec changed after the rows were shredded: they
    /// must be shredded again (the writer does so itself; retryable if it reaches a caller).
    SchemaChanged,
    /// The operation was cancelled by the caller.
    Cancelled,
    /// A bug or an unexpected state in floe or a dependency.
    Internal,
}

impl ErrorKind {
    /// Whether the same call may succeed if tried again unchanged.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Conflict
                | ErrorKind::Unavailable
                | ErrorKind::CommitStateUnknown
                | ErrorKind::SchemaChanged
        )
    }
}

#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }

    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prefixes the message with what was being done.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<iceberg::Error> for Error {
    fn from(e: iceberg::Error) -> Self {
        if let Some((storage, text)) = storage_failure(&e) {
            // A bucket that does not exist (opendal's ConfigInvalid, from S3's
            // NoSuchBucket) is a refusal no retry cures until someone creates it.
            let kind = match storage.kind() {
                opendal::ErrorKind::ConfigInvalid => ErrorKind::Rejected,
                _ if e.retryable() => ErrorKind::Unavailable,
                _ => ErrorKind::Internal,
            };
            return Error::new(kind, text);
        }
        let kind = match e.kind() {
            iceberg::ErrorKind::DataInvalid => ErrorKind::Data,
            iceberg::ErrorKind::FeatureUnsupported => ErrorKind::Config,
            iceberg::ErrorKind::NamespaceNotFound | iceberg::ErrorKind::TableNotFound => {
                ErrorKind::NotFound
            }
            iceberg::ErrorKind::CatalogCommitConflicts => ErrorKind::Conflict,
            _ if e.retryable() => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        };
        // iceberg's Display includes the source chain, which is what an operator needs.
        Error::new(kind, format!("{e:#}"))
    }
}

/// The storage failure (opendal's) at the root of an iceberg error, told in one line
/// (see [`describe_storage`]) after the iceberg messages that wrap it, without the
/// generic "Failure in doing io operation" of iceberg's storage crate.
fn storage_failure(e: &iceberg::Error) -> Option<(&opendal::Error, String)> {
    let mut what = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(storage) = err.downcast_ref::<opendal::Error>() {
            what.push(describe_storage(storage));
            return Some((storage, what.join(": ")));
        }
        if let Some(ice) = err.downcast_ref::<iceberg::Error>() {
            if ice.message() != "Failure in doing io operation" && !ice.message().is_empty() {
                what.push(ice.message().to_string());
            }
        } else {
            // Something else stands between: iceberg's own text tells it best.
            return None;
        }
        next = err.source();
    }
    None
}

/// A storage client's error in one line: what was done to which file, the HTTP status
/// and the kind when they tell something, and the cause (S3's, GCS's or Azure's error
/// code and message; the operating system's error for a local folder), e.g.
/// `storage write of /data/wh/t/data/a.parquet failed: no storage space: No space left
/// on device (os error 28)`. opendal's own text carries the same in a nested chain
/// (`Unexpected (persistent) at write, context: { service: fs, path: …, written: … } =>
/// …`), with the whole HTTP response's headers. The kind `PermissionDenied` and
/// `status: 403` stay in the line: the check for refused credentials reads them.
/// A value of opendal's context text (`a: x, b: y }` from `x`): it ends where the next
/// `, key: ` begins, so a path holding ", " is kept whole.
fn context_value(rest: &str) -> &str {
    let mut from = 0;
    while let Some(i) = rest[from..].find(", ") {
        let at = from + i;
        let next = &rest[at + 2..];
        let key = next
            .bytes()
            .take_while(|b| b.is_ascii_lowercase() || *b == b'_')
            .count();
        if key > 0 && next[key..].starts_with(": ") {
            return &rest[..at];
        }
        from = at + 2;
    }
    rest.trim_end_matches(" }")
}

pub(crate) fn describe_storage(e: &opendal::Error) -> String {
    let text = e.to_string();
    let message = e.message();
    // opendal's Display: `{kind} ({status}) at {operation}[, context: { … }][ =>
    // {message}][, source: {source}]`; only the kind and the message have getters.
    let after_at = text.split_once(" at ").map_or("", |(_, rest)| rest);
    let context_end = [
        (!message.is_empty())
            .then(|| after_at.rfind(&format!(" => {message}")))
            .flatten(),
        after_at.find(", source: "),
    ]
    .into_iter()
    .flatten()
    .min()
    .unwrap_or(after_at.len());
    let head = &after_at[..context_end];
    let (operation, context) = match head.split_once(", context: { ") {
        Some((operation, context)) => (operation, context.strip_suffix(" }").unwrap_or(context)),
        None => (head, ""),
    };
    let field = |key: &str| {
        context
            .strip_prefix(&format!("{key}: "))
            .or_else(|| context.split_once(&format!(", {key}: ")).map(|(_, v)| v))
            .map(context_value)
            .filter(|v| !v.is_empty())
    };
    let target = match (field("uri"), field("path")) {
        (Some(uri), _) => uri.to_string(),
        // The local folder's paths are relative to the root of the file system.
        (None, Some(path)) if field("service") == Some("fs") && !path.starts_with('/') => {
            format!("/{path}")
        }
        (None, Some(path)) => path.to_string(),
        (None, None) => String::new(),
    };
    let status = context.split_once("status: ").and_then(|(_, rest)| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        (digits.len() == 3).then_some(digits)
    });
    let kind = match e.kind() {
        opendal::ErrorKind::Unexpected | opendal::ErrorKind::ConfigInvalid => None,
        kind => Some(kind.to_string()),
    };
    let detail: Vec<String> = kind
        .into_iter()
        .chain(status.map(|s| format!("status: {s}")))
        .collect();
    let mut line = format!("storage {}", operation.trim());
    if !target.is_empty() {
        line.push_str(&format!(" of {target}"));
    }
    line.push_str(" failed");
    if !detail.is_empty() {
        line.push_str(&format!(" ({})", detail.join(", ")));
    }
    let mut cause = service_error(message).unwrap_or_else(|| message.to_string());
    if let Some(source) = std::error::Error::source(e) {
        let source = source.to_string();
        if cause.is_empty() {
            cause = source;
        } else if !cause.contains(&source) {
            cause = format!("{cause}: {source}");
        }
    }
    if !cause.is_empty() {
        line.push_str(&format!(": {cause}"));
    }
    // One line: a body quoted by the service may hold line breaks.
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An object store's error as opendal quotes it (Rust debug text, e.g. `S3Error { code:
/// "NoSuchBucket", message: "The specified bucket does not exist", … }`) as `code:
/// message`; None when the text is not such a quote.
fn service_error(message: &str) -> Option<String> {
    if !message.contains(" { ") {
        return None;
    }
    let quoted = |key: &str| {
        let (_, rest) = message.split_once(&format!("{key}: \""))?;
        let mut value = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.extend(chars.next()),
                '"' => return Some(value),
                c => value.push(c),
            }
        }
        None
    };
    match (quoted("code"), quoted("message")) {
        (Some(code), Some(text)) if !code.is_empty() => Some(format!("{code}: {text}")),
        (_, Some(text)) => Some(text),
        (Some(code), None) => Some(code),
        (None, None) => None,
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        let kind = match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                ErrorKind::Unavailable
            }
            _ => ErrorKind::Internal,
        };
        Error::new(kind, format!("embedded catalog: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An opendal error as iceberg's storage crate hands it on.
    fn through_iceberg(e: opendal::Error) -> iceberg::Error {
        iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            "Failure in doing io operation",
        )
        .with_source(e)
    }

    #[test]
    fn a_full_disk_is_one_line_with_the_file_and_the_cause() {
        let storage = opendal::Error::new(opendal::ErrorKind::Unexpected, "no storage space")
            .with_operation("write")
            .with_context("service", "fs")
            .with_context("path", "tmp/full/wh/p/t/data/00000-a.parquet")
            .with_context("written", "164593")
            .set_persistent()
            .set_source(std::io::Error::from_raw_os_error(28));
        let e = Error::from(through_iceberg(storage)).context("table p.t: uploading");
        assert_eq!(
            e.message(),
            "table p.t: uploading: storage write of /tmp/full/wh/p/t/data/00000-a.parquet failed: \
             no storage space: No space left on device (os error 28)"
        );
        assert_eq!(e.kind(), ErrorKind::Internal);
    }

    #[test]
    fn a_path_holding_a_comma_is_named_whole() {
        let storage = opendal::Error::new(opendal::ErrorKind::Unexpected, "no storage space")
            .with_operation("write")
            .with_context("service", "fs")
            .with_context("path", "/data/a, b/wh/t/data/00000-a.parquet")
            .set_source(std::io::Error::from_raw_os_error(28));
        let e = Error::from(through_iceberg(storage));
        assert!(
            e.message()
                .starts_with("storage write of /data/a, b/wh/t/data/00000-a.parquet failed"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn a_missing_bucket_is_one_line_and_a_refusal() {
        let storage = opendal::Error::new(
            opendal::ErrorKind::ConfigInvalid,
            r#"S3Error { code: "NoSuchBucket", message: "The specified bucket does not exist", resource: "", request_id: "1" }"#,
        )
        .with_operation("write")
        .with_context("uri", "http://127.0.0.1:9/no-such-bucket/wh/t/metadata/00000-a.metadata.json")
        .with_context(
            "response",
            r#"Parts { status: 404, version: HTTP/1.1, headers: {"content-type": "application/xml"} }"#,
        )
        .with_context("service", "s3")
        .with_context("path", "wh/t/metadata/00000-a.metadata.json")
        .set_persistent();
        let e = Error::from(through_iceberg(storage).with_context("k", "v"));
        assert_eq!(
            e.message(),
            "storage write of http://127.0.0.1:9/no-such-bucket/wh/t/metadata/00000-a.metadata.json \
             failed (status: 404): NoSuchBucket: The specified bucket does not exist"
        );
        assert_eq!(e.kind(), ErrorKind::Rejected);
    }

    #[test]
    fn a_refused_key_still_reads_as_a_credential_refusal() {
        let storage = opendal::Error::new(
            opendal::ErrorKind::PermissionDenied,
            "S3Error { code: \"SignatureDoesNotMatch\", message: \"The request signature we calculated\ndoes not match\", resource: \"\", request_id: \"2\" }",
        )
        .with_operation("read")
        .with_context("uri", "http://127.0.0.1:9/b/t/data/a.parquet")
        .with_context("response", "Parts { status: 403, version: HTTP/1.1, headers: {} }")
        .with_context("service", "s3")
        .with_context("path", "t/data/a.parquet")
        .with_context("range", "0-");
        let outer = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "could not read a file")
            .with_source(through_iceberg(storage));
        let e = Error::from(outer);
        assert_eq!(
            e.message(),
            "could not read a file: storage read of http://127.0.0.1:9/b/t/data/a.parquet failed \
             (PermissionDenied, status: 403): SignatureDoesNotMatch: The request signature we \
             calculated does not match"
        );
        // What storage's check for refused credentials reads (storage::tests).
        assert!(e.message().contains("PermissionDenied") && e.message().contains("status: 403"));
    }

    #[test]
    fn other_iceberg_errors_keep_their_text() {
        let e = Error::from(iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            "bad value",
        ));
        assert_eq!(e.kind(), ErrorKind::Data);
        assert!(e.message().contains("bad value"), "{e}");
    }
}
