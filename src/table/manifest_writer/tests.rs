use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat, Literal, Manifest, Struct};

use super::*;

/// A v2 table partitioned by one field of each type this writer encodes, and by a
/// decimal (which it leaves to iceberg-rust) in `decimal_spec`.
fn table(version: u8) -> TableMetadata {
    let json = r#"{
      "format-version": VERSION, "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
      "location": "memory:/t", "last-sequence-number": 4, "last-updated-ms": 1700000002000,
      "last-column-id": 9, "current-schema-id": 0,
      "schemas": [{"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "name", "required": false, "type": "string"},
        {"id": 3, "name": "day", "required": false, "type": "date"},
        {"id": 4, "name": "ts", "required": false, "type": "timestamptz"},
        {"id": 5, "name": "flag", "required": false, "type": "boolean"},
        {"id": 6, "name": "score", "required": false, "type": "double"},
        {"id": 7, "name": "n", "required": false, "type": "int"},
        {"id": 8, "name": "ratio", "required": false, "type": "float"},
        {"id": 9, "name": "price", "required": false, "type": "decimal(9,2)"}]}],
      "default-spec-id": 0,
      "partition-specs": [
        {"spec-id": 0, "fields": [
          {"source-id": 2, "field-id": 1000, "name": "name", "transform": "identity"},
          {"source-id": 3, "field-id": 1001, "name": "day", "transform": "identity"},
          {"source-id": 4, "field-id": 1002, "name": "ts_hour", "transform": "hour"},
          {"source-id": 5, "field-id": 1003, "name": "flag", "transform": "identity"},
          {"source-id": 6, "field-id": 1004, "name": "score", "transform": "identity"},
          {"source-id": 7, "field-id": 1005, "name": "n_bucket", "transform": "bucket[8]"},
          {"source-id": 4, "field-id": 1006, "name": "ts", "transform": "identity"},
          {"source-id": 1, "field-id": 1007, "name": "id", "transform": "identity"},
          {"source-id": 8, "field-id": 1008, "name": "ratio", "transform": "identity"}]},
        {"spec-id": 1, "fields": [
          {"source-id": 9, "field-id": 1009, "name": "price", "transform": "identity"}]}],
      "last-partition-id": 1009, "default-sort-order-id": 0,
      "sort-orders": [{"order-id": 0, "fields": []}], "properties": {},
      "current-snapshot-id": -1, "refs": {}, "snapshots": [], "snapshot-log": [],
      "metadata-log": []
    }"#;
    let mut json = json.replace("VERSION", &version.to_string());
    if version == 3 {
        json = json.replace(
            r#""properties": {},"#,
            r#""properties": {}, "next-row-id": 0,"#,
        );
    }
    serde_json::from_str(&json).unwrap()
}

fn partition(name: Option<&str>, score: f64) -> Struct {
    Struct::from_iter([
        name.map(Literal::string),
        Some(Literal::date(19_700)),
        Some(Literal::int(473_000)),
        Some(Literal::bool(true)),
        Some(Literal::double(score)),
        None,
        Some(Literal::timestamptz(1_700_000_000_000_000)),
        Some(Literal::long(-42)),
        Some(Literal::float(0.5)),
    ])
}

fn file(path: &str, content: DataContentType, partition: Struct) -> DataFile {
    let mut builder = DataFileBuilder::default();
    builder
        .content(content)
        .file_path(path.to_string())
        .file_format(DataFileFormat::Parquet)
        .partition(partition)
        .partition_spec_id(0)
        .record_count(17)
        .file_size_in_bytes(4_096)
        .column_sizes(HashMap::from([(1, 100), (2, 200), (3, 300)]))
        .value_counts(HashMap::from([(1, 17), (2, 17)]))
        .null_value_counts(HashMap::from([(2, 3)]))
        .nan_value_counts(HashMap::from([(6, 1)]))
        .lower_bounds(HashMap::from([
            (1, Datum::long(-5)),
            (2, Datum::string("a")),
        ]))
        .upper_bounds(HashMap::from([
            (1, Datum::long(90)),
            (2, Datum::string("zz")),
        ]))
        .split_offsets(Some(vec![4, 2_048]));
    match content {
        DataContentType::EqualityDeletes => builder.equality_ids(Some(vec![1, 2])),
        // Bounds of the reserved `file_path` and `pos` fields, as the Parquet writer
        // records them.
        DataContentType::PositionDeletes => builder
            .referenced_data_file(Some("memory:/t/data/a.parquet".into()))
            .lower_bounds(HashMap::from([
                (2_147_483_546, Datum::string("memory:/t/data/a.parquet")),
                (2_147_483_545, Datum::long(3)),
            ]))
            .upper_bounds(HashMap::from([
                (2_147_483_546, Datum::string("memory:/t/data/a.parquet")),
                (2_147_483_545, Datum::long(11)),
            ]))
            .split_offsets(None),
        DataContentType::Data => builder.key_metadata(Some(vec![1, 2, 3])).sort_order_id(0),
    };
    builder.build().unwrap()
}

/// An entry as the commit path gives it: ADDED and DELETED by snapshot 9 (the one
/// written), EXISTING from snapshot 7.
fn entry(status: ManifestStatus, sequence: Option<i64>, data_file: DataFile) -> WrittenEntry {
    WrittenEntry {
        status,
        snapshot_id: Some(match status {
            ManifestStatus::Existing => 7,
            _ => 9,
        }),
        sequence_number: sequence,
        file_sequence_number: sequence,
        data_file,
    }
}

/// An entry of `file` at `path` with partition values from `partition`.
fn sample(
    status: ManifestStatus,
    sequence: Option<i64>,
    path: &str,
    content: DataContentType,
    (name, score): (Option<&str>, f64),
) -> WrittenEntry {
    entry(
        status,
        sequence,
        file(path, content, partition(name, score)),
    )
}

/// Writes `entries` with this writer and with iceberg-rust's, and checks that both
/// read back alike and give the same manifest list entry.
async fn same_as_iceberg(
    metadata: &TableMetadata,
    content: ManifestContentType,
    spec_id: i32,
    entries: &[WrittenEntry],
) {
    let io = FileIO::new_with_memory();
    let headers = ManifestHeaders::default();
    let spec = metadata.partition_spec_by_id(spec_id).unwrap();
    let ours = write_entries(
        metadata,
        (&io, &headers),
        "memory:/t/ours.avro",
        9,
        (content, spec),
        entries,
    )
    .await
    .unwrap();
    let theirs = write_with_iceberg(
        metadata,
        &io,
        "memory:/t/theirs.avro",
        9,
        (content, spec),
        entries,
    )
    .await
    .unwrap();
    let read = |path: &'static str| {
        let io = io.clone();
        async move { Manifest::parse_avro(&io.new_input(path).unwrap().read().await.unwrap()).unwrap() }
    };
    let (ours_read, theirs_read) = (
        read("memory:/t/ours.avro").await,
        read("memory:/t/theirs.avro").await,
    );
    assert_eq!(ours_read.metadata(), theirs_read.metadata());
    assert_eq!(ours_read.entries(), theirs_read.entries());
    assert_eq!(ours_read.entries().len(), entries.len());
    assert_eq!(
        ManifestFile {
            manifest_path: String::new(),
            manifest_length: 0,
            ..ours
        },
        ManifestFile {
            manifest_path: String::new(),
            manifest_length: 0,
            ..theirs
        }
    );
}

/// Data entries of every status, with partition values of each encoded type.
fn data_entries() -> Vec<WrittenEntry> {
    vec![
        sample(
            ManifestStatus::Added,
            None,
            "memory:/t/data/a.parquet",
            DataContentType::Data,
            (Some("b"), 1.5),
        ),
        entry(
            ManifestStatus::Existing,
            Some(3),
            file(
                "memory:/t/data/b.parquet",
                DataContentType::Data,
                partition(None, f64::NAN),
            ),
        ),
        sample(
            ManifestStatus::Deleted,
            Some(2),
            "memory:/t/data/c.parquet",
            DataContentType::Data,
            (Some("a"), -0.25),
        ),
        sample(
            ManifestStatus::Existing,
            Some(4),
            "memory:/t/data/d.parquet",
            DataContentType::Data,
            (Some("é"), 9.0),
        ),
    ]
}

/// An added equality-delete entry and an existing position-delete one.
fn delete_entries() -> Vec<WrittenEntry> {
    vec![
        sample(
            ManifestStatus::Added,
            None,
            "memory:/t/data/e.parquet",
            DataContentType::EqualityDeletes,
            (Some("b"), 1.5),
        ),
        sample(
            ManifestStatus::Existing,
            Some(1),
            "memory:/t/data/p.parquet",
            DataContentType::PositionDeletes,
            (Some("c"), 2.5),
        ),
    ]
}

#[tokio::test]
async fn data_manifests_read_back_as_iceberg_rusts_do() {
    let metadata = table(2);
    let entries = data_entries();
    same_as_iceberg(&metadata, ManifestContentType::Data, 0, &entries).await;
    same_as_iceberg(&metadata, ManifestContentType::Data, 0, &entries[..1]).await;
    same_as_iceberg(&metadata, ManifestContentType::Data, 0, &[]).await;
}

#[tokio::test]
async fn delete_manifests_read_back_as_iceberg_rusts_do() {
    let metadata = table(2);
    let entries = delete_entries();
    same_as_iceberg(&metadata, ManifestContentType::Deletes, 0, &entries).await;
}

/// Writes `entries` as a manifest through a fresh cache, lists it as `listed` says, and
/// returns what storage gives through that list entry and what the cache gives once the
/// file is gone (an error when the cache reads storage).
async fn stored_and_remembered(
    content: ManifestContentType,
    entries: Vec<WrittenEntry>,
    listed: impl Fn(ManifestFile) -> ManifestFile,
) -> (Manifest, iceberg::Result<Arc<Manifest>>) {
    use crate::table::manifest_cache::{ManifestCache, write_manifest};
    let metadata = table(2);
    let spec = metadata.default_partition_spec().as_ref();
    let io = FileIO::new_with_memory();
    let cache = ManifestCache::default();
    let path = "memory:/t/m.avro";
    let written = write_manifest(&metadata, (&io, &cache), path, 9, (content, spec), entries)
        .await
        .unwrap();
    let through = listed(written);
    let stored = through.load_manifest(&io).await.unwrap();
    io.delete(path).await.unwrap();
    (stored, cache.load(&io, &through).await)
}

/// The manifests this writer wrote load from what the cache remembers, without reading
/// storage, exactly as iceberg-rust loads them from storage: through the list entry a
/// commit gives them and through one with other values to inherit (an attempt rebased
/// onto a later sequence number); ADDED entries inherit their sequence numbers (this
/// writer names the snapshot in every entry: `check_entry`).
#[tokio::test]
async fn a_remembered_manifest_loads_as_storage_gives_it() {
    let kinds = [
        (ManifestContentType::Data, data_entries()),
        (ManifestContentType::Deletes, delete_entries()),
    ];
    for (content, entries) in kinds {
        for (sequence_number, added_snapshot_id) in [(7, 9), (10, 13)] {
            let listed = |m: ManifestFile| ManifestFile {
                sequence_number,
                min_sequence_number: sequence_number.min(2),
                added_snapshot_id,
                ..m
            };
            let (stored, remembered) =
                stored_and_remembered(content, entries.clone(), listed).await;
            let remembered = remembered.expect("loaded without reading storage");
            assert_eq!(
                *remembered, stored,
                "{content:?} at sequence {sequence_number}"
            );
        }
    }
}

/// The first data entry with its partition value `at` and its lower bound of column
/// `bound` replaced, when given.
fn first_data_entry_with(
    partition: Option<(usize, Literal)>,
    bound: Option<(i32, Datum)>,
) -> Vec<WrittenEntry> {
    let mut entries = data_entries();
    let file = &entries[0].data_file;
    let mut values: Vec<Option<Literal>> = file.partition().iter().map(|v| v.cloned()).collect();
    if let Some((at, value)) = partition {
        values[at] = Some(value);
    }
    let mut bounds = file.lower_bounds().clone();
    bounds.extend(bound);
    let rebuilt = DataFileBuilder::default()
        .content(file.content_type())
        .file_path(file.file_path().to_string())
        .file_format(file.file_format())
        .partition(Struct::from_iter(values))
        .partition_spec_id(0)
        .record_count(file.record_count())
        .file_size_in_bytes(file.file_size_in_bytes())
        .lower_bounds(bounds)
        .build()
        .unwrap();
    entries[0].data_file = rebuilt;
    entries
}

/// Values written in a wider type than remembered (from before a column was widened:
/// an int partition value of a long field, a float one of a double field, an int bound
/// of a long column, a float bound of a double column), each alone, load as storage has
/// them, read from storage: readers compare partitions by value and kind.
#[tokio::test]
async fn a_manifest_of_widened_values_is_read_from_storage() {
    let cases = [
        (Some((7, Literal::int(-42))), None),
        (Some((4, Literal::float(1.5))), None),
        (None, Some((1, Datum::int(-5)))),
        (None, Some((6, Datum::float(0.5)))),
    ];
    for (partition, bound) in cases {
        let widened = first_data_entry_with(partition.clone(), bound.clone());
        let (stored, remembered) =
            stored_and_remembered(ManifestContentType::Data, widened, |m| m).await;
        assert!(
            remembered.is_err(),
            "{partition:?} {bound:?}: read from storage"
        );
        let file = stored.entries()[0].data_file();
        if let Some((at, _)) = partition {
            let wide = file.partition()[at]
                .as_ref()
                .and_then(|v| v.as_primitive_literal());
            assert!(matches!(
                wide,
                Some(PrimitiveLiteral::Long(_) | PrimitiveLiteral::Double(_))
            ));
        }
        if let Some((id, _)) = bound {
            let wide = file.lower_bounds()[&id].data_type().clone();
            assert!(matches!(wide, PrimitiveType::Long | PrimitiveType::Double));
        }
    }
}

#[tokio::test]
async fn what_it_does_not_encode_is_written_by_iceberg_rust() {
    // A decimal partition field, and a v1 and a v3 table.
    let metadata = table(2);
    let spec = metadata.partition_spec_by_id(1).unwrap();
    let headers = ManifestHeaders::default();
    let header = headers
        .header(metadata.current_schema(), spec, ManifestContentType::Data)
        .await
        .unwrap();
    assert!(
        header.is_none(),
        "decimal partitions go to iceberg-rust's writer"
    );
    let decimal = Struct::from_iter([Some(Literal::decimal(1_234))]);
    let data = DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path("memory:/t/data/x.parquet".into())
        .file_format(DataFileFormat::Parquet)
        .partition(decimal)
        .partition_spec_id(1)
        .record_count(1)
        .file_size_in_bytes(10)
        .build()
        .unwrap();
    same_as_iceberg(
        &metadata,
        ManifestContentType::Data,
        1,
        &[entry(ManifestStatus::Added, None, data)],
    )
    .await;
    for version in [1, 3] {
        let metadata = table(version);
        let io = FileIO::new_with_memory();
        let data = file(
            "memory:/t/data/a.parquet",
            DataContentType::Data,
            partition(Some("b"), 1.5),
        );
        let spec = metadata.default_partition_spec().as_ref();
        let entries = [entry(ManifestStatus::Added, None, data)];
        let content = (ManifestContentType::Data, spec);
        write_entries(
            &metadata,
            (&io, &headers),
            "memory:/t/v.avro",
            9,
            content,
            &entries,
        )
        .await
        .unwrap();
        assert!(
            headers.known.locked().is_empty(),
            "v{version} went to floe's encoder"
        );
        let data = file(
            "memory:/t/data/a.parquet",
            DataContentType::Data,
            partition(Some("b"), 1.5),
        );
        same_as_iceberg(
            &metadata,
            ManifestContentType::Data,
            0,
            &[entry(ManifestStatus::Added, None, data)],
        )
        .await;
    }
}

#[tokio::test]
async fn a_header_serves_only_its_schema_spec_and_content() {
    let metadata = table(2);
    let spec = metadata.default_partition_spec().as_ref();
    let schema = metadata.current_schema();
    let headers = ManifestHeaders::default();
    let data = headers
        .header(schema, spec, ManifestContentType::Data)
        .await
        .unwrap()
        .unwrap();
    let again = headers
        .header(schema, spec, ManifestContentType::Data)
        .await
        .unwrap()
        .unwrap();
    assert!(Arc::ptr_eq(&data, &again), "built once");
    let deletes = headers
        .header(schema, spec, ManifestContentType::Deletes)
        .await
        .unwrap()
        .unwrap();
    assert!(!Arc::ptr_eq(&data, &deletes));
    let evolved = Arc::new(
        iceberg::spec::Schema::builder()
            .with_schema_id(1)
            .with_fields(schema.as_struct().fields().iter().cloned())
            .build()
            .unwrap(),
    );
    let other = headers
        .header(&evolved, spec, ManifestContentType::Data)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !Arc::ptr_eq(&data, &other),
        "another schema, another header"
    );
}

#[tokio::test]
async fn entries_that_iceberg_rust_refuses_are_refused() {
    let metadata = table(2);
    let io = FileIO::new_with_memory();
    let headers = ManifestHeaders::default();
    let spec = metadata.default_partition_spec().as_ref();
    let write = |entries: Vec<WrittenEntry>, content| {
        let (io, headers, metadata) = (&io, &headers, &metadata);
        async move {
            write_entries(
                metadata,
                (io, headers),
                "memory:/t/x.avro",
                9,
                (content, spec),
                &entries,
            )
            .await
        }
    };
    let data = file(
        "memory:/t/data/a.parquet",
        DataContentType::Data,
        partition(Some("b"), 1.5),
    );
    let in_deletes = write(
        vec![entry(ManifestStatus::Added, None, data.clone())],
        ManifestContentType::Deletes,
    )
    .await;
    assert!(
        in_deletes
            .unwrap_err()
            .to_string()
            .contains("does not belong")
    );
    let unsequenced = write(
        vec![entry(ManifestStatus::Existing, None, data.clone())],
        ManifestContentType::Data,
    )
    .await;
    assert!(
        unsequenced
            .unwrap_err()
            .to_string()
            .contains("sequence numbers")
    );
    let mut orphan = entry(ManifestStatus::Existing, Some(2), data.clone());
    orphan.snapshot_id = None;
    let orphaned = write(vec![orphan], ManifestContentType::Data).await;
    let refused = orphaned.unwrap_err().to_string();
    assert!(
        refused.contains("without the snapshot that added it"),
        "{refused}"
    );
    let wrong = Struct::from_iter([Some(Literal::long(1))]);
    let mismatched = file("memory:/t/data/b.parquet", DataContentType::Data, wrong);
    let mismatch = write(
        vec![entry(ManifestStatus::Added, None, mismatched)],
        ManifestContentType::Data,
    )
    .await;
    assert!(
        mismatch
            .unwrap_err()
            .to_string()
            .contains("do not match the partition spec")
    );
}

#[tokio::test]
async fn values_from_before_a_widening_are_written_as_the_wider_type() {
    // `id` (long) and `score` (double) partition values as they were when the columns
    // were int and float: a merge rewrites such entries after floe widened them.
    let metadata = table(2);
    let mut values = partition(Some("b"), 1.5).fields().to_vec();
    values[4] = Some(Literal::float(0.25));
    values[7] = Some(Literal::int(-42));
    let old = file(
        "memory:/t/data/a.parquet",
        DataContentType::Data,
        Struct::from_iter(values),
    );
    let io = FileIO::new_with_memory();
    let spec = metadata.default_partition_spec().as_ref();
    let entries = [entry(ManifestStatus::Existing, Some(1), old)];
    let headers = ManifestHeaders::default();
    let path = "memory:/t/widened.avro";
    let listed = write_entries(
        &metadata,
        (&io, &headers),
        path,
        9,
        (ManifestContentType::Data, spec),
        &entries,
    )
    .await
    .unwrap();
    let bytes = io.new_input(path).unwrap().read().await.unwrap();
    let read = Manifest::parse_avro(&bytes).unwrap();
    let partition = read.entries()[0].data_file().partition().fields().to_vec();
    assert_eq!(partition[4], Some(Literal::double(0.25)));
    assert_eq!(partition[7], Some(Literal::long(-42)));
    let summary = &listed.partitions.unwrap()[7];
    let lower = summary.lower_bound.as_ref().map(|b| b.to_vec());
    assert_eq!(lower, Some((-42i64).to_le_bytes().to_vec()));
    // iceberg-rust's writer (v1, v3, types this one does not encode) refuses such values
    // as they are: they are widened before it sees them.
    let content = (ManifestContentType::Data, spec);
    let theirs = "memory:/t/theirs.avro";
    write_with_iceberg(&metadata, &io, theirs, 9, content, &entries)
        .await
        .expect("widened for iceberg-rust's writer");
    let bytes = io.new_input(theirs).unwrap().read().await.unwrap();
    let read = Manifest::parse_avro(&bytes).unwrap();
    let partition = read.entries()[0].data_file().partition().fields().to_vec();
    assert_eq!(partition[4], Some(Literal::double(0.25)));
    assert_eq!(partition[7], Some(Literal::long(-42)));
}

#[test]
fn longs_are_zig_zag_varints() {
    for (n, bytes) in [
        (0i64, vec![0u8]),
        (-1, vec![1]),
        (1, vec![2]),
        (-64, vec![127]),
        (64, vec![128, 1]),
        (i64::MIN, vec![255; 9].into_iter().chain([1]).collect()),
    ] {
        let mut out = Vec::new();
        avro::long(&mut out, n);
        assert_eq!(out, bytes, "{n}");
    }
}
