//! The commit stage: commits every encoded group that is ready as one snapshot per run,
//! retrying conflicts and unknown outcomes on the new head, expiring old snapshots.

use crate::sync::LockExt;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use iceberg::TableIdent;
use iceberg::spec::{DataFile, TableMetadata, TableMetadataRef};
use tokio::sync::{mpsc, watch};

use super::backoff::{backoff, conflict_backoff};
use super::credentials::Refusals;
use super::schedule::Pace;
use super::view::{publish_table, same_for_writers, take_in_offsets};
use super::{
    Committed, CommitterOptions, EncodedGroup, Ledger, TableView, fail_all, fail_overtaking,
    finish, is_overtaken, overtaken_error,
};
use crate::catalog::{Catalog, LoadedTable};
use crate::commit::expire::{delete_unreachable, expired_refs, expired_snapshots, removal_request};
use crate::commit::landed::{SentAttempt, find_landed, history_lost};
use crate::commit::offsets::{SourceOffsets, record_snapshot_id};
use crate::commit::snapshot::{
    Attempt, Cached, ManifestListCache, Rebase, SnapshotChanges, find_commit, prepare_snapshot,
};
use crate::commit::staging::{StagedFile, Staging, upload};
use crate::error::{Error, ErrorKind, Result};
use crate::rowops::removal::RemoveKeys;
use crate::stats::EventKind;
use crate::table::manifest_cache::ManifestCache;

/// Splits encoded groups into the runs that may share a snapshot. A group with deletes
/// starts a new one: its deletes must apply to the rows of the groups before it, and
/// within one snapshot they would not (one sequence number); a copy-on-write group
/// rewrites the files as the head has them, so the groups before it must be there. So
/// does a group written for another schema (the table evolved between them).
pub(super) fn one_snapshot_each(groups: Vec<EncodedGroup>) -> Vec<Vec<EncodedGroup>> {
    let mut runs: Vec<Vec<EncodedGroup>> = Vec::new();
    for g in groups {
        match runs.last_mut() {
            Some(run)
                if g.delete_files.is_empty()
                    && g.touched.is_none()
                    && run[0].schema_id == g.schema_id =>
            {
                run.push(g)
            }
            _ => runs.push(vec![g]),
        }
    }
    runs
}

/// A commit answer counts only if the table's main branch is the snapshot just
/// produced; anything else (a proxy's redirect target, a cache) leaves the outcome
/// unknown, to be settled by looking for the commit id.
pub(super) fn accepted(table: LoadedTable, snapshot_id: i64) -> Result<LoadedTable> {
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
pub(super) struct RoundRunning(Arc<std::sync::atomic::AtomicBool>);

impl RoundRunning {
    pub(super) fn start(flag: Arc<std::sync::atomic::AtomicBool>) -> Self {
        flag.store(true, Ordering::Release);
        RoundRunning(flag)
    }
}

impl Drop for RoundRunning {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// How old the committer's view of its table may grow before it is loaded again from
/// the catalog (see [`CommitStage::refresh_if_due`]).
pub(super) const VIEW_MAX_AGE: Duration = Duration::from_secs(60);

/// How often a failed look for an earlier attempt is tried again before the outcome is
/// reported unknown.
const LOOK_RETRIES: u32 = 3;

/// What a look for this commit's earlier attempts found.
enum Look {
    Landed(i64),
    /// Not in the table. `history_lost`: part of the table's history the attempts could
    /// be in was expired (their files were looked for instead).
    Absent {
        history_lost: bool,
    },
}

/// How a commit attempt sequence ended.
pub(super) struct Outcome {
    pub(super) result: Result<i64>,
    /// Some attempt's outcome was unknown: its files may be referenced by the table.
    pub(super) maybe_committed: bool,
    /// Metadata files written by the attempts.
    pub(super) written: Vec<String>,
    pub(super) tries: Tries,
}

/// What a commit's attempts met, for its event (see [`crate::stats::events`]).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Tries {
    /// Attempts refused because another commit landed first.
    pub(super) conflicts: u32,
    /// Attempts retried for any other reason.
    pub(super) retries: u32,
    /// The catalog's answer to the request that landed.
    pub(super) catalog: Duration,
}

pub(super) struct CommitStage {
    pub(super) catalog: Arc<dyn Catalog>,
    pub(super) view: watch::Sender<Arc<TableView>>,
    pub(super) ledger: Arc<Mutex<Ledger>>,
    pub(super) options: Arc<CommitterOptions>,
    pub(super) last_expiry: Option<Instant>,
    /// Whether the last expiry round is still deleting files.
    pub(super) cleanup_running: Arc<std::sync::atomic::AtomicBool>,
    /// The manifest list of this writer's last commit.
    pub(super) manifest_list: Option<ManifestListCache>,
    /// Manifests read by upserts' key lookups (see [`ManifestCache`]).
    pub(super) manifests: ManifestCache,
    pub(super) pace: Arc<Mutex<Pace>>,
    /// When the view was last loaded whole from the catalog.
    pub(super) loaded_at: Instant,
    /// Counts finished commits; the encoder waits on it when gathering.
    pub(super) commits_done: watch::Sender<u64>,
    /// Storage failures that may call for fresh vended credentials go here.
    pub(super) refusals: Refusals,
    /// The table this stage's last commit produced, while it is newer than the view's.
    pub(super) kept: Option<KeptTable>,
    /// The kept table went into an attempt that did not land and no load has followed:
    /// the view may be this stage's own commits behind (see [`Self::catch_up`]).
    pub(super) behind: bool,
}

/// The table a commit of the stage's own produced, applied locally (see
/// `catalog::answer`) and kept here instead of published when write calls would find
/// nothing new in it (see [`super::view::same_for_writers`]). Its metadata then has this
/// one owner, and the next commit changes it in place (see `apply_updates`): publishing
/// it would share it with the view, so that every commit copied the metadata and later
/// dropped the copy it replaced, each of which touches every retained snapshot (a
/// fifth of floe's CPU per commit at 10,000 snapshots).
///
/// It stands for the table only while the view still shows the table it was kept over:
/// any other publication (a reload, a schema a write call evolved) supersedes it. A
/// fresh vended FileIO keeps the view's table, and so the kept table. An attempt takes
/// it along; if the attempt does not land and the look for it cannot load the table
/// (the catalog down), the next commit loads it first rather than build on the view.
pub(super) struct KeptTable {
    table: LoadedTable,
    over: Weak<TableMetadata>,
}

impl KeptTable {
    /// `table`, kept over the view's table whose metadata is `shown`.
    fn kept_over(table: LoadedTable, shown: &TableMetadataRef) -> KeptTable {
        KeptTable {
            table,
            over: Arc::downgrade(shown),
        }
    }

    /// Whether the view's table (its metadata `shown`) is still the one this was
    /// kept over. While a `Weak` holds an allocation it is not reused, so equal addresses
    /// mean the same table.
    fn current_over(&self, shown: &TableMetadataRef) -> bool {
        std::ptr::eq(self.over.as_ptr(), Arc::as_ptr(shown))
    }
}

impl CommitStage {
    pub(super) async fn run(mut self, mut encoded: mpsc::Receiver<EncodedGroup>) {
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
            self.refresh_if_due().await;
        }
    }

    /// Reloads the table when the view is [`VIEW_MAX_AGE`] old. Commits are applied
    /// locally (see `catalog::answer`; kept by the stage or published, see
    /// [`KeptTable`]); the answer's check covers the location, head,
    /// properties and refs but not what another tool changed without touching them
    /// (expired snapshots, statistics, schemas and specs that are not current, the
    /// logs). A failed reload is retried at the next commit.
    async fn refresh_if_due(&mut self) {
        if self.loaded_at.elapsed() >= VIEW_MAX_AGE {
            self.load_view("refreshing the table").await;
        }
    }

    /// Loads the table before a commit when the view may be behind this stage's own
    /// commits (see [`KeptTable`]), so the commit is not built on an old head only to be
    /// refused. A failed load leaves it to the commit's handling of conflicts.
    async fn catch_up(&mut self) {
        if self.behind {
            self.load_view("loading the table after a failed commit")
                .await;
        }
    }

    /// Loads the table and publishes it; a failure (`what` failed) is only logged.
    async fn load_view(&mut self, what: &str) {
        match self.reload().await {
            Ok(table) => self.publish_loaded(table),
            Err(e) => tracing::debug!("{what} failed: {e}"),
        }
    }

    /// Publishes a table just loaded whole from the catalog: the view is then as new
    /// as the catalog's table.
    fn publish_loaded(&mut self, table: LoadedTable) {
        self.loaded_at = Instant::now();
        self.behind = false;
        // Superseded (see `KeptTable`): its metadata need not wait for the next commit.
        self.kept = None;
        self.publish(table);
    }

    pub(super) fn current(&self) -> Arc<TableView> {
        self.view.borrow().clone()
    }

    pub(super) fn ident(&self) -> TableIdent {
        self.current().table.ident.clone()
    }

    /// Publishes a newer table (see [`publish_table`]).
    pub(super) fn publish(&self, table: LoadedTable) {
        publish_table(&self.view, &self.ledger, &self.options, table);
    }

    /// The table a commit on `view` builds on: the stage's [`KeptTable`] while `view` still
    /// shows the table it was kept over, else the view's own.
    fn base<'a>(&'a self, view: &'a TableView) -> &'a LoadedTable {
        match &self.kept {
            Some(kept) if kept.current_over(&view.table.metadata) => &kept.table,
            _ => &view.table,
        }
    }

    /// [`Self::base`], taken for the catalog to apply the commit to: the kept table's
    /// metadata leaves the stage with its one owner.
    fn take_base(&mut self, view: &TableView) -> LoadedTable {
        match self.kept.take() {
            Some(kept) if kept.current_over(&view.table.metadata) => {
                self.behind = true;
                kept.table
            }
            _ => view.table.clone(),
        }
    }

    /// The newest metadata this stage knows (see [`Self::base`]).
    fn latest_metadata(&self) -> TableMetadataRef {
        let view = self.current();
        self.base(&view).metadata.clone()
    }

    /// Takes in the table this stage's commit produced: kept as the [`KeptTable`] when write
    /// calls would find nothing new in it, else published.
    fn advance(&mut self, table: LoadedTable) {
        let view = self.current();
        self.behind = false;
        if same_for_writers(&view.table, &table) {
            take_in_offsets(&self.ledger, &self.options, &table);
            self.kept = Some(KeptTable::kept_over(table, &view.table.metadata));
        } else {
            self.kept = None;
            self.publish(table);
        }
    }

    pub(super) async fn commit_groups(&mut self, groups: Vec<EncodedGroup>) {
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
        let ident = self.ident();
        for g in groups {
            // Rows handed in after rows that failed since wait for those to be retried
            // (see `commit::order`).
            let overtaken = is_overtaken(&self.options, &ident, &g.pendings);
            let mismatch =
                g.schema_id != schema_id || g.spec_id != spec_id || g.table_uuid != table_uuid;
            if overtaken || mismatch {
                // Files streamed to storage (large groups) are referenced by nothing.
                if g.staged.is_empty() && self.options.cleanup_on_failure {
                    let files: Vec<DataFile> =
                        g.data_files.into_iter().chain(g.delete_files).collect();
                    self.delete_files(&files, &[]).await;
                }
                if overtaken {
                    fail_all(g.pendings, &overtaken_error());
                } else {
                    let e = Error::new(
                        ErrorKind::SchemaChanged,
                        "the table's schema or partition spec changed after the batch was shredded",
                    );
                    fail_overtaking(&self.options, &ident, g.pendings, &e);
                }
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
                self.record_committed(&changes, &outcome.tries, started.elapsed());
                if !offsets.is_empty() {
                    self.ledger.locked().committed.union_with(&offsets);
                }
                // Counted by the first caller still waiting (a cancelled one is not).
                let mut counted = false;
                for p in pendings {
                    let counts_snapshot =
                        !counted && p.reply.as_ref().is_some_and(|r| !r.is_closed());
                    counted |= counts_snapshot;
                    finish(
                        p,
                        Ok(Committed {
                            snapshot_id,
                            counts_snapshot,
                        }),
                    );
                }
            }
            Err(e) => {
                self.refusals.note(&e);
                self.record_failed(&e, &outcome.tries, started.elapsed());
                if self.options.cleanup_on_failure && !outcome.maybe_committed {
                    let files: Vec<DataFile> = changes
                        .data_files
                        .iter()
                        .chain(&changes.delete_files)
                        .cloned()
                        .collect();
                    self.delete_files(&files, &outcome.written).await;
                }
                fail_overtaking(&self.options, &ident, pendings, &e);
            }
        }
    }

    /// Counts a landed snapshot, for the writer's stats and the host's metrics.
    fn record_committed(&self, changes: &SnapshotChanges, tries: &Tries, took: Duration) {
        let stats = &self.options.stats;
        let mut e = stats.event(EventKind::Committed, &self.ident().to_string());
        e.rows = changes.data_files.iter().map(|f| f.record_count()).sum();
        e.data_files = changes.data_files.len() as u64;
        e.data_bytes = changes
            .data_files
            .iter()
            .map(|f| f.file_size_in_bytes())
            .sum();
        e.delete_files = changes.delete_files.len() as u64;
        (e.took, e.catalog) = (took, tries.catalog);
        (e.conflicts, e.retries) = (tries.conflicts, tries.retries);
        stats.record(e);
    }

    /// Counts a commit that gave up.
    fn record_failed(&self, error: &Error, tries: &Tries, took: Duration) {
        let stats = &self.options.stats;
        let mut e = stats.event(EventKind::CommitFailed, &self.ident().to_string());
        e.took = took;
        (e.conflicts, e.retries) = (tries.conflicts, tries.retries);
        e.failure = Some(error.kind());
        stats.record(e);
    }

    /// Files of a definitively refused commit: nothing references them.
    pub(super) async fn delete_files(&self, data_files: &[DataFile], metadata_files: &[String]) {
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

    pub(super) async fn reload(&self) -> Result<LoadedTable> {
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
    pub(super) async fn commit_with_retries(
        &mut self,
        changes: &SnapshotChanges,
        staged_data: Vec<StagedFile>,
    ) -> Outcome {
        let mut tries = Tries::default();
        let mut outcome = self.attempt_commits(changes, staged_data, &mut tries).await;
        outcome.tries = tries;
        outcome
    }

    /// [`Self::commit_with_retries`]'s attempts, counted in `tries`.
    async fn attempt_commits(
        &mut self,
        changes: &SnapshotChanges,
        mut staged_data: Vec<StagedFile>,
        tries: &mut Tries,
    ) -> Outcome {
        self.catch_up().await;
        let ident = self.ident();
        let started = Instant::now();
        let mut written = Vec::new();
        // Files of attempts the catalog definitively refused and no later attempt reuses.
        let mut refused = Vec::new();
        let mut maybe_committed = false;
        let mut last_error: Option<Error> = None;
        let mut rebase: Option<Rebase> = None;
        let mut rejected_once = false;
        // Attempts whose request was sent: any of them may have landed, whatever the answer.
        let mut sent: Vec<SentAttempt> = Vec::new();
        let done = |result: Result<i64>, maybe_committed: bool, written| Outcome {
            // Whatever failed later, an attempt that may have landed leaves the rows'
            // fate unknown: a caller told "retry" could append them twice.
            result: result.map_err(|e| match e.kind() {
                // Some catalogs refuse equality-delete files (Unity Catalog): say what
                // works there.
                ErrorKind::Rejected if !maybe_committed && !changes.delete_files.is_empty() => {
                    Error::new(
                        ErrorKind::Rejected,
                        format!(
                            "{e} (the commit carried merge-on-read's equality-delete files; if \
                         the catalog does not accept them, set merge_strategy: copy-on-write)"
                        ),
                    )
                }
                ErrorKind::CommitStateUnknown => e,
                _ if maybe_committed => Error::new(
                    ErrorKind::CommitStateUnknown,
                    format!("{e}; an earlier attempt's outcome is unknown"),
                ),
                _ => e,
            }),
            maybe_committed,
            written,
            tries: Tries::default(),
        };
        for attempt in 0u32.. {
            if let Some(previous) = &last_error {
                // Cannot look. Even a "definite" refusal may come from a proxy that re-sent
                // an applied commit, so until a look shows the commit absent, a sent
                // attempt may have landed: its files stay.
                let deadline = started + self.options.retry_timeout;
                let look = match self
                    .look_for_attempt(changes, &sent, &written, deadline)
                    .await
                {
                    Ok(look) => look,
                    Err(e) => {
                        let e = e.context(format!("{previous}; then looking for it in {ident}"));
                        return done(Err(e), maybe_committed || !sent.is_empty(), written);
                    }
                };
                match look {
                    // The attempt that landed may be one answered as refused (a proxy that
                    // replayed the POST got the refusal), so nothing is deleted.
                    Look::Landed(snapshot_id) => return done(Ok(snapshot_id), true, written),
                    // Its snapshot id may have been used by an attempt that landed and was
                    // expired: the next attempt takes a fresh one.
                    Look::Absent { history_lost: true } => rebase = None,
                    Look::Absent { .. } => {}
                }
                let give_up = match previous.kind() {
                    ErrorKind::Conflict => started.elapsed() >= self.options.retry_timeout,
                    ErrorKind::Rejected => false,
                    _ => tries.retries > self.options.max_retries,
                };
                if give_up {
                    break;
                }
                tokio::time::sleep(match previous.kind() {
                    ErrorKind::Conflict => conflict_backoff(tries.conflicts),
                    _ => backoff(tries.retries),
                })
                .await;
            }
            let view = self.current();
            let t0 = Instant::now();
            // Per attempt, so nothing of a failed attempt stays in memory.
            let staging = Staging::default();
            let prepared = match prepare_snapshot(
                self.base(&view),
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
                // spec is for the caller: its rows are shredded again.)
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    tracing::debug!("commit attempt {} to {ident}: {e}", attempt + 1);
                    self.refusals.note(&e);
                    tries.retries += 1;
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
            crate::failpoint::hit(crate::failpoint::names::UPLOADED);
            let snapshot_id = prepared.snapshot_id;
            let list = prepared.manifest_list;
            let base = self.take_base(&view);
            sent.push(SentAttempt {
                snapshot_id: prepared.snapshot_id,
                parent: base.metadata.current_snapshot_id(),
                sequence_number: base.metadata.next_sequence_number(),
            });
            let t1 = Instant::now();
            let answer = self
                .catalog
                .commit_on(base, prepared.requirements, prepared.updates)
                .await
                .and_then(|table| accepted(table, snapshot_id));
            match answer {
                Ok(table) => {
                    crate::failpoint::hit(crate::failpoint::names::APPLIED);
                    let t2 = Instant::now();
                    tries.catalog = t2 - t1;
                    self.manifests.keep_only(&list.manifests);
                    self.manifests.keep_written(&list.manifests);
                    self.manifest_list = Some(list);
                    self.advance(table);
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
                    tries.retries += 1;
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
                        tries.retries += 1;
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
                            tries.conflicts += 1;
                        } else {
                            tries.retries += 1;
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
            "commit to {ident} failed after {} conflicts and {} other retries in {:.1?}",
            tries.conflicts,
            tries.retries,
            started.elapsed()
        ));
        done(Err(e), maybe_committed, written)
    }

    /// Reloads the table and looks for a sent attempt in it (see [`Self::find_attempt`]),
    /// publishing the head. A look that fails (a manifest just removed by another
    /// tool's expiry, a storage hiccup) is tried again on a fresh head a few times.
    ///
    /// A catalog that cannot be reached (restarting, or a gateway answering 503) is asked
    /// again until `deadline`: giving up leaves the outcome unknown, and a host that
    /// retries an unknown outcome at least once appends the rows a second time if the
    /// commit had landed just before the catalog went away.
    async fn look_for_attempt(
        &mut self,
        changes: &SnapshotChanges,
        sent: &[SentAttempt],
        written: &[String],
        deadline: Instant,
    ) -> Result<Look> {
        let mut tries = 0;
        let mut unreachable = 0;
        loop {
            let fresh = match self.reload().await {
                Ok(fresh) => fresh,
                Err(e) if e.kind() == ErrorKind::Unavailable && Instant::now() < deadline => {
                    unreachable += 1;
                    tracing::debug!("looking for commit {}: {e}", changes.commit_id);
                    let left = deadline.saturating_duration_since(Instant::now());
                    tokio::time::sleep(backoff(unreachable).min(left)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let look = self.find_attempt(&fresh, changes, sent, written).await;
            self.publish_loaded(fresh);
            match look {
                Err(e) if tries < LOOK_RETRIES => {
                    tries += 1;
                    tracing::debug!("looking for commit {}: {e}", changes.commit_id);
                    // Refused credentials (reading the manifests) are renewed before the
                    // next look, not only after the commit has failed as unknown.
                    let wait = match crate::storage::is_credential_refusal(&e) {
                        // Long enough for the refresher (at least 1 s apart) to swap them.
                        true => backoff(tries).max(Duration::from_millis(1_500)),
                        false => backoff(tries),
                    };
                    self.refusals.note(&e);
                    tokio::time::sleep(wait).await;
                }
                look => return look,
            }
        }
    }

    /// Whether one of this commit's sent attempts landed: found by commit id; by the
    /// exactly-once record naming one of its snapshots; or, when the table lost that part
    /// of its history (another tool expired it), by the commit's own files in the
    /// table's current manifests.
    async fn find_attempt(
        &self,
        fresh: &LoadedTable,
        changes: &SnapshotChanges,
        sent: &[SentAttempt],
        written: &[String],
    ) -> Result<Look> {
        if let Some(id) = find_commit(&fresh.metadata, changes.commit_id) {
            return Ok(Look::Landed(id));
        }
        let recorded = changes
            .offsets
            .as_ref()
            .and_then(|(writer_id, _)| record_snapshot_id(&fresh.metadata, writer_id))
            .filter(|id| sent.iter().any(|a| a.snapshot_id == *id));
        let found = match recorded {
            Some(id) => Some(id),
            None if !history_lost(&fresh.metadata, sent) => {
                return Ok(Look::Absent {
                    history_lost: false,
                });
            }
            None => {
                let own: HashSet<&str> = changes
                    .data_files
                    .iter()
                    .chain(&changes.delete_files)
                    .map(|f| f.file_path())
                    .chain(written.iter().map(String::as_str))
                    .collect();
                find_landed(
                    &fresh.metadata,
                    &self.current().file_io,
                    (self.manifest_list.as_ref(), &self.manifests),
                    sent,
                    &own,
                )
                .await?
            }
        };
        Ok(match found {
            Some(id) => {
                tracing::info!(
                    "commit {} to {} landed as snapshot {id}, since expired by another writer",
                    changes.commit_id,
                    fresh.ident
                );
                Look::Landed(id)
            }
            None => Look::Absent { history_lost: true },
        })
    }

    /// Deletes files no snapshot references (of attempts the catalog refused). Failures
    /// are logged: the files are only garbage.
    pub(super) async fn delete_unreferenced(&self, paths: Vec<String>) {
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

    /// Snapshots and refs past their retention at `now_ms` (refs only while floe's age
    /// limit is on).
    fn expired(
        &self,
        metadata: &iceberg::spec::TableMetadata,
        now_ms: i64,
    ) -> (Vec<i64>, Vec<String>) {
        let snapshots = expired_snapshots(metadata, self.options.retention, now_ms);
        let refs = if self.options.retention.max_age.is_zero() {
            Vec::new()
        } else {
            expired_refs(metadata, now_ms)
        };
        (snapshots, refs)
    }

    /// Expires snapshots past the table's retention (see `expire`) when at least 100
    /// are due, or any are and the last round is a minute old: one catalog commit per
    /// many data commits. One round at a time: a round whose file cleanup still runs
    /// holds the next back.
    pub(super) async fn expire_if_due(&mut self) {
        if self.cleanup_running.load(Ordering::Acquire) {
            return;
        }
        let stale = self
            .last_expiry
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(60));
        // Between rounds, only a table past floe's count cap by a whole round is looked at.
        let latest = self.latest_metadata();
        let snapshots = latest.snapshots().len();
        if !stale && snapshots < self.options.retention.max_snapshots + 100 {
            return;
        }
        let now = chrono::Utc::now().timestamp_millis();
        let (expired, refs) = self.expired(&latest, now);
        drop(latest);
        if (expired.is_empty() && refs.is_empty()) || (expired.len() < 100 && !stale) {
            return;
        }
        self.last_expiry = Some(Instant::now());
        // The stage's table is a commit applied locally: decide on the catalog's own table,
        // which has every other writer's refs, so no snapshot they keep is removed.
        let fresh = match self.reload().await {
            Ok(fresh) => fresh,
            Err(e) => {
                tracing::debug!("snapshot expiry skipped: {e}");
                return;
            }
        };
        self.publish_loaded(fresh);
        let view = self.current();
        let (expired, refs) = self.expired(&view.table.metadata, now);
        if expired.is_empty() && refs.is_empty() {
            return;
        }
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

    fn table(metadata: TableMetadataRef) -> LoadedTable {
        let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
        LoadedTable::new(ident, None, metadata, HashMap::new())
    }

    #[test]
    fn a_kept_table_stands_only_over_the_table_it_was_kept_over() {
        let metadata: TableMetadata =
            serde_json::from_str(include_str!("../../testdata/two_snapshots.json")).unwrap();
        let shown = Arc::new(metadata.clone());
        let kept = KeptTable::kept_over(table(Arc::new(metadata.clone())), &shown);
        assert!(kept.current_over(&shown));
        // A view with a fresh FileIO clones its table: the same metadata.
        assert!(kept.current_over(&table(shown.clone()).metadata));
        // A reload, or a table a write call adopted, is other metadata, even when equal.
        let reloaded = Arc::new(metadata);
        assert!(!kept.current_over(&reloaded));
        // Once the view dropped the table kept over, a new one never passes for it.
        drop(shown);
        let later: Vec<TableMetadataRef> = (0..64).map(|_| Arc::new((*reloaded).clone())).collect();
        assert!(later.iter().all(|m| !kept.current_over(m)));
    }
}
