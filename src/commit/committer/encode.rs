//! The encoder: writes each group's rows as data files (and equality deletes), in
//! memory for small groups, and hands the group to the commit stage.

use crate::sync::LockExt;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use iceberg::spec::DataFile;
use tokio::sync::{mpsc, watch};

use crate::commit::staging::{STAGE_MAX_INPUT_BYTES, StagedFile, Staging};
use crate::config::MergeStrategy;
use crate::error::{Error, ErrorKind, Result};
use crate::rowops::fingerprints;
use crate::rowops::lookup::index_written;
use crate::rowops::removal::Removal;
use crate::rowops::resolve::resolve_group;
use crate::stats::EventKind;
use crate::write::{write_data_files, write_equality_delete_files};

use super::credentials::Refusals;
use super::gate::ShredGate;
use super::schedule::Pace;
use super::schedule::{Gathering, Plan, collect};
use super::{
    CommitterOptions, EncodedGroup, Pending, StagedKeys, TableView, fail_overtaking,
    without_overtaken,
};

pub(super) async fn encode_loop(
    (mut queue, gate): (mpsc::UnboundedReceiver<Pending>, Arc<ShredGate>),
    encoded: mpsc::Sender<EncodedGroup>,
    view: watch::Receiver<Arc<TableView>>,
    pace: Arc<Mutex<Pace>>,
    mut commits_done: watch::Receiver<u64>,
    options: Arc<CommitterOptions>,
    refusals: Refusals,
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
        // A transaction across tables is not held: its other tables' parts wait for it.
        let may_hold = first.submission.together.is_none();
        let plan = pace.locked().plan(may_hold);
        let gathering = match plan {
            Plan::Now => None,
            Plan::GatherUntil(until) => Some(Gathering::held_until(options.callers, until)),
            Plan::Overlap(wait) => {
                tokio::time::sleep(wait).await;
                None
            }
            Plan::Gather => {
                // The stage clears `commit_started` before announcing the end, so an end
                // that came between the check and here is not missed.
                let _ = commits_done.changed().await;
                let pace = pace.locked();
                Some(match pace.gather_until() {
                    Some(until) if may_hold => Gathering::held_until(options.callers, until),
                    _ => Gathering::new(options.callers, pace.commit, Instant::now()),
                })
            }
            Plan::GatherSince { ended, released } => {
                let commit = pace.locked().commit;
                let callers = options.callers.map(|n| n.min(released));
                Some(Gathering::new(callers, commit, ended))
            }
        };
        let gathered_at = Instant::now();
        let group = collect(first, &mut queue, &mut carry, (&options, &gate), gathering).await;
        let held = match gathering {
            Some(g) if g.held => gathered_at.elapsed(),
            _ => Duration::ZERO,
        };
        let current = view.borrow().clone();
        let ident = current.table.ident.clone();
        let schema_id = current.schema_id();
        let group = without_overtaken(&options, &ident, group);
        let (fresh, stale): (Vec<Pending>, Vec<Pending>) = group
            .into_iter()
            .partition(|p| p.submission.schema_id == schema_id);
        if !stale.is_empty() {
            let e = Error::new(
                ErrorKind::SchemaChanged,
                "the table's schema changed after the batch was shredded",
            );
            fail_overtaking(&options, &ident, stale, &e);
        }
        // Rows after stale ones wait for them to be shredded again (see `commit::order`).
        let fresh = without_overtaken(&options, &ident, fresh);
        if fresh.is_empty() {
            continue;
        }
        let t0 = Instant::now();
        let (batches, deletes) = match group_rows(&fresh, &current) {
            Ok(rows) => rows,
            Err(e) => {
                fail_overtaking(&options, &ident, fresh, &e);
                continue;
            }
        };
        let n = batches.len();
        let input_bytes: usize = fresh.iter().map(|p| p.submission.bytes).sum();
        let stage = input_bytes <= STAGE_MAX_INPUT_BYTES;
        let mut fresh = fresh;
        release_rows(&mut fresh);
        let written =
            write_group(batches, deletes.as_ref(), &current, stage, current.strategy).await;
        Pace::smooth(&mut pace.locked().encode, t0.elapsed());
        record_written(&options, &ident, &written, t0.elapsed());
        tracing::debug!("encoded {n} batches in {:?}", t0.elapsed());
        match written {
            Ok((data_files, delete_files, staged)) => {
                let touched = match (&current.keys, deletes, Removal::of(current.strategy)) {
                    (Some(keys), Some(deletes), Some(by)) => Some((deletes, keys.clone(), by)),
                    _ => None,
                };
                let key_indexes = match touched {
                    Some(_) => index_staged(&current, &data_files, &staged),
                    None => None,
                };
                let group = EncodedGroup {
                    key_indexes,
                    data_files,
                    delete_files,
                    touched,
                    staged,
                    table_uuid: current.table.metadata.uuid(),
                    schema_id,
                    spec_id: current.table.metadata.default_partition_spec_id(),
                    pendings: fresh,
                    held,
                };
                slot.send(group);
            }
            Err(e) => {
                refusals.note(&e);
                fail_overtaking(&options, &ident, fresh, &e.context("writing data files"));
            }
        }
    }
}

/// Gives up the pendings' rows once the group's rows are taken from them: nothing reads
/// a pending's batch afterwards (a call that fails shreds its messages again), and the
/// writer drops each batch as it is written, so a group's rows are not held as Arrow and
/// as Parquet at once, nor as Arrow while the group waits for its commit. Their room
/// goes to calls waiting to shred.
fn release_rows(pendings: &mut [Pending]) {
    for p in pendings {
        p.submission.batch = RecordBatch::new_empty(p.submission.batch.schema());
        p.submission.deletes = None;
        p.submission.room = None;
    }
}

/// Copy-on-write and positional: the key index of each staged data file of a group that
/// upserts or deletes, so the first commit that touches its keys finds their rows
/// without reading the file back. (Groups of inserts alone are not indexed: a table
/// that only takes inserts runs no lookup, which is what forgets files no longer live.)
/// A file that cannot be indexed is read when a lookup first needs it, as any other.
fn index_staged(
    view: &TableView,
    data_files: &[DataFile],
    staged: &[StagedFile],
) -> Option<StagedKeys> {
    let keys = view.keys.as_ref()?;
    Removal::of(view.strategy)?;
    let data: HashSet<&str> = data_files.iter().map(|f| f.file_path()).collect();
    let indexes = staged
        .iter()
        .filter(|f| data.contains(f.path.as_str()))
        .filter_map(|f| match index_written(keys, f.bytes.clone()) {
            Ok(index) => index.map(|i| (f.path.clone(), i)),
            Err(e) => {
                tracing::debug!("the keys of {} were not indexed: {e}", f.path);
                None
            }
        })
        .collect();
    Some((fingerprints::signature(keys), indexes))
}

/// The rows a group writes: each call's rows minus those a later call in the group
/// upserted or deleted, and the keys to delete (see [`crate::rowops::resolve`]).
pub(super) fn group_rows(
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
pub(super) type WrittenGroup = (Vec<DataFile>, Vec<DataFile>, Vec<StagedFile>);

/// Writes a group's data files and delete files: to scratch memory when `stage` (they
/// are uploaded with the commit's metadata), else in place. The scratch space lives only
/// as long as this call, so a failure halfway leaves nothing behind.
pub(super) async fn write_group(
    batches: Vec<RecordBatch>,
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
        _ if Removal::of(merge_strategy).is_some() => Vec::new(),
        (Some(keys), Some(columns)) => {
            write_equality_delete_files(
                keys,
                &columns.schema,
                &columns.field_ids,
                metadata,
                io,
                &view.settings,
            )
            .await?
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

/// Counts one group's written files, for the writer's stats and the host's upload-latency
/// metric (a failed write is the calls' failure, counted by the host).
fn record_written<S>(
    options: &CommitterOptions,
    ident: &iceberg::TableIdent,
    written: &Result<(Vec<DataFile>, Vec<DataFile>, S)>,
    took: std::time::Duration,
) {
    let Ok((data, deletes, _)) = written else {
        return;
    };
    let mut e = options
        .stats
        .event(EventKind::FilesWritten, &ident.to_string());
    e.took = took;
    e.rows = data.iter().map(|f| f.record_count()).sum();
    e.data_files = data.len() as u64;
    e.data_bytes = data.iter().map(|f| f.file_size_in_bytes()).sum();
    e.delete_files = deletes.len() as u64;
    options.stats.record(e);
}
