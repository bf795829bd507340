//! What a table's schema must become to hold a group's messages.
//!
//! Walks the messages that failed to shred against the schema, field by field, and
//! returns the evolved schema: new fields added as optional columns at any depth (in
//! structs, list elements and map values), required fields relaxed to optional where a
//! message has them null or missing (never an identifier field), and types widened where
//! Iceberg allows and a value needs it (int → long, float → double, decimal precision
//! up). Anything else (a string in a long column) is left alone: those messages keep
//! their precise errors.

use std::collections::HashSet;
use std::sync::Arc;

use iceberg::spec::{ListType, MapType, NestedFieldRef, PrimitiveType, Schema, StructType, Type};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::shred::convert::parse_i64;
use crate::shred::infer::{Shape, TypeHints, same_name, typed_fields};

/// The evolved schema and what changed, or `None` when the messages need no change.
pub struct Evolution {
    pub schema: Schema,
    /// One line per change, for the log.
    pub changes: Vec<String>,
}

/// Plans the evolution of `schema` (whose table has assigned field ids up to
/// `last_column_id`) for `messages`; the new schema gets `schema_id`. The table's
/// identifier fields and the fields `keep_required` stay required.
pub fn plan(
    schema: &Schema,
    (last_column_id, schema_id): (i32, i32),
    messages: &[Value],
    (case_sensitive, hints): (bool, &TypeHints),
    keep_required: &[i32],
) -> Result<Option<Evolution>> {
    let objects: Vec<&Map<String, Value>> = messages.iter().filter_map(Value::as_object).collect();
    let mut planner = Planner {
        next_id: last_column_id.max(schema.highest_field_id()) + 1,
        case_sensitive,
        hints,
        identifier_ids: schema
            .identifier_field_ids()
            .chain(keep_required.iter().copied())
            .collect(),
        changes: Vec::new(),
    };
    let fields = planner.evolve_fields(schema.as_struct().fields(), &objects, "");
    if planner.changes.is_empty() {
        return Ok(None);
    }
    let schema = Schema::builder()
        .with_schema_id(schema_id)
        .with_fields(fields)
        .with_identifier_field_ids(schema.identifier_field_ids())
        .build()
        .map_err(|e| Error::internal(format!("evolved schema is invalid: {e}")))?;
    Ok(Some(Evolution {
        schema,
        changes: planner.changes,
    }))
}

struct Planner<'h> {
    next_id: i32,
    case_sensitive: bool,
    /// Explicit types for fields being added (see [`TypeHints`]).
    hints: &'h TypeHints,
    identifier_ids: HashSet<i32>,
    changes: Vec<String>,
}

impl Planner<'_> {
    /// A struct's fields evolved for `objects` (its values in the messages), with the
    /// fields no existing one matches added at the end.
    fn evolve_fields(
        &mut self,
        fields: &[NestedFieldRef],
        objects: &[&Map<String, Value>],
        path: &str,
    ) -> Vec<NestedFieldRef> {
        let mut out = Vec::with_capacity(fields.len());
        for field in fields {
            let mut values = Vec::new();
            let mut null_or_missing = false;
            for o in objects {
                match self.get(o, &field.name) {
                    Some(v) if !v.is_null() => values.push(v),
                    _ => null_or_missing = true,
                }
            }
            let field_path = join(path, &field.name);
            let mut evolved = field.as_ref().clone();
            if null_or_missing && field.required && !self.identifier_ids.contains(&field.id) {
                evolved.required = false;
                self.changes.push(format!(
                    "`{field_path}` made optional (a message has it null)"
                ));
            }
            evolved.field_type =
                Box::new(self.evolve_type(&field.field_type, &values, &field_path));
            out.push(Arc::new(evolved));
        }
        let mut new = Shape::Struct(Vec::new());
        for o in objects {
            for (key, value) in o.iter() {
                if !fields
                    .iter()
                    .any(|f| same_name(&f.name, key, self.case_sensitive))
                {
                    new.merge_field(
                        key,
                        Shape::of(value, self.case_sensitive),
                        self.case_sensitive,
                    );
                }
            }
        }
        let Shape::Struct(mut new) = new else {
            unreachable!("built as a struct")
        };
        // Names differing from a sibling's only in case would be ambiguous to engines
        // that match case-insensitively (Spark, Trino): not added; their messages keep
        // an error that says so.
        let mut taken: Vec<String> = fields.iter().map(|f| f.name.to_lowercase()).collect();
        new.retain(|(name, _)| {
            let lower = name.to_lowercase();
            let twin = taken.contains(&lower);
            taken.push(lower);
            !twin
        });
        for added in typed_fields(&new, path, self.hints, &mut self.next_id) {
            self.changes.push(format!(
                "`{}` added as {}",
                join(path, &added.name),
                added.field_type
            ));
            out.push(added);
        }
        out
    }

    fn get<'v>(&self, o: &'v Map<String, Value>, name: &str) -> Option<&'v Value> {
        if self.case_sensitive {
            return o.get(name);
        }
        o.iter()
            .find(|(k, _)| same_name(k, name, false))
            .map(|(_, v)| v)
    }

    /// `ty` evolved for the non-null `values` a field holds.
    fn evolve_type(&mut self, ty: &Type, values: &[&Value], path: &str) -> Type {
        match ty {
            Type::Struct(s) => {
                let objects: Vec<&Map<String, Value>> =
                    values.iter().filter_map(|v| v.as_object()).collect();
                if objects.is_empty() {
                    return ty.clone();
                }
                Type::Struct(StructType::new(self.evolve_fields(
                    s.fields(),
                    &objects,
                    path,
                )))
            }
            Type::List(l) => {
                let elements: Vec<&Value> = values
                    .iter()
                    .filter_map(|v| v.as_array())
                    .flatten()
                    .collect();
                let element =
                    self.evolve_child(&l.element_field, &elements, &join(path, "element"));
                Type::List(ListType::new(element))
            }
            Type::Map(m) => {
                let entries: Vec<&Value> = values
                    .iter()
                    .filter_map(|v| v.as_object())
                    .flat_map(|o| o.values())
                    .collect();
                let value = self.evolve_child(&m.value_field, &entries, &join(path, "value"));
                Type::Map(MapType::new(m.key_field.clone(), value))
            }
            Type::Primitive(p) => match widened(p, values) {
                Some(wider) => {
                    self.changes
                        .push(format!("`{path}` widened from {p} to {wider}"));
                    Type::Primitive(wider)
                }
                None => ty.clone(),
            },
        }
    }

    /// A list element or map value field evolved for its values (nulls relax it).
    fn evolve_child(
        &mut self,
        field: &NestedFieldRef,
        values: &[&Value],
        path: &str,
    ) -> NestedFieldRef {
        let mut evolved = field.as_ref().clone();
        if field.required && values.iter().any(|v| v.is_null()) {
            evolved.required = false;
            self.changes
                .push(format!("`{path}` made optional (a message has a null one)"));
        }
        let typed: Vec<&Value> = values.iter().copied().filter(|v| !v.is_null()).collect();
        evolved.field_type = Box::new(self.evolve_type(&field.field_type, &typed, path));
        Arc::new(evolved)
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// The wider type some value needs, where Iceberg allows the promotion: an integer
/// beyond int's range makes a long, a number beyond float's range a double, and a
/// decimal with more integer digits than its precision leaves room for more precision
/// (same scale, at most 38).
fn widened(p: &PrimitiveType, values: &[&Value]) -> Option<PrimitiveType> {
    match p {
        PrimitiveType::Int => values
            .iter()
            .any(|v| {
                number_text(v)
                    .is_some_and(|t| parse_i64(&t).is_ok_and(|x| i32::try_from(x).is_err()))
            })
            .then_some(PrimitiveType::Long),
        PrimitiveType::Float => values
            .iter()
            .any(|v| {
                number_text(v)
                    .and_then(|t| t.parse::<f64>().ok())
                    .is_some_and(|x| x.is_finite() && (x as f32).is_infinite())
            })
            .then_some(PrimitiveType::Double),
        PrimitiveType::Decimal { precision, scale } => {
            let needed = values
                .iter()
                .filter_map(|v| number_text(v))
                .filter_map(|t| decimal_digits(&t))
                .filter(|&(_, fraction)| fraction <= *scale)
                .map(|(integer, _)| integer.saturating_add(*scale))
                .max()?;
            (needed > *precision && needed <= 38).then_some(PrimitiveType::Decimal {
                precision: needed,
                scale: *scale,
            })
        }
        _ => None,
    }
}

/// The text of a JSON number, or of a string holding one (the shredder accepts both),
/// untrimmed as the shredder reads it: a value it would refuse widens nothing.
fn number_text(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// Integer digits (without leading zeros) and fraction digits (without trailing zeros)
/// of a decimal number, plain (`123.45`, `+.5`) or with an exponent (`1.2345e17`, as a
/// JSON number of 1e16 or more with a fraction is printed): every form the shredder's
/// `parse_decimal` takes, so no value it would store fails for want of widening;
/// `None` for anything else.
fn decimal_digits(text: &str) -> Option<(u32, u32)> {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, exponent_value(e.strip_prefix('+').unwrap_or(e))?),
        None => (unsigned, 0),
    };
    let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (integer.is_empty() && fraction.is_empty()) || !all_digits(integer) || !all_digits(fraction)
    {
        return None;
    }
    // The significant digits, and where the point falls among them.
    let all = format!("{integer}{fraction}");
    let significant = all.trim_start_matches('0');
    let point = integer.len() as i64 - (all.len() - significant.len()) as i64 + exponent;
    let significant = significant.trim_end_matches('0');
    if significant.is_empty() {
        return Some((0, 0));
    }
    let clamp = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
    Some((clamp(point), clamp(significant.len() as i64 - point)))
}

/// An exponent's value; one beyond i64 is as good as infinite (no decimal holds it), so
/// it is capped where adding a mantissa's length cannot overflow.
fn exponent_value(text: &str) -> Option<i64> {
    const CAP: i64 = 1 << 40;
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !all_digits(digits) {
        return None;
    }
    let sign = if digits.len() < text.len() { -1 } else { 1 };
    Some(digits.parse::<i64>().unwrap_or(CAP).min(CAP) * sign)
}

fn all_digits(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(json: &str) -> Schema {
        serde_json::from_str(json).unwrap()
    }

    fn values(msgs: &[&str]) -> Vec<Value> {
        msgs.iter()
            .map(|m| serde_json::from_str(m).unwrap())
            .collect()
    }

    fn evolve(s: &Schema, msgs: &[&str]) -> Option<Evolution> {
        plan(
            s,
            (s.highest_field_id(), 1),
            &values(msgs),
            (true, &TypeHints::default()),
            &[],
        )
        .unwrap()
    }

    fn base() -> Schema {
        schema(
            r#"{"type": "struct", "schema-id": 0, "identifier-field-ids": [1], "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "n", "required": true, "type": "int"},
            {"id": 3, "name": "o", "required": false, "type": {"type": "struct", "fields": [
                {"id": 4, "name": "a", "required": false, "type": "string"}]}},
            {"id": 5, "name": "l", "required": false, "type": {"type": "list", "element-id": 6,
                "element-required": true, "element": {"type": "struct", "fields": [
                    {"id": 7, "name": "x", "required": false, "type": "float"}]}}},
            {"id": 8, "name": "m", "required": false, "type": {"type": "map", "key-id": 9,
                "key": "string", "value-id": 10, "value-required": false,
                "value": {"type": "struct", "fields": [
                    {"id": 11, "name": "d", "required": false, "type": "decimal(5, 2)"}]}}}
        ]}"#,
        )
    }

    #[test]
    fn nothing_changes_for_messages_that_fit() {
        assert!(evolve(&base(), &[r#"{"id": 1, "n": 2, "o": {"a": "x"}}"#]).is_none());
    }

    #[test]
    fn new_fields_are_added_at_every_depth_with_fresh_ids() {
        let e = evolve(
            &base(),
            &[
                r#"{"id": 1, "n": 1, "top": "t", "o": {"b": {"c": {"d": 1}}},
                    "l": [{"x": 1, "y": true}], "m": {"k": {"e": "v"}}}"#,
            ],
        )
        .unwrap();
        let s = &e.schema;
        assert!(s.field_by_name("top").unwrap().id > 11);
        assert_eq!(
            s.field_by_name("o.b.c.d").unwrap().field_type.to_string(),
            "long"
        );
        assert!(s.field_by_name("l.element.y").is_some(), "{s}");
        assert!(s.field_by_name("m.value.e").is_some(), "{s}");
        // Existing ids are kept; new ones are above the highest.
        assert_eq!(s.field_by_name("o.a").unwrap().id, 4);
        assert!(s.highest_field_id() > 11);
        assert_eq!(e.changes.len(), 4, "{:?}", e.changes);
    }

    #[test]
    fn nulls_relax_required_fields_but_never_identifier_fields() {
        let e = evolve(&base(), &[r#"{"id": null, "n": null, "l": [null]}"#]).unwrap();
        assert!(e.schema.field_by_name("id").unwrap().required);
        assert!(!e.schema.field_by_name("n").unwrap().required);
        let Type::List(l) = e.schema.field_by_name("l").unwrap().field_type.as_ref() else {
            panic!("a list")
        };
        assert!(!l.element_field.required);
        // A missing required field relaxes too.
        let e = evolve(&base(), &[r#"{"id": 1}"#]).unwrap();
        assert!(!e.schema.field_by_name("n").unwrap().required);
    }

    #[test]
    fn types_widen_only_where_a_value_needs_it() {
        let e = evolve(
            &base(),
            &[r#"{"id": 1, "n": 3000000000, "l": [{"x": 1e300}], "m": {"k": {"d": 12345.5}}}"#],
        )
        .unwrap();
        let t = |name: &str| e.schema.field_by_name(name).unwrap().field_type.to_string();
        assert_eq!(t("n"), "long");
        assert_eq!(t("l.element.x"), "double");
        assert_eq!(t("m.value.d"), "decimal(7, 2)");
        // A fraction finer than the scale cannot be fixed by widening; neither can a
        // float in an int column.
        assert!(
            evolve(
                &base(),
                &[r#"{"id": 1, "n": 1.5, "m": {"k": {"d": 1.125}}}"#]
            )
            .is_none()
        );
    }

    /// Every whole number the shredder stores in a long widens an int column: exponent
    /// forms and a leading `+` too, not only plain digits.
    #[test]
    fn whole_numbers_in_any_form_widen_an_int() {
        for n in [r#"3e9"#, r#"3.0e9"#, r#""+3000000000""#, r#""-3e9""#] {
            let e = evolve(&base(), &[&format!(r#"{{"id": 1, "n": {n}}}"#)]);
            let n_type = e.map(|e| e.schema.field_by_name("n").unwrap().field_type.to_string());
            assert_eq!(n_type.as_deref(), Some("long"), "{n}");
        }
        assert!(evolve(&base(), &[r#"{"id": 1, "n": 3000000000.5}"#]).is_none());
        assert!(evolve(&base(), &[r#"{"id": 1, "n": " 3000000000"}"#]).is_none());
    }

    #[test]
    fn case_insensitive_matching_adds_no_twin_column() {
        let s = base();
        let msgs = values(&[r#"{"ID": 1, "N": 2, "O": {"A": "x"}}"#]);
        assert!(
            plan(&s, (11, 1), &msgs, (false, &TypeHints::default()), &[])
                .unwrap()
                .is_none()
        );
        // Case-sensitive, these are not the columns, and no twin column is added for
        // them: only `n` is relaxed (the messages lack it).
        let e = plan(&s, (11, 1), &msgs, (true, &TypeHints::default()), &[])
            .unwrap()
            .unwrap();
        assert_eq!(e.schema.as_struct().fields().len(), 5, "{}", e.schema);
        let twins = values(&[r#"{"id": 1, "n": 1, "New": 1, "new": 2}"#]);
        let e = plan(&s, (11, 1), &twins, (true, &TypeHints::default()), &[])
            .unwrap()
            .unwrap();
        assert!(e.schema.field_by_name("New").is_some());
        assert!(e.schema.field_by_name("new").is_none());
    }

    #[test]
    fn configured_key_columns_stay_required() {
        let e = plan(
            &base(),
            (11, 1),
            &values(&[r#"{"id": 1}"#]),
            (true, &TypeHints::default()),
            &[2],
        )
        .unwrap();
        assert!(e.is_none(), "n is part of the key");
    }

    #[test]
    fn decimal_digits_of_plain_numbers() {
        assert_eq!(decimal_digits("00123.4500"), Some((3, 2)));
        assert_eq!(decimal_digits("-0.5"), Some((0, 1)));
        assert_eq!(decimal_digits("abc"), None);
        assert_eq!(decimal_digits("1.5x"), None);
    }

    /// The shredder takes exponent forms, and a JSON number with a fraction at 1e16 or
    /// above reaches evolution printed in one (`1.2345678901234568e17`).
    #[test]
    fn decimal_digits_of_exponent_forms() {
        assert_eq!(decimal_digits("1e5"), Some((6, 0)));
        assert_eq!(decimal_digits("1.2345678901234568e17"), Some((18, 0)));
        assert_eq!(decimal_digits("-2.50E+1"), Some((2, 0)));
        assert_eq!(decimal_digits("1.5e-3"), Some((0, 4)));
        assert_eq!(decimal_digits("0.0e9"), Some((0, 0)));
        assert_eq!(decimal_digits("120E-1"), Some((2, 0)));
        assert_eq!(decimal_digits("1e99999999999"), Some((u32::MAX, 0)));
        assert_eq!(
            decimal_digits("1e-999999999999999999999999"),
            Some((0, u32::MAX))
        );
        assert_eq!(decimal_digits("1e"), None);
        assert_eq!(decimal_digits("e5"), None);
    }

    /// A leading `+` and a bare fraction (`.5`) are numbers to the shredder too.
    #[test]
    fn decimal_digits_of_signed_and_bare_fractions() {
        assert_eq!(decimal_digits("+1e20"), Some((21, 0)));
        assert_eq!(decimal_digits(".5e3"), Some((3, 0)));
        assert_eq!(decimal_digits("-.25"), Some((0, 2)));
        assert_eq!(decimal_digits("7."), Some((1, 0)));
        assert_eq!(decimal_digits("."), None);
        assert_eq!(decimal_digits("+"), None);
        assert_eq!(decimal_digits("+-1"), None);
        for text in ["+1e20", ".5e3", "-.25", "7."] {
            assert!(
                crate::shred::convert::parse_decimal(text, 38, 2).is_ok(),
                "{text}"
            );
        }
    }

    #[test]
    fn a_large_json_number_widens_a_decimal() {
        let e = evolve(
            &base(),
            &[r#"{"id": 1, "m": {"k": {"d": 123456789012345678.5}}}"#],
        )
        .unwrap();
        let d = e.schema.field_by_name("m.value.d").unwrap();
        assert_eq!(d.field_type.to_string(), "decimal(20, 2)");
    }
}
