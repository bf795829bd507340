//! Shredder behaviour on every Iceberg type, on bad input, and on hostile input.

use std::sync::Arc;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
    Time64MicrosecondType, TimestampMicrosecondType,
};
use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType, Schema, StructType, Type};

use super::*;

fn opts() -> DecodeOptions {
    DecodeOptions {
        epoch_unit: EpochUnit::Ms,
        case_sensitive: true,
        unknown_fields: UnknownFields::Ignore,
    }
}

fn p(t: PrimitiveType) -> Box<Type> {
    Box::new(Type::Primitive(t))
}

fn all_types_schema() -> Arc<Schema> {
    let fields = vec![
        NestedField::required(1, "id", *p(PrimitiveType::Long)),
        NestedField::optional(2, "b", *p(PrimitiveType::Boolean)),
        NestedField::optional(3, "i", *p(PrimitiveType::Int)),
        NestedField::optional(4, "f", *p(PrimitiveType::Float)),
        NestedField::optional(5, "d", *p(PrimitiveType::Double)),
        NestedField::optional(
            6,
            "dec",
            *p(PrimitiveType::Decimal {
                precision: 20,
                scale: 3,
            }),
        ),
        NestedField::optional(7, "day", *p(PrimitiveType::Date)),
        NestedField::optional(8, "t", *p(PrimitiveType::Time)),
        NestedField::optional(9, "ts", *p(PrimitiveType::Timestamp)),
        NestedField::optional(10, "tstz", *p(PrimitiveType::Timestamptz)),
        NestedField::optional(11, "s", *p(PrimitiveType::String)),
        NestedField::optional(12, "u", *p(PrimitiveType::Uuid)),
        NestedField::optional(13, "bin", *p(PrimitiveType::Binary)),
        NestedField::optional(14, "fx", *p(PrimitiveType::Fixed(2))),
        NestedField::optional(
            15,
            "st",
            Type::Struct(StructType::new(vec![
                Arc::new(NestedField::required(16, "a", *p(PrimitiveType::Long))),
                Arc::new(NestedField::optional(17, "b", *p(PrimitiveType::String))),
            ])),
        ),
        NestedField::optional(
            18,
            "tags",
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                19,
                *p(PrimitiveType::String),
                false,
            )))),
        ),
        NestedField::optional(
            20,
            "m",
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(21, *p(PrimitiveType::String))),
                Arc::new(NestedField::map_value_element(
                    22,
                    *p(PrimitiveType::Long),
                    false,
                )),
            )),
        ),
    ];
    Arc::new(
        Schema::builder()
            .with_fields(fields.into_iter().map(Arc::new))
            .build()
            .unwrap(),
    )
}

fn shred(msgs: &[&str]) -> Shredded {
    let mut s = Shredder::new(all_types_schema(), opts()).unwrap();
    s.shred(msgs.iter().map(|m| m.as_bytes()))
}

#[test]
fn shreds_every_type() {
    let out = shred(&[
        r#"{"id": 9007199254740993, "b": true, "i": -7, "f": 1.5, "d": 2.25,
            "dec": "12345678901234567.891", "day": "2024-02-29", "t": "12:00:00.5",
            "ts": "2024-01-01T00:00:00", "tstz": "2024-01-01T01:00:00+01:00", "s": "é\"x",
            "u": "0190a0b1-2c3d-4e5f-8a9b-0c1d2e3f4a5b", "bin": "AAEC", "fx": "AQI=",
            "st": {"a": 1, "b": "x"}, "tags": ["a", null, "c"], "m": {"k": 1, "n": null}}"#,
        r#"{"id": 2, "tstz": 1700000000000, "dec": 0.5}"#,
    ]);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let batch = out.batch.unwrap();
    assert_eq!(batch.num_rows(), 2);
    let col = |name: &str| batch.column_by_name(name).unwrap().clone();
    assert_eq!(
        col("id").as_primitive::<Int64Type>().value(0),
        9_007_199_254_740_993
    );
    assert!(col("b").as_boolean().value(0));
    assert_eq!(col("i").as_primitive::<Int32Type>().value(0), -7);
    assert_eq!(col("f").as_primitive::<Float32Type>().value(0), 1.5);
    assert_eq!(col("d").as_primitive::<Float64Type>().value(0), 2.25);
    let dec = col("dec");
    let dec = dec.as_primitive::<Decimal128Type>();
    assert_eq!(dec.value(0), 12_345_678_901_234_567_891);
    assert_eq!(dec.value(1), 500);
    assert_eq!(col("day").as_primitive::<Date32Type>().value(0), 19_782);
    assert_eq!(
        col("t").as_primitive::<Time64MicrosecondType>().value(0),
        43_200_500_000
    );
    assert_eq!(
        col("ts")
            .as_primitive::<TimestampMicrosecondType>()
            .value(0),
        1_704_067_200_000_000
    );
    let tstz = col("tstz");
    let tstz = tstz.as_primitive::<TimestampMicrosecondType>();
    assert_eq!(tstz.value(0), 1_704_067_200_000_000);
    assert_eq!(tstz.value(1), 1_700_000_000_000_000);
    assert_eq!(col("s").as_string::<i32>().value(0), "é\"x");
    assert_eq!(col("u").as_fixed_size_binary().value(0)[0], 0x01);
    assert_eq!(col("bin").as_binary::<i64>().value(0), &[0, 1, 2]);
    assert_eq!(col("fx").as_fixed_size_binary().value(0), &[1, 2]);
    let st = col("st");
    let st = st.as_struct();
    assert_eq!(st.column(0).as_primitive::<Int64Type>().value(0), 1);
    assert!(st.is_null(1));
    let tags = col("tags");
    let tags = tags.as_list::<i32>();
    assert_eq!(tags.value(0).len(), 3);
    assert!(tags.value(0).is_null(1));
    assert!(tags.is_null(1));
    let m = col("m");
    let m = m.as_map();
    assert_eq!(m.value(0).len(), 2);
    assert!(m.is_null(1));
    // Row 1 left most fields out: they are null.
    assert!(col("s").is_null(1) && col("b").is_null(1) && col("u").is_null(1));
}

#[test]
fn bad_messages_fail_alone_and_leave_no_trace() {
    let out = shred(&[
        r#"{"id": 1, "tags": ["a"], "st": {"a": 1}}"#,
        r#"{"id": 2, "tags": ["b", "c"], "st": {"a": "oops"}}"#,
        r#"not json"#,
        r#"[1, 2]"#,
        r#"{"tags": ["x"]}"#,
        r#"{"id": 3, "i": 2147483648}"#,
        r#"{"id": 4, "dec": 1.0001}"#,
        r#"{"id": 5, "id": 6}"#,
        r#"{"id": 7, "tags": ["d"], "m": {"k": 2}} "#,
        r#"{"id": 8} trailing"#,
    ]);
    let reasons: Vec<String> = out.errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(out.row_sources, vec![0, 8], "{reasons:?}");
    assert_eq!(
        out.errors.iter().map(|e| e.index).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6, 7, 9]
    );
    assert_eq!(
        reasons[0],
        "message 1: field `st.a`: \"oops\" is not an integer"
    );
    assert!(
        reasons[1].starts_with("message 2: invalid JSON at byte 0"),
        "{}",
        reasons[1]
    );
    assert!(reasons[2].contains("must be a JSON object"));
    assert_eq!(
        reasons[3],
        "message 4: field `id`: required field is missing"
    );
    assert!(reasons[4].contains("`i`") && reasons[4].contains("out of range for int"));
    assert!(reasons[5].contains("`dec`") && reasons[5].contains("fractional digits"));
    assert!(reasons[6].contains("appears twice"));
    assert!(reasons[7].contains("trailing"));
    // The rolled-back rows left nothing behind in nested columns.
    let batch = out.batch.unwrap();
    let tags = batch
        .column_by_name("tags")
        .unwrap()
        .as_list::<i32>()
        .clone();
    assert_eq!(tags.value(1).as_string::<i32>().value(0), "d");
    assert_eq!(tags.values().len(), 2);
    let ids = batch.column_by_name("id").unwrap();
    assert_eq!(ids.as_primitive::<Int64Type>().values().as_ref(), &[1, 7]);
}

#[test]
fn hostile_input_gets_clear_errors() {
    let deep = "{\"st\":".repeat(10_000) + "1" + &"}".repeat(10_000);
    let deep_array = format!(
        "{{\"id\": 1, \"x\": {}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let mut s = Shredder::new(all_types_schema(), opts()).unwrap();
    let msgs: Vec<&[u8]> = vec![
        b"{\"id\": 1, \"s\": \"\xff\"}",
        deep.as_bytes(),
        deep_array.as_bytes(),
    ];
    let out = s.shred(msgs);
    assert_eq!(out.errors.len(), 3);
    assert!(out.errors[0].reason.contains("UTF-8 at byte 16"));
    assert!(
        out.errors[2].reason.contains("nesting"),
        "{}",
        out.errors[2]
    );
    assert!(out.batch.is_none());
}

#[test]
fn large_messages_and_empty_batches() {
    let big = format!("{{\"id\": 1, \"s\": \"{}\"}}", "x".repeat(64 << 20));
    let mut s = Shredder::new(all_types_schema(), opts()).unwrap();
    let out = s.shred([big.as_bytes()]);
    assert!(out.errors.is_empty());
    assert_eq!(
        out.batch
            .unwrap()
            .column_by_name("s")
            .unwrap()
            .as_string::<i32>()
            .value(0)
            .len(),
        64 << 20
    );
    let out = s.shred(std::iter::empty());
    assert!(out.batch.is_none() && out.errors.is_empty());
}

#[test]
fn case_insensitive_matching_when_asked() {
    let mut s = Shredder::new(
        all_types_schema(),
        DecodeOptions {
            case_sensitive: false,
            ..opts()
        },
    )
    .unwrap();
    let out = s.shred([br#"{"ID": 5, "S": "x"}"#.as_slice()]);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let batch = out.batch.unwrap();
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 5);
}

#[test]
fn failures_deep_inside_containers_are_rolled_back() {
    let out = shred(&[
        r#"{"id": 1, "tags": ["a"], "st": {"a": 1, "b": "x"}, "m": {"k": 1}}"#,
        r#"{"id": 2, "tags": ["b", 5]}"#,
        r#"{"id": 3, "st": {"a": 1, "b": 5}}"#,
        r#"{"id": 4, "st": {"b": "no a"}}"#,
        r#"{"id": 5, "m": {"k": 1, "j": "x"}}"#,
        r#"{"id": 6, "tags": ["c"], "st": {"a": 6, "b": "y"}, "m": {"z": 9}}"#,
    ]);
    assert_eq!(out.row_sources, vec![0, 5], "{:?}", out.errors);
    let batch = out.batch.unwrap();
    let tags = batch
        .column_by_name("tags")
        .unwrap()
        .as_list::<i32>()
        .clone();
    assert_eq!(
        tags.value(1).as_string::<i32>().iter().collect::<Vec<_>>(),
        vec![Some("c")]
    );
    assert_eq!(tags.values().len(), 2);
    let st = batch.column_by_name("st").unwrap().as_struct().clone();
    assert_eq!(
        st.column(0).as_primitive::<Int64Type>().values().as_ref(),
        &[1, 6]
    );
    assert_eq!(st.column(1).as_string::<i32>().value(1), "y");
    let m = batch.column_by_name("m").unwrap().as_map().clone();
    assert_eq!(m.value(1).column(0).as_string::<i32>().value(0), "z");
    assert_eq!(m.entries().len(), 2);
}

#[test]
fn keys_in_any_order_land_in_their_columns() {
    // Sorted keys (as Benthos writes them), then the schema's order, then a mix, then
    // sorted again with one key missing and an unknown one: the learned key order must
    // never put a value in the wrong column.
    let out = shred(&[
        r#"{"d": 1.5, "i": 1, "id": 1, "s": "a"}"#,
        r#"{"d": 2.5, "i": 2, "id": 2, "s": "b"}"#,
        r#"{"id": 3, "i": 3, "d": 3.5, "s": "c"}"#,
        r#"{"s": "d", "id": 4, "d": 4.5, "i": 4}"#,
        r#"{"d": 5.5, "id": 5, "other": true, "s": "e"}"#,
    ]);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let batch = out.batch.unwrap();
    let column = |name: &str| batch.column_by_name(name).unwrap().clone();
    let ids: Vec<i64> = column("id").as_primitive::<Int64Type>().values().to_vec();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    let doubles: Vec<f64> = column("d").as_primitive::<Float64Type>().values().to_vec();
    assert_eq!(doubles, [1.5, 2.5, 3.5, 4.5, 5.5]);
    let ints = column("i");
    let ints = ints.as_primitive::<Int32Type>();
    assert_eq!(
        (0..5)
            .map(|k| ints.is_valid(k).then(|| ints.value(k)))
            .collect::<Vec<_>>(),
        [Some(1), Some(2), Some(3), Some(4), None]
    );
    let strings = column("s");
    let strings: Vec<&str> = strings
        .as_string::<i32>()
        .iter()
        .map(Option::unwrap)
        .collect();
    assert_eq!(strings, ["a", "b", "c", "d", "e"]);
}

#[test]
fn unknown_fields_with_data_fail_their_message_when_rejected() {
    let schema = Arc::new(
        Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(
                    2,
                    "o",
                    Type::Struct(StructType::new(vec![
                        NestedField::optional(3, "a", Type::Primitive(PrimitiveType::String))
                            .into(),
                    ])),
                )
                .into(),
            ])
            .build()
            .unwrap(),
    );
    let reject = DecodeOptions {
        unknown_fields: UnknownFields::Reject,
        ..opts()
    };
    let mut s = Shredder::new(schema.clone(), reject).unwrap();
    let out = s.shred([
        br#"{"id": 1, "new": 5}"#.as_slice(),
        br#"{"id": 2, "o": {"a": "x", "b": [1]}}"#,
        br#"{"id": 3, "empty": null, "e2": [], "e3": {"x": [null, {}]}}"#,
        br#"{"id": 4}"#,
    ]);
    let errors: Vec<(usize, &str, &str)> = out
        .errors
        .iter()
        .map(|e| (e.index, e.path.as_str(), e.reason.as_str()))
        .collect();
    assert_eq!(
        errors,
        vec![(0, "new", NOT_A_COLUMN), (1, "o.b", NOT_A_COLUMN)],
        "fields holding no data are skipped"
    );
    assert_eq!(out.row_sources, vec![2, 3]);
    let mut ignoring = Shredder::new(schema, opts()).unwrap();
    let out = ignoring.shred([br#"{"id": 1, "new": 5, "o": {"b": 1}}"#.as_slice()]);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
}
