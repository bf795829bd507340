//! The log bridge: libfloe's warnings (failed cleanups, skipped expiry rounds, unusable
//! table properties) reach the host's logger instead of vanishing.
//!
//! The host sets one callback per process with [`floe_set_log_callback`]; floe's
//! `tracing` events at or above the chosen level are formatted and handed to it. A
//! minimal `tracing::Subscriber`: events only (spans are not used by floe), so no
//! subscriber crate is needed.

use std::ffi::c_void;
use std::fmt::Write as _;
use std::sync::OnceLock;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

use super::{FloeError, FloeStatus, ffi_boundary, invalid};

/// Log levels, most severe first (numbers are stable).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FloeLogLevel {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
    Trace = 5,
}

impl From<&Level> for FloeLogLevel {
    fn from(level: &Level) -> Self {
        match *level {
            Level::ERROR => FloeLogLevel::Error,
            Level::WARN => FloeLogLevel::Warn,
            Level::INFO => FloeLogLevel::Info,
            Level::DEBUG => FloeLogLevel::Debug,
            _ => FloeLogLevel::Trace,
        }
    }
}

/// Receives one log line: its level and `len` bytes of UTF-8 at `message` (valid only
/// during the call). May be called from any thread, concurrently.
pub type FloeLogCallback = Option<
    unsafe extern "C" fn(level: u32, message: *const u8, len: usize, user_data: *mut c_void),
>;

struct Bridge {
    callback: unsafe extern "C" fn(u32, *const u8, usize, *mut c_void),
    user_data: usize,
    max_level: FloeLogLevel,
}

impl Subscriber for Bridge {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        // Only floe's own events: dependencies' chatter stays out of the host's log.
        metadata.target().starts_with("floe")
            && FloeLogLevel::from(metadata.level()) <= self.max_level
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = LineVisitor(String::new());
        event.record(&mut line);
        let level = FloeLogLevel::from(event.metadata().level()) as u32;
        let text = line.0;
        // SAFETY: the host registered this function and promised it is callable from
        // any thread with these arguments; the bytes outlive the call.
        unsafe {
            (self.callback)(
                level,
                text.as_ptr(),
                text.len(),
                self.user_data as *mut c_void,
            )
        };
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// Formats an event's fields: the message first, then `key=value` pairs.
struct LineVisitor(String);

impl Visit for LineVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let rest = std::mem::take(&mut self.0);
            let _ = write!(self.0, "{value:?}{rest}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.insert_str(0, value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

static INSTALLED: OnceLock<()> = OnceLock::new();

/// Sends libfloe's log events at `max_level` (1 = error … 5 = trace) or more severe to
/// `callback`, with `user_data` passed back on every call. Once per process: a second
/// call fails with `FLOE_STATUS_INVALID_ARGUMENT` (the first callback stays). Call it
/// before opening writers, from any thread. The callback must be safe to call from any
/// thread, concurrently, for the rest of the process's life.
///
/// # Safety
/// `callback` must be a valid function pointer for the process's lifetime; `err_out`
/// NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_set_log_callback(
    callback: FloeLogCallback,
    user_data: *mut c_void,
    max_level: u32,
    err_out: *mut *mut FloeError,
) -> FloeStatus {
    ffi_boundary(err_out, || {
        let Some(callback) = callback else {
            return Err(invalid("floe_set_log_callback: NULL callback"));
        };
        let max_level = match max_level {
            1 => FloeLogLevel::Error,
            2 => FloeLogLevel::Warn,
            3 => FloeLogLevel::Info,
            4 => FloeLogLevel::Debug,
            5 => FloeLogLevel::Trace,
            _ => return Err(invalid("floe_set_log_callback: max_level must be 1 to 5")),
        };
        let bridge = Bridge {
            callback,
            user_data: user_data as usize,
            max_level,
        };
        let mut installed = false;
        INSTALLED.get_or_init(|| {
            installed = tracing::subscriber::set_global_default(bridge).is_ok();
        });
        if installed {
            Ok(())
        } else {
            Err(invalid(
                "floe_set_log_callback: a log callback (or another tracing subscriber) is already set",
            ))
        }
    })
}
