//! The C ABI. Conventions (see docs/embedding.md):
//!
//! - Opaque handles come from `floe_*_new`/`floe_writer_open` and are released once with
//!   the matching `floe_*_free`, which accepts NULL.
//! - Fallible calls return a [`FloeStatus`]; on failure they store an owned
//!   [`FloeError`] through `err_out` (when it is not NULL) that the caller frees with
//!   [`floe_error_free`]. Out-parameters are written only on success.
//! - Inputs are borrowed for the duration of the call; floe copies what it keeps.
//! - No panic crosses the boundary: every body runs inside [`ffi_boundary`].
//! - Calls block the calling thread on a process-wide Tokio runtime.

mod config;
mod events;
mod handles;
mod log;

pub use config::*;
pub use events::*;
pub use handles::*;
pub use log::*;

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::{Error, ErrorKind};

/// Bumped whenever a signature or struct layout in `floe.h` changes incompatibly.
pub const FLOE_ABI_VERSION: u32 = 7;

/// Result of every fallible call. Numbers are stable; new ones are only appended.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloeStatus {
    Ok = 0,
    /// A NULL pointer or malformed argument from the caller.
    InvalidArgument = 1,
    /// The configuration is invalid.
    Config = 2,
    /// A message could not be converted (replaying it fails again).
    Data = 3,
    NotFound = 4,
    /// Another writer changed the table first.
    Conflict = 5,
    /// The commit may or may not have been applied.
    CommitStateUnknown = 6,
    /// Catalog or storage unreachable or overloaded: retry later.
    Unavailable = 7,
    /// The catalog or storage refused the request.
    Rejected = 8,
    Cancelled = 9,
    Internal = 10,
    /// floe panicked; the handle may still be used, but please report it.
    Panic = 11,
}

impl From<ErrorKind> for FloeStatus {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::Config => FloeStatus::Config,
            ErrorKind::Data => FloeStatus::Data,
            ErrorKind::NotFound => FloeStatus::NotFound,
            ErrorKind::Conflict => FloeStatus::Conflict,
            ErrorKind::CommitStateUnknown => FloeStatus::CommitStateUnknown,
            ErrorKind::Unavailable | ErrorKind::SchemaChanged => FloeStatus::Unavailable,
            ErrorKind::Rejected => FloeStatus::Rejected,
            ErrorKind::Cancelled => FloeStatus::Cancelled,
            ErrorKind::Internal => FloeStatus::Internal,
        }
    }
}

/// Moves `value` to the heap and gives C its address; [`free_handle`] takes it back.
pub(crate) fn into_handle<T>(value: T) -> *mut T {
    Box::into_raw(Box::new(value))
}

/// Frees a handle made by [`into_handle`]; NULL is accepted. A panic while dropping
/// it (a bug) is swallowed: a free has no way to report one and it must not unwind
/// into C.
///
/// # Safety
/// `handle` is NULL or came from `into_handle::<T>` and is freed once.
pub(crate) unsafe fn free_handle<T>(handle: *mut T) {
    if !handle.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: from `into_handle`, freed once by contract.
            drop(unsafe { Box::from_raw(handle) })
        }));
    }
}

/// The object behind a handle, `None` for NULL.
///
/// # Safety
/// `handle` is NULL or a live handle of type `T`, alive for `'a`.
pub(crate) unsafe fn borrow<'a, T>(handle: *const T) -> Option<&'a T> {
    // SAFETY: guaranteed by the caller.
    unsafe { handle.as_ref() }
}

/// Stores `value` through the out-parameter `out`, refusing NULL (named `what`).
///
/// # Safety
/// `out` is NULL or valid for a write of a `T`.
pub(crate) unsafe fn store<T>(
    out: *mut T,
    value: T,
    what: &str,
) -> Result<(), (FloeStatus, String)> {
    if out.is_null() {
        return Err(invalid(&format!("{what} is NULL")));
    }
    // SAFETY: non-NULL, and valid for a write by contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Runs an exported body, turning an `Err` or a panic into a status plus error object.
pub(crate) fn ffi_boundary(
    err_out: *mut *mut FloeError,
    body: impl FnOnce() -> Result<(), (FloeStatus, String)>,
) -> FloeStatus {
    let result = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err((FloeStatus::Panic, format!("floe panicked: {what}")))
    });
    match result {
        Ok(()) => FloeStatus::Ok,
        Err((status, message)) => {
            if !err_out.is_null() {
                // SAFETY: the caller passes either NULL or a valid place for a pointer.
                unsafe { *err_out = into_handle(FloeError::new(status, message)) };
            }
            status
        }
    }
}

pub(crate) fn fail(e: Error) -> (FloeStatus, String) {
    (e.kind().into(), e.to_string())
}

pub(crate) fn invalid(what: &str) -> (FloeStatus, String) {
    (FloeStatus::InvalidArgument, what.to_string())
}

/// The ABI version this library implements; hosts refuse a library whose version differs.
#[unsafe(no_mangle)]
pub extern "C" fn floe_abi_version() -> u32 {
    FLOE_ABI_VERSION
}

/// Test builds only (feature `failpoints`): makes the next pass through failpoint `name`
/// panic, so a test can check that the handle stays usable after a panic.
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[cfg(feature = "failpoints")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_failpoint_arm(name: *const std::ffi::c_char) -> FloeStatus {
    if name.is_null() {
        return FloeStatus::InvalidArgument;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let name = unsafe { std::ffi::CStr::from_ptr(name) };
    match name.to_str() {
        Ok(name) => {
            crate::failpoint::armed::arm(name);
            FloeStatus::Ok
        }
        Err(_) => FloeStatus::InvalidArgument,
    }
}
