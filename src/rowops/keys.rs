//! The key of a keyed table: which columns, checked once per schema, and how a batch's
//! key values become comparable rows.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::SchemaRef;
use iceberg::spec::{NestedField, NestedFieldRef, PrimitiveType, Schema, Type};

use crate::error::{Error, Result};
use crate::shred::infer::same_name;

/// The identifier columns of a table, in key order.
#[derive(Debug, Clone)]
pub struct KeyColumns {
    /// Iceberg field ids (the equality ids of delete files).
    pub field_ids: Vec<i32>,
    pub names: Vec<String>,
    /// Positions of the key columns among the table's top-level columns.
    positions: Vec<usize>,
    /// The key columns alone: delete files are written in this schema, and delete
    /// messages are shredded against it.
    pub schema: Arc<Schema>,
    pub arrow: SchemaRef,
}

impl KeyColumns {
    /// The key of a table with `schema`: the `configured` column names, else the schema's
    /// identifier fields; `None` when there are neither.
    ///
    /// Configured names match columns as message fields do: exactly, or with
    /// `case_sensitive` false in any case.
    pub fn for_table(
        schema: &Schema,
        configured: &[String],
        case_sensitive: bool,
    ) -> Result<Option<KeyColumns>> {
        let top = schema.as_struct().fields();
        let positions: Vec<usize> = if configured.is_empty() {
            let ids: Vec<i32> = schema.identifier_field_ids().collect();
            if ids.is_empty() {
                return Ok(None);
            }
            let mut positions = Vec::new();
            for id in ids {
                let at = top.iter().position(|f| f.id == id).ok_or_else(|| {
                    Error::config(format!(
                        "the table's identifier field {id} is not a top-level column; floe \
                         matches keys on top-level columns only (set identifier_fields)"
                    ))
                })?;
                positions.push(at);
            }
            positions
        } else {
            let mut positions = Vec::new();
            let missing: Vec<&str> = configured
                .iter()
                .filter(|name| column_named(top, name, case_sensitive).is_none())
                .map(String::as_str)
                .collect();
            if let Some(twins) = configured
                .iter()
                .find_map(|name| case_twins(top, name, case_sensitive))
            {
                return Err(Error::config(twins));
            }
            if !missing.is_empty() {
                let columns: Vec<&str> = top.iter().map(|f| f.name.as_str()).collect();
                return Err(Error::config(format!(
                    "identifier_fields: no top-level column named {} (the table has {})",
                    missing.join(", "),
                    columns.join(", ")
                )));
            }
            for name in configured {
                let at = column_named(top, name, case_sensitive).expect("checked");
                if positions.contains(&at) {
                    return Err(Error::config(format!(
                        "identifier_fields names {name:?} twice"
                    )));
                }
                positions.push(at);
            }
            positions
        };
        let fields: Vec<_> = positions.iter().map(|&i| top[i].clone()).collect();
        for f in &fields {
            check_key_type(&f.name, &f.field_type)?;
        }
        let key_schema = Schema::builder()
            .with_fields(fields.clone())
            .build()
            .map_err(Error::from)?;
        let arrow =
            Arc::new(iceberg::arrow::schema_to_arrow_schema(&key_schema).map_err(Error::from)?);
        Ok(Some(KeyColumns {
            field_ids: fields.iter().map(|f| f.id).collect(),
            names: fields.iter().map(|f| f.name.clone()).collect(),
            positions,
            schema: Arc::new(key_schema),
            arrow,
        }))
    }

    /// A converter whose rows compare key values by type and value.
    pub fn converter(&self) -> Result<RowConverter> {
        let fields = self
            .arrow
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        RowConverter::new(fields).map_err(|e| Error::internal(format!("key converter: {e}")))
    }

    /// The key columns of a batch in the table's schema, as a batch in the key schema.
    pub fn project(&self, data: &RecordBatch) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = self
            .positions
            .iter()
            .map(|&i| data.column(i).clone())
            .collect();
        RecordBatch::try_new(self.arrow.clone(), columns)
            .map_err(|e| Error::internal(format!("projecting key columns: {e}")))
    }

    /// The rows of a batch in the key schema.
    pub fn rows(&self, converter: &RowConverter, keys: &RecordBatch) -> Result<Rows> {
        converter
            .convert_columns(keys.columns())
            .map_err(|e| Error::internal(format!("encoding keys: {e}")))
    }

    /// For each row of a batch in the key schema, the first key column that is null.
    pub fn null_column(&self, keys: &RecordBatch, row: usize) -> Option<&str> {
        keys.columns()
            .iter()
            .zip(&self.names)
            .find(|(c, _)| c.is_null(row))
            .map(|(_, name)| name.as_str())
    }
}

/// Identifier fields must be primitive and not floating point (the Iceberg spec: their
/// equality is exact).
fn check_key_type(name: &str, ty: &Type) -> Result<()> {
    match ty {
        Type::Primitive(PrimitiveType::Float | PrimitiveType::Double) => {
            Err(Error::config(format!(
                "identifier field {name:?} is floating point; keys must compare exactly \
                 (use a long, decimal or string column)"
            )))
        }
        Type::Primitive(_) => Ok(()),
        _ => Err(Error::config(format!(
            "identifier field {name:?} is a {ty} column; keys must be primitive columns"
        ))),
    }
}

/// The position of the top-level column `name` names: the one spelled so, or (with
/// `case_sensitive` false) the one in any case. `None` when there is none, or when
/// several differ only in case: messages' fields could then land in another twin than
/// the key, and a delete would match the wrong rows.
pub fn column_named(top: &[NestedFieldRef], name: &str, case_sensitive: bool) -> Option<usize> {
    if case_sensitive {
        return top.iter().position(|f| f.name == name);
    }
    let mut twins = top
        .iter()
        .enumerate()
        .filter(|(_, f)| same_name(&f.name, name, false));
    match (twins.next(), twins.next()) {
        (Some((at, _)), None) => Some(at),
        _ => None,
    }
}

/// The columns differing only in case that make `name` ambiguous, for an error.
fn case_twins(top: &[NestedFieldRef], name: &str, case_sensitive: bool) -> Option<String> {
    let twins: Vec<&str> = top
        .iter()
        .filter(|f| !case_sensitive && same_name(&f.name, name, false))
        .map(|f| f.name.as_str())
        .collect();
    (twins.len() > 1).then(|| {
        format!(
            "identifier_fields: {name:?} names columns {} alike (case_sensitive_columns is \
             false); set case_sensitive_columns: true",
            twins.join(", ")
        )
    })
}

/// `schema` with the `names` columns as its identifier fields (made required), for a
/// table floe creates.
pub fn with_identifier_fields(
    schema: Schema,
    names: &[String],
    case_sensitive: bool,
) -> Result<Schema> {
    if names.is_empty() {
        return Ok(schema);
    }
    let top = schema.as_struct().fields();
    let mut key_positions = Vec::new();
    for name in names {
        if let Some(twins) = case_twins(top, name, case_sensitive) {
            return Err(Error::config(twins));
        }
        let Some(at) = column_named(top, name, case_sensitive) else {
            return Err(Error::config(format!(
                "identifier_fields: {name:?} is not a top-level column of the new table \
                 (is it missing from the first messages, or from schema_evolution.schema?)"
            )));
        };
        key_positions.push(at);
    }
    let mut ids = Vec::new();
    let mut fields = Vec::new();
    for (at, f) in top.iter().enumerate() {
        if key_positions.contains(&at) {
            check_key_type(&f.name, &f.field_type)?;
            ids.push(f.id);
            let mut required: NestedField = f.as_ref().clone();
            required.required = true;
            fields.push(Arc::new(required));
        } else {
            fields.push(f.clone());
        }
    }
    Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_fields(fields)
        .with_identifier_field_ids(ids)
        .build()
        .map_err(Error::from)
}

/// A new table's key columns inferred as `double` because its first messages gave a
/// key as `1.5` beside whole numbers become `long`: keys may not be floating point, and
/// refusing the table would stall every message behind the one that cannot convert.
/// Those messages then fail alone. Only columns `to_long` accepts change: not one whose
/// type the config gave (refused by name), nor one whose keys are all fractions (a
/// long table would refuse every message for good; refused, a type hint can fix it).
pub fn inferred_float_keys_as_long(
    schema: Schema,
    names: &[String],
    case_sensitive: bool,
    to_long: impl Fn(&str) -> bool,
) -> Result<Schema> {
    let top = schema.as_struct().fields();
    let float_key = |f: &NestedFieldRef| {
        matches!(
            f.field_type.as_ref(),
            Type::Primitive(PrimitiveType::Double)
        ) && names
            .iter()
            .any(|n| column_named(top, n, case_sensitive).is_some_and(|at| top[at].id == f.id))
            && to_long(&f.name)
    };
    if !top.iter().any(float_key) {
        return Ok(schema);
    }
    let fields: Vec<NestedFieldRef> = top
        .iter()
        .map(|f| match float_key(f) {
            true => {
                let mut long: NestedField = f.as_ref().clone();
                long.field_type = Box::new(Type::Primitive(PrimitiveType::Long));
                Arc::new(long)
            }
            false => f.clone(),
        })
        .collect();
    Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_fields(fields)
        .build()
        .map_err(Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};

    fn schema(json: &str) -> Schema {
        serde_json::from_str(json).unwrap()
    }

    const TABLE: &str = r#"{"type":"struct","schema-id":0,"fields":[
        {"id":1,"name":"id","required":false,"type":"long"},
        {"id":2,"name":"name","required":false,"type":"string"},
        {"id":3,"name":"score","required":false,"type":"double"}]}"#;

    #[test]
    fn configured_names_are_checked() {
        let s = schema(TABLE);
        let k = KeyColumns::for_table(&s, &["name".into(), "id".into()], true)
            .unwrap()
            .unwrap();
        assert_eq!(k.field_ids, vec![2, 1]);
        let e = KeyColumns::for_table(&s, &["nope".into()], true).unwrap_err();
        assert!(e.to_string().contains("nope") && e.to_string().contains("id, name, score"));
        let e = KeyColumns::for_table(&s, &["score".into()], true).unwrap_err();
        assert!(e.to_string().contains("floating point"), "{e}");
        assert!(KeyColumns::for_table(&s, &[], true).unwrap().is_none());
    }

    #[test]
    fn names_match_in_any_case_only_when_columns_do() {
        let s = schema(TABLE);
        let k = KeyColumns::for_table(&s, &["NAME".into()], false)
            .unwrap()
            .unwrap();
        assert_eq!(k.names, vec!["name"]);
        assert!(KeyColumns::for_table(&s, &["NAME".into()], true).is_err());
        let created = with_identifier_fields(schema(TABLE), &["Id".into()], false).unwrap();
        assert_eq!(created.identifier_field_ids().collect::<Vec<_>>(), vec![1]);
        assert!(with_identifier_fields(schema(TABLE), &["Id".into()], true).is_err());
        // Columns alike but for case: no key may be taken from them without case.
        let twins = schema(
            r#"{"type":"struct","schema-id":0,"fields":[
            {"id":1,"name":"ID","required":false,"type":"long"},
            {"id":2,"name":"Id","required":false,"type":"long"}]}"#,
        );
        for name in ["id", "ID"] {
            let e = KeyColumns::for_table(&twins, &[name.into()], false).unwrap_err();
            assert!(e.to_string().contains("ID, Id"), "{e}");
        }
        assert_eq!(
            KeyColumns::for_table(&twins, &["ID".into()], true)
                .unwrap()
                .unwrap()
                .field_ids,
            vec![1]
        );
    }

    #[test]
    fn inferred_double_keys_become_long_only_where_asked() {
        let long_id = |hinted: bool, names: &[String]| {
            let s = schema(TABLE);
            let s = inferred_float_keys_as_long(s, names, true, |_| !hinted).unwrap();
            s.field_by_name("score").unwrap().field_type.to_string()
        };
        assert_eq!(long_id(false, &["score".into()]), "long");
        assert_eq!(long_id(true, &["score".into()]), "double");
        assert_eq!(long_id(false, &["id".into()]), "double");
    }

    #[test]
    fn a_created_table_registers_required_identifier_fields() {
        let s = with_identifier_fields(schema(TABLE), &["id".into()], true).unwrap();
        assert_eq!(s.identifier_field_ids().collect::<Vec<_>>(), vec![1]);
        assert!(s.field_by_id(1).unwrap().required);
        let k = KeyColumns::for_table(&s, &[], true).unwrap().unwrap();
        assert_eq!(k.names, vec!["id"]);
    }

    #[test]
    fn equal_keys_encode_equally_and_nulls_are_found() {
        let s = schema(TABLE);
        let k = KeyColumns::for_table(&s, &["id".into(), "name".into()], true)
            .unwrap()
            .unwrap();
        let batch = RecordBatch::try_new(
            k.arrow.clone(),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), Some(1), Some(2)])),
                Arc::new(StringArray::from(vec![Some("a"), Some("a"), None])),
            ],
        )
        .unwrap();
        let converter = k.converter().unwrap();
        let rows = k.rows(&converter, &batch).unwrap();
        assert_eq!(rows.row(0), rows.row(1));
        assert_eq!(k.null_column(&batch, 2), Some("name"));
        assert_eq!(k.null_column(&batch, 0), None);
    }
}
