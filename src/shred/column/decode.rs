//! Decoding one JSON value into a column: scalars converted to the column's type,
//! nested values into their children, unknown fields by the configured policy, and a
//! message that fails half-way undone by truncating.

use super::*;

impl Column {
    /// Reads one JSON value (which may be `null`) and appends it as one slot.
    pub fn decode(&mut self, r: &mut Reader<'_>) -> Result<(), ValueError> {
        let peek = r.peek()?;
        match (peek, &mut self.data) {
            (Peek::Null, _) => {
                r.read_null()?;
                if self.required {
                    return Err(self.field_error("required field is null"));
                }
                self.push_null();
                Ok(())
            }
            (Peek::Object, Data::Struct(_)) => {
                self.decode_struct(r)?;
                self.push_valid();
                Ok(())
            }
            (Peek::Array, Data::List { .. }) => {
                self.decode_list(r)?;
                self.push_valid();
                Ok(())
            }
            (Peek::Object, Data::Map { .. }) => {
                self.decode_map(r)?;
                self.push_valid();
                Ok(())
            }
            (Peek::Number, _) => {
                let (text, int) = r.read_number_value()?;
                self.push_scalar(Token::Number(text, int))
            }
            (Peek::String, _) => {
                let text = r.read_string()?;
                // `text` borrows the reader; copy-free for the common unescaped case.
                let token = Token::String(text);
                self.push_scalar(token)
            }
            (Peek::Bool, _) => {
                let b = r.read_bool()?;
                self.push_scalar(Token::Bool(b))
            }
            (Peek::Object | Peek::Array, _) => Err(self.field_error(format!(
                "expected {}, got {}",
                self.expected(),
                peek.describe()
            ))),
        }
    }

    /// Describes the JSON this column accepts, for error messages.
    pub(super) fn expected(&self) -> String {
        match &self.data {
            Data::Bool(_) => "a boolean".into(),
            Data::Int(_) => "an int".into(),
            Data::Long(_) => "a long".into(),
            Data::Float(_) => "a float".into(),
            Data::Double(_) => "a double".into(),
            Data::Decimal {
                precision, scale, ..
            } => format!("a decimal({precision}, {scale})"),
            Data::Date(_) => "a date (YYYY-MM-DD string or epoch days)".into(),
            Data::Time(_) => "a time (HH:MM:SS string or microseconds)".into(),
            Data::Timestamp { .. } => "a timestamp (RFC 3339 string or epoch number)".into(),
            Data::String { .. } => "a string".into(),
            Data::Binary { .. } => "a base64 string".into(),
            Data::Fixed { uuid: true, .. } => "a UUID string".into(),
            Data::Fixed { width, .. } => format!("a base64 string of {width} bytes"),
            Data::Struct(_) => "an object".into(),
            Data::List { .. } => "an array".into(),
            Data::Map { .. } => "an object (map)".into(),
        }
    }

    pub(super) fn push_valid(&mut self) {
        if let Some(v) = &mut self.validity {
            v.append(true);
        }
        self.len += 1;
    }

    /// Appends a null slot. Required columns under a null parent get a valid default
    /// instead, so a non-nullable Arrow child never holds nulls.
    pub(super) fn push_null(&mut self) {
        self.push_placeholder();
        if self.required {
            self.push_valid();
            return;
        }
        let len = self.len;
        self.validity
            .get_or_insert_with(|| {
                let mut v = BooleanBufferBuilder::new(len.max(64));
                v.append_n(len, true);
                v
            })
            .append(false);
        self.nulls += 1;
        self.len += 1;
    }

    /// Appends the value bytes of an empty slot (zero, empty string, empty list).
    pub(super) fn push_placeholder(&mut self) {
        match &mut self.data {
            Data::Bool(b) => b.append(false),
            Data::Int(v) | Data::Date(v) => v.push(0),
            Data::Long(v) | Data::Time(v) => v.push(0),
            Data::Timestamp { values, .. } => values.push(0),
            Data::Float(v) => v.push(0.0),
            Data::Double(v) => v.push(0.0),
            Data::Decimal { values, .. } => values.push(0),
            Data::String { offsets, bytes } => offsets.push(bytes.len() as i32),
            Data::Binary { offsets, bytes } => offsets.push(bytes.len() as i64),
            Data::Fixed { width, bytes, .. } => bytes.resize(bytes.len() + *width, 0),
            Data::Struct(s) => s.children.iter_mut().for_each(Column::push_null),
            Data::List { offsets, .. } | Data::Map { offsets, .. } => {
                offsets.push(*offsets.last().expect("offsets start at 0"))
            }
        }
    }

    pub(super) fn push_scalar(&mut self, token: Token<'_>) -> Result<(), ValueError> {
        let unit = self.epoch_unit;
        let result: Result<(), String> = match (&mut self.data, &token) {
            (Data::Bool(b), Token::Bool(v)) => {
                b.append(*v);
                Ok(())
            }
            (Data::Long(v), Token::Number(_, Some(x))) => {
                v.push(*x);
                Ok(())
            }
            (Data::Int(v), Token::Number(t, _) | Token::String(t)) => {
                convert::parse_i32(t).map(|x| v.push(x))
            }
            (Data::Long(v), Token::Number(t, _) | Token::String(t)) => {
                convert::parse_i64(t).map(|x| v.push(x))
            }
            (Data::Float(v), Token::Number(t, _) | Token::String(t)) => {
                convert::parse_f32(t).map(|x| v.push(x))
            }
            (Data::Double(v), Token::Number(t, _) | Token::String(t)) => {
                convert::parse_f64(t).map(|x| v.push(x))
            }
            (
                Data::Decimal {
                    values,
                    precision,
                    scale,
                },
                Token::Number(t, _) | Token::String(t),
            ) => convert::parse_decimal(t, *precision, *scale).map(|x| values.push(x)),
            (Data::Date(v), Token::String(t)) => convert::parse_date(t).map(|x| v.push(x)),
            (Data::Date(v), Token::Number(t, _)) => convert::parse_i32(t).map(|x| v.push(x)),
            (Data::Time(v), Token::String(t)) => convert::parse_time(t).map(|x| v.push(x)),
            (Data::Time(v), Token::Number(t, _)) => convert::parse_i64(t).map(|x| v.push(x)),
            (
                Data::Timestamp {
                    values,
                    zone,
                    nanos,
                },
                Token::String(t),
            ) => match nanos {
                true => convert::parse_timestamp_ns(t, *zone),
                false => convert::parse_timestamp(t, *zone),
            }
            .map(|x| values.push(x)),
            (Data::Timestamp { values, nanos, .. }, Token::Number(t, _)) => match nanos {
                true => convert::epoch_to_nanos(t, unit),
                false => convert::epoch_to_micros(t, unit),
            }
            .map(|x| values.push(x)),
            (Data::String { offsets, bytes }, Token::String(t)) => {
                bytes.extend_from_slice(t.as_bytes());
                i32::try_from(bytes.len())
                    .map(|end| offsets.push(end))
                    .map_err(|_| "string data of one batch exceeds 2 GiB".to_string())
            }
            (Data::Binary { offsets, bytes }, Token::String(t)) => {
                convert::decode_base64(t).map(|raw| {
                    bytes.extend_from_slice(&raw);
                    offsets.push(bytes.len() as i64);
                })
            }
            (
                Data::Fixed {
                    bytes, uuid: true, ..
                },
                Token::String(t),
            ) => convert::parse_uuid(t).map(|raw| bytes.extend_from_slice(&raw)),
            (Data::Fixed { width, bytes, .. }, Token::String(t)) => convert::decode_base64(t)
                .and_then(|raw| {
                    if raw.len() == *width {
                        bytes.extend_from_slice(&raw);
                        Ok(())
                    } else {
                        Err(format!("expected {width} bytes, got {}", raw.len()))
                    }
                }),
            _ => Err(format!(
                "expected {}, got {}",
                self.expected(),
                token.describe()
            )),
        };
        match result {
            Ok(()) => {
                self.push_valid();
                Ok(())
            }
            Err(reason) => Err(self.field_error(reason)),
        }
    }

    pub(super) fn decode_struct(&mut self, r: &mut Reader<'_>) -> Result<(), ValueError> {
        let Data::Struct(s) = &mut self.data else {
            unreachable!()
        };
        s.decode_object(r)
    }

    pub(super) fn decode_list(&mut self, r: &mut Reader<'_>) -> Result<(), ValueError> {
        let Data::List { offsets, element } = &mut self.data else {
            unreachable!()
        };
        r.begin_array()?;
        let mut first = true;
        while r.next_element(first)? {
            first = false;
            element.decode(r)?;
        }
        match i32::try_from(element.len()) {
            Ok(end) => {
                offsets.push(end);
                Ok(())
            }
            Err(_) => Err(self.field_error("list elements of one batch exceed 2^31")),
        }
    }

    pub(super) fn decode_map(&mut self, r: &mut Reader<'_>) -> Result<(), ValueError> {
        let Data::Map {
            offsets,
            key,
            value,
        } = &mut self.data
        else {
            unreachable!()
        };
        r.begin_object()?;
        let mut first = true;
        while let Some(k) = r.next_key(first)? {
            first = false;
            key.push_scalar(Token::String(k))?;
            value.decode(r)?;
        }
        match i32::try_from(key.len()) {
            Ok(end) => {
                offsets.push(end);
                Ok(())
            }
            Err(_) => Err(self.field_error("map entries of one batch exceed 2^31")),
        }
    }
}

impl StructData {
    /// Decodes one JSON object into the children; absent fields become null.
    pub fn decode_object(&mut self, r: &mut Reader<'_>) -> Result<(), ValueError> {
        self.stamp += 1;
        let stamp = self.stamp;
        r.begin_object()?;
        let mut first = true;
        let mut previous = self.children.len();
        let mut unknown: Option<String> = None;
        loop {
            let guess = self.successor[previous];
            let expected = self.plain_names.get(guess).and_then(Option::as_deref);
            let index = match r.next_key_expecting(first, expected)? {
                Key::End => break,
                Key::Expected => Some(guess),
                Key::Other(key) => {
                    let found = self.lookup(key);
                    match found {
                        Some(i) => self.successor[previous] = i,
                        None if self.reject_unknown => unknown = Some(key.to_string()),
                        None => {}
                    }
                    found
                }
            };
            first = false;
            let Some(i) = index else {
                match unknown.take() {
                    Some(key) => self.reject_unknown_field(&key, r)?,
                    None => r.skip_value()?,
                }
                continue;
            };
            if self.seen[i] == stamp {
                return Err(ValueError::Field {
                    path: self.children[i].path.clone(),
                    reason: "field appears twice in one object".into(),
                });
            }
            self.seen[i] = stamp;
            self.children[i].decode(r)?;
            previous = i;
        }
        for (i, child) in self.children.iter_mut().enumerate() {
            if self.seen[i] != stamp {
                if child.required {
                    return Err(child.field_error("required field is missing"));
                }
                child.push_null();
            }
        }
        Ok(())
    }

    /// Skips the value of `key`, which is not a column, failing the message when the
    /// value holds data (see [`UnknownFields`]).
    pub(super) fn reject_unknown_field(
        &self,
        key: &str,
        r: &mut Reader<'_>,
    ) -> Result<(), ValueError> {
        let raw = r.skip_value_raw()?;
        let holds_data = serde_json::from_str::<serde_json::Value>(raw)
            .map(|v| crate::shred::infer::holds_data(&v))
            .unwrap_or(true);
        if !holds_data {
            return Ok(());
        }
        let lower = key.to_lowercase();
        let twin = self
            .by_name
            .keys()
            .find(|name| self.case_sensitive && name.to_lowercase() == lower);
        let reason = match twin {
            Some(twin) => format!(
                "{NOT_A_COLUMN} (column `{twin}` differs only in case; set \
                 case_sensitive_columns: false to write it there)"
            ),
            None => NOT_A_COLUMN.into(),
        };
        Err(ValueError::Field {
            path: if self.path.is_empty() {
                key.to_string()
            } else {
                format!("{}.{key}", self.path)
            },
            reason,
        })
    }
}

/// The top-level decoder: a struct whose children are the table's columns.
pub struct RowDecoder {
    root: StructData,
    rows: usize,
}

impl RowDecoder {
    pub fn new(
        schema: &iceberg::spec::Schema,
        arrow: &arrow_schema::Schema,
        opts: DecodeOptions,
    ) -> Self {
        RowDecoder {
            root: StructData::new(schema.as_struct().fields(), arrow.fields(), "", opts),
            rows: 0,
        }
    }

    /// Decodes one message as a row; on error the columns are left as before the call.
    pub fn decode_row(&mut self, text: &str) -> Result<(), ValueError> {
        let mut r = Reader::new(text);
        let result = match r.peek() {
            Ok(Peek::Object) => self
                .root
                .decode_object(&mut r)
                .and_then(|()| r.finish().map_err(ValueError::from)),
            // Check the syntax first, so "nonsense" is reported as invalid JSON.
            Ok(other) => r.skip_value().map_err(ValueError::from).and_then(|()| {
                Err(ValueError::Field {
                    path: String::new(),
                    reason: format!("message must be a JSON object, got {}", other.describe()),
                })
            }),
            Err(e) => Err(e.into()),
        };
        match result {
            Ok(()) => {
                self.rows += 1;
                Ok(())
            }
            Err(e) => {
                self.root.truncate(self.rows);
                Err(e)
            }
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn finish(&mut self) -> Vec<ArrayRef> {
        self.rows = 0;
        self.root.finish_children()
    }
}
