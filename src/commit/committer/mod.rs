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
//! in the [`Ledger`], and not in the call: a call asks
//! [`TableCommitter::claim_positions`] which of its messages to write.
//!
//! - `schedule`: when the encoder takes what waits as one group;
//! - `gate`: how many calls' shredded rows wait for the encoder;
//! - `encode`: writing a group's rows as data files (and equality deletes);
//! - `stage`: committing ready groups, retries, expiry;
//! - `contention`: pacing commits while other writers commit to the table too;
//! - `ledger`: exactly-once claims;
//! - `view`: the committer's table as write calls need it, and which upsert strategy it
//!   takes;
//! - `credentials`: keeping the table's vended storage credentials fresh.

mod backoff;
mod contention;
mod credentials;
mod encode;
mod gate;
mod ledger;
mod schedule;
mod stage;
mod view;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::RecordBatch;
use iceberg::TableIdent;
use iceberg::spec::DataFile;
use tokio::sync::{mpsc, oneshot, watch};

use super::expire::Retention;
use super::offsets::{SourceOffsets, committed_offsets};
use super::order::{Order, Ticket, UNORDERED};
use super::staging::StagedFile;
use super::together::Party;
use crate::catalog::Catalog;
use crate::config::{MergeStrategy, ParquetConfig};
use crate::error::{Error, ErrorKind, Result};
use crate::rowops::KeyColumns;
use crate::rowops::removal::Removal;
use crate::stats::WriterStats;
use crate::table::key_index::{KeyIndex, KeySignature};
use crate::table::manifest_cache::ManifestCache;

use encode::encode_loop;
pub use gate::Room;
use gate::{ShredGate, Standing};
pub use ledger::{Claim, Claimed, Ledger, Verdict};
use schedule::Pace;
use stage::CommitStage;
pub use view::{TableView, check_merge_on_read_keys};

/// How the committer behaves; from the `commit` section of the config. Not `Debug`:
/// `storage_props` holds storage secrets.
#[derive(Clone)]
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
    /// Whether `identifier_fields` must match columns' case (`case_sensitive_columns`).
    pub case_sensitive_columns: bool,
    /// The configured strategy; `None` follows the table (see [`merge_strategy`]).
    pub merge_strategy: Option<MergeStrategy>,
    /// Whether the catalog's readers apply delete files (not Unity Catalog's): without,
    /// an unset strategy is copy-on-write.
    pub reads_delete_files: bool,
    pub parquet: ParquetConfig,
    /// The host's concurrent calls, when it said (see [`Gathering`]).
    pub callers: Option<usize>,
    /// The writer's counters, which every table's commit stage adds to.
    pub stats: Arc<WriterStats>,
    /// The order of the writer's calls, which rows that fail to commit move on.
    pub order: Arc<Order>,
    /// FileIO properties from the `storage` config; a catalog's vended ones go on top.
    pub storage_props: std::collections::HashMap<String, String>,
    /// Commit attempts under way at once, over all of the writer's tables (see
    /// [`CommitSlots`]).
    pub commit_slots: CommitSlots,
}

/// How many commit attempts (reading the head's manifests, uploading the new ones and
/// the data staged with them, the catalog's answer) and table openings a writer runs at
/// once, whatever the number of tables. Without a bound, a process routing one batch to a thousand tables
/// ran a thousand attempts together: as many connections to the catalog and the store
/// (4,212 sockets measured), for no more commits per second, which the catalog caps.
/// Attempts wait for a slot in arrival order; a retry's backoff holds none.
#[derive(Clone)]
pub struct CommitSlots(Arc<tokio::sync::Semaphore>);

/// Commit attempts a writer runs at once: several times what one catalog serves in
/// parallel (the REST fixture here: about 120 commits/s at tens of milliseconds each).
const COMMIT_SLOTS: usize = 32;

impl Default for CommitSlots {
    fn default() -> Self {
        CommitSlots(Arc::new(tokio::sync::Semaphore::new(COMMIT_SLOTS)))
    }
}

impl CommitSlots {
    /// Waits for a slot; it is free again when the permit drops.
    pub async fn take(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.0
            .acquire()
            .await
            .expect("the semaphore is never closed")
    }
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
    /// The call's transaction across tables (`commit.atomic_tables`), when its rows go
    /// to several: they commit with the other tables' rows or not at all.
    pub together: Option<Party>,
    /// The room the rows take while they wait for the encoder (see
    /// [`TableCommitter::room_to_shred`]); given back once it takes them.
    pub room: Option<Room>,
}

/// Where a submission's rows went.
#[derive(Debug, Clone, Copy)]
pub struct Committed {
    pub snapshot_id: i64,
    /// Whether this submission is the one its snapshot is counted by: the first of the
    /// group whose caller still waits. Summed over calls, snapshots are then counted
    /// once, however many calls a group commit joined.
    pub counts_snapshot: bool,
}

struct Pending {
    /// Released when the submission is answered or dropped.
    _claim: Claim,
    /// Counts the submission among the committer's unanswered ones while it lives.
    _unanswered: Unanswered,
    /// The table's epoch the rows were handed in under, for an ordered call (see
    /// [`crate::commit::order`]); `None` for a call that keeps no order.
    epoch: Option<u64>,
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
    /// For tables changed outside the commit stage (a schema evolved by a write call).
    publish: watch::Sender<Arc<TableView>>,
    options: Arc<CommitterOptions>,
    ledger: Arc<Mutex<Ledger>>,
    next_claim: AtomicU64,
    /// Submissions handed in and not answered yet (see [`Self::is_quiet`]).
    unanswered: Arc<AtomicU64>,
    /// What waits shredded for the encoder (see [`Self::room_to_shred`]).
    gate: Arc<ShredGate>,
}

/// One submission in a committer's count of unanswered ones, from when it is handed in
/// until it is answered or dropped (its caller may be gone by then: a cancelled call's
/// rows are still committed).
#[derive(Default)]
struct Unanswered(Arc<AtomicU64>);

impl Unanswered {
    fn counted(count: &Arc<AtomicU64>) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Unanswered(count.clone())
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl TableCommitter {
    /// Whether every submission handed in was answered: nothing of the table is queued,
    /// being encoded or being committed, so the committer may be dropped (closing the
    /// table) without another one for it meeting rows of this one's later.
    pub fn is_quiet(&self) -> bool {
        self.unanswered.load(std::sync::atomic::Ordering::SeqCst) == 0
    }

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
        let refusals = credentials::start_refresher(
            catalog.clone(),
            view_tx.clone(),
            options.storage_props.clone(),
        );
        let pace = Arc::new(Mutex::new(Pace::default()));
        let (commits_done, commits_done_rx) = watch::channel(0u64);
        let gate = Arc::new(ShredGate::new(options.max_group_bytes));
        tokio::spawn(encode_loop(
            (queue_rx, gate.clone()),
            encoded_tx,
            view_rx.clone(),
            pace.clone(),
            commits_done_rx,
            options.clone(),
            refusals.clone(),
        ));
        tokio::spawn(
            CommitStage {
                catalog,
                view: view_tx.clone(),
                ledger: ledger.clone(),
                options: options.clone(),
                last_expiry: None,
                cleanup_running: Arc::default(),
                manifest_list: None,
                manifests: ManifestCache::default(),
                pace,
                loaded_at: std::time::Instant::now(),
                commits_done,
                refusals,
                kept: None,
                behind: false,
                contention: Default::default(),
                held: Duration::ZERO,
            }
            .run(encoded_rx),
        );
        Ok(TableCommitter {
            queue: queue_tx,
            view: view_rx,
            publish: view_tx,
            options,
            ledger,
            next_claim: AtomicU64::new(1),
            unanswered: Arc::default(),
            gate,
        })
    }

    /// The table as write calls need it: schema, spec, settings, FileIO (its snapshots
    /// may be behind the commit stage's own).
    pub fn view(&self) -> Arc<TableView> {
        self.view.borrow().clone()
    }

    /// Waits until the call `ticket` may shred `bytes` of JSON for this table (see
    /// [`gate`]): in line, once few rows wait for the encoder; in its turn to hand its
    /// rows in, also while a room is held by a call yet to hand in; at once when they
    /// commit `together` with other tables'.
    pub async fn room_to_shred(&self, ticket: Ticket, bytes: usize, together: bool) -> Room {
        let order = &self.options.order;
        let ident = self.view().table.ident.clone();
        let standing = || match together {
            true => Standing::Together,
            false if order.may_hand_in(ticket, &ident) => Standing::Turn,
            false => Standing::InLine,
        };
        // In line, earlier tickets first; unordered calls after them, first come first
        // (a writer that mixed them would otherwise let unordered calls take the room a
        // call in its turn waits for).
        let priority = match ticket {
            UNORDERED => u64::MAX,
            ticket => ticket,
        };
        let (room, waited) = self
            .gate
            .enter((bytes, priority), standing, order.changed())
            .await;
        if waited {
            self.options.stats.waited_to_shred();
        }
        room
    }

    /// Takes in a newer table loaded or committed outside the commit stage (a schema
    /// evolved by a write call), so the next calls shred with its schema.
    pub fn adopt(&self, table: crate::catalog::LoadedTable) {
        view::publish_table(&self.publish, &self.ledger, &self.options, table);
    }

    /// Whether the committer's tasks are gone (only after a panic in one of them); the
    /// writer then opens the table afresh.
    pub fn is_stopped(&self) -> bool {
        self.queue.is_closed()
    }

    /// Exactly-once: decides each of a call's positions (source, offset, payload hash)
    /// against what is committed and what other calls claim, and claims those the call
    /// writes. The claim is released when dropped (see [`Claim`]). Fails while the
    /// table's record cannot be trusted (main rolled back behind it).
    pub fn claim_positions<'a>(
        &self,
        ticket: Ticket,
        positions: impl IntoIterator<Item = (&'a str, i64, u64)>,
    ) -> Result<(Claim, Vec<Verdict>)> {
        let claim = self.new_claim(ticket);
        let verdicts = ledger::claim_positions(&self.ledger, &claim, positions)?;
        Ok((claim, verdicts))
    }

    /// A fresh id under which a call (arrived with `ticket`) claims offsets in the ledger.
    pub fn new_claim(&self, ticket: Ticket) -> Claim {
        Claim {
            id: self.next_claim.fetch_add(1, Ordering::Relaxed),
            ticket,
            ledger: self.ledger.clone(),
        }
    }

    /// Hands rows to the pipeline and waits until they are committed. `claim` (from
    /// [`Self::new_claim`], possibly holding offsets in the ledger) is released when the
    /// outcome is known, even if this future is dropped before.
    ///
    /// An ordered call (`ticket`) hands its rows in only in its turn (see
    /// [`crate::commit::order`]); `complete` says these are all its rows for the table in
    /// this attempt.
    pub async fn submit(
        &self,
        ticket: Ticket,
        complete: bool,
        claim: Claim,
        submission: Submission,
    ) -> Result<Committed> {
        let (reply, answer) = oneshot::channel();
        let ident = self.view().table.ident.clone();
        let sent = self
            .options
            .order
            .admit(ticket, &ident, complete, |epoch| {
                let mut submission = submission;
                if let Some(room) = &mut submission.room {
                    room.hand_in();
                }
                let pending = Pending {
                    _claim: claim,
                    _unanswered: Unanswered::counted(&self.unanswered),
                    epoch: (ticket != UNORDERED).then_some(epoch),
                    submission,
                    reply: Some(reply),
                };
                self.queue.send(pending).is_ok()
            })
            .await;
        if !sent {
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
    /// Copy-on-write and positional: the keys of the staged data files, read from their
    /// bytes, for the commit stage to keep once the files are committed (see
    /// [`crate::table::key_index`]).
    key_indexes: Option<StagedKeys>,
    /// The table (uuid), schema and spec the files were written for.
    table_uuid: uuid::Uuid,
    schema_id: i32,
    spec_id: i32,
    pendings: Vec<Pending>,
    /// How long the encoder gathered the group because commit pacing held the commit
    /// (see `schedule::Pace::hold_until`): reported as the commit's pacing.
    held: Duration,
}

/// The key signature and, by path, the key index of data files a group staged.
type StagedKeys = (KeySignature, Vec<(String, KeyIndex)>);

impl EncodedGroup {
    /// Whether the group's rows commit together with other tables' (see
    /// [`crate::commit::together`]).
    fn commits_together(&self) -> bool {
        self.pendings
            .iter()
            .any(|p| p.submission.together.is_some())
    }
}

fn fail_all(pendings: Vec<Pending>, error: &Error) {
    for p in pendings {
        finish(p, Err(error.clone()));
    }
}

/// Fails rows that will not commit, and moves the table's order on: rows handed in after
/// them must not commit before their retry (see [`crate::commit::order`]).
fn fail_overtaking(
    options: &CommitterOptions,
    ident: &TableIdent,
    pendings: Vec<Pending>,
    error: &Error,
) {
    if !pendings.is_empty() {
        options.order.overtake(ident);
    }
    fail_all(pendings, error);
}

/// Whether any of these rows was handed in before rows of the table that failed since.
fn is_overtaken(options: &CommitterOptions, ident: &TableIdent, pendings: &[Pending]) -> bool {
    pendings
        .iter()
        .any(|p| options.order.overtaken(ident, p.epoch))
}

/// Fails the rows that were handed in before rows of the table that failed since, and
/// keeps the rest.
fn without_overtaken(
    options: &CommitterOptions,
    ident: &TableIdent,
    pendings: Vec<Pending>,
) -> Vec<Pending> {
    let (overtaken, kept): (Vec<Pending>, Vec<Pending>) = pendings
        .into_iter()
        .partition(|p| options.order.overtaken(ident, p.epoch));
    fail_all(overtaken, &overtaken_error());
    kept
}

/// The error of rows held back behind earlier rows of their table that failed to commit.
fn overtaken_error() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "held back behind rows handed to the table before it that could not be committed; \
         a table's rows commit in the order their calls arrived, so it is retried after them",
    )
}
