//! Float samples.

/// Bit pattern of Prometheus' staleness marker NaN.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Whether `v` is exactly Prometheus' staleness marker (and not any other NaN).
#[inline]
pub fn is_stale_nan(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// One float sample: timestamp in milliseconds since the Unix epoch, and value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub t: i64,
    pub v: f64,
}

impl Sample {
    pub fn new(t: i64, v: f64) -> Self {
        Self { t, v }
    }

    /// Equality that treats values bit-for-bit (NaN == NaN with the same bits), as storage does.
    pub fn bit_eq(&self, other: &Sample) -> bool {
        self.t == other.t && self.v.to_bits() == other.v.to_bits()
    }
}
