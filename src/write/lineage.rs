//! Row lineage columns (Iceberg v3): a row's `_row_id` and
//! `_last_updated_sequence_number`. A reader takes them from the data file when the file
//! has them and they are not null, else inherits them (the file's first row id plus the
//! row's position; the file's data sequence number). A writer that moves rows to a new
//! file without changing them (copy-on-write keeping the rows it does not replace) writes
//! both explicitly, so the rows keep them.

use std::sync::Arc;

use iceberg::spec::{NestedField, PrimitiveType, Schema, SchemaRef, Type};

use crate::error::Result;

/// The reserved field id of `_row_id`.
pub(crate) const ROW_ID_FIELD_ID: i32 = 2147483540;
/// The reserved field id of `_last_updated_sequence_number`.
pub(crate) const LAST_UPDATED_FIELD_ID: i32 = 2147483539;

/// The lineage columns' names, which a v3 table's own columns cannot take (readers
/// could not add the lineage columns beside them).
const LINEAGE_NAMES: [&str; 2] = ["_row_id", "_last_updated_sequence_number"];

/// The first top-level column of `schema` named as a lineage column.
pub fn reserved_column(schema: &Schema) -> Option<&str> {
    let fields = schema.as_struct().fields();
    let named = |f: &&Arc<NestedField>| LINEAGE_NAMES.contains(&f.name.as_str());
    fields.iter().find(named).map(|f| f.name.as_str())
}

/// `schema` with the two lineage columns after its own (optional longs: a null is
/// inherited).
pub fn with_lineage_columns(schema: &Schema) -> Result<SchemaRef> {
    if let Some(name) = reserved_column(schema) {
        return Err(crate::error::Error::config(format!(
            "the table has a column named `{name}`, a name Iceberg v3 reserves for row \
             lineage: copy-on-write cannot keep the rows' lineage beside it (rename the \
             column, or use merge-on-read)"
        )));
    }
    let mut fields: Vec<_> = schema.as_struct().fields().to_vec();
    let long = || Type::Primitive(PrimitiveType::Long);
    fields.push(Arc::new(NestedField::optional(
        ROW_ID_FIELD_ID,
        "_row_id",
        long(),
    )));
    fields.push(Arc::new(NestedField::optional(
        LAST_UPDATED_FIELD_ID,
        "_last_updated_sequence_number",
        long(),
    )));
    let schema = Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_identifier_field_ids(schema.identifier_field_ids())
        .with_fields(fields)
        .build()?;
    Ok(Arc::new(schema))
}
