//! Prometheus' integer histogram chunk (encoding 2), byte for byte (`tsdb/chunkenc/histogram.go`).
//!
//! After the header and layout ([`super::histogram_meta`]), each sample's fields are stored as:
//! ```text
//!             t          count      zero count  sum        each bucket (positive, then negative)
//! sample 0    varbit     varbit u   varbit u    64 bits    varbit (the histogram's delta-encoded value)
//! sample n    varbit dod varbit dod varbit dod  XOR        varbit dod (over time, of that value)
//! ```
//! The second sample needs no special case: with the previous deltas at 0, its delta of delta is its delta.
//! A stale marker (sum = Prometheus' staleness NaN) writes no buckets, and zero deltas of delta for the
//! counts; a chunk takes nothing but stale markers after one.

use super::bstream::{BitReader, BitWriter};
use super::histogram_meta::{
    CounterResetHeader, Expansion, HISTOGRAM_HEADER_LEN, Layout, check_shape, expand_counter, expand_gauge,
    is_known_schema, remap, span_buckets, union_spans, wider_than_ceiling,
};
use super::varbit::{XorField, put_varbit_int, put_varbit_uint, read_varbit_int, read_varbit_uint};
use crate::error::ChunkError;
use heddle_model::histogram::{
    CUSTOM_BUCKETS_SCHEMA, EXPONENTIAL_SCHEMA_MAX, absolute_from_deltas, deltas_from_absolute,
};
use heddle_model::{CounterResetHint, Histogram, Span, is_stale_nan};

/// What appending a sample did.
#[derive(Debug, Clone)]
pub enum HistogramAppend<C> {
    /// The sample went into the chunk.
    Appended,
    /// The sample brought new buckets: the chunk was rewritten with them (its earlier samples holding them
    /// empty), then the sample went in.
    Recoded,
    /// The sample cannot go into the chunk (counter reset, new schema or zero threshold, a stale chunk, a
    /// gauge after counters or the reverse): it starts this new chunk, its counter-reset header set. The chunk
    /// appended to is unchanged.
    NewChunk(C),
}

/// The appender state of the fields that are stored as deltas of deltas.
#[derive(Debug, Clone, Default, PartialEq)]
struct IntState {
    t: i64,
    count: u64,
    zero_count: u64,
    t_delta: i64,
    count_delta: i64,
    zero_count_delta: i64,
    /// The histogram's (delta-encoded) bucket values, and their deltas over time.
    positive: Vec<i64>,
    negative: Vec<i64>,
    positive_delta: Vec<i64>,
    negative_delta: Vec<i64>,
    sum: XorField,
}

/// An integer histogram chunk that owns its bytes and can be appended to.
#[derive(Debug, Clone)]
pub struct HistogramChunk {
    stream: BitWriter,
    num: u16,
    layout: Layout,
    st: IntState,
}

impl Default for HistogramChunk {
    fn default() -> Self {
        Self::new()
    }
}

impl HistogramChunk {
    /// An empty chunk: zero samples, header [`CounterResetHeader::Unknown`].
    pub fn new() -> Self {
        let mut buf = Vec::with_capacity(128);
        buf.extend_from_slice(&[0; HISTOGRAM_HEADER_LEN]);
        Self {
            stream: BitWriter::resume(buf, 0),
            num: 0,
            layout: Layout::default(),
            st: IntState {
                sum: XorField::fresh(0),
                ..IntState::default()
            },
        }
    }

    /// Takes the bytes of an encoded chunk, decoding all of it to check it and to restore the appender state
    /// as Prometheus' `HistogramChunk.Appender()` does (from its iterator, so a sum that never changed has the
    /// window (0, 0), not an unset one).
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<Self, ChunkError> {
        let mut buf: Vec<u8> = bytes.into();
        if buf.len() < HISTOGRAM_HEADER_LEN {
            return Err(ChunkError::TooShort { len: buf.len() });
        }
        let mut it = HistogramIter::new(&buf);
        for _ in it.by_ref() {}
        if let Some(err) = it.error() {
            return Err(err.clone());
        }
        let num = it.total;
        if num == 0 {
            let header = CounterResetHeader::of_chunk(&buf);
            let mut chunk = Self::new();
            header.write_to(chunk.stream.bytes_mut());
            return Ok(chunk);
        }
        let bits = HISTOGRAM_HEADER_LEN * 8 + it.reader.position();
        let (layout, st) = (it.layout, it.st);
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
    pub fn iter(&self) -> HistogramIter<'_> {
        HistogramIter::new(self.bytes())
    }

    fn set_header(&mut self, header: CounterResetHeader) {
        header.write_to(self.stream.bytes_mut());
    }

    /// Appends a sample with Prometheus' rules (`HistogramAppender.AppendHistogram`). The chunk does not check
    /// time order (the head does).
    ///
    /// The first sample of a chunk sets its header: gauge for a gauge histogram, counter reset when the sample
    /// says so, else, when `prev` (the chunk this one follows) is given, what appending the sample to `prev`
    /// would have found. Later samples go in when [`Self::appendable`] allows; new buckets make the chunk
    /// recoded; buckets the sample lacks but the chunk has (empty ones, for counters) are added to the sample.
    pub fn append(&mut self, t: i64, h: &Histogram, prev: Option<&Self>) -> Result<HistogramAppend<Self>, ChunkError> {
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
                    Appendable::Yes { .. } => CounterResetHeader::NotCounterReset,
                    Appendable::No(header) => header,
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
                        // The sample's buckets are a subset: it takes the chunk's layout as is.
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

    /// A new chunk whose first sample is `h`, with `header`.
    fn started_by(t: i64, h: &Histogram, header: CounterResetHeader) -> Self {
        let mut chunk = Self::new();
        chunk.append_raw(t, h);
        chunk.set_header(header);
        chunk
    }

    /// Whether a counter histogram can follow the chunk's last sample (Prometheus' `appendable`): not after a
    /// gauge chunk, a stale marker, or with another schema, zero threshold or custom bounds; not across a
    /// counter reset (the sample's hint, or any count going down, or a bucket in use gone). A stale marker
    /// always fits.
    pub fn appendable(&self, h: &Histogram) -> Appendable {
        use CounterResetHeader::*;
        if self.num > 0 && self.counter_reset_header() == Gauge {
            return Appendable::No(NotCounterReset);
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
        if h.count < self.st.count {
            return Appendable::No(CounterReset);
        }
        if h.schema != self.layout.schema || h.zero_threshold != self.layout.zero_threshold {
            return Appendable::No(Unknown);
        }
        if h.schema == CUSTOM_BUCKETS_SCHEMA && h.custom_values != self.layout.custom_values {
            return Appendable::No(CounterReset);
        }
        if h.zero_count < self.st.zero_count {
            return Appendable::No(CounterReset);
        }
        let side = |chunk_spans: &[Span], chunk: &[i64], spans: &[Span], buckets: &[i64]| {
            if chunk_spans == spans {
                // The common case, without allocating: same buckets, so only a count going down matters.
                let down = absolute_from_deltas(chunk)
                    .zip(absolute_from_deltas(buckets))
                    .any(|(a, b)| a > b);
                return (!down).then_some((false, false));
            }
            expand_counter(chunk_spans, &absolute(chunk), spans, &absolute(buckets))
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

    /// Whether a gauge histogram can follow (Prometheus' `appendableGauge`): the chunk must be a gauge chunk
    /// with the same schema, zero threshold and custom bounds, its last sample not stale. Buckets may come
    /// and go; the result says whether the chunk lacks some of the sample's, whether the sample lacks some of
    /// the chunk's, and the spans of both together.
    fn appendable_gauge(&self, h: &Histogram) -> Option<Expansion> {
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

    /// Rewrites the chunk with the wider layout `positive`/`negative` (holding every current bucket): each
    /// sample gets empty new buckets, the header stays.
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

    /// Writes a sample with no appendability check: its buckets must match the chunk's layout (or it is the
    /// first sample, which sets the layout).
    fn append_raw(&mut self, t: i64, h: &Histogram) {
        let stale_marker;
        let h = if is_stale_nan(h.sum) {
            stale_marker = Histogram {
                sum: h.sum,
                ..Histogram::default()
            };
            &stale_marker
        } else {
            h
        };
        let w = &mut self.stream;
        let st = &mut self.st;
        let (mut t_delta, mut count_delta, mut zero_count_delta) = (0, 0, 0);
        if self.num == 0 {
            self.layout = Layout {
                schema: h.schema,
                zero_threshold: h.zero_threshold,
                positive_spans: h.positive_spans.clone(),
                negative_spans: h.negative_spans.clone(),
                custom_values: h.custom_values.clone(),
            };
            self.layout.write(w);
            st.positive = vec![0; h.positive_buckets.len()];
            st.negative = vec![0; h.negative_buckets.len()];
            st.positive_delta = vec![0; h.positive_buckets.len()];
            st.negative_delta = vec![0; h.negative_buckets.len()];
            put_varbit_int(w, t);
            put_varbit_uint(w, h.count);
            put_varbit_uint(w, h.zero_count);
            w.write_bits(h.sum.to_bits(), 64);
            st.sum.bits = h.sum.to_bits();
            for b in h.positive_buckets.iter().chain(&h.negative_buckets) {
                put_varbit_int(w, *b);
            }
        } else {
            t_delta = t.wrapping_sub(st.t);
            count_delta = (h.count as i64).wrapping_sub(st.count as i64);
            zero_count_delta = (h.zero_count as i64).wrapping_sub(st.zero_count as i64);
            put_varbit_int(w, t_delta.wrapping_sub(st.t_delta));
            if is_stale_nan(h.sum) {
                put_varbit_int(w, 0);
                put_varbit_int(w, 0);
            } else {
                put_varbit_int(w, count_delta.wrapping_sub(st.count_delta));
                put_varbit_int(w, zero_count_delta.wrapping_sub(st.zero_count_delta));
            }
            st.sum.write(w, h.sum);
            for (values, deltas, buckets) in [
                (&st.positive, &mut st.positive_delta, &h.positive_buckets),
                (&st.negative, &mut st.negative_delta, &h.negative_buckets),
            ] {
                for ((b, prev), prev_delta) in buckets.iter().zip(values).zip(deltas.iter_mut()) {
                    let delta = b.wrapping_sub(*prev);
                    put_varbit_int(w, delta.wrapping_sub(*prev_delta));
                    *prev_delta = delta;
                }
            }
        }
        self.num += 1;
        if let Some(header) = w.bytes_mut().get_mut(..2) {
            header.copy_from_slice(&self.num.to_be_bytes());
        }
        st.t = t;
        st.count = h.count;
        st.zero_count = h.zero_count;
        st.t_delta = t_delta;
        st.count_delta = count_delta;
        st.zero_count_delta = zero_count_delta;
        for (values, buckets) in [
            (&mut st.positive, &h.positive_buckets),
            (&mut st.negative, &h.negative_buckets),
        ] {
            for (v, b) in values.iter_mut().zip(buckets) {
                *v = *b;
            }
        }
    }
}

/// Whether a counter histogram can be appended, and how ([`HistogramChunk::appendable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appendable {
    /// It can: `forward` when the chunk must be recoded with the sample's new buckets, `backward` when the
    /// sample must get the chunk's empty buckets it lacks.
    Yes { forward: bool, backward: bool },
    /// It cannot; a new chunk for it gets this header.
    No(CounterResetHeader),
}

fn absolute(deltas: &[i64]) -> Vec<i64> {
    absolute_from_deltas(deltas).collect()
}

/// `h` with the wider spans given, its new buckets empty.
fn with_spans(h: &Histogram, positive: Vec<Span>, negative: Vec<Span>) -> Histogram {
    let p = remap(&h.positive_spans, &absolute(&h.positive_buckets), &positive);
    let n = remap(&h.negative_spans, &absolute(&h.negative_buckets), &negative);
    Histogram {
        positive_spans: positive,
        negative_spans: negative,
        positive_buckets: deltas_from_absolute(&p),
        negative_buckets: deltas_from_absolute(&n),
        ..h.clone()
    }
}

/// Decodes the samples of an integer histogram chunk from borrowed bytes, yielding `(t, histogram)`.
///
/// Never panics: on bytes that end early or do not decode it stops, and [`HistogramIter::error`] says why.
/// Samples of a reserved schema above 8 are read at schema 8, as Prometheus does.
#[derive(Debug, Clone)]
pub struct HistogramIter<'a> {
    reader: BitReader<'a>,
    header: CounterResetHeader,
    total: u16,
    read: u16,
    layout: Layout,
    st: IntState,
    err: Option<ChunkError>,
}

impl<'a> HistogramIter<'a> {
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
            st: IntState::default(),
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
        let sample = 0;
        let short = |_| ChunkError::Truncated { sample };
        let r = &mut self.reader;
        let layout = Layout::read(r).map_err(short)?;
        if !is_known_schema(layout.schema) {
            return Err(ChunkError::UnknownHistogramSchema { schema: layout.schema });
        }
        let (np, nn) = (
            span_buckets(&layout.positive_spans),
            span_buckets(&layout.negative_spans),
        );
        // Every bucket takes at least a bit: more buckets than bits left cannot decode, and must not be
        // allocated.
        if np.saturating_add(nn) > r.remaining() as u64 {
            return Err(ChunkError::Truncated { sample });
        }
        let st = &mut self.st;
        st.t = read_varbit_int(r).map_err(short)?;
        st.count = read_varbit_uint(r).map_err(short)?;
        st.zero_count = read_varbit_uint(r).map_err(short)?;
        st.sum = XorField::read_raw(r.read_bits(64).ok_or(ChunkError::Truncated { sample })?);
        for (values, n) in [(&mut st.positive, np), (&mut st.negative, nn)] {
            for _ in 0..n {
                values.push(read_varbit_int(r).map_err(short)?);
            }
        }
        st.positive_delta = vec![0; st.positive.len()];
        st.negative_delta = vec![0; st.negative.len()];
        self.layout = layout;
        Ok(())
    }

    fn read_next(&mut self) -> Result<(), ChunkError> {
        let sample = self.read;
        let short = |_| ChunkError::Truncated { sample };
        let r = &mut self.reader;
        let st = &mut self.st;
        st.t_delta = st.t_delta.wrapping_add(read_varbit_int(r).map_err(short)?);
        st.t = st.t.wrapping_add(st.t_delta);
        st.count_delta = st.count_delta.wrapping_add(read_varbit_int(r).map_err(short)?);
        st.count = (st.count as i64).wrapping_add(st.count_delta) as u64;
        st.zero_count_delta = st.zero_count_delta.wrapping_add(read_varbit_int(r).map_err(short)?);
        st.zero_count = (st.zero_count as i64).wrapping_add(st.zero_count_delta) as u64;
        st.sum.read(r).map_err(|e| match e {
            None => ChunkError::Truncated { sample },
            Some((leading, sig)) => ChunkError::BadWindow { sample, leading, sig },
        })?;
        if is_stale_nan(st.sum.value()) {
            return Ok(());
        }
        for (values, deltas) in [
            (&mut st.positive, &mut st.positive_delta),
            (&mut st.negative, &mut st.negative_delta),
        ] {
            for (v, d) in values.iter_mut().zip(deltas.iter_mut()) {
                *d = d.wrapping_add(read_varbit_int(r).map_err(short)?);
                *v = v.wrapping_add(*d);
            }
        }
        Ok(())
    }

    /// The sample just decoded.
    fn current(&self) -> Histogram {
        if is_stale_nan(self.st.sum.value()) {
            return Histogram {
                sum: self.st.sum.value(),
                ..Histogram::default()
            };
        }
        let mut h = Histogram {
            counter_reset_hint: self.header.hint_for_sample(self.read - 1),
            schema: self.layout.schema,
            zero_threshold: self.layout.zero_threshold,
            zero_count: self.st.zero_count,
            count: self.st.count,
            sum: self.st.sum.value(),
            positive_spans: self.layout.positive_spans.clone(),
            negative_spans: self.layout.negative_spans.clone(),
            positive_buckets: self.st.positive.clone(),
            negative_buckets: self.st.negative.clone(),
            custom_values: self.layout.custom_values.clone(),
        };
        if h.schema > EXPONENTIAL_SCHEMA_MAX && h.schema != CUSTOM_BUCKETS_SCHEMA {
            // A known schema (checked at the first sample), so the reduction cannot fail.
            let _ = h.reduce_resolution(EXPONENTIAL_SCHEMA_MAX);
        }
        h
    }
}

impl Iterator for HistogramIter<'_> {
    type Item = (i64, Histogram);

    fn next(&mut self) -> Option<(i64, Histogram)> {
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

/// Decodes every sample of an encoded integer histogram chunk, or says why it cannot.
pub fn decode_histograms(bytes: &[u8]) -> Result<Vec<(i64, Histogram)>, ChunkError> {
    let mut it = HistogramIter::new(bytes);
    let out = it.by_ref().collect();
    match it.err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
