//! One table's part of a call: shredding its messages (evolving the schema where they
//! need it) and handing the rows to the table's committer, with the per-message errors
//! of rows that cannot go.

use super::*;

/// One table's part of a call, as one attempt at it sees it.
#[derive(Clone, Copy)]
pub(super) struct Part<'a, 'm> {
    pub(super) handle: &'a TableHandle,
    pub(super) messages: &'a [Message<'m>],
    /// The part's messages: indexes into `messages`, in order.
    pub(super) idx: &'a [usize],
    pub(super) plan: &'a WritePlan,
    /// Whether messages that do not fit the schema may evolve it.
    pub(super) may_evolve: bool,
}

/// What a table's part of a call hands its committer, or what it ended with instead.
enum Prepared {
    /// Rows (or deletes) to commit, and the messages that failed on the way.
    Rows(Box<Submission>, Vec<(usize, Error)>),
    /// Nothing to commit: the part's result as it stands.
    Done(GroupResult),
}

impl Writer {
    /// Shreds the messages `write` (positions within the group `idx`; see
    /// [`WritePlan::write`]) and hands their rows to the table's committer; the result
    /// once they committed.
    ///
    /// The shredding lives in [`Self::prepare_submission`] so that its buffers (the
    /// shredded rows, the key resolution, per-message positions: ~40 B a row besides the
    /// rows themselves) are gone while the call waits for its commit: a host with many
    /// calls in flight holds only what the committer holds.
    pub(super) async fn shred_and_submit(
        &self,
        ticket: Ticket,
        (room, claim): (Room, Claim),
        part: Part<'_, '_>,
        write: Vec<usize>,
        party: &mut Option<Party>,
    ) -> Result<GroupResult> {
        let prepared = self.prepare_submission(part, write, party).await?;
        let (mut submission, failures) = match prepared {
            Prepared::Rows(submission, failures) => (*submission, failures),
            Prepared::Done(result) => return Ok(result),
        };
        submission.room = Some(room);
        let rows = submission.batch.num_rows();
        failpoint::hit(failpoint::names::BEFORE_SUBMIT);
        // Messages held back to be retried: the calls after this one wait for them (see
        // `commit::order`), unless a later call holds what this one waits for.
        let complete = !part.plan.holds_later_calls_back(&failures);
        let committed = part
            .handle
            .committer
            .submit(ticket, complete, claim, submission)
            .await?;
        Ok(GroupResult {
            rows,
            committed: true,
            counts_snapshot: committed.counts_snapshot,
            failures,
            retry_left: false,
        })
    }

    /// The submission of [`Self::shred_and_submit`]: the rows of the messages `write`,
    /// shredded (the schema evolved where they need it) and resolved by key.
    async fn prepare_submission(
        &self,
        part: Part<'_, '_>,
        write: Vec<usize>,
        party: &mut Option<Party>,
    ) -> Result<Prepared> {
        let Part {
            handle,
            messages,
            idx,
            plan,
            may_evolve,
        } = part;
        let view = handle.committer.view();
        let schema_id = view.schema_id();
        let mut failures: Vec<(usize, Error)> = Vec::new();
        // The first message refused for a reason not its own is retried: the messages
        // after it must not commit before it (a delete retried after the call's insert of
        // its key would remove that row). They are held back and retried with it, in order.
        let key_refused = |pos: &usize| {
            view.keys.is_none()
                && view.key_problem.is_some()
                && row_op(&messages[idx[*pos]]) != RowOp::Insert
        };
        let first_refused = write.iter().copied().find(key_refused);
        let first_refused = plan
            .refused
            .iter()
            .map(|(pos, _)| *pos)
            .chain(first_refused)
            .min();
        // Positions (within the group) of the messages to write, split by what they need.
        let (mut rows_at, mut deletes_at) = (Vec::new(), Vec::new());
        for pos in write {
            let op = row_op(&messages[idx[pos]]);
            if first_refused.is_some_and(|first| pos > first) {
                failures.push((pos, held_back(idx[pos])));
            } else if op != RowOp::Insert && view.keys.is_none() {
                failures.push((pos, no_key(idx[pos], op, view.key_problem.as_deref())));
            } else if op.writes_row() {
                rows_at.push(pos);
            } else {
                deletes_at.push(pos);
            }
        }
        let mut shredder = self.take_shredder(handle, &view)?;
        let mut rows = shred_guarded(&mut shredder, messages, idx, &rows_at)?;
        self.return_shredder(handle, schema_id, shredder);
        if may_evolve && self.config.schema_evolution.enabled && !rows.field_failures.is_empty() {
            let failed = rows.field_failures.iter().map(|&pos| &messages[idx[pos]]);
            match self.evolve(handle, &view, failed).await {
                Ok(()) => {}
                Err(e) if e.kind().is_retryable() || e.kind() == ErrorKind::NotFound => {
                    return Err(e);
                }
                // The catalog refused the change (a name it does not allow, no right to
                // alter the table): those messages fail saying so; the rest are written.
                Err(e) => {
                    for (pos, error) in rows.failures.iter_mut() {
                        if rows.field_failures.contains(pos) {
                            *error = Error::new(
                                ErrorKind::Data,
                                format!(
                                    "{error}; the table's schema could not be evolved for it: {e}"
                                ),
                            );
                        }
                    }
                }
            }
        }
        failures.append(&mut rows.failures);
        let deleted = match (&view.keys, deletes_at.is_empty()) {
            (Some(keys), false) => {
                // Deletes need only the key: their other fields are never columns' business.
                let options = DecodeOptions {
                    unknown_fields: UnknownFields::Ignore,
                    ..self.decode_options()
                };
                let mut key_shredder = Shredder::new(keys.schema.clone(), options)?;
                let mut deleted = shred_guarded(&mut key_shredder, messages, idx, &deletes_at)?;
                failures.append(&mut deleted.failures);
                Some(deleted)
            }
            _ => None,
        };
        let data = rows.batch.unwrap_or_else(|| {
            RecordBatch::new_empty(Arc::new(
                iceberg::arrow::schema_to_arrow_schema(view.table.metadata.current_schema())
                    .expect("the shredder accepted this schema"),
            ))
        });
        // Every written message in group order, with where its key is.
        let mut entries: Vec<(usize, KeyAt)> = rows
            .positions
            .iter()
            .enumerate()
            .map(|(r, &pos)| (pos, KeyAt::Data(r)))
            .chain(deleted.iter().flat_map(|d| {
                d.positions
                    .iter()
                    .enumerate()
                    .map(|(r, &pos)| (pos, KeyAt::Deleted(r)))
            }))
            .collect();
        // Two ascending runs (rows, then deleted keys): the stable sort merges them.
        entries.sort_by_key(|(pos, _)| *pos);
        let keyed = entries
            .iter()
            .any(|(pos, _)| row_op(&messages[idx[*pos]]) != RowOp::Insert);
        let (batch, deletes) = match (&view.keys, keyed) {
            (Some(keys), true) => {
                let deleted_keys = match &deleted {
                    Some(Shredded { batch: Some(b), .. }) => b.clone(),
                    _ => RecordBatch::new_empty(keys.arrow.clone()),
                };
                let data_keys = keys.project(&data)?;
                let mut ops = Vec::with_capacity(entries.len());
                entries.retain(|&(pos, at)| {
                    let op = row_op(&messages[idx[pos]]);
                    let null = match at {
                        _ if op == RowOp::Insert => None,
                        KeyAt::Data(r) => keys.null_column(&data_keys, r),
                        KeyAt::Deleted(r) => keys.null_column(&deleted_keys, r),
                    };
                    if let Some(column) = null {
                        failures.push((pos, null_key(idx[pos], op, column)));
                        return false;
                    }
                    ops.push((op, at));
                    true
                });
                let resolved = resolve_call(keys, &data, &deleted_keys, &ops)?;
                (resolved.data, resolved.deletes)
            }
            _ => (data, None),
        };
        // Rows committing together with other tables' go all or none: a message to be
        // retried (not at its fault, or held by another call) fails the table's whole
        // part, and so the call's; a table left with nothing to write would otherwise
        // withdraw, and the others commit without its messages.
        if party.is_some()
            && let Some(e) = failures
                .iter()
                .chain(&plan.refused)
                .map(|(_, e)| e)
                .find(|e| e.kind() != ErrorKind::Data)
        {
            return Err(Error::new(
                e.kind(),
                format!(
                    "{e}; the batch's tables commit together (commit.atomic_tables), so none \
                     of its messages for them was committed"
                ),
            ));
        }
        if batch.num_rows() == 0 && deletes.is_none() {
            return Ok(Prepared::Done(GroupResult {
                rows: 0,
                committed: false,
                counts_snapshot: false,
                failures,
                retry_left: false,
            }));
        }
        let mut offsets = SourceOffsets::default();
        let mut bytes = 0;
        for &(pos, _) in &entries {
            let m = &messages[idx[pos]];
            bytes += m.payload.len();
            if let (Some(source), Some(offset)) = (m.source, m.offset) {
                offsets.insert(source, offset);
            }
        }
        let submission = Submission {
            batch,
            deletes,
            bytes,
            schema_id,
            offsets,
            together: party.take(),
            room: None,
        };
        Ok(Prepared::Rows(Box::new(submission), failures))
    }

    /// Schema evolution for messages that failed to shred against the view's schema:
    /// when the schema can change to hold them, it is changed (or found changed by
    /// another writer) and the call fails with `SchemaChanged`, to shred again.
    /// Otherwise the messages keep their errors.
    async fn evolve<'m, 'p: 'm>(
        &self,
        handle: &TableHandle,
        view: &TableView,
        failed: impl Iterator<Item = &'m Message<'p>>,
    ) -> Result<()> {
        let mut values: Vec<serde_json::Value> = Vec::new();
        let mut hints = TypeHints::default();
        for m in failed {
            if let Ok(v) = serde_json::from_slice(m.payload) {
                values.push(v);
            }
            hints.merge(self.message_hints(m));
        }
        let matching = evolve::Matching {
            case_sensitive: self.config.case_sensitive_columns,
            hints: &hints,
            key: &self.config.identifier_fields,
        };
        if evolve::plan_for(&view.table, &values, matching)?.is_none() {
            return Ok(());
        }
        let _one_at_a_time = handle.evolving.lock().await;
        // Another call may have evolved the table (enough) while this one waited.
        let latest = handle.committer.view();
        if evolve::plan_for(&latest.table, &values, matching)?.is_some() {
            let ident = &view.table.ident;
            let table =
                evolve::evolve_table(self.catalog.as_ref(), ident, &values, matching).await?;
            handle.committer.adopt(table);
        }
        Err(Error::new(
            ErrorKind::SchemaChanged,
            "the table's schema was evolved for this batch",
        ))
    }

    fn return_shredder(&self, handle: &TableHandle, schema_id: i32, shredder: Shredder) {
        let mut pool = handle.shredders.locked();
        if pool.0 == schema_id {
            pool.1.push(shredder);
        }
    }

    /// An idle shredder for the table's current schema, or a new one.
    fn take_shredder(&self, handle: &TableHandle, view: &TableView) -> Result<Shredder> {
        let schema_id = view.schema_id();
        {
            let mut pool = handle.shredders.locked();
            if pool.0 != schema_id {
                *pool = (schema_id, Vec::new());
            }
            if let Some(s) = pool.1.pop() {
                return Ok(s);
            }
        }
        Shredder::new(
            view.table.metadata.current_schema().clone(),
            self.decode_options(),
        )
    }

    pub(super) fn decode_options(&self) -> DecodeOptions {
        let evolution = &self.config.schema_evolution;
        DecodeOptions {
            epoch_unit: self.config.json.epoch_unit,
            case_sensitive: self.config.case_sensitive_columns,
            // With evolution, a new field fails its message until it is a column.
            unknown_fields: match evolution.unknown_fields {
                _ if evolution.enabled => UnknownFields::Reject,
                UnknownFieldPolicy::Error => UnknownFields::Reject,
                UnknownFieldPolicy::Ignore => UnknownFields::Ignore,
            },
        }
    }
}

pub(super) struct GroupResult {
    pub(super) rows: usize,
    /// The group's rows (or deletes) committed.
    pub(super) committed: bool,
    /// The snapshot they went to is counted by this call (see
    /// [`crate::commit::committer::Committed::counts_snapshot`]).
    pub(super) counts_snapshot: bool,
    /// (position within the group, error) for messages that were not shredded.
    pub(super) failures: Vec<(usize, Error)>,
    /// Some messages failed not at their fault and are to be retried under the call's
    /// ticket: the calls after it wait for them.
    pub(super) retry_left: bool,
}

/// What [`shred_guarded`] made of some of a group's messages.
struct Shredded {
    pub(super) batch: Option<RecordBatch>,
    /// For each row of `batch`, the position (within the group) of its message.
    pub(super) positions: Vec<usize>,
    pub(super) failures: Vec<(usize, Error)>,
    /// Positions of the failures at a field (not the whole message): schema evolution
    /// may make them fit.
    pub(super) field_failures: Vec<usize>,
}

/// Shreds the messages at `positions` (within the group `idx`); a shredder panic fails
/// the call with a Data error: replayed, these messages would panic again, so they go to
/// the dead letters (if any) instead of being retried for ever.
fn shred_guarded(
    shredder: &mut Shredder,
    messages: &[Message<'_>],
    idx: &[usize],
    positions: &[usize],
) -> Result<Shredded> {
    if positions.is_empty() {
        return Ok(Shredded {
            batch: None,
            positions: Vec::new(),
            failures: Vec::new(),
            field_failures: Vec::new(),
        });
    }
    let payloads = positions.iter().map(|&pos| messages[idx[pos]].payload);
    failpoint::hit(failpoint::names::SHREDDING);
    let shredded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        shredder.shred(payloads)
    }))
    .map_err(|_| {
        Error::new(
            ErrorKind::Data,
            "the shredder panicked on this batch (please report it); its state was discarded",
        )
    })?;
    let field_failures = shredded
        .errors
        .iter()
        .filter(|e| !e.path.is_empty())
        .map(|e| positions[e.index])
        .collect();
    let failures = shredded
        .errors
        .into_iter()
        .map(|e| {
            // The shredder saw some of this table's messages only: name the batch index.
            let pos = positions[e.index];
            let in_batch = MessageError {
                index: idx[pos],
                ..e
            };
            (pos, Error::new(ErrorKind::Data, in_batch.to_string()))
        })
        .collect();
    Ok(Shredded {
        batch: shredded.batch,
        positions: shredded.row_sources.iter().map(|&r| positions[r]).collect(),
        failures,
        field_failures,
    })
}

/// A message's operation (checked on entry to the call).
pub(super) fn row_op(m: &Message<'_>) -> RowOp {
    RowOp::parse(m.operation).unwrap_or(RowOp::Insert)
}

/// An upsert or delete on a table without a usable key. Without any key it is a
/// mistake in the pipeline (the message's fault, so it can be dead-lettered); with a key
/// the table cannot use right now (it changed shape, or another tool's key does not suit
/// merge-on-read) it is not the message's fault, and it is retried.
fn no_key(index: usize, op: RowOp, problem: Option<&str>) -> Error {
    match problem {
        None => Error::new(
            ErrorKind::Data,
            format!(
                "message {index}: row_operation {} needs a key, but the table has no \
                 identifier fields and identifier_fields is not configured",
                op.name()
            ),
        ),
        Some(problem) => Error::config(format!(
            "message {index}: row_operation {} cannot use the table's key: {problem}",
            op.name()
        )),
    }
}

/// A message after one its call could not commit yet (see `shred_and_submit`).
fn held_back(index: usize) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "message {index}: held back behind an earlier message of the batch for the same \
             table that could not be committed yet; a batch's messages to a table commit in \
             order, so it is retried with that one"
        ),
    )
}

fn null_key(index: usize, op: RowOp, column: &str) -> Error {
    Error::new(
        ErrorKind::Data,
        format!(
            "message {index}: identifier field `{column}` is missing or null; a {} needs its key",
            op.name()
        ),
    )
}
