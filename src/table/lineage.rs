//! First row ids (Iceberg v3 row lineage): a data file's rows have the ids
//! `first_row_id + position`. A manifest entry may carry the file's first row id; one
//! that does not inherits it from its manifest's list entry: the manifest's
//! `first_row_id` plus the record counts of the live data entries before it that
//! inherit too (DELETED entries take no ids). iceberg-rust 0.10.1 does not apply this
//! when it reads a manifest, so floe does, where it needs the ids: to keep rows' ids when
//! it rewrites their files, and to write a manifest's entries elsewhere (a rewritten or
//! merged manifest gets a new first row id, so its entries carry their own).
//!
//! Entries copied with another value (a first row id, partition values of the kinds the
//! spec's types have now) are built here, from one copy of every field.

use std::borrow::Cow;

use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, ManifestFile, ManifestStatus, PartitionSpec, Schema,
};

use crate::error::{Error, Result};
use crate::write::in_partition_type;

/// The first row id of each of a manifest's entries, in order, given the manifest's
/// list entry `listed`: the entry's own, else inherited; `None` for delete files, for
/// DELETED entries that carry none, and for every entry of a manifest listed without a
/// first row id (written before the table had row lineage).
pub fn first_row_ids<'a>(
    listed: &ManifestFile,
    entries: impl IntoIterator<Item = (ManifestStatus, &'a DataFile)>,
) -> Vec<Option<i64>> {
    let mut next = listed.first_row_id.map(|id| id as i64);
    entries
        .into_iter()
        .map(|(status, file)| {
            if file.content_type() != DataContentType::Data || file.first_row_id().is_some() {
                return file.first_row_id();
            }
            match (status, next.as_mut()) {
                (ManifestStatus::Deleted, _) | (_, None) => None,
                (_, Some(next)) => {
                    let id = *next;
                    *next += file.record_count() as i64;
                    Some(id)
                }
            }
        })
        .collect()
}

/// `file` carrying `first_row_id` in its entry, under partition spec `spec_id`.
pub fn with_first_row_id(file: &DataFile, first_row_id: i64, spec_id: i32) -> Result<DataFile> {
    let mut builder = copy_of(file);
    builder
        .partition_spec_id(spec_id)
        .first_row_id(Some(first_row_id));
    built(builder)
}

/// `file` with its partition values of the kinds `spec`'s types have under `schema`
/// now (see [`in_partition_type`]): itself when they are, else a copy.
pub fn in_current_type<'a>(
    file: &'a DataFile,
    spec: &PartitionSpec,
    schema: &Schema,
) -> Result<Cow<'a, DataFile>> {
    let partition = in_partition_type(spec, schema, file.partition());
    if &partition == file.partition() {
        return Ok(Cow::Borrowed(file));
    }
    let mut builder = copy_of(file);
    builder
        .partition(partition)
        .partition_spec_id(spec.spec_id());
    built(builder).map(Cow::Owned)
}

/// A builder holding every field of `file` but its partition spec id (which iceberg-rust
/// does not give out).
fn copy_of(file: &DataFile) -> DataFileBuilder {
    let mut builder = DataFileBuilder::default();
    builder
        .content(file.content_type())
        .file_path(file.file_path().to_string())
        .file_format(file.file_format())
        .partition(file.partition().clone())
        .record_count(file.record_count())
        .file_size_in_bytes(file.file_size_in_bytes())
        .column_sizes(file.column_sizes().clone())
        .value_counts(file.value_counts().clone())
        .null_value_counts(file.null_value_counts().clone())
        .nan_value_counts(file.nan_value_counts().clone())
        .lower_bounds(file.lower_bounds().clone())
        .upper_bounds(file.upper_bounds().clone())
        .key_metadata(file.key_metadata().map(<[u8]>::to_vec))
        .split_offsets(file.split_offsets().map(<[i64]>::to_vec))
        .equality_ids(file.equality_ids())
        .first_row_id(file.first_row_id())
        .referenced_data_file(file.referenced_data_file())
        .content_offset(file.content_offset())
        .content_size_in_bytes(file.content_size_in_bytes());
    if let Some(id) = file.sort_order_id() {
        builder.sort_order_id(id);
    }
    builder
}

fn built(builder: DataFileBuilder) -> Result<DataFile> {
    builder
        .build()
        .map_err(|e| Error::internal(format!("data file entry: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::DataFileFormat;

    fn file(rows: u64, first_row_id: Option<i64>) -> DataFile {
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(format!("f{rows}"))
            .file_format(DataFileFormat::Parquet)
            .record_count(rows)
            .file_size_in_bytes(1)
            .first_row_id(first_row_id)
            .build()
            .unwrap()
    }

    #[test]
    fn live_entries_without_ids_inherit_in_order_and_deleted_ones_take_none() {
        let mut listed = crate::table::merge::tests::manifest(1);
        listed.first_row_id = Some(100);
        let files = [
            file(10, None),
            file(5, None),
            file(7, Some(3)),
            file(4, None),
        ];
        let statuses = [
            ManifestStatus::Added,
            ManifestStatus::Deleted,
            ManifestStatus::Existing,
            ManifestStatus::Existing,
        ];
        let ids = first_row_ids(&listed, statuses.into_iter().zip(&files));
        assert_eq!(ids, [Some(100), None, Some(3), Some(110)]);
        listed.first_row_id = None;
        let ids = first_row_ids(&listed, statuses.into_iter().zip(&files));
        assert_eq!(ids, [None, None, Some(3), None]);
    }

    #[test]
    fn a_copy_with_a_first_row_id_keeps_everything_else() {
        let original = file(10, None);
        let copy = with_first_row_id(&original, 42, 0).unwrap();
        assert_eq!(copy.first_row_id(), Some(42));
        assert_eq!(
            with_first_row_id(&copy, 0, 0).unwrap().first_row_id(),
            Some(0)
        );
        assert_eq!(
            (copy.file_path(), copy.record_count(), copy.content_type()),
            (
                original.file_path(),
                original.record_count(),
                original.content_type()
            )
        );
    }
}
