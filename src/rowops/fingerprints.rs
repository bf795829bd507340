//! Key fingerprints for the key indexes (see [`crate::table::key_index`]): the key's
//! value when the key is one integer-like column (exact: two keys share a fingerprint
//! only if they are equal), else a hash of the key's encoded row.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Int32Type, Int64Type, Time64MicrosecondType, TimestampMicrosecondType,
    TimestampNanosecondType,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_row::{Row, RowConverter, Rows};
use arrow_schema::{DataType, TimeUnit};

use super::keys::KeyColumns;
use crate::error::Result;
use crate::table::key_index::KeySignature;

/// What the fingerprints of `keys` are computed for.
pub fn signature(keys: &KeyColumns) -> KeySignature {
    KeySignature(
        keys.field_ids
            .iter()
            .zip(keys.arrow.fields())
            .map(|(&id, f)| (id, f.data_type().clone()))
            .collect(),
    )
}

/// Whether the fingerprints of `keys` are the keys themselves: one column of a type of
/// at most 64 bits that compares as an integer.
pub fn is_exact(keys: &KeyColumns) -> bool {
    let fields = keys.arrow.fields();
    fields.len() == 1 && exact_type(fields[0].data_type())
}

fn exact_type(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int32
            | DataType::Int64
            | DataType::Date32
            | DataType::Time64(TimeUnit::Microsecond)
            | DataType::Timestamp(TimeUnit::Microsecond | TimeUnit::Nanosecond, _)
    )
}

/// The fingerprint of each row's key of `batch` (in the key schema), `None` where a key
/// column is null (such a row matches no upsert or delete, whose keys are never null).
pub fn of_batch(
    keys: &KeyColumns,
    converter: &RowConverter,
    batch: &RecordBatch,
) -> Result<Vec<Option<u64>>> {
    if is_exact(keys)
        && let Some(values) = values_of(batch.column(0))
    {
        return Ok(values);
    }
    Ok(hashed(batch, &keys.rows(converter, batch)?))
}

/// [`of_batch`] where the keys are encoded already (`rows`, of `batch`).
pub fn of_encoded(keys: &KeyColumns, batch: &RecordBatch, rows: &Rows) -> Vec<Option<u64>> {
    if is_exact(keys)
        && let Some(values) = values_of(batch.column(0))
    {
        return values;
    }
    hashed(batch, rows)
}

/// The fingerprint of each row's key of `batch` (in the key schema) when the key is its
/// own fingerprint (see [`is_exact`], which the caller checks), `None` where it is null.
pub fn values(batch: &RecordBatch) -> Option<Vec<Option<u64>>> {
    values_of(batch.column(0))
}

/// The hash of each encoded key of `batch`, `None` where a key column is null.
fn hashed(batch: &RecordBatch, rows: &Rows) -> Vec<Option<u64>> {
    let columns = batch.columns();
    rows.iter()
        .enumerate()
        .map(|(i, row)| (!columns.iter().any(|c| c.is_null(i))).then(|| hash(row)))
        .collect()
}

/// The touched keys' fingerprints, ascending, without repeats (`rows`: the keys encoded).
pub fn of_touched(keys: &KeyColumns, touched: &RecordBatch, rows: &Rows) -> Vec<u64> {
    let mut fingerprints: Vec<u64> = of_encoded(keys, touched, rows)
        .into_iter()
        .flatten()
        .collect();
    fingerprints.sort_unstable();
    fingerprints.dedup();
    fingerprints
}

/// An integer-like column's values as fingerprints (their two's-complement bits).
fn values_of(column: &ArrayRef) -> Option<Vec<Option<u64>>> {
    fn bits<I: Into<i64>>(values: impl Iterator<Item = Option<I>>) -> Vec<Option<u64>> {
        values.map(|v| v.map(|v| v.into() as u64)).collect()
    }
    Some(match column.data_type() {
        DataType::Int32 => bits(column.as_primitive::<Int32Type>().iter()),
        DataType::Int64 => bits(column.as_primitive::<Int64Type>().iter()),
        DataType::Date32 => bits(column.as_primitive::<Date32Type>().iter()),
        DataType::Time64(TimeUnit::Microsecond) => {
            bits(column.as_primitive::<Time64MicrosecondType>().iter())
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            bits(column.as_primitive::<TimestampMicrosecondType>().iter())
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            bits(column.as_primitive::<TimestampNanosecondType>().iter())
        }
        _ => return None,
    })
}

/// A key's hash: its encoded row's bytes, hashed the same way for the life of the process.
fn hash(row: Row<'_>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    row.as_ref().hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};

    use super::*;

    fn keys(columns: &[(&str, PrimitiveType)]) -> KeyColumns {
        let fields = columns
            .iter()
            .enumerate()
            .map(|(i, (name, t))| {
                NestedField::optional(i as i32 + 1, *name, Type::Primitive(t.clone())).into()
            })
            .collect::<Vec<_>>();
        let schema = Schema::builder().with_fields(fields).build().unwrap();
        let names: Vec<String> = columns.iter().map(|(n, _)| n.to_string()).collect();
        KeyColumns::for_table(&schema, &names, true)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn a_long_key_is_its_own_fingerprint_and_nulls_have_none() {
        let k = keys(&[("id", PrimitiveType::Long)]);
        assert!(is_exact(&k));
        let batch = RecordBatch::try_new(
            k.arrow.clone(),
            vec![Arc::new(Int64Array::from(vec![Some(-1), None, Some(7)]))],
        )
        .unwrap();
        let converter = k.converter().unwrap();
        let got = of_batch(&k, &converter, &batch).unwrap();
        assert_eq!(got, vec![Some(u64::MAX), None, Some(7)]);
        assert_eq!(
            of_touched(&k, &batch, &k.rows(&converter, &batch).unwrap()),
            vec![7, u64::MAX]
        );
    }

    #[test]
    fn string_and_composite_keys_are_hashed_equal_keys_alike() {
        for k in [
            keys(&[("s", PrimitiveType::String)]),
            keys(&[("s", PrimitiveType::String), ("t", PrimitiveType::String)]),
            keys(&[("id", PrimitiveType::Long), ("t", PrimitiveType::String)]),
        ] {
            assert!(!is_exact(&k));
            let columns = k
                .arrow
                .fields()
                .iter()
                .map(|f| match f.data_type() {
                    DataType::Int64 => Arc::new(Int64Array::from(vec![1, 2, 1])) as ArrayRef,
                    _ => Arc::new(StringArray::from(vec!["a", "b", "a"])) as ArrayRef,
                })
                .collect();
            let batch = RecordBatch::try_new(k.arrow.clone(), columns).unwrap();
            let got = of_batch(&k, &k.converter().unwrap(), &batch).unwrap();
            assert!(got.iter().all(Option::is_some));
            assert_eq!(got[0], got[2]);
            assert_ne!(got[0], got[1]);
        }
    }
}
