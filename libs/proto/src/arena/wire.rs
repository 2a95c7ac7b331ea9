//! Protobuf wire format: varints, field keys and the four value shapes, read from a borrowed slice.
//!
//! [`Fields`] walks the fields of one message and hands out each value without copying; groups (wire types
//! 3/4, deprecated but legal) are skipped whole. Offsets are absolute: a nested message's reader is built with
//! the offset of its first byte in the original body, so every error points at the same byte a hex dump would.

use crate::error::DecodeError;

/// Deepest nesting of unknown groups the decoder skips before refusing the input (prost allows 100).
pub const MAX_GROUP_DEPTH: usize = 64;

const MAX_FIELD_NUMBER: u64 = (1 << 29) - 1;

/// Wire type numbers, for error messages.
pub(crate) const WIRE_VARINT: u8 = 0;
pub(crate) const WIRE_FIXED64: u8 = 1;
pub(crate) const WIRE_LEN: u8 = 2;
pub(crate) const WIRE_START_GROUP: u8 = 3;
pub(crate) const WIRE_END_GROUP: u8 = 4;
pub(crate) const WIRE_FIXED32: u8 = 5;

/// One field value; length-delimited payloads borrow from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    /// The payload and the absolute offset of its first byte.
    Len(&'a [u8], usize),
    Fixed32(u32),
    /// A whole group, already skipped.
    Group,
}

impl Value<'_> {
    pub(crate) fn wire_type(&self) -> u8 {
        match self {
            Value::Varint(_) => WIRE_VARINT,
            Value::Fixed64(_) => WIRE_FIXED64,
            Value::Len(..) => WIRE_LEN,
            Value::Fixed32(_) => WIRE_FIXED32,
            Value::Group => WIRE_START_GROUP,
        }
    }
}

/// A decoded field: its number, its value and the absolute offset of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Field<'a> {
    pub number: u32,
    pub value: Value<'a>,
    pub offset: usize,
}

impl Field<'_> {
    /// The error for a known field that arrived with the wrong wire type.
    pub(crate) fn wrong_type(&self, what: &'static str, expected: u8) -> DecodeError {
        DecodeError::WrongWireType {
            what,
            offset: self.offset,
            found: self.value.wire_type(),
            expected,
        }
    }
}

/// Iterates the fields of one message. After the first error it yields nothing more.
#[derive(Debug, Clone)]
pub(crate) struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
    message: &'static str,
    failed: bool,
}

impl<'a> Fields<'a> {
    /// `base` is the absolute offset of `buf[0]`; `message` names the message type in errors.
    pub(crate) fn new(buf: &'a [u8], base: usize, message: &'static str) -> Self {
        Self {
            buf,
            pos: 0,
            base,
            message,
            failed: false,
        }
    }

    fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Reads a varint; on failure returns how many bytes it consumed (`Err(Some(n))` = truncated after n
    /// bytes, `Err(None)` = overflow) so the caller can name what it was reading.
    fn raw_varint(&mut self) -> Result<u64, Option<usize>> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err(Some(i));
            };
            self.pos += 1;
            if i == 9 && byte > 1 {
                return Err(None);
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(None)
    }

    /// A varint value or length prefix of field `field`.
    fn varint(&mut self, field: u32, what: &'static str) -> Result<u64, DecodeError> {
        let offset = self.offset();
        self.raw_varint().map_err(|e| match e {
            Some(read) => DecodeError::Truncated {
                message: self.message,
                field,
                what,
                offset,
                needed: read + 1,
                available: read,
            },
            None => DecodeError::VarintOverflow {
                message: self.message,
                what,
                offset,
            },
        })
    }

    fn fixed<const N: usize>(&mut self, field: u32, what: &'static str) -> Result<[u8; N], DecodeError> {
        let available = self.buf.len() - self.pos;
        let bytes = self
            .buf
            .get(self.pos..self.pos + N)
            .and_then(|s| <[u8; N]>::try_from(s).ok())
            .ok_or(DecodeError::Truncated {
                message: self.message,
                field,
                what,
                offset: self.offset(),
                needed: N,
                available,
            })?;
        self.pos += N;
        Ok(bytes)
    }

    fn len_delimited(&mut self, field: u32) -> Result<(&'a [u8], usize), DecodeError> {
        let offset = self.offset();
        let len = self.varint(field, "length prefix")?;
        let available = self.buf.len() - self.pos;
        if len > available as u64 {
            return Err(DecodeError::LengthOverflow {
                message: self.message,
                field,
                offset,
                len,
                available,
            });
        }
        // Cannot truncate: len <= available, a usize.
        let len = len as usize;
        let start = self.pos;
        self.pos += len;
        Ok((&self.buf[start..start + len], self.base + start))
    }

    /// Reads a field key: (field number, wire type), both checked.
    fn key(&mut self) -> Result<(u32, u8), DecodeError> {
        let offset = self.offset();
        let key = self.raw_varint().map_err(|e| match e {
            Some(_) => DecodeError::TruncatedKey {
                message: self.message,
                offset,
            },
            None => DecodeError::VarintOverflow {
                message: self.message,
                what: "field key",
                offset,
            },
        })?;
        let number = key >> 3;
        if number == 0 || number > MAX_FIELD_NUMBER {
            return Err(DecodeError::InvalidFieldNumber {
                message: self.message,
                key,
                offset,
            });
        }
        // Cannot truncate: checked against MAX_FIELD_NUMBER above.
        let number = number as u32;
        let wire_type = (key & 7) as u8;
        if wire_type > WIRE_FIXED32 {
            return Err(DecodeError::InvalidWireType {
                message: self.message,
                field: number,
                wire_type,
                offset,
            });
        }
        Ok((number, wire_type))
    }

    /// Skips the rest of a group opened by field `number` at `offset`, including nested groups.
    fn skip_group(&mut self, number: u32, offset: usize, depth: usize) -> Result<(), DecodeError> {
        if depth > MAX_GROUP_DEPTH {
            return Err(DecodeError::GroupTooDeep {
                message: self.message,
                limit: MAX_GROUP_DEPTH,
                offset,
            });
        }
        loop {
            if self.pos >= self.buf.len() {
                return Err(DecodeError::UnterminatedGroup {
                    message: self.message,
                    field: number,
                    offset,
                });
            }
            let key_offset = self.offset();
            let (inner, wire_type) = self.key()?;
            match wire_type {
                WIRE_END_GROUP if inner == number => return Ok(()),
                WIRE_END_GROUP => {
                    return Err(DecodeError::UnexpectedEndGroup {
                        message: self.message,
                        field: inner,
                        offset: key_offset,
                    });
                }
                WIRE_START_GROUP => self.skip_group(inner, key_offset, depth + 1)?,
                _ => {
                    self.value(inner, wire_type)?;
                }
            }
        }
    }

    /// Reads a value of a non-group wire type.
    fn value(&mut self, field: u32, wire_type: u8) -> Result<Value<'a>, DecodeError> {
        Ok(match wire_type {
            WIRE_VARINT => Value::Varint(self.varint(field, "varint value")?),
            WIRE_FIXED64 => Value::Fixed64(u64::from_le_bytes(self.fixed::<8>(field, "64-bit value")?)),
            WIRE_FIXED32 => Value::Fixed32(u32::from_le_bytes(self.fixed::<4>(field, "32-bit value")?)),
            _ => {
                let (data, offset) = self.len_delimited(field)?;
                Value::Len(data, offset)
            }
        })
    }

    fn next_field(&mut self) -> Result<Field<'a>, DecodeError> {
        let offset = self.offset();
        let (number, wire_type) = self.key()?;
        let value = match wire_type {
            WIRE_START_GROUP => {
                self.skip_group(number, offset, 1)?;
                Value::Group
            }
            WIRE_END_GROUP => {
                return Err(DecodeError::UnexpectedEndGroup {
                    message: self.message,
                    field: number,
                    offset,
                });
            }
            _ => self.value(number, wire_type)?,
        };
        Ok(Field { number, value, offset })
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let field = self.next_field();
        self.failed = field.is_err();
        Some(field)
    }
}

/// Checks that `buf` is a well-formed sequence of fields, without looking inside nested messages.
pub(crate) fn check_message(buf: &[u8], base: usize, message: &'static str) -> Result<(), DecodeError> {
    Fields::new(buf, base, message).try_for_each(|f| f.map(drop))
}

/// Appends `value` as a base-128 varint.
pub(crate) fn put_varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(buf: &[u8]) -> Result<Vec<Field<'_>>, DecodeError> {
        Fields::new(buf, 100, "Test").collect()
    }

    #[test]
    fn varint_round_trips_at_every_width() {
        for value in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut buf = vec![0x08];
            put_varint(value, &mut buf);
            let got = fields(&buf).unwrap();
            assert_eq!(got[0].value, Value::Varint(value), "value {value}");
        }
    }

    #[test]
    fn reads_each_wire_type_with_absolute_offsets() {
        // field 1 varint 150, field 2 fixed64, field 3 bytes "ab", field 4 fixed32, field 5 group {6: 1}.
        let buf = [
            0x08, 0x96, 0x01, 0x11, 1, 2, 3, 4, 5, 6, 7, 8, 0x1a, 2, b'a', b'b', 0x25, 9, 0, 0, 0, 0x2b, 0x30, 1, 0x2c,
        ];
        let got = fields(&buf).unwrap();
        assert_eq!(
            got[0],
            Field {
                number: 1,
                value: Value::Varint(150),
                offset: 100
            }
        );
        assert_eq!(got[1].value, Value::Fixed64(0x0807060504030201));
        assert_eq!(got[2].value, Value::Len(b"ab", 114));
        assert_eq!(got[3].value, Value::Fixed32(9));
        assert_eq!(
            got[4],
            Field {
                number: 5,
                value: Value::Group,
                offset: 121
            }
        );
        assert_eq!(got.len(), 5);
    }

    #[test]
    fn malformed_inputs_name_what_and_where() {
        let cases: &[(&str, &[u8], DecodeError)] = &[
            (
                "truncated varint",
                &[0x08, 0x80],
                DecodeError::Truncated {
                    message: "Test",
                    field: 1,
                    what: "varint value",
                    offset: 101,
                    needed: 2,
                    available: 1,
                },
            ),
            (
                "truncated fixed64",
                &[0x09, 1, 2],
                DecodeError::Truncated {
                    message: "Test",
                    field: 1,
                    what: "64-bit value",
                    offset: 101,
                    needed: 8,
                    available: 2,
                },
            ),
            (
                "length past end",
                &[0x0a, 5, 1],
                DecodeError::LengthOverflow {
                    message: "Test",
                    field: 1,
                    offset: 101,
                    len: 5,
                    available: 1,
                },
            ),
            (
                "varint over 64 bits",
                &[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
                DecodeError::VarintOverflow {
                    message: "Test",
                    what: "varint value",
                    offset: 101,
                },
            ),
            (
                "truncated key",
                &[0x80],
                DecodeError::TruncatedKey {
                    message: "Test",
                    offset: 100,
                },
            ),
            (
                "field number zero",
                &[0x00],
                DecodeError::InvalidFieldNumber {
                    message: "Test",
                    key: 0,
                    offset: 100,
                },
            ),
            (
                "wire type 6",
                &[0x0e],
                DecodeError::InvalidWireType {
                    message: "Test",
                    field: 1,
                    wire_type: 6,
                    offset: 100,
                },
            ),
            (
                "stray end group",
                &[0x0c],
                DecodeError::UnexpectedEndGroup {
                    message: "Test",
                    field: 1,
                    offset: 100,
                },
            ),
            (
                "mismatched end group",
                &[0x0b, 0x14],
                DecodeError::UnexpectedEndGroup {
                    message: "Test",
                    field: 2,
                    offset: 101,
                },
            ),
            (
                "unterminated group",
                &[0x0b, 0x10, 0x01],
                DecodeError::UnterminatedGroup {
                    message: "Test",
                    field: 1,
                    offset: 100,
                },
            ),
        ];
        for (name, buf, want) in cases {
            assert_eq!(fields(buf).unwrap_err(), *want, "case {name}");
        }
    }

    #[test]
    fn deep_groups_are_refused_not_recursed_forever() {
        let mut buf = vec![0x0b; MAX_GROUP_DEPTH + 1];
        buf.extend(vec![0x0c; MAX_GROUP_DEPTH + 1]);
        assert!(matches!(fields(&buf), Err(DecodeError::GroupTooDeep { .. })));
        let ok_depth = MAX_GROUP_DEPTH;
        let mut buf = vec![0x0b; ok_depth];
        buf.extend(vec![0x0c; ok_depth]);
        assert_eq!(fields(&buf).unwrap().len(), 1);
    }
}
