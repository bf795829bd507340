//! Schema evolution on write (`schema_evolution.enabled`).
//!
//! A message with a field the table lacks (or a null in a required field, or a number
//! too wide for its column) fails to shred against the current schema. The writer then
//! plans, from all such messages of the group, one evolved schema ([`plan`]) and
//! commits it ([`evolve_table`]) before any of the group's data: the data commit pins
//! the new schema id in its requirements, as every floe commit pins the schema it was
//! written for. Writers that evolve one table at once (threads or processes) converge:
//! each commit requires the schema it planned from, a loser reloads and plans again on
//! the winner's schema, and fields are matched by name, so none is added twice.

pub mod plan;

use std::collections::HashSet;
use std::time::Duration;

use iceberg::spec::{FormatVersion, PrimitiveType, TableMetadata, Type};
use iceberg::{TableIdent, TableRequirement, TableUpdate};
use serde_json::Value;

use crate::catalog::{Catalog, LoadedTable};
use crate::error::{Error, ErrorKind, Result};
use crate::rowops::keys::column_named;
use crate::shred::infer::{TypeHints, nested};
use crate::write::lineage::reserved_column;
pub use plan::{Evolution, plan};

/// Schema commits tried before the evolution fails (each conflict means another writer
/// changed the schema, so the next plan starts from more of what is needed).
const MAX_ATTEMPTS: u32 = 10;

/// Whether data files written for schema `schema_id` can be committed under the table's
/// current schema as they are: every field they have is still there, with the same type
/// or one Iceberg promotes it to, and none became required. This is what evolution does
/// (adding optional fields, widening, relaxing), so groups written while another call
/// evolved the table still commit instead of being shredded again.
pub fn compatible(metadata: &TableMetadata, schema_id: i32) -> bool {
    if schema_id == metadata.current_schema_id() {
        return true;
    }
    let (Some(old), current) = (metadata.schema_by_id(schema_id), metadata.current_schema()) else {
        return false;
    };
    let same_key = old.identifier_field_ids().collect::<HashSet<_>>()
        == current.identifier_field_ids().collect::<HashSet<_>>();
    // A column added since (by another tool) must be optional: the files lack it.
    let added_are_optional = current
        .as_struct()
        .fields()
        .iter()
        .flat_map(nested)
        .all(|field| !field.required || old.field_by_id(field.id).is_some());
    same_key
        && added_are_optional
        && old
            .as_struct()
            .fields()
            .iter()
            .flat_map(nested)
            .all(|field| {
                current.field_by_id(field.id).is_some_and(|now| {
                    (field.required || !now.required)
                        && same_or_promoted(&field.field_type, &now.field_type)
                })
            })
}

/// Whether a value of type `old` reads as `now`: the same kind of nested type (their
/// fields are compared one by one), or a primitive Iceberg promotes.
fn same_or_promoted(old: &Type, now: &Type) -> bool {
    use PrimitiveType as P;
    match (old, now) {
        (Type::Struct(_), Type::Struct(_))
        | (Type::List(_), Type::List(_))
        | (Type::Map(_), Type::Map(_)) => true,
        (Type::Primitive(a), Type::Primitive(b)) => match (a, b) {
            _ if a == b => true,
            (P::Int, P::Long) | (P::Float, P::Double) => true,
            (
                P::Decimal {
                    precision: p1,
                    scale: s1,
                },
                P::Decimal {
                    precision: p2,
                    scale: s2,
                },
            ) => s1 == s2 && p1 <= p2,
            _ => false,
        },
        _ => false,
    }
}

/// How the messages are matched to columns, and which columns stay required.
#[derive(Debug, Clone, Copy)]
pub struct Matching<'a> {
    pub case_sensitive: bool,
    /// Explicit types for fields being added.
    pub hints: &'a TypeHints,
    /// The configured key (`identifier_fields`): never relaxed to optional, like the
    /// table's own identifier fields.
    pub key: &'a [String],
}

/// Plans `messages` against the table's current schema.
pub fn plan_for(
    table: &LoadedTable,
    messages: &[Value],
    matching: Matching<'_>,
) -> Result<Option<Evolution>> {
    let metadata = &table.metadata;
    let schema = metadata.current_schema();
    let next_schema_id = metadata
        .schemas_iter()
        .map(|s| s.schema_id())
        .max()
        .unwrap_or(0)
        + 1;
    // Named as KeyColumns names them (any case with case_sensitive_columns: false).
    let top = schema.as_struct().fields();
    let key_ids: Vec<i32> = matching
        .key
        .iter()
        .filter_map(|name| column_named(top, name, matching.case_sensitive).map(|at| top[at].id))
        .collect();
    let evolution = plan(
        schema,
        (metadata.last_column_id(), next_schema_id),
        messages,
        (matching.case_sensitive, matching.hints),
        &key_ids,
    )?;
    // An explicit type may ask for what the table's format cannot hold.
    if let Some(e) = &evolution
        && metadata.format_version() < FormatVersion::V3
        && let Some(name) = crate::shred::infer::nanosecond_field(&e.schema)
    {
        return Err(Error::new(
            ErrorKind::Data,
            format!("`{name}` would be a nanosecond timestamp, which needs a v3 table"),
        ));
    }
    if let Some(e) = &evolution
        && metadata.format_version() >= FormatVersion::V3
        && let Some(name) = reserved_column(&e.schema)
        && reserved_column(schema).is_none()
    {
        return Err(Error::new(
            ErrorKind::Data,
            format!("`{name}` is a name Iceberg v3 reserves for row lineage: not a column"),
        ));
    }
    Ok(evolution)
}

/// Evolves the table's schema until it holds `messages` (see the module docs), and
/// returns the table as the last commit (or load) left it.
pub async fn evolve_table(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    messages: &[Value],
    matching: Matching<'_>,
) -> Result<LoadedTable> {
    let mut last_error = None;
    for attempt in 0..MAX_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(20 << attempt.min(6))).await;
        }
        let table = catalog
            .load_table(ident)
            .await?
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("table {ident} was dropped")))?;
        let Some(evolution) = plan_for(&table, messages, matching)? else {
            return Ok(table);
        };
        let metadata = &table.metadata;
        let requirements = vec![
            TableRequirement::UuidMatch {
                uuid: metadata.uuid(),
            },
            TableRequirement::CurrentSchemaIdMatch {
                current_schema_id: metadata.current_schema_id(),
            },
            TableRequirement::LastAssignedFieldIdMatch {
                last_assigned_field_id: metadata.last_column_id(),
            },
        ];
        let updates = vec![
            TableUpdate::AddSchema {
                schema: evolution.schema,
            },
            TableUpdate::SetCurrentSchema { schema_id: -1 },
        ];
        match catalog.commit(ident, requirements, updates).await {
            Ok(table) => {
                tracing::info!(
                    "evolved the schema of {ident} to id {}: {}",
                    table.metadata.current_schema_id(),
                    evolution.changes.join("; ")
                );
                return Ok(table);
            }
            // Another writer changed the table, or the answer was lost: the next load
            // shows what is there, and the next plan starts from it.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Conflict | ErrorKind::CommitStateUnknown | ErrorKind::Unavailable
                ) =>
            {
                tracing::debug!("schema evolution of {ident}, attempt {}: {e}", attempt + 1);
                last_error = Some(e);
            }
            Err(e) => return Err(e.context(format!("evolving the schema of {ident}"))),
        }
    }
    let e = last_error.expect("attempts ran");
    Err(e.context(format!(
        "evolving the schema of {ident} failed after {MAX_ATTEMPTS} attempts"
    )))
}
