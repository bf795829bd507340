//! Locks that outlive a panic.
//!
//! A panic while a std mutex is held poisons it, and `lock().expect(..)` then panics in
//! every later call, although the C ABI promises the handle stays usable after a panic.
//! The state these mutexes guard (claims, counters, pooled shredders, caches) is updated
//! by single inserts and assignments, so it is consistent at any panic point: the
//! poison flag is ignored.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub trait LockExt<T> {
    /// Locks, ignoring poisoning (see the module docs).
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> LockExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_still_usable() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _guard = m2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *m.locked() += 1;
        assert_eq!(*m.locked(), 2);
    }
}
