//! Handing a column's buffers to Arrow without copying them.

use super::*;

impl Column {
    pub(super) fn take_nulls(&mut self) -> Option<NullBuffer> {
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
pub(super) fn take<T: arrow_buffer::ArrowNativeType>(v: &mut Vec<T>) -> ScalarBuffer<T> {
    ScalarBuffer::from(std::mem::take(v))
}

/// Moves an offsets vector into an Arrow offset buffer and re-seeds it with the leading 0.
pub(super) fn take_offsets<T: arrow_buffer::ArrowNativeType + Default>(
    offsets: &mut Vec<T>,
) -> OffsetBuffer<T> {
    OffsetBuffer::new(ScalarBuffer::from(std::mem::replace(
        offsets,
        vec![T::default()],
    )))
}

impl StructData {
    pub fn finish_children(&mut self) -> Vec<ArrayRef> {
        self.children.iter_mut().map(Column::finish).collect()
    }
}
