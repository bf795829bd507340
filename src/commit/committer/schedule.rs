//! Scheduling: when the encoder takes the submissions waiting as one group (linger,
//! group limits, gathering callers released by a commit).

use std::time::{Duration, Instant};

use super::gate::ShredGate;
use super::{CommitterOptions, Pending};
use tokio::sync::mpsc;

/// Commit and encode durations, from which the encoder decides when to collect a group.
///
/// Callers block until their rows commit, so while a commit is in flight its callers
/// cannot submit, and the others' batches wait. Two ways to go on:
/// - *overlap*: collect what waits so its files are written just as the commit ends;
///   the callers released by that commit then form the group after, so the callers
///   split into two alternating cohorts, each committed every other round trip;
/// - *gather*: wait for the commit to end and for its callers to resubmit, then write
///   everyone's batches as one group; the commit stage idles while it is encoded.
///
/// Gathering commits all callers per round trip at the cost of one encode, so it wins
/// whenever a commit takes longer than encoding a group (the usual case with a remote
/// catalog); overlapping wins when encoding dominates (large groups).
#[derive(Default)]
pub(super) struct Pace {
    pub(super) commit_started: Option<Instant>,
    /// When the last commit ended: its callers are on their way back until about one
    /// commit's duration after it.
    pub(super) commit_ended: Option<Instant>,
    /// How many submissions the last commit answered: at most that many callers are on
    /// their way back.
    pub(super) released: usize,
    pub(super) commit: Duration,
    pub(super) encode: Duration,
    /// Until when commit pacing holds the next commit (see `contention`), set as the
    /// last commit ends. The encoder gathers what arrives until then into one group:
    /// groups that carry deletes cannot share a snapshot, so upserts encoded as they
    /// arrived would land as one snapshot each once the hold ends, every one of them a
    /// commit the other writers may refuse.
    pub(super) hold_until: Option<Instant>,
}

/// After a commit ends, how long the encoder keeps taking submissions that arrive close
/// together (callers released by the commit resubmit within a millisecond or two).
pub(super) const GATHER_GAP: Duration = Duration::from_millis(1);
pub(super) const GATHER_MAX: Duration = Duration::from_millis(5);
/// The longest wait for the rest of the callers, whatever a commit takes.
pub(super) const GATHER_CALLERS_MAX: Duration = Duration::from_secs(1);

/// How long a gathering encoder keeps collecting once the queue is empty.
///
/// When the host said how many calls it runs at once, every one of them can join the
/// group: each has at most one submission per table pending, so the group is complete
/// once it holds that many. A host pipeline hands a released caller its next batch only
/// after producing it, so callers come back several milliseconds apart; the encoder waits
/// for them for up to one commit's duration. Saving a commit saves its catalog and
/// storage work, which on a busy machine competes with the host for the same cores;
/// waiting longer than a commit takes would add more latency than the commit costs.
/// Without that number it takes only what arrives in quick succession.
#[derive(Clone, Copy)]
pub(super) struct Gathering {
    pub(super) callers: Option<usize>,
    pub(super) until: Instant,
    /// Waits for `until` even when the host did not say how many calls it runs: the
    /// commit is held until then anyway (see [`Pace::hold_until`]).
    pub(super) held: bool,
}

impl Gathering {
    pub(super) fn new(callers: Option<usize>, commit: Duration, now: Instant) -> Self {
        let wait = match callers {
            Some(_) => commit.clamp(GATHER_MAX, GATHER_CALLERS_MAX),
            None => GATHER_MAX,
        };
        Gathering {
            callers,
            until: now + wait,
            held: false,
        }
    }

    /// Gathers for a held commit until `until` (see [`Pace::gather_until`]), or until
    /// every caller is in.
    pub(super) fn held_until(callers: Option<usize>, until: Instant) -> Self {
        Gathering {
            callers,
            until,
            held: true,
        }
    }

    pub(super) fn complete(&self, group_len: usize) -> bool {
        self.callers.is_some_and(|n| group_len >= n)
    }

    /// Until when to wait for the next submission.
    pub(super) fn next_deadline(&self, now: Instant) -> Instant {
        match self.callers {
            Some(_) => self.until,
            None if self.held => self.until,
            None => (now + GATHER_GAP).min(self.until),
        }
    }
}

pub(super) enum Plan {
    Now,
    /// Gather until then for the held commit (see [`Pace::gather_until`]).
    GatherUntil(Instant),
    /// Overlap: sleep this long, then collect.
    Overlap(Duration),
    /// Gather once the commit in flight ends.
    Gather,
    /// Gather now, for up to `released` callers: the commit that released them ended at
    /// `ended`.
    GatherSince {
        ended: Instant,
        released: usize,
    },
}

impl Pace {
    pub(super) fn smooth(average: &mut Duration, sample: Duration) {
        *average = if average.is_zero() {
            sample
        } else {
            average.mul_f64(0.8) + sample.mul_f64(0.2)
        };
    }

    /// When the encoder collects its next group, starting with rows pacing may hold
    /// (`may_hold`; a transaction across tables is never held). While pacing holds the
    /// next commit and none is in flight, it gathers until the hold ends: the group
    /// then carries what the commit would have carried anyway, as one group.
    pub(super) fn plan(&self, may_hold: bool) -> Plan {
        match self.gather_until() {
            Some(until) if may_hold && self.commit_started.is_none() => Plan::GatherUntil(until),
            _ => self.unheld_plan(),
        }
    }

    /// Until when pacing still holds the next commit, if it does.
    pub(super) fn holding(&self) -> Option<Instant> {
        self.hold_until.filter(|t| *t > Instant::now())
    }

    /// Until when the encoder gathers for a held commit: one encoding (the recent
    /// average) before the hold ends, so that the group reaches the stage while it
    /// still holds. A group that came later would be committed after the next hold,
    /// and the one gathered meanwhile after the hold after that.
    pub(super) fn gather_until(&self) -> Option<Instant> {
        self.holding()
            .map(|until| until.checked_sub(self.encode).unwrap_or(until))
    }

    fn unheld_plan(&self) -> Plan {
        let gathers = self.commit > self.encode + GATHER_MAX;
        let Some(started) = self.commit_started else {
            // The first caller back from a commit would otherwise be committed alone,
            // and the rest, arriving during that commit, in the next: two round trips
            // where one does. Long after a commit, nobody is on the way back.
            // A caller that comes back alone (one in flight, or several tables) has
            // nobody to wait for.
            return match self.commit_ended {
                Some(ended) if gathers && self.released > 1 && ended.elapsed() < self.commit => {
                    Plan::GatherSince {
                        ended,
                        released: self.released,
                    }
                }
                _ => Plan::Now,
            };
        };
        if gathers {
            return Plan::Gather;
        }
        // Overlap: collect when the commit is expected to end, less the encoding time.
        let ready_at = started + self.commit;
        let wait = ready_at
            .checked_duration_since(Instant::now() + self.encode)
            .unwrap_or_default()
            .min(self.commit);
        Plan::Overlap(wait)
    }
}

/// Collects a group starting with `first`: whatever else waits, or arrives within
/// `linger`, or while `gathering` (see [`Gathering`]); up to the group limits. A
/// submission that would overflow the group is carried into the next one.
pub(super) async fn collect(
    first: Pending,
    queue: &mut mpsc::UnboundedReceiver<Pending>,
    carry: &mut Option<Pending>,
    (options, gate): (&CommitterOptions, &ShredGate),
    gathering: Option<Gathering>,
) -> Vec<Pending> {
    let mut rows = first.submission.batch.num_rows();
    let mut bytes = first.submission.bytes;
    // Rows committing together with other tables' (`commit.atomic_tables`) share a group
    // with rows of no other such call: the group's commit is that one transaction's part.
    let mut together = first.submission.together.is_some();
    let mut group = vec![first];
    let started = Instant::now();
    let linger_until = started + options.linger;
    while rows < options.max_group_rows && bytes < options.max_group_bytes {
        let next = match queue.try_recv() {
            Ok(p) => Some(p),
            Err(_) => {
                // Enabled before the gate is asked, so a call that begins to wait after
                // is seen.
                let joins = gate.call_joins_line();
                tokio::pin!(joins);
                joins.as_mut().enable();
                let now = Instant::now();
                // Callers that wait for room to shred come only once this group is
                // taken: gathering stops.
                let gather_until = match gathering {
                    Some(g) if !g.complete(group.len()) && !gate.is_full() => g.next_deadline(now),
                    _ => now,
                };
                let until = linger_until.max(gather_until);
                let gathers = gather_until > linger_until;
                if until <= now {
                    None
                } else {
                    tokio::select! {
                        p = tokio::time::timeout_at(until.into(), queue.recv()) => p.ok().flatten(),
                        // The gate may be full now: asked again.
                        _ = &mut joins, if gathers => continue,
                    }
                }
            }
        };
        let Some(p) = next else { break };
        // A transaction across tables is not held (its other tables' parts wait for
        // this one): it joins the held group and ends the gathering.
        if gathering.is_some_and(|g| g.held) && !together && p.submission.together.is_some() {
            group.push(p);
            break;
        }
        let (r, b) = (p.submission.batch.num_rows(), p.submission.bytes);
        let joins_another = together && p.submission.together.is_some();
        if joins_another || rows + r > options.max_group_rows || bytes + b > options.max_group_bytes
        {
            *carry = Some(p);
            break;
        }
        rows += r;
        bytes += b;
        together |= p.submission.together.is_some();
        group.push(p);
    }
    group
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::committer::{Claim, Ledger, Submission};
    use crate::commit::expire::Retention;
    use crate::commit::offsets::SourceOffsets;
    use crate::config::ParquetConfig;
    use arrow_array::Int64Array;
    use arrow_array::RecordBatch;
    use std::sync::{Arc, Mutex};
    use tokio::sync::oneshot;

    fn pending(rows: usize, bytes: usize) -> Pending {
        let column: Vec<i64> = (0..rows as i64).collect();
        let batch = RecordBatch::try_from_iter([(
            "id",
            Arc::new(Int64Array::from(column)) as arrow_array::ArrayRef,
        )])
        .unwrap();
        Pending {
            epoch: None,
            _unanswered: Default::default(),
            _claim: Claim {
                id: 0,
                ticket: 0,
                ledger: Arc::new(Mutex::new(Ledger::default())),
            },
            submission: Submission {
                batch,
                deletes: None,
                bytes,
                schema_id: 0,
                offsets: SourceOffsets::default(),
                together: None,
                room: None,
            },
            reply: Some(oneshot::channel().0),
        }
    }

    fn options(linger_ms: u64, max_rows: usize, max_bytes: usize) -> CommitterOptions {
        CommitterOptions {
            identifier_fields: Vec::new(),
            case_sensitive_columns: true,
            merge_strategy: None,
            reads_delete_files: true,
            max_retries: 0,
            retry_timeout: Duration::ZERO,
            cleanup_on_failure: true,
            manifest_merge: true,
            retention: Retention {
                max_age: Duration::ZERO,
                max_snapshots: 500,
            },
            linger: Duration::from_millis(linger_ms),
            max_group_rows: max_rows,
            max_group_bytes: max_bytes,
            writer_id: None,
            callers: None,
            stats: Arc::default(),
            order: Arc::default(),
            parquet: ParquetConfig::default(),
            storage_props: Default::default(),
            commit_slots: Default::default(),
        }
    }

    fn sizes(group: &[Pending]) -> Vec<usize> {
        group
            .iter()
            .map(|p| p.submission.batch.num_rows())
            .collect()
    }

    #[tokio::test]
    async fn groups_take_what_waits_up_to_the_limits() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for rows in [10, 20, 30, 40] {
            tx.send(pending(rows, rows * 100)).unwrap();
        }
        let mut carry = None;
        let first = rx.recv().await.unwrap();
        let group = collect(
            first,
            &mut rx,
            &mut carry,
            (&options(0, 70, usize::MAX), &ShredGate::default()),
            None,
        )
        .await;
        assert_eq!(sizes(&group), vec![10, 20, 30]);
        // The 40-row batch would overflow: it starts the next group.
        assert_eq!(
            carry.as_ref().map(|p| p.submission.batch.num_rows()),
            Some(40)
        );
        // Bytes bound a group too.
        let (tx, mut rx) = mpsc::unbounded_channel();
        for rows in [1, 1, 1] {
            tx.send(pending(rows, 1_000)).unwrap();
        }
        let mut carry = None;
        let first = rx.recv().await.unwrap();
        let open = ShredGate::default();
        let group = collect(
            first,
            &mut rx,
            &mut carry,
            (&options(0, 100, 2_500), &open),
            None,
        )
        .await;
        assert_eq!(group.len(), 2);
        assert!(carry.is_some());
    }

    #[tokio::test]
    async fn linger_waits_for_late_batches_and_zero_linger_does_not() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let late = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            late.send(pending(2, 10)).unwrap();
        });
        let mut carry = None;
        let group = collect(
            pending(1, 10),
            &mut rx,
            &mut carry,
            (&options(0, 100, 1_000), &ShredGate::default()),
            None,
        )
        .await;
        assert_eq!(sizes(&group), vec![1]);
        let group = collect(
            pending(1, 10),
            &mut rx,
            &mut carry,
            (&options(200, 100, 1_000), &ShredGate::default()),
            None,
        )
        .await;
        assert_eq!(sizes(&group), vec![1, 2]);
        drop(tx);
    }

    #[tokio::test]
    async fn gathering_waits_for_every_caller_when_their_number_is_known() {
        // Three callers come back 10 ms apart, as a host pipeline hands them batches.
        let spaced = |tx: mpsc::UnboundedSender<Pending>| {
            tokio::spawn(async move {
                for rows in [2, 3] {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    let _ = tx.send(pending(rows, 10));
                }
            })
        };
        let opts = options(0, 100, 1_000);
        let open = ShredGate::default();
        let commit = Duration::from_millis(200);

        // Unknown number of callers: only what arrives within a millisecond joins.
        let (tx, mut rx) = mpsc::unbounded_channel();
        spaced(tx.clone());
        let g = Gathering::new(None, commit, Instant::now());
        let group = collect(pending(1, 10), &mut rx, &mut None, (&opts, &open), Some(g)).await;
        assert_eq!(sizes(&group), vec![1]);
        drop((tx, rx));

        // Three callers: the group waits for all of them, and ends as soon as it has them.
        let (tx, mut rx) = mpsc::unbounded_channel();
        spaced(tx.clone());
        let t0 = Instant::now();
        let g = Gathering::new(Some(3), commit, t0);
        let group = collect(pending(1, 10), &mut rx, &mut None, (&opts, &open), Some(g)).await;
        assert_eq!(sizes(&group), vec![1, 2, 3]);
        assert!(t0.elapsed() < commit, "waited past the last caller");

        // The wait is bounded by the commit's duration when a caller does not come back.
        let (tx2, mut rx2) = mpsc::unbounded_channel::<Pending>();
        let t0 = Instant::now();
        let g = Gathering::new(Some(3), Duration::from_millis(30), t0);
        let group = collect(pending(1, 10), &mut rx2, &mut None, (&opts, &open), Some(g)).await;
        assert_eq!(sizes(&group), vec![1]);
        assert!(t0.elapsed() >= Duration::from_millis(30));
        drop((tx, tx2));

        // Callers waiting for room to shred cannot come until the group is taken: a
        // full gate ends the gathering at once.
        let (tx, mut rx) = mpsc::unbounded_channel();
        spaced(tx.clone());
        let full = Arc::new(ShredGate::default());
        let _rooms = full.fill().await;
        let t0 = Instant::now();
        let g = Gathering::new(Some(3), commit, t0);
        let group = collect(pending(1, 10), &mut rx, &mut None, (&opts, &full), Some(g)).await;
        assert_eq!(sizes(&group), vec![1]);
        assert!(
            t0.elapsed() < Duration::from_millis(10),
            "waited for callers that cannot come"
        );
        drop(tx);
    }

    #[tokio::test]
    async fn a_call_that_starts_to_wait_for_room_ends_the_gathering() {
        use super::super::gate::Standing;
        let gate = Arc::new(ShredGate::new(1_000));
        let rooms = gate.rooms(8, 10).await;
        assert!(!gate.is_full());
        // A large call comes once the gathering waits: it finds no room.
        let late = {
            let gate = gate.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                let never = tokio::sync::Notify::new();
                gate.enter((2_000, 0), || Standing::InLine, &never).await
            })
        };
        let (_tx, mut rx) = mpsc::unbounded_channel::<Pending>();
        let t0 = Instant::now();
        let g = Gathering::new(Some(16), Duration::from_millis(500), t0);
        let opts = options(0, 100, 1_000);
        let group = collect(pending(1, 10), &mut rx, &mut None, (&opts, &gate), Some(g)).await;
        assert_eq!(sizes(&group), vec![1]);
        assert!(gate.is_full());
        assert!(
            t0.elapsed() < Duration::from_millis(100),
            "gathered for callers that cannot come: {:?}",
            t0.elapsed()
        );
        late.abort();
        drop(rooms);
    }

    #[test]
    fn slow_commits_gather_and_slow_encoding_overlaps() {
        let mut pace = Pace {
            commit_started: None,
            commit_ended: None,
            released: 0,
            commit: Duration::from_millis(40),
            encode: Duration::from_millis(5),
            hold_until: None,
        };
        assert!(matches!(pace.plan(true), Plan::Now), "nothing in flight");
        let just_now = Instant::now();
        pace.commit_ended = Some(just_now);
        pace.released = 1;
        assert!(
            matches!(pace.plan(true), Plan::Now),
            "the one caller a commit released has nobody to wait for"
        );
        pace.released = 3;
        assert!(
            matches!(pace.plan(true), Plan::GatherSince { ended, released: 3 } if ended == just_now),
            "callers released by a commit that just ended are on their way back"
        );
        if let Some(earlier) = just_now.checked_sub(Duration::from_millis(41)) {
            pace.commit_ended = Some(earlier);
            assert!(
                matches!(pace.plan(true), Plan::Now),
                "a commit ago: nobody is coming"
            );
        }
        pace.commit_started = Some(Instant::now());
        assert!(matches!(pace.plan(true), Plan::Gather));
        pace.encode = Duration::from_millis(60);
        assert!(matches!(pace.plan(true), Plan::Overlap(w) if w.is_zero()));
        pace.encode = Duration::from_millis(38);
        assert!(matches!(pace.plan(true), Plan::Overlap(w) if w <= Duration::from_millis(2)));
    }

    #[test]
    fn a_held_commit_gathers_until_its_hold_ends() {
        let until = Instant::now() + Duration::from_secs(60);
        let mut pace = Pace {
            commit: Duration::from_millis(40),
            encode: Duration::from_millis(5),
            hold_until: Some(until),
            ..Pace::default()
        };
        // It gathers until one encoding before the hold ends.
        let gathered = until - Duration::from_millis(5);
        assert!(matches!(pace.plan(true), Plan::GatherUntil(t) if t == gathered));
        // Rows pacing does not hold (a transaction across tables) plan as before.
        assert!(matches!(pace.plan(false), Plan::Now));
        // A commit in flight: its callers are gathered once it ends (the encoder then
        // asks whether a hold followed it).
        pace.commit_started = Some(Instant::now());
        assert!(matches!(pace.plan(true), Plan::Gather));
        pace.commit_started = None;
        // A hold that has ended holds nothing.
        pace.hold_until = Instant::now().checked_sub(Duration::from_millis(1));
        assert!(matches!(pace.plan(true), Plan::Now));
    }

    #[tokio::test]
    async fn a_held_gathering_takes_calls_however_far_apart_until_the_hold_ends() {
        // Calls 15 ms apart: far more than the gap an unheld gathering waits for.
        let spaced = |tx: mpsc::UnboundedSender<Pending>| {
            tokio::spawn(async move {
                for rows in [2, 3, 4] {
                    tokio::time::sleep(Duration::from_millis(15)).await;
                    let _ = tx.send(pending(rows, 10));
                }
            })
        };
        let opts = options(0, 100, 1_000);
        let open = ShredGate::default();

        // The host did not say how many calls it runs: all that come before the hold ends.
        let (tx, mut rx) = mpsc::unbounded_channel();
        spaced(tx.clone());
        let t0 = Instant::now();
        let g = Gathering::held_until(None, t0 + Duration::from_millis(200));
        let group = collect(pending(1, 10), &mut rx, &mut None, (&opts, &open), Some(g)).await;
        assert_eq!(sizes(&group), vec![1, 2, 3, 4]);
        assert!(
            t0.elapsed() >= Duration::from_millis(200),
            "ended before the hold"
        );
        drop((tx, rx));

        // Every caller in: nothing more can come, so the group is taken at once.
        let (tx, mut rx) = mpsc::unbounded_channel();
        spaced(tx.clone());
        let t0 = Instant::now();
        let g = Gathering::held_until(Some(3), t0 + Duration::from_secs(5));
        let group = collect(pending(1, 10), &mut rx, &mut None, (&opts, &open), Some(g)).await;
        assert_eq!(sizes(&group), vec![1, 2, 3]);
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "waited past the last caller"
        );
        drop(tx);
    }

    #[tokio::test]
    async fn a_transaction_across_tables_ends_a_held_gathering() {
        let dir = tempfile::tempdir().unwrap();
        let (catalog, idents) =
            crate::catalog::sql::catalog_with_tables(dir.path(), &["a", "b"]).await;
        let mut parties = crate::commit::together::parties(Arc::new(catalog), &idents);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let late = tx.clone();
        let mut together = pending(2, 10);
        together.submission.together = Some(parties.remove(0));
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let _ = late.send(together);
        });
        let t0 = Instant::now();
        let g = Gathering::held_until(None, t0 + Duration::from_secs(5));
        let opts = options(0, 100, 1_000);
        let group = collect(
            pending(1, 10),
            &mut rx,
            &mut None,
            (&opts, &ShredGate::default()),
            Some(g),
        )
        .await;
        assert_eq!(sizes(&group), vec![1, 2]);
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "the transaction's part waited out the hold: {:?}",
            t0.elapsed()
        );
        drop(tx);
    }
}
