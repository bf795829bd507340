//! Failpoints: named places where a test can make floe panic, or kill its process, on
//! purpose.
//!
//! floe has no known panic path, yet the C ABI promises that a panic leaves the handle
//! usable (no poisoned lock, no lost claim). The only honest way to test that promise
//! through the Go binding is to cause a panic where it hurts most, inside a held lock.
//! The crash trials (`e2e/crash_trials.py`) kill the host at chosen phases of a call the
//! same way: `FLOE_FAILPOINT_CRASH=<name>:<n>` SIGKILLs the process on the n-th pass
//! through `name`, which a timer outside the process could hit only by luck.
//! Failpoints exist only in builds with the `failpoints` feature (the Go test suite builds
//! one); in every other build [`hit`] is an empty inline function.

/// Panics here if a test armed `name` (each arming fires once); kills the process here
/// if `FLOE_FAILPOINT_CRASH` names this pass.
#[inline(always)]
pub(crate) fn hit(name: &str) {
    #[cfg(feature = "failpoints")]
    {
        crash::at(name);
        armed::fire(name);
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

#[cfg(feature = "failpoints")]
mod crash {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// The failpoint to die at and how many passes through it are left before that.
    static PLAN: OnceLock<Option<(String, AtomicU64)>> = OnceLock::new();

    fn plan() -> &'static Option<(String, AtomicU64)> {
        PLAN.get_or_init(|| {
            let value = std::env::var("FLOE_FAILPOINT_CRASH").ok()?;
            let (name, nth) = value.rsplit_once(':').unwrap_or((&value, "1"));
            let nth: u64 = nth.parse().ok().filter(|&n| n > 0)?;
            Some((name.to_string(), AtomicU64::new(nth)))
        })
    }

    pub(super) fn at(name: &str) {
        let Some((point, left)) = plan() else { return };
        if point == name && left.fetch_sub(1, Ordering::AcqRel) == 1 {
            eprintln!("failpoint {name}: killing the process (FLOE_FAILPOINT_CRASH)");
            // SAFETY: plain syscalls on this process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }
}

#[cfg(feature = "failpoints")]
pub(crate) mod armed {
    use crate::sync::LockExt;
    use std::sync::Mutex;

    static ARMED: Mutex<Vec<String>> = Mutex::new(Vec::new());

    /// Makes the next [`super::hit`] of `name` panic.
    pub(crate) fn arm(name: &str) {
        ARMED.locked().push(name.to_string());
    }

    pub(super) fn fire(name: &str) {
        let fired = {
            let mut armed = ARMED.locked();
            let position = armed.iter().position(|n| n == name);
            position.map(|i| armed.swap_remove(i)).is_some()
        };
        if fired {
            panic!("failpoint {name}");
        }
    }
}

/// Failpoints the tests arm, by name.
pub mod names {
    /// Exactly-once planning, while the claims ledger is locked.
    pub const PLAN_LEDGER_LOCKED: &str = "writer.plan.ledger-locked";
    /// After the call claimed its positions and shredded its rows, before it hands them
    /// to the committer.
    pub const BEFORE_SUBMIT: &str = "writer.before-submit";
    /// A call's group about to shred its messages.
    pub const SHREDDING: &str = "writer.shredding";
    /// A commit attempt's files (data, manifests, list) uploaded, before the catalog call.
    pub const UPLOADED: &str = "commit.uploaded";
    /// The catalog applied a commit and answered; floe has not recorded it yet.
    pub const APPLIED: &str = "commit.applied";
    /// A call's tables committed, before it returns to the host (which then acknowledges).
    pub const BEFORE_RETURN: &str = "writer.before-return";
}
