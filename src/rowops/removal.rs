//! Removing the rows of touched keys from the files a commit's head has: the commit
//! stage's side of copy-on-write and positional merge-on-read (equality-delete
//! merge-on-read needs no lookup: its delete files are written with the data).
//!
//! Planned per commit attempt against the head the attempt builds on. The commit
//! requires the head to be unchanged, so a concurrent commit (which may have added rows
//! with these keys, or rewritten or removed these files) makes the next attempt plan
//! again from the new head: a row is never lost or resurrected.

use std::sync::OnceLock;

use iceberg::io::FileIO;
use iceberg::spec::{ManifestFile, TableMetadata};
use uuid::Uuid;

use super::lookup::{KeyProbe, KeyRanges, find_touched_rows};
pub use super::removed::{Removal, RemoveKeys, Removed};
use super::{cow, fingerprints, positional};
use crate::error::Result;
use crate::table::manifest_cache::ManifestCache;

/// Where a removal's files go, and the record of them.
pub struct Written<'a> {
    /// Every file written, recorded as soon as it exists: the caller deletes them if the
    /// attempt fails (see [`crate::commit::snapshot::prepare_snapshot`]).
    pub all: &'a mut Vec<String>,
    /// Scratch storage for small files (position deletes, small rewrites), uploaded with
    /// the attempt's manifests in one round trip instead of one by one while the commit
    /// stage waits.
    pub stage_io: &'a FileIO,
    /// The files written to `stage_io`.
    pub staged: &'a mut Vec<String>,
}

/// Removes, for a snapshot `snapshot_id` on top of `metadata`'s head (whose manifests
/// are `carried`), the rows with any of the touched keys.
pub async fn remove_touched_rows(
    metadata: &TableMetadata,
    (file_io, cache): (&FileIO, &ManifestCache),
    ids: (i64, Uuid, u32),
    carried: Vec<ManifestFile>,
    remove: &RemoveKeys,
    out: Written<'_>,
) -> Result<Removed> {
    cache.keep_only(&carried);
    match remove.by {
        Removal::Rewrite => cow::check_table(&carried)?,
        Removal::PositionDeletes => positional::check_table(metadata)?,
    }
    let keys = &remove.keys;
    let converter = keys.converter()?;
    let touched_rows = keys.rows(&converter, &remove.touched)?;
    let ranges = KeyRanges::of(keys, &remove.touched);
    let fingerprints = fingerprints::of_touched(keys, &remove.touched, &touched_rows);
    let probe = KeyProbe {
        keys,
        converter: &converter,
        touched: &touched_rows,
        touched_set: OnceLock::new(),
        fingerprints: &fingerprints,
        ranges: &ranges,
    };
    let started = std::time::Instant::now();
    let hits = find_touched_rows(file_io, &carried, cache, &probe).await?;
    let looked = started.elapsed();
    let hit_files = hits.len();
    let removed = match remove.by {
        Removal::Rewrite => {
            cow::rewrite(
                metadata,
                (file_io, cache),
                ids,
                carried,
                (hits, keys),
                &remove.settings,
                out,
            )
            .await
        }
        Removal::PositionDeletes => {
            positional::delete_positions(
                metadata,
                (file_io, cache),
                ids,
                carried,
                hits,
                &remove.settings,
                out,
            )
            .await
        }
    };
    tracing::debug!(
        "removing {} keys: lookup {looked:?} ({hit_files} files hold them), removal {:?}",
        touched_rows.num_rows(),
        started.elapsed() - looked
    );
    removed
}
