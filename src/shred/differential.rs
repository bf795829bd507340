//! Differential tests of the shredder: random schemas and random messages (valid,
//! near-valid and hostile), each generated together with what an independent model says
//! it must become, a row of exact values or a refusal. Every accepted row is read back
//! from Arrow and compared value by value, so a silent change (a rounded integer, a
//! mangled escape, a value landing in the wrong column) fails as surely as a wrong
//! accept/reject decision. The model's rules are floe's documented ones (docs/configuration.md,
//! "How JSON becomes rows"): integers exact and in range, given as numbers or strings, whole
//! numbers written `3.0` accepted; floats never infinite from a finite literal; decimals
//! exact at their scale; strings only from JSON strings; a key twice in one object, bad
//! UTF-8, nesting past `MAX_DEPTH` and anything that is not one JSON object refused.
//!
//! Cases come from a seeded generator (no extra crate; cargo-fuzz needs nightly), so a
//! failure prints its seed and message and reruns the same way.

use std::fmt::Write;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type, Float64Type, Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef};
use iceberg::spec::{ListType, NestedField, PrimitiveType, Schema, StructType, Type};
use serde_json::{Value, json};

use super::*;

/// xorshift64*: small, seedable, good enough to spread cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// The column kinds the generator draws; nested ones hold others.
#[derive(Debug, Clone)]
enum Kind {
    Bool,
    Int,
    Long,
    Double,
    Decimal,
    Date,
    Str,
    List(Box<Kind>),
    Struct(Vec<Col>),
}

#[derive(Debug, Clone)]
struct Col {
    id: i32,
    name: String,
    required: bool,
    kind: Kind,
}

const DECIMAL_PRECISION: u32 = 10;
const DECIMAL_SCALE: u32 = 2;

fn primitive(p: PrimitiveType) -> Type {
    Type::Primitive(p)
}

fn iceberg_type(kind: &Kind, next_id: &mut i32) -> Type {
    match kind {
        Kind::Bool => primitive(PrimitiveType::Boolean),
        Kind::Int => primitive(PrimitiveType::Int),
        Kind::Long => primitive(PrimitiveType::Long),
        Kind::Double => primitive(PrimitiveType::Double),
        Kind::Decimal => primitive(PrimitiveType::Decimal {
            precision: DECIMAL_PRECISION,
            scale: DECIMAL_SCALE,
        }),
        Kind::Date => primitive(PrimitiveType::Date),
        Kind::Str => primitive(PrimitiveType::String),
        Kind::List(element) => {
            *next_id += 1;
            let id = *next_id;
            let element = iceberg_type(element, next_id);
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                id, element, false,
            ))))
        }
        Kind::Struct(cols) => Type::Struct(StructType::new(
            cols.iter().map(|c| Arc::new(field(c, next_id))).collect(),
        )),
    }
}

fn field(col: &Col, next_id: &mut i32) -> NestedField {
    let ty = iceberg_type(&col.kind, next_id);
    match col.required {
        true => NestedField::required(col.id, &col.name, ty),
        false => NestedField::optional(col.id, &col.name, ty),
    }
}

/// A random schema: 1–6 columns, nested up to two levels; ids unique.
fn random_columns(rng: &mut Rng, next_id: &mut i32, depth: u32) -> Vec<Col> {
    let count = 1 + rng.below(6);
    (0..count)
        .map(|i| {
            *next_id += 1;
            let id = *next_id;
            let kind = random_kind(rng, next_id, depth);
            Col {
                id,
                // Names that need escaping in JSON now and then.
                name: match rng.chance(15) {
                    true => format!("c{i} \"q\"\\é"),
                    false => format!("c{i}"),
                },
                required: rng.chance(30),
                kind,
            }
        })
        .collect()
}

fn random_kind(rng: &mut Rng, next_id: &mut i32, depth: u32) -> Kind {
    let nested = depth < 2 && rng.chance(25);
    if nested && rng.chance(50) {
        return Kind::Struct(random_columns(rng, next_id, depth + 1));
    }
    if nested {
        return Kind::List(Box::new(random_kind(rng, next_id, 2)));
    }
    rng.pick(&[
        Kind::Bool,
        Kind::Int,
        Kind::Long,
        Kind::Double,
        Kind::Decimal,
        Kind::Date,
        Kind::Str,
    ])
    .clone()
}

fn schema_of(cols: &[Col]) -> Arc<Schema> {
    let mut next_id = 10_000;
    Arc::new(
        Schema::builder()
            .with_fields(cols.iter().map(|c| Arc::new(field(c, &mut next_id))))
            .build()
            .expect("generated schemas are valid"),
    )
}

/// JSON text for `s`, with escapes chosen at random where JSON allows a choice.
fn json_string(rng: &mut Rng, s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if rng.chance(50) => out.push_str("\\/"),
            '\n' if rng.chance(50) => out.push_str("\\n"),
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32).unwrap(),
            c if rng.chance(10) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    write!(out, "\\u{unit:04X}").unwrap();
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn random_text(rng: &mut Rng) -> String {
    let alphabet = [
        'a',
        'Z',
        '0',
        ' ',
        '"',
        '\\',
        '/',
        '\n',
        '\t',
        '\u{1}',
        '\u{1f}',
        'é',
        'ß',
        '€',
        '中',
        '\u{2028}',
        '😀',
        '\u{10FFFF}',
        '\u{FEFF}',
    ];
    let len = rng.below(12);
    (0..len).map(|_| *rng.pick(&alphabet)).collect()
}

/// What a message must become: a value, or a refusal.
#[derive(Debug)]
enum Expect {
    Value(Value),
    Refused(&'static str),
}

fn whole_i64(rng: &mut Rng) -> i64 {
    match rng.below(5) {
        0 => *rng.pick(&[0, 1, -1, i64::MAX, i64::MIN, 1 << 53, (1 << 53) + 1]),
        1 => rng.next() as i64,
        _ => (rng.next() % 2_000_001) as i64 - 1_000_000,
    }
}

/// JSON text for an integer column's value, and what it must become.
fn integer_value(rng: &mut Rng, range: (i64, i64)) -> (String, Expect) {
    let v = match range.0 == i32::MIN as i64 {
        true => whole_i64(rng).clamp(range.0, range.1),
        false => whole_i64(rng),
    };
    match rng.below(30) {
        0 => (format!("\"{v}\""), Expect::Value(json!(v))),
        1 if v.unsigned_abs() < 1 << 53 => (format!("{v}.0"), Expect::Value(json!(v))),
        2 => (format!("{}1.5", v / 10), Expect::Refused("a fraction")),
        3 => (
            format!("{}", range.1 as i128 + 1 + (rng.below(1000) as i128)),
            Expect::Refused("out of range"),
        ),
        4 => (
            format!("{}", range.0 as i128 - 1 - (rng.below(1000) as i128)),
            Expect::Refused("out of range"),
        ),
        5 => ("true".into(), Expect::Refused("a boolean for a number")),
        6 => ("\"x1\"".into(), Expect::Refused("text for a number")),
        _ => (v.to_string(), Expect::Value(json!(v))),
    }
}

fn double_value(rng: &mut Rng) -> (String, Expect) {
    let bits_value = f64::from_bits(rng.next());
    let v = match rng.below(4) {
        0 if bits_value.is_finite() => bits_value,
        1 => *rng.pick(&[0.0, -0.0, 1.5, f64::MAX, f64::MIN_POSITIVE, 5e-324, 0.1]),
        _ => (rng.below(2_000_000) as f64 - 1e6) / 64.0,
    };
    match rng.below(16) {
        0 => (
            "1e999".into(),
            Expect::Refused("infinite from a finite literal"),
        ),
        1 => ("[1.0]".into(), Expect::Refused("an array for a number")),
        2 => (
            format!("\"{v:?}\""),
            Expect::Value(json!(format!("{:x}", v.to_bits()))),
        ),
        _ => (
            format!("{v:?}"),
            Expect::Value(json!(format!("{:x}", v.to_bits()))),
        ),
    }
}

fn decimal_value(rng: &mut Rng) -> (String, Expect) {
    let limit = 10i64.pow(DECIMAL_PRECISION) - 1;
    let unscaled = (rng.next() % (2 * limit as u64 + 1)) as i64 - limit;
    let sign = if unscaled < 0 { "-" } else { "" };
    let (int, frac) = (unscaled.unsigned_abs() / 100, unscaled.unsigned_abs() % 100);
    match rng.below(16) {
        0 => (
            format!("{sign}{int}.{frac:02}1"),
            Expect::Refused("more digits than the scale"),
        ),
        1 => (
            format!("{sign}{}{int}.{frac:02}", limit as u64 + 1),
            Expect::Refused("more digits than the precision"),
        ),
        2 if frac % 10 == 0 => (
            format!("{sign}{int}.{}", frac / 10),
            Expect::Value(json!(unscaled.to_string())),
        ),
        3 => (
            format!("\"{sign}{int}.{frac:02}\""),
            Expect::Value(json!(unscaled.to_string())),
        ),
        _ => (
            format!("{sign}{int}.{frac:02}"),
            Expect::Value(json!(unscaled.to_string())),
        ),
    }
}

fn date_value(rng: &mut Rng) -> (String, Expect) {
    let days = (rng.below(2 * 2_900_000) as i64 - 2_900_000) as i32;
    let date = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)
        .unwrap()
        .checked_add_signed(chrono::TimeDelta::days(days as i64))
        .unwrap();
    match rng.below(12) {
        0 => (days.to_string(), Expect::Value(json!(days))),
        1 => ("\"2023-02-29\"".into(), Expect::Refused("no such day")),
        2 => ("true".into(), Expect::Refused("a boolean for a date")),
        _ if (0..=9999).contains(&chrono::Datelike::year(&date)) => (
            format!("\"{}\"", date.format("%Y-%m-%d")),
            Expect::Value(json!(days)),
        ),
        _ => (days.to_string(), Expect::Value(json!(days))),
    }
}

/// JSON text for a value of `kind`, and what it must become.
fn value_of(rng: &mut Rng, kind: &Kind, required: bool) -> (String, Expect) {
    if rng.chance(8) {
        return match required {
            true => ("null".into(), Expect::Refused("null for a required field")),
            false => ("null".into(), Expect::Value(Value::Null)),
        };
    }
    match kind {
        Kind::Bool => match rng.below(12) {
            0 => ("1".into(), Expect::Refused("a number for a boolean")),
            1 => ("\"true\"".into(), Expect::Refused("text for a boolean")),
            n => {
                let b = n % 2 == 0;
                (b.to_string(), Expect::Value(json!(b)))
            }
        },
        Kind::Int => integer_value(rng, (i32::MIN as i64, i32::MAX as i64)),
        Kind::Long => integer_value(rng, (i64::MIN, i64::MAX)),
        Kind::Double => double_value(rng),
        Kind::Decimal => decimal_value(rng),
        Kind::Date => date_value(rng),
        Kind::Str => match rng.below(20) {
            0 => ("12".into(), Expect::Refused("a number for a string")),
            1 => ("\"\\ud800\"".into(), Expect::Refused("a lone surrogate")),
            2 => ("\"\\x41\"".into(), Expect::Refused("an invalid escape")),
            _ => {
                let s = random_text(rng);
                (json_string(rng, &s), Expect::Value(json!(s)))
            }
        },
        Kind::List(element) => {
            if rng.chance(5) {
                return ("{}".into(), Expect::Refused("an object for a list"));
            }
            let len = rng.below(4);
            let mut texts = Vec::new();
            let mut values = Vec::new();
            let mut refused = None;
            for _ in 0..len {
                let (text, expect) = value_of(rng, element, false);
                texts.push(text);
                match expect {
                    Expect::Value(v) => values.push(v),
                    Expect::Refused(why) => refused = refused.or(Some(why)),
                }
            }
            let text = format!("[{}]", texts.join(", "));
            match refused {
                Some(why) => (text, Expect::Refused(why)),
                None => (text, Expect::Value(Value::Array(values))),
            }
        }
        Kind::Struct(cols) => object_of(rng, cols),
    }
}

/// A JSON object for `cols` (the top level or a struct), and what it must become.
fn object_of(rng: &mut Rng, cols: &[Col]) -> (String, Expect) {
    let mut members: Vec<String> = Vec::new();
    let mut values = serde_json::Map::new();
    let mut refused = None;
    for col in cols {
        if rng.chance(10) {
            values.insert(col.id.to_string(), Value::Null);
            if col.required {
                refused = refused.or(Some("a required field left out"));
            }
            continue;
        }
        let (text, expect) = value_of(rng, &col.kind, col.required);
        members.push(format!("{}:{}", json_string(rng, &col.name), text));
        match expect {
            Expect::Value(v) => {
                values.insert(col.id.to_string(), v);
            }
            Expect::Refused(why) => refused = refused.or(Some(why)),
        }
    }
    if rng.chance(4) && !members.is_empty() {
        let again = members[rng.below(members.len() as u64) as usize].clone();
        members.push(again);
        refused = Some("a key twice in one object");
    }
    // Fields the table does not have are ignored, however deep (within the limit).
    if rng.chance(20) {
        let depth = 1 + rng.below(20) as usize;
        members.push(format!(
            "\"extra\\u0021\":{}7{}",
            "[{\"a\":".repeat(depth),
            "}]".repeat(depth)
        ));
    }
    // Members in any order, with any whitespace JSON allows.
    for i in (1..members.len()).rev() {
        members.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let gap = *rng.pick(&["", " ", "\n\t ", "\r\n"]);
    let text = format!("{{{gap}{}{gap}}}", members.join(&format!(",{gap}")));
    match refused {
        Some(why) => (text, Expect::Refused(why)),
        None => (text, Expect::Value(Value::Object(values))),
    }
}

/// A whole message: usually an object for the schema, sometimes hostile.
fn message(rng: &mut Rng, cols: &[Col]) -> (Vec<u8>, Expect) {
    match rng.below(40) {
        0 => (b"[1, 2]".to_vec(), Expect::Refused("not an object")),
        1 => (b"{\"c0\": 1".to_vec(), Expect::Refused("truncated")),
        2 => (b"{} {}".to_vec(), Expect::Refused("two values")),
        3 => (
            b"{\"s\": \"\xff\"}".to_vec(),
            Expect::Refused("invalid UTF-8"),
        ),
        4 => (
            format!(
                "{{\"deep\": {}1{}}}",
                "[".repeat(MAX_DEPTH + 1),
                "]".repeat(MAX_DEPTH + 1)
            )
            .into_bytes(),
            Expect::Refused("nesting past the limit"),
        ),
        5 => (Vec::new(), Expect::Refused("empty")),
        _ => {
            let (text, expect) = object_of(rng, cols);
            (text.into_bytes(), expect)
        }
    }
}

/// Row `row` of `array` in the model's terms: integers as numbers, doubles as their bit
/// pattern in hex, decimals as unscaled text, structs keyed by field id.
fn read_back(array: &ArrayRef, row: usize, kind: &Kind) -> Value {
    if array.is_null(row) {
        return Value::Null;
    }
    match kind {
        Kind::Bool => json!(array.as_boolean().value(row)),
        Kind::Int => json!(array.as_primitive::<Int32Type>().value(row)),
        Kind::Long => json!(array.as_primitive::<Int64Type>().value(row)),
        Kind::Double => json!(format!(
            "{:x}",
            array.as_primitive::<Float64Type>().value(row).to_bits()
        )),
        Kind::Decimal => json!(
            array
                .as_primitive::<Decimal128Type>()
                .value(row)
                .to_string()
        ),
        Kind::Date => json!(array.as_primitive::<Date32Type>().value(row)),
        Kind::Str => json!(array.as_string::<i32>().value(row)),
        Kind::List(element) => {
            let items = array.as_list::<i32>().value(row);
            Value::Array(
                (0..items.len())
                    .map(|i| read_back(&items, i, element))
                    .collect(),
            )
        }
        Kind::Struct(cols) => {
            let s = array.as_struct();
            Value::Object(
                cols.iter()
                    .enumerate()
                    .map(|(i, c)| (c.id.to_string(), read_back(s.column(i), row, &c.kind)))
                    .collect(),
            )
        }
    }
}

/// Runs one seed's schema through four batches; returns (rows compared, refusals
/// matched).
fn run_seed(seed: u64) -> (usize, usize) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut next_id = 0;
    let cols = random_columns(&mut rng, &mut next_id, 0);
    let schema = schema_of(&cols);
    let mut shredder = Shredder::new(
        schema,
        DecodeOptions {
            epoch_unit: EpochUnit::Ms,
            case_sensitive: true,
            unknown_fields: UnknownFields::Ignore,
        },
    )
    .unwrap();
    let (mut compared, mut refusals) = (0, 0);
    for round in 0..4 {
        let cases: Vec<(Vec<u8>, Expect)> = (0..40).map(|_| message(&mut rng, &cols)).collect();
        let out = shredder.shred(cases.iter().map(|(bytes, _)| bytes.as_slice()));
        let refused: Vec<usize> = out.errors.iter().map(|e| e.index).collect();
        let mut row = 0;
        for (index, (bytes, expect)) in cases.iter().enumerate() {
            let text = String::from_utf8_lossy(bytes);
            let context = format!("seed {seed}, round {round}, message {index}: {text}");
            match expect {
                Expect::Refused(why) => {
                    assert!(
                        refused.contains(&index),
                        "{context}\nwas accepted, but must be refused ({why})"
                    );
                    refusals += 1;
                }
                Expect::Value(want) => {
                    assert!(
                        !refused.contains(&index),
                        "{context}\nwas refused: {:?}",
                        out.errors.iter().find(|e| e.index == index)
                    );
                    let batch = out.batch.as_ref().unwrap();
                    assert_eq!(out.row_sources[row], index, "{context}");
                    let got = Value::Object(
                        cols.iter()
                            .enumerate()
                            .map(|(i, c)| {
                                (c.id.to_string(), read_back(batch.column(i), row, &c.kind))
                            })
                            .collect(),
                    );
                    assert_eq!(&got, want, "{context}");
                    row += 1;
                    compared += 1;
                }
            }
        }
        assert_eq!(row, out.row_sources.len(), "seed {seed}: extra rows");
    }
    (compared, refusals)
}

#[test]
fn random_messages_become_exactly_what_the_model_says() {
    let seeds: u64 = std::env::var("FLOE_DIFF_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let (mut compared, mut refusals) = (0, 0);
    for seed in 0..seeds {
        let (c, r) = run_seed(seed);
        compared += c;
        refusals += r;
    }
    eprintln!("{seeds} schemas: {compared} rows compared value by value, {refusals} refusals");
    // Neither side may be starved: a generator that only made refusals (or only
    // accepted rows) would prove little.
    let total = (compared + refusals) as f64;
    assert!(compared as f64 > 0.2 * total && refusals as f64 > 0.2 * total);
}
