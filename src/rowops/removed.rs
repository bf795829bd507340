//! What a commit's removal of touched keys is asked to do and what it did: the types
//! shared by the dispatcher (removal.rs) and the two ways of removing (cow.rs,
//! positional.rs).

use std::sync::Arc;

use arrow_array::RecordBatch;
use iceberg::spec::{DataFile, ManifestFile};

use super::keys::KeyColumns;
use crate::config::MergeStrategy;
use crate::write::FileSettings;

/// How the old rows of touched keys leave the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Copy-on-write: the files holding them are rewritten without them.
    Rewrite,
    /// Positional merge-on-read: their positions are written as position deletes.
    PositionDeletes,
}

impl Removal {
    /// How the commit stage removes the old rows of touched keys under `strategy`;
    /// `None` when the delete files written with the data do it (equality deletes).
    pub fn of(strategy: MergeStrategy) -> Option<Removal> {
        match strategy {
            MergeStrategy::MergeOnRead => None,
            MergeStrategy::CopyOnWrite => Some(Removal::Rewrite),
            MergeStrategy::MergeOnReadPositional => Some(Removal::PositionDeletes),
        }
    }
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
    /// Removed files, with the partition spec id of their manifest: data files a
    /// rewrite replaced, or deletion vectors replaced by new ones holding their
    /// positions too.
    pub removed: Vec<(DataFile, i32)>,
    /// The remaining rows of the rewritten files.
    pub added: Vec<DataFile>,
    /// Position-delete files (deletion vectors on v3) for the touched rows.
    pub position_deletes: Vec<DataFile>,
}
