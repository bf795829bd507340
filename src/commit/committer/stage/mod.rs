//! The commit stage: commits every encoded group that is ready as one snapshot per run,
//! retrying conflicts and unknown outcomes on the new head, expiring old snapshots.
//!
//! The attempts of one commit (conflicts, unknown outcomes, looking for an earlier
//! attempt) are in `attempts`; snapshot expiry and file cleanup in `expiry`.

use crate::sync::LockExt;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use iceberg::TableIdent;
use iceberg::spec::{DataFile, TableMetadata, TableMetadataRef};
use tokio::sync::{mpsc, watch};

use super::backoff::{backoff, conflict_backoff};
use super::contention::{Contention, jitter};
use super::credentials::Refusals;
use super::schedule::Pace;
use super::view::{publish_table, same_for_writers, take_in_offsets};
use super::{
    Committed, CommitterOptions, EncodedGroup, Ledger, StagedKeys, TableView, fail_all,
    fail_overtaking, finish, is_overtaken, overtaken_error,
};
use crate::catalog::{Catalog, LoadedTable};
use crate::commit::expire::{
    delete_unreachable, expired_refs, expired_snapshots_of, removal_request,
};
use crate::commit::landed::{SentAttempt, find_landed, history_lost};
use crate::commit::offsets::{SourceOffsets, record_snapshot_id};
use crate::commit::snapshot::{
    Attempt, Cached, ManifestListCache, Rebase, SnapshotChanges, find_commit, prepare_snapshot,
};
use crate::commit::staging::{StagedFile, Staging, upload};
use crate::commit::together::Party;
use crate::error::{Error, ErrorKind, Result};
use crate::rowops::removal::RemoveKeys;
use crate::stats::EventKind;
use crate::table::manifest_cache::ManifestCache;

mod attempts;
mod expiry;

use attempts::*;

/// Splits encoded groups into the runs that may share a snapshot. A group with deletes
/// starts a new one: its deletes must apply to the rows of the groups before it, and
/// within one snapshot they would not (one sequence number); a copy-on-write group
/// rewrites the files as the head has them, so the groups before it must be there. So
/// does a group written for another schema (the table evolved between them). A group
/// committing together with other tables (`commit.atomic_tables`) is a run of its own:
/// its snapshot is its transaction's part, which another call's would widen.
pub(super) fn one_snapshot_each(groups: Vec<EncodedGroup>) -> Vec<Vec<EncodedGroup>> {
    let mut runs: Vec<Vec<EncodedGroup>> = Vec::new();
    for g in groups {
        match runs.last_mut() {
            Some(run)
                if g.delete_files.is_empty()
                    && g.touched.is_none()
                    && run[0].schema_id == g.schema_id
                    && !g.commits_together()
                    && !run[0].commits_together() =>
            {
                run.push(g)
            }
            _ => runs.push(vec![g]),
        }
    }
    runs
}

/// How old the committer's view of its table may grow before it is loaded again from
/// the catalog (see [`CommitStage::refresh_if_due`]).
pub(super) const VIEW_MAX_AGE: Duration = Duration::from_secs(60);

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
    /// Pacing while other writers commit to the table too.
    pub(super) contention: Contention,
    /// How long the next commit was held by that pacing (reported with it).
    pub(super) held: Duration,
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
            let mut held = first.held;
            let mut groups = vec![first];
            // Paced while other writers' commits keep refusing this one's (see
            // `contention`). A part of a transaction across tables is not held: the
            // other tables' parts wait for it.
            let hold = self.pace.locked().holding();
            if !groups[0].commits_together()
                && let Some(until) = hold
            {
                let holding = Instant::now();
                self.hold(&mut encoded, &mut groups, until).await;
                held += holding.elapsed();
            }
            self.held = held;
            // Marked at once: the encoder, woken by the free slot, reads it next.
            let started = Instant::now();
            self.pace.locked().commit_started = Some(started);
            // Everything encoded while the previous commit was in flight goes in this one.
            while let Ok(g) = encoded.try_recv() {
                groups.push(g);
            }
            let released = groups.iter().map(|g| g.pendings.len()).sum();
            // The most conflicts one of the snapshots met (upserts commit a snapshot per
            // group: each meets the one conflict that taking turns brings), and whether
            // any was paced. A transaction's conflicts may be another table's: they
            // pace nothing.
            let mut conflicts = None;
            for snapshot in one_snapshot_each(groups) {
                let together = snapshot[0].commits_together();
                let met = self.commit_groups(snapshot).await;
                if !together {
                    conflicts = Some(conflicts.unwrap_or(0).max(met));
                }
            }
            if let Some(conflicts) = conflicts {
                self.contention.started(started);
                self.contention.finished(conflicts);
            }
            // Drawn now, so that the encoder gathers what arrives until then into one
            // group (see `Pace::hold_until`).
            let next_hold = self.contention.hold_until(jitter());
            {
                let mut pace = self.pace.locked();
                pace.hold_until = next_hold;
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

    /// Holds the next commit until `until`, taking in what the encoder writes meanwhile:
    /// the commit carries more rows, and the catalog sees fewer commits. (Ending early
    /// once every caller of the host is in would keep a writer whose input is behind
    /// from pacing at all: its callers are always all in.)
    async fn hold(
        &self,
        encoded: &mut mpsc::Receiver<EncodedGroup>,
        groups: &mut Vec<EncodedGroup>,
        until: Instant,
    ) {
        // Past `until`, or the encoder is gone (the next `recv` ends the stage). A part
        // of a transaction across tables ends the hold: the other tables' parts wait
        // for it.
        while let Ok(Some(g)) = tokio::time::timeout_at(until.into(), encoded.recv()).await {
            let together = g.commits_together();
            groups.push(g);
            if together {
                return;
            }
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
    ///
    /// Also while other writers keep committing to the table (see `contention`): a
    /// commit built on this stage's own last head would then be refused for certain.
    async fn catch_up(&mut self) {
        if self.behind {
            self.load_view("loading the table after a failed commit")
                .await;
        } else if self.contention.load_first() {
            let seen = self.latest_metadata().current_snapshot_id();
            match self.reload().await {
                Ok(table) => {
                    let moved = table.metadata.current_snapshot_id() != seen;
                    self.contention.loaded(moved);
                    self.publish_loaded(table);
                }
                // Not tried again before every commit while the catalog fails loads:
                // the commit's own handling of conflicts finds the head.
                Err(e) => {
                    self.contention.loaded(false);
                    tracing::debug!("loading the table before a commit failed: {e}");
                }
            }
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

    /// Keeps the key indexes of committed data files (see [`crate::table::key_index`]).
    fn keep_key_indexes(&self, committed: &[DataFile], staged: Vec<StagedKeys>) {
        let by_path: HashMap<&str, &DataFile> =
            committed.iter().map(|f| (f.file_path(), f)).collect();
        for (signature, indexes) in staged {
            for (path, index) in indexes {
                if let Some(file) = by_path.get(path.as_str()) {
                    self.manifests.keys().offer(&signature, file, index);
                }
            }
        }
    }

    /// Commits `groups` as one snapshot and answers their callers; returns the conflicts
    /// the commit met.
    pub(super) async fn commit_groups(&mut self, groups: Vec<EncodedGroup>) -> u32 {
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
        let mut key_indexes = Vec::new();
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
            key_indexes.extend(g.key_indexes);
            for p in &g.pendings {
                offsets.union_with(&p.submission.offsets);
            }
            pendings.extend(g.pendings);
        }
        // The call's transaction across tables, if these rows are part of one.
        let mut together = pendings
            .iter_mut()
            .find_map(|p| p.submission.together.take());
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
        let outcome = self
            .commit_with_retries(&changes, staged, together.as_ref())
            .await;
        // The first snapshot after a hold reports it.
        let paced = std::mem::take(&mut self.held);
        match outcome.result {
            Ok(snapshot_id) => {
                if let Some(party) = &mut together {
                    party.landed();
                }
                self.record_committed(&changes, &outcome.tries, (started.elapsed(), paced));
                self.keep_key_indexes(&changes.data_files, key_indexes);
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
                self.record_failed(&e, &outcome.tries, (started.elapsed(), paced));
                if self.options.cleanup_on_failure && !outcome.maybe_committed {
                    let files: Vec<DataFile> = changes
                        .data_files
                        .iter()
                        .chain(&changes.delete_files)
                        .cloned()
                        .collect();
                    self.delete_files(&files, &outcome.written).await;
                }
                // Called off by another table of the call: these rows are not at fault,
                // and the call retries them with the others.
                let e = match e.kind() {
                    ErrorKind::Cancelled if together.is_some() => {
                        Error::new(ErrorKind::Unavailable, e.message().to_string())
                    }
                    _ => e,
                };
                fail_overtaking(&self.options, &ident, pendings, &e);
            }
        }
        outcome.tries.conflicts
    }

    /// Counts a landed snapshot, for the writer's stats and the host's metrics.
    fn record_committed(
        &self,
        changes: &SnapshotChanges,
        tries: &Tries,
        (took, paced): (Duration, Duration),
    ) {
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
        (e.took, e.catalog, e.paced) = (took, tries.catalog, paced);
        (e.conflicts, e.retries) = (tries.conflicts, tries.retries);
        stats.record(e);
    }

    /// Counts a commit that gave up.
    fn record_failed(&self, error: &Error, tries: &Tries, (took, paced): (Duration, Duration)) {
        let stats = &self.options.stats;
        let mut e = stats.event(EventKind::CommitFailed, &self.ident().to_string());
        (e.took, e.paced) = (took, paced);
        (e.conflicts, e.retries) = (tries.conflicts, tries.retries);
        e.failure = Some(error.kind());
        stats.record(e);
    }

    pub(super) async fn reload(&self) -> Result<LoadedTable> {
        let ident = self.ident();
        self.catalog
            .load_table(&ident)
            .await?
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("table {ident} was dropped")))
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
            serde_json::from_str(include_str!("../../../testdata/two_snapshots.json")).unwrap();
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
