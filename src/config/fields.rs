//! How field values are read and written: Go durations, text that may be blank for
//! "unset", JSON given as a value or as text.

use super::*;

pub(super) fn duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<std::time::Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// Parses Go-style durations (`24h`, `1h30m`, `500ms`, `0s`, `+5s`), as the host writes
/// them. Negative durations and ones longer than Go's (about 292 years) are refused.
pub fn parse_duration(text: &str) -> std::result::Result<std::time::Duration, String> {
    let bad = || format!("{text:?} is not a duration like 500ms, 30s, 24h or 1h30m");
    let mut rest = text.trim();
    let negative = rest.starts_with('-');
    rest = rest.strip_prefix(['-', '+']).unwrap_or(rest);
    if rest == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            // Go takes the micro sign and the Greek mu.
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(bad()),
        };
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    // Go's limit: a duration is i64 nanoseconds.
    if total > i64::MAX as f64 / 1e9 {
        return Err(format!(
            "{text:?} is longer than the longest duration (2562047h)"
        ));
    }
    if negative && total > 0.0 {
        return Err(format!("{text:?} is negative"));
    }
    Ok(std::time::Duration::from_secs_f64(total))
}

/// Writes a duration the way Go prints it and [`parse_duration`] reads it back.
pub(super) fn go_duration<S: serde::Serializer>(
    d: &std::time::Duration,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&format_duration(*d))
}

/// `24h`, `2m`, `30s`, `250ms`, `0s`: the largest unit that divides the duration.
pub fn format_duration(d: std::time::Duration) -> String {
    let nanos = d.as_nanos();
    let units: [(u128, &str); 6] = [
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    match units
        .iter()
        .find(|(size, _)| nanos > 0 && nanos.is_multiple_of(*size))
    {
        Some((size, unit)) => format!("{}{unit}", nanos / size),
        None => "0s".into(),
    }
}

/// A keep-alive idle time: a negative one turns probes off.
pub(super) fn keep_alive_idle<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<std::time::Duration>, D::Error> {
    let text = String::deserialize(d)?;
    match text.trim().strip_prefix('-') {
        Some(magnitude) => {
            let d = parse_duration(magnitude).map_err(serde::de::Error::custom)?;
            Ok((d.is_zero()).then_some(d))
        }
        None => parse_duration(&text)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

pub(super) fn keep_alive_idle_text<S: serde::Serializer>(
    d: &Option<std::time::Duration>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match d {
        Some(d) => go_duration(d, s),
        None => s.serialize_str("-1s"),
    }
}

/// Empty means the default, as for text fields without one (`service: ${SERVICE:}`).
pub(super) fn sigv4_service<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<String, D::Error> {
    Ok(non_empty(d)?.unwrap_or_else(default_sigv4_service))
}

/// Empty means the default: an empty endpoint would post tokens to the catalog's root.
pub(super) fn oauth_uri<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<String, D::Error> {
    Ok(non_empty(d)?.unwrap_or_else(default_oauth_uri))
}

/// An optional text field where an empty string means "not set", so a config can say
/// `url: ${CATALOG_URL:}` and fall back to the default when the variable is unset.
pub(super) fn non_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

/// An optional setting where `null`, `""` and `0` mean "not set".
pub(super) fn blank_as_none<'de, D, T>(d: D) -> std::result::Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde_json::Value;
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::Number(n)) if n.as_f64() == Some(0.0) => Ok(None),
        Some(v) => T::deserialize(v)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// A JSON document given either as a value or as its text (YAML users write both).
pub(super) fn json_or_text<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<serde_json::Value>, D::Error> {
    match Option::<serde_json::Value>::deserialize(d)? {
        Some(serde_json::Value::String(text)) if text.trim().is_empty() => Ok(None),
        Some(serde_json::Value::String(text)) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("not JSON: {e}"))),
        other => Ok(other.filter(|v| !v.is_null())),
    }
}

pub(super) fn strip_nulls(tree: &mut serde_json::Value) {
    if let serde_json::Value::Object(fields) = tree {
        fields.retain(|_, v| !v.is_null());
        fields.values_mut().for_each(strip_nulls);
    }
}
