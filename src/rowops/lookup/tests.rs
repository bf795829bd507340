//! The key index of a written file against the read path's own test (encoded key rows
//! compared for equality), over random files: duplicate keys, null keys, every exact
//! key type, hashed keys, and a long key in a file still written as int.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, Date32Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use parquet::arrow::ArrowWriter;

use super::*;

/// A small xorshift: the tests need repeatable draws, not good ones.
struct Draws(u64);

impl Draws {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn key_columns(types: &[PrimitiveType]) -> KeyColumns {
    let fields = types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            NestedField::optional(i as i32 + 1, format!("k{i}"), Type::Primitive(t.clone())).into()
        })
        .collect::<Vec<_>>();
    let schema = Schema::builder().with_fields(fields).build().unwrap();
    let names: Vec<String> = (0..types.len()).map(|i| format!("k{i}")).collect();
    KeyColumns::for_table(&schema, &names, true)
        .unwrap()
        .unwrap()
}

/// A column of `values` (`None` a null) of `t`, drawn from a small domain.
fn column(t: &DataType, values: &[Option<i64>]) -> ArrayRef {
    match t {
        DataType::Int32 => Arc::new(Int32Array::from_iter(
            values.iter().map(|v| v.map(|v| v as i32)),
        )),
        DataType::Int64 => Arc::new(Int64Array::from_iter(values.iter().copied())),
        DataType::Date32 => Arc::new(Date32Array::from_iter(
            values.iter().map(|v| v.map(|v| v as i32)),
        )),
        DataType::Timestamp(_, tz) => Arc::new(
            TimestampMicrosecondArray::from_iter(values.iter().copied())
                .with_timezone_opt(tz.clone()),
        ),
        DataType::Utf8 => Arc::new(StringArray::from_iter(
            values.iter().map(|v| v.map(|v| format!("key-{v}"))),
        )),
        other => panic!("no test column of {other}"),
    }
}

/// A batch of `rows` in `schema`, every column drawn from the same values so that
/// composite keys repeat too.
fn batch(schema: &Arc<ArrowSchema>, draws: &mut Draws, rows: usize, nulls: bool) -> RecordBatch {
    let values: Vec<Option<i64>> = (0..rows)
        .map(|_| match nulls && draws.below(10) == 0 {
            true => None,
            false => Some(draws.below(4000) as i64 - 2000),
        })
        .collect();
    let columns = schema
        .fields()
        .iter()
        .map(|f| column(f.data_type(), &values))
        .collect();
    RecordBatch::try_new(schema.clone(), columns).unwrap()
}

fn parquet_bytes(batch: &RecordBatch) -> bytes::Bytes {
    let mut out = Vec::new();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(64))
        .build();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    out.into()
}

/// What the read path finds: rows whose encoded key equals a touched key's.
fn positions_by_rows(keys: &KeyColumns, file: &RecordBatch, touched: &RecordBatch) -> Vec<u64> {
    let converter = keys.converter().unwrap();
    let file = conform(file, &keys.arrow).unwrap();
    let touched_rows = keys.rows(&converter, touched).unwrap();
    let wanted: HashSet<Row<'_>> = touched_rows.iter().collect();
    let rows = keys.rows(&converter, &file).unwrap();
    let found = rows.iter().enumerate().filter(|(_, r)| wanted.contains(r));
    found.map(|(i, _)| i as u64).collect()
}

/// The file's schema: the key schema, with `written_as` types where given.
fn file_schema(keys: &KeyColumns, written_as: Option<&DataType>) -> Arc<ArrowSchema> {
    let fields: Vec<Field> = keys
        .arrow
        .fields()
        .iter()
        .map(|f| match written_as {
            Some(t) => f.as_ref().clone().with_data_type(t.clone()),
            None => f.as_ref().clone(),
        })
        .collect();
    Arc::new(ArrowSchema::new(fields))
}

#[test]
fn an_index_of_written_bytes_finds_the_rows_the_read_path_finds() {
    let utc = DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("+00:00".into()));
    let cases: Vec<(Vec<PrimitiveType>, Option<DataType>)> = vec![
        (vec![PrimitiveType::Int], None),
        (vec![PrimitiveType::Long], None),
        (vec![PrimitiveType::Long], Some(DataType::Int32)),
        (vec![PrimitiveType::Date], None),
        (vec![PrimitiveType::Timestamp], None),
        (vec![PrimitiveType::Timestamptz], Some(utc)),
        (vec![PrimitiveType::String], None),
        (vec![PrimitiveType::Long, PrimitiveType::String], None),
    ];
    for (types, written_as) in cases {
        let keys = key_columns(&types);
        let converter = keys.converter().unwrap();
        for seed in 1..=25u64 {
            let mut draws = Draws(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let rows = draws.below(3000) as usize;
            let file = batch(
                &file_schema(&keys, written_as.as_ref()),
                &mut draws,
                rows,
                true,
            );
            let touched_rows = 1 + draws.below(400) as usize;
            let touched = batch(&keys.arrow, &mut draws, touched_rows, false);
            let want = positions_by_rows(&keys, &file, &touched);
            let index = index_written(&keys, parquet_bytes(&file)).unwrap().unwrap();
            let encoded = keys.rows(&converter, &touched).unwrap();
            let fingerprints = fingerprints::of_touched(&keys, &touched, &encoded);
            let case = format!("{types:?} as {written_as:?}, seed {seed}");
            assert_eq!(index.exact(), fingerprints::is_exact(&keys), "{case}");
            if index.exact() {
                assert_eq!(index.positions_of(&fingerprints), want, "{case}");
            } else if !want.is_empty() {
                assert!(index.holds_any(&fingerprints), "{case}");
            }
        }
    }
}

#[test]
fn a_file_without_the_key_columns_is_not_indexed() {
    let keys = key_columns(&[PrimitiveType::Long]);
    let other = Field::new("other", DataType::Int64, true).with_metadata(
        [(
            parquet::arrow::PARQUET_FIELD_ID_META_KEY.to_string(),
            "9".to_string(),
        )]
        .into(),
    );
    let schema = Arc::new(ArrowSchema::new(vec![other]));
    let file = RecordBatch::try_new(schema, vec![column(&DataType::Int64, &[Some(1)])]).unwrap();
    assert!(
        index_written(&keys, parquet_bytes(&file))
            .unwrap()
            .is_none()
    );
}
