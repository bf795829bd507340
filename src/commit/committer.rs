//! The per-table group committer.
//!
//! Write calls (up to the host's `max_in_flight` at once, from any thread) shred their
//! messages themselves and [`TableCommitter::submit`] the Arrow batch. Two tasks per
//! table then form a pipeline:
//!
//! 1. the **encoder** takes every submission waiting (up to `max_group_rows` /
//!    `max_group_bytes`, after `linger`) and writes them together as Parquet data files,
//!    one rolling writer per partition;
//! 2. the **commit stage** takes every encoded group that is ready and commits them as
//!    one snapshot, retrying conflicts on the new head.
//!
//! While a commit is in flight the encoder already writes the next group, and callers
//! keep shredding, so the catalog round trip is amortised over everything that arrived
//! meanwhile. Each call's future resolves when the snapshot holding its rows is
//! committed (or definitively not). A cancelled call's rows may still commit: their
//! outcome is unknown to the caller, which is why exactly-once keeps its claims here,
//! in the [`Ledger`], and not in the call.

use crate::sync::LockExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use iceberg::TableIdent;
use iceberg::io::FileIO;
use iceberg::spec::{DataFile, FormatVersion, TableMetadata};
use tokio::sync::{mpsc, oneshot, watch};

use super::expire::{
    Retention, delete_unreachable, expired_refs, expired_snapshots, removal_request,
};
use super::manifest_cache::ManifestCache;
use super::merge::MergePolicy;
use super::offsets::{SourceOffsets, committed_offsets};
use super::snapshot::{
    Attempt, Cached, ManifestListCache, Rebase, SnapshotChanges, find_commit, prepare_snapshot,
};
use super::staging::{STAGE_MAX_INPUT_BYTES, StagedFile, Staging, upload};
use crate::catalog::{Catalog, LoadedTable};
use crate::config::{MergeStrategy, ParquetConfig};
use crate::error::{Error, ErrorKind, Result};
use crate::rowops::KeyColumns;
use crate::rowops::removal::{Removal, RemoveKeys};
use crate::rowops::resolve::resolve_group;
use crate::stats::WriterStats;
use crate::write::{FileSettings, file_settings, write_data_files, write_equality_delete_files};

/// How the committer behaves; from the `commit` section of the config.
#[derive(Debug, Clone)]
pub struct CommitterOptions {
    pub max_retries: u32,
    /// How long conflicts are retried (see `CommitStage::commit_with_retries`).
    pub retry_timeout: Duration,
    pub cleanup_on_failure: bool,
    pub manifest_merge: bool,
    /// floe's retention defaults (`commit.max_snapshot_age`, `commit.max_snapshots`).
    pub retention: Retention,
    pub linger: Duration,
    pub max_group_rows: usize,
    pub max_group_bytes: usize,
    pub writer_id: Option<String>,
    /// The configured key for upserts and deletes (empty: the table's own).
    pub identifier_fields: Vec<String>,
    /// The configured strategy; `None` follows the table (see [`merge_strategy`]).
    pub merge_strategy: Option<MergeStrategy>,
    pub parquet: ParquetConfig,
    /// The host's concurrent calls, when it said (see [`Gathering`]).
    pub callers: Option<usize>,
    /// The writer's counters, which every table's commit stage adds to.
    pub stats: Arc<WriterStats>,
}

/// What the committer currently knows of its table; shared read-only with callers.
pub struct TableView {
    pub table: LoadedTable,
    pub file_io: FileIO,
    pub settings: FileSettings,
    pub merge: MergePolicy,
    /// The key upserts and deletes match by; `None` for a table without one.
    pub keys: Option<Arc<KeyColumns>>,
    /// Why the table's own identifier fields cannot serve as the key (upserts and deletes
    /// then fail with this reason; inserts are unaffected).
    pub key_problem: Option<String>,
    /// How this table's upserts and deletes are written.
    pub strategy: MergeStrategy,
}

impl TableView {
    pub fn new(table: LoadedTable, file_io: FileIO, options: &CommitterOptions) -> Result<Self> {
        // Write modes floe cannot follow only matter for upserts and deletes.
        let (strategy, strategy_problem) =
            match merge_strategy(options.merge_strategy, &table.metadata) {
                Ok(s) => (s, None),
                Err(e) => (
                    options.merge_strategy.unwrap_or_default(),
                    Some(e.to_string()),
                ),
            };
        let keys =
            KeyColumns::for_table(table.metadata.current_schema(), &options.identifier_fields)
                .and_then(|keys| match &keys {
                    Some(k) if strategy == MergeStrategy::MergeOnRead => {
                        check_merge_on_read(&table.metadata, k).map(|()| keys)
                    }
                    Some(_) if strategy == MergeStrategy::MergeOnReadPositional => {
                        crate::rowops::positional::check_table(&table.metadata).map(|()| keys)
                    }
                    Some(_) => Ok(keys),
                    None => Ok(None),
                });
        // A configured key must work; a key the table brings (set by another tool) only
        // matters once a message upserts or deletes, so inserts go on without it.
        let (keys, key_problem) = match keys {
            _ if strategy_problem.is_some() => (None, strategy_problem),
            Ok(keys) => (keys.map(Arc::new), None),
            Err(e) if options.identifier_fields.is_empty() => (None, Some(e.to_string())),
            Err(e) => return Err(e),
        };
        Ok(TableView {
            settings: file_settings(&options.parquet, &table.metadata)?,
            merge: MergePolicy::for_table(options.manifest_merge, &table.metadata)?,
            keys,
            key_problem,
            strategy,
            table,
            file_io,
        })
    }

    pub fn schema_id(&self) -> i32 {
        self.table.metadata.current_schema_id()
    }
}

/// The strategy for a table: the configured one, else the table's write modes, else
/// merge-on-read. A configured strategy the table's write modes contradict is a config
/// error: another engine writing this table would do the opposite, and a reader
/// (Unity Catalog, Snowflake) may depend on copy-on-write.
fn merge_strategy(
    configured: Option<MergeStrategy>,
    metadata: &TableMetadata,
) -> Result<MergeStrategy> {
    let mode = |key: &str| -> Result<Option<MergeStrategy>> {
        match metadata
            .properties()
            .get(key)
            .map(|v| v.trim().to_ascii_lowercase())
        {
            None => Ok(None),
            Some(v) if v == "copy-on-write" => Ok(Some(MergeStrategy::CopyOnWrite)),
            Some(v) if v == "merge-on-read" => Ok(Some(MergeStrategy::MergeOnRead)),
            Some(v) => Err(Error::config(format!(
                "table property {key}={v:?} is neither copy-on-write nor merge-on-read"
            ))),
        }
    };
    let (update, delete) = (mode("write.update.mode")?, mode("write.delete.mode")?);
    let table = match (update, delete) {
        (Some(u), Some(d)) if u != d => {
            return Err(Error::config(
                "the table's write.update.mode and write.delete.mode differ; floe writes a \
                 commit's upserts and deletes with one strategy: set merge_strategy, or make \
                 them agree",
            ));
        }
        (u, d) => u.or(d),
    };
    match (configured, table) {
        (Some(c), Some(t)) if c.write_mode() != t.write_mode() => Err(Error::config(format!(
            "merge_strategy is {} but the table's write.update.mode / write.delete.mode say {}; \
             change one of them (or leave merge_strategy unset to follow the table)",
            c.name(),
            t.name()
        ))),
        (Some(c), _) => Ok(c),
        (None, Some(t)) => {
            let positional = metadata
                .properties()
                .get(crate::config::MERGE_ON_READ_DELETES)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("position"));
            let t = match t {
                MergeStrategy::MergeOnRead if positional => MergeStrategy::MergeOnReadPositional,
                t => t,
            };
            // Debug: views are rebuilt whenever a property changes (with exactly-once,
            // every commit).
            tracing::debug!(
                "upserts and deletes use {} (the table's write modes; merge_strategy is unset)",
                t.name()
            );
            Ok(t)
        }
        (None, None) => Ok(MergeStrategy::MergeOnRead),
    }
}

/// Merge-on-read writes equality deletes: they need format v2 or later, and floe scopes
/// them to the partition of their key, so the partition must follow from the key.
fn check_merge_on_read(metadata: &TableMetadata, keys: &KeyColumns) -> Result<()> {
    if metadata.format_version() == FormatVersion::V1 {
        return Err(Error::config(
            "upserts and deletes (merge-on-read) need an Iceberg format v2 table; this one is v1",
        ));
    }
    let schema = metadata.current_schema();
    if let Some(name) = keys
        .field_ids
        .iter()
        .zip(&keys.names)
        .find_map(|(&id, name)| {
            let uuid = iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Uuid);
            (schema.field_by_id(id).map(|f| f.field_type.as_ref()) == Some(&uuid)).then_some(name)
        })
    {
        return Err(Error::config(format!(
            "identifier field {name:?} is a uuid: equality deletes on uuid columns are not \
             applied correctly by the readers floe is tested with (DuckDB 1.5.5 and \
             iceberg-rust 0.10.1 both fail), so merge-on-read refuses uuid keys"
        )));
    }
    let spec = metadata.default_partition_spec();
    if let Some(field) = spec
        .fields()
        .iter()
        .find(|f| !keys.field_ids.contains(&f.source_id))
    {
        return Err(Error::config(format!(
            "the table is partitioned by {:?}, which is not derived from the identifier fields \
             ({}): merge-on-read deletes are scoped to the key's partition, so every partition \
             source column must be an identifier field",
            field.name,
            keys.names.join(", ")
        )));
    }
    Ok(())
}

/// Rows handed to the committer by one write call.
pub struct Submission {
    /// Rows to write, in the table schema (none for a call that only deletes).
    pub batch: RecordBatch,
    /// Keys the call upserted or deleted, in the key schema; `None` for inserts only.
    pub deletes: Option<RecordBatch>,
    /// JSON bytes the rows came from (for `max_group_bytes`).
    pub bytes: usize,
    /// Schema the batch was shredded with.
    pub schema_id: i32,
    /// Exactly-once: the offsets of these rows.
    pub offsets: SourceOffsets,
}

/// Where a submission's rows went.
#[derive(Debug, Clone, Copy)]
pub struct Committed {
    pub snapshot_id: i64,
}

/// Exactly-once state: offsets committed under the writer id, and offsets claimed by
/// submissions still on their way (so a replayed message is not written twice while
/// its first copy is in flight).
#[derive(Default)]
pub struct Ledger {
    pub committed: SourceOffsets,
    in_flight: HashMap<u64, Claimed>,
}

/// Claimed positions of one call: source → offset → hash of the message's payload.
pub type Claimed = HashMap<String, HashMap<i64, u64>>;

impl Ledger {
    /// The payload hash of the message another call is committing at this position.
    pub fn in_flight(&self, source: &str, offset: i64) -> Option<u64> {
        self.in_flight
            .values()
            .find_map(|c| c.get(source)?.get(&offset).copied())
    }

    /// Every offset claimed by a call in flight.
    pub fn claimed_offsets(&self) -> SourceOffsets {
        let mut all = SourceOffsets::default();
        for (source, offsets) in self.in_flight.values().flatten() {
            offsets
                .keys()
                .for_each(|&offset| all.insert(source, offset));
        }
        all
    }

    pub fn claim(&mut self, claim: u64, claimed: Claimed) {
        self.in_flight.insert(claim, claimed);
    }

    pub fn release(&mut self, claim: u64) {
        self.in_flight.remove(&claim);
    }
}

/// A call's exactly-once claim in the ledger, released when dropped: however the call
/// ends — an error, a panic, a cancelled future, a committer task that dies — its
/// positions do not stay "in flight" for ever.
pub struct Claim {
    id: u64,
    ledger: Arc<Mutex<Ledger>>,
}

impl Claim {
    /// Records the positions this call is about to write (under the ledger's lock, which
    /// the caller holds while it checks them).
    pub fn hold(&self, ledger: &mut Ledger, claimed: Claimed) {
        ledger.claim(self.id, claimed);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.ledger.locked().release(self.id);
    }
}

struct Pending {
    /// Released when the submission is answered or dropped.
    _claim: Claim,
    submission: Submission,
    reply: Option<oneshot::Sender<Result<Committed>>>,
}

/// Answers a submission. Dropping it first releases its exactly-once claim (once, in
/// `Drop`), so a caller that retries at once finds the claim free.
fn finish(mut pending: Pending, result: Result<Committed>) {
    let reply = pending.reply.take();
    drop(pending);
    if let Some(reply) = reply {
        // The caller may have been cancelled; its rows' fate is then only in the table.
        let _ = reply.send(result);
    }
}

pub struct TableCommitter {
    queue: mpsc::UnboundedSender<Pending>,
    view: watch::Receiver<Arc<TableView>>,
    ledger: Arc<Mutex<Ledger>>,
    next_claim: AtomicU64,
}

impl TableCommitter {
    /// Starts the encoder and commit tasks on the current Tokio runtime.
    pub fn start(
        catalog: Arc<dyn Catalog>,
        view: TableView,
        options: Arc<CommitterOptions>,
    ) -> Result<Self> {
        let mut ledger = Ledger::default();
        if let Some(writer_id) = &options.writer_id {
            ledger.committed = committed_offsets(&view.table.metadata, writer_id)?;
        }
        let ledger = Arc::new(Mutex::new(ledger));
        let (queue_tx, queue_rx) = mpsc::unbounded_channel();
        // One encoded group waits while another commits: enough to overlap the two
        // stages without encoding far ahead of what the catalog accepts.
        let (encoded_tx, encoded_rx) = mpsc::channel(1);
        let (view_tx, view_rx) = watch::channel(Arc::new(view));
        let pace = Arc::new(Mutex::new(Pace::default()));
        let (commits_done, commits_done_rx) = watch::channel(0u64);
        tokio::spawn(encode_loop(
            queue_rx,
            encoded_tx,
            view_rx.clone(),
            pace.clone(),
            commits_done_rx,
            options.clone(),
        ));
        tokio::spawn(
            CommitStage {
                catalog,
                view: view_tx,
                ledger: ledger.clone(),
                options,
                last_expiry: None,
                cleanup_running: Arc::default(),
                manifest_list: None,
                manifests: ManifestCache::default(),
                pace,
                commits_done,
            }
            .run(encoded_rx),
        );
        Ok(TableCommitter {
            queue: queue_tx,
            view: view_rx,
            ledger,
            next_claim: AtomicU64::new(1),
        })
    }

    /// The table as the committer last saw it.
    pub fn view(&self) -> Arc<TableView> {
        self.view.borrow().clone()
    }

    pub fn ledger(&self) -> &Mutex<Ledger> {
        &self.ledger
    }

    /// Whether the committer's tasks are gone (only after a panic in one of them); the
    /// writer then opens the table afresh.
    pub fn is_stopped(&self) -> bool {
        self.queue.is_closed()
    }

    /// A fresh id under which a call claims offsets in the ledger.
    pub fn new_claim(&self) -> Claim {
        Claim {
            id: self.next_claim.fetch_add(1, Ordering::Relaxed),
            ledger: self.ledger.clone(),
        }
    }

    /// Hands rows to the pipeline and waits until they are committed. `claim` (from
    /// [`Self::new_claim`], possibly holding offsets in the ledger) is released when the
    /// outcome is known, even if this future is dropped before.
    pub async fn submit(&self, claim: Claim, submission: Submission) -> Result<Committed> {
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            _claim: claim,
            submission,
            reply: Some(reply),
        };
        if self.queue.send(pending).is_err() {
            // The returned submission was dropped, releasing its claim.
            return Err(Error::new(
                ErrorKind::Unavailable,
                "the table's committer has stopped",
            ));
        }
        answer.await.unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::CommitStateUnknown,
                "the table's committer stopped before answering",
            ))
        })
    }
}

/// A group of submissions written as data files, waiting for its commit.
struct EncodedGroup {
    data_files: Vec<DataFile>,
    /// Equality deletes of the group's upserts and deletes (merge-on-read).
    delete_files: Vec<DataFile>,
    /// Copy-on-write and positional: the keys the group's upserts and deletes touch (with
    /// the key they were resolved by, and how), removed from the table's files when the
    /// group commits.
    touched: Option<(RecordBatch, Arc<KeyColumns>, Removal)>,
    /// The data files' bytes when they were staged in memory (small groups): uploaded
    /// with the manifest and the manifest list.
    staged: Vec<StagedFile>,
    /// The table (uuid), schema and spec the files were written for.
    table_uuid: uuid::Uuid,
    schema_id: i32,
    spec_id: i32,
    pendings: Vec<Pending>,
}

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
struct Pace {
    commit_started: Option<Instant>,
    /// When the last commit ended: its callers are on their way back until about one
    /// commit's duration after it.
    commit_ended: Option<Instant>,
    /// How many submissions the last commit answered: at most that many callers are on
    /// their way back.
    released: usize,
    commit: Duration,
    encode: Duration,
}

/// After a commit ends, how long the encoder keeps taking submissions that arrive close
/// together (callers released by the commit resubmit within a millisecond or two).
const GATHER_GAP: Duration = Duration::from_millis(1);
const GATHER_MAX: Duration = Duration::from_millis(5);
/// The longest wait for the rest of the callers, whatever a commit takes.
const GATHER_CALLERS_MAX: Duration = Duration::from_secs(1);

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
struct Gathering {
    callers: Option<usize>,
    until: Instant,
}

impl Gathering {
    fn new(callers: Option<usize>, commit: Duration, now: Instant) -> Self {
        let wait = match callers {
            Some(_) => commit.clamp(GATHER_MAX, GATHER_CALLERS_MAX),
            None => GATHER_MAX,
        };
        Gathering {
            callers,
            until: now + wait,
        }
    }

    fn complete(&self, group_len: usize) -> bool {
        self.callers.is_some_and(|n| group_len >= n)
    }

    /// Until when to wait for the next submission.
    fn next_deadline(&self, now: Instant) -> Instant {
        match self.callers {
            Some(_) => self.until,
            None => (now + GATHER_GAP).min(self.until),
        }
    }
}

enum Plan {
    Now,
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
    fn smooth(average: &mut Duration, sample: Duration) {
        *average = if average.is_zero() {
            sample
        } else {
            average.mul_f64(0.8) + sample.mul_f64(0.2)
        };
    }

    fn plan(&self) -> Plan {
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
async fn collect(
    first: Pending,
    queue: &mut mpsc::UnboundedReceiver<Pending>,
    carry: &mut Option<Pending>,
    options: &CommitterOptions,
    gathering: Option<Gathering>,
) -> Vec<Pending> {
    let mut rows = first.submission.batch.num_rows();
    let mut bytes = first.submission.bytes;
    let mut group = vec![first];
    let started = Instant::now();
    let linger_until = started + options.linger;
    while rows < options.max_group_rows && bytes < options.max_group_bytes {
        let next = match queue.try_recv() {
            Ok(p) => Some(p),
            Err(_) => {
                let now = Instant::now();
                let gather_until = match gathering {
                    Some(g) if !g.complete(group.len()) => g.next_deadline(now),
                    _ => now,
                };
                let until = linger_until.max(gather_until);
                if until <= now {
                    None
                } else {
                    tokio::time::timeout_at(until.into(), queue.recv())
                        .await
                        .ok()
                        .flatten()
                }
            }
        };
        let Some(p) = next else { break };
        let (r, b) = (p.submission.batch.num_rows(), p.submission.bytes);
        if rows + r > options.max_group_rows || bytes + b > options.max_group_bytes {
            *carry = Some(p);
            break;
        }
        rows += r;
        bytes += b;
        group.push(p);
    }
    group
}

async fn encode_loop(
    mut queue: mpsc::UnboundedReceiver<Pending>,
    encoded: mpsc::Sender<EncodedGroup>,
    view: watch::Receiver<Arc<TableView>>,
    pace: Arc<Mutex<Pace>>,
    mut commits_done: watch::Receiver<u64>,
    options: Arc<CommitterOptions>,
) {
    let mut carry = None;
    loop {
        // Wait until the commit stage can take a group before collecting one: batches
        // that arrive meanwhile join this group instead of trailing in groups of one.
        let Ok(slot) = encoded.reserve().await else {
            return;
        };
        let first = match carry.take() {
            Some(p) => p,
            None => match queue.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        commits_done.borrow_and_update();
        let plan = pace.locked().plan();
        let gathering = match plan {
            Plan::Now => None,
            Plan::Overlap(wait) => {
                tokio::time::sleep(wait).await;
                None
            }
            Plan::Gather => {
                // The stage clears `commit_started` before announcing the end, so an end
                // that came between the check and here is not missed.
                let _ = commits_done.changed().await;
                let commit = pace.locked().commit;
                Some(Gathering::new(options.callers, commit, Instant::now()))
            }
            Plan::GatherSince { ended, released } => {
                let commit = pace.locked().commit;
                let callers = options.callers.map(|n| n.min(released));
                Some(Gathering::new(callers, commit, ended))
            }
        };
        let group = collect(first, &mut queue, &mut carry, &options, gathering).await;
        let current = view.borrow().clone();
        let schema_id = current.schema_id();
        let (fresh, stale): (Vec<Pending>, Vec<Pending>) = group
            .into_iter()
            .partition(|p| p.submission.schema_id == schema_id);
        for p in stale {
            let e = Error::new(
                ErrorKind::Unavailable,
                "the table's schema changed after the batch was shredded; retry the batch",
            );
            finish(p, Err(e));
        }
        if fresh.is_empty() {
            continue;
        }
        let t0 = Instant::now();
        let (batches, deletes) = match group_rows(&fresh, &current) {
            Ok(rows) => rows,
            Err(e) => {
                fail_all(fresh, &e);
                continue;
            }
        };
        let n = batches.len();
        let input_bytes: usize = fresh.iter().map(|p| p.submission.bytes).sum();
        let stage = input_bytes <= STAGE_MAX_INPUT_BYTES;
        let written = write_group(
            &batches,
            deletes.as_ref(),
            &current,
            stage,
            current.strategy,
        )
        .await;
        Pace::smooth(&mut pace.locked().encode, t0.elapsed());
        options.stats.record_write(t0.elapsed());
        tracing::debug!("encoded {n} batches in {:?}", t0.elapsed());
        match written {
            Ok((data_files, delete_files, staged)) => {
                let touched = match (&current.keys, deletes, current.strategy.removal()) {
                    (Some(keys), Some(deletes), Some(by)) => Some((deletes, keys.clone(), by)),
                    _ => None,
                };
                let group = EncodedGroup {
                    data_files,
                    delete_files,
                    touched,
                    staged,
                    table_uuid: current.table.metadata.uuid(),
                    schema_id,
                    spec_id: current.table.metadata.default_partition_spec_id(),
                    pendings: fresh,
                };
                slot.send(group);
            }
            Err(e) => fail_all(fresh, &e.context("writing data files")),
        }
    }
}

/// The rows a group writes: each call's rows minus those a later call in the group
/// upserted or deleted, and the keys to delete (see [`crate::rowops::resolve`]).
fn group_rows(
    pendings: &[Pending],
    view: &TableView,
) -> Result<(Vec<RecordBatch>, Option<RecordBatch>)> {
    let parts: Vec<(&RecordBatch, Option<&RecordBatch>)> = pendings
        .iter()
        .map(|p| (&p.submission.batch, p.submission.deletes.as_ref()))
        .collect();
    match &view.keys {
        _ if parts.iter().all(|(_, d)| d.is_none()) => {
            Ok((parts.iter().map(|(b, _)| (*b).clone()).collect(), None))
        }
        Some(keys) => resolve_group(keys, &parts),
        None => Err(Error::new(
            ErrorKind::Unavailable,
            "the table's identifier fields changed after the batch was shredded; retry the batch",
        )),
    }
}

/// A group's data and equality-delete files, and the staged bytes of both.
type WrittenGroup = (Vec<DataFile>, Vec<DataFile>, Vec<StagedFile>);

/// Writes a group's data files and delete files: to scratch memory when `stage` (they
/// are uploaded with the commit's metadata), else in place. The scratch space lives only
/// as long as this call, so a failure halfway leaves nothing behind.
async fn write_group(
    batches: &[RecordBatch],
    deletes: Option<&RecordBatch>,
    view: &TableView,
    stage: bool,
    merge_strategy: MergeStrategy,
) -> Result<WrittenGroup> {
    let metadata = &view.table.metadata;
    let staging = Staging::default();
    let io = if stage { staging.io() } else { &view.file_io };
    let data_files = write_data_files(batches, metadata, io, &view.settings).await?;
    let delete_files = match (deletes, &view.keys) {
        // Copy-on-write and positional remove rows at commit time instead.
        _ if merge_strategy.removal().is_some() => Vec::new(),
        (Some(keys), Some(columns)) => {
            write_equality_delete_files(keys, columns, metadata, io, &view.settings).await?
        }
        _ => Vec::new(),
    };
    if !stage {
        return Ok((data_files, delete_files, Vec::new()));
    }
    let paths = data_files
        .iter()
        .chain(&delete_files)
        .map(|f| f.file_path().to_string())
        .collect();
    let staged = staging.take(paths).await?;
    Ok((data_files, delete_files, staged))
}

/// Splits encoded groups into the runs that may share a snapshot. A group with deletes
/// starts a new one: its deletes must apply to the rows of the groups before it, and
/// within one snapshot they would not (one sequence number); a copy-on-write group
/// rewrites the files as the head has them, so the groups before it must be there.
fn one_snapshot_each(groups: Vec<EncodedGroup>) -> Vec<Vec<EncodedGroup>> {
    let mut runs: Vec<Vec<EncodedGroup>> = Vec::new();
    for g in groups {
        match runs.last_mut() {
            Some(run) if g.delete_files.is_empty() && g.touched.is_none() => run.push(g),
            _ => runs.push(vec![g]),
        }
    }
    runs
}

fn fail_all(pendings: Vec<Pending>, error: &Error) {
    for p in pendings {
        finish(p, Err(error.clone()));
    }
}

/// Backoff before retry `attempt` (1-based): full jitter over 50 ms · 2^attempt, capped
/// at 5 s, so racing writers spread out instead of colliding again.
fn backoff(attempt: u32) -> Duration {
    full_jitter(50, attempt, 5_000)
}

/// Backoff before conflict retry `n` (1-based): a rebase is cheap and the winner has
/// already moved on, so full jitter over 20 ms · 2^n, capped at 1 s.
fn conflict_backoff(n: u32) -> Duration {
    full_jitter(20, n, 1_000)
}

/// A random wait up to `base_ms` · 2^`n` (exponent capped at 7), at most `cap_ms`.
fn full_jitter(base_ms: u64, n: u32, cap_ms: u64) -> Duration {
    let ceiling_ms = (base_ms << n.min(7)).min(cap_ms);
    let jitter = uuid::Uuid::new_v4().as_u64_pair().0 % (ceiling_ms + 1);
    Duration::from_millis(jitter)
}

/// A commit answer counts only if the table's main branch is the snapshot just
/// produced; anything else (a proxy's redirect target, a cache) leaves the outcome
/// unknown, to be settled by looking for the commit id.
fn accepted(table: LoadedTable, snapshot_id: i64) -> Result<LoadedTable> {
    match table.metadata.current_snapshot_id() {
        Some(head) if head == snapshot_id => Ok(table),
        head => Err(Error::new(
            ErrorKind::CommitStateUnknown,
            format!(
                "the catalog answered the commit of snapshot {snapshot_id} with a table whose main branch is {head:?}"
            ),
        )),
    }
}

/// Marks an expiry round's cleanup as running until dropped (also when it panics).
struct RoundRunning(Arc<std::sync::atomic::AtomicBool>);

impl RoundRunning {
    fn start(flag: Arc<std::sync::atomic::AtomicBool>) -> Self {
        flag.store(true, Ordering::Release);
        RoundRunning(flag)
    }
}

impl Drop for RoundRunning {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// How a commit attempt sequence ended.
struct Outcome {
    result: Result<i64>,
    /// Some attempt's outcome was unknown: its files may be referenced by the table.
    maybe_committed: bool,
    /// Metadata files written by the attempts.
    written: Vec<String>,
}

struct CommitStage {
    catalog: Arc<dyn Catalog>,
    view: watch::Sender<Arc<TableView>>,
    ledger: Arc<Mutex<Ledger>>,
    options: Arc<CommitterOptions>,
    last_expiry: Option<Instant>,
    /// Whether the last expiry round is still deleting files.
    cleanup_running: Arc<std::sync::atomic::AtomicBool>,
    /// The manifest list of this writer's last commit.
    manifest_list: Option<ManifestListCache>,
    /// Manifests read by upserts' key lookups (see [`ManifestCache`]).
    manifests: ManifestCache,
    pace: Arc<Mutex<Pace>>,
    /// Counts finished commits; the encoder waits on it when gathering.
    commits_done: watch::Sender<u64>,
}

impl CommitStage {
    async fn run(mut self, mut encoded: mpsc::Receiver<EncodedGroup>) {
        while let Some(first) = encoded.recv().await {
            // Marked at once: the encoder, woken by the free slot, reads it next.
            let started = Instant::now();
            self.pace.locked().commit_started = Some(started);
            let mut groups = vec![first];
            // Everything encoded while the previous commit was in flight goes in this one.
            while let Ok(g) = encoded.try_recv() {
                groups.push(g);
            }
            let released = groups.iter().map(|g| g.pendings.len()).sum();
            for snapshot in one_snapshot_each(groups) {
                self.commit_groups(snapshot).await;
            }
            {
                let mut pace = self.pace.locked();
                pace.commit_started = None;
                pace.commit_ended = Some(Instant::now());
                pace.released = released;
                Pace::smooth(&mut pace.commit, started.elapsed());
            }
            self.commits_done.send_modify(|n| *n += 1);
            self.expire_if_due().await;
        }
    }

    fn current(&self) -> Arc<TableView> {
        self.view.borrow().clone()
    }

    fn ident(&self) -> TableIdent {
        self.current().table.ident.clone()
    }

    /// Publishes a newer table, rebuilding settings when the schema or spec moved.
    fn publish(&self, table: LoadedTable) {
        let current = self.current();
        let same_shape = current.table.metadata.current_schema_id()
            == table.metadata.current_schema_id()
            && current.table.metadata.default_partition_spec_id()
                == table.metadata.default_partition_spec_id()
            && current.table.metadata.properties() == table.metadata.properties();
        if let Some(writer_id) = &self.options.writer_id
            && let Ok(committed) = committed_offsets(&table.metadata, writer_id)
        {
            self.ledger.locked().committed.union_with(&committed);
        }
        let view = if same_shape {
            TableView {
                table,
                file_io: current.file_io.clone(),
                settings: current.settings.clone(),
                merge: current.merge,
                keys: current.keys.clone(),
                key_problem: current.key_problem.clone(),
                strategy: current.strategy,
            }
        } else {
            match TableView::new(table.clone(), current.file_io.clone(), &self.options) {
                Ok(v) => v,
                // The head must move on regardless, or every later commit would conflict.
                Err(e) => {
                    tracing::warn!("table properties unusable, keeping the previous settings: {e}");
                    // The key was checked against the previous schema and spec: upserts
                    // and deletes wait (failing with this reason, not as the messages'
                    // fault) until the table is usable again.
                    TableView {
                        table,
                        file_io: current.file_io.clone(),
                        settings: current.settings.clone(),
                        merge: current.merge,
                        keys: None,
                        key_problem: Some(e.to_string()),
                        strategy: current.strategy,
                    }
                }
            }
        };
        self.view.send_replace(Arc::new(view));
    }

    async fn commit_groups(&mut self, groups: Vec<EncodedGroup>) {
        let started = Instant::now();
        // Groups encoded against different schemas cannot share a snapshot; the first
        // decides and the rest are answered with a retryable error.
        let schema_id = groups[0].schema_id;
        let spec_id = groups[0].spec_id;
        let table_uuid = groups[0].table_uuid;
        let mut data_files = Vec::new();
        let mut delete_files = Vec::new();
        let mut touched = None;
        let mut staged = Vec::new();
        let mut pendings = Vec::new();
        let mut offsets = SourceOffsets::default();
        for g in groups {
            if g.schema_id != schema_id || g.spec_id != spec_id || g.table_uuid != table_uuid {
                let e = Error::new(
                    ErrorKind::Unavailable,
                    "the table changed shape; retry the batch",
                );
                // Files streamed to storage (large groups) are referenced by nothing.
                if g.staged.is_empty() && self.options.cleanup_on_failure {
                    let files: Vec<DataFile> =
                        g.data_files.into_iter().chain(g.delete_files).collect();
                    self.delete_files(&files, &[]).await;
                }
                fail_all(g.pendings, &e);
                continue;
            }
            data_files.extend(g.data_files);
            delete_files.extend(g.delete_files);
            // At most one group per run touches keys (see `one_snapshot_each`).
            touched = touched.or(g.touched);
            staged.extend(g.staged);
            for p in &g.pendings {
                offsets.union_with(&p.submission.offsets);
            }
            pendings.extend(g.pendings);
        }
        let changes = SnapshotChanges {
            commit_id: uuid::Uuid::new_v4(),
            table_uuid,
            data_files,
            delete_files,
            // The key the group was resolved by, even if the view lost it since: a
            // group with removals never commits as a plain append.
            remove_keys: touched.map(|(touched, keys, by)| RemoveKeys {
                keys,
                touched,
                settings: self.current().settings.clone(),
                by,
            }),
            schema_id,
            spec_id,
            properties: HashMap::from([(
                "floe.version".to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            )]),
            offsets: self
                .options
                .writer_id
                .clone()
                .filter(|_| !offsets.is_empty())
                .map(|w| (w, offsets.clone())),
            in_flight: match self.options.writer_id {
                Some(_) => self.ledger.locked().claimed_offsets(),
                None => SourceOffsets::default(),
            },
        };
        let outcome = self.commit_with_retries(&changes, staged).await;
        match outcome.result {
            Ok(snapshot_id) => {
                self.record(&changes.data_files, started.elapsed());
                if !offsets.is_empty() {
                    self.ledger.locked().committed.union_with(&offsets);
                }
                for p in pendings {
                    finish(p, Ok(Committed { snapshot_id }));
                }
            }
            Err(e) => {
                if self.options.cleanup_on_failure && !outcome.maybe_committed {
                    let files: Vec<DataFile> = changes
                        .data_files
                        .iter()
                        .chain(&changes.delete_files)
                        .cloned()
                        .collect();
                    self.delete_files(&files, &outcome.written).await;
                }
                fail_all(pendings, &e);
            }
        }
    }

    fn record(&self, data_files: &[DataFile], took: Duration) {
        let rows = data_files.iter().map(|f| f.record_count()).sum();
        let bytes = data_files.iter().map(|f| f.file_size_in_bytes()).sum();
        self.options
            .stats
            .record_commit(rows, data_files.len() as u64, bytes, took);
    }

    /// Files of a definitively refused commit: nothing references them.
    async fn delete_files(&self, data_files: &[DataFile], metadata_files: &[String]) {
        let file_io = self.current().file_io.clone();
        let paths = data_files
            .iter()
            .map(|f| f.file_path().to_string())
            .chain(metadata_files.iter().cloned());
        for path in paths {
            if let Err(e) = file_io.delete(&path).await {
                tracing::warn!("could not delete {path} of a refused commit: {e}");
            }
        }
    }

    async fn reload(&self) -> Result<LoadedTable> {
        let ident = self.ident();
        self.catalog
            .load_table(&ident)
            .await?
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("table {ident} was dropped")))
    }

    /// Commits, rebuilding on the new head after a conflict or a throttling answer. After
    /// an unknown outcome it looks for the commit id before trying again (and once more
    /// before giving up), so rows are never appended twice; while that stays undecided
    /// the error says so.
    ///
    /// Conflicts are ordinary when several writers share a table and each one proves
    /// that another commit landed, so they are retried for up to `retry_timeout`; a
    /// retry reuses the data manifest and rewrites only the manifest list. Throttling and
    /// answers of unknown outcome are retried `max_retries` times.
    async fn commit_with_retries(
        &mut self,
        changes: &SnapshotChanges,
        mut staged_data: Vec<StagedFile>,
    ) -> Outcome {
        let ident = self.ident();
        let started = Instant::now();
        let mut written = Vec::new();
        // Files of attempts the catalog definitively refused and no later attempt reuses.
        let mut refused = Vec::new();
        let mut maybe_committed = false;
        let mut last_error: Option<Error> = None;
        let mut rebase: Option<Rebase> = None;
        let (mut conflicts, mut transient) = (0u32, 0u32);
        let mut rejected_once = false;
        let done = |result: Result<i64>, maybe_committed: bool, written| Outcome {
            // Whatever failed later, an attempt that may have landed leaves the rows'
            // fate unknown: a caller told "retry" could append them twice.
            result: result.map_err(|e| match e.kind() {
                ErrorKind::CommitStateUnknown => e,
                _ if maybe_committed => Error::new(
                    ErrorKind::CommitStateUnknown,
                    format!("{e}; an earlier attempt's outcome is unknown"),
                ),
                _ => e,
            }),
            maybe_committed,
            written,
        };
        for attempt in 0u32.. {
            if let Some(previous) = &last_error {
                let fresh = match self.reload().await {
                    Ok(t) => t,
                    // Cannot look. Even a "definite" refusal may come from a proxy that
                    // re-sent an applied commit, so until a reload shows the commit id
                    // absent, the attempt may have landed: its files stay.
                    Err(e) => {
                        let e = e.context(format!("{previous}; then reloading {ident}"));
                        return done(Err(e), true, written);
                    }
                };
                let found = find_commit(&fresh.metadata, changes.commit_id);
                self.publish(fresh);
                // Found: the attempt that landed may be one answered as refused (a proxy
                // that replayed the POST got the refusal), so nothing is deleted.
                if let Some(snapshot_id) = found {
                    return done(Ok(snapshot_id), true, written);
                }
                let give_up = match previous.kind() {
                    ErrorKind::Conflict => started.elapsed() >= self.options.retry_timeout,
                    ErrorKind::Rejected => false,
                    _ => transient > self.options.max_retries,
                };
                if give_up {
                    break;
                }
                tokio::time::sleep(match previous.kind() {
                    ErrorKind::Conflict => conflict_backoff(conflicts),
                    _ => backoff(transient),
                })
                .await;
            }
            let view = self.current();
            let t0 = Instant::now();
            // Per attempt, so nothing of a failed attempt stays in memory.
            let staging = Staging::default();
            let prepared = match prepare_snapshot(
                &view.table.metadata,
                &view.file_io,
                staging.io(),
                changes,
                &view.merge,
                Cached {
                    list: self.manifest_list.as_ref(),
                    manifests: &self.manifests,
                },
                Attempt {
                    number: attempt,
                    rebase: rebase.as_ref(),
                },
            )
            .await
            {
                Ok(p) => p,
                // A file the attempt could not read (a manifest; a data file copy-on-write
                // or positional deletes look into): reload and plan again, as after a
                // conflict, since the head may no longer list it. (A changed schema or
                // spec is Unavailable too, but for the caller: its rows are shredded again.)
                Err(e)
                    if e.kind() == ErrorKind::Unavailable
                        && view.schema_id() == changes.schema_id
                        && view.table.metadata.default_partition_spec_id() == changes.spec_id =>
                {
                    tracing::debug!("commit attempt {} to {ident}: {e}", attempt + 1);
                    transient += 1;
                    last_error = Some(e);
                    continue;
                }
                Err(e) => return done(Err(e), maybe_committed, written),
            };
            written.extend(prepared.written.iter().cloned());
            // The data files (first attempt only) go up with this attempt's manifest and
            // list: one storage round trip.
            let uploaded = match staging.take(prepared.staged).await {
                Ok(mut files) => {
                    files.append(&mut staged_data);
                    upload(&view.file_io, &files).await
                }
                Err(e) => Err(e),
            };
            if let Err(e) = uploaded {
                return done(Err(e.context("uploading")), maybe_committed, written);
            }
            let snapshot_id = prepared.snapshot_id;
            let list = prepared.manifest_list;
            let t1 = Instant::now();
            let answer = self
                .catalog
                .commit(&ident, prepared.requirements, prepared.updates)
                .await
                .and_then(|table| accepted(table, snapshot_id));
            match answer {
                Ok(table) => {
                    let t2 = Instant::now();
                    self.options.stats.record_catalog(t2 - t1);
                    self.manifest_list = Some(list);
                    self.publish(table);
                    tracing::debug!(
                        "snapshot prepared in {:?}, committed in {:?}",
                        t1 - t0,
                        t2 - t1
                    );
                    self.delete_unreferenced(refused).await;
                    return done(Ok(snapshot_id), true, written);
                }
                // A refusal on a stale view (e.g. another tool committed to a branch,
                // moving the table's last sequence number): reload once and rebuild.
                Err(e) if e.kind() == ErrorKind::Rejected && !rejected_once => {
                    rejected_once = true;
                    tracing::debug!("commit attempt {} to {ident} refused: {e}", attempt + 1);
                    refused.extend(prepared.written.iter().cloned());
                    transient += 1;
                    last_error = Some(e);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Conflict
                            | ErrorKind::CommitStateUnknown
                            | ErrorKind::Unavailable
                    ) =>
                {
                    tracing::debug!("commit attempt {} to {ident}: {e}", attempt + 1);
                    if e.kind() == ErrorKind::CommitStateUnknown {
                        maybe_committed = true;
                        rebase = None;
                        transient += 1;
                    } else {
                        // Definitely refused: its manifest list (and merged manifests)
                        // are garbage once a later attempt lands; its new data and delete
                        // manifests are reused.
                        let reused = prepared.rebase.reused_paths();
                        refused.extend(
                            prepared
                                .written
                                .iter()
                                .filter(|p| !reused.contains(&p.as_str()))
                                .cloned(),
                        );
                        rebase = Some(prepared.rebase);
                        if e.kind() == ErrorKind::Conflict {
                            conflicts += 1;
                        } else {
                            transient += 1;
                        }
                    }
                    last_error = Some(e);
                }
                Err(e) => return done(Err(e), maybe_committed, written),
            }
        }
        // An attempt of unknown outcome not found on the last look may still land; `done`
        // says so.
        let last = last_error.expect("loop ran");
        let e = last.context(format!(
            "commit to {ident} failed after {conflicts} conflicts and {transient} other retries in {:.1?}",
            started.elapsed()
        ));
        done(Err(e), maybe_committed, written)
    }

    /// Deletes files no snapshot references (of attempts the catalog refused). Failures
    /// are logged: the files are only garbage.
    async fn delete_unreferenced(&self, paths: Vec<String>) {
        if paths.is_empty() || !self.options.cleanup_on_failure {
            return;
        }
        let file_io = self.current().file_io.clone();
        for path in paths {
            if let Err(e) = file_io.delete(&path).await {
                tracing::warn!("could not delete {path} of a refused commit attempt: {e}");
            }
        }
    }

    /// Expires snapshots past the table's retention (see `expire`) when at least 100
    /// are due, or any are and the last round is a minute old: one catalog commit per
    /// many data commits. One round at a time: a round whose file cleanup still runs
    /// holds the next back.
    async fn expire_if_due(&mut self) {
        if self.cleanup_running.load(Ordering::Acquire) {
            return;
        }
        let view = self.current();
        let stale = self
            .last_expiry
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(60));
        // Between rounds, only a table past floe's count cap by a whole round is looked at.
        let snapshots = view.table.metadata.snapshots().len();
        if !stale && snapshots < self.options.retention.max_snapshots + 100 {
            return;
        }
        let now = chrono::Utc::now().timestamp_millis();
        let expired = expired_snapshots(&view.table.metadata, self.options.retention, now);
        let refs = if self.options.retention.max_age.is_zero() {
            Vec::new()
        } else {
            expired_refs(&view.table.metadata, now)
        };
        if (expired.is_empty() && refs.is_empty()) || (expired.len() < 100 && !stale) {
            return;
        }
        self.last_expiry = Some(Instant::now());
        let before = view.table.metadata.clone();
        let (requirements, updates) = removal_request(&before, expired.clone(), refs);
        match self
            .catalog
            .commit(&view.table.ident, requirements, updates)
            .await
        {
            Ok(table) => {
                let after = table.metadata.clone();
                self.publish(table);
                let file_io = view.file_io.clone();
                let running = RoundRunning::start(self.cleanup_running.clone());
                // Deleting unreachable files does not hold up the next commit.
                tokio::spawn(async move {
                    match delete_unreachable(&before, &after, &file_io, &expired).await {
                        Ok(c) => tracing::debug!(
                            "expired {} snapshots: {} files deleted, {} manifest lists read",
                            expired.len(),
                            c.deleted,
                            c.lists_read
                        ),
                        Err(e) => tracing::warn!(
                            "expired snapshots removed, but file cleanup failed: {e}"
                        ),
                    }
                    drop(running);
                });
            }
            // Someone moved the head or the catalog is busy: the next round tries again.
            Err(e) => tracing::debug!("snapshot expiry skipped: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;

    fn pending(rows: usize, bytes: usize) -> Pending {
        let column: Vec<i64> = (0..rows as i64).collect();
        let batch = RecordBatch::try_from_iter([(
            "id",
            Arc::new(Int64Array::from(column)) as arrow_array::ArrayRef,
        )])
        .unwrap();
        Pending {
            _claim: Claim {
                id: 0,
                ledger: Arc::new(Mutex::new(Ledger::default())),
            },
            submission: Submission {
                batch,
                deletes: None,
                bytes,
                schema_id: 0,
                offsets: SourceOffsets::default(),
            },
            reply: Some(oneshot::channel().0),
        }
    }

    fn options(linger_ms: u64, max_rows: usize, max_bytes: usize) -> CommitterOptions {
        CommitterOptions {
            identifier_fields: Vec::new(),
            merge_strategy: None,
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
            parquet: ParquetConfig::default(),
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
            &options(0, 70, usize::MAX),
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
        let group = collect(first, &mut rx, &mut carry, &options(0, 100, 2_500), None).await;
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
            &options(0, 100, 1_000),
            None,
        )
        .await;
        assert_eq!(sizes(&group), vec![1]);
        let group = collect(
            pending(1, 10),
            &mut rx,
            &mut carry,
            &options(200, 100, 1_000),
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
        let commit = Duration::from_millis(200);

        // Unknown number of callers: only what arrives within a millisecond joins.
        let (tx, mut rx) = mpsc::unbounded_channel();
        spaced(tx.clone());
        let g = Gathering::new(None, commit, Instant::now());
        let group = collect(pending(1, 10), &mut rx, &mut None, &opts, Some(g)).await;
        assert_eq!(sizes(&group), vec![1]);
        drop((tx, rx));

        // Three callers: the group waits for all of them, and ends as soon as it has them.
        let (tx, mut rx) = mpsc::unbounded_channel();
        spaced(tx.clone());
        let t0 = Instant::now();
        let g = Gathering::new(Some(3), commit, t0);
        let group = collect(pending(1, 10), &mut rx, &mut None, &opts, Some(g)).await;
        assert_eq!(sizes(&group), vec![1, 2, 3]);
        assert!(t0.elapsed() < commit, "waited past the last caller");

        // The wait is bounded by the commit's duration when a caller does not come back.
        let (tx2, mut rx2) = mpsc::unbounded_channel::<Pending>();
        let t0 = Instant::now();
        let g = Gathering::new(Some(3), Duration::from_millis(30), t0);
        let group = collect(pending(1, 10), &mut rx2, &mut None, &opts, Some(g)).await;
        assert_eq!(sizes(&group), vec![1]);
        assert!(t0.elapsed() >= Duration::from_millis(30));
        drop((tx, tx2));
    }

    #[test]
    fn slow_commits_gather_and_slow_encoding_overlaps() {
        let mut pace = Pace {
            commit_started: None,
            commit_ended: None,
            released: 0,
            commit: Duration::from_millis(40),
            encode: Duration::from_millis(5),
        };
        assert!(matches!(pace.plan(), Plan::Now), "nothing in flight");
        let just_now = Instant::now();
        pace.commit_ended = Some(just_now);
        pace.released = 1;
        assert!(
            matches!(pace.plan(), Plan::Now),
            "the one caller a commit released has nobody to wait for"
        );
        pace.released = 3;
        assert!(
            matches!(pace.plan(), Plan::GatherSince { ended, released: 3 } if ended == just_now),
            "callers released by a commit that just ended are on their way back"
        );
        if let Some(earlier) = just_now.checked_sub(Duration::from_millis(41)) {
            pace.commit_ended = Some(earlier);
            assert!(
                matches!(pace.plan(), Plan::Now),
                "a commit ago: nobody is coming"
            );
        }
        pace.commit_started = Some(Instant::now());
        assert!(matches!(pace.plan(), Plan::Gather));
        pace.encode = Duration::from_millis(60);
        assert!(matches!(pace.plan(), Plan::Overlap(w) if w.is_zero()));
        pace.encode = Duration::from_millis(38);
        assert!(matches!(pace.plan(), Plan::Overlap(w) if w <= Duration::from_millis(2)));
    }
}
