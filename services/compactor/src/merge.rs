//! Merging N blocks into one, series by series, in label order (Prometheus' `LeveledCompactor.populateBlock`
//! with its compacting chunk-series merger).
//!
//! Each source block is walked in label order (its series ids, read a batch at a time), and a k-way merge
//! takes the smallest label set across the blocks each turn, so memory holds one batch per block, never a
//! whole block. Per series, the chunks of every block are brought together:
//! - a chunk that overlaps no other is written as it is (byte for byte);
//! - byte-identical chunks (replicas that cut chunks at the same samples, the common case) are kept once;
//! - chunks that overlap in time (replicas that cut differently, or a late replica) are decoded by their
//!   encoding, merged by timestamp keeping one sample per timestamp (the one from the block listed first, so
//!   the result does not depend on the order blocks were listed in), and re-encoded in chunks of at most 120
//!   samples, as Prometheus' `seriesToChunkEncoder` does: floats as XOR, native histograms with the
//!   histogram appenders (integer or float), a new chunk wherever the kind of sample changes or the
//!   histogram appender cuts one (counter reset, new schema).

use std::collections::VecDeque;

use heddle_model::Labels;
use heddle_tsdb::block::{BlockReader, BlockWriter};
use heddle_tsdb::chunk_samples::{ChunkSample, decode_chunk, encode_chunks};
use heddle_tsdb::{ChunkData, SeriesChunks, TsdbError};

/// Samples per re-encoded chunk (Prometheus' `seriesToChunkEncoderSplit`).
pub const MAX_SAMPLES_PER_CHUNK: usize = 120;
/// Series read from one block at a time.
const BATCH: usize = 512;

/// What a merge did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Series written.
    pub series: u64,
    /// Samples read from the source blocks, duplicates included (their `meta.json` stats).
    pub samples_in: u64,
    /// Samples written.
    pub samples_out: u64,
    /// Chunks that had to be decoded and re-encoded.
    pub chunks_reencoded: u64,
}

/// One source block walked in label order, a batch of series at a time.
struct Cursor<'a> {
    reader: &'a BlockReader,
    ids: Vec<u32>,
    next: usize,
    batch: VecDeque<SeriesChunks>,
}

impl<'a> Cursor<'a> {
    fn new(reader: &'a BlockReader) -> Result<Self, TsdbError> {
        Ok(Self {
            reader,
            ids: reader.series_ids()?,
            next: 0,
            batch: VecDeque::new(),
        })
    }

    /// The next series' labels, reading the next batch when the current one is used up.
    fn peek(&mut self) -> Result<Option<&Labels>, TsdbError> {
        while self.batch.is_empty() && self.next < self.ids.len() {
            let end = (self.next + BATCH).min(self.ids.len());
            self.batch = self.reader.read_series(&self.ids[self.next..end])?.into();
            self.next = end;
        }
        Ok(self.batch.front().map(|s| &s.labels))
    }
}

/// Writes every series of `blocks` into `writer`, merged as the module docs say. Fails rather than drop data
/// when a block holds chunks of an encoding heddle does not know.
pub fn merge_blocks(blocks: &[BlockReader], writer: &mut BlockWriter) -> Result<MergeStats, TsdbError> {
    let mut cursors: Vec<Cursor<'_>> = blocks.iter().map(Cursor::new).collect::<Result<_, _>>()?;
    let mut stats = MergeStats {
        samples_in: blocks.iter().map(|b| b.meta().stats.num_samples).sum(),
        ..MergeStats::default()
    };
    loop {
        let mut smallest: Option<Labels> = None;
        for c in &mut cursors {
            if let Some(l) = c.peek()?
                && smallest.as_ref().is_none_or(|s| l < s)
            {
                smallest = Some(l.clone());
            }
        }
        let Some(labels) = smallest else { break };
        let mut chunks = Vec::new();
        for c in &mut cursors {
            if c.peek()? == Some(&labels) {
                let s = c.batch.pop_front().expect("peeked");
                chunks.extend(s.chunks);
            }
        }
        let (merged, reencoded) = merge_chunks(chunks)?;
        stats.chunks_reencoded += reencoded;
        stats.samples_out += merged.iter().map(num_samples).sum::<u64>();
        stats.series += 1;
        writer.add_series(&labels, &merged)?;
    }
    if let Some(b) = blocks.iter().find(|b| b.skipped_chunks() > 0) {
        return Err(TsdbError::Corruption {
            what: format!("block {}", b.meta().ulid),
            reason: format!(
                "{} chunks are of an unknown encoding (not XOR, histogram or float histogram), which heddle \
                 cannot compact",
                b.skipped_chunks()
            ),
        });
    }
    Ok(stats)
}

/// One series' chunks from every source block (in block order), reduced to chunks sorted by time that do not
/// overlap. Returns them and how many input chunks were re-encoded.
pub fn merge_chunks(mut chunks: Vec<ChunkData>) -> Result<(Vec<ChunkData>, u64), TsdbError> {
    // Stable, so among chunks starting together the first block's comes first and wins a tie.
    chunks.sort_by_key(|c| (c.min_time, c.max_time));
    chunks.dedup();
    let mut out = Vec::with_capacity(chunks.len());
    let mut reencoded = 0;
    let mut group: Vec<ChunkData> = Vec::new();
    let mut group_max = i64::MIN;
    for chunk in chunks {
        if !group.is_empty() && chunk.min_time > group_max {
            reencoded += flush(std::mem::take(&mut group), &mut out)?;
        }
        group_max = if group.is_empty() {
            chunk.max_time
        } else {
            group_max.max(chunk.max_time)
        };
        group.push(chunk);
    }
    if !group.is_empty() {
        reencoded += flush(group, &mut out)?;
    }
    debug_assert!(out.windows(2).all(|w| w[0].max_time < w[1].min_time));
    Ok((out, reencoded))
}

/// Emits a group of chunks overlapping one another (transitively): a lone chunk as it is, else re-encoded.
fn flush(group: Vec<ChunkData>, out: &mut Vec<ChunkData>) -> Result<u64, TsdbError> {
    if group.len() == 1 {
        out.extend(group);
        return Ok(0);
    }
    let mut samples: Vec<ChunkSample> = Vec::new();
    for c in &group {
        samples.extend(decode_chunk(c).map_err(|e| TsdbError::Corruption {
            what: format!("chunk [{}, {}]", c.min_time, c.max_time),
            reason: e.to_string(),
        })?);
    }
    // Stable: equal timestamps keep the group's order, so dedup keeps the first block's sample.
    samples.sort_by_key(|s| s.t);
    samples.dedup_by_key(|s| s.t);
    out.extend(encode(&samples)?);
    Ok(group.len() as u64)
}

/// `samples` (sorted, unique timestamps, of any kind) as chunks of at most [`MAX_SAMPLES_PER_CHUNK`] samples.
pub fn encode(samples: &[ChunkSample]) -> Result<Vec<ChunkData>, TsdbError> {
    encode_chunks(samples, MAX_SAMPLES_PER_CHUNK).map_err(|e| TsdbError::Corruption {
        what: format!("re-encoded chunks from {}", samples.first().map_or(0, |s| s.t)),
        reason: e.to_string(),
    })
}

fn num_samples(c: &ChunkData) -> u64 {
    c.data
        .get(..2)
        .map_or(0, |h| u64::from(u16::from_be_bytes([h[0], h[1]])))
}

#[cfg(test)]
mod histogram_tests;
#[cfg(test)]
mod tests;
