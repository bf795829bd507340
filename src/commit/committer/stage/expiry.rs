//! Snapshot expiry after commits, and deleting the files nothing references: a refused
//! attempt's, and those expired snapshots leave behind.

use super::*;

/// Marks an expiry round's cleanup as running until dropped (also when it panics).
pub(in crate::commit::committer) struct RoundRunning(Arc<std::sync::atomic::AtomicBool>);

impl RoundRunning {
    pub(in crate::commit::committer) fn start(flag: Arc<std::sync::atomic::AtomicBool>) -> Self {
        flag.store(true, Ordering::Release);
        RoundRunning(flag)
    }
}

impl Drop for RoundRunning {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl CommitStage {
    /// Files of a definitively refused commit: nothing references them.
    pub(in crate::commit::committer) async fn delete_files(
        &self,
        data_files: &[DataFile],
        metadata_files: &[String],
    ) {
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

    /// Deletes files no snapshot references (of attempts the catalog refused). Failures
    /// are logged: the files are only garbage.
    pub(in crate::commit::committer) async fn delete_unreferenced(&self, paths: Vec<String>) {
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
    /// limit is on), read with the table's refs as it keeps them.
    pub(super) fn expired(&self, table: &LoadedTable, now_ms: i64) -> (Vec<i64>, Vec<String>) {
        let metadata = &table.metadata;
        let snapshots =
            expired_snapshots_of(metadata, || table.refs(), self.options.retention, now_ms);
        let refs = if self.options.retention.max_age.is_zero() {
            Vec::new()
        } else {
            expired_refs(metadata, table.refs(), now_ms)
        };
        (snapshots, refs)
    }

    /// Expires snapshots past the table's retention (see `expire`) when at least 100
    /// are due, or any are and the last round is a minute old: one catalog commit per
    /// many data commits. One round at a time: a round whose file cleanup still runs
    /// holds the next back.
    pub(in crate::commit::committer) async fn expire_if_due(&mut self) {
        if self.cleanup_running.load(Ordering::Acquire) {
            return;
        }
        let stale = self
            .last_expiry
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(60));
        // Between rounds, only a table past floe's count cap by a whole round is looked at.
        let view = self.current();
        let latest = self.base(&view);
        let snapshots = latest.metadata.snapshots().len();
        if !stale && snapshots < self.options.retention.max_snapshots + 100 {
            return;
        }
        let now = chrono::Utc::now().timestamp_millis();
        let (expired, refs) = self.expired(latest, now);
        drop(view);
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
        let (expired, refs) = self.expired(&view.table, now);
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
