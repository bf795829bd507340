//! Parses the partition spec text of `schema_evolution.partition_spec`, e.g.
//! `(day(ts), bucket(16, user_id), truncate(4, name) as prefix, region)`.

use iceberg::spec::{Schema, TableMetadata, Transform, UnboundPartitionSpec};

use crate::error::{Error, Result};

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// One term: `col`, `fn(col)`, `fn(n, col)`, optionally followed by `as alias`.
fn parse_term(term: &str) -> Result<(Transform, String, Option<String>)> {
    let bad = |why: &str| Error::config(format!("partition_spec term {term:?}: {why}"));
    let (expr, alias) = match term.rsplit_once(" as ") {
        Some((e, a)) => (e.trim(), Some(a.trim().to_string())),
        None => (term, None),
    };
    let Some(open) = expr.find('(') else {
        return Ok((Transform::Identity, expr.to_string(), alias));
    };
    let name = expr[..open].trim().to_ascii_lowercase();
    let args = expr[open + 1..]
        .strip_suffix(')')
        .ok_or_else(|| bad("missing ')'"))?;
    let args: Vec<&str> = args.split(',').map(str::trim).collect();
    let transform = match (name.as_str(), args.as_slice()) {
        ("identity", [_]) => Transform::Identity,
        ("year" | "years", [_]) => Transform::Year,
        ("month" | "months", [_]) => Transform::Month,
        ("day" | "days", [_]) => Transform::Day,
        ("hour" | "hours", [_]) => Transform::Hour,
        ("void", [_]) => Transform::Void,
        // At least 1: a count or width of 0 would divide by zero at the first write.
        ("bucket", [n, _]) => Transform::Bucket(
            n.parse()
                .ok()
                .filter(|n: &u32| (1..=i32::MAX as u32).contains(n))
                .ok_or_else(|| bad("bucket count is not a whole number from 1"))?,
        ),
        ("truncate", [w, _]) => Transform::Truncate(
            w.parse()
                .ok()
                .filter(|w: &u32| (1..=i32::MAX as u32).contains(w))
                .ok_or_else(|| bad("truncate width is not a whole number from 1"))?,
        ),
        _ => return Err(bad("unknown transform or wrong number of arguments")),
    };
    let column = args.last().expect("matched non-empty").to_string();
    Ok((transform, column, alias))
}

fn default_name(transform: Transform, column: &str) -> String {
    match transform {
        Transform::Identity => column.to_string(),
        Transform::Year => format!("{column}_year"),
        Transform::Month => format!("{column}_month"),
        Transform::Day => format!("{column}_day"),
        Transform::Hour => format!("{column}_hour"),
        Transform::Bucket(_) => format!("{column}_bucket"),
        Transform::Truncate(_) => format!("{column}_trunc"),
        _ => format!("{column}_null"),
    }
}

/// Parses `text` against `schema`. `()` or an empty string is the unpartitioned spec.
pub fn parse_partition_spec(text: &str, schema: &Schema) -> Result<UnboundPartitionSpec> {
    parse_spec(text, schema, true)
}

/// Checks that every term of `text` parses, before any table (and so any schema) is
/// known: a typo in a transform is a config error at start-up, not at the first batch.
pub fn check_syntax(text: &str) -> Result<()> {
    split_top_level(strip_parens(text))
        .into_iter()
        .try_for_each(|term| parse_term(term).map(|_| ()))
}

/// The columns `text`'s terms partition by (none when it does not parse): a table
/// floe creates needs them, also when its first messages are deletes.
pub fn source_columns(text: &str) -> Vec<String> {
    split_top_level(strip_parens(text))
        .into_iter()
        .filter_map(|term| parse_term(term).ok())
        .map(|(_, column, _)| column)
        .collect()
}

/// The spec's terms without the optional surrounding parentheses.
fn strip_parens(text: &str) -> &str {
    let inner = text.trim();
    inner
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or(inner)
}

/// [`parse_partition_spec`], columns matched as `case_sensitive_columns` says.
pub fn parse_spec(
    text: &str,
    schema: &Schema,
    case_sensitive: bool,
) -> Result<UnboundPartitionSpec> {
    let mut builder = UnboundPartitionSpec::builder().with_spec_id(0);
    for term in split_top_level(strip_parens(text)) {
        let (transform, column, alias) = parse_term(term)?;
        let found = match case_sensitive {
            true => schema.field_by_name(&column),
            false => schema.field_by_name_case_insensitive(&column),
        };
        let source = found.ok_or_else(|| {
            Error::config(format!(
                "partition_spec: column {column:?} is not in the table schema"
            ))
        })?;
        // Iceberg's own message names no column and calls day/hour "time".
        if transform.result_type(&source.field_type).is_err() {
            return Err(Error::config(format!(
                "partition_spec term {term:?}: column {:?} is a {}, which {transform} cannot \
                 partition",
                source.name, source.field_type
            )));
        }
        let name = alias.unwrap_or_else(|| default_name(transform, &column));
        builder = builder.add_partition_field(source.id, name, transform)?;
    }
    Ok(builder.build())
}

/// Refuses a configured spec other than the table's own: floe writes under the table's
/// spec and does not change it, so a config asking for another one is a mistake to
/// report, not to ignore. Field names (aliases) do not matter; sources and transforms do.
pub fn check_table_spec(text: &str, metadata: &TableMetadata, case_sensitive: bool) -> Result<()> {
    let schema = metadata.current_schema();
    let wanted = parse_spec(text, schema, case_sensitive)?;
    let terms = |fields: Vec<(i32, Transform)>| -> Vec<String> {
        fields
            .into_iter()
            .filter(|(_, t)| *t != Transform::Void)
            .map(|(source, transform)| {
                let column = schema
                    .name_by_field_id(source)
                    .map_or_else(|| format!("field {source}"), str::to_string);
                format!("{transform}({column})")
            })
            .collect()
    };
    let table = terms(
        metadata
            .default_partition_spec()
            .fields()
            .iter()
            .map(|f| (f.source_id, f.transform))
            .collect(),
    );
    let config = terms(
        wanted
            .fields()
            .iter()
            .map(|f| (f.source_id, f.transform))
            .collect(),
    );
    // The order of a spec's fields does not change where rows go.
    let sorted = |terms: &[String]| {
        let mut terms = terms.to_vec();
        terms.sort();
        terms
    };
    if sorted(&table) == sorted(&config) {
        return Ok(());
    }
    Err(Error::config(format!(
        "the table is partitioned as ({}), but schema_evolution.partition_spec asks for ({}); \
         floe writes under the table's spec and does not change it: make the config match, \
         or change the table's spec with another tool",
        table.join(", "),
        config.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use iceberg::spec::{NestedField, PrimitiveType, Type};

    use super::*;

    #[test]
    fn a_transform_the_column_type_cannot_take_names_both() {
        let e = parse_spec("(day(id))", &schema(), true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"id\" is a long") && e.contains("day"), "{e}");
        assert!(parse_spec("(bucket(4, id), day(ts))", &schema(), true).is_ok());
    }

    #[test]
    fn a_bucket_count_or_truncate_width_of_zero_is_refused() {
        for spec in ["(bucket(0, id))", "(truncate(0, name))", "(bucket(-1, id))"] {
            let e = parse_spec(spec, &schema(), true).unwrap_err().to_string();
            assert!(e.contains("from 1"), "{spec}: {e}");
        }
        assert!(parse_spec("(bucket(1, id), truncate(1, name))", &schema(), true).is_ok());
    }

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::optional(
                    1,
                    "ts",
                    Type::Primitive(PrimitiveType::Timestamptz),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    3,
                    "name",
                    Type::Primitive(PrimitiveType::String),
                )),
            ])
            .build()
            .unwrap()
    }

    #[test]
    fn parses_transforms_and_aliases() {
        let spec = parse_partition_spec(
            "(day(ts), bucket(16, id), truncate(4, name) as p, name)",
            &schema(),
        )
        .unwrap();
        let fields: Vec<(i32, String, Transform)> = spec
            .fields()
            .iter()
            .map(|f| (f.source_id, f.name.clone(), f.transform))
            .collect();
        assert_eq!(
            fields,
            vec![
                (1, "ts_day".into(), Transform::Day),
                (2, "id_bucket".into(), Transform::Bucket(16)),
                (3, "p".into(), Transform::Truncate(4)),
                (3, "name".into(), Transform::Identity),
            ]
        );
        assert!(
            parse_partition_spec("()", &schema())
                .unwrap()
                .fields()
                .is_empty()
        );
    }

    #[test]
    fn errors_name_the_term() {
        let e = parse_partition_spec("(day(nope))", &schema()).unwrap_err();
        assert!(e.to_string().contains("\"nope\""), "{e}");
        let e = parse_partition_spec("(frobnicate(ts))", &schema()).unwrap_err();
        assert!(e.to_string().contains("unknown transform"), "{e}");
    }
}
