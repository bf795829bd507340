//! Settling whether an earlier commit attempt landed once its snapshot is gone.
//!
//! A commit attempt is found by its commit id in the table's snapshots
//! ([`find_commit`](super::find_commit)). That fails when the attempt landed (its answer
//! lost, or a proxy answering a re-sent POST with a "definite" 409) and another tool then
//! committed on top and expired floe's snapshot before floe reloaded. Retrying would
//! append the rows a second time, and with exactly-once the retry finds its own offsets
//! recorded and, taking them for another process's, would delete the files the table
//! references. So before retrying, floe looks for its files in the table itself.

use std::collections::HashSet;

use iceberg::io::FileIO;
use iceberg::spec::{FormatVersion, TableMetadata};

use super::snapshot::{ManifestListCache, current_manifests};
use crate::error::Result;
use crate::table::manifest_cache::ManifestCache;

/// An attempt whose request reached (or may have reached) the catalog.
#[derive(Debug, Clone, Copy)]
pub struct SentAttempt {
    pub snapshot_id: i64,
    /// The head the attempt was built on.
    pub parent: Option<i64>,
    /// The sequence number the attempt's snapshot would have had.
    pub sequence_number: i64,
}

/// Whether a sent attempt may have landed and since left the table's history: only then
/// is [`find_landed`] worth its reads.
///
/// - v2 and later: sequence numbers are unique in a table and only grow, so an attempt
///   whose number the table has not reached did not land, and a snapshot holding its
///   number that is not the attempt proves it did not land there.
/// - v1 (no sequence numbers): walking main back from the head reaches the attempt's
///   parent without a gap when the attempt did not land on main; a missing parent on the
///   way means history was cut.
pub fn history_lost(metadata: &TableMetadata, sent: &[SentAttempt]) -> bool {
    sent.iter().any(|a| {
        if metadata.format_version() == FormatVersion::V1 {
            !main_reaches(metadata, a.parent)
        } else {
            metadata.last_sequence_number() >= a.sequence_number
                && metadata
                    .snapshots()
                    .all(|s| s.sequence_number() != a.sequence_number)
        }
    })
}

/// Whether walking main from the head back to `parent` (`None`: the first snapshot)
/// meets no expired snapshot.
fn main_reaches(metadata: &TableMetadata, parent: Option<i64>) -> bool {
    let mut at = metadata.current_snapshot_id();
    loop {
        if at == parent {
            return true;
        }
        let Some(id) = at else {
            // The walk ended at the first snapshot without meeting `parent`.
            return false;
        };
        match metadata.snapshot_by_id(id) {
            Some(s) => at = s.parent_snapshot_id(),
            None => return false,
        }
    }
}

/// The snapshot that added one of `own` (paths of files only this commit's attempts
/// wrote: data, delete and manifest files) to the table's current state, if any.
/// Manifests added before the earliest sent attempt cannot hold them and are not read.
pub async fn find_landed(
    metadata: &TableMetadata,
    file_io: &FileIO,
    (list, manifests): (Option<&ManifestListCache>, &ManifestCache),
    sent: &[SentAttempt],
    own: &HashSet<&str>,
) -> Result<Option<i64>> {
    let earliest = sent.iter().map(|a| a.sequence_number).min().unwrap_or(0);
    // v1 manifests carry no sequence number: there, every one is read.
    let v1 = metadata.format_version() == FormatVersion::V1;
    // The id reported: the sent attempt the file names, else the last one sent.
    let ours = |id: Option<i64>| {
        id.filter(|id| sent.iter().any(|a| a.snapshot_id == *id))
            .or(sent.last().map(|a| a.snapshot_id))
    };
    for manifest in &current_manifests(metadata, file_io, list).await? {
        if own.contains(manifest.manifest_path.as_str()) {
            return Ok(ours(Some(manifest.added_snapshot_id)));
        }
        if !v1 && manifest.sequence_number < earliest {
            continue;
        }
        let loaded = manifests.load(file_io, manifest).await?;
        if let Some(entry) = loaded
            .entries()
            .iter()
            .find(|e| own.contains(e.file_path()))
        {
            return Ok(ours(entry.snapshot_id()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    fn sent(parent: Option<i64>, sequence_number: i64) -> SentAttempt {
        SentAttempt {
            snapshot_id: 99,
            parent,
            sequence_number,
        }
    }

    #[test]
    fn an_attempt_whose_sequence_number_is_taken_did_not_land_there() {
        // Snapshots 1 ← 2 hold sequence numbers 1 and 2.
        let m = fixture::table("{}", 2, "", "");
        assert!(!history_lost(&m, &[sent(Some(1), 2)]));
        assert!(!history_lost(&m, &[sent(None, 1)]));
    }

    #[test]
    fn an_attempt_whose_sequence_number_is_absent_may_have_been_expired() {
        // The fixture's last sequence number is 3, held by no snapshot.
        let m = fixture::table("{}", 2, "", "");
        assert!(history_lost(&m, &[sent(Some(2), 3)]));
        assert!(history_lost(&m, &[sent(Some(7), 3), sent(Some(1), 2)]));
        assert!(!history_lost(&m, &[]));
    }

    #[test]
    fn an_attempt_past_the_last_sequence_number_did_not_land() {
        let m = fixture::table("{}", 2, "", "");
        assert!(!history_lost(&m, &[sent(Some(2), 4)]));
    }

    #[test]
    fn main_reaches_an_intact_parent_and_not_across_a_gap() {
        let m = fixture::table("{}", 2, "", "");
        assert!(main_reaches(&m, Some(2)));
        assert!(main_reaches(&m, Some(1)));
        assert!(main_reaches(&m, None));
        // Snapshot 3's parent 7 was expired: the attempt built on 2 may be gone with it.
        let cut = fixture::table("{}", 3, "", &fixture::third_snapshot(7, ""));
        assert!(!main_reaches(&cut, Some(2)));
        assert!(main_reaches(&cut, Some(3)));
        // A parent that is not on main at all (a branch's head).
        assert!(!main_reaches(&m, Some(42)));
    }
}
