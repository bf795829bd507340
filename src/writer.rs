//! The writer facade: what the C ABI calls. Routes each message to its table, drops
//! what exactly-once says is already committed, shreds on the calling thread and hands
//! the rows to the table's group committer.
//!
//! Calls may overlap (the host runs up to `max_in_flight` of them). Each shreds with a
//! shredder of its own (pooled per table), so shredding runs on as many threads as
//! there are calls; the committer (see `commit::committer`) writes and commits what the
//! calls hand in, several calls per snapshot.

use crate::failpoint;
use crate::rowops::KeyColumns;
use crate::rowops::RowOp;
use crate::rowops::keys::{inferred_float_keys_as_long, with_identifier_fields};
use crate::rowops::resolve::{KeyAt, resolve_call};
use crate::sync::LockExt;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use iceberg::TableIdent;
use iceberg::spec::Schema;

use crate::catalog::rest::RestCatalog;
use crate::catalog::sql::SqlCatalog;
use crate::catalog::{Catalog, LoadedTable, NewTable, table_ident};
use crate::commit::committer::{
    Claim, CommitterOptions, Submission, TableCommitter, TableView, Verdict,
    check_merge_on_read_keys,
};
use crate::commit::offsets::SourceOffsets;
use crate::commit::order::{Ticket, UNORDERED};
use crate::config::{CatalogKind, Config, MergeStrategy, UnknownFieldPolicy};
use crate::error::{Error, ErrorKind, Result};
use crate::evolve;
use crate::partition_spec::{check_table_spec, parse_spec, source_columns};
use crate::shred::infer::{TypeHints, same_name};
use crate::shred::{DecodeOptions, MessageError, Shredder, UnknownFields};
use crate::stats::{Event, StatsSnapshot};
use crate::storage::{build_file_io, check_bucket, file_io_props, location_url, table_file_io};
use serde_json::Value;

/// One message of a batch, with the table it goes to when the host evaluated one.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    pub payload: &'a [u8],
    pub namespace: Option<&'a str>,
    pub table: Option<&'a str>,
    /// `insert` (the default when `None`), `upsert` or `delete` (by the table's key).
    pub operation: Option<&'a str>,
    /// Exactly-once: where the message came from (e.g. `topic/partition`) and its
    /// offset there. Required when `commit.exactly_once` is configured.
    pub source: Option<&'a str>,
    pub offset: Option<i64>,
    /// Explicit types for the message's fields, a JSON object of field path → Iceberg
    /// primitive type (from `schema_evolution.schema_metadata` or
    /// `new_column_type_mapping`): they win over inference when a column is added.
    pub types: Option<&'a [u8]>,
}

impl<'a> Message<'a> {
    /// An insert into the config's default table.
    pub fn insert(payload: &'a [u8]) -> Self {
        Message {
            payload,
            namespace: None,
            table: None,
            operation: None,
            source: None,
            offset: None,
            types: None,
        }
    }
}

/// What happened to a batch: per message, `None` for committed or the reason it was not.
#[derive(Debug)]
pub struct BatchOutcome {
    pub failures: Vec<Option<Error>>,
    pub rows_committed: usize,
    /// Snapshots the call's rows made. A snapshot holding several calls' rows (group
    /// commit) is counted by one of them, so summed over calls each counts once.
    pub snapshots: usize,
}

/// An open table: its committer and the shredders calls borrow.
struct TableHandle {
    committer: TableCommitter,
    /// Idle shredders, all for `schema_id`; a call takes one (or builds one) and puts it
    /// back, so concurrent calls shred in parallel without rebuilding decoders.
    shredders: Mutex<(i32, Vec<Shredder>)>,
    /// Held while a call evolves the table's schema: concurrent calls needing the same
    /// columns wait and find them added instead of racing to add them.
    evolving: tokio::sync::Mutex<()>,
    /// When the table was last loaded for a key upserts could not use (see
    /// [`Writer::reload_if_key_refused`]).
    key_reloaded: Mutex<std::time::Instant>,
}

/// How often a table whose key refuses upserts and deletes is loaded again to see
/// whether another tool fixed it.
const KEY_RELOAD_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// How often one call shreds its messages again after the table's schema changed
/// under it (by its own evolution or another writer's), before it writes them with the
/// errors the last schema gave. Every time means the schema changed: many writers adding
/// columns at once may move it under one call many times, but not for ever.
const MAX_RESHREDS: u32 = 50;

type TableSlot = Arc<tokio::sync::Mutex<Option<Arc<TableHandle>>>>;

pub struct Writer {
    config: Config,
    catalog: Arc<dyn Catalog>,
    options: Arc<CommitterOptions>,
    tables: Mutex<HashMap<TableIdent, TableSlot>>,
}

impl Writer {
    /// Rows, snapshots and files committed so far, and commit latency.
    pub fn stats(&self) -> StatsSnapshot {
        self.options.stats.snapshot()
    }

    /// Takes up to `max` of the oldest commit, failure and upload events not taken yet,
    /// by table (see [`crate::stats::events`]).
    pub fn drain_events(&self, max: usize) -> Vec<Event> {
        self.options.stats.drain_events(max)
    }

    /// Opens the catalog the config names (without touching any table yet).
    pub async fn open(mut config: Config) -> Result<Self> {
        let io_props = file_io_props(&config.storage)?;
        let catalog: Arc<dyn Catalog> = match config.catalog_kind()? {
            CatalogKind::Rest { url } => {
                Arc::new(RestCatalog::connect(&url, &config.catalog).await?)
            }
            CatalogKind::Embedded { database } => {
                // Config validation has checked that the warehouse is in the bucket.
                let warehouse = location_url(config.warehouse_or_default())?;
                let name = config.catalog.name.as_deref().unwrap_or("floe");
                Arc::new(SqlCatalog::open(
                    &database,
                    name,
                    &warehouse,
                    build_file_io(io_props.clone()),
                )?)
            }
        };
        let reads_delete_files = catalog.reads_delete_files();
        if !reads_delete_files {
            strategy_without_delete_files(config.merge_strategy)?;
            key_from_static_schema(&mut config)?;
        }
        let commit = &config.commit;
        let options = Arc::new(CommitterOptions {
            max_retries: commit.max_retries,
            retry_timeout: commit.retry_timeout,
            cleanup_on_failure: commit.cleanup_on_failure,
            manifest_merge: commit.manifest_merge_enabled,
            retention: crate::commit::expire::Retention {
                max_age: commit.max_snapshot_age,
                max_snapshots: commit.max_snapshots,
            },
            linger: commit.linger,
            max_group_rows: commit.max_group_rows,
            max_group_bytes: commit.max_group_bytes,
            writer_id: commit.exactly_once.as_ref().map(|e| e.writer_id.clone()),
            identifier_fields: config.identifier_fields.clone(),
            case_sensitive_columns: config.case_sensitive_columns,
            merge_strategy: config.merge_strategy,
            reads_delete_files,
            parquet: config.parquet.clone(),
            callers: config.max_in_flight,
            stats: Arc::default(),
            order: Arc::default(),
            storage_props: io_props,
        });
        Ok(Writer {
            config,
            catalog,
            options,
            tables: Mutex::new(HashMap::new()),
        })
    }

    /// A call that keeps its place in arrival order: each key's operations in the calls
    /// that arrived so (through every retry, with [`Self::write_call`]) apply in that
    /// order. Every ticket must be given back with [`Self::depart`] when the call is over.
    pub fn arrive(&self) -> Ticket {
        self.options.order.arrive()
    }

    /// The call of `ticket` is over: later calls no longer wait for it.
    pub fn depart(&self, ticket: Ticket) {
        self.options.order.depart(ticket)
    }

    /// Whether `commit.exactly_once` is on (messages' positions are then recorded).
    pub fn exactly_once(&self) -> bool {
        self.options.writer_id.is_some()
    }

    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        &self.catalog
    }

    fn resolve_ident(&self, m: &Message<'_>) -> Result<TableIdent> {
        let ns = m
            .namespace
            .or(self.config.namespace.as_deref())
            .ok_or_else(|| {
                Error::config("no namespace: set `namespace` in the config or per message")
            })?;
        let table = m
            .table
            .or(self.config.table.as_deref())
            .ok_or_else(|| Error::config("no table: set `table` in the config or per message"))?;
        table_ident(ns, table)
    }

    /// A message's explicit types (checked on entry to the call: malformed ones failed
    /// it), matched to paths as columns are.
    fn message_hints(&self, m: &Message<'_>) -> TypeHints {
        let hints = m
            .types
            .and_then(|json| TypeHints::parse(json).ok())
            .unwrap_or_default();
        match self.config.case_sensitive_columns {
            true => hints,
            false => hints.case_insensitive(),
        }
    }

    /// A message's explicit types must parse; with `require_schema_metadata` they must
    /// be there.
    fn check_types(&self, i: usize, m: &Message<'_>) -> Option<Error> {
        let evolution = &self.config.schema_evolution;
        let problem = match m.types {
            // A delete needs only its key: it never adds a column.
            _ if matches!(RowOp::parse(m.operation), Ok(RowOp::Delete)) => return None,
            Some(json) => TypeHints::parse(json).err()?,
            None if evolution.require_schema_metadata => format!(
                "no schema metadata (`{}`), which schema_evolution.require_schema_metadata asks for",
                evolution.schema_metadata.as_deref().unwrap_or_default()
            ),
            None => return None,
        };
        Some(Error::new(
            ErrorKind::Data,
            format!("message {i}: {problem}"),
        ))
    }

    /// Writes and commits a batch. Each table's messages are committed in one snapshot
    /// (shared with concurrent calls).
    ///
    /// Failures are per message, with a kind. [`ErrorKind::Data`] means the message itself
    /// is at fault (it cannot be converted, names a table that does not exist, lacks its
    /// exactly-once position): replaying it fails again, so a host may dead-letter it.
    /// Any other kind — storage, catalog, auth, conflicts beyond the retry budget, an
    /// unknown outcome, a position another call is committing — says nothing about the
    /// message: a host retries exactly those messages (the rest are committed) and must
    /// not dead-letter them. When no table committed anything and such a failure
    /// happened, the call fails as a whole with `Err`.
    pub async fn write_batch(&self, messages: &[Message<'_>]) -> Result<BatchOutcome> {
        self.write_batch_after(messages, vec![None; messages.len()])
            .await
    }

    /// [`Self::write_batch`] for a batch some of whose messages already failed on the way
    /// in (`failed[i]`, e.g. a table name from the host that is not UTF-8): those keep
    /// their errors and are not written.
    pub async fn write_batch_after(
        &self,
        messages: &[Message<'_>],
        failed: Vec<Option<Error>>,
    ) -> Result<BatchOutcome> {
        self.write_call(UNORDERED, messages, failed).await
    }

    /// [`Self::write_batch_after`] for a call that arrived with `ticket` (see
    /// [`Self::arrive`]; [`UNORDERED`] keeps no order). Its rows for each table are handed
    /// to the table after those of every call that arrived before it, and commit after
    /// them; a retry (the messages it failed, not at their fault) under the same ticket
    /// keeps the call's place.
    pub async fn write_call(
        &self,
        ticket: Ticket,
        messages: &[Message<'_>],
        failed: Vec<Option<Error>>,
    ) -> Result<BatchOutcome> {
        assert_eq!(failed.len(), messages.len(), "one entry per message");
        let mut failures = failed;
        let mut groups: HashMap<TableIdent, Vec<usize>> = HashMap::new();
        for (i, m) in messages.iter().enumerate() {
            if failures[i].is_some() {
                continue;
            }
            if let Err(e) = RowOp::parse(m.operation) {
                failures[i] = Some(Error::new(ErrorKind::Data, format!("message {i}: {e}")));
                continue;
            }
            if let Some(e) = self.check_types(i, m) {
                failures[i] = Some(e);
                continue;
            }
            if self.options.writer_id.is_some() && (m.source.is_none() || m.offset.is_none()) {
                failures[i] = Some(Error::new(
                    ErrorKind::Data,
                    format!(
                        "message {i}: exactly-once is on but the message has no source and offset"
                    ),
                ));
                continue;
            }
            match self.resolve_ident(m) {
                Ok(ident) => groups.entry(ident).or_default().push(i),
                // The table comes from the message (interpolated): its own fault.
                Err(e) => {
                    failures[i] = Some(Error::new(ErrorKind::Data, format!("message {i}: {e}")))
                }
            }
        }
        self.options.order.attempt(ticket, groups.keys());
        let results =
            futures::future::join_all(groups.into_iter().map(|(ident, idx)| async move {
                let result = self.write_group(ticket, &ident, messages, &idx).await;
                match &result {
                    Ok(group) if !group.retry_left => self.options.order.settle(ticket, &ident),
                    Err(e) if e.kind() == ErrorKind::Data => {
                        self.options.order.settle(ticket, &ident)
                    }
                    _ => self.options.order.unsettle(ticket, &ident),
                }
                (ident, idx, result)
            }))
            .await;
        let (mut rows_committed, mut snapshots) = (0, 0);
        // Whether any of the call's tables committed its rows: then the call must not
        // fail as a whole (the host would write those rows again), whether or not this
        // call counts the snapshot.
        let mut any_committed = false;
        let mut call_error: Option<Error> = None;
        for (ident, idx, result) in results {
            match result {
                Ok(group) => {
                    rows_committed += group.rows;
                    any_committed |= group.committed;
                    snapshots += usize::from(group.counts_snapshot);
                    for (pos, err) in group.failures {
                        failures[idx[pos]] = Some(err);
                    }
                }
                Err(e) => {
                    let e = match e.kind() {
                        ErrorKind::Data => e,
                        _ => e.context(format!("table {ident}")),
                    };
                    if e.kind() != ErrorKind::Data && call_error.is_none() {
                        call_error = Some(e.clone());
                    }
                    idx.iter().for_each(|&i| failures[i] = Some(e.clone()));
                }
            }
        }
        if let Some(e) = call_error
            && !any_committed
        {
            return Err(e);
        }
        failpoint::hit(failpoint::names::BEFORE_RETURN);
        Ok(BatchOutcome {
            failures,
            rows_committed,
            snapshots,
        })
    }

    fn table_slot(&self, ident: &TableIdent) -> TableSlot {
        let mut tables = self.tables.locked();
        tables.entry(ident.clone()).or_default().clone()
    }

    /// The open table, opening (or creating) it on first use.
    async fn table_handle(
        &self,
        ident: &TableIdent,
        messages: &[Message<'_>],
        idx: &[usize],
    ) -> Result<Arc<TableHandle>> {
        let slot = self.table_slot(ident);
        let mut guard = slot.lock().await;
        if let Some(handle) = guard.as_ref() {
            return Ok(handle.clone());
        }
        let sample = idx.iter().map(|&i| &messages[i]);
        let handle = Arc::new(self.open_table(ident, sample).await?);
        *guard = Some(handle.clone());
        Ok(handle)
    }

    /// Forgets a table whose committer reported it gone, so the next call reopens (or
    /// recreates) it.
    async fn forget_table(&self, ident: &TableIdent, handle: &Arc<TableHandle>) {
        let slot = self.table_slot(ident);
        let mut guard = slot.lock().await;
        if guard.as_ref().is_some_and(|h| Arc::ptr_eq(h, handle)) {
            *guard = None;
        }
    }

    async fn write_group(
        &self,
        ticket: Ticket,
        ident: &TableIdent,
        messages: &[Message<'_>],
        idx: &[usize],
    ) -> Result<GroupResult> {
        let handle = self
            .table_handle(ident, messages, idx)
            .await
            .map_err(|e| match e.kind() {
                // A table named by the message that does not exist (and may not be
                // created): the message's own fault, like a field that does not convert.
                // Likewise a table named by the message that this config cannot write
                // (another partition spec): the message goes to the dead letters rather
                // than stalling the pipeline.
                ErrorKind::NotFound | ErrorKind::Config if messages[idx[0]].table.is_some() => {
                    let text = e.to_string();
                    match text.contains(&ident.to_string()) {
                        true => Error::new(ErrorKind::Data, text),
                        false => Error::new(ErrorKind::Data, format!("table {ident}: {text}")),
                    }
                }
                _ => e,
            })?;
        if idx.iter().any(|&i| row_op(&messages[i]) != RowOp::Insert) {
            self.reload_if_key_refused(ident, &handle).await;
        }
        // Rows shredded for a schema that changed before they were committed are
        // shredded again (nothing of them was committed).
        let mut reshreds = 0;
        let (result, plan) = loop {
            let (claim, plan) = self
                .plan_checked(ticket, ident, &handle, messages, idx)
                .await?;
            let may_evolve = reshreds < MAX_RESHREDS;
            let result = self
                .shred_and_submit(ticket, &handle, claim, messages, idx, &plan, may_evolve)
                .await;
            match result {
                Err(e) if e.kind() == ErrorKind::SchemaChanged && reshreds < MAX_RESHREDS => {
                    tracing::debug!("shredding again for {ident}: {e}");
                    reshreds += 1;
                }
                result => break (result, plan),
            }
        };
        if let Err(e) = &result
            && (e.kind() == ErrorKind::NotFound || handle.committer.is_stopped())
        {
            if handle.committer.is_stopped() {
                // Rows handed to it are lost with it: those after them wait for retries.
                self.options.order.overtake(ident);
            }
            self.forget_table(ident, &handle).await;
        }
        let mut group = result?;
        // A message repeated within the batch shares the fate of its first copy.
        for &(pos, first) in &plan.duplicates {
            if let Some(e) = group
                .failures
                .iter()
                .find(|(p, _)| *p == first)
                .map(|(_, e)| e.clone())
            {
                group.failures.push((pos, e));
            }
        }
        // A message whose offset another call is still committing is not at fault
        // (kind Unavailable): retried, it is acknowledged once that commit lands, and the
        // messages after it are retried with it. This call keeps its place for them
        // unless the holder arrived after it (see `waits_for_later`).
        group.retry_left = plan.holds_later_calls_back(&group.failures);
        group.failures.extend(plan.conflicting);
        group.failures.extend(plan.refused);
        Ok(group)
    }

    /// While the table's key is unusable (see [`TableView::key_problem`]) upserts and
    /// deletes are refused and never reach the committer, whose view is loaded again only
    /// after commits: the table is loaded here instead (at most once per
    /// [`KEY_RELOAD_EVERY`]), so a table another tool fixed is seen by the retries.
    async fn reload_if_key_refused(&self, ident: &TableIdent, handle: &TableHandle) {
        if handle.committer.view().key_problem.is_none() {
            return;
        }
        {
            let mut last = handle.key_reloaded.locked();
            if last.elapsed() < KEY_RELOAD_EVERY {
                return;
            }
            *last = std::time::Instant::now();
        }
        self.reload(ident, handle, "its key").await;
    }

    /// Loads the table afresh and hands it to the committer (for `why`); a failure is
    /// only logged: the caller's next step fails as the stale view makes it.
    async fn reload(&self, ident: &TableIdent, handle: &TableHandle, why: &str) {
        match self.catalog.load_table(ident).await {
            Ok(Some(table)) => handle.committer.adopt(table),
            Ok(None) => tracing::debug!("reloading {ident} for {why}: the table is gone"),
            Err(e) => tracing::debug!("reloading {ident} for {why} failed: {e}"),
        }
    }

    /// [`Self::plan_exactly_once`], trusting the ledger only as far as the table bears it
    /// out: a plan that acknowledges messages without writing them (or a ledger that
    /// distrusts the table's record) is made again on the table loaded afresh, so that a
    /// rollback by another tool is seen before a re-delivered message is acknowledged,
    /// and a repaired table is seen by the retries.
    async fn plan_checked(
        &self,
        ticket: Ticket,
        ident: &TableIdent,
        handle: &TableHandle,
        messages: &[Message<'_>],
        idx: &[usize],
    ) -> Result<(Claim, WritePlan)> {
        let planned = self.plan_exactly_once(ticket, handle, messages, idx);
        if !planned.as_ref().map_or(true, |(_, plan)| plan.acknowledges) {
            return planned;
        }
        drop(planned); // releases the claim
        self.reload(ident, handle, "exactly-once").await;
        self.plan_exactly_once(ticket, handle, messages, idx)
    }

    /// Exactly-once: splits the group into messages to write, messages already committed
    /// (acknowledged without writing), repeats within the batch, and messages another
    /// call is still writing (refused with a retryable error), as the committer decides
    /// (see [`TableCommitter::claim_positions`]); the claim holds the positions written.
    fn plan_exactly_once(
        &self,
        ticket: Ticket,
        handle: &TableHandle,
        messages: &[Message<'_>],
        idx: &[usize],
    ) -> Result<(Claim, WritePlan)> {
        let mut plan = WritePlan::default();
        if self.options.writer_id.is_none() {
            plan.write = (0..idx.len()).collect();
            return Ok((handle.committer.new_claim(ticket), plan));
        }
        let position = |i: usize| {
            (
                messages[i].source.expect("checked on entry"),
                messages[i].offset.expect("checked on entry"),
            )
        };
        let (claim, verdicts) = handle.committer.claim_positions(
            ticket,
            idx.iter().map(|&i| {
                let (source, offset) = position(i);
                (source, offset, payload_hash(messages[i].payload))
            }),
        )?;
        for (pos, verdict) in verdicts.into_iter().enumerate() {
            let (source, offset) = position(idx[pos]);
            match verdict {
                Verdict::Write => plan.write.push(pos),
                Verdict::Committed => plan.acknowledges = true,
                Verdict::Repeat {
                    first,
                    same_payload: true,
                } => plan.duplicates.push((pos, first)),
                Verdict::Repeat { first, .. } => plan
                    .conflicting
                    .push((pos, repeated_position(idx[pos], idx[first], source, offset))),
                Verdict::InFlight {
                    same_payload,
                    holder,
                } => {
                    let e = in_flight_position(idx[pos], source, offset, same_payload);
                    match e.kind() {
                        ErrorKind::Data => plan.conflicting.push((pos, e)),
                        _ => {
                            plan.refused.push((pos, e));
                            plan.waits_for_later |= waits_for_later(ticket, holder);
                        }
                    }
                }
            }
        }
        Ok((claim, plan))
    }

    #[allow(clippy::too_many_arguments)]
    async fn shred_and_submit(
        &self,
        ticket: Ticket,
        handle: &TableHandle,
        claim: Claim,
        messages: &[Message<'_>],
        idx: &[usize],
        plan: &WritePlan,
        may_evolve: bool,
    ) -> Result<GroupResult> {
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
        let first_refused = plan.write.iter().copied().find(key_refused);
        let first_refused = plan
            .refused
            .iter()
            .map(|(pos, _)| *pos)
            .chain(first_refused)
            .min();
        // Positions (within the group) of the messages to write, split by what they need.
        let (mut rows_at, mut deletes_at) = (Vec::new(), Vec::new());
        for &pos in &plan.write {
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
        entries.sort_unstable_by_key(|(pos, _)| *pos);
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
        if batch.num_rows() == 0 && deletes.is_none() {
            return Ok(GroupResult {
                rows: 0,
                committed: false,
                counts_snapshot: false,
                failures,
                retry_left: false,
            });
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
        let rows = batch.num_rows();
        let submission = Submission {
            batch,
            deletes,
            bytes,
            schema_id,
            offsets,
        };
        failpoint::hit(failpoint::names::BEFORE_SUBMIT);
        // Messages held back to be retried: the calls after this one wait for them (see
        // `commit::order`), unless a later call holds what this one waits for.
        let complete = !plan.holds_later_calls_back(&failures);
        let committed = handle
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

    fn decode_options(&self) -> DecodeOptions {
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
    async fn open_table<'m, 'p: 'm>(
        &self,
        ident: &TableIdent,
        sample: impl Iterator<Item = &'m Message<'p>>,
    ) -> Result<TableHandle> {
        let table = match self.catalog.load_table(ident).await? {
            Some(t) => {
                check_bucket(&self.config.storage, t.metadata.location())
                    .map_err(|e| e.context(ident))?;
                if let Some(spec) = self.config.schema_evolution.partition_spec.as_deref() {
                    check_table_spec(spec, &t.metadata, self.config.case_sensitive_columns)
                        .map_err(|e| e.context(ident))?;
                }
                t
            }
            None if self.config.schema_evolution.enabled => {
                let mut created = self.create_table(ident, sample).await?;
                // A catalog may vend storage credentials only when a table is loaded,
                // not in its answer to the creation.
                if !crate::storage::has_vended_credentials(&created.io_props)
                    && let Ok(Some(loaded)) = self.catalog.load_table(ident).await
                    && crate::storage::has_vended_credentials(&loaded.io_props)
                {
                    created = loaded;
                }
                // A REST catalog chooses the location: say so if it is not the bucket.
                check_bucket(&self.config.storage, created.metadata.location())
                    .map_err(|e| e.context(ident))?;
                created
            }
            None => {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "table {ident} does not exist; set schema_evolution.enabled: true to create it"
                    ),
                ));
            }
        };
        let file_io = table_file_io(
            &self.options.storage_props,
            &table.io_props,
            table.metadata.location(),
        );
        // Refuse unsupported schemas when opening, not on the first batch.
        let shredder = Shredder::new(
            table.metadata.current_schema().clone(),
            self.decode_options(),
        )?;
        let schema_id = table.metadata.current_schema_id();
        let view = TableView::new(table, file_io, &self.options)?;
        Ok(TableHandle {
            committer: TableCommitter::start(self.catalog.clone(), view, self.options.clone())?,
            shredders: Mutex::new((schema_id, vec![shredder])),
            evolving: tokio::sync::Mutex::new(()),
            key_reloaded: Mutex::new(std::time::Instant::now()),
        })
    }

    async fn create_table<'m, 'p: 'm>(
        &self,
        ident: &TableIdent,
        sample: impl Iterator<Item = &'m Message<'p>>,
    ) -> Result<LoadedTable> {
        let evolution = &self.config.schema_evolution;
        let schema: Schema = match &evolution.schema {
            Some(json) => serde_json::from_value(json.clone()).map_err(|e| {
                Error::config(format!(
                    "schema_evolution.schema is not an Iceberg schema: {e}"
                ))
            })?,
            None => {
                let mut hints = TypeHints::default();
                let payloads: Vec<Cow<'_, [u8]>> = sample
                    .map(|m| {
                        let own = self.message_hints(m);
                        hints.merge(match row_op(m) {
                            RowOp::Delete => own.only(|path| self.shapes_the_table(path)),
                            _ => own,
                        });
                        self.shaping_payload(m)
                    })
                    .collect();
                let inferred = crate::shred::infer::infer_schema(
                    payloads.iter().map(Cow::as_ref),
                    self.config.case_sensitive_columns,
                    &hints,
                )
                .map_err(|e| Error::new(ErrorKind::Data, format!("cannot create {ident}: {e}")))?;
                let cs = self.config.case_sensitive_columns;
                inferred_float_keys_as_long(inferred, &self.config.identifier_fields, cs, |name| {
                    hints.get(name).is_none() && some_value_is_whole(&payloads, name, cs)
                })?
            }
        };
        if let Some(name) = crate::shred::infer::nanosecond_field(&schema) {
            return Err(Error::new(
                ErrorKind::Data,
                format!(
                    "cannot create {ident}: `{name}` is a nanosecond timestamp, which needs a v3 \
                     table; floe creates v2 tables (create it as v3 with another tool)"
                ),
            ));
        }
        // Tables floe creates register the key: readers (and later writers) find it there.
        let schema = with_identifier_fields(
            schema,
            &self.config.identifier_fields,
            self.config.case_sensitive_columns,
        )?;
        let partition_spec = match evolution.partition_spec.as_deref() {
            Some(text) => Some(parse_spec(
                text,
                &schema,
                self.config.case_sensitive_columns,
            )?),
            None => None,
        };
        let strategy = self
            .config
            .merge_strategy
            .or((!self.options.reads_delete_files).then_some(MergeStrategy::CopyOnWrite));
        // A configured key is checked at open (a key the schema brings, only when a
        // message upserts or deletes: inserts never need it).
        if strategy.unwrap_or_default() == MergeStrategy::MergeOnRead
            && !self.config.identifier_fields.is_empty()
            && let Some(keys) = KeyColumns::for_table(
                &schema,
                &self.config.identifier_fields,
                self.config.case_sensitive_columns,
            )?
        {
            let partition = partition_spec.iter().flat_map(|spec| spec.fields());
            check_merge_on_read_keys(
                &schema,
                partition.map(|f| (f.name.as_str(), f.source_id)),
                &keys,
            )?;
        }
        // A plain path is a local folder, as `catalog.warehouse` takes it.
        let location = match evolution.table_location.as_deref() {
            Some(prefix) => Some(format!(
                "{}/{}/{}",
                location_url(prefix)?,
                ident.namespace().as_ref().join("/"),
                ident.name()
            )),
            None => None,
        };
        self.catalog.ensure_namespace(ident.namespace()).await?;
        self.catalog
            .create_table(
                ident,
                NewTable {
                    schema,
                    partition_spec,
                    location,
                    // Recorded where readers apply no delete files, so other writers
                    // follow.
                    properties: created_table_properties(strategy),
                },
            )
            .await
    }
}

impl Writer {
    /// What of a message may shape a table floe creates: a delete's fields other than
    /// its key are ignored when it is written, so they must not become columns either
    /// (those `partition_spec` names excepted: the table cannot be made without them).
    fn shaping_payload<'m>(&self, m: &Message<'m>) -> Cow<'m, [u8]> {
        match RowOp::parse(m.operation) {
            Ok(RowOp::Delete) => {}
            Ok(_) => return Cow::Borrowed(m.payload),
            Err(_) => return Cow::Borrowed(b"null"), // fails alone; inference skips it
        }
        let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(m.payload) else {
            return Cow::Borrowed(m.payload); // not an object: inference skips it
        };
        let key: serde_json::Map<String, Value> = fields
            .into_iter()
            .filter(|(name, _)| self.shapes_the_table(name))
            .collect();
        Cow::Owned(serde_json::to_vec(&Value::Object(key)).unwrap_or_default())
    }

    /// Whether a delete's top-level field `name` may shape a table floe creates: a key
    /// column, or a column `partition_spec` partitions by (the table needs it).
    fn shapes_the_table(&self, name: &str) -> bool {
        let cs = self.config.case_sensitive_columns;
        let partition = self.config.schema_evolution.partition_spec.as_deref();
        let partition_sources = partition.map(source_columns).unwrap_or_default();
        self.config
            .identifier_fields
            .iter()
            .chain(&partition_sources)
            .any(|k| same_name(k, name, cs))
    }
}

/// Whether some message gives top-level field `name` a whole number (`1`, `2.0`).
fn some_value_is_whole(payloads: &[Cow<'_, [u8]>], name: &str, case_sensitive: bool) -> bool {
    payloads.iter().any(|p| {
        let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(p) else {
            return false;
        };
        fields.iter().any(|(field, v)| {
            same_name(field, name, case_sensitive)
                && v.is_number()
                && crate::shred::convert::parse_i64(&v.to_string()).is_ok()
        })
    })
}

/// On a catalog that refuses identifier-field ids (Unity), the key of a static schema
/// (`schema_evolution.schema`) would be dropped at creation: it becomes
/// `identifier_fields` instead, so upserts still find it.
fn key_from_static_schema(config: &mut Config) -> Result<()> {
    let Some(json) = &config.schema_evolution.schema else {
        return Ok(());
    };
    if !config.identifier_fields.is_empty() {
        return Ok(());
    }
    let schema: Schema = serde_json::from_value(json.clone()).map_err(|e| {
        Error::config(format!(
            "schema_evolution.schema is not an Iceberg schema: {e}"
        ))
    })?;
    let names: Vec<String> = schema
        .identifier_field_ids()
        .filter_map(|id| schema.name_by_field_id(id).map(str::to_string))
        .collect();
    if !names.is_empty() {
        tracing::info!(
            "Unity Catalog refuses identifier-field ids: the key of schema_evolution.schema ({}) \
             is kept as identifier_fields",
            names.join(", ")
        );
        config.identifier_fields = names;
    }
    Ok(())
}

/// The upsert strategy for a catalog whose readers apply no delete files (Unity
/// Catalog): copy-on-write, which such readers see correctly. A configured strategy that
/// writes delete files is refused: its upserts and deletes would be invisible to them.
fn strategy_without_delete_files(configured: Option<MergeStrategy>) -> Result<MergeStrategy> {
    match configured {
        None | Some(MergeStrategy::CopyOnWrite) => Ok(MergeStrategy::CopyOnWrite),
        Some(other) => Err(Error::config(format!(
            "merge_strategy: {} writes delete files, which Unity Catalog's readers do not \
             apply; use copy-on-write there (or leave merge_strategy unset)",
            other.name()
        ))),
    }
}

/// Properties of the tables floe creates. A streaming table commits several times a
/// second, and every commit writes a new `metadata.json`: old ones are deleted once
/// they fall out of the metadata log (its default 100 versions), as Iceberg's catalogs
/// do when this is set, instead of piling up.
fn created_table_properties(strategy: Option<MergeStrategy>) -> HashMap<String, String> {
    let mut props = HashMap::from([(
        crate::catalog::sql::DELETE_AFTER_COMMIT.to_string(),
        "true".to_string(),
    )]);
    // A configured strategy is recorded, so other writers (and floe without the setting)
    // write the table the same way.
    if let Some(s) = strategy {
        for key in ["write.update.mode", "write.delete.mode", "write.merge.mode"] {
            props.insert(key.to_string(), s.write_mode().to_string());
        }
        if s == MergeStrategy::MergeOnReadPositional {
            props.insert(
                crate::config::MERGE_ON_READ_DELETES.to_string(),
                "position".to_string(),
            );
        }
    }
    props
}

/// How exactly-once splits one table's messages (positions within the group).
#[derive(Default)]
struct WritePlan {
    write: Vec<usize>,
    /// Some message is acknowledged as committed without being written.
    acknowledges: bool,
    /// (position, position of its first copy)
    duplicates: Vec<(usize, usize)>,
    refused: Vec<(usize, Error)>,
    /// Some refused position is held by a call that arrived after this one: this call
    /// then gives up its place (see [`waits_for_later`]).
    waits_for_later: bool,
    /// Positions repeated with a different payload: the source names no partition.
    conflicting: Vec<(usize, Error)>,
}

impl WritePlan {
    /// Whether the call keeps later calls waiting at the table after this attempt: some
    /// of its messages (refused, or failed not at their fault among `failures`) are to be
    /// retried, and their retry must land before the later calls' rows — unless a
    /// refused position is held by a later call (see [`waits_for_later`]).
    fn holds_later_calls_back(&self, failures: &[(usize, Error)]) -> bool {
        !self.waits_for_later
            && (!self.refused.is_empty()
                || failures.iter().any(|(_, e)| e.kind() != ErrorKind::Data))
    }
}

/// A cheap fingerprint of a payload, to tell a replayed message from a different one
/// that claims the same position.
fn payload_hash(payload: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    payload.hash(&mut h);
    h.finish()
}

/// Message `i`'s position is being committed by another call: a replay (the same
/// payload) is retried once that commit settles; another payload means the source names
/// no partition, the message's own fault.
fn in_flight_position(i: usize, source: &str, offset: i64, same_payload: bool) -> Error {
    if same_payload {
        Error::new(
            ErrorKind::Unavailable,
            format!(
                "message {i}: offset {offset} of source {source:?} is being committed by another call; retry"
            ),
        )
    } else {
        Error::new(
            ErrorKind::Data,
            format!(
                "message {i}: source {source:?} offset {offset} is being committed by another call with a different payload: \
                 exactly_once.source must identify the message's partition (e.g. topic and partition)"
            ),
        )
    }
}

/// Whether a call (`ticket`) refused a position held by the call `holder` would wait
/// on a call that waits on it, were it to keep its place in arrival order: a call waits
/// only for those that arrived before it, so keeping its place for a position an earlier
/// (or unordered) call is committing is safe, and for one a later call holds would
/// deadlock. Then the call gives up its place, and the order between the two is the
/// order their commits land in (a redelivery a later call took first).
fn waits_for_later(ticket: Ticket, holder: Ticket) -> bool {
    ticket != UNORDERED && holder != UNORDERED && holder > ticket
}

fn repeated_position(i: usize, first: usize, source: &str, offset: i64) -> Error {
    Error::new(
        ErrorKind::Data,
        format!(
            "message {i}: source {source:?} offset {offset} repeats message {first} with a different payload: \
             exactly_once.source must identify the message's partition (e.g. topic and partition)"
        ),
    )
}

struct GroupResult {
    rows: usize,
    /// The group's rows (or deletes) committed.
    committed: bool,
    /// The snapshot they went to is counted by this call (see
    /// [`crate::commit::committer::Committed::counts_snapshot`]).
    counts_snapshot: bool,
    /// (position within the group, error) for messages that were not shredded.
    failures: Vec<(usize, Error)>,
    /// Some messages failed not at their fault and are to be retried under the call's
    /// ticket: the calls after it wait for them.
    retry_left: bool,
}

/// What [`shred_guarded`] made of some of a group's messages.
struct Shredded {
    batch: Option<RecordBatch>,
    /// For each row of `batch`, the position (within the group) of its message.
    positions: Vec<usize>,
    failures: Vec<(usize, Error)>,
    /// Positions of the failures at a field (not the whole message): schema evolution
    /// may make them fit.
    field_failures: Vec<usize>,
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
fn row_op(m: &Message<'_>) -> RowOp {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `texts` as messages of `source` at offsets `from`, `from + 1`, ….
    fn at_offsets<'a>(texts: &'a [String], source: &'a str, from: usize) -> Vec<Message<'a>> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| Message {
                source: Some(source),
                offset: Some((from + i) as i64),
                ..Message::insert(t.as_bytes())
            })
            .collect()
    }

    /// An exactly-once commit rewrites only the writer's offset record, which no setting
    /// reads: the commit stage keeps the table it produced (see `KeptTable`) rather than
    /// publish it, or every commit would copy the metadata for the view's sake. The
    /// record still reaches the ledger: a replay writes nothing.
    #[tokio::test]
    async fn exactly_once_commits_are_kept_by_the_commit_stage_not_published() {
        let dir = tempfile::tempdir().unwrap();
        let config = json!({
            "catalog": {"warehouse": dir.path().join("wh").to_str().unwrap()},
            "namespace": "kept", "table": "t",
            "commit": {"exactly_once": {"writer_id": "w"}},
            "schema_evolution": {"enabled": true, "schema": {"type": "struct", "schema-id": 0,
                "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]}}
        });
        let writer = Writer::open(Config::from_json(&config.to_string()).unwrap())
            .await
            .unwrap();
        let texts: Vec<String> = (0..30).map(|i| format!(r#"{{"id": {i}}}"#)).collect();
        let first = writer
            .write_batch(&at_offsets(&texts[..10], "src/0", 0))
            .await
            .unwrap();
        assert_eq!(first.rows_committed, 10);
        let ident = table_ident("kept", "t").unwrap();
        let handle = writer.table_slot(&ident).lock().await.clone().unwrap();
        let shown = handle.committer.view().table.metadata.clone();
        for from in [10, 20] {
            let out = writer
                .write_batch(&at_offsets(&texts[from..from + 10], "src/0", from))
                .await
                .unwrap();
            assert_eq!(out.rows_committed, 10);
        }
        assert!(
            Arc::ptr_eq(&shown, &handle.committer.view().table.metadata),
            "an exactly-once commit was published to the write calls' view"
        );
        let table = writer.catalog().load_table(&ident).await.unwrap().unwrap();
        assert_eq!(table.metadata.snapshots().count(), 3);
        let record: serde_json::Value =
            serde_json::from_str(&table.metadata.properties()["floe.offsets.w"]).unwrap();
        assert_eq!(record["offsets"], json!({"src/0": [[0, 29]]}));
        let replay = writer
            .write_batch(&at_offsets(&texts, "src/0", 0))
            .await
            .unwrap();
        assert!(replay.failures.iter().all(Option::is_none), "{replay:?}");
        assert_eq!(
            replay.rows_committed, 0,
            "the kept commits' offsets were forgotten"
        );
    }

    #[test]
    fn catalogs_that_read_no_delete_files_get_copy_on_write() {
        assert_eq!(
            strategy_without_delete_files(None).unwrap(),
            MergeStrategy::CopyOnWrite
        );
        assert_eq!(
            strategy_without_delete_files(Some(MergeStrategy::CopyOnWrite)).unwrap(),
            MergeStrategy::CopyOnWrite
        );
        for delete_files in [
            MergeStrategy::MergeOnRead,
            MergeStrategy::MergeOnReadPositional,
        ] {
            let e = strategy_without_delete_files(Some(delete_files)).unwrap_err();
            assert!(e.to_string().starts_with("merge_strategy: "), "{e}");
        }
    }
}
