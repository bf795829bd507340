//! A commit's answer, used without building the table it carries.
//!
//! A REST catalog answers every commit with the table's whole metadata: every retained
//! snapshot, its summary, the logs. Parsing that into a `TableMetadata` costs about
//! 10 µs per retained snapshot, every commit (97 ms at 10,000 snapshots; the
//! `commit_age` bench). floe does not need most of it: the commit's requirements pinned
//! the table's uuid, main branch head, schema and spec, so the catalog applied floe's
//! updates to metadata that agrees with floe's copy on everything floe's commits are
//! built from. floe applies the same updates to its own copy ([`apply_updates`]) and
//! reads from the answer only what it checks ([`AnswerHead`]): where the new metadata
//! lives and that the main branch now is the snapshot just sent. The scan stops as soon
//! as it has those, which in the field order Java's catalogs write is before the
//! snapshots.
//!
//! What other tools change without moving the main branch, the requirements do not pin:
//! the location, properties, tags and other branches are therefore compared whole with
//! the answer's (which Java's catalogs also write before the snapshots), and any
//! difference sends floe to the full answer. What is compared neither way (snapshots
//! another tool removed, statistics, schemas and specs that are not current, the logs)
//! the committer picks up when it reloads the table: before it expires snapshots, at
//! least once a minute (see `stage`), after every conflict, and before the next commit
//! when an attempt built on the table the committer kept did not land.

use std::collections::HashMap;

use iceberg::TableUpdate;
use std::sync::Arc;

use iceberg::spec::{TableMetadata, TableMetadataBuilder, TableMetadataRef};

use super::Refs;

/// The fields of a commit answer (`{"metadata-location": …, "metadata": {…}}`) that floe
/// checks a locally applied commit against. Each is `None` when the answer lacks it.
#[derive(Debug, Default, PartialEq)]
pub struct AnswerHead {
    pub metadata_location: Option<String>,
    pub table_uuid: Option<String>,
    /// The table's location, under which floe writes manifests and metadata.
    pub location: Option<String>,
    pub format_version: Option<u8>,
    /// `Some(None)`: the answer says the table has no current snapshot (null or -1).
    pub current_snapshot_id: Option<Option<i64>>,
    pub last_sequence_number: Option<i64>,
    /// v3 row lineage: the first row id the next snapshot gets.
    pub next_row_id: Option<i64>,
    /// What other tools may change without moving the main branch, so the requirements
    /// do not pin it: compared whole, so the view misses no such change.
    pub properties: Option<HashMap<String, String>>,
    pub refs: Option<Refs>,
}

impl AnswerHead {
    /// Reads the fields from a commit answer's JSON, skipping everything else unparsed,
    /// and stops once it has them all. `None` when the text is not the JSON object it
    /// should be (the caller then parses it in full, which says what is wrong). Answers
    /// read from a connection go through [`Self::scan_prefix`] or [`Self::scan_ended`].
    #[cfg(test)]
    pub fn scan(body: &[u8]) -> Option<AnswerHead> {
        Self::scan_to(body).map(|(head, _)| head)
    }

    /// [`AnswerHead::scan`] of the first bytes of an answer still arriving: `Some` only
    /// when every field was read and text follows the last value read, so the value
    /// cannot be a number cut short by the end of the prefix.
    pub fn scan_prefix(prefix: &[u8]) -> Option<AnswerHead> {
        Self::scan_to(prefix)
            .filter(|(head, end)| head.complete() && *end < prefix.len())
            .map(|(head, _)| head)
    }

    /// [`AnswerHead::scan`] of an answer that ended. Without a stated length, a cut
    /// connection looks like the end, so a value that runs to the last byte may be cut
    /// short (`12` of `123`): `None` then, as a whole object ends with `}`. (A head that
    /// lacks fields was read through its objects' closing braces, so nothing of it is cut.)
    pub fn scan_ended(body: &[u8]) -> Option<AnswerHead> {
        Self::scan_to(body)
            .filter(|(head, end)| !head.complete() || *end < body.len())
            .map(|(head, _)| head)
    }

    /// The fields, and where the scan stopped.
    fn scan_to(body: &[u8]) -> Option<(AnswerHead, usize)> {
        let mut scan = Scanner { text: body, at: 0 };
        let mut head = AnswerHead::default();
        scan.object(|scan, key| match key {
            b"metadata-location" => {
                head.metadata_location = Some(scan.string_value()?);
                Some(Step::Go)
            }
            b"metadata" => {
                scan.object(|scan, key| {
                    match key {
                        b"table-uuid" => head.table_uuid = Some(scan.string_value()?),
                        b"location" => head.location = Some(scan.string_value()?),
                        b"format-version" => {
                            head.format_version = Some(u8::try_from(scan.integer_or_null()??).ok()?)
                        }
                        b"current-snapshot-id" => {
                            head.current_snapshot_id =
                                Some(scan.integer_or_null()?.filter(|&id| id != -1))
                        }
                        b"last-sequence-number" => {
                            head.last_sequence_number = Some(scan.integer_or_null()??)
                        }
                        b"next-row-id" => head.next_row_id = Some(scan.integer_or_null()??),
                        b"properties" => head.properties = Some(scan.parsed_value()?),
                        b"refs" => head.refs = Some(scan.parsed_value()?),
                        _ => scan.skip_value()?,
                    }
                    // Stopping inside leaves the rest unread, so the outer object must
                    // stop too: only once it has everything.
                    Some(if head.complete() {
                        Step::Stop
                    } else {
                        Step::Go
                    })
                })?;
                Some(if head.complete() {
                    Step::Stop
                } else {
                    Step::Go
                })
            }
            _ => {
                scan.skip_value()?;
                Some(Step::Go)
            }
        })?;
        Some((head, scan.at))
    }

    /// Whether every field the table's format version has was read.
    fn complete(&self) -> bool {
        let Some(version) = self.format_version else {
            return false;
        };
        self.metadata_location.is_some()
            && self.table_uuid.is_some()
            && self.location.is_some()
            && self.current_snapshot_id.is_some()
            && self.properties.is_some()
            && self.refs.is_some()
            && (version < 2 || self.last_sequence_number.is_some())
            && (version < 3 || self.next_row_id.is_some())
    }

    /// Whether the answer agrees with `applied` (the base plus floe's updates) on
    /// everything it states that floe relies on: the same table, location and format,
    /// main branch head, sequence number and row ids, properties and refs. A field the
    /// answer lacks cannot disagree, except the metadata file's location and the head,
    /// which say the commit was applied (a redirect to the table's GET answers with the
    /// old head), and the refs.
    pub fn agrees_with(&self, applied: &TableMetadata, applied_refs: Option<&Refs>) -> bool {
        fn same<T: PartialEq>(stated: &Option<T>, local: T) -> bool {
            stated.as_ref().is_none_or(|s| *s == local)
        }
        let uuid = self
            .table_uuid
            .as_ref()
            .map(|u| uuid::Uuid::parse_str(u).ok());
        self.metadata_location.is_some()
            && self.current_snapshot_id == Some(applied.current_snapshot_id())
            && same(&uuid, Some(applied.uuid()))
            && same(&self.location.as_deref(), applied.location())
            && same(&self.format_version, applied.format_version() as u8)
            && same(&self.last_sequence_number, applied.last_sequence_number())
            && same(&self.next_row_id, applied.next_row_id() as i64)
            // Absent properties are none (as the full parse reads them).
            && self.properties.as_ref().unwrap_or(&HashMap::new()) == applied.properties()
            // iceberg-rust keeps no refs for v1 tables (the full parse drops them too), so
            // there they cannot be compared; from v2 on, missing refs cannot be checked.
            && match (&self.refs, applied.format_version() as u8) {
                (_, 1) => true,
                (Some(refs), _) => applied_refs == Some(refs),
                (None, _) => false,
            }
    }
}

/// `metadata` with `updates` applied, as a catalog applies them; `previous_location`
/// (the metadata file `metadata` was read from) joins the metadata log. Metadata held
/// only here is changed in place; shared metadata is copied first. A copy, and dropping
/// the metadata it replaces, each touch every retained snapshot: at 10,000 snapshots the
/// two were a fifth of floe's CPU per commit, which is why the committer keeps the
/// table it commits on to itself (see `committer::stage`).
pub fn apply_updates(
    metadata: TableMetadataRef,
    previous_location: Option<String>,
    updates: Vec<TableUpdate>,
) -> iceberg::Result<TableMetadata> {
    let metadata = Arc::unwrap_or_clone(metadata);
    let mut builder = TableMetadataBuilder::new_from_metadata(metadata, previous_location);
    for update in updates {
        builder = update.apply(builder)?;
    }
    Ok(builder.build()?.metadata)
}

/// `refs` after `updates`, as a catalog changes them: refs set, removed, and dropped
/// with the snapshot they point at. `None` when `refs` is unknown.
pub fn refs_after(refs: Option<&Refs>, updates: &[TableUpdate]) -> Option<Refs> {
    let mut refs = refs?.clone();
    for update in updates {
        match update {
            TableUpdate::SetSnapshotRef {
                ref_name,
                reference,
            } => {
                refs.insert(ref_name.clone(), reference.clone());
            }
            TableUpdate::RemoveSnapshotRef { ref_name } => {
                refs.remove(ref_name);
            }
            TableUpdate::RemoveSnapshots { snapshot_ids } => {
                refs.retain(|_, r| !snapshot_ids.contains(&r.snapshot_id))
            }
            _ => {}
        }
    }
    Some(refs)
}

/// What to do after a key of an object was read.
enum Step {
    Go,
    Stop,
}

/// A forward-only reader of JSON text that skips values without building them.
struct Scanner<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    /// Consumes `byte` after optional white space.
    fn eat(&mut self, byte: u8) -> Option<()> {
        self.skip_space();
        (self.text.get(self.at) == Some(&byte)).then(|| self.at += 1)
    }

    /// Calls `on_key` for each key of the object at the cursor, with the cursor on the
    /// key's value, which `on_key` must consume. Returns early on `Step::Stop`, leaving
    /// the rest of the object unread.
    fn object(
        &mut self,
        mut on_key: impl FnMut(&mut Self, &'a [u8]) -> Option<Step>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            self.skip_space();
            let key = self.raw_string()?;
            self.eat(b':')?;
            self.skip_space();
            if let Step::Stop = on_key(self, key)? {
                return Some(());
            }
            if self.eat(b',').is_none() {
                return self.eat(b'}');
            }
        }
    }

    /// The text between the quotes of the string at the cursor, escapes left as they are.
    fn raw_string(&mut self) -> Option<&'a [u8]> {
        let text = self.text;
        if text.get(self.at) != Some(&b'"') {
            return None;
        }
        let start = self.at + 1;
        let mut at = start;
        loop {
            at += memchr::memchr2(b'"', b'\\', text.get(at..)?)?;
            if text[at] == b'\\' {
                at += 2;
                continue;
            }
            self.at = at + 1;
            return Some(&text[start..at]);
        }
    }

    /// The string value at the cursor, escapes resolved.
    fn string_value(&mut self) -> Option<String> {
        let start = self.at;
        self.raw_string()?;
        serde_json::from_slice(&self.text[start..self.at]).ok()
    }

    /// The value at the cursor, parsed as `T`.
    fn parsed_value<T: serde::de::DeserializeOwned>(&mut self) -> Option<T> {
        let start = self.at;
        self.skip_value()?;
        serde_json::from_slice(&self.text[start..self.at]).ok()
    }

    /// The integer or `null` at the cursor.
    fn integer_or_null(&mut self) -> Option<Option<i64>> {
        let start = self.at;
        while let Some(b'-' | b'0'..=b'9' | b'a'..=b'z') = self.text.get(self.at) {
            self.at += 1;
        }
        match &self.text[start..self.at] {
            b"null" => Some(None),
            digits => std::str::from_utf8(digits).ok()?.parse().ok().map(Some),
        }
    }

    /// Moves past the value at the cursor, checking only its nesting: strings are
    /// skipped to their closing quote, brackets counted.
    fn skip_value(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match *self.text.get(self.at)? {
                b'"' => {
                    self.raw_string()?;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.at += 1;
                }
                b'}' | b']' => {
                    // A closing bracket at depth 0 ends the enclosing object, not this value.
                    if depth == 0 {
                        return Some(());
                    }
                    depth -= 1;
                    self.at += 1;
                }
                b',' if depth == 0 => return Some(()),
                _ => self.at += 1,
            }
            if depth == 0 && self.ends_scalar_or_value() {
                return Some(());
            }
        }
    }

    /// After a value's last byte at depth 0: whether what follows ends it.
    fn ends_scalar_or_value(&mut self) -> bool {
        let before = self.at;
        self.skip_space();
        let ends = matches!(self.text.get(self.at), Some(b',' | b'}' | b']') | None);
        if !ends {
            self.at = before;
        }
        ends
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Option<AnswerHead> {
        AnswerHead::scan(text.as_bytes())
    }

    #[test]
    fn reads_the_checked_fields_in_java_order_and_stops_before_snapshots() {
        // The snapshots are cut off: a scan that read them would fail.
        let text = r#"{"metadata-location":"s3://b/t/metadata/00002-a.metadata.json","metadata":{
            "format-version":2,"table-uuid":"9C12D441-03FE-4693-9A96-A0705DDF69C1",
            "location":"s3://b/t","last-sequence-number":34,"properties":{"a":"b,}"},
            "current-snapshot-id":3055729675574597004,
            "refs":{"main":{"snapshot-id":3055729675574597004,"type":"branch","min-snapshots-to-keep":5}},
            "snapshots":[{"snapshot-id":1,"#;
        let refs = serde_json::from_str(
            r#"{"main":{"snapshot-id":3055729675574597004,"type":"branch","min-snapshots-to-keep":5}}"#,
        )
        .unwrap();
        assert_eq!(
            head(text).unwrap(),
            AnswerHead {
                metadata_location: Some("s3://b/t/metadata/00002-a.metadata.json".into()),
                table_uuid: Some("9C12D441-03FE-4693-9A96-A0705DDF69C1".into()),
                location: Some("s3://b/t".into()),
                format_version: Some(2),
                current_snapshot_id: Some(Some(3055729675574597004)),
                last_sequence_number: Some(34),
                next_row_id: None,
                properties: Some(HashMap::from([("a".into(), "b,}".into())])),
                refs: Some(refs),
            }
        );
    }

    #[test]
    fn an_ended_answer_whose_last_checked_value_runs_to_its_end_is_no_answer() {
        let whole = r#"{"metadata-location":"l","metadata":{"format-version":2,"table-uuid":"u",
            "location":"l","properties":{},"refs":{},"current-snapshot-id":5,
            "last-sequence-number":123}}"#;
        let full = AnswerHead::scan_ended(whole.as_bytes()).unwrap();
        assert_eq!(full.last_sequence_number, Some(123));
        // Ended after "12": the number may have been cut short.
        let cut = &whole[..whole.find("123").unwrap() + 2];
        assert_eq!(head(cut).unwrap().last_sequence_number, Some(12));
        assert_eq!(AnswerHead::scan_ended(cut.as_bytes()), None);
        // A head lacking fields was read through its closing braces: nothing is cut.
        let lacking = r#"{"metadata-location":"l","metadata":{"format-version":2}}"#;
        assert!(AnswerHead::scan_ended(lacking.as_bytes()).is_some());
    }

    #[test]
    fn skips_any_value_before_the_fields_in_any_order() {
        let text = r#" { "metadata" : { "snapshots" : [ {"s":"x\"]}","n":[1,2.5e3,true,null,{}]} ],
            "current-snapshot-id" : -1 , "refs":{}, "table-uuid":"u\u0041", "last-sequence-number":0, "location":"l",
            "format-version": 3, "next-row-id": 12, "properties" : { } } ,
            "extra": [[]], "metadata-location" : "s3://b/\u00e9\/x" } "#;
        let h = head(text).unwrap();
        assert_eq!(h.metadata_location.as_deref(), Some("s3://b/é/x"));
        assert_eq!(h.table_uuid.as_deref(), Some("uA"));
        assert_eq!(h.current_snapshot_id, Some(None), "-1 means no snapshot");
        assert_eq!(h.last_sequence_number, Some(0));
        assert_eq!((h.format_version, h.next_row_id), (Some(3), Some(12)));
        assert_eq!(h.refs, Some(HashMap::new()));
        assert!(h.complete());
    }

    #[test]
    fn missing_fields_stay_unknown_and_broken_text_is_refused() {
        let h = head(r#"{"metadata-location":"x","metadata":{"current-snapshot-id":null}}"#);
        assert_eq!(h.unwrap().current_snapshot_id, Some(None));
        let h = head(r#"{"metadata":{}}"#).unwrap();
        assert_eq!(h, AnswerHead::default());
        for broken in [
            "",
            "[]",
            r#"{"metadata-location":"x""#,
            r#"{"metadata-location":"x","metadata":{"table-uuid":"#,
            r#"{"metadata-location":3}"#,
            r#"{"metadata":{"current-snapshot-id":"7"}}"#,
            r#"{"metadata":{"current-snapshot-id":1.5}}"#,
            r#"{"metadata":{"last-sequence-number":null}}"#,
            r#"{"a":"unterminated}"#,
        ] {
            assert_eq!(head(broken), None, "{broken:?}");
        }
    }

    /// The catalog's answer for `metadata`, in iceberg-rust's field order.
    fn answer_for(metadata: &TableMetadata) -> String {
        format!(
            r#"{{"metadata-location":"s3://b/t/metadata/00009-x.metadata.json","metadata":{}}}"#,
            serde_json::to_string(metadata).unwrap()
        )
    }

    #[test]
    fn a_commit_applied_locally_agrees_only_with_an_answer_that_matches_it() {
        use crate::catalog::refs::table_refs;
        use iceberg::spec::{SnapshotReference, SnapshotRetention};
        let base: TableMetadata =
            serde_json::from_str(include_str!("../testdata/two_snapshots.json")).unwrap();
        let property = TableUpdate::SetProperties {
            updates: HashMap::from([("floe.k".to_string(), "v".to_string())]),
        };
        let applied = apply_updates(Arc::new(base.clone()), None, vec![property.clone()]).unwrap();
        // The refs carried over are the applied metadata's own.
        let refs = refs_after(table_refs(&base).as_ref(), std::slice::from_ref(&property));
        assert_eq!(refs, table_refs(&applied));
        let agrees = |server: &TableMetadata| {
            AnswerHead::scan(answer_for(server).as_bytes())
                .unwrap()
                .agrees_with(&applied, refs.as_ref())
        };
        assert!(agrees(&applied));
        // The catalog's table differs in what the requirements do not pin: a property
        // or a tag another tool set; or it is not the commit at all (the old head).
        let other_property = TableUpdate::SetProperties {
            updates: HashMap::from([(
                "write.update.mode".to_string(),
                "copy-on-write".to_string(),
            )]),
        };
        let tag = TableUpdate::SetSnapshotRef {
            ref_name: "keep".into(),
            reference: SnapshotReference::new(
                1,
                SnapshotRetention::Tag {
                    max_ref_age_ms: None,
                },
            ),
        };
        let old_head = TableUpdate::SetSnapshotRef {
            ref_name: "main".into(),
            reference: SnapshotReference::new(1, SnapshotRetention::branch(None, None, None)),
        };
        let moved = TableUpdate::SetLocation {
            location: "s3://b/moved".into(),
        };
        for change in [other_property, tag, old_head, moved] {
            let server = apply_updates(
                Arc::new(base.clone()),
                None,
                vec![property.clone(), change.clone()],
            )
            .unwrap();
            assert!(!agrees(&server), "{change:?}");
        }
        assert!(!agrees(&base), "the answer lacks the commit's property");
    }

    #[test]
    fn updates_apply_in_place_to_metadata_held_once_and_to_a_copy_of_shared_metadata() {
        let base: TableMetadata =
            serde_json::from_str(include_str!("../testdata/two_snapshots.json")).unwrap();
        let with_property = |value: &str| TableUpdate::SetProperties {
            updates: HashMap::from([("floe.k".to_string(), value.to_string())]),
        };
        let base = apply_updates(Arc::new(base), None, vec![with_property("v")]).unwrap();
        // Where the property's text lives tells a move from a copy: cloning the metadata
        // copies every string in it (and at 10,000 snapshots, their whole map).
        let text_at = |m: &TableMetadata| m.properties()["floe.k"].as_ptr();
        let before = text_at(&base);
        let shared = Arc::new(base);
        let kept = shared.clone();
        let copied = apply_updates(shared, None, vec![]).unwrap();
        assert_ne!(text_at(&copied), before, "shared metadata is copied");
        assert_eq!(text_at(&kept), before, "and left as it was");
        drop(copied);
        let moved = apply_updates(kept, None, vec![]).unwrap();
        assert_eq!(text_at(&moved), before, "metadata held once is not copied");
    }

    #[test]
    fn refs_carried_over_drop_what_a_removal_or_expiry_drops() {
        use crate::catalog::refs::table_refs;
        use iceberg::spec::{SnapshotReference, SnapshotRetention};
        // The fixture's snapshot log is empty, which a removal refuses: log both.
        let mut json: serde_json::Value =
            serde_json::from_str(include_str!("../testdata/two_snapshots.json")).unwrap();
        let log: Vec<serde_json::Value> = json["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| serde_json::json!({"snapshot-id": s["snapshot-id"], "timestamp-ms": s["timestamp-ms"]}))
            .collect();
        json["snapshot-log"] = log.into();
        let base: TableMetadata = serde_json::from_value(json).unwrap();
        let oldest = base.snapshots().map(|s| s.snapshot_id()).min().unwrap();
        let tag_oldest = TableUpdate::SetSnapshotRef {
            ref_name: "keep".into(),
            reference: SnapshotReference::new(
                oldest,
                SnapshotRetention::Tag {
                    max_ref_age_ms: Some(1),
                },
            ),
        };
        let tagged = apply_updates(Arc::new(base.clone()), None, vec![tag_oldest]).unwrap();
        let tagged_refs = table_refs(&tagged);
        assert!(tagged_refs.as_ref().unwrap().contains_key("keep"));
        let untag = TableUpdate::RemoveSnapshotRef {
            ref_name: "keep".into(),
        };
        let expire = TableUpdate::RemoveSnapshots {
            snapshot_ids: vec![oldest],
        };
        for updates in [vec![untag], vec![expire]] {
            let applied = apply_updates(Arc::new(tagged.clone()), None, updates.clone()).unwrap();
            let carried = refs_after(tagged_refs.as_ref(), &updates);
            assert_eq!(carried, table_refs(&applied), "{updates:?}");
            assert!(!carried.unwrap().contains_key("keep"), "{updates:?}");
        }
    }

    #[test]
    fn a_v1_answer_agrees_whatever_refs_it_states() {
        // iceberg-rust keeps no refs for v1 tables; Java's catalogs write them anyway.
        let text = r#"{"metadata-location":"m","metadata":{"format-version":1,"table-uuid":"9c12d441-03fe-4693-9a96-a0705ddf69c1","location":"s3://b/t","current-snapshot-id":-1,"properties":{},"refs":{"main":{"snapshot-id":1,"type":"branch"}}}}"#;
        let v1: TableMetadata = serde_json::from_str(
            r#"{"format-version":1,"table-uuid":"9c12d441-03fe-4693-9a96-a0705ddf69c1","location":"s3://b/t","last-updated-ms":1,"last-column-id":1,"schema":{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"x","required":true,"type":"long"}]},"partition-spec":[]}"#,
        )
        .unwrap();
        assert!(head(text).unwrap().agrees_with(&v1, None));
    }

    #[test]
    fn skipping_never_reads_past_the_end() {
        // Every prefix of a real-looking answer: no panic, and a prefix that stops before
        // the checked fields is refused.
        let text = r#"{"x":[{"y":"\\\"","z":[1,[2,{"w":null}]]}],"metadata-location":"l","metadata":{"format-version":1,"table-uuid":"u","location":"l","current-snapshot-id":5,"properties":{"k":"v"},"refs":{}}}"#;
        for end in 0..text.len() {
            let h = head(&text[..end]);
            assert!(
                h.is_none() || h.unwrap().metadata_location.is_some(),
                "prefix {end}"
            );
        }
        assert!(head(text).unwrap().complete());
    }

    #[test]
    fn a_prefix_counts_only_once_text_follows_its_last_value() {
        let text = r#"{"metadata-location":"l","metadata":{"format-version":2,"table-uuid":"u","location":"l","current-snapshot-id":5,"properties":{},"refs":{},"last-sequence-number":123,"snapshots":[{"snapshot-id":5}]}}"#;
        let whole = AnswerHead::scan(text.as_bytes()).unwrap();
        assert_eq!(whole.last_sequence_number, Some(123));
        let number_ends = text.find("123").unwrap() + 3;
        for end in 0..=text.len() {
            let prefix = AnswerHead::scan_prefix(&text.as_bytes()[..end]);
            // "12" cut from "123" must never be taken for the whole number.
            assert_eq!(prefix.is_some(), end > number_ends, "prefix {end}");
            if let Some(head) = prefix {
                assert_eq!(head, whole, "prefix {end}");
            }
        }
    }
}
