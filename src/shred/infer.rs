//! Types inferred from JSON values, for tables created on first write and for columns
//! added by schema evolution.
//!
//! Integers become `long`, other numbers `double` (a field holding both, `double`),
//! strings `string` (an RFC 3339 text stays a string: only an explicit schema makes it a
//! timestamp), booleans `boolean`, objects `struct` and arrays `list`. The values of a
//! whole group are merged before a type is chosen, so a field that is `null`, `[]` or
//! `{}` in one message takes its type from another; a field with no typed value anywhere
//! is left out (it holds no data), and guessing would fix a wrong type into the table.
//! Every inferred field is optional.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{
    ListType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};
use serde_json::Value;

/// Explicit types by field path (`a.b`; a list's element is `a.element`), from a
/// message's schema metadata or the output's type mapping: they win over inference for
/// fields being added, and type a field whose values are all `null`.
#[derive(Debug, Default, Clone)]
pub struct TypeHints {
    types: HashMap<String, PrimitiveType>,
    /// Paths compare lower-cased (`case_sensitive_columns: false`).
    folded: bool,
}

impl TypeHints {
    /// A JSON object of path → Iceberg primitive type (`"long"`, `"timestamptz"`,
    /// `"decimal(12, 2)"`, …).
    pub fn parse(json: &[u8]) -> Result<TypeHints, String> {
        let map: HashMap<String, Value> = serde_json::from_slice(json)
            .map_err(|e| format!("type hints are not a JSON object: {e}"))?;
        map.into_iter()
            .map(|(path, ty)| {
                let parsed = serde_json::from_value::<PrimitiveType>(ty.clone()).map_err(|_| {
                    format!("type hint for `{path}`: {ty} is not an Iceberg primitive type")
                })?;
                if let PrimitiveType::Decimal { precision, scale } = parsed
                    && (!(1..=38).contains(&precision) || scale > precision)
                {
                    return Err(format!(
                        "type hint for `{path}`: decimal({precision}, {scale}) needs a precision \
                         of 1 to 38 and a scale no larger"
                    ));
                }
                Ok((path, parsed))
            })
            .collect::<Result<_, String>>()
            .map(|types| TypeHints {
                types,
                folded: false,
            })
    }

    /// The same hints, their paths matched whatever their case (as columns are with
    /// `case_sensitive_columns: false`).
    pub fn case_insensitive(self) -> TypeHints {
        TypeHints {
            types: self
                .types
                .into_iter()
                .map(|(path, ty)| (path.to_lowercase(), ty))
                .collect(),
            folded: true,
        }
    }

    /// Adds `other`'s hints for paths not hinted yet (the first message's hint wins).
    pub fn merge(&mut self, other: TypeHints) {
        if self.types.is_empty() {
            self.folded = other.folded;
        }
        for (path, ty) in other.types {
            self.types.entry(path).or_insert(ty);
        }
    }

    pub fn get(&self, path: &str) -> Option<&PrimitiveType> {
        match self.folded {
            true => self.types.get(&path.to_lowercase()),
            false => self.types.get(path),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// The hints for the paths `keep` accepts.
    pub fn only(self, keep: impl Fn(&str) -> bool) -> TypeHints {
        TypeHints {
            types: self.types.into_iter().filter(|(p, _)| keep(p)).collect(),
            folded: self.folded,
        }
    }
}

/// A field of `schema` with a nanosecond timestamp type, which only v3 tables hold.
pub fn nanosecond_field(schema: &Schema) -> Option<String> {
    schema
        .as_struct()
        .fields()
        .iter()
        .flat_map(nested)
        .find(|f| {
            matches!(
                f.field_type.as_ref(),
                Type::Primitive(PrimitiveType::TimestampNs | PrimitiveType::TimestamptzNs)
            )
        })
        .and_then(|f| schema.name_by_field_id(f.id).map(str::to_string))
}

/// `parent.name`, or `name` at the top level.
pub fn child_path(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}

/// Whether a value holds data: anything but `null`, or arrays and objects of only those.
pub fn holds_data(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Array(items) => items.iter().any(holds_data),
        Value::Object(m) => m.values().any(holds_data),
        _ => true,
    }
}

/// What the values of one field across a group say about its type.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// Only `null`, `[]` or `{}` so far.
    Unknown,
    Bool,
    Long,
    Double,
    String,
    /// Fields in the order first seen (JSON objects are read with sorted keys).
    Struct(Vec<(String, Shape)>),
    List(Box<Shape>),
}

impl Shape {
    /// The shape of one value; field names are matched with `case_sensitive`.
    pub fn of(v: &Value, case_sensitive: bool) -> Shape {
        match v {
            Value::Null => Shape::Unknown,
            Value::Bool(_) => Shape::Bool,
            Value::Number(n) if n.is_i64() || n.is_u64() => Shape::Long,
            Value::Number(_) => Shape::Double,
            Value::String(_) => Shape::String,
            Value::Array(items) => {
                let mut element = Shape::Unknown;
                for item in items {
                    element.merge(Shape::of(item, case_sensitive), case_sensitive);
                }
                Shape::List(Box::new(element))
            }
            Value::Object(m) => {
                let mut s = Shape::Struct(Vec::new());
                for (k, v) in m {
                    s.merge_field(k, Shape::of(v, case_sensitive), case_sensitive);
                }
                s
            }
        }
    }

    /// Merges what another value says. Integers and floats make a double; otherwise the
    /// first type seen wins, and a value of another type fails its message when shredded.
    pub fn merge(&mut self, other: Shape, case_sensitive: bool) {
        match (&mut *self, other) {
            (_, Shape::Unknown) => {}
            (Shape::Unknown, other) => *self = other,
            (Shape::Long, Shape::Double) => *self = Shape::Double,
            (Shape::Struct(_), Shape::Struct(fields)) => {
                for (name, shape) in fields {
                    self.merge_field(&name, shape, case_sensitive);
                }
            }
            (Shape::List(element), Shape::List(other)) => element.merge(*other, case_sensitive),
            _ => {}
        }
    }

    /// Merges `shape` into the struct's field `name` (added when new).
    pub fn merge_field(&mut self, name: &str, shape: Shape, case_sensitive: bool) {
        let Shape::Struct(fields) = self else {
            return;
        };
        match fields
            .iter_mut()
            .find(|(n, _)| same_name(n, name, case_sensitive))
        {
            Some((_, existing)) => existing.merge(shape, case_sensitive),
            None => fields.push((name.to_string(), shape)),
        }
    }

    /// Whether a type can be chosen for the field at `path`: some value held data, or
    /// a hint names its type.
    pub fn is_typed(&self, path: &str, hints: &TypeHints) -> bool {
        match self {
            Shape::Unknown => hints.get(path).is_some(),
            Shape::Struct(fields) => fields
                .iter()
                .any(|(name, s)| s.is_typed(&child_path(path, name), hints)),
            Shape::List(element) => element.is_typed(&child_path(path, "element"), hints),
            _ => true,
        }
    }

    /// The Iceberg type of the field at `path` (a hint for it wins over a primitive
    /// shape), with field ids taken from `next_id`; `None` when untyped.
    pub fn to_type(&self, path: &str, hints: &TypeHints, next_id: &mut i32) -> Option<Type> {
        if let (
            Some(hinted),
            Shape::Unknown | Shape::Bool | Shape::Long | Shape::Double | Shape::String,
        ) = (hints.get(path), self)
        {
            return Some(Type::Primitive(hinted.clone()));
        }
        Some(match self {
            Shape::Unknown => return None,
            Shape::Bool => Type::Primitive(PrimitiveType::Boolean),
            Shape::Long => Type::Primitive(PrimitiveType::Long),
            Shape::Double => Type::Primitive(PrimitiveType::Double),
            Shape::String => Type::Primitive(PrimitiveType::String),
            Shape::Struct(fields) => {
                let fields = typed_fields(fields, path, hints, next_id);
                if fields.is_empty() {
                    return None;
                }
                Type::Struct(StructType::new(fields))
            }
            Shape::List(element) => {
                let element_path = child_path(path, "element");
                if !element.is_typed(&element_path, hints) {
                    return None;
                }
                let id = take_id(next_id);
                let ty = element.to_type(&element_path, hints, next_id)?;
                Type::List(ListType::new(Arc::new(NestedField::list_element(
                    id, ty, false,
                ))))
            }
        })
    }
}

/// A field and every field nested in it.
pub(crate) fn nested(field: &NestedFieldRef) -> Vec<NestedFieldRef> {
    let mut out = vec![field.clone()];
    match field.field_type.as_ref() {
        Type::Struct(s) => s.fields().iter().for_each(|f| out.extend(nested(f))),
        Type::List(l) => out.extend(nested(&l.element_field)),
        Type::Map(m) => {
            out.extend(nested(&m.key_field));
            out.extend(nested(&m.value_field));
        }
        Type::Primitive(_) => {}
    }
    out
}

/// Whether two field names are the same under the configured matching.
pub fn same_name(a: &str, b: &str, case_sensitive: bool) -> bool {
    if case_sensitive {
        a == b
    } else {
        a.to_lowercase() == b.to_lowercase()
    }
}

/// Optional fields for the typed `shapes` of the struct at `path`. The fields of a
/// struct take their ids before any nested field does, as Iceberg assigns them.
pub fn typed_fields(
    shapes: &[(String, Shape)],
    path: &str,
    hints: &TypeHints,
    next_id: &mut i32,
) -> Vec<NestedFieldRef> {
    let typed: Vec<(String, &String, &Shape)> = shapes
        .iter()
        .map(|(name, s)| (child_path(path, name), name, s))
        .filter(|(p, _, s)| s.is_typed(p, hints))
        .collect();
    let ids: Vec<i32> = typed.iter().map(|_| take_id(next_id)).collect();
    typed
        .into_iter()
        .zip(ids)
        .filter_map(|((field_path, name, shape), id)| {
            let ty = shape.to_type(&field_path, hints, next_id)?;
            Some(Arc::new(NestedField::optional(id, name.clone(), ty)))
        })
        .collect()
}

fn take_id(next_id: &mut i32) -> i32 {
    let id = *next_id;
    *next_id += 1;
    id
}

/// Infers a schema covering every field of every object in `messages`.
/// Messages that are not JSON objects are ignored; an error is returned when none is usable.
pub fn infer_schema<'m>(
    messages: impl IntoIterator<Item = &'m [u8]>,
    case_sensitive: bool,
    hints: &TypeHints,
) -> Result<Schema, String> {
    let mut merged: Option<Shape> = None;
    let mut first_unreadable: Option<String> = None;
    for bytes in messages {
        let v = match serde_json::from_slice::<Value>(bytes) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => continue,
            Err(e) => {
                first_unreadable.get_or_insert_with(|| e.to_string());
                continue;
            }
        };
        let shape = Shape::of(&v, case_sensitive);
        match &mut merged {
            None => merged = Some(shape),
            Some(m) => m.merge(shape, case_sensitive),
        }
    }
    let Some(Shape::Struct(fields)) = merged else {
        let why =
            first_unreadable.map_or(String::new(), |e| format!(" (the first unreadable: {e})"));
        return Err(format!(
            "no message of the batch is a JSON object to infer a schema from{why}"
        ));
    };
    let fields = typed_fields(&fields, "", hints, &mut 1);
    if fields.is_empty() {
        return Err("no field with a non-null value to infer a schema from".into());
    }
    Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| format!("inferred schema is invalid: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_to_infer_from_says_why() {
        let deep = "{\"x\":".repeat(200) + "1" + &"}".repeat(200);
        let e = infer_schema([deep.as_bytes()], true, &TypeHints::default()).unwrap_err();
        assert!(e.contains("recursion limit"), "{e}");
        let e = infer_schema([b"[1]".as_slice()], true, &TypeHints::default()).unwrap_err();
        assert!(!e.contains("unreadable"), "{e}");
    }

    fn infer(msgs: &[&str]) -> Schema {
        infer_schema(
            msgs.iter().map(|m| m.as_bytes()),
            true,
            &TypeHints::default(),
        )
        .unwrap()
    }

    fn type_of(schema: &Schema, name: &str) -> String {
        schema.field_by_name(name).unwrap().field_type.to_string()
    }

    #[test]
    fn infers_types_and_unions_fields() {
        let schema = infer(&[
            r#"{"id": 1, "v": 1.5, "s": "x", "b": true, "n": null}"#,
            r#"{"id": 2, "o": {"a": 1}, "l": [null, "x"], "n": null}"#,
            "not json",
        ]);
        assert_eq!(type_of(&schema, "id"), "long");
        assert_eq!(type_of(&schema, "v"), "double");
        assert_eq!(type_of(&schema, "s"), "string");
        assert_eq!(type_of(&schema, "b"), "boolean");
        assert!(type_of(&schema, "o").starts_with("struct"));
        assert!(type_of(&schema, "l").starts_with("list"));
        assert!(schema.field_by_name("n").is_none());
        assert!(schema.field_by_name("o.a").is_some());
    }

    #[test]
    fn integers_and_floats_of_one_field_make_a_double() {
        let schema = infer(&[
            r#"{"x": 1, "l": [1, 2.5], "o": {"y": 2}}"#,
            r#"{"x": 2.5, "o": {"y": 1e3}}"#,
        ]);
        assert_eq!(type_of(&schema, "x"), "double");
        assert_eq!(type_of(&schema, "o.y"), "double");
        let Type::List(l) = schema.field_by_name("l").unwrap().field_type.as_ref() else {
            panic!("a list")
        };
        assert_eq!(l.element_field.field_type.to_string(), "double");
    }

    #[test]
    fn empty_first_values_wait_for_a_typed_one() {
        let schema = infer(&[
            r#"{"id": 1, "a": null, "l": [], "o": {}, "deep": {"x": null}}"#,
            r#"{"id": 2, "a": "x", "l": [{"k": true}], "o": {"p": 1}, "deep": {"x": [3]}}"#,
        ]);
        assert_eq!(type_of(&schema, "a"), "string");
        assert_eq!(type_of(&schema, "l.element.k"), "boolean");
        assert_eq!(type_of(&schema, "o.p"), "long");
        assert_eq!(type_of(&schema, "deep.x.element"), "long");
    }

    #[test]
    fn timestamps_in_strings_stay_strings() {
        let schema = infer(&[r#"{"ts": "2026-12-01T00:00:00Z"}"#]);
        assert_eq!(type_of(&schema, "ts"), "string");
    }

    #[test]
    fn case_insensitive_names_are_one_field() {
        let schema = infer_schema(
            [br#"{"Name": "a"}"#.as_slice(), br#"{"name": "b"}"#],
            false,
            &TypeHints::default(),
        )
        .unwrap();
        assert_eq!(schema.as_struct().fields().len(), 1);
    }

    #[test]
    fn refuses_batches_with_nothing_to_infer() {
        assert!(infer_schema(vec![b"[1]".as_slice()], true, &TypeHints::default()).is_err());
        assert!(
            infer_schema(
                vec![br#"{"a": null}"#.as_slice()],
                true,
                &TypeHints::default()
            )
            .is_err()
        );
    }

    #[test]
    fn hints_win_over_inference_and_type_null_fields() {
        let hints = TypeHints::parse(
            br#"{"ts": "timestamptz", "o.amount": "decimal(12, 2)", "n": "int", "l.element": "float"}"#,
        )
        .unwrap();
        let schema = infer_schema(
            [
                br#"{"ts": "2026-12-01T00:00:00Z", "o": {"amount": 1.5}, "n": null, "l": [1]}"#
                    .as_slice(),
            ],
            true,
            &hints,
        )
        .unwrap();
        assert_eq!(type_of(&schema, "ts"), "timestamptz");
        assert_eq!(type_of(&schema, "o.amount"), "decimal(12, 2)");
        assert_eq!(type_of(&schema, "n"), "int");
        assert_eq!(type_of(&schema, "l.element"), "float");
        assert!(TypeHints::parse(br#"{"x": "nonsense"}"#).is_err());
        assert!(TypeHints::parse(br#"{"x": "decimal(39, 2)"}"#).is_err());
        let folded = TypeHints::parse(br#"{"Meta.At": "date"}"#)
            .unwrap()
            .case_insensitive();
        assert!(folded.get("meta.at").is_some() && folded.get("META.AT").is_some());
        assert!(TypeHints::parse(b"[1]").is_err());
    }

    #[test]
    fn holds_data_looks_through_empty_containers() {
        let v = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        assert!(!holds_data(&v("null")));
        assert!(!holds_data(&v(r#"{"a": [null, {}], "b": {}}"#)));
        assert!(holds_data(&v(r#"{"a": [null, 0]}"#)));
        assert!(holds_data(&v(r#""""#)));
    }
}
