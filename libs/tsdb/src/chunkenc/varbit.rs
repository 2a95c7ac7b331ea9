//! The variable-width integer encodings and XOR float fields of Prometheus' histogram chunks
//! (`tsdb/chunkenc/varbit.go`, `histogram_meta.go`, `xor.go`).
//!
//! Varbit integers: a unary prefix of up to eight `1` bits ended by a `0` (the eighth `1` needs no `0`)
//! chooses the payload width:
//! ```text
//! 0          value 0            1110       9 bits    111110     18 bits    11111110   56 bits
//! 10         3 bits             11110      12 bits   1111110    25 bits    11111111   64 bits
//! 110        6 bits
//! ```
//! Signed values use the smallest bucket whose range [-(2^(n-1) - 1), 2^(n-1)] holds them, in n-bit two's
//! complement; unsigned ones the smallest n with value < 2^n.

use super::bstream::{BitReader, BitWriter};

/// Payload widths of the prefixes `10`, `110`, ... `11111110`; `11111111` takes 64 bits.
const WIDTHS: [u32; 7] = [3, 6, 9, 12, 18, 25, 56];

/// A varbit field that does not decode: the stream ended inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Short;

fn fits_signed(x: i64, nbits: u32) -> bool {
    let half = 1i64 << (nbits - 1);
    -(half - 1) <= x && x <= half
}

pub(crate) fn put_varbit_int(w: &mut BitWriter, x: i64) {
    if x == 0 {
        w.write_bit(false);
        return;
    }
    for (i, &n) in WIDTHS.iter().enumerate() {
        if fits_signed(x, n) {
            // i + 1 ones and a zero.
            w.write_bits(((1u64 << (i + 1)) - 1) << 1, i as u32 + 2);
            w.write_bits(x as u64, n);
            return;
        }
    }
    w.write_bits(0xff, 8);
    w.write_bits(x as u64, 64);
}

pub(crate) fn put_varbit_uint(w: &mut BitWriter, x: u64) {
    if x == 0 {
        w.write_bit(false);
        return;
    }
    for (i, &n) in WIDTHS.iter().enumerate() {
        if x < 1u64 << n {
            w.write_bits(((1u64 << (i + 1)) - 1) << 1, i as u32 + 2);
            w.write_bits(x, n);
            return;
        }
    }
    w.write_bits(0xff, 8);
    w.write_bits(x, 64);
}

/// Reads a prefix and returns the payload width (0 for the value 0).
fn read_width(r: &mut BitReader<'_>) -> Result<u32, Short> {
    let mut ones = 0usize;
    while ones < 8 {
        if r.read_bits(1).ok_or(Short)? == 0 {
            break;
        }
        ones += 1;
    }
    Ok(match ones {
        0 => 0,
        8 => 64,
        n => WIDTHS[n - 1],
    })
}

pub(crate) fn read_varbit_int(r: &mut BitReader<'_>) -> Result<i64, Short> {
    let n = read_width(r)?;
    let bits = r.read_bits(n).ok_or(Short)?;
    if n == 0 || n == 64 {
        return Ok(bits as i64);
    }
    Ok(if bits > 1 << (n - 1) {
        bits as i64 - (1i64 << n)
    } else {
        bits as i64
    })
}

pub(crate) fn read_varbit_uint(r: &mut BitReader<'_>) -> Result<u64, Short> {
    let n = read_width(r)?;
    r.read_bits(n).ok_or(Short)
}

/// Writes a zero threshold in one byte when it is 0 (byte 0) or a power of two 2^-243..=2^10 (the exponent of
/// its 0.5 * 2^e form plus 243), else as byte 255 and the 64 float bits. The default 2^-128 is byte 116.
pub(crate) fn put_zero_threshold(w: &mut BitWriter, threshold: f64) {
    if threshold == 0.0 {
        w.write_byte(0);
        return;
    }
    let bits = threshold.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    // A positive normal power of two: sign 0, mantissa 0. Its frexp exponent is biased - 1022.
    let exp = biased - 1022;
    if bits >> 63 == 0 && bits & ((1 << 52) - 1) == 0 && biased != 0 && (-242..=11).contains(&exp) {
        w.write_byte((exp + 243) as u8);
        return;
    }
    w.write_byte(255);
    w.write_bits(bits, 64);
}

pub(crate) fn read_zero_threshold(r: &mut BitReader<'_>) -> Result<f64, Short> {
    match r.read_byte().ok_or(Short)? {
        0 => Ok(0.0),
        255 => r.read_bits(64).map(f64::from_bits).ok_or(Short),
        // 0.5 * 2^(b - 243) = 2^(b - 244): a normal float for every b in 1..=254.
        b => Ok(f64::from_bits(((i64::from(b) - 244 + 1023) as u64) << 52)),
    }
}

/// Writes a custom bucket bound: a multiple of 0.001 in [0, 33554.430] as the unsigned varbit of
/// `bound * 1000 + 1` (never 0), anything else as a `0` bit (the varbit 0) and the 64 float bits.
pub(crate) fn put_custom_bound(w: &mut BitWriter, bound: f64) {
    let scaled = bound * 1000.0;
    if !(0.0..=33_554_430.0).contains(&scaled) || !whole_in_thousandths(bound) {
        w.write_bit(false);
        w.write_bits(bound.to_bits(), 64);
        return;
    }
    put_varbit_uint(w, scaled.round() as u64 + 1);
}

/// Whether `x` survives a round trip through an integer count of thousandths.
fn whole_in_thousandths(x: f64) -> bool {
    // Go converts with uint(), which Rust's saturating cast matches on every value that reaches here.
    let thousandths = (x * 1000.0).round() as u64;
    thousandths as f64 / 1000.0 == x
}

pub(crate) fn read_custom_bound(r: &mut BitReader<'_>) -> Result<f64, Short> {
    match read_varbit_uint(r)? {
        0 => r.read_bits(64).map(f64::from_bits).ok_or(Short),
        n => Ok((n - 1) as f64 / 1000.0),
    }
}

/// Marks an XOR field with no leading/trailing window yet.
pub(crate) const NO_WINDOW: u8 = 0xff;

/// A float field XOR-encoded against its previous value (the sum, and every field of float histograms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XorField {
    pub(crate) bits: u64,
    pub(crate) leading: u8,
    pub(crate) trailing: u8,
}

impl Default for XorField {
    /// A reader's state before the first value.
    fn default() -> Self {
        Self::read_raw(0)
    }
}

impl XorField {
    /// A field whose first value was written raw, so its next XOR starts a window.
    pub(crate) fn fresh(bits: u64) -> Self {
        Self {
            bits,
            leading: NO_WINDOW,
            trailing: 0,
        }
    }

    /// The state a reader has after the raw first value: the window is (0, 0), not unset, as in Prometheus'
    /// iterators (an appender restored from bytes takes it over).
    pub(crate) fn read_raw(bits: u64) -> Self {
        Self {
            bits,
            leading: 0,
            trailing: 0,
        }
    }

    pub(crate) fn value(&self) -> f64 {
        f64::from_bits(self.bits)
    }

    /// Writes `v` as an XOR with the previous value, exactly as the XOR chunk writes values.
    pub(crate) fn write(&mut self, w: &mut BitWriter, v: f64) {
        let v_bits = v.to_bits();
        let delta = v_bits ^ self.bits;
        self.bits = v_bits;
        if delta == 0 {
            w.write_bit(false);
            return;
        }
        w.write_bit(true);
        let leading = (delta.leading_zeros() as u8).min(31);
        let trailing = delta.trailing_zeros() as u8;
        if self.leading != NO_WINDOW && leading >= self.leading && trailing >= self.trailing {
            w.write_bit(false);
            let sig = 64 - u32::from(self.leading) - u32::from(self.trailing);
            w.write_bits(delta >> self.trailing, sig);
            return;
        }
        self.leading = leading;
        self.trailing = trailing;
        w.write_bit(true);
        w.write_bits(u64::from(leading), 5);
        let sig = 64 - u32::from(leading) - u32::from(trailing);
        // 64 significant bits are stored as 0 in the 6-bit field.
        w.write_bits(u64::from(sig), 6);
        w.write_bits(delta >> trailing, sig);
    }

    /// Reads the next value. `Err(None)` means the stream ended, `Err(Some((leading, sig)))` a window wider
    /// than 64 bits.
    pub(crate) fn read(&mut self, r: &mut BitReader<'_>) -> Result<(), Option<(u8, u8)>> {
        if r.read_bits(1).ok_or(None)? == 0 {
            return Ok(());
        }
        if r.read_bits(1).ok_or(None)? == 1 {
            let leading = r.read_bits(5).ok_or(None)? as u8;
            let sig = match r.read_bits(6).ok_or(None)? as u8 {
                0 => 64,
                n => n,
            };
            if leading + sig > 64 {
                return Err(Some((leading, sig)));
            }
            self.leading = leading;
            self.trailing = 64 - leading - sig;
        } else if u32::from(self.leading) + u32::from(self.trailing) > 64 {
            // Only a corrupt window (from a restored state) gets here; a reader never builds one.
            return Err(Some((self.leading, 64u8.wrapping_sub(self.trailing))));
        }
        let sig = 64 - u32::from(self.leading) - u32::from(self.trailing);
        let bits = r.read_bits(sig).ok_or(None)?;
        self.bits ^= bits.checked_shl(u32::from(self.trailing)).unwrap_or(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bits_of(w: &BitWriter) -> String {
        w.bytes().iter().map(|b| format!("{b:08b}")).collect()
    }

    #[test]
    fn varbit_bucket_edges() {
        // (value, prefix + payload width)
        let cases: &[(i64, usize)] = &[
            (0, 1),
            (1, 5),
            (-3, 5),
            (4, 5),
            (-4, 9),
            (5, 9),
            (32, 9),
            (33, 13),
            (-255, 13),
            (256, 13),
            (2048, 17),
            (2049, 24),
            (131_072, 24),
            (131_073, 32),
            (16_777_216, 32),
            (16_777_217, 64),
            (1 << 55, 64),
            ((1 << 55) + 1, 72),
            (i64::MIN, 72),
        ];
        for &(x, len) in cases {
            let mut w = BitWriter::default();
            put_varbit_int(&mut w, x);
            w.write_bit(true); // marks the end
            let s = bits_of(&w);
            assert_eq!(s.rfind('1'), Some(len), "varbit int {x}: {s}");
            let mut r = BitReader::new(w.bytes());
            assert_eq!(read_varbit_int(&mut r), Ok(x), "varbit int {x}");
        }
        for &(x, len) in &[
            (0u64, 1usize),
            (7, 5),
            (8, 9),
            (63, 9),
            (64, 13),
            (1 << 56, 72),
            (u64::MAX, 72),
        ] {
            let mut w = BitWriter::default();
            put_varbit_uint(&mut w, x);
            w.write_bit(true);
            assert_eq!(bits_of(&w).rfind('1'), Some(len), "varbit uint {x}");
            assert_eq!(read_varbit_uint(&mut BitReader::new(w.bytes())), Ok(x));
        }
    }

    #[test]
    fn zero_thresholds() {
        for (t, bytes) in [
            (0.0, 1usize),
            (2f64.powi(-128), 1),
            (2f64.powi(-243), 1),
            (2f64.powi(10), 1),
            (2f64.powi(11), 9),
            (2f64.powi(-244), 9),
            (0.001, 9),
            (-0.5, 9),
            (f64::INFINITY, 9),
        ] {
            let mut w = BitWriter::default();
            put_zero_threshold(&mut w, t);
            assert_eq!(w.bytes().len(), bytes, "threshold {t}");
            assert_eq!(
                read_zero_threshold(&mut BitReader::new(w.bytes())),
                Ok(t),
                "threshold {t}"
            );
        }
        let mut w = BitWriter::default();
        put_zero_threshold(&mut w, 2f64.powi(-128));
        assert_eq!(w.bytes(), &[116], "the default threshold");
    }

    #[test]
    fn custom_bounds() {
        for (b, varbit) in [
            (0.0, true),
            (0.25, true),
            (33_554.43, true),
            (33_554.431, false),
            (-1.0, false),
            (0.0001, false),
        ] {
            let mut w = BitWriter::default();
            put_custom_bound(&mut w, b);
            let first = w.bytes()[0] >> 7;
            assert_eq!(first == 1, varbit, "bound {b}");
            assert_eq!(read_custom_bound(&mut BitReader::new(w.bytes())), Ok(b), "bound {b}");
        }
    }

    proptest! {
        #[test]
        fn varbits_round_trip(xs in proptest::collection::vec(any::<i64>(), 0..20), us in proptest::collection::vec(any::<u64>(), 0..20)) {
            let mut w = BitWriter::default();
            for x in &xs { put_varbit_int(&mut w, *x); }
            for u in &us { put_varbit_uint(&mut w, *u); }
            let bytes = w.into_vec();
            let mut r = BitReader::new(&bytes);
            for x in &xs { prop_assert_eq!(read_varbit_int(&mut r), Ok(*x)); }
            for u in &us { prop_assert_eq!(read_varbit_uint(&mut r), Ok(*u)); }
        }

        #[test]
        fn xor_fields_round_trip(vs in proptest::collection::vec(any::<u64>(), 1..30)) {
            let mut w = BitWriter::default();
            let mut field = XorField::fresh(vs[0]);
            for v in &vs[1..] { field.write(&mut w, f64::from_bits(*v)); }
            let bytes = w.into_vec();
            let mut r = BitReader::new(&bytes);
            let mut read = XorField::read_raw(vs[0]);
            for v in &vs[1..] {
                prop_assert_eq!(read.read(&mut r), Ok(()));
                prop_assert_eq!(read.bits, *v);
            }
        }
    }
}
