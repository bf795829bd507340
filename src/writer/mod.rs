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
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use iceberg::TableIdent;
use iceberg::spec::Schema;

use crate::catalog::rest::RestCatalog;
use crate::catalog::sql::SqlCatalog;
use crate::catalog::{Catalog, LoadedTable, NewTable, table_ident};
use crate::commit::committer::{
    Claim, CommitterOptions, Room, Submission, TableCommitter, TableView, Verdict,
    check_merge_on_read_keys,
};
use crate::commit::offsets::SourceOffsets;
use crate::commit::order::{Ticket, UNORDERED};
use crate::commit::together::Party;
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
    /// When a call last took the table (see [`Writer::close_idle_tables`]).
    last_used: Mutex<std::time::Instant>,
}

/// A ticket a call took for itself (see [`Writer::write_call`]), given back however the
/// call ends, a cancelled one included: a ticket left behind would hold back every later
/// ordered call to its tables.
struct OwnTicket<'a> {
    order: &'a crate::commit::order::Order,
    ticket: Ticket,
}

impl Drop for OwnTicket<'_> {
    fn drop(&mut self) {
        self.order.depart(self.ticket);
    }
}

/// How often calls look for tables idle longer than `commit.table_idle_timeout`.
const IDLE_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// When idle tables were last looked for.
    idle_checked: Mutex<std::time::Instant>,
}

impl Writer {
    /// How many tables are open (each with its committer), idle or not.
    pub fn open_tables(&self) -> usize {
        self.tables.locked().len()
    }

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
        if config.commit.atomic_tables {
            catalog.check_commit_tables()?;
        }
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
            commit_slots: Default::default(),
        });
        Ok(Writer {
            config,
            catalog,
            options,
            tables: Mutex::new(HashMap::new()),
            idle_checked: Mutex::new(std::time::Instant::now()),
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
        // By message index, sparse while the call waits for its commits (a vector of
        // one entry per message is 32 B a row for as long as the call is in flight).
        let mut failures: BTreeMap<usize, Error> = failed
            .into_iter()
            .enumerate()
            .filter_map(|(i, e)| e.map(|e| (i, e)))
            .collect();
        let mut groups = TableGroups::default();
        for (i, m) in messages.iter().enumerate() {
            if failures.contains_key(&i) {
                continue;
            }
            if let Err(e) = RowOp::parse(m.operation) {
                failures.insert(i, Error::new(ErrorKind::Data, format!("message {i}: {e}")));
                continue;
            }
            if let Some(e) = self.check_types(i, m) {
                failures.insert(i, e);
                continue;
            }
            if self.options.writer_id.is_some() && (m.source.is_none() || m.offset.is_none()) {
                let e = format!(
                    "message {i}: exactly-once is on but the message has no source and offset"
                );
                failures.insert(i, Error::new(ErrorKind::Data, e));
                continue;
            }
            if groups.join_last(m, i) {
                continue;
            }
            match self.resolve_ident(m) {
                Ok(ident) => groups.push(m, ident, i),
                // The table comes from the message (interpolated): its own fault.
                Err(e) => {
                    failures.insert(i, Error::new(ErrorKind::Data, format!("message {i}: {e}")));
                }
            }
        }
        // Tables that commit together keep arrival order, which makes each table meet
        // the transactions in one order (see `commit::together`): a call that keeps none
        // takes a place for itself.
        let together = self.config.commit.atomic_tables && groups.len() > 1;
        let own_ticket = (together && ticket == UNORDERED).then(|| OwnTicket {
            order: &self.options.order,
            ticket: self.arrive(),
        });
        let ticket = own_ticket.as_ref().map_or(ticket, |own| own.ticket);
        let mut parties: HashMap<TableIdent, Party> = match together {
            true => {
                let tables: Vec<TableIdent> = groups.tables().cloned().collect();
                let parties = crate::commit::together::parties(self.catalog.clone(), &tables);
                tables.into_iter().zip(parties).collect()
            }
            false => HashMap::new(),
        };
        self.options.order.attempt(ticket, groups.tables());
        let results = futures::future::join_all(groups.by_table.into_iter().map(|(ident, idx)| {
            let party = parties.remove(&ident);
            async move {
                let result = self
                    .write_group(ticket, &ident, messages, &idx, party)
                    .await;
                match &result {
                    Ok(group) if !group.retry_left => self.options.order.settle(ticket, &ident),
                    Err(e) if e.kind() == ErrorKind::Data => {
                        self.options.order.settle(ticket, &ident)
                    }
                    _ => self.options.order.unsettle(ticket, &ident),
                }
                (ident, idx, result)
            }
        }))
        .await;
        drop(own_ticket);
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
                        failures.insert(idx[pos], err);
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
                    idx.iter().for_each(|&i| {
                        failures.insert(i, e.clone());
                    });
                }
            }
        }
        if let Some(e) = call_error
            && !any_committed
        {
            return Err(e);
        }
        failpoint::hit(failpoint::names::BEFORE_RETURN);
        let mut each: Vec<Option<Error>> = (0..messages.len()).map(|_| None).collect();
        for (i, e) in failures {
            each[i] = Some(e);
        }
        Ok(BatchOutcome {
            failures: each,
            rows_committed,
            snapshots,
        })
    }

    fn table_slot(&self, ident: &TableIdent) -> TableSlot {
        self.close_idle_tables();
        let mut tables = self.tables.locked();
        tables.entry(ident.clone()).or_default().clone()
    }

    /// Closes the tables no call has used for `commit.table_idle_timeout`, looking at
    /// most once a second (as calls arrive): dropping a table's handle stops its
    /// committer's tasks and frees its caches. A table a call holds, or is opening, is
    /// never closed (its slot or handle is shared then), nor one whose committer still
    /// has rows handed in (a cancelled call's), and a call finds a table only through
    /// this map, under its lock: a closed table's committer has nothing left to commit
    /// when another opens.
    fn close_idle_tables(&self) {
        let timeout = self.config.commit.table_idle_timeout;
        if timeout.is_zero() {
            return;
        }
        {
            let mut checked = self.idle_checked.locked();
            if checked.elapsed() < IDLE_CHECK_EVERY {
                return;
            }
            *checked = std::time::Instant::now();
        }
        let mut tables = self.tables.locked();
        let before = tables.len();
        tables.retain(|_, slot| {
            if Arc::strong_count(slot) > 1 {
                return true; // a call holds the slot
            }
            let Ok(guard) = slot.try_lock() else {
                return true;
            };
            match guard.as_ref() {
                None => false, // never opened, or forgotten
                Some(handle) => {
                    Arc::strong_count(handle) > 1
                        || !handle.committer.is_quiet()
                        || handle.last_used.locked().elapsed() < timeout
                }
            }
        });
        let closed = before - tables.len();
        if closed > 0 {
            tracing::debug!(closed, open = tables.len(), "closed idle tables");
        }
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
            *handle.last_used.locked() = std::time::Instant::now();
            return Ok(handle.clone());
        }
        let sample = idx.iter().map(|&i| &messages[i]);
        // Opening (loading, maybe creating) talks to the catalog and the store as a
        // commit does: a batch routed to a thousand new tables opens them a slot's worth
        // at a time, not all at once.
        let slots = self.options.commit_slots.clone();
        let slot = slots.take().await;
        let handle = Arc::new(self.open_table(ident, sample).await?);
        drop(slot);
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

    /// One table's part of a call. With its `party` in the call's transaction across
    /// tables: a table that ends with nothing to commit (its messages failed through
    /// their own fault, or were committed before) withdraws; one that fails otherwise
    /// calls the transaction off (see [`crate::commit::together`]).
    async fn write_group(
        &self,
        ticket: Ticket,
        ident: &TableIdent,
        messages: &[Message<'_>],
        idx: &[usize],
        party: Option<Party>,
    ) -> Result<GroupResult> {
        let mut party = party;
        let result = self
            .write_table_part(ticket, ident, messages, idx, &mut party)
            .await;
        if let Some(party) = party {
            match &result {
                Err(e) if e.kind() != ErrorKind::Data => drop(party),
                _ => party.withdraw(),
            }
        }
        result
    }

    async fn write_table_part(
        &self,
        ticket: Ticket,
        ident: &TableIdent,
        messages: &[Message<'_>],
        idx: &[usize],
        party: &mut Option<Party>,
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
        // shredded again (nothing of them was committed) — unless they went with the
        // call's transaction across tables, which their failure called off: shredded
        // again, they would commit alone.
        let mut reshreds = 0;
        let linked = party.is_some();
        // Rows wait as JSON, not Arrow, while enough of the table's wait shredded (see
        // `commit::committer::gate`). The room is taken before the claim: a call waiting
        // for room must hold no exactly-once position another call may wait for.
        let bytes = idx.iter().map(|&i| messages[i].payload.len()).sum();
        let (result, plan) = loop {
            let room = handle
                .committer
                .room_to_shred(ticket, bytes, party.is_some())
                .await;
            let (claim, mut plan) = self
                .plan_checked(ticket, ident, &handle, messages, idx)
                .await?;
            let may_evolve = reshreds < MAX_RESHREDS;
            // Taken out of the plan, which outlives the commit: the positions are not.
            let write = std::mem::take(&mut plan.write);
            let part = submit::Part {
                handle: &handle,
                messages,
                idx,
                plan: &plan,
                may_evolve,
            };
            let result = self
                .shred_and_submit(ticket, (room, claim), part, write, party)
                .await;
            match result {
                Err(e)
                    if e.kind() == ErrorKind::SchemaChanged
                        && reshreds < MAX_RESHREDS
                        && party.is_some() == linked =>
                {
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
        // Idle from when the call is done with the table, not from when it began: a
        // call that waited long is not followed by its table's closing.
        *handle.last_used.locked() = std::time::Instant::now();
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
}

mod create;
mod plan;
mod submit;

use create::{key_from_static_schema, strategy_without_delete_files};
use plan::WritePlan;
use submit::{GroupResult, row_op};

/// The namespace and table a message names (`None`: the config's).
type TableNames<'m> = (Option<&'m str>, Option<&'m str>);

/// A call's messages by table, in the order the tables first appear. Messages name their
/// table (or leave it to the config) the same way as the message before them nearly
/// always: they join its table without their names being parsed and hashed again.
#[derive(Default)]
struct TableGroups<'m> {
    by_table: Vec<(TableIdent, Vec<usize>)>,
    index: HashMap<TableIdent, usize>,
    /// The names (namespace, table) the last message gave, and its group.
    last: Option<(TableNames<'m>, usize)>,
}

impl<'m> TableGroups<'m> {
    /// Message `i` joins the last message's table if it names it the same way.
    fn join_last(&mut self, m: &Message<'m>, i: usize) -> bool {
        match self.last {
            Some((names, group)) if names == (m.namespace, m.table) => {
                self.by_table[group].1.push(i);
                true
            }
            _ => false,
        }
    }

    fn push(&mut self, m: &Message<'m>, ident: TableIdent, i: usize) {
        let group = *self.index.entry(ident.clone()).or_insert_with(|| {
            self.by_table.push((ident, Vec::new()));
            self.by_table.len() - 1
        });
        self.by_table[group].1.push(i);
        self.last = Some(((m.namespace, m.table), group));
    }

    fn len(&self) -> usize {
        self.by_table.len()
    }

    fn tables(&self) -> impl Iterator<Item = &TableIdent> {
        self.by_table.iter().map(|(ident, _)| ident)
    }
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
