//! Samples of every chunk encoding side by side: decoding a [`ChunkData`] by its encoding, and encoding
//! time-ordered samples of mixed kinds back into chunks. What merges series copies (compaction, the querier)
//! uses, so a histogram chunk is never read as XOR and a series that switches between floats and histograms
//! keeps each kind in chunks of its own encoding.

use bytes::Bytes;
use heddle_model::{FloatHistogram, Histogram};

use crate::chunkenc::{
    Encoding, FloatHistogramChunk, HistogramAppend, HistogramChunk, XorChunk, decode_float_histograms,
    decode_histograms, decode_xor,
};
use crate::error::ChunkError;
use crate::head::ChunkData;

/// A sample's value: a float, or a native histogram of either kind.
#[derive(Debug, Clone, PartialEq)]
pub enum ChunkValue {
    /// A float sample (XOR chunks).
    Float(f64),
    /// An integer native histogram (integer histogram chunks).
    Histogram(Histogram),
    /// A float native histogram (float histogram chunks).
    FloatHistogram(FloatHistogram),
}

impl ChunkValue {
    /// The encoding of the chunks that hold values of this kind.
    pub fn encoding(&self) -> Encoding {
        match self {
            Self::Float(_) => Encoding::Xor,
            Self::Histogram(_) => Encoding::Histogram,
            Self::FloatHistogram(_) => Encoding::FloatHistogram,
        }
    }
}

/// One sample of any kind: timestamp in milliseconds and value.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkSample {
    /// Timestamp in milliseconds since the Unix epoch.
    pub t: i64,
    /// The value.
    pub value: ChunkValue,
}

/// Every sample of `chunk`, decoded by its encoding, in time order.
///
/// Histogram samples carry the counter-reset hints of the chunk iterators, as current Prometheus gives them:
/// gauge in a gauge chunk, "not a reset" after a chunk's first sample, unknown for the first whatever the
/// chunk's header says (the chunk before it may be gone). A reset between two samples of one merged series
/// is still found when they are re-encoded: the appender cuts a chunk where counts go down.
pub fn decode_chunk(chunk: &ChunkData) -> Result<Vec<ChunkSample>, ChunkError> {
    match chunk.encoding {
        Encoding::Xor => Ok(decode_xor(&chunk.data)?
            .into_iter()
            .map(|s| ChunkSample {
                t: s.t,
                value: ChunkValue::Float(s.v),
            })
            .collect()),
        Encoding::Histogram => Ok(decode_histograms(&chunk.data)?
            .into_iter()
            .map(|(t, h)| ChunkSample {
                t,
                value: ChunkValue::Histogram(h),
            })
            .collect()),
        Encoding::FloatHistogram => Ok(decode_float_histograms(&chunk.data)?
            .into_iter()
            .map(|(t, h)| ChunkSample {
                t,
                value: ChunkValue::FloatHistogram(h),
            })
            .collect()),
        Encoding::None => Err(ChunkError::UnknownEncoding {
            encoding: Encoding::None as u8,
        }),
    }
}

/// A chunk being filled by [`encode_chunks`].
enum Open {
    Xor(XorChunk),
    Histogram(HistogramChunk),
    FloatHistogram(FloatHistogramChunk),
}

impl Open {
    fn new(encoding: Encoding) -> Self {
        match encoding {
            Encoding::Histogram => Self::Histogram(HistogramChunk::new()),
            Encoding::FloatHistogram => Self::FloatHistogram(FloatHistogramChunk::new()),
            Encoding::Xor | Encoding::None => Self::Xor(XorChunk::new()),
        }
    }

    fn encoding(&self) -> Encoding {
        match self {
            Self::Xor(_) => Encoding::Xor,
            Self::Histogram(_) => Encoding::Histogram,
            Self::FloatHistogram(_) => Encoding::FloatHistogram,
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Self::Xor(c) => c.bytes(),
            Self::Histogram(c) => c.bytes(),
            Self::FloatHistogram(c) => c.bytes(),
        }
    }
}

/// [`encode_chunks`]' state: the chunks done, the open one with its bounds and sample count, and the last one
/// done (a histogram chunk cut for size follows it).
struct Encoder {
    out: Vec<ChunkData>,
    open: Option<(Open, i64, i64, usize)>,
    prev: Option<Open>,
}

impl Encoder {
    fn cut(&mut self, next: Option<(Open, i64, i64, usize)>) {
        if let Some((chunk, min_time, max_time, _)) = std::mem::replace(&mut self.open, next) {
            self.out.push(ChunkData {
                min_time,
                max_time,
                encoding: chunk.encoding(),
                data: Bytes::copy_from_slice(chunk.bytes()),
            });
            self.prev = Some(chunk);
        }
    }
}

/// `samples` (strictly increasing timestamps) as chunks, cut as Prometheus' compactor cuts them
/// (`storage.seriesToChunkEncoder`): a new chunk when the kind of sample changes, after `max_samples` samples,
/// and where the histogram appender asks for one (a counter reset, a new schema or zero threshold, a gauge
/// after counters). A histogram chunk cut for size is appended to with its predecessor as the chunk it
/// follows, so its counter-reset header says what the head would have said.
pub fn encode_chunks(samples: &[ChunkSample], max_samples: usize) -> Result<Vec<ChunkData>, ChunkError> {
    debug_assert!(
        samples.windows(2).all(|w| w[0].t < w[1].t),
        "samples must be strictly increasing"
    );
    let max_samples = max_samples.clamp(1, usize::from(u16::MAX));
    let mut enc = Encoder {
        out: Vec::new(),
        open: None,
        prev: None,
    };
    for s in samples {
        let encoding = s.value.encoding();
        let full = enc
            .open
            .as_ref()
            .is_none_or(|(c, _, _, n)| c.encoding() != encoding || *n >= max_samples);
        if full {
            enc.cut(Some((Open::new(encoding), s.t, s.t, 0)));
        }
        let Encoder { open, prev, .. } = &mut enc;
        let (chunk, _, max_time, n) = open.as_mut().expect("opened above");
        let started = match (chunk, &s.value) {
            (Open::Xor(c), ChunkValue::Float(v)) => {
                c.append(s.t, *v)?;
                None
            }
            (Open::Histogram(c), ChunkValue::Histogram(h)) => {
                let follows = match prev {
                    Some(Open::Histogram(p)) if *n == 0 => Some(&*p),
                    _ => None,
                };
                match c.append(s.t, h, follows)? {
                    HistogramAppend::NewChunk(next) => Some(Open::Histogram(next)),
                    HistogramAppend::Appended | HistogramAppend::Recoded => None,
                }
            }
            (Open::FloatHistogram(c), ChunkValue::FloatHistogram(h)) => {
                let follows = match prev {
                    Some(Open::FloatHistogram(p)) if *n == 0 => Some(&*p),
                    _ => None,
                };
                match c.append(s.t, h, follows)? {
                    HistogramAppend::NewChunk(next) => Some(Open::FloatHistogram(next)),
                    HistogramAppend::Appended | HistogramAppend::Recoded => None,
                }
            }
            _ => unreachable!("the open chunk has the sample's encoding"),
        };
        match started {
            Some(next) => enc.cut(Some((next, s.t, s.t, 1))),
            None => {
                *max_time = s.t;
                *n += 1;
            }
        }
    }
    enc.cut(None);
    Ok(enc.out)
}

#[cfg(test)]
mod tests;
