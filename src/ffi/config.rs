//! Config checks and defaults for hosts. A host's lint and its start-up both ask floe,
//! so they print floe's own messages and show floe's own defaults.

use std::ffi::{CString, c_char};
use std::sync::OnceLock;

use super::{FloeError, FloeStatus, ffi_boundary, invalid};
use crate::config::Config;

/// Checks a JSON config (`config_json`, `config_len` bytes, UTF-8) without opening
/// anything. A config with problems gives `FLOE_STATUS_CONFIG` and an error whose message
/// holds one problem per line, each naming its field.
///
/// # Safety
/// `config_json` must point to `config_len` readable bytes; `err_out` NULL or valid for
/// a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn floe_config_check(
    config_json: *const u8,
    config_len: usize,
    err_out: *mut *mut FloeError,
) -> FloeStatus {
    ffi_boundary(err_out, || {
        if config_json.is_null() {
            return Err(invalid("floe_config_check: NULL config"));
        }
        // SAFETY: the caller guarantees `config_len` readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(config_json, config_len) };
        let text = std::str::from_utf8(bytes).map_err(|_| invalid("config is not UTF-8"))?;
        match crate::validate::problems(text) {
            problems if problems.is_empty() => Ok(()),
            problems => Err((FloeStatus::Config, problems.join("\n"))),
        }
    })
}

/// floe's defaults for the fields a config leaves out, as a NUL-terminated JSON config
/// document (durations in Go's text form). Static: never freed. NULL only if floe
/// failed to build it (a bug).
#[unsafe(no_mangle)]
pub extern "C" fn floe_config_defaults() -> *const c_char {
    static DEFAULTS: OnceLock<Option<CString>> = OnceLock::new();
    let defaults = DEFAULTS.get_or_init(|| {
        std::panic::catch_unwind(|| Config::defaults().to_string())
            .ok()
            .and_then(|json| CString::new(json).ok())
    });
    defaults.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_lists_every_problem_one_per_line() {
        let config = br#"{"commit": {"max_snapshots": 0}, "storage": {"gcp_cloud_storage": {"credentials_type": "service_account"}}}"#;
        let mut err: *mut FloeError = std::ptr::null_mut();
        // SAFETY: a valid buffer and out-pointer.
        let status = unsafe { floe_config_check(config.as_ptr(), config.len(), &mut err) };
        assert_eq!(status, FloeStatus::Config);
        // SAFETY: set by the failed call above; freed once.
        let message = unsafe {
            let text = std::ffi::CStr::from_ptr(super::super::floe_error_message(err));
            let text = text.to_str().unwrap().to_string();
            super::super::floe_error_free(err);
            text
        };
        let lines: Vec<&str> = message.lines().collect();
        assert_eq!(
            lines,
            [
                "commit.max_snapshots must be greater than 0",
                "storage.gcp_cloud_storage.credentials_type: service_account needs credentials_file or credentials_json",
            ]
        );
    }

    #[test]
    fn defaults_are_valid_json_that_parses_back_to_the_same_config() {
        // SAFETY: a static NUL-terminated string.
        let text = unsafe { std::ffi::CStr::from_ptr(floe_config_defaults()) };
        let defaults: serde_json::Value = serde_json::from_str(text.to_str().unwrap()).unwrap();
        assert_eq!(defaults["commit"]["max_snapshot_age"], "24h");
        assert_eq!(defaults["commit"]["retry_timeout"], "2m");
        assert_eq!(defaults["case_sensitive_columns"], true);
        assert_eq!(defaults, Config::defaults());
    }
}
