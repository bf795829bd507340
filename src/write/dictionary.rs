//! Which columns of a commit group get a dictionary.
//!
//! arrow-rs's Parquet writer dictionary-encodes every column until the dictionary
//! reaches its page limit (1 MiB by default), then falls back for the rest of the
//! chunk. For a column of distinct values (ids, uuids, payloads, timestamps) that first
//! stretch costs a dictionary page as large as the values it encodes, the interning of
//! each value (hashing, and about 2 MiB of interner per column while a file is written),
//! and the decompressing of that page by every reader and by each copy-on-write splice.
//! Parquet's Java writer avoids it by checking at its first page whether the dictionary
//! pays, and dropping it when not; floe decides the same way before a group's files are
//! opened, from the group's own values (a group's rows become one file per partition),
//! and for a copy-on-write rewrite, which streams, from the first rows it keeps.
//!
//! A column without a dictionary is written PLAIN (unless `parquet.string_encoding`
//! says otherwise), as the Java writer's version-1 files are, not in the delta encodings
//! a version-2 writer falls back to: readers took those late (Iceberg's vectorized Java
//! reader decodes DELTA_BINARY_PACKED since 2025 and DELTA_BYTE_ARRAY since 2026).

use std::collections::HashSet;
use std::hash::BuildHasher;

use foldhash::fast::FixedState;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use parquet::basic::Encoding;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

/// Most values looked at per column: a group larger than this is sampled at a stride.
const SAMPLE_VALUES: usize = 16_384;

/// Fewer non-null values than this say too little: the writer's default stands.
const MIN_SAMPLE_VALUES: usize = 64;

/// `properties` with the dictionary turned off (and PLAIN chosen, where no encoding is
/// set) for each top-level column of `batches` whose values would not shrink as a
/// dictionary: the distinct values plus an index per value take at least the bytes of
/// the values themselves. Columns the writer never dictionary-encodes (booleans), nested
/// ones, and columns whose dictionary is already off keep the writer's setting.
pub fn without_needless_dictionaries(
    properties: &WriterProperties,
    batches: &[RecordBatch],
) -> WriterProperties {
    let Some(first) = batches.first() else {
        return properties.clone();
    };
    // A group's batches share the table's current schema; any other is not sampled.
    let sampled: Vec<&RecordBatch> = batches
        .iter()
        .filter(|b| b.schema_ref() == first.schema_ref())
        .collect();
    let rows: usize = sampled.iter().map(|b| b.num_rows()).sum();
    let stride = rows.div_ceil(SAMPLE_VALUES).max(1);
    let mut builder = None;
    for (c, field) in first.schema().fields().iter().enumerate() {
        let path = ColumnPath::new(vec![field.name().clone()]);
        if field.data_type().is_nested() || !properties.dictionary_enabled(&path) {
            continue;
        }
        let columns = sampled.iter().map(|b| b.column(c));
        if dictionary_pays(columns, stride, rows.div_ceil(stride)) == Some(false) {
            let mut b = builder.unwrap_or_else(|| properties.clone().into_builder());
            if properties.encoding(&path).is_none() {
                b = b.set_column_encoding(path.clone(), Encoding::PLAIN);
            }
            builder = Some(b.set_column_dictionary_enabled(path, false));
        }
    }
    builder.map_or_else(|| properties.clone(), |b| b.build())
}

/// What the sampled values of a column add up to.
#[derive(Default)]
struct Sample {
    values: usize,
    /// Their bytes as PLAIN stores them.
    value_bytes: usize,
    /// The bytes of the distinct ones: a dictionary page's.
    dictionary_bytes: usize,
    /// Digests of the distinct values seen.
    seen: HashSet<u64, FixedState>,
}

impl Sample {
    fn add(&mut self, digest: u64, size: usize) {
        self.values += 1;
        self.value_bytes += size;
        if self.seen.insert(digest) {
            self.dictionary_bytes += size;
        }
    }

    /// Whether a dictionary would shrink the sampled values; `None` when too few.
    fn dictionary_pays(&self) -> Option<bool> {
        if self.values < MIN_SAMPLE_VALUES {
            return None;
        }
        let index_bits = usize::BITS - self.seen.len().saturating_sub(1).leading_zeros();
        let index_bytes = (self.values * index_bits as usize).div_ceil(8);
        Some(self.dictionary_bytes + index_bytes < self.value_bytes)
    }
}

/// Whether a dictionary would shrink every `stride`-th value of `columns` (one column
/// of the group, batch by batch); `None` for a type not judged (booleans, whose
/// dictionary the writer never uses, and types without a flat value) or too few values.
/// (`values`: about how many that is.)
fn dictionary_pays<'a>(
    columns: impl Iterator<Item = &'a ArrayRef>,
    stride: usize,
    values: usize,
) -> Option<bool> {
    let mut sample = Sample {
        // Sized once: a column of distinct values grew it through every rehash.
        seen: HashSet::with_capacity_and_hasher(values, FixedState::default()),
        ..Sample::default()
    };
    let mut next = 0usize;
    for column in columns {
        let at = (next..column.len()).step_by(stride);
        next = (next + column.len().saturating_sub(next).div_ceil(stride) * stride)
            .saturating_sub(column.len());
        add_values(column, at.filter(|&i| column.is_valid(i)), &mut sample)?;
    }
    sample.dictionary_pays()
}

/// Adds values `at` (not null) of `column` to `sample`, each by a digest and the bytes
/// PLAIN takes for it; `None` for types not judged. Long byte arrays are digested by
/// their length and ends: values told apart by neither count as one, which errs
/// towards keeping the dictionary.
fn add_values(
    column: &ArrayRef,
    at: impl Iterator<Item = usize>,
    sample: &mut Sample,
) -> Option<()> {
    let mut add_bytes = |value: &[u8], length_prefix: usize| {
        sample.add(digest_of_bytes(value), length_prefix + value.len())
    };
    match column.data_type() {
        DataType::Boolean | DataType::Null => return None,
        DataType::Utf8 => {
            at.for_each(|i| add_bytes(column.as_string::<i32>().value(i).as_bytes(), 4))
        }
        DataType::LargeUtf8 => {
            at.for_each(|i| add_bytes(column.as_string::<i64>().value(i).as_bytes(), 4))
        }
        DataType::Utf8View => {
            at.for_each(|i| add_bytes(column.as_string_view().value(i).as_bytes(), 4))
        }
        DataType::Binary => at.for_each(|i| add_bytes(column.as_binary::<i32>().value(i), 4)),
        DataType::LargeBinary => at.for_each(|i| add_bytes(column.as_binary::<i64>().value(i), 4)),
        DataType::BinaryView => at.for_each(|i| add_bytes(column.as_binary_view().value(i), 4)),
        DataType::FixedSizeBinary(_) => {
            at.for_each(|i| add_bytes(column.as_fixed_size_binary().value(i), 0))
        }
        other => {
            let width = other.primitive_width()?;
            let data = column.to_data();
            let values = data.buffers().first()?.as_slice();
            for i in at {
                let start = (data.offset() + i) * width;
                let value = values.get(start..start + width)?;
                sample.add(digest_of_primitive(value), width);
            }
        }
    }
    Some(())
}

/// A primitive value's digest: its bits when they fit in one (distinct values stay
/// distinct), else a hash of them.
fn digest_of_primitive(value: &[u8]) -> u64 {
    match <[u8; 8]>::try_from(value) {
        Ok(bytes) => u64::from_le_bytes(bytes),
        Err(_) if value.len() < 8 => {
            let mut bytes = [0u8; 8];
            bytes[..value.len()].copy_from_slice(value);
            u64::from_le_bytes(bytes)
        }
        Err(_) => DIGEST.hash_one(value),
    }
}

/// The hash of digests: fixed, so a group's choice does not vary from run to run.
const DIGEST: FixedState = FixedState::with_seed(0x5eed);

/// A digest of a byte array value: its length and, past 32 bytes, its two ends.
fn digest_of_bytes(value: &[u8]) -> u64 {
    const ENDS: usize = 16;
    match value.len() <= 2 * ENDS {
        true => DIGEST.hash_one(value),
        false => DIGEST.hash_one((value.len(), &value[..ENDS], &value[value.len() - ENDS..])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{BooleanArray, Int64Array, StringArray};
    use arrow_schema::{Field, Schema};
    use std::sync::Arc;

    fn batch(ids: Vec<i64>, names: Vec<Option<String>>) -> RecordBatch {
        let n = ids.len();
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("flag", DataType::Boolean, false),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(names)),
                Arc::new(BooleanArray::from(vec![true; n])),
            ],
        )
        .unwrap()
    }

    fn dictionary_of(properties: &WriterProperties, column: &str) -> bool {
        properties.dictionary_enabled(&ColumnPath::new(vec![column.to_string()]))
    }

    #[test]
    fn distinct_values_lose_the_dictionary_and_repeated_ones_keep_it() {
        let ids: Vec<i64> = (0..2000).collect();
        let names = (0..2000).map(|i| Some(format!("user-{}", i % 7))).collect();
        let chosen =
            without_needless_dictionaries(&WriterProperties::default(), &[batch(ids, names)]);
        assert!(!dictionary_of(&chosen, "id"), "distinct longs");
        assert!(dictionary_of(&chosen, "name"), "seven names");
        assert!(dictionary_of(&chosen, "flag"), "booleans are left alone");
        let id = ColumnPath::new(vec!["id".to_string()]);
        assert_eq!(
            chosen.encoding(&id),
            Some(Encoding::PLAIN),
            "not a delta encoding"
        );
    }

    #[test]
    fn an_encoding_chosen_in_the_config_stays() {
        let path = ColumnPath::new(vec!["name".to_string()]);
        let configured = WriterProperties::builder()
            .set_column_encoding(path.clone(), Encoding::DELTA_LENGTH_BYTE_ARRAY)
            .build();
        let names = (0..2000).map(|i| Some(format!("{i:040}"))).collect();
        let chosen =
            without_needless_dictionaries(&configured, &[batch((0..2000).collect(), names)]);
        assert!(!dictionary_of(&chosen, "name"));
        assert_eq!(
            chosen.encoding(&path),
            Some(Encoding::DELTA_LENGTH_BYTE_ARRAY)
        );
    }

    #[test]
    fn long_values_differing_only_inside_count_as_one() {
        // Equal ends and lengths: taken for one value, so the dictionary stays.
        let names = (0..2000)
            .map(|i| Some(format!("{}{i:08}{}", "a".repeat(20), "z".repeat(20))))
            .collect();
        let chosen = without_needless_dictionaries(
            &WriterProperties::default(),
            &[batch((0..2000).collect(), names)],
        );
        assert!(dictionary_of(&chosen, "name"));
    }

    #[test]
    fn the_sample_spans_batches_at_a_stride_and_skips_nulls() {
        // 40 rows per batch, 3,000 batches: sampled every 8th row across batch ends.
        let batches: Vec<RecordBatch> = (0..3000)
            .map(|b| {
                let ids = (0..40).map(|i| b * 40 + i).collect();
                let names = (0..40)
                    .map(|i| (i % 2 == 0).then(|| format!("{:032x}", (b * 40 + i) * 7919)))
                    .collect();
                batch(ids, names)
            })
            .collect();
        let chosen = without_needless_dictionaries(&WriterProperties::default(), &batches);
        assert!(
            !dictionary_of(&chosen, "name"),
            "distinct strings, half null"
        );
        assert!(!dictionary_of(&chosen, "id"));
        // A column of 2,000 values repeated across 120,000 rows keeps its dictionary,
        // though a sample of its first 1,024 rows would see them all distinct.
        let batches: Vec<RecordBatch> = (0..3000)
            .map(|b| {
                let ids = (0..40).map(|i| (b * 40 + i) % 2000).collect();
                batch(ids, vec![None; 40])
            })
            .collect();
        let chosen = without_needless_dictionaries(&WriterProperties::default(), &batches);
        assert!(dictionary_of(&chosen, "id"), "2,000 ids over 120,000 rows");
    }

    #[test]
    fn a_small_group_or_a_dictionary_turned_off_is_left_as_it_is() {
        let few = batch(
            (0..10).collect(),
            (0..10).map(|i| Some(i.to_string())).collect(),
        );
        let chosen = without_needless_dictionaries(&WriterProperties::default(), &[few]);
        assert!(dictionary_of(&chosen, "id") && dictionary_of(&chosen, "name"));

        let off = WriterProperties::builder()
            .set_dictionary_enabled(false)
            .build();
        let names = (0..2000).map(|i| Some(format!("user-{}", i % 7))).collect();
        let chosen = without_needless_dictionaries(&off, &[batch((0..2000).collect(), names)]);
        assert!(!dictionary_of(&chosen, "name"), "not turned back on");
    }
}
