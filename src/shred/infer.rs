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

use std::sync::Arc;

use iceberg::spec::{
    ListType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};
use serde_json::Value;

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

    /// Whether a type can be chosen: some value held data.
    pub fn is_typed(&self) -> bool {
        match self {
            Shape::Unknown => false,
            Shape::Struct(fields) => fields.iter().any(|(_, s)| s.is_typed()),
            Shape::List(element) => element.is_typed(),
            _ => true,
        }
    }

    /// The Iceberg type, with field ids taken from `next_id`; `None` when untyped.
    pub fn to_type(&self, next_id: &mut i32) -> Option<Type> {
        Some(match self {
            Shape::Unknown => return None,
            Shape::Bool => Type::Primitive(PrimitiveType::Boolean),
            Shape::Long => Type::Primitive(PrimitiveType::Long),
            Shape::Double => Type::Primitive(PrimitiveType::Double),
            Shape::String => Type::Primitive(PrimitiveType::String),
            Shape::Struct(fields) => {
                let fields = typed_fields(fields, next_id);
                if fields.is_empty() {
                    return None;
                }
                Type::Struct(StructType::new(fields))
            }
            Shape::List(element) => {
                if !element.is_typed() {
                    return None;
                }
                let id = take_id(next_id);
                let ty = element.to_type(next_id)?;
                Type::List(ListType::new(Arc::new(NestedField::list_element(
                    id, ty, false,
                ))))
            }
        })
    }
}

/// Whether two field names are the same under the configured matching.
pub fn same_name(a: &str, b: &str, case_sensitive: bool) -> bool {
    if case_sensitive {
        a == b
    } else {
        a.to_lowercase() == b.to_lowercase()
    }
}

/// Optional fields for the typed `shapes`. The fields of a struct take their ids before
/// any nested field does, as Iceberg assigns them.
pub fn typed_fields(shapes: &[(String, Shape)], next_id: &mut i32) -> Vec<NestedFieldRef> {
    let typed: Vec<&(String, Shape)> = shapes.iter().filter(|(_, s)| s.is_typed()).collect();
    let ids: Vec<i32> = typed.iter().map(|_| take_id(next_id)).collect();
    typed
        .into_iter()
        .zip(ids)
        .filter_map(|((name, shape), id)| {
            let ty = shape.to_type(next_id)?;
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
) -> Result<Schema, String> {
    let mut merged: Option<Shape> = None;
    for bytes in messages {
        let Ok(v @ Value::Object(_)) = serde_json::from_slice::<Value>(bytes) else {
            continue;
        };
        let shape = Shape::of(&v, case_sensitive);
        match &mut merged {
            None => merged = Some(shape),
            Some(m) => m.merge(shape, case_sensitive),
        }
    }
    let Some(Shape::Struct(fields)) = merged else {
        return Err("no message of the batch is a JSON object to infer a schema from".into());
    };
    let fields = typed_fields(&fields, &mut 1);
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

    fn infer(msgs: &[&str]) -> Schema {
        infer_schema(msgs.iter().map(|m| m.as_bytes()), true).unwrap()
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
        let schema =
            infer_schema([br#"{"Name": "a"}"#.as_slice(), br#"{"name": "b"}"#], false).unwrap();
        assert_eq!(schema.as_struct().fields().len(), 1);
    }

    #[test]
    fn refuses_batches_with_nothing_to_infer() {
        assert!(infer_schema(vec![b"[1]".as_slice()], true).is_err());
        assert!(infer_schema(vec![br#"{"a": null}"#.as_slice()], true).is_err());
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
