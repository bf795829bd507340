//! A small JSON reader over one message's bytes.
//!
//! Why not serde_json: the shredder needs the exact text of every number (decimals are
//! parsed from it and integers must never pass through `f64`), it needs to stop at a
//! configurable depth instead of recursing until the stack overflows, and it must write
//! straight into column buffers without building an intermediate value tree. The reader
//! therefore only tokenises; the decoders in `column` decide what each token means for
//! the column it lands in.
//!
//! The input is validated as UTF-8 once, before parsing, so string slices taken from it
//! are always valid `str`s.

use std::fmt;

/// Nesting deeper than this is refused, so hostile input cannot exhaust the stack. It
/// is serde_json's limit, which schema evolution and table creation read messages
/// with: a message one of them could not read would fail with a misleading reason
/// (an unknown column, no object to infer from) instead of this one.
pub const MAX_DEPTH: usize = 127;

/// Why a message could not be read, with the byte offset where reading stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub offset: usize,
    pub reason: &'static str,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid JSON at byte {}: {}", self.offset, self.reason)
    }
}

/// The kind of the next value, judged from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peek {
    Object,
    Array,
    String,
    Number,
    Bool,
    Null,
}

impl Peek {
    /// A word for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            Peek::Object => "an object",
            Peek::Array => "an array",
            Peek::String => "a string",
            Peek::Number => "a number",
            Peek::Bool => "a boolean",
            Peek::Null => "null",
        }
    }
}

/// One bit (the high bit of the byte) per byte of `w` that is '"', '\\' or a control
/// character. Bits above the lowest one may be false positives (borrows propagate
/// upwards), but the lowest set bit is always exact, which is all `find_special` uses.
#[inline]
fn special_mask(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_bytes = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGHS;
    zero_bytes(w ^ (ONES * b'"' as u64)) | zero_bytes(w ^ (ONES * b'\\' as u64)) | below_space
}

/// Index of the first '"', '\\' or control character at or after `i`, scanning a word at a
/// time; `None` when the input ends first.
#[inline]
fn find_special(b: &[u8], mut i: usize) -> Option<usize> {
    while let Some(chunk) = b.get(i..i + 8) {
        let mask = special_mask(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        if mask != 0 {
            return Some(i + (mask.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    b.get(i..)?
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|p| i + p)
}

/// Byte-wise equality of equally long short slices, without a call into libc's memcmp
/// (whose call overhead dominates for field names a few bytes long).
#[inline]
fn same_short_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// What [`Reader::next_key_expecting`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Key<'k> {
    /// The expected key (the value follows).
    Expected,
    /// Another key (the value follows).
    Other(&'k str),
    /// The end of the object (`}` consumed).
    End,
}

/// Where a string's text lives: in the input (no escapes) or in the scratch buffer.
#[derive(Clone, Copy)]
enum Span {
    Input(usize, usize),
    Scratch,
}

/// A cursor over one JSON document.
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
    /// Unescaped string contents, reused across strings to avoid allocation.
    scratch: Vec<u8>,
}

impl<'a> Reader<'a> {
    pub fn new(text: &'a str) -> Self {
        Reader {
            bytes: text.as_bytes(),
            pos: 0,
            depth: 0,
            scratch: Vec::new(),
        }
    }

    fn error(&self, reason: &'static str) -> SyntaxError {
        SyntaxError {
            offset: self.pos,
            reason,
        }
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(&b) = self.bytes.get(self.pos) {
            if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    /// Fails unless only whitespace remains.
    pub fn finish(&mut self) -> Result<(), SyntaxError> {
        self.skip_ws();
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(self.error("trailing characters after the value"))
        }
    }

    /// The kind of the next value, without consuming it.
    pub fn peek(&mut self) -> Result<Peek, SyntaxError> {
        self.skip_ws();
        match self.bytes.get(self.pos) {
            Some(b'{') => Ok(Peek::Object),
            Some(b'[') => Ok(Peek::Array),
            Some(b'"') => Ok(Peek::String),
            Some(b'-' | b'0'..=b'9') => Ok(Peek::Number),
            Some(b't' | b'f') => Ok(Peek::Bool),
            Some(b'n') => Ok(Peek::Null),
            Some(_) => Err(self.error("expected a value")),
            None => Err(self.error("unexpected end of input")),
        }
    }

    fn expect_literal(&mut self, word: &'static [u8]) -> Result<(), SyntaxError> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.error("invalid literal"))
        }
    }

    pub fn read_null(&mut self) -> Result<(), SyntaxError> {
        self.skip_ws();
        self.expect_literal(b"null")
    }

    pub fn read_bool(&mut self) -> Result<bool, SyntaxError> {
        self.skip_ws();
        if self.bytes.get(self.pos) == Some(&b't') {
            self.expect_literal(b"true").map(|_| true)
        } else {
            self.expect_literal(b"false").map(|_| false)
        }
    }

    /// Returns the text of a number exactly as written, after checking its grammar, and
    /// its value when it is an integer literal of at most 18 digits (computed while
    /// scanning, so the common integer never needs a second parse).
    pub fn read_number_value(&mut self) -> Result<(&'a str, Option<i64>), SyntaxError> {
        self.skip_ws();
        let b = self.bytes;
        let start = self.pos;
        let mut i = start;
        let negative = b.get(i) == Some(&b'-');
        i += usize::from(negative);
        let digits_start = i;
        let mut value: i64 = 0;
        while let Some(d) = b.get(i).filter(|c| c.is_ascii_digit()) {
            value = value.wrapping_mul(10).wrapping_add((d - b'0') as i64);
            i += 1;
        }
        let n = i - digits_start;
        let plain_integer = n > 0
            && n <= 18
            && (n == 1 || b[digits_start] != b'0')
            && !matches!(b.get(i), Some(b'.' | b'e' | b'E'));
        if plain_integer {
            self.pos = i;
            // SAFETY: '-' and ASCII digits only.
            let text = unsafe { std::str::from_utf8_unchecked(&b[start..i]) };
            return Ok((text, Some(if negative { -value } else { value })));
        }
        self.read_number().map(|text| (text, None))
    }

    /// Returns the text of a number exactly as written, after checking its grammar.
    pub fn read_number(&mut self) -> Result<&'a str, SyntaxError> {
        self.skip_ws();
        let start = self.pos;
        let b = self.bytes;
        let mut i = self.pos;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while matches!(b.get(i), Some(b'0'..=b'9')) {
                    i += 1;
                }
            }
            _ => {
                self.pos = i;
                return Err(self.error("invalid number"));
            }
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            let digits = i;
            while matches!(b.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
            if i == digits {
                self.pos = i;
                return Err(self.error("invalid number: no digits after the decimal point"));
            }
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let digits = i;
            while matches!(b.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
            if i == digits {
                self.pos = i;
                return Err(self.error("invalid number: no digits in the exponent"));
            }
        }
        self.pos = i;
        // SAFETY: the grammar above accepted only ASCII bytes.
        Ok(unsafe { std::str::from_utf8_unchecked(&b[start..i]) })
    }

    /// Reads a string, unescaping it. The result borrows the input when the string has
    /// no escapes and the reader's scratch buffer otherwise.
    pub fn read_string(&mut self) -> Result<&str, SyntaxError> {
        let span = self.read_string_span()?;
        Ok(self.resolve(span))
    }

    fn resolve(&self, span: Span) -> &str {
        match span {
            // SAFETY: `bytes` came from a `&str`, and a span starts after and ends before an
            // ASCII quote, so it lies on character boundaries.
            Span::Input(start, end) => unsafe {
                std::str::from_utf8_unchecked(&self.bytes[start..end])
            },
            // SAFETY: scratch holds input slices cut at ASCII bytes plus encoded `char`s.
            Span::Scratch => unsafe { std::str::from_utf8_unchecked(&self.scratch) },
        }
    }

    fn read_string_span(&mut self) -> Result<Span, SyntaxError> {
        self.skip_ws();
        if self.bytes.get(self.pos) != Some(&b'"') {
            return Err(self.error("expected a string"));
        }
        self.pos += 1;
        let start = self.pos;
        let b = self.bytes;
        // Find the first byte that ends plain content; unescape from there if it is '\\'.
        let i = match find_special(b, start) {
            Some(i) if b[i] == b'"' => {
                self.pos = i + 1;
                return Ok(Span::Input(start, i));
            }
            Some(i) if b[i] == b'\\' => i,
            Some(i) => {
                self.pos = i;
                return Err(self.error("control character in string"));
            }
            None => {
                self.pos = b.len();
                return Err(self.error("unterminated string"));
            }
        };
        self.scratch.clear();
        self.scratch.extend_from_slice(&b[start..i]);
        self.pos = i;
        self.unescape_rest()?;
        Ok(Span::Scratch)
    }

    fn unescape_rest(&mut self) -> Result<(), SyntaxError> {
        loop {
            let Some(&c) = self.bytes.get(self.pos) else {
                return Err(self.error("unterminated string"));
            };
            self.pos += 1;
            match c {
                b'"' => return Ok(()),
                b'\\' => {
                    let Some(&e) = self.bytes.get(self.pos) else {
                        return Err(self.error("unterminated escape"));
                    };
                    self.pos += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.read_unicode_escape()?,
                        _ => return Err(self.error("invalid escape")),
                    };
                    let mut buf = [0u8; 4];
                    self.scratch
                        .extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1f => return Err(self.error("control character in string")),
                _ => self.scratch.push(c),
            }
        }
    }

    fn read_hex4(&mut self) -> Result<u32, SyntaxError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.error("truncated \\u escape"))?;
        let mut v = 0u32;
        for &d in digits {
            let n = (d as char)
                .to_digit(16)
                .ok_or_else(|| self.error("invalid \\u escape"))?;
            v = v * 16 + n;
        }
        self.pos += 4;
        Ok(v)
    }

    fn read_unicode_escape(&mut self) -> Result<char, SyntaxError> {
        let first = self.read_hex4()?;
        let code = if (0xD800..0xDC00).contains(&first) {
            if !self.bytes[self.pos..].starts_with(b"\\u") {
                return Err(self.error("unpaired surrogate in \\u escape"));
            }
            self.pos += 2;
            let second = self.read_hex4()?;
            if !(0xDC00..0xE000).contains(&second) {
                return Err(self.error("unpaired surrogate in \\u escape"));
            }
            0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
        } else {
            first
        };
        char::from_u32(code).ok_or_else(|| self.error("unpaired surrogate in \\u escape"))
    }

    fn enter(&mut self) -> Result<(), SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            Err(self.error("nesting deeper than 127 levels"))
        } else {
            Ok(())
        }
    }

    /// Consumes `{`. Then call [`Reader::next_key`] until it returns `None`.
    pub fn begin_object(&mut self) -> Result<(), SyntaxError> {
        self.skip_ws();
        if self.bytes.get(self.pos) != Some(&b'{') {
            return Err(self.error("expected an object"));
        }
        self.pos += 1;
        self.enter()
    }

    /// Like [`Reader::next_key`], but first tries the key the caller expects, given as
    /// the raw bytes of a name that needs no escaping: when the input holds exactly that
    /// key, it is consumed with one comparison instead of being scanned and looked up.
    pub fn next_key_expecting(
        &mut self,
        first: bool,
        expected: Option<&[u8]>,
    ) -> Result<Key<'_>, SyntaxError> {
        if let Some(name) = expected {
            self.skip_ws();
            let at_key = match self.bytes.get(self.pos) {
                Some(b',') if !first => {
                    self.pos += 1;
                    self.skip_ws();
                    true
                }
                Some(b'"') if first => true,
                _ => false,
            };
            if at_key {
                let start = self.pos + 1;
                let end = start + name.len();
                if self.bytes.get(self.pos) == Some(&b'"')
                    && self
                        .bytes
                        .get(start..end)
                        .is_some_and(|key| same_short_bytes(key, name))
                    && self.bytes.get(end) == Some(&b'"')
                {
                    self.pos = end + 1;
                    self.expect_colon()?;
                    return Ok(Key::Expected);
                }
                // Positioned at the key (after any comma): read it the general way.
                return self.read_key_after_separator().map(Key::Other);
            }
        }
        self.next_key(first).map(|k| k.map_or(Key::End, Key::Other))
    }

    fn expect_colon(&mut self) -> Result<(), SyntaxError> {
        self.skip_ws();
        if self.bytes.get(self.pos) != Some(&b':') {
            return Err(self.error("expected ':' after object key"));
        }
        self.pos += 1;
        Ok(())
    }

    /// Reads `"key" :` once positioned at the key.
    fn read_key_after_separator(&mut self) -> Result<&str, SyntaxError> {
        if self.bytes.get(self.pos) != Some(&b'"') {
            return Err(self.error("expected a string key in object"));
        }
        let span = self.read_string_span()?;
        self.expect_colon()?;
        Ok(self.resolve(span))
    }

    /// Returns the next key of the current object, or `None` after consuming `}`.
    /// `first` is true for the first call after `begin_object`.
    pub fn next_key(&mut self, first: bool) -> Result<Option<&str>, SyntaxError> {
        self.skip_ws();
        match self.bytes.get(self.pos) {
            Some(b'}') => {
                self.pos += 1;
                self.depth -= 1;
                return Ok(None);
            }
            Some(b',') if !first => {
                self.pos += 1;
                self.skip_ws();
            }
            _ if first => {}
            _ => return Err(self.error("expected ',' or '}' in object")),
        }
        self.read_key_after_separator().map(Some)
    }

    /// Consumes `[`. Then call [`Reader::next_element`] until it returns false.
    pub fn begin_array(&mut self) -> Result<(), SyntaxError> {
        self.skip_ws();
        if self.bytes.get(self.pos) != Some(&b'[') {
            return Err(self.error("expected an array"));
        }
        self.pos += 1;
        self.enter()
    }

    /// True when another element follows (positioned at it); false after consuming `]`.
    pub fn next_element(&mut self, first: bool) -> Result<bool, SyntaxError> {
        self.skip_ws();
        match self.bytes.get(self.pos) {
            Some(b']') => {
                self.pos += 1;
                self.depth -= 1;
                Ok(false)
            }
            Some(b',') if !first => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) if first => Ok(true),
            _ => Err(self.error("expected ',' or ']' in array")),
        }
    }

    /// Skips one value of any kind, checking its syntax, and returns its text.
    pub fn skip_value_raw(&mut self) -> Result<&'a str, SyntaxError> {
        self.skip_ws();
        let start = self.pos;
        self.skip_value()?;
        let bytes: &'a [u8] = self.bytes;
        // Both ends are at value boundaries of valid UTF-8 input.
        std::str::from_utf8(&bytes[start..self.pos]).map_err(|_| self.error("invalid UTF-8"))
    }

    /// Skips one value of any kind, checking its syntax.
    pub fn skip_value(&mut self) -> Result<(), SyntaxError> {
        match self.peek()? {
            Peek::Null => self.read_null(),
            Peek::Bool => self.read_bool().map(|_| ()),
            Peek::Number => self.read_number().map(|_| ()),
            Peek::String => self.read_string().map(|_| ()),
            Peek::Array => {
                self.begin_array()?;
                let mut first = true;
                while self.next_element(first)? {
                    first = false;
                    self.skip_value()?;
                }
                Ok(())
            }
            Peek::Object => {
                self.begin_object()?;
                let mut first = true;
                while self.next_key(first)?.is_some() {
                    first = false;
                    self.skip_value()?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_numbers_exactly() {
        let mut r = Reader::new(" -12.50e+3 ");
        assert_eq!(r.read_number().unwrap(), "-12.50e+3");
        r.finish().unwrap();
        assert!(Reader::new("01").read_number().is_ok()); // "0", then trailing "1"
        let mut r = Reader::new("01");
        r.read_number().unwrap();
        assert!(r.finish().is_err());
        assert!(Reader::new("1.").read_number().is_err());
        assert!(Reader::new("-").read_number().is_err());
        assert!(Reader::new("1e").read_number().is_err());
    }

    #[test]
    fn integers_are_valued_while_scanning() {
        fn value(t: &str) -> (&str, Option<i64>) {
            Reader::new(t).read_number_value().unwrap()
        }
        assert_eq!(value("-42"), ("-42", Some(-42)));
        assert_eq!(value("0"), ("0", Some(0)));
        assert_eq!(
            value("123456789012345678"),
            ("123456789012345678", Some(123_456_789_012_345_678))
        );
        assert_eq!(value("1234567890123456789"), ("1234567890123456789", None));
        assert_eq!(value("1.5"), ("1.5", None));
        assert_eq!(value("2e3"), ("2e3", None));
        assert!(Reader::new("-").read_number_value().is_err());
        assert!(Reader::new("-x").read_number_value().is_err());
        let mut r = Reader::new("01");
        assert_eq!(r.read_number_value().unwrap(), ("0", None));
    }

    #[test]
    fn unescapes_strings_and_surrogates() {
        let mut r = Reader::new(r#""a\"b\\\n\u00e9\ud83d\ude00""#);
        assert_eq!(r.read_string().unwrap(), "a\"b\\\né😀");
        assert!(Reader::new(r#""\ud83d""#).read_string().is_err());
        assert!(Reader::new("\"abc").read_string().is_err());
        assert!(Reader::new("\"a\u{1}\"").read_string().is_err());
    }

    #[test]
    fn word_scan_finds_quotes_escapes_and_controls_anywhere() {
        for pos in 0..20 {
            let mut body = "abcdefghijklmnopqrstuvwxyz".to_string();
            body.insert(pos, '\\');
            body.insert(pos + 1, 'n');
            let text = format!("\"{body}\"");
            let want = body.replacen("\\n", "\n", 1);
            assert_eq!(
                Reader::new(&text).read_string().unwrap(),
                want,
                "escape at {pos}"
            );
            let mut bad = "abcdefghijklmnopqrstuvwxyz".to_string();
            bad.insert(pos, '\u{1f}');
            assert!(
                Reader::new(&format!("\"{bad}\"")).read_string().is_err(),
                "control at {pos}"
            );
            let plain = "é".repeat(pos) + "xyz";
            assert_eq!(
                Reader::new(&format!("\"{plain}\"")).read_string().unwrap(),
                plain
            );
        }
    }

    #[test]
    fn expected_keys_match_without_lookup_and_others_fall_back() {
        let mut r = Reader::new(r#"{ "id" : 1, "idx": 2, "i\u0064": 3}"#);
        r.begin_object().unwrap();
        assert_eq!(
            r.next_key_expecting(true, Some(b"id")).unwrap(),
            Key::Expected
        );
        r.skip_value().unwrap();
        assert_eq!(
            r.next_key_expecting(false, Some(b"id")).unwrap(),
            Key::Other("idx")
        );
        r.skip_value().unwrap();
        // An escaped spelling of the expected name is still found, the slow way.
        assert_eq!(
            r.next_key_expecting(false, Some(b"id")).unwrap(),
            Key::Other("id")
        );
        r.skip_value().unwrap();
        assert_eq!(r.next_key_expecting(false, Some(b"id")).unwrap(), Key::End);
        let mut r = Reader::new(r#"{}"#);
        r.begin_object().unwrap();
        assert_eq!(r.next_key_expecting(true, Some(b"id")).unwrap(), Key::End);
        let mut r = Reader::new(r#"{"a" 1}"#);
        r.begin_object().unwrap();
        assert!(r.next_key_expecting(true, Some(b"a")).is_err());
    }

    #[test]
    fn walks_objects_and_arrays() {
        let mut r = Reader::new(r#"{"a": [1, {"b": null}], "c\n": true}"#);
        r.begin_object().unwrap();
        assert_eq!(r.next_key(true).unwrap(), Some("a"));
        r.skip_value().unwrap();
        assert_eq!(r.next_key(false).unwrap(), Some("c\n"));
        assert!(r.read_bool().unwrap());
        assert_eq!(r.next_key(false).unwrap(), None);
        r.finish().unwrap();
    }

    #[test]
    fn refuses_deep_nesting_without_recursing_forever() {
        let text = "[".repeat(10_000) + &"]".repeat(10_000);
        let err = Reader::new(&text).skip_value().unwrap_err();
        assert!(err.reason.contains("nesting"), "{err}");
    }

    #[test]
    fn the_depth_limit_is_serde_jsons() {
        let nested = |n: usize| "[".repeat(n) + &"]".repeat(n);
        for n in [MAX_DEPTH, MAX_DEPTH + 1] {
            let ours = Reader::new(&nested(n)).skip_value().is_ok();
            let serde = serde_json::from_str::<serde_json::Value>(&nested(n)).is_ok();
            assert_eq!(ours, serde, "depth {n}");
            assert_eq!(ours, n == MAX_DEPTH, "depth {n}");
        }
        let err = Reader::new(&nested(MAX_DEPTH + 1))
            .skip_value()
            .unwrap_err();
        assert!(err.reason.contains(&MAX_DEPTH.to_string()), "{err}");
    }

    #[test]
    fn rejects_malformed_containers() {
        assert!(Reader::new("[1 2]").skip_value().is_err());
        assert!(Reader::new("{\"a\" 1}").skip_value().is_err());
        assert!(Reader::new("{\"a\":1,}").skip_value().is_err());
        assert!(Reader::new("[1,]").skip_value().is_err());
    }
}
