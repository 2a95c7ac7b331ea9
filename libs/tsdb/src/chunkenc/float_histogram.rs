//! Prometheus' float histogram chunk (encoding 3), byte for byte (`tsdb/chunkenc/float_histogram.go`).
//!
//! After the header and layout ([`super::histogram_meta`]), each sample's fields are stored as:
//! ```text
//!             t          count     zero count  sum       each bucket (positive, then negative)
//! sample 0    varbit     64 bits   64 bits     64 bits   64 bits (absolute count)
//! sample n    varbit dod XOR       XOR         XOR       XOR
//! ```
//! Every field keeps its own XOR window. A stale marker writes zero counts and no buckets; a chunk takes
//! nothing but stale markers after one.

use super::bstream::{BitReader, BitWriter};
use super::histogram::{Appendable, HistogramAppend};
use super::histogram_meta::{
    CounterResetHeader, Expansion, HISTOGRAM_HEADER_LEN, Layout, check_shape, expand_counter, expand_gauge,
    is_known_schema, remap, span_buckets, union_spans, wider_than_ceiling,
};
use super::varbit::{XorField, put_varbit_int, read_varbit_int};
use crate::error::ChunkError;
use heddle_model::histogram::{CUSTOM_BUCKETS_SCHEMA, EXPONENTIAL_SCHEMA_MAX};
use heddle_model::{CounterResetHint, FloatHistogram, Span, is_stale_nan};

#[derive(Debug, Clone, Default, PartialEq)]
struct FloatState {
    t: i64,
    t_delta: i64,
    count: XorField,
    zero_count: XorField,
    sum: XorField,
    positive: Vec<XorField>,
    negative: Vec<XorField>,
}

/// A float histogram chunk that owns its bytes and can be appended to.
#[derive(Debug, Clone)]
pub struct FloatHistogramChunk {
    stream: BitWriter,
    num: u16,
    layout: Layout,
    st: FloatState,
}

impl Default for FloatHistogramChunk {
    fn default() -> Self {
        Self::new()
    }
}

impl FloatHistogramChunk {
    /// An empty chunk: zero samples, header [`CounterResetHeader::Unknown`].
    pub fn new() -> Self {
        let mut buf = Vec::with_capacity(128);
        buf.extend_from_slice(&[0; HISTOGRAM_HEADER_LEN]);
        Self {
            stream: BitWriter::resume(buf, 0),
            num: 0,
            layout: Layout::default(),
            st: FloatState::default(),
        }
    }

    /// Takes the bytes of an encoded chunk, decoding all of it to check it and to restore the appender state
    /// as Prometheus' `FloatHistogramChunk.Appender()` does (fields that never changed have the window (0, 0)).
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<Self, ChunkError> {
        let mut buf: Vec<u8> = bytes.into();
        if buf.len() < HISTOGRAM_HEADER_LEN {
            return Err(ChunkError::TooShort { len: buf.len() });
        }
        let mut it = FloatHistogramIter::new(&buf);
        for _ in it.by_ref() {}
        if let Some(err) = it.error() {
            return Err(err.clone());
        }
        if it.total == 0 {
            let mut chunk = Self::new();
            CounterResetHeader::of_chunk(&buf).write_to(chunk.stream.bytes_mut());
            return Ok(chunk);
        }
        let bits = HISTOGRAM_HEADER_LEN * 8 + it.reader.position();
        let (num, layout, st) = (it.total, it.layout, it.st);
        buf.truncate(bits.div_ceil(8));
        let free = ((8 - bits % 8) % 8) as u8;
        if free > 0
            && let Some(last) = buf.last_mut()
        {
            *last &= !((1u8 << free) - 1);
        }
        Ok(Self {
            stream: BitWriter::resume(buf, free),
            num,
            layout,
            st,
        })
    }

    /// Number of samples.
    pub fn num_samples(&self) -> u16 {
        self.num
    }

    /// True when the chunk holds no sample.
    pub fn is_empty(&self) -> bool {
        self.num == 0
    }

    /// The encoded chunk: header and bit stream.
    pub fn bytes(&self) -> &[u8] {
        self.stream.bytes()
    }

    /// The encoded chunk, consuming it.
    pub fn into_bytes(self) -> Vec<u8> {
        self.stream.into_vec()
    }

    /// The counter-reset header.
    pub fn counter_reset_header(&self) -> CounterResetHeader {
        CounterResetHeader::of_chunk(self.bytes())
    }

    /// Iterates the samples.
    pub fn iter(&self) -> FloatHistogramIter<'_> {
        FloatHistogramIter::new(self.bytes())
    }

    fn set_header(&mut self, header: CounterResetHeader) {
        header.write_to(self.stream.bytes_mut());
    }

    /// Appends a sample with Prometheus' rules (`FloatHistogramAppender.AppendFloatHistogram`); see
    /// [`super::HistogramChunk::append`]. Unlike integer chunks, a chunk started after `prev` is marked
    /// "not a counter reset" unless it is one, even when it was cut for a schema change.
    pub fn append(
        &mut self,
        t: i64,
        h: &FloatHistogram,
        prev: Option<&Self>,
    ) -> Result<HistogramAppend<Self>, ChunkError> {
        // A stale marker's buckets are never written, so only other samples must fit their spans.
        if !is_stale_nan(h.sum) {
            check_shape(
                h.schema,
                &h.positive_spans,
                h.positive_buckets.len(),
                &h.negative_spans,
                h.negative_buckets.len(),
            )?;
        }
        if self.num == u16::MAX {
            return Err(ChunkError::Full { samples: self.num });
        }
        if self.num == 0 {
            self.append_raw(t, h);
            let header = match (h.counter_reset_hint, prev) {
                (CounterResetHint::Gauge, _) => CounterResetHeader::Gauge,
                (CounterResetHint::CounterReset, _) => CounterResetHeader::CounterReset,
                (_, Some(prev)) => match prev.appendable(h) {
                    Appendable::No(CounterResetHeader::CounterReset) => CounterResetHeader::CounterReset,
                    _ => CounterResetHeader::NotCounterReset,
                },
                (_, None) => CounterResetHeader::Unknown,
            };
            self.set_header(header);
            return Ok(HistogramAppend::Appended);
        }
        let (forward, backward, merged) = if h.counter_reset_hint == CounterResetHint::Gauge {
            match self.appendable_gauge(h) {
                Some(expansion) => expansion,
                None => {
                    return Ok(HistogramAppend::NewChunk(Self::started_by(
                        t,
                        h,
                        CounterResetHeader::Gauge,
                    )));
                }
            }
        } else {
            match self.appendable(h) {
                Appendable::Yes { forward, backward } => {
                    let merged = if !backward {
                        None
                    } else if !forward {
                        Some((self.layout.positive_spans.clone(), self.layout.negative_spans.clone()))
                    } else {
                        Some((
                            union_spans(&self.layout.positive_spans, &h.positive_spans),
                            union_spans(&self.layout.negative_spans, &h.negative_spans),
                        ))
                    };
                    (forward, backward, merged)
                }
                Appendable::No(header) => return Ok(HistogramAppend::NewChunk(Self::started_by(t, h, header))),
            }
        };
        if forward
            && backward
            && let Some((positive, negative)) = &merged
            && wider_than_ceiling(positive, negative)
        {
            let header = if h.counter_reset_hint == CounterResetHint::Gauge {
                CounterResetHeader::Gauge
            } else {
                CounterResetHeader::NotCounterReset
            };
            return Ok(HistogramAppend::NewChunk(Self::started_by(t, h, header)));
        }
        let widened;
        let h = match merged.filter(|_| backward) {
            Some((positive, negative)) => {
                widened = with_spans(h, positive, negative);
                &widened
            }
            None => h,
        };
        if forward {
            self.recode(&h.positive_spans, &h.negative_spans);
            self.append_raw(t, h);
            return Ok(HistogramAppend::Recoded);
        }
        self.append_raw(t, h);
        Ok(HistogramAppend::Appended)
    }

    fn started_by(t: i64, h: &FloatHistogram, header: CounterResetHeader) -> Self {
        let mut chunk = Self::new();
        chunk.append_raw(t, h);
        chunk.set_header(header);
        chunk
    }

    /// Whether a counter float histogram can follow the chunk's last sample: the rules of
    /// [`super::HistogramChunk::appendable`], except that a chunk not taken for a reason other than a counter
    /// reset gets the header [`CounterResetHeader::Unknown`], as in Prometheus.
    pub fn appendable(&self, h: &FloatHistogram) -> Appendable {
        use CounterResetHeader::*;
        if self.num > 0 && self.counter_reset_header() == Gauge {
            return Appendable::No(Unknown);
        }
        if h.counter_reset_hint == CounterResetHint::CounterReset {
            return Appendable::No(CounterReset);
        }
        if is_stale_nan(h.sum) {
            return Appendable::Yes {
                forward: false,
                backward: false,
            };
        }
        if is_stale_nan(self.st.sum.value()) {
            return Appendable::No(Unknown);
        }
        if h.count < self.st.count.value() {
            return Appendable::No(CounterReset);
        }
        if h.schema != self.layout.schema || h.zero_threshold != self.layout.zero_threshold {
            return Appendable::No(Unknown);
        }
        if h.schema == CUSTOM_BUCKETS_SCHEMA && h.custom_values != self.layout.custom_values {
            return Appendable::No(CounterReset);
        }
        if h.zero_count < self.st.zero_count.value() {
            return Appendable::No(CounterReset);
        }
        let side = |chunk_spans: &[Span], chunk: &[XorField], spans: &[Span], buckets: &[f64]| {
            if chunk_spans == spans {
                // The common case, without allocating: same buckets, so only a count going down matters.
                let down = chunk.iter().zip(buckets).any(|(a, b)| a.value() > *b);
                return (!down).then_some((false, false));
            }
            let values: Vec<f64> = chunk.iter().map(XorField::value).collect();
            expand_counter(chunk_spans, &values, spans, buckets)
        };
        let positive = side(
            &self.layout.positive_spans,
            &self.st.positive,
            &h.positive_spans,
            &h.positive_buckets,
        );
        let negative = side(
            &self.layout.negative_spans,
            &self.st.negative,
            &h.negative_spans,
            &h.negative_buckets,
        );
        match (positive, negative) {
            (Some((pf, pb)), Some((nf, nb))) => Appendable::Yes {
                forward: pf || nf,
                backward: pb || nb,
            },
            _ => Appendable::No(CounterReset),
        }
    }

    fn appendable_gauge(&self, h: &FloatHistogram) -> Option<Expansion> {
        if self.num > 0 && self.counter_reset_header() != CounterResetHeader::Gauge {
            return None;
        }
        if is_stale_nan(h.sum) {
            return Some((false, false, None));
        }
        if is_stale_nan(self.st.sum.value())
            || h.schema != self.layout.schema
            || h.zero_threshold != self.layout.zero_threshold
            || (h.schema == CUSTOM_BUCKETS_SCHEMA && h.custom_values != self.layout.custom_values)
        {
            return None;
        }
        let (pf, pb, positive) = expand_gauge(&self.layout.positive_spans, &h.positive_spans);
        let (nf, nb, negative) = expand_gauge(&self.layout.negative_spans, &h.negative_spans);
        Some((pf || nf, pb || nb, Some((positive, negative))))
    }

    fn recode(&mut self, positive: &[Span], negative: &[Span]) {
        let header = self.counter_reset_header();
        let mut out = Self::new();
        for (t, old) in self.iter() {
            let widened = if is_stale_nan(old.sum) {
                old
            } else {
                with_spans(&old, positive.to_vec(), negative.to_vec())
            };
            out.append_raw(t, &widened);
        }
        out.set_header(header);
        *self = out;
    }

    fn append_raw(&mut self, t: i64, h: &FloatHistogram) {
        let stale_marker;
        let h = if is_stale_nan(h.sum) {
            stale_marker = FloatHistogram {
                sum: h.sum,
                ..FloatHistogram::default()
            };
            &stale_marker
        } else {
            h
        };
        let w = &mut self.stream;
        let st = &mut self.st;
        let mut t_delta = 0;
        if self.num == 0 {
            self.layout = Layout {
                schema: h.schema,
                zero_threshold: h.zero_threshold,
                positive_spans: h.positive_spans.clone(),
                negative_spans: h.negative_spans.clone(),
                custom_values: h.custom_values.clone(),
            };
            self.layout.write(w);
            put_varbit_int(w, t);
            for v in [h.count, h.zero_count, h.sum] {
                w.write_bits(v.to_bits(), 64);
            }
            st.count = XorField::fresh(h.count.to_bits());
            st.zero_count = XorField::fresh(h.zero_count.to_bits());
            st.sum = XorField::fresh(h.sum.to_bits());
            for (fields, buckets) in [
                (&mut st.positive, &h.positive_buckets),
                (&mut st.negative, &h.negative_buckets),
            ] {
                fields.clear();
                for b in buckets {
                    w.write_bits(b.to_bits(), 64);
                    fields.push(XorField::fresh(b.to_bits()));
                }
            }
        } else {
            t_delta = t.wrapping_sub(st.t);
            put_varbit_int(w, t_delta.wrapping_sub(st.t_delta));
            st.count.write(w, h.count);
            st.zero_count.write(w, h.zero_count);
            st.sum.write(w, h.sum);
            for (fields, buckets) in [
                (&mut st.positive, &h.positive_buckets),
                (&mut st.negative, &h.negative_buckets),
            ] {
                for (field, b) in fields.iter_mut().zip(buckets) {
                    field.write(w, *b);
                }
            }
        }
        self.num += 1;
        if let Some(header) = w.bytes_mut().get_mut(..2) {
            header.copy_from_slice(&self.num.to_be_bytes());
        }
        st.t = t;
        st.t_delta = t_delta;
    }
}

/// `h` with the wider spans given, its new buckets empty.
fn with_spans(h: &FloatHistogram, positive: Vec<Span>, negative: Vec<Span>) -> FloatHistogram {
    let p = remap(&h.positive_spans, &h.positive_buckets, &positive);
    let n = remap(&h.negative_spans, &h.negative_buckets, &negative);
    FloatHistogram {
        positive_spans: positive,
        negative_spans: negative,
        positive_buckets: p,
        negative_buckets: n,
        ..h.clone()
    }
}

/// Decodes the samples of a float histogram chunk from borrowed bytes, yielding `(t, histogram)`.
///
/// Never panics: on bytes that end early or do not decode it stops, and [`FloatHistogramIter::error`] says
/// why. Samples of a reserved schema above 8 are read at schema 8, as Prometheus does.
#[derive(Debug, Clone)]
pub struct FloatHistogramIter<'a> {
    reader: BitReader<'a>,
    header: CounterResetHeader,
    total: u16,
    read: u16,
    layout: Layout,
    st: FloatState,
    err: Option<ChunkError>,
}

impl<'a> FloatHistogramIter<'a> {
    /// Starts decoding `bytes`, a whole chunk including its header.
    pub fn new(bytes: &'a [u8]) -> Self {
        let (total, rest, err) = match bytes {
            [hi, lo, _, rest @ ..] => (u16::from_be_bytes([*hi, *lo]), rest, None),
            _ => (0, &[][..], Some(ChunkError::TooShort { len: bytes.len() })),
        };
        Self {
            reader: BitReader::new(rest),
            header: CounterResetHeader::of_chunk(bytes),
            total,
            read: 0,
            layout: Layout::default(),
            st: FloatState::default(),
            err,
        }
    }

    /// The number of samples the header announces.
    pub fn num_samples(&self) -> u16 {
        self.total
    }

    /// The counter-reset header.
    pub fn counter_reset_header(&self) -> CounterResetHeader {
        self.header
    }

    /// Why decoding stopped early, if it did.
    pub fn error(&self) -> Option<&ChunkError> {
        self.err.as_ref()
    }

    fn read_first(&mut self) -> Result<(), ChunkError> {
        let short = ChunkError::Truncated { sample: 0 };
        let r = &mut self.reader;
        let layout = Layout::read(r).map_err(|_| short.clone())?;
        if !is_known_schema(layout.schema) {
            return Err(ChunkError::UnknownHistogramSchema { schema: layout.schema });
        }
        let (np, nn) = (
            span_buckets(&layout.positive_spans),
            span_buckets(&layout.negative_spans),
        );
        // Every bucket takes 64 bits in the first sample: more buckets than that cannot decode, and must not
        // be allocated.
        if np.saturating_add(nn).saturating_mul(64) > r.remaining() as u64 {
            return Err(short);
        }
        let st = &mut self.st;
        st.t = read_varbit_int(r).map_err(|_| short.clone())?;
        let mut raw = || r.read_bits(64).map(XorField::read_raw).ok_or(short.clone());
        st.count = raw()?;
        st.zero_count = raw()?;
        st.sum = raw()?;
        for (fields, n) in [(&mut st.positive, np), (&mut st.negative, nn)] {
            for _ in 0..n {
                fields.push(raw()?);
            }
        }
        self.layout = layout;
        Ok(())
    }

    fn read_next(&mut self) -> Result<(), ChunkError> {
        let sample = self.read;
        let r = &mut self.reader;
        let st = &mut self.st;
        let xor_err = |e: Option<(u8, u8)>| match e {
            None => ChunkError::Truncated { sample },
            Some((leading, sig)) => ChunkError::BadWindow { sample, leading, sig },
        };
        st.t_delta = st
            .t_delta
            .wrapping_add(read_varbit_int(r).map_err(|_| ChunkError::Truncated { sample })?);
        st.t = st.t.wrapping_add(st.t_delta);
        for field in [&mut st.count, &mut st.zero_count, &mut st.sum] {
            field.read(r).map_err(xor_err)?;
        }
        if is_stale_nan(st.sum.value()) {
            return Ok(());
        }
        for field in st.positive.iter_mut().chain(st.negative.iter_mut()) {
            field.read(r).map_err(xor_err)?;
        }
        Ok(())
    }

    fn current(&self) -> FloatHistogram {
        if is_stale_nan(self.st.sum.value()) {
            return FloatHistogram {
                sum: self.st.sum.value(),
                ..FloatHistogram::default()
            };
        }
        let values = |fields: &[XorField]| fields.iter().map(XorField::value).collect();
        let mut h = FloatHistogram {
            counter_reset_hint: self.header.hint_for_sample(self.read - 1),
            schema: self.layout.schema,
            zero_threshold: self.layout.zero_threshold,
            zero_count: self.st.zero_count.value(),
            count: self.st.count.value(),
            sum: self.st.sum.value(),
            positive_spans: self.layout.positive_spans.clone(),
            negative_spans: self.layout.negative_spans.clone(),
            positive_buckets: values(&self.st.positive),
            negative_buckets: values(&self.st.negative),
            custom_values: self.layout.custom_values.clone(),
        };
        if h.schema > EXPONENTIAL_SCHEMA_MAX && h.schema != CUSTOM_BUCKETS_SCHEMA {
            // A known schema (checked at the first sample), so the reduction cannot fail.
            let _ = h.reduce_resolution(EXPONENTIAL_SCHEMA_MAX);
        }
        h
    }
}

impl Iterator for FloatHistogramIter<'_> {
    type Item = (i64, FloatHistogram);

    fn next(&mut self) -> Option<(i64, FloatHistogram)> {
        if self.err.is_some() || self.read >= self.total {
            return None;
        }
        let decoded = if self.read == 0 {
            self.read_first()
        } else {
            self.read_next()
        };
        match decoded {
            Ok(()) => {
                self.read += 1;
                Some((self.st.t, self.current()))
            }
            Err(e) => {
                self.err = Some(e);
                None
            }
        }
    }
}

/// Decodes every sample of an encoded float histogram chunk, or says why it cannot.
pub fn decode_float_histograms(bytes: &[u8]) -> Result<Vec<(i64, FloatHistogram)>, ChunkError> {
    let mut it = FloatHistogramIter::new(bytes);
    let out = it.by_ref().collect();
    match it.err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
