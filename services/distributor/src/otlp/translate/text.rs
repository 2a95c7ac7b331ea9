//! Attribute values and numbers as label text, written through [`fmt::Write`] so that the same code can
//! count a text's length without allocating ([`text_len`]) and then build it in a string of exactly that
//! capacity ([`exact`]): what the translation allocates can then be bounded before it runs
//! ([`super::bound`]).

use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use std::fmt;

/// Counts the bytes written to it.
#[derive(Debug, Default)]
struct Count(usize);

impl fmt::Write for Count {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// The length of what `write` writes.
pub(super) fn text_len(write: impl Fn(&mut dyn fmt::Write)) -> usize {
    let mut n = Count::default();
    write(&mut n);
    n.0
}

/// What `write` writes, in a string whose capacity is its length.
pub(super) fn exact(write: impl Fn(&mut dyn fmt::Write)) -> String {
    let mut s = String::with_capacity(text_len(&write));
    write(&mut s);
    debug_assert_eq!(s.len(), s.capacity());
    s
}

/// An attribute value as Prometheus' translator writes it: strings as they are, numbers and booleans in
/// their usual text, bytes in base64, arrays and maps as JSON.
pub(super) fn value_string(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        // The common case, copied at its length.
        Some(any_value::Value::StringValue(s)) => s.clone(),
        v => exact(|out| write_value(v, false, out)),
    }
}

/// The length of [`value_string`]`(v)`.
pub(super) fn value_len(v: Option<&AnyValue>) -> usize {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.len(),
        v => text_len(|out| write_value(v, false, out)),
    }
}

/// `f` as [`write_float`] writes it, in an exact string.
pub(super) fn float_text(f: f64) -> String {
    exact(|out| write_float(f, out))
}

pub(super) fn float_len(f: f64) -> usize {
    text_len(|out| write_float(f, out))
}

pub(super) fn write_value(v: Option<&any_value::Value>, json: bool, out: &mut dyn fmt::Write) {
    use any_value::Value;
    let _ = match v {
        None if json => out.write_str("null"),
        None => Ok(()),
        Some(Value::StringValue(s)) if json => json_string(s, out),
        Some(Value::StringValue(s)) => out.write_str(s),
        Some(Value::BoolValue(b)) => out.write_str(if *b { "true" } else { "false" }),
        Some(Value::IntValue(i)) => write!(out, "{i}"),
        Some(Value::DoubleValue(f)) if json && !f.is_finite() => {
            let _ = out.write_char('"');
            write_float(*f, out);
            out.write_char('"')
        }
        Some(Value::DoubleValue(f)) => {
            write_float(*f, out);
            Ok(())
        }
        Some(Value::BytesValue(b)) if json => {
            let _ = out.write_char('"');
            write_base64(b, out);
            out.write_char('"')
        }
        Some(Value::BytesValue(b)) => {
            write_base64(b, out);
            Ok(())
        }
        Some(Value::ArrayValue(a)) => {
            let _ = out.write_char('[');
            for (i, item) in a.values.iter().enumerate() {
                if i > 0 {
                    let _ = out.write_char(',');
                }
                write_value(item.value.as_ref(), true, out);
            }
            out.write_char(']')
        }
        Some(Value::KvlistValue(kvs)) => {
            let _ = out.write_char('{');
            for (i, kv) in kvs.values.iter().enumerate() {
                if i > 0 {
                    let _ = out.write_char(',');
                }
                let _ = json_string(&kv.key, out);
                let _ = out.write_char(':');
                write_value(kv.value.as_ref().and_then(|v| v.value.as_ref()), true, out);
            }
            out.write_char('}')
        }
        // Dictionary references belong to the profiles signal; a metrics sender has no dictionary to resolve.
        Some(Value::StringValueStrindex(i)) => write!(out, "{i}"),
    };
}

fn json_string(s: &str, out: &mut dyn fmt::Write) -> fmt::Result {
    out.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32)?,
            c => out.write_char(c)?,
        }
    }
    out.write_char('"')
}

#[cfg(test)]
pub(super) fn base64(bytes: &[u8]) -> String {
    exact(|out| write_base64(bytes, out))
}

fn write_base64(bytes: &[u8], out: &mut dyn fmt::Write) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            let c = if i <= chunk.len() {
                ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            };
            let _ = out.write_char(c);
        }
    }
}

/// Go's `strconv.FormatFloat(f, 'f', -1, 64)`, which Prometheus uses for `le`, `quantile` and attribute
/// values: the shortest decimal that reads back the same, never an exponent; `+Inf`, `-Inf`, `NaN`.
pub(super) fn write_float(f: f64, out: &mut dyn fmt::Write) {
    let _ = if f.is_nan() {
        out.write_str("NaN")
    } else if f == f64::INFINITY {
        out.write_str("+Inf")
    } else if f == f64::NEG_INFINITY {
        out.write_str("-Inf")
    } else {
        write!(out, "{f}")
    };
}
