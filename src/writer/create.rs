//! Opening a table a call routes to, and creating it (shaped by the first messages) when
//! schema evolution may.

use super::*;
use iceberg::spec::FormatVersion;

impl Writer {
    pub(super) async fn open_table<'m, 'p: 'm>(
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
            last_used: Mutex::new(std::time::Instant::now()),
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
        let format_version = match evolution.format_version {
            2 => FormatVersion::V2,
            3 => FormatVersion::V3,
            other => {
                return Err(Error::config(format!(
                    "schema_evolution.format_version must be 2 or 3, not {other}"
                )));
            }
        };
        if format_version < FormatVersion::V3
            && let Some(name) = crate::shred::infer::nanosecond_field(&schema)
        {
            return Err(Error::new(
                ErrorKind::Data,
                format!(
                    "cannot create {ident}: `{name}` is a nanosecond timestamp, which needs a v3 \
                     table (set schema_evolution.format_version: 3)"
                ),
            ));
        }
        if format_version >= FormatVersion::V3
            && let Some(name) = crate::write::lineage::reserved_column(&schema)
        {
            return Err(Error::new(
                ErrorKind::Data,
                format!(
                    "cannot create {ident}: `{name}` is a name Iceberg v3 reserves for row \
                     lineage, not a column"
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
        let created = self
            .catalog
            .create_table(
                ident,
                NewTable {
                    schema,
                    partition_spec,
                    location,
                    // Recorded where readers apply no delete files, so other writers
                    // follow.
                    properties: created_table_properties(strategy),
                    format_version,
                },
            )
            .await?;
        // A catalog that chose another version than asked would leave the pipeline
        // writing something other than the config says (v3 upserts write deletion
        // vectors, v3 refuses copy-on-write). Said once, here: from now on the table
        // exists and keeps its own version, as every existing table does.
        let made = created.metadata.format_version();
        if made != format_version {
            return Err(Error::config(format!(
                "schema_evolution.format_version is {}, but the catalog created {ident} as \
                 v{} (it does not follow the `format-version` property); floe writes the \
                 table as it is from now on",
                format_version as u8, made as u8
            )));
        }
        Ok(created)
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
pub(super) fn key_from_static_schema(config: &mut Config) -> Result<()> {
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
pub(super) fn strategy_without_delete_files(
    configured: Option<MergeStrategy>,
) -> Result<MergeStrategy> {
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
