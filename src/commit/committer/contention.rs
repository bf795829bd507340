//! Commit pacing under contention: what a writer does when other writers commit to its
//! table too.
//!
//! Every commit replaces one metadata pointer, so of several writers racing, one wins and
//! the others are refused and rebuild. A refused attempt is not free for the catalog: it
//! reads the table's metadata to check the request, and the writer then loads it again
//! to rebuild. With many writers most of the catalog's work goes into refusals, and the
//! commits that land per second fall as writers are added (measured in
//! `docs/scale-out.md`). Two things keep them up:
//!
//! - **Load the head first while others commit.** A writer's own view is the table as
//!   its last commit left it. When another writer has committed since, a first attempt
//!   built on that view is refused for certain; loading the head before it costs the
//!   catalog one read instead of a refused commit and a read.
//! - **Space commits out while they keep meeting several conflicts.** A writer whose
//!   commits meet more than one conflict waits a while before its next one, longer the
//!   more they meet, shorter after each clean commit (as TCP paces senders over a shared
//!   link): the writers
//!   then take turns at the catalog instead of colliding, and each commit carries what
//!   arrived meanwhile (group commit): the encoder gathers it into one group, so that
//!   upserts and deletes, whose groups cannot share a snapshot, land as one snapshot too
//!   (see `schedule::Pace::hold_until`). Clean commits shorten the wait again, so a
//!   writer alone on its table never waits.

use std::time::{Duration, Instant};

/// The shortest spacing a conflict sets: about one commit's round trip to a catalog.
const MIN_SPACING: Duration = Duration::from_millis(20);
/// The longest. A hold is jittered up to one and a half times the spacing, so callers
/// wait at most 3 s longer (the commit then comes on top).
pub(super) const MAX_SPACING: Duration = Duration::from_secs(2);
/// How much each conflict past the first lengthens the spacing, and how many of one
/// commit count (a commit that needed many attempts proves no more crowding than a few).
const GROWTH: f64 = 1.25;
const MAX_COUNTED_CONFLICTS: i32 = 4;
/// How much a commit that met no conflict shortens it.
///
/// One conflict per commit is what writers taking turns meet: each waits out the one
/// commit that landed in its window. Pacing those further apart would leave the catalog
/// idle between commits, so only more than one conflict lengthens the spacing, and only
/// none shortens it. (Pacing until about half the commits met none, 16 writers on two
/// cores committed 13.6 snapshots/s, against 15.0 unpaced and 15.3 paced this way.)
const DECAY: f64 = 0.8;

/// One writer's pacing (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Contention {
    /// How far apart this writer's commits start; zero when it meets no conflicts.
    spacing: Duration,
    /// When the last commit (after its pacing wait) started.
    last_start: Option<Instant>,
    /// Another writer committed since this writer last saw the head: its last commit met
    /// a conflict, or the last head it loaded was newer than its own.
    others_active: bool,
}

impl Contention {
    /// Until when to hold the next commit: its spacing after the last one's start, with
    /// full jitter around it (half to one and a half times), so writers that collided
    /// once do not collide again. `None` when the writer need not wait.
    pub(super) fn hold_until(&self, jitter: f64) -> Option<Instant> {
        if self.spacing.is_zero() {
            return None;
        }
        let wait = self.spacing.mul_f64(0.5 + jitter.clamp(0.0, 1.0));
        self.last_start
            .map(|t| t + wait)
            .filter(|t| *t > Instant::now())
    }

    /// Notes that a commit starts now.
    pub(super) fn started(&mut self, now: Instant) {
        self.last_start = Some(now);
    }

    /// Takes in a finished commit (landed or not) and the conflicts it met.
    pub(super) fn finished(&mut self, conflicts: u32) {
        if conflicts > 0 {
            self.others_active = true;
        }
        match conflicts {
            0 => {
                self.spacing = self.spacing.mul_f64(DECAY);
                if self.spacing < MIN_SPACING / 2 {
                    self.spacing = Duration::ZERO;
                }
            }
            1 => {}
            _ => {
                let past_first = (conflicts as i32).min(MAX_COUNTED_CONFLICTS) - 1;
                self.spacing = self
                    .spacing
                    .max(MIN_SPACING)
                    .mul_f64(GROWTH.powi(past_first))
                    .min(MAX_SPACING);
            }
        }
    }

    /// Whether the next commit should load the head before its first attempt.
    pub(super) fn load_first(&self) -> bool {
        self.others_active
    }

    /// Takes in what loading the head showed: whether another writer had committed since
    /// this writer's last view of it.
    pub(super) fn loaded(&mut self, head_moved: bool) {
        self.others_active = head_moved;
    }

    #[cfg(test)]
    pub(super) fn spacing(&self) -> Duration {
        self.spacing
    }
}

/// A uniform draw in [0, 1) for the pacing jitter.
pub(super) fn jitter() -> f64 {
    let draw = uuid::Uuid::new_v4().as_u64_pair().0 >> 11;
    draw as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_that_meets_no_conflicts_never_waits_nor_loads_first() {
        let mut c = Contention::default();
        for _ in 0..100 {
            c.started(Instant::now());
            c.finished(0);
            assert_eq!(c.hold_until(1.0), None);
            assert!(!c.load_first());
        }
    }

    #[test]
    fn conflicts_past_the_first_space_commits_out_up_to_the_cap() {
        let mut c = Contention::default();
        // One conflict a commit is writers taking turns: no pacing, but load first.
        c.finished(1);
        assert_eq!(c.spacing(), Duration::ZERO);
        assert!(c.load_first());
        c.finished(2);
        assert_eq!(c.spacing(), MIN_SPACING.mul_f64(GROWTH));
        c.finished(3);
        assert_eq!(c.spacing(), MIN_SPACING.mul_f64(GROWTH.powi(3)));
        // Many conflicts in one commit count as a few; one keeps the spacing.
        let before = c.spacing();
        c.finished(50);
        let after = before.mul_f64(GROWTH.powi(MAX_COUNTED_CONFLICTS - 1));
        assert_eq!(c.spacing(), after);
        c.finished(1);
        assert_eq!(c.spacing(), after);
        for _ in 0..30 {
            c.finished(4);
        }
        assert_eq!(c.spacing(), MAX_SPACING);
    }

    #[test]
    fn clean_commits_shorten_the_spacing_back_to_nothing() {
        let mut c = Contention::default();
        for _ in 0..30 {
            c.finished(4);
        }
        let mut clean = 0;
        while !c.spacing().is_zero() {
            let before = c.spacing();
            c.finished(0);
            assert!(c.spacing() < before);
            clean += 1;
        }
        // Not at once: from the cap, a few dozen clean commits.
        assert!((15..40).contains(&clean), "{clean}");
    }

    #[test]
    fn the_hold_is_the_spacing_after_the_last_start_with_jitter() {
        let mut c = Contention::default();
        c.finished(2);
        let spacing = c.spacing();
        // In the future, so that no pause of the test's thread makes the hold lapse.
        let start = Instant::now() + Duration::from_secs(60);
        c.started(start);
        assert_eq!(c.hold_until(0.0), Some(start + spacing / 2));
        assert_eq!(c.hold_until(0.5), Some(start + spacing));
        assert_eq!(c.hold_until(1.0), Some(start + spacing.mul_f64(1.5)));
        // A commit that started long enough ago holds nothing.
        c.started(Instant::now() - MAX_SPACING * 2);
        assert_eq!(c.hold_until(1.0), None);
    }

    #[test]
    fn the_head_is_loaded_first_while_others_keep_committing() {
        let mut c = Contention::default();
        c.finished(1);
        assert!(c.load_first());
        // The loaded head was newer: someone else committed; keep loading.
        c.loaded(true);
        c.finished(0);
        assert!(c.load_first());
        // The head was this writer's own: nobody else commits, stop loading.
        c.loaded(false);
        assert!(!c.load_first());
    }

    #[test]
    fn jitter_draws_from_zero_to_one() {
        for _ in 0..1000 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }
}
