//! Column buffers that JSON values are decoded into, one per Iceberg field.
//!
//! Buffers are plain `Vec`s so that a message which fails half-way can be rolled back by
//! truncating every column to the row count before it ([`Column::truncate`]); Arrow
//! builders offer no such undo. `finish` hands the vectors to Arrow without copying.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
    Time64MicrosecondType, TimestampMicrosecondType, TimestampNanosecondType,
};
use arrow_array::{
    ArrayRef, BooleanArray, FixedSizeBinaryArray, LargeBinaryArray, ListArray, MapArray,
    PrimitiveArray, StringArray, StructArray,
};
use arrow_buffer::{BooleanBufferBuilder, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, FieldRef, Fields};
use iceberg::spec::{NestedField, PrimitiveType, Type};

use super::convert::{self, EpochUnit};
use super::json::{Key, Peek, Reader, SyntaxError};

/// What went wrong in one message, before the message index is attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueError {
    Syntax(SyntaxError),
    Field { path: String, reason: String },
}

impl From<SyntaxError> for ValueError {
    fn from(e: SyntaxError) -> Self {
        ValueError::Syntax(e)
    }
}

/// Options fixed when the decoders are built, never checked per value.
#[derive(Debug, Clone, Copy)]
pub struct DecodeOptions {
    pub epoch_unit: EpochUnit,
    pub case_sensitive: bool,
    /// What a field that is not a column does to its message.
    pub unknown_fields: UnknownFields,
}

/// What a JSON field that is not a column of the table does to its message. A field
/// whose value holds no data (`null`, `[]`, `{}`, or only those nested) is skipped
/// either way: nothing is lost, and it has no type to become a column with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownFields {
    /// Skipped: the rest of the message is written.
    Ignore,
    /// The message fails with an error naming the field (with schema evolution, the
    /// writer then adds the field as a column and shreds the message again).
    Reject,
}

/// The reason given for a field that is not a column (see [`UnknownFields::Reject`]).
pub const NOT_A_COLUMN: &str = "not a column of the table";

/// One JSON scalar as the reader saw it.
enum Token<'a> {
    /// The literal, and its value when it is a plain integer.
    Number(&'a str, Option<i64>),
    String(&'a str),
    Bool(bool),
}

impl Token<'_> {
    fn describe(&self) -> &'static str {
        match self {
            Token::Number(..) => "a number",
            Token::String(_) => "a string",
            Token::Bool(_) => "a boolean",
        }
    }
}

enum Data {
    Bool(BooleanBufferBuilder),
    Int(Vec<i32>),
    Date(Vec<i32>),
    Long(Vec<i64>),
    Time(Vec<i64>),
    Timestamp {
        values: Vec<i64>,
        zone: bool,
        /// Nanoseconds (`timestamp_ns`, v3), else microseconds.
        nanos: bool,
    },
    Float(Vec<f32>),
    Double(Vec<f64>),
    Decimal {
        values: Vec<i128>,
        precision: u32,
        scale: u32,
    },
    String {
        offsets: Vec<i32>,
        bytes: Vec<u8>,
    },
    Binary {
        offsets: Vec<i64>,
        bytes: Vec<u8>,
    },
    Fixed {
        width: usize,
        bytes: Vec<u8>,
        uuid: bool,
    },
    Struct(StructData),
    List {
        offsets: Vec<i32>,
        element: Box<Column>,
    },
    Map {
        offsets: Vec<i32>,
        key: Box<Column>,
        value: Box<Column>,
    },
}

struct StructData {
    /// Dotted path of the struct (empty at the top level).
    path: String,
    reject_unknown: bool,
    children: Vec<Column>,
    /// Each child's name as raw JSON key bytes, when it needs no escaping.
    plain_names: Vec<Option<Box<[u8]>>>,
    /// Child index by name (lower-cased when matching is case-insensitive).
    by_name: HashMap<String, usize>,
    /// `seen[i] == stamp` when child `i` was set in the object being decoded.
    seen: Vec<u64>,
    stamp: u64,
    case_sensitive: bool,
    /// The child expected after child `i` (`successor[children.len()]`: the first key),
    /// learned from the last object that surprised it. Producers write keys in a fixed
    /// order, but not necessarily the schema's (Benthos sorts them), so after the first
    /// message nearly every key is matched by comparing bytes, without a hash lookup.
    successor: Vec<usize>,
}

/// Decoder and buffer for one field (and, through its children, everything under it).
pub struct Column {
    path: String,
    required: bool,
    arrow: FieldRef,
    /// Validity bits, materialised at the first null: columns that never see a null
    /// (the common case) skip a bit operation per value.
    validity: Option<BooleanBufferBuilder>,
    nulls: usize,
    len: usize,
    epoch_unit: EpochUnit,
    data: Data,
}

impl Column {
    /// Builds the decoder for an Iceberg field whose Arrow form is `arrow`.
    pub fn new(field: &NestedField, arrow: &FieldRef, parent: &str, opts: DecodeOptions) -> Self {
        let path = if parent.is_empty() {
            field.name.clone()
        } else {
            format!("{parent}.{}", field.name)
        };
        let data = Self::make_data(&field.field_type, arrow.data_type(), &path, opts);
        Column {
            path,
            required: field.required,
            arrow: arrow.clone(),
            validity: None,
            nulls: 0,
            len: 0,
            epoch_unit: opts.epoch_unit,
            data,
        }
    }

    fn make_data(ty: &Type, arrow: &DataType, path: &str, opts: DecodeOptions) -> Data {
        match (ty, arrow) {
            (Type::Primitive(p), _) => Self::make_primitive(p),
            (Type::Struct(s), DataType::Struct(fields)) => {
                Data::Struct(StructData::new(s.fields(), fields, path, opts))
            }
            (Type::List(l), DataType::List(element)) => Data::List {
                offsets: vec![0],
                element: Box::new(Column::new(&l.element_field, element, path, opts)),
            },
            (Type::Map(m), DataType::Map(entries, _)) => {
                let DataType::Struct(kv) = entries.data_type() else {
                    unreachable!("iceberg maps convert to Arrow maps of structs")
                };
                Data::Map {
                    offsets: vec![0],
                    key: Box::new(Column::new(&m.key_field, &kv[0], path, opts)),
                    value: Box::new(Column::new(&m.value_field, &kv[1], path, opts)),
                }
            }
            _ => unreachable!("iceberg and Arrow schemas disagree at {path}"),
        }
    }

    fn make_primitive(p: &PrimitiveType) -> Data {
        match p {
            PrimitiveType::Boolean => Data::Bool(BooleanBufferBuilder::new(0)),
            PrimitiveType::Int => Data::Int(Vec::new()),
            PrimitiveType::Long => Data::Long(Vec::new()),
            PrimitiveType::Float => Data::Float(Vec::new()),
            PrimitiveType::Double => Data::Double(Vec::new()),
            PrimitiveType::Decimal { precision, scale } => Data::Decimal {
                values: Vec::new(),
                precision: *precision,
                scale: *scale,
            },
            PrimitiveType::Date => Data::Date(Vec::new()),
            PrimitiveType::Time => Data::Time(Vec::new()),
            PrimitiveType::Timestamp => Data::Timestamp {
                values: Vec::new(),
                zone: false,
                nanos: false,
            },
            PrimitiveType::Timestamptz => Data::Timestamp {
                values: Vec::new(),
                zone: true,
                nanos: false,
            },
            PrimitiveType::TimestampNs => Data::Timestamp {
                values: Vec::new(),
                zone: false,
                nanos: true,
            },
            PrimitiveType::TimestamptzNs => Data::Timestamp {
                values: Vec::new(),
                zone: true,
                nanos: true,
            },
            PrimitiveType::String => Data::String {
                offsets: vec![0],
                bytes: Vec::new(),
            },
            PrimitiveType::Uuid => Data::Fixed {
                width: 16,
                bytes: Vec::new(),
                uuid: true,
            },
            PrimitiveType::Fixed(width) => Data::Fixed {
                width: *width as usize,
                bytes: Vec::new(),
                uuid: false,
            },
            PrimitiveType::Binary => Data::Binary {
                offsets: vec![0],
                bytes: Vec::new(),
            },
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    fn field_error(&self, reason: impl Into<String>) -> ValueError {
        ValueError::Field {
            path: self.path.clone(),
            reason: reason.into(),
        }
    }

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
    fn expected(&self) -> String {
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

    fn push_valid(&mut self) {
        if let Some(v) = &mut self.validity {
            v.append(true);
        }
        self.len += 1;
    }

    /// Appends a null slot. Required columns under a null parent get a valid default
    /// instead, so a non-nullable Arrow child never holds nulls.
    fn push_null(&mut self) {
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
    fn push_placeholder(&mut self) {
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

    fn push_scalar(&mut self, token: Token<'_>) -> Result<(), ValueError> {
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

    fn decode_struct(&mut self, r: &mut Reader<'_>) -> Result<(), ValueError> {
        let Data::Struct(s) = &mut self.data else {
            unreachable!()
        };
        s.decode_object(r)
    }

    fn decode_list(&mut self, r: &mut Reader<'_>) -> Result<(), ValueError> {
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

    fn decode_map(&mut self, r: &mut Reader<'_>) -> Result<(), ValueError> {
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

    /// Drops every slot from `len` on, in this column and everything under it.
    ///
    /// Buffers are cut even when `len` equals this column's own length: a container
    /// counts its slot only after its children decoded, and a string's bytes are appended
    /// before its offset, so a failure half-way leaves data beyond `len`'s slots.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            if let Some(v) = &mut self.validity {
                let removed_nulls = (len..self.len).filter(|&i| !v.get_bit(i)).count();
                self.nulls -= removed_nulls;
                v.truncate(len);
            }
            self.len = len;
        }
        match &mut self.data {
            Data::Bool(b) => b.truncate(len),
            Data::Int(v) | Data::Date(v) => v.truncate(len),
            Data::Long(v) | Data::Time(v) => v.truncate(len),
            Data::Timestamp { values, .. } => values.truncate(len),
            Data::Float(v) => v.truncate(len),
            Data::Double(v) => v.truncate(len),
            Data::Decimal { values, .. } => values.truncate(len),
            Data::String { offsets, bytes } => {
                offsets.truncate(len + 1);
                bytes.truncate(offsets[len] as usize);
            }
            Data::Binary { offsets, bytes } => {
                offsets.truncate(len + 1);
                bytes.truncate(offsets[len] as usize);
            }
            Data::Fixed { width, bytes, .. } => bytes.truncate(len * *width),
            Data::Struct(s) => s.children.iter_mut().for_each(|c| c.truncate(len)),
            Data::List { offsets, element } => {
                offsets.truncate(len + 1);
                element.truncate(offsets[len] as usize);
            }
            Data::Map {
                offsets,
                key,
                value,
            } => {
                offsets.truncate(len + 1);
                key.truncate(offsets[len] as usize);
                value.truncate(offsets[len] as usize);
            }
        }
    }

    fn take_nulls(&mut self) -> Option<NullBuffer> {
        let validity = self.validity.take();
        let had_nulls = self.nulls > 0;
        self.nulls = 0;
        self.len = 0;
        validity
            .filter(|_| had_nulls)
            .map(|mut v| NullBuffer::new(v.finish()))
    }

    /// Moves the buffered values into an Arrow array and leaves the column empty.
    pub fn finish(&mut self) -> ArrayRef {
        let nulls = self.take_nulls();
        let field = self.arrow.clone();
        match &mut self.data {
            Data::Bool(b) => Arc::new(BooleanArray::new(b.finish(), nulls)),
            Data::Int(v) => Arc::new(PrimitiveArray::<Int32Type>::new(take(v), nulls)),
            Data::Date(v) => Arc::new(PrimitiveArray::<Date32Type>::new(take(v), nulls)),
            Data::Long(v) => Arc::new(PrimitiveArray::<Int64Type>::new(take(v), nulls)),
            Data::Time(v) => Arc::new(PrimitiveArray::<Time64MicrosecondType>::new(take(v), nulls)),
            Data::Timestamp { values, nanos, .. } => {
                let DataType::Timestamp(_, zone) = field.data_type() else {
                    unreachable!()
                };
                if *nanos {
                    Arc::new(
                        PrimitiveArray::<TimestampNanosecondType>::new(take(values), nulls)
                            .with_timezone_opt(zone.clone()),
                    )
                } else {
                    Arc::new(
                        PrimitiveArray::<TimestampMicrosecondType>::new(take(values), nulls)
                            .with_timezone_opt(zone.clone()),
                    )
                }
            }
            Data::Float(v) => Arc::new(PrimitiveArray::<Float32Type>::new(take(v), nulls)),
            Data::Double(v) => Arc::new(PrimitiveArray::<Float64Type>::new(take(v), nulls)),
            Data::Decimal {
                values,
                precision,
                scale,
            } => Arc::new(
                PrimitiveArray::<Decimal128Type>::new(take(values), nulls)
                    .with_precision_and_scale(*precision as u8, *scale as i8)
                    .expect("precision validated by the schema conversion"),
            ),
            Data::String { offsets, bytes } => {
                let offsets = take_offsets(offsets);
                let values = Buffer::from_vec(std::mem::take(bytes));
                // SAFETY: every appended slice came from a `&str`, so the bytes are UTF-8
                // and each offset falls on a character boundary; offsets are monotonic.
                Arc::new(unsafe { StringArray::new_unchecked(offsets, values, nulls) })
            }
            Data::Binary { offsets, bytes } => {
                let offsets = take_offsets(offsets);
                let values = Buffer::from_vec(std::mem::take(bytes));
                Arc::new(LargeBinaryArray::new(offsets, values, nulls))
            }
            Data::Fixed { width, bytes, .. } => Arc::new(FixedSizeBinaryArray::new(
                *width as i32,
                Buffer::from_vec(std::mem::take(bytes)),
                nulls,
            )),
            Data::Struct(s) => {
                let DataType::Struct(fields) = field.data_type() else {
                    unreachable!()
                };
                let children = s.finish_children();
                Arc::new(StructArray::new(fields.clone(), children, nulls))
            }
            Data::List { offsets, element } => {
                let DataType::List(element_field) = field.data_type() else {
                    unreachable!()
                };
                let offsets = take_offsets(offsets);
                Arc::new(ListArray::new(
                    element_field.clone(),
                    offsets,
                    element.finish(),
                    nulls,
                ))
            }
            Data::Map {
                offsets,
                key,
                value,
            } => {
                let DataType::Map(entries_field, sorted) = field.data_type() else {
                    unreachable!()
                };
                let DataType::Struct(kv_fields) = entries_field.data_type() else {
                    unreachable!()
                };
                let entries =
                    StructArray::new(kv_fields.clone(), vec![key.finish(), value.finish()], None);
                let offsets = take_offsets(offsets);
                Arc::new(MapArray::new(
                    entries_field.clone(),
                    offsets,
                    entries,
                    nulls,
                    *sorted,
                ))
            }
        }
    }
}

/// Moves a vector's contents into an Arrow scalar buffer, leaving it empty.
fn take<T: arrow_buffer::ArrowNativeType>(v: &mut Vec<T>) -> ScalarBuffer<T> {
    ScalarBuffer::from(std::mem::take(v))
}

/// Moves an offsets vector into an Arrow offset buffer and re-seeds it with the leading 0.
fn take_offsets<T: arrow_buffer::ArrowNativeType + Default>(
    offsets: &mut Vec<T>,
) -> OffsetBuffer<T> {
    OffsetBuffer::new(ScalarBuffer::from(std::mem::replace(
        offsets,
        vec![T::default()],
    )))
}

impl StructData {
    fn new(fields: &[Arc<NestedField>], arrow: &Fields, path: &str, opts: DecodeOptions) -> Self {
        let children: Vec<Column> = fields
            .iter()
            .zip(arrow.iter())
            .map(|(f, a)| Column::new(f, a, path, opts))
            .collect();
        let children_len = children.len();
        let by_name = fields
            .iter()
            .enumerate()
            .map(|(i, f)| (name_key(&f.name, opts.case_sensitive), i))
            .collect();
        let plain_names = fields
            .iter()
            .map(|f| {
                let plain = f.name.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\');
                plain.then(|| f.name.as_bytes().into())
            })
            .collect();
        StructData {
            path: path.to_string(),
            reject_unknown: opts.unknown_fields == UnknownFields::Reject,
            plain_names,
            seen: vec![0; children.len()],
            children,
            by_name,
            stamp: 0,
            case_sensitive: opts.case_sensitive,
            // Until taught otherwise: the schema's order.
            successor: (1..=children_len).chain([0]).collect(),
        }
    }

    /// Finds a child by name. Only reached when the expected-key fast path in
    /// `decode_object` missed, so trying the guessed field again here would be wasted.
    fn lookup(&self, key: &str) -> Option<usize> {
        if self.case_sensitive {
            self.by_name.get(key).copied()
        } else {
            self.by_name.get(&key.to_lowercase()).copied()
        }
    }

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
    fn reject_unknown_field(&self, key: &str, r: &mut Reader<'_>) -> Result<(), ValueError> {
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

    pub fn truncate(&mut self, len: usize) {
        self.children.iter_mut().for_each(|c| c.truncate(len));
    }

    pub fn finish_children(&mut self) -> Vec<ArrayRef> {
        self.children.iter_mut().map(Column::finish).collect()
    }
}

fn name_key(name: &str, case_sensitive: bool) -> String {
    if case_sensitive {
        name.to_string()
    } else {
        name.to_lowercase()
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
