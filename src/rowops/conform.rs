//! Rows read from an older data file, in the table's current shape.
//!
//! A file written before the schema evolved lacks the columns added since (at any
//! depth), may hold narrower types (int before a widening to long) and required
//! fields since relaxed. Copy-on-write rewrites such files under the current schema, so
//! their rows are matched to it by Parquet field id, never by name or position (a field
//! dropped and re-added under the same name is another column).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, ListArray, MapArray, RecordBatch, StructArray, new_null_array};
use arrow_schema::{DataType, Field, Fields, SchemaRef};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

use crate::error::{Error, Result};

/// `batch` (as read from a file) in `target`'s shape: fields matched by field id at every
/// depth, fields the file lacks (added later) null, primitive types cast where they
/// were widened since.
pub fn conform(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    let columns = conform_fields(
        batch.schema_ref().fields(),
        batch.columns(),
        target.fields(),
        batch.num_rows(),
    )?;
    RecordBatch::try_new(target.clone(), columns)
        .map_err(|e| Error::internal(format!("a data file does not fit the table schema: {e}")))
}

fn field_id(field: &Field) -> Option<&str> {
    field
        .metadata()
        .get(PARQUET_FIELD_ID_META_KEY)
        .map(String::as_str)
}

/// The children of a struct (or a batch) for `target`'s fields.
fn conform_fields(
    fields: &Fields,
    columns: &[ArrayRef],
    target: &Fields,
    rows: usize,
) -> Result<Vec<ArrayRef>> {
    let by_id: HashMap<&str, usize> = fields
        .iter()
        .enumerate()
        .filter_map(|(i, f)| field_id(f).map(|id| (id, i)))
        .collect();
    target
        .iter()
        .map(|field| {
            let id = field_id(field).ok_or_else(|| {
                Error::internal(format!(
                    "the table's column {} has no field id",
                    field.name()
                ))
            })?;
            match by_id.get(id) {
                Some(&i) => conform_column(&columns[i], field),
                None if field.is_nullable() => Ok(new_null_array(field.data_type(), rows)),
                None => Err(Error::config(format!(
                    "a data file lacks the required column {}; copy-on-write cannot rewrite it",
                    field.name()
                ))),
            }
        })
        .collect()
}

fn conform_column(column: &ArrayRef, target: &Field) -> Result<ArrayRef> {
    if column.data_type() == target.data_type() {
        return Ok(column.clone());
    }
    let arrow =
        |e: arrow_schema::ArrowError| Error::internal(format!("column {}: {e}", target.name()));
    Ok(match (column.data_type(), target.data_type()) {
        (DataType::Struct(_), DataType::Struct(fields)) => {
            let s = column.as_struct();
            let children = conform_fields(s.fields(), s.columns(), fields, s.len())?;
            Arc::new(
                StructArray::try_new(fields.clone(), children, s.nulls().cloned())
                    .map_err(arrow)?,
            )
        }
        (DataType::List(_), DataType::List(element)) => {
            let l = column.as_list::<i32>();
            let values = conform_column(l.values(), element)?;
            Arc::new(
                ListArray::try_new(
                    element.clone(),
                    l.offsets().clone(),
                    values,
                    l.nulls().cloned(),
                )
                .map_err(arrow)?,
            )
        }
        (DataType::Map(_, _), DataType::Map(entries, sorted)) => {
            let m = column.as_map();
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(Error::internal("a map's entries are not a struct"));
            };
            let source = m.entries();
            let children = conform_fields(source.fields(), source.columns(), kv, source.len())?;
            let entries_array = StructArray::try_new(kv.clone(), children, None).map_err(arrow)?;
            Arc::new(
                MapArray::try_new(
                    entries.clone(),
                    m.offsets().clone(),
                    entries_array,
                    m.nulls().cloned(),
                    *sorted,
                )
                .map_err(arrow)?,
            )
        }
        (from, to) if from.is_nested() || to.is_nested() => {
            return Err(Error::config(format!(
                "copy-on-write cannot rewrite a data file whose column {} is {from} where the \
                 table has {to}; compact the table first",
                target.name()
            )));
        }
        _ => arrow_cast::cast(column, target.data_type()).map_err(arrow)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, StringArray};
    use arrow_schema::Schema;

    fn with_id(field: Field, id: i32) -> Field {
        field.with_metadata(HashMap::from([(
            PARQUET_FIELD_ID_META_KEY.to_string(),
            id.to_string(),
        )]))
    }

    #[test]
    fn older_rows_gain_nested_fields_and_wider_types_by_field_id() {
        // The file: id int, s struct<a string>, l list<struct<a string>>.
        let a = with_id(Field::new("a", DataType::Utf8, false), 3);
        let s_old = Fields::from(vec![a.clone()]);
        let element_old = with_id(
            Field::new("element", DataType::Struct(s_old.clone()), false),
            5,
        );
        let file_schema = Arc::new(Schema::new(vec![
            with_id(Field::new("id", DataType::Int32, false), 1),
            with_id(Field::new("s", DataType::Struct(s_old.clone()), true), 2),
            with_id(
                Field::new("l", DataType::List(Arc::new(element_old.clone())), true),
                4,
            ),
        ]));
        let inner = || -> ArrayRef {
            Arc::new(StructArray::new(
                s_old.clone(),
                vec![Arc::new(StringArray::from(vec!["x", "y"]))],
                None,
            ))
        };
        let list = ListArray::new(
            Arc::new(element_old),
            arrow_buffer::OffsetBuffer::from_lengths([1, 1]),
            inner(),
            None,
        );
        let batch = RecordBatch::try_new(
            file_schema,
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                inner(),
                Arc::new(list),
            ],
        )
        .unwrap();
        // The table now: id long, s struct<a string (now optional), b long>, same in l.
        let s_new = Fields::from(vec![
            with_id(Field::new("a", DataType::Utf8, true), 3),
            with_id(Field::new("b", DataType::Int64, true), 6),
        ]);
        let element_new = with_id(
            Field::new("element", DataType::Struct(s_new.clone()), true),
            5,
        );
        let target = Arc::new(Schema::new(vec![
            with_id(Field::new("id", DataType::Int64, false), 1),
            with_id(Field::new("s", DataType::Struct(s_new), true), 2),
            with_id(
                Field::new("l", DataType::List(Arc::new(element_new)), true),
                4,
            ),
            with_id(Field::new("new", DataType::Utf8, true), 7),
        ]));
        let out = conform(&batch, &target).unwrap();
        assert_eq!(out.schema(), target);
        let s = out.column(1).as_struct();
        assert_eq!(s.column(0).as_string::<i32>().value(1), "y");
        assert_eq!(s.column(1).null_count(), 2);
        let l = out.column(2).as_list::<i32>();
        assert_eq!(l.values().as_struct().column(1).null_count(), 2);
        assert_eq!(out.column(3).null_count(), 2);
    }
}
