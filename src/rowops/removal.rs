//! Removing the rows of touched keys from the files a commit's head has: the commit
//! stage's side of copy-on-write and positional merge-on-read (equality-delete
//! merge-on-read needs no lookup: its delete files are written with the data).
//!
//! Planned per commit attempt against the head the attempt builds on. The commit
//! requires the head to be unchanged, so a concurrent commit (which may have added rows
//! with these keys, or rewritten or removed these files) makes the next attempt plan
//! again from the new head: a row is never lost or resurrected.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_row::Row;
use iceberg::io::FileIO;
use iceberg::spec::{DataFile, ManifestFile, TableMetadata};
use uuid::Uuid;

use super::keys::KeyColumns;
use super::lookup::{KeyProbe, KeyRanges, find_touched_rows};
use super::{cow, positional};
use crate::error::Result;
use crate::table::manifest_cache::ManifestCache;
use crate::write::FileSettings;

/// How the old rows of touched keys leave the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Copy-on-write: the files holding them are rewritten without them.
    Rewrite,
    /// Positional merge-on-read: their positions are written as position deletes.
    PositionDeletes,
}

/// What a commit removes: every row of the head with one of `touched`'s keys.
#[derive(Clone)]
pub struct RemoveKeys {
    pub keys: Arc<KeyColumns>,
    /// The keys the commit upserts or deletes (key schema, once each).
    pub touched: RecordBatch,
    pub settings: FileSettings,
    pub by: Removal,
}

/// One attempt's removals.
#[derive(Default)]
pub struct Removed {
    /// The head's manifests, with each one that held a rewritten file replaced by a copy
    /// marking it DELETED.
    pub manifests: Vec<ManifestFile>,
    /// Rewritten (removed) data files, with the partition spec id of their manifest.
    pub removed: Vec<(DataFile, i32)>,
    /// The remaining rows of the rewritten files.
    pub added: Vec<DataFile>,
    /// Position-delete files for the touched rows.
    pub position_deletes: Vec<DataFile>,
}

/// Removes, for a snapshot `snapshot_id` on top of `metadata`'s head (whose manifests
/// are `carried`), the rows with any of the touched keys. Every file it writes is
/// recorded in `written` as soon as it exists: the caller deletes them if the attempt
/// fails (see [`crate::commit::snapshot::prepare_snapshot`]).
pub async fn remove_touched_rows(
    metadata: &TableMetadata,
    (file_io, cache): (&FileIO, &ManifestCache),
    ids: (i64, Uuid, u32),
    carried: Vec<ManifestFile>,
    remove: &RemoveKeys,
    written: &mut Vec<String>,
) -> Result<Removed> {
    cache.keep_only(&carried);
    match remove.by {
        Removal::Rewrite => cow::check_table(metadata, &carried)?,
        Removal::PositionDeletes => positional::check_table(metadata)?,
    }
    let keys = &remove.keys;
    let converter = keys.converter()?;
    let touched_rows = keys.rows(&converter, &remove.touched)?;
    let touched: HashSet<Row<'_>> = touched_rows.iter().collect();
    let ranges = KeyRanges::of(keys, &remove.touched);
    let probe = KeyProbe {
        keys,
        converter: &converter,
        touched: &touched,
        ranges: &ranges,
    };
    let hits = find_touched_rows(file_io, &carried, cache, &probe).await?;
    match remove.by {
        Removal::Rewrite => {
            cow::rewrite(
                metadata,
                (file_io, cache),
                ids,
                carried,
                hits,
                &remove.settings,
                written,
            )
            .await
        }
        Removal::PositionDeletes => {
            positional::delete_positions(
                metadata,
                (file_io, cache),
                carried,
                hits,
                &remove.settings,
                written,
            )
            .await
        }
    }
}
