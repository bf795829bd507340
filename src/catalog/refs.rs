//! A table's refs (branches and tags) without its whole JSON form.
//!
//! iceberg-rust keeps the ref map private. Its JSON form has it, but turning the whole
//! metadata into a JSON value builds every snapshot's summary too: at 1,000 retained
//! snapshots that cost floe ~40% of its CPU per commit. The metadata is serialised here
//! into a serializer that keeps only the `refs` field and skips every other value
//! without visiting it.

use iceberg::spec::TableMetadata;
use serde::Serialize;
use serde::ser::{self, Impossible};

use super::Refs;

/// The refs of a table-load answer (`{"metadata": {…, "refs": …}, …}`), read from the
/// answer's own JSON: serialising the metadata for [`table_refs`] first copies all of it
/// (iceberg-rust's JSON form is a converted clone), which was a tenth of a contended
/// writer's CPU, loading the head before most commits. `None` when the answer's refs
/// are not what iceberg-rust made of them (it adds `main` to metadata that lacks refs,
/// and reads none from v1 metadata), so the caller reads them the slow way.
pub fn refs_of_load_answer(answer: &[u8], metadata: &TableMetadata) -> Option<Refs> {
    if metadata.format_version() < iceberg::spec::FormatVersion::V2 {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        metadata: Document,
    }
    #[derive(serde::Deserialize)]
    struct Document {
        refs: Option<Refs>,
    }
    let refs = serde_json::from_slice::<Answer>(answer)
        .ok()?
        .metadata
        .refs?;
    let main = refs.get(iceberg::spec::MAIN_BRANCH).map(|r| r.snapshot_id);
    (main == metadata.current_snapshot_id()).then_some(refs)
}

/// The table's refs by name; `None` when they cannot be read.
pub fn table_refs(metadata: &TableMetadata) -> Option<Refs> {
    let refs = metadata.serialize(RefsOnly).ok()??;
    serde_json::from_value(refs).ok()
}

/// Serialises a metadata document (an object) into just its `refs` value.
struct RefsOnly;

/// The error of [`RefsOnly`]: anything that is not an object.
#[derive(Debug)]
struct NotAnObject;

impl std::fmt::Display for NotAnObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("table metadata did not serialise as an object")
    }
}

impl std::error::Error for NotAnObject {}

impl ser::Error for NotAnObject {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        NotAnObject
    }
}

/// Collects the `refs` entry of the object being serialised.
#[derive(Default)]
struct Fields {
    refs: Option<serde_json::Value>,
    /// `refs` came as a key whose value follows (`serialize_key` then `serialize_value`).
    refs_next: bool,
}

impl Fields {
    fn field<V: Serialize + ?Sized>(
        &mut self,
        is_refs: bool,
        value: &V,
    ) -> Result<(), NotAnObject> {
        if is_refs {
            self.refs = Some(serde_json::to_value(value).map_err(|_| NotAnObject)?);
        }
        Ok(())
    }
}

fn is_refs_key<K: Serialize + ?Sized>(key: &K) -> bool {
    matches!(serde_json::to_value(key), Ok(serde_json::Value::String(k)) if k == "refs")
}

impl ser::SerializeMap for Fields {
    type Ok = Option<serde_json::Value>;
    type Error = NotAnObject;

    fn serialize_key<K: Serialize + ?Sized>(&mut self, key: &K) -> Result<(), NotAnObject> {
        self.refs_next = is_refs_key(key);
        Ok(())
    }

    fn serialize_value<V: Serialize + ?Sized>(&mut self, value: &V) -> Result<(), NotAnObject> {
        let is_refs = std::mem::take(&mut self.refs_next);
        self.field(is_refs, value)
    }

    fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
        &mut self,
        key: &K,
        value: &V,
    ) -> Result<(), NotAnObject> {
        self.field(is_refs_key(key), value)
    }

    fn end(self) -> Result<Self::Ok, NotAnObject> {
        Ok(self.refs)
    }
}

impl ser::SerializeStruct for Fields {
    type Ok = Option<serde_json::Value>;
    type Error = NotAnObject;

    fn serialize_field<V: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &V,
    ) -> Result<(), NotAnObject> {
        self.field(key == "refs", value)
    }

    fn end(self) -> Result<Self::Ok, NotAnObject> {
        Ok(self.refs)
    }
}

/// Refuses every value that is not an object or a struct.
macro_rules! not_an_object {
    ($($method:ident($($arg:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $arg),*) -> Result<Self::Ok, NotAnObject> {
            Err(NotAnObject)
        })*
    };
}

impl ser::Serializer for RefsOnly {
    type Ok = Option<serde_json::Value>;
    type Error = NotAnObject;
    type SerializeSeq = Impossible<Self::Ok, NotAnObject>;
    type SerializeTuple = Impossible<Self::Ok, NotAnObject>;
    type SerializeTupleStruct = Impossible<Self::Ok, NotAnObject>;
    type SerializeTupleVariant = Impossible<Self::Ok, NotAnObject>;
    type SerializeMap = Fields;
    type SerializeStruct = Fields;
    type SerializeStructVariant = Impossible<Self::Ok, NotAnObject>;

    not_an_object!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_none(),
        serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str),
    );

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Self::Ok, NotAnObject> {
        value.serialize(self)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<Self::Ok, NotAnObject> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Self::Ok, NotAnObject> {
        Err(NotAnObject)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, NotAnObject> {
        Err(NotAnObject)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, NotAnObject> {
        Err(NotAnObject)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, NotAnObject> {
        Err(NotAnObject)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, NotAnObject> {
        Err(NotAnObject)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Fields, NotAnObject> {
        Ok(Fields::default())
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Fields, NotAnObject> {
        Ok(Fields::default())
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, NotAnObject> {
        Err(NotAnObject)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::TableCreation;
    use iceberg::spec::SnapshotReference;
    use iceberg::spec::{Schema, TableMetadataBuilder};
    use std::collections::HashMap;

    /// Refs read from a load answer are the ones iceberg-rust reads from it, or none when
    /// it made up its own.
    #[test]
    fn refs_of_a_load_answer_are_the_metadatas_own() {
        let document = include_str!("../testdata/two_snapshots.json");
        let answer =
            |metadata: &str| format!(r#"{{"metadata-location": "m", "metadata": {metadata}}}"#);
        let metadata: TableMetadata = serde_json::from_str(document).unwrap();
        let skimmed = refs_of_load_answer(answer(document).as_bytes(), &metadata);
        assert_eq!(skimmed, table_refs(&metadata));
        assert!(skimmed.is_some());
        // Without refs iceberg-rust makes `main` up from the current snapshot: not skimmed.
        let mut bare: serde_json::Value = serde_json::from_str(document).unwrap();
        bare.as_object_mut().unwrap().remove("refs");
        let metadata: TableMetadata = serde_json::from_value(bare.clone()).unwrap();
        assert!(table_refs(&metadata).is_some());
        assert_eq!(
            refs_of_load_answer(answer(&bare.to_string()).as_bytes(), &metadata),
            None
        );
        // Not a load answer at all.
        assert_eq!(refs_of_load_answer(b"[]", &metadata), None);
        // iceberg-rust reads no refs from v1 metadata, whatever the document holds.
        let mut v1: serde_json::Value = serde_json::from_str(document).unwrap();
        v1["format-version"] = 1.into();
        v1["schema"] = v1["schemas"][0].clone();
        v1["partition-spec"] = serde_json::json!([]);
        let metadata: TableMetadata = serde_json::from_value(v1.clone()).unwrap();
        assert_eq!(
            refs_of_load_answer(answer(&v1.to_string()).as_bytes(), &metadata),
            None
        );
    }

    /// The refs read without the JSON form are exactly the ones in the JSON form, for
    /// tables with branches, tags and retention settings.
    #[test]
    fn refs_match_the_json_form() {
        let with_tag = include_str!("../testdata/two_snapshots.json").replace(
            r#""main": {"snapshot-id": 2, "type": "branch"}"#,
            r#""main": {"snapshot-id": 2, "type": "branch"},
               "v1": {"snapshot-id": 1, "type": "tag", "max-ref-age-ms": 9000},
               "audit": {"snapshot-id": 1, "type": "branch", "min-snapshots-to-keep": 4}"#,
        );
        for metadata in [
            serde_json::from_str(include_str!("../testdata/two_snapshots.json")).unwrap(),
            crate::fixture::table(
                "{}",
                2,
                r#", "max-ref-age-ms": 5000, "min-snapshots-to-keep": 3"#,
                "",
            ),
            serde_json::from_str::<TableMetadata>(&with_tag).unwrap(),
        ] {
            let from_json: HashMap<String, SnapshotReference> =
                serde_json::from_value(serde_json::to_value(&metadata).unwrap()["refs"].clone())
                    .unwrap();
            assert!(!from_json.is_empty());
            assert_eq!(table_refs(&metadata).unwrap(), from_json);
        }
    }

    /// A v3 table's refs are read too; a table without snapshots has none (not an
    /// error). (A v1 table's JSON form has no refs: `None`, as before.)
    #[test]
    fn v3_and_empty_tables() {
        let v2 = include_str!("../testdata/two_snapshots.json");
        let v3 = v2
            .replace(r#""format-version": 2"#, r#""format-version": 3"#)
            .replace(
                r#""properties": {}"#,
                r#""properties": {}, "next-row-id": 0"#,
            );
        let v3: TableMetadata = serde_json::from_str(&v3).unwrap();
        assert_eq!(table_refs(&v3).unwrap()["main"].snapshot_id, 2);
        let empty = TableMetadataBuilder::from_table_creation(
            TableCreation::builder()
                .name("t".into())
                .location("file:///tmp/t".into())
                .schema(Schema::builder().build().unwrap())
                .build(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        assert_eq!(table_refs(&empty), Some(HashMap::new()));
    }
}
