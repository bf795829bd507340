//! Schema inference from sample messages, for tables created on first write.
//!
//! JSON integers become `long`, other numbers `double`, strings `string`, booleans
//! `boolean`, objects `struct` and arrays `list`. Fields seen only as `null` are left
//! out: their type is unknown, and guessing would fix a wrong type into the table.
//! Every inferred field is optional.

use std::sync::Arc;

use iceberg::spec::{
    ListType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};
use serde_json::{Map, Value};

/// Infers a schema covering every field of every object in `messages`.
/// Messages that are not JSON objects are ignored; an error is returned when none is usable.
pub fn infer_schema<'m>(messages: impl IntoIterator<Item = &'m [u8]>) -> Result<Schema, String> {
    let mut merged: Option<Map<String, Value>> = None;
    for bytes in messages {
        let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(bytes) else {
            continue;
        };
        match &mut merged {
            None => merged = Some(obj),
            Some(m) => merge_objects(m, obj),
        }
    }
    let sample = merged.ok_or("no message of the batch is a JSON object to infer a schema from")?;
    let mut next_id = 1;
    let fields = struct_fields(&sample, &mut next_id);
    if fields.is_empty() {
        return Err("no field with a non-null value to infer a schema from".into());
    }
    Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| format!("inferred schema is invalid: {e}"))
}

/// Adds fields of `more` missing (or null) in `into`, recursing into objects.
fn merge_objects(into: &mut Map<String, Value>, more: Map<String, Value>) {
    for (k, v) in more {
        match (into.get_mut(&k), v) {
            (Some(Value::Object(a)), Value::Object(b)) => merge_objects(a, b),
            (Some(existing), v) if existing.is_null() => *existing = v,
            (Some(_), _) => {}
            (None, v) => {
                into.insert(k, v);
            }
        }
    }
}

fn struct_fields(obj: &Map<String, Value>, next_id: &mut i32) -> Vec<NestedFieldRef> {
    // Ids of a struct's fields are assigned before those of nested types, as Iceberg does.
    let typed: Vec<(&String, &Value)> = obj.iter().filter(|(_, v)| infer_possible(v)).collect();
    let ids: Vec<i32> = typed.iter().map(|_| take_id(next_id)).collect();
    typed
        .into_iter()
        .zip(ids)
        .map(|((name, value), id)| {
            let ty = infer_type(value, next_id).expect("filtered to inferable values");
            Arc::new(NestedField::optional(id, name.clone(), ty))
        })
        .collect()
}

fn take_id(next_id: &mut i32) -> i32 {
    let id = *next_id;
    *next_id += 1;
    id
}

fn infer_possible(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Array(items) => items.iter().any(infer_possible),
        Value::Object(m) => m.values().any(infer_possible),
        _ => true,
    }
}

fn infer_type(v: &Value, next_id: &mut i32) -> Option<Type> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(_) => Type::Primitive(PrimitiveType::Boolean),
        Value::Number(n) if n.is_i64() || n.is_u64() => Type::Primitive(PrimitiveType::Long),
        Value::Number(_) => Type::Primitive(PrimitiveType::Double),
        Value::String(_) => Type::Primitive(PrimitiveType::String),
        Value::Object(m) => Type::Struct(StructType::new(struct_fields(m, next_id))),
        Value::Array(items) => {
            let element = items.iter().find(|v| infer_possible(v))?;
            let id = take_id(next_id);
            let ty = infer_type(element, next_id)?;
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                id, ty, false,
            ))))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infers_types_and_unions_fields() {
        let msgs: Vec<&[u8]> = vec![
            br#"{"id": 1, "v": 1.5, "s": "x", "b": true, "n": null}"#,
            br#"{"id": 2, "o": {"a": 1}, "l": [null, "x"], "n": null}"#,
            b"not json",
        ];
        let schema = infer_schema(msgs).unwrap();
        let t = |name: &str| schema.field_by_name(name).unwrap().field_type.to_string();
        assert_eq!(t("id"), "long");
        assert_eq!(t("v"), "double");
        assert_eq!(t("s"), "string");
        assert_eq!(t("b"), "boolean");
        assert!(t("o").starts_with("struct"));
        assert!(t("l").starts_with("list"));
        assert!(schema.field_by_name("n").is_none());
        assert!(schema.field_by_name("o.a").is_some());
    }

    #[test]
    fn refuses_batches_with_nothing_to_infer() {
        assert!(infer_schema(vec![b"[1]".as_slice()]).is_err());
        assert!(infer_schema(vec![br#"{"a": null}"#.as_slice()]).is_err());
    }
}
