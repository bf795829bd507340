//! One commit's attempts: each built on the newest head, retried after a conflict or
//! an unknown outcome, and, when an attempt's outcome is unknown, the look for it in
//! the table's history before anything is written again.

use super::*;

/// A commit answer counts only if the table's main branch is the snapshot just
/// produced; anything else (a proxy's redirect target, a cache) leaves the outcome
/// unknown, to be settled by looking for the commit id.
pub(in crate::commit::committer) fn accepted(
    table: LoadedTable,
    snapshot_id: i64,
) -> Result<LoadedTable> {
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

/// How often a failed look for an earlier attempt is tried again before the outcome is
/// reported unknown.
pub(super) const LOOK_RETRIES: u32 = 3;

/// What a look for this commit's earlier attempts found.
pub(super) enum Look {
    Landed(i64),
    /// Not in the table. `history_lost`: part of the table's history the attempts could
    /// be in was expired (their files were looked for instead).
    Absent {
        history_lost: bool,
    },
}

/// How a commit attempt sequence ended.
pub(in crate::commit::committer) struct Outcome {
    pub(in crate::commit::committer) result: Result<i64>,
    /// Some attempt's outcome was unknown: its files may be referenced by the table.
    pub(in crate::commit::committer) maybe_committed: bool,
    /// Metadata files written by the attempts.
    pub(in crate::commit::committer) written: Vec<String>,
    pub(in crate::commit::committer) tries: Tries,
}

/// What a commit's attempts met, for its event (see [`crate::stats::events`]).
#[derive(Debug, Default, Clone, Copy)]
pub(in crate::commit::committer) struct Tries {
    /// Attempts refused because another commit landed first.
    pub(in crate::commit::committer) conflicts: u32,
    /// Attempts retried for any other reason.
    pub(in crate::commit::committer) retries: u32,
    /// The catalog's answer to the request that landed.
    pub(in crate::commit::committer) catalog: Duration,
}

impl CommitStage {
    /// Commits, rebuilding on the new head after a conflict or a throttling answer. After
    /// an unknown outcome it looks for the commit id before trying again (and once more
    /// before giving up), so rows are never appended twice; while that stays undecided
    /// the error says so.
    ///
    /// Conflicts are ordinary when several writers share a table and each one proves
    /// that another commit landed, so they are retried for up to `retry_timeout`; a
    /// retry reuses the data manifest and rewrites only the manifest list. Throttling and
    /// answers of unknown outcome are retried `max_retries` times.
    pub(in crate::commit::committer) async fn commit_with_retries(
        &mut self,
        changes: &SnapshotChanges,
        staged_data: Vec<StagedFile>,
        together: Option<&Party>,
    ) -> Outcome {
        let mut tries = Tries::default();
        let mut outcome = self
            .attempt_commits(changes, staged_data, together, &mut tries)
            .await;
        outcome.tries = tries;
        outcome
    }

    /// [`Self::commit_with_retries`]'s attempts, counted in `tries`.
    pub(super) async fn attempt_commits(
        &mut self,
        changes: &SnapshotChanges,
        mut staged_data: Vec<StagedFile>,
        together: Option<&Party>,
        tries: &mut Tries,
    ) -> Outcome {
        self.catch_up().await;
        let ident = self.ident();
        // When the commit started, moved on by the time it waited for commit slots:
        // waiting for other tables' commits spends none of this one's retry budget.
        let mut started = Instant::now();
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
                let give_up = match previous.kind() {
                    ErrorKind::Conflict => started.elapsed() >= self.options.retry_timeout,
                    ErrorKind::Rejected => false,
                    _ => tries.retries > self.options.max_retries,
                };
                // The wait comes before the look, so the next attempt builds on a head
                // loaded just before it: a head loaded before the wait is already stale
                // when other writers commit more often than the wait is long, and every
                // attempt built on it conflicts (a writer starved for seconds).
                if !give_up {
                    tokio::time::sleep(match previous.kind() {
                        ErrorKind::Conflict => conflict_backoff(tries.conflicts),
                        _ => backoff(tries.retries),
                    })
                    .await;
                }
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
                if give_up {
                    break;
                }
            }
            // A transaction across tables already called off, or found landed by another
            // table, is worth neither a slot nor a part built and uploaded (see
            // `commit::together`).
            if let Some(e) = together.and_then(Party::over) {
                match e.kind() {
                    ErrorKind::Cancelled => return done(Err(e), maybe_committed, written),
                    _ => {
                        maybe_committed = true;
                        tries.retries += 1;
                        last_error = Some(e);
                        continue;
                    }
                }
            }
            // One of the writer's commit slots for the whole attempt (not its backoff).
            let slots = self.options.commit_slots.clone();
            let asked = Instant::now();
            let slot = slots.take().await;
            let waited = asked.elapsed();
            started += waited;
            // The attempt builds on the head the look published, even after a long wait:
            // an earlier attempt that lands late then makes this one conflict, and the
            // next look finds it. (Loading a newer head here would build on the landed
            // attempt and commit its rows twice.)
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
            let (requirements, updates) = (prepared.requirements, prepared.updates);
            let answer = match together {
                // Waiting for the other tables' parts holds no slot: they may need one.
                Some(party) => {
                    drop(slot);
                    let outcome = party.commit(base, requirements, updates).await;
                    // Waiting for the other tables spends none of the retry budget.
                    started += outcome.waited;
                    outcome.result
                }
                None => {
                    let answer = self.catalog.commit_on(base, requirements, updates).await;
                    drop(slot);
                    answer
                }
            }
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
    pub(super) async fn look_for_attempt(
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
    pub(super) async fn find_attempt(
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
}
