//! How long a committer waits before it tries again: jittered exponential backoff, so
//! racing writers spread out instead of colliding again.

use std::time::Duration;

/// Backoff before retry `attempt` (1-based): full jitter over 50 ms · 2^attempt, capped
/// at 5 s, so racing writers spread out instead of colliding again.
pub(super) fn backoff(attempt: u32) -> Duration {
    full_jitter(50, attempt, 5_000)
}

/// Backoff before conflict retry `n` (1-based): a rebase is cheap and the winner has
/// already moved on, so full jitter over 20 ms · 2^n, capped at 1 s.
pub(super) fn conflict_backoff(n: u32) -> Duration {
    full_jitter(20, n, 1_000)
}

/// A random wait up to `base_ms` · 2^`n` (exponent capped at 7), at most `cap_ms`.
pub(super) fn full_jitter(base_ms: u64, n: u32, cap_ms: u64) -> Duration {
    let ceiling_ms = (base_ms << n.min(7)).min(cap_ms);
    let jitter = uuid::Uuid::new_v4().as_u64_pair().0 % (ceiling_ms + 1);
    Duration::from_millis(jitter)
}
