//! Column buffers that JSON values are decoded into, one per Iceberg field.
//!
//! Buffers are plain `Vec`s so that a message which fails half-way can be rolled back by
//! truncating every column to the row count before it ([`Column::truncate`]); Arrow
//! builders offer no such undo. `finish` hands the vectors to Arrow without copying.
//!
//! Decoding a JSON value into a column is in `decode`; handing the buffers to Arrow in
//! `finish`.

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

mod decode;
mod finish;

pub use decode::RowDecoder;

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

    pub fn truncate(&mut self, len: usize) {
        self.children.iter_mut().for_each(|c| c.truncate(len));
    }
}

fn name_key(name: &str, case_sensitive: bool) -> String {
    if case_sensitive {
        name.to_string()
    } else {
        name.to_lowercase()
    }
}
