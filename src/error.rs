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
