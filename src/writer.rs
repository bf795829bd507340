//! The writer facade: what the C ABI calls. Routes each message to its table, shreds,
//! writes data files and commits one snapshot per table per call.
//!
//! Calls may overlap (the host runs up to `max_in_flight` of them); per-table state is
//! behind an async mutex so one table's shredder and commits are never used at once,
//! while different tables proceed in parallel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use iceberg::TableIdent;
use iceberg::io::FileIO;
use iceberg::spec::Schema;

use crate::catalog::rest::RestCatalog;
use crate::catalog::sql::SqlCatalog;
use crate::catalog::{Catalog, LoadedTable, NewTable, table_ident};
use crate::commit::{AppendFiles, find_commit, prepare_append};
use crate::config::{CatalogKind, Config};
use crate::error::{Error, ErrorKind, Result};
use crate::partition_spec::parse_partition_spec;
use crate::shred::{DecodeOptions, MessageError, Shredder};
use crate::storage::{build_file_io, file_io_props, location_url};
use crate::write::{FileSettings, file_settings, write_data_files};

/// One message of a batch, with the table it goes to when the host evaluated one.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    pub payload: &'a [u8],
    pub namespace: Option<&'a str>,
    pub table: Option<&'a str>,
    /// `insert` (the default when `None`); upserts and deletes are not supported yet.
    pub operation: Option<&'a str>,
}

impl<'a> Message<'a> {
    /// An insert into the config's default table.
    pub fn insert(payload: &'a [u8]) -> Self {
        Message {
            payload,
            namespace: None,
            table: None,
            operation: None,
        }
    }
}

/// What happened to a batch: per message, `None` for committed or the reason it was not.
#[derive(Debug)]
pub struct BatchOutcome {
    pub failures: Vec<Option<Error>>,
    pub rows_committed: usize,
    pub snapshots: usize,
}

/// Backoff before retry `attempt` (1-based): full jitter over 50 ms · 2^attempt, capped
/// at 5 s, so racing writers spread out instead of colliding again.
fn backoff(attempt: u32) -> std::time::Duration {
    let ceiling_ms = (50u64 << attempt.min(7)).min(5_000);
    let jitter = uuid::Uuid::new_v4().as_u64_pair().0 % (ceiling_ms + 1);
    std::time::Duration::from_millis(jitter)
}

struct TableState {
    table: LoadedTable,
    file_io: FileIO,
    shredder: Shredder,
    settings: FileSettings,
}

pub struct Writer {
    config: Config,
    catalog: Arc<dyn Catalog>,
    io_props: HashMap<String, String>,
    tables: Mutex<HashMap<TableIdent, Arc<tokio::sync::Mutex<Option<TableState>>>>>,
}

impl Writer {
    /// Opens the catalog the config names (without touching any table yet).
    pub async fn open(config: Config) -> Result<Self> {
        let io_props = file_io_props(&config.storage);
        let catalog: Arc<dyn Catalog> = match config.catalog_kind()? {
            CatalogKind::Rest { url } => {
                Arc::new(RestCatalog::connect(&url, &config.catalog).await?)
            }
            CatalogKind::Embedded { database } => {
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
        Ok(Writer {
            config,
            catalog,
            io_props,
            tables: Mutex::new(HashMap::new()),
        })
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

    /// Writes and commits a batch. Each table's messages are committed as one snapshot;
    /// a message fails alone when it cannot be shredded, and with its table's group when
    /// the write or commit fails.
    pub async fn write_batch(&self, messages: &[Message<'_>]) -> BatchOutcome {
        let mut failures: Vec<Option<Error>> = vec![None; messages.len()];
        let mut groups: HashMap<TableIdent, Vec<usize>> = HashMap::new();
        for (i, m) in messages.iter().enumerate() {
            if let Some(op) = m.operation.filter(|op| !op.eq_ignore_ascii_case("insert")) {
                failures[i] = Some(Error::new(
                    ErrorKind::Data,
                    format!("message {i}: row_operation {op:?} is not supported yet (only insert)"),
                ));
                continue;
            }
            match self.resolve_ident(m) {
                Ok(ident) => groups.entry(ident).or_default().push(i),
                Err(e) => failures[i] = Some(e),
            }
        }
        let results =
            futures::future::join_all(groups.into_iter().map(|(ident, idx)| async move {
                let result = self.write_group(&ident, messages, &idx).await;
                (idx, result)
            }))
            .await;
        let (mut rows_committed, mut snapshots) = (0, 0);
        for (idx, result) in results {
            match result {
                Ok(group) => {
                    rows_committed += group.rows;
                    snapshots += usize::from(group.committed);
                    for (pos, err) in group.failures {
                        failures[idx[pos]] = Some(err);
                    }
                }
                Err(e) => idx.iter().for_each(|&i| failures[i] = Some(e.clone())),
            }
        }
        BatchOutcome {
            failures,
            rows_committed,
            snapshots,
        }
    }

    fn table_slot(&self, ident: &TableIdent) -> Arc<tokio::sync::Mutex<Option<TableState>>> {
        let mut tables = self.tables.lock().expect("table map lock");
        tables.entry(ident.clone()).or_default().clone()
    }

    async fn write_group(
        &self,
        ident: &TableIdent,
        messages: &[Message<'_>],
        idx: &[usize],
    ) -> Result<GroupResult> {
        let slot = self.table_slot(ident);
        let mut guard = slot.lock().await;
        if guard.is_none() {
            let payloads = idx.iter().map(|&i| messages[i].payload);
            *guard = Some(self.open_table(ident, payloads).await?);
        }
        let result = self
            .write_opened(guard.as_mut().expect("opened above"), messages, idx)
            .await;
        if result.is_err() {
            // Reload everything (schema, spec, settings) before this table's next batch.
            *guard = None;
        }
        result
    }

    async fn write_opened(
        &self,
        state: &mut TableState,
        messages: &[Message<'_>],
        idx: &[usize],
    ) -> Result<GroupResult> {
        let payloads = idx.iter().map(|&i| messages[i].payload);
        let shredded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            state.shredder.shred(payloads)
        }))
        .map_err(|_| Error::internal("the shredder panicked; this table's state was reset"))?;
        let failures: Vec<(usize, Error)> = shredded
            .errors
            .into_iter()
            .map(|e| {
                // The shredder saw this table's messages only: name the batch index.
                let in_batch = MessageError {
                    index: idx[e.index],
                    ..e.clone()
                };
                (e.index, Error::new(ErrorKind::Data, in_batch.to_string()))
            })
            .collect();
        let Some(batch) = shredded.batch else {
            return Ok(GroupResult {
                rows: 0,
                committed: false,
                failures,
            });
        };
        let rows = batch.num_rows();
        let data_files = write_data_files(
            &batch,
            &state.table.metadata,
            &state.file_io,
            &state.settings,
        )
        .await?;
        let files = AppendFiles {
            commit_id: uuid::Uuid::new_v4(),
            data_files,
            schema_id: state.table.metadata.current_schema_id(),
            spec_id: state.table.metadata.default_partition_spec_id(),
            properties: HashMap::from([(
                "floe.version".to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            )]),
        };
        self.commit_append(state, files).await?;
        Ok(GroupResult {
            rows,
            committed: true,
            failures,
        })
    }

    /// Commits, rebuilding on the new head after a conflict; after an unknown outcome,
    /// looks for the commit id before trying again so rows are never appended twice.
    /// Commits, rebuilding on the new head after a conflict. After an unknown outcome it
    /// looks for the commit id before trying again (and once more before giving up), so
    /// rows are never appended twice; while that stays undecided the error says so.
    async fn commit_append(&self, state: &mut TableState, files: AppendFiles) -> Result<()> {
        let ident = state.table.ident.clone();
        let mut last_error: Option<Error> = None;
        let attempts = self.config.commit.max_retries + 1;
        for attempt in 0..=attempts {
            if let Some(previous) = &last_error {
                let fresh = match self.catalog.load_table(&ident).await {
                    Ok(Some(t)) => t,
                    Ok(None) => {
                        return Err(Error::new(
                            ErrorKind::NotFound,
                            format!("table {ident} was dropped"),
                        ));
                    }
                    // Cannot look: an unknown outcome stays unknown.
                    Err(e) if previous.kind() == ErrorKind::CommitStateUnknown => {
                        return Err(previous
                            .clone()
                            .context(format!("and reloading {ident} failed ({e})")));
                    }
                    Err(e) => return Err(e),
                };
                let found = find_commit(&fresh.metadata, files.commit_id).is_some();
                state.table = fresh;
                if found {
                    return Ok(());
                }
            }
            if attempt == attempts {
                break;
            }
            if attempt > 0 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            let prepared = prepare_append(&state.table.metadata, &state.file_io, &files).await?;
            match self
                .catalog
                .commit(&ident, prepared.requirements, prepared.updates)
                .await
            {
                Ok(table) => {
                    state.table = table;
                    return Ok(());
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Conflict | ErrorKind::CommitStateUnknown
                    ) =>
                {
                    last_error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.expect("loop ran").context(format!(
            "commit to {ident} failed after {attempts} attempts"
        )))
    }

    async fn open_table<'m>(
        &self,
        ident: &TableIdent,
        sample: impl Iterator<Item = &'m [u8]>,
    ) -> Result<TableState> {
        let table = match self.catalog.load_table(ident).await? {
            Some(t) => t,
            None if self.config.schema_evolution.enabled => {
                self.create_table(ident, sample).await?
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
        let mut props = self.io_props.clone();
        props.extend(table.io_props.clone());
        let file_io = build_file_io(props);
        let shredder = Shredder::new(
            table.metadata.current_schema().clone(),
            DecodeOptions {
                epoch_unit: self.config.json.epoch_unit,
                case_sensitive: self.config.case_sensitive_columns,
            },
        )?;
        let settings = file_settings(&self.config.parquet, &table.metadata)?;
        Ok(TableState {
            table,
            file_io,
            shredder,
            settings,
        })
    }

    async fn create_table<'m>(
        &self,
        ident: &TableIdent,
        sample: impl Iterator<Item = &'m [u8]>,
    ) -> Result<LoadedTable> {
        let evolution = &self.config.schema_evolution;
        let schema: Schema = match &evolution.schema {
            Some(json) => serde_json::from_value(json.clone()).map_err(|e| {
                Error::config(format!(
                    "schema_evolution.schema is not an Iceberg schema: {e}"
                ))
            })?,
            None => crate::shred::infer::infer_schema(sample)
                .map_err(|e| Error::new(ErrorKind::Data, format!("cannot create {ident}: {e}")))?,
        };
        let partition_spec = match evolution.partition_spec.as_deref() {
            Some(text) => Some(parse_partition_spec(text, &schema)?),
            None => None,
        };
        let location = evolution.table_location.as_deref().map(|prefix| {
            format!(
                "{}/{}/{}",
                prefix.trim_end_matches('/'),
                ident.namespace().as_ref().join("/"),
                ident.name()
            )
        });
        self.catalog.ensure_namespace(ident.namespace()).await?;
        self.catalog
            .create_table(
                ident,
                NewTable {
                    schema,
                    partition_spec,
                    location,
                    properties: HashMap::new(),
                },
            )
            .await
    }
}

struct GroupResult {
    rows: usize,
    committed: bool,
    /// (position within the group, error) for messages that were not shredded.
    failures: Vec<(usize, Error)>,
}
