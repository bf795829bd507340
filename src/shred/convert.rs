//! Conversions from JSON scalar text to Iceberg's physical values.
//!
//! Each function takes the exact text the JSON reader saw and returns either the value
//! or a short reason that the caller wraps with the message index and field path.

use base64::Engine;
use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Timelike};

pub use crate::config::EpochUnit;

const UNIX_EPOCH_DAY: i32 = 719_163; // days from 0001-01-01 (CE day 1) to 1970-01-01

/// Parses a JSON integer literal without passing through `f64`.
///
/// A literal written with a fraction or exponent is accepted only when it denotes a whole
/// number that `f64` represents exactly (|v| < 2^53), e.g. `3.0` or `1e3`.
pub fn parse_i64(text: &str) -> Result<i64, String> {
    if let Ok(v) = text.parse::<i64>() {
        return Ok(v);
    }
    if text.bytes().all(|b| b == b'-' || b.is_ascii_digit())
        && text.bytes().any(|b| b.is_ascii_digit())
    {
        return Err(format!("integer {text} is out of range for long"));
    }
    // `3.0`, `1e3`: exact decimal arithmetic, so `2.0000000000000001` is not taken for 2.
    match parse_decimal(text, 38, 0) {
        Ok(v) => i64::try_from(v).map_err(|_| format!("integer {text} is out of range for long")),
        Err(e) if e.contains("fractional") => Err(format!("{text} is not a whole number")),
        Err(_) => Err(format!("{text:?} is not an integer")),
    }
}

pub fn parse_i32(text: &str) -> Result<i32, String> {
    let v = parse_i64(text)?;
    i32::try_from(v).map_err(|_| format!("integer {text} is out of range for int"))
}

/// Parses a float; a finite literal too large for `f64` is an error, not infinity.
/// (`"NaN"`, `"Infinity"` given as strings are accepted as those values.)
pub fn parse_f64(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if v.is_infinite() && text.bytes().any(|b| b.is_ascii_digit()) {
        return Err(format!("{text} is out of range for double"));
    }
    Ok(v)
}

/// As [`parse_f64`], for `float` columns.
pub fn parse_f32(text: &str) -> Result<f32, String> {
    let v = parse_f64(text)?;
    let narrowed = v as f32;
    if narrowed.is_infinite() && v.is_finite() {
        return Err(format!("{text} is out of range for float"));
    }
    Ok(narrowed)
}

/// Parses decimal text (`-12.345`, `1.2e3`) exactly into the unscaled value at `scale`,
/// refusing values that would lose digits or exceed `precision`.
pub fn parse_decimal(text: &str, precision: u32, scale: u32) -> Result<i128, String> {
    let bad = || format!("{text:?} is not a decimal number");
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], rest[i + 1..].parse::<i32>().map_err(|_| bad())?),
        None => (rest, 0),
    };
    let (int_part, frac_part) = match mantissa.find('.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(bad());
    }
    if !int_part
        .bytes()
        .chain(frac_part.bytes())
        .all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    // digits * 10^(exponent - frac_len) is the value; shift to the column's scale.
    let digits = int_part.bytes().chain(frac_part.bytes());
    let shift = exponent as i64 - frac_part.len() as i64 + scale as i64;
    let mut unscaled: i128 = 0;
    let mut dropped_nonzero = false;
    let total_digits = int_part.len() + frac_part.len();
    let keep = (total_digits as i64 + shift.min(0)).max(0) as usize;
    for (i, d) in digits.enumerate() {
        let d = (d - b'0') as i128;
        if i < keep {
            unscaled = unscaled
                .checked_mul(10)
                .and_then(|v| v.checked_add(d))
                .ok_or_else(|| format!("{text} exceeds decimal({precision}, {scale})"))?;
        } else if d != 0 {
            dropped_nonzero = true;
        }
    }
    if unscaled == 0 && !dropped_nonzero {
        // Zero at any exponent; also keeps `0e2147483647` from looping 2^31 times below.
        return Ok(0);
    }
    if shift > 38 {
        return Err(format!("{text} exceeds decimal({precision}, {scale})"));
    }
    if dropped_nonzero {
        return Err(format!(
            "{text} has more than {scale} fractional digits for decimal({precision}, {scale})"
        ));
    }
    for _ in 0..shift.max(0) {
        unscaled = unscaled
            .checked_mul(10)
            .ok_or_else(|| format!("{text} exceeds decimal({precision}, {scale})"))?;
    }
    let limit = 10i128.checked_pow(precision).unwrap_or(i128::MAX);
    if unscaled >= limit {
        return Err(format!("{text} exceeds decimal({precision}, {scale})"));
    }
    Ok(if negative { -unscaled } else { unscaled })
}

/// `YYYY-MM-DD` to days since 1970-01-01.
pub fn parse_date(text: &str) -> Result<i32, String> {
    let d = NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map_err(|e| format!("{text:?} is not a date (YYYY-MM-DD): {e}"))?;
    Ok(d.num_days_from_ce() - UNIX_EPOCH_DAY)
}

use chrono::Datelike;

/// `HH:MM:SS[.ffffff]` to microseconds since midnight.
pub fn parse_time(text: &str) -> Result<i64, String> {
    let t = NaiveTime::parse_from_str(text, "%H:%M:%S%.f")
        .map_err(|e| format!("{text:?} is not a time (HH:MM:SS[.ffffff]): {e}"))?;
    Ok(t.num_seconds_from_midnight() as i64 * 1_000_000 + (t.nanosecond() / 1_000) as i64)
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (Howard Hinnant's
/// days-from-civil), for the fast timestamp path.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn digits(b: &[u8]) -> Option<i64> {
    b.iter().try_fold(0i64, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + (c - b'0') as i64)
    })
}

/// The common shape `YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|±HH:MM)` without a general parser,
/// as seconds since the epoch (UTC) and nanoseconds; `None` sends anything else (or
/// anything invalid) to chrono for a precise verdict.
fn fast_rfc3339(text: &str) -> Option<(i64, i64)> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (digits(&b[0..4])?, digits(&b[5..7])?, digits(&b[8..10])?);
    let (hour, minute, second) = (
        digits(&b[11..13])?,
        digits(&b[14..16])?,
        digits(&b[17..19])?,
    );
    let month_days = [
        31,
        28 + i64::from(year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)),
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month)
        || day < 1
        || day > month_days[month as usize - 1]
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let frac = &b[start..i];
        if frac.is_empty() || frac.len() > 9 {
            return None;
        }
        nanos = digits(frac)? * 10i64.pow(9 - frac.len() as u32);
    }
    let offset_seconds = match &b[i..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hours = digits(&[*h1, *h2])?;
            let minutes = digits(&[*m1, *m2])?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let total = hours * 3600 + minutes * 60;
            if *sign == b'-' { -total } else { total }
        }
        _ => return None,
    };
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
        - offset_seconds;
    Some((seconds, nanos))
}

/// RFC 3339 text to seconds since the epoch (UTC) and nanoseconds. For `timestamp` (no
/// zone) a string without an offset is read as-is; one with an offset is converted to
/// UTC.
fn parse_timestamp_parts(text: &str, with_zone: bool) -> Result<(i64, i64), String> {
    if let Some(parts) = fast_rfc3339(text) {
        return Ok(parts);
    }
    let parts = |dt: chrono::NaiveDateTime| {
        let utc = dt.and_utc();
        (utc.timestamp(), i64::from(utc.timestamp_subsec_nanos()))
    };
    if let Ok(dt) = DateTime::parse_from_rfc3339(text) {
        return Ok(parts(dt.naive_utc()));
    }
    if !with_zone {
        for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
            if let Ok(naive) = NaiveDateTime::parse_from_str(text, format) {
                return Ok(parts(naive));
            }
        }
    }
    Err(format!(
        "{text:?} is not an RFC 3339 timestamp{}",
        if with_zone { " with an offset" } else { "" }
    ))
}

/// RFC 3339 text to microseconds since the epoch (UTC); digits past the microsecond are
/// dropped (see [`parse_timestamp_parts`]).
pub fn parse_timestamp(text: &str, with_zone: bool) -> Result<i64, String> {
    let (seconds, nanos) = parse_timestamp_parts(text, with_zone)?;
    seconds
        .checked_mul(1_000_000)
        .and_then(|s| s.checked_add(nanos / 1_000))
        .ok_or_else(|| format!("{text:?} is out of range for a timestamp"))
}

/// RFC 3339 text to nanoseconds since the epoch (UTC), for `timestamp_ns` columns:
/// every digit kept; years 1677 to 2262 fit.
pub fn parse_timestamp_ns(text: &str, with_zone: bool) -> Result<i64, String> {
    let (seconds, nanos) = parse_timestamp_parts(text, with_zone)?;
    i64::try_from(i128::from(seconds) * 1_000_000_000 + i128::from(nanos)).map_err(|_| {
        format!(
            "{text:?} is out of range for a nanosecond timestamp \
             (1677-09-21T00:12:43.145224192Z to 2262-04-11T23:47:16.854775807Z)"
        )
    })
}

/// An epoch number in `unit` to nanoseconds. Integers stay integers; a fraction is
/// rounded to the nanosecond.
pub fn epoch_to_nanos(text: &str, unit: EpochUnit) -> Result<i64, String> {
    let overflow = || format!("epoch value {text} is out of range for a nanosecond timestamp");
    if let Ok(v) = text.parse::<i64>() {
        let factor = match unit {
            EpochUnit::S => 1_000_000_000,
            EpochUnit::Ms => 1_000_000,
            EpochUnit::Us => 1_000,
            EpochUnit::Ns => 1,
        };
        return v.checked_mul(factor).ok_or_else(overflow);
    }
    let digits = match unit {
        EpochUnit::S => 9,
        EpochUnit::Ms => 6,
        EpochUnit::Us => 3,
        EpochUnit::Ns => 0,
    };
    // A plain decimal is scaled exactly (digits past the nanosecond dropped); only an
    // exponent form goes through floating point.
    if let Some(nanos) = scaled_decimal(text, digits) {
        return i64::try_from(nanos).map_err(|_| overflow());
    }
    let v = parse_f64(text)?;
    let nanos = v * 10f64.powi(digits as i32);
    if nanos.is_finite() && nanos.abs() < 9.2e18 {
        Ok(nanos.round() as i64)
    } else {
        Err(overflow())
    }
}

/// `text` (`-?digits[.digits]`) times 10^`digits`, exactly, truncating further
/// fraction digits; `None` for any other form.
fn scaled_decimal(text: &str, digits: u32) -> Option<i128> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (integer, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let plain = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if integer.is_empty() || integer.len() > 20 || !plain(integer) || !plain(fraction) {
        return None;
    }
    let kept = &fraction[..fraction.len().min(digits as usize)];
    let mut value: i128 = integer.parse::<i128>().ok()? * 10i128.pow(digits);
    if !kept.is_empty() {
        value += kept.parse::<i128>().ok()? * 10i128.pow(digits - kept.len() as u32);
    }
    Some(if negative { -value } else { value })
}

/// An epoch number in `unit` to microseconds. Integers stay integers; a fraction is
/// allowed and rounded to the microsecond.
pub fn epoch_to_micros(text: &str, unit: EpochUnit) -> Result<i64, String> {
    let overflow = || format!("epoch value {text} is out of range");
    if let Ok(v) = text.parse::<i64>() {
        return match unit {
            EpochUnit::S => v.checked_mul(1_000_000).ok_or_else(overflow),
            EpochUnit::Ms => v.checked_mul(1_000).ok_or_else(overflow),
            EpochUnit::Us => Ok(v),
            EpochUnit::Ns => Ok(v.div_euclid(1_000)),
        };
    }
    let v = parse_f64(text)?;
    let micros = match unit {
        EpochUnit::S => v * 1e6,
        EpochUnit::Ms => v * 1e3,
        EpochUnit::Us => v,
        EpochUnit::Ns => v / 1e3,
    };
    if micros.is_finite() && micros.abs() < 9.2e18 {
        Ok(micros.round() as i64)
    } else {
        Err(overflow())
    }
}

pub fn parse_uuid(text: &str) -> Result<[u8; 16], String> {
    uuid::Uuid::parse_str(text)
        .map(|u| *u.as_bytes())
        .map_err(|e| format!("{text:?} is not a UUID: {e}"))
}

pub fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("not valid base64: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_never_round_through_f64() {
        assert_eq!(
            parse_i64("9007199254740993").unwrap(),
            9_007_199_254_740_993
        );
        assert_eq!(parse_i64("-9223372036854775808").unwrap(), i64::MIN);
        assert!(parse_i64("9223372036854775808").is_err());
        assert_eq!(parse_i64("3.0").unwrap(), 3);
        assert_eq!(parse_i64("1e3").unwrap(), 1000);
        assert!(parse_i64("1.5").is_err());
        assert!(parse_i64("2.0000000000000001").is_err());
        assert_eq!(parse_i64("-4.00e1").unwrap(), -40);
        assert!(parse_i64("").is_err() && parse_i64("-").unwrap_err().contains("not an integer"));
        assert!(parse_f64("1e400").is_err());
        assert!(parse_f32("1e39").is_err());
        assert!(parse_f64("NaN").unwrap().is_nan());
        assert!(parse_i32("2147483648").is_err());
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(parse_decimal("12.34", 10, 2).unwrap(), 1234);
        assert_eq!(parse_decimal("-0.5", 10, 2).unwrap(), -50);
        assert_eq!(parse_decimal("1.2e3", 10, 2).unwrap(), 120_000);
        assert_eq!(parse_decimal("12.3400", 10, 2).unwrap(), 1234);
        assert_eq!(parse_decimal("5", 3, 0).unwrap(), 5);
        assert_eq!(
            parse_decimal("12345678901234567890.123456789012345678", 38, 18).unwrap(),
            12_345_678_901_234_567_890_123_456_789_012_345_678
        );
        assert!(parse_decimal("12.345", 10, 2).is_err());
        assert!(parse_decimal("1000", 3, 0).is_err());
        assert!(parse_decimal("abc", 3, 0).is_err());
        assert!(parse_decimal("", 3, 0).is_err());
        assert_eq!(parse_decimal("0e2147483647", 10, 2).unwrap(), 0);
        assert!(parse_decimal("1e2147483647", 10, 2).is_err());
        assert!(
            parse_decimal("5e-2147483647", 10, 2)
                .unwrap_err()
                .contains("fractional")
        );
    }

    #[test]
    fn dates_times_and_timestamps() {
        assert_eq!(parse_date("1970-01-02").unwrap(), 1);
        assert_eq!(parse_date("1969-12-31").unwrap(), -1);
        assert_eq!(parse_time("00:00:01.5").unwrap(), 1_500_000);
        assert_eq!(
            parse_timestamp("1970-01-01T00:00:01+01:00", true).unwrap(),
            -3_599_000_000
        );
        assert_eq!(
            parse_timestamp("1970-01-01T00:00:01Z", true).unwrap(),
            1_000_000
        );
        assert_eq!(
            parse_timestamp("1970-01-01T00:00:01.25", false).unwrap(),
            1_250_000
        );
        assert!(parse_timestamp("1970-01-01T00:00:01", true).is_err());
        assert_eq!(epoch_to_micros("1500", EpochUnit::Ms).unwrap(), 1_500_000);
        assert_eq!(epoch_to_micros("1.5", EpochUnit::S).unwrap(), 1_500_000);
        assert!(epoch_to_micros("9223372036854775807", EpochUnit::S).is_err());
    }

    #[test]
    fn nanosecond_timestamps_keep_every_digit() {
        assert_eq!(
            parse_timestamp_ns("1970-01-01T00:00:01.123456789Z", true),
            Ok(1_123_456_789)
        );
        assert_eq!(
            parse_timestamp_ns("1969-12-31T23:59:59.999999999Z", true),
            Ok(-1)
        );
        assert_eq!(
            parse_timestamp_ns("2026-12-01 10:00:00.5", false),
            Ok(1_796_119_200_500_000_000)
        );
        assert!(parse_timestamp_ns("2263-01-01T00:00:00Z", true).is_err());
        assert_eq!(epoch_to_nanos("1500", EpochUnit::Ms), Ok(1_500_000_000));
        assert_eq!(epoch_to_nanos("1.5", EpochUnit::Us), Ok(1_500));
        assert!(epoch_to_nanos("9300000000", EpochUnit::S).is_err());
        // Fractions are exact, not rounded through a double.
        assert_eq!(
            epoch_to_nanos("1700000000.123456789", EpochUnit::S),
            Ok(1_700_000_000_123_456_789)
        );
        assert_eq!(epoch_to_nanos("-1.5", EpochUnit::S), Ok(-1_500_000_000));
        assert_eq!(epoch_to_nanos("1e3", EpochUnit::Ms), Ok(1_000_000_000));
        // The lowest nanosecond timestamp fits.
        assert_eq!(
            parse_timestamp_ns("1677-09-21T00:12:43.145224192Z", true),
            Ok(i64::MIN)
        );
    }

    #[test]
    fn fast_timestamps_agree_with_chrono() {
        let samples = [
            "1970-01-01T00:00:00Z",
            "2024-02-29T23:59:59.999999Z",
            "1969-12-31T23:59:59.5-01:30",
            "2000-03-01T00:00:00+14:00",
            "1600-01-01T00:00:00.123456789Z",
            "2026-11-29t21:45:57.1z",
            "9999-12-31 23:59:59+00:00",
            "0001-01-01T00:00:00Z",
        ];
        for s in samples {
            let chrono = DateTime::parse_from_rfc3339(s).unwrap();
            let parts = (
                chrono.timestamp(),
                i64::from(chrono.timestamp_subsec_nanos()),
            );
            assert_eq!(fast_rfc3339(s), Some(parts), "{s}");
            assert_eq!(
                parse_timestamp(s, true),
                Ok(chrono.timestamp_micros()),
                "{s}"
            );
        }
        for bad in [
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00+0100",
        ] {
            assert_eq!(fast_rfc3339(bad), None, "{bad}");
        }
    }
}
