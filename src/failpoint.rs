//! Failpoints: named places where a test can make floe panic on purpose.
//!
//! floe has no known panic path, yet the C ABI promises that a panic leaves the handle
//! usable (no poisoned lock, no lost claim). The only honest way to test that promise
//! through the Go binding is to cause a panic where it hurts most, inside a held lock.
//! Failpoints exist only in builds with the `failpoints` feature (the Go test suite builds
//! one); in every other build [`hit`] is an empty inline function.

/// Panics here if a test armed `name`; each arming fires once.
#[inline(always)]
pub(crate) fn hit(name: &str) {
    #[cfg(feature = "failpoints")]
    armed::fire(name);
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
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
}
