//! Merging the copies of one series.
//!
//! Replicas of a series arrive from several ingesters (and bucket blocks) with the same label set; the
//! k-way merge in `select` brings them together, and then per series:
//! - byte-identical chunks (the common case: replicas cut chunks at the same samples) are kept once, undecoded;
//! - chunks that overlap in time are decoded by their encoding, merged by timestamp with duplicates (same `t`)
//!   dropped, and re-encoded, floats and native histograms each in chunks of their own encoding;
//! - chunks that reach outside the query range are re-encoded with only the samples inside it, so clients never
//!   see out-of-range samples.
//!
//! When two replicas disagree on the value at the same timestamp, the sample from the chunk that starts
//! earliest wins, and among chunks starting together the first ingester's (replication-set order), in both
//! response types, so results are deterministic.

use crate::chunks;
use crate::error::QuerierError;
use heddle_tsdb::ChunkData;
use heddle_tsdb::chunk_samples::ChunkSample;

/// The samples of one series' chunks inside `[start, end]`, sorted by time, one per timestamp (see the module
/// docs for which sample wins a tie).
pub(crate) fn merge_samples(chunks: &[ChunkData], start: i64, end: i64) -> Result<Vec<ChunkSample>, QuerierError> {
    let mut ordered: Vec<&ChunkData> = chunks.iter().collect();
    ordered.sort_by_key(|c| c.min_time);
    let mut out = Vec::new();
    for chunk in ordered {
        if chunk.max_time < start || chunk.min_time > end {
            continue;
        }
        out.extend(
            chunks::decode(chunk)?
                .into_iter()
                .filter(|s| s.t >= start && s.t <= end),
        );
    }
    // Stable: equal timestamps keep their input order, so dedup keeps the first replica's sample.
    out.sort_by_key(|s| s.t);
    out.dedup_by_key(|s| s.t);
    Ok(out)
}

/// What merging one series' chunks inside `[start, end]` decodes at most, by the sample limits' count
/// ([`chunks::weight`]): the chunks that reach into the range, byte-identical replicas once (merging keeps
/// those undecoded). Read from the chunks' headers, so the request's budget can refuse a series before any of
/// it is decoded.
pub(crate) fn weigh(chunks: &[ChunkData], start: i64, end: i64) -> Result<usize, QuerierError> {
    let mut in_range: Vec<&ChunkData> = chunks
        .iter()
        .filter(|c| c.max_time >= start && c.min_time <= end)
        .collect();
    in_range.sort_by_key(|c| (c.min_time, c.max_time));
    in_range.dedup();
    let mut total = 0usize;
    for c in in_range {
        total = total.saturating_add(chunks::weight(c)?);
    }
    Ok(total)
}

/// One series' chunks from every replica, reduced to chunks that are sorted by time, do not overlap, and hold
/// only samples inside `[start, end]`. Chunks that need none of that are passed through without decoding.
pub(crate) fn merge_chunks(mut chunks: Vec<ChunkData>, start: i64, end: i64) -> Result<Vec<ChunkData>, QuerierError> {
    chunks.retain(|c| c.max_time >= start && c.min_time <= end);
    // Stable, so chunks starting together keep the ingesters' order. Byte-identical replica chunks end up
    // next to each other (unless a third version with the same bounds sits between; it is then merged).
    chunks.sort_by_key(|c| (c.min_time, c.max_time));
    chunks.dedup();

    let mut out = Vec::with_capacity(chunks.len());
    let mut group: Vec<ChunkData> = Vec::new();
    let mut group_max = i64::MIN;
    for chunk in chunks {
        if !group.is_empty() && chunk.min_time > group_max {
            flush_group(std::mem::take(&mut group), start, end, &mut out)?;
        }
        group_max = if group.is_empty() {
            chunk.max_time
        } else {
            group_max.max(chunk.max_time)
        };
        group.push(chunk);
    }
    if !group.is_empty() {
        flush_group(group, start, end, &mut out)?;
    }
    debug_assert!(
        out.windows(2).all(|w| w[0].max_time < w[1].min_time),
        "merged chunks must be sorted and disjoint"
    );
    Ok(out)
}

/// Emits a group of chunks whose time ranges overlap one another (transitively): as is when it is a single
/// chunk inside the range, re-encoded otherwise.
fn flush_group(group: Vec<ChunkData>, start: i64, end: i64, out: &mut Vec<ChunkData>) -> Result<(), QuerierError> {
    if let [only] = group.as_slice()
        && only.min_time >= start
        && only.max_time <= end
    {
        chunks::num_samples(only)?; // rejects chunks too short to hold the chunk header
        out.extend(group);
        return Ok(());
    }
    let samples = merge_samples(&group, start, end)?;
    out.extend(chunks::encode(&samples)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_model::Sample;

    fn samples(ts: impl IntoIterator<Item = i64>) -> Vec<Sample> {
        ts.into_iter().map(|t| Sample::new(t, t as f64)).collect()
    }

    fn chunk(ts: impl IntoIterator<Item = i64>) -> ChunkData {
        chunks::encode_one(&samples(ts)).unwrap()
    }

    fn all_samples(chunks: &[ChunkData]) -> Vec<Sample> {
        chunks.iter().flat_map(|c| chunks::decode_floats(c).unwrap()).collect()
    }

    #[test]
    fn merge_chunks_cases() {
        struct Case {
            name: &'static str,
            input: Vec<ChunkData>,
            start: i64,
            end: i64,
            want: Vec<Sample>,
            passthrough: bool,
        }
        let cases = [
            Case {
                name: "identical replicas kept once, undecoded",
                input: vec![chunk(0..10), chunk(0..10), chunk(10..20)],
                start: 0,
                end: 100,
                want: samples(0..20),
                passthrough: true,
            },
            Case {
                name: "overlapping replicas merged, duplicates dropped",
                input: vec![chunk((0..20).step_by(2)), chunk(0..10), chunk(15..25)],
                start: 0,
                end: 100,
                want: samples((0..25).filter(|t| *t < 10 || t % 2 == 0 || *t >= 15)),
                passthrough: false,
            },
            Case {
                name: "trimmed to the range",
                input: vec![chunk(0..10), chunk(10..20), chunk(20..30)],
                start: 5,
                end: 24,
                want: samples(5..25),
                passthrough: false,
            },
            Case {
                name: "unsorted input sorted",
                input: vec![chunk(20..30), chunk(0..10)],
                start: 0,
                end: 100,
                want: samples((0..10).chain(20..30)),
                passthrough: true,
            },
            Case {
                name: "chunk outside the range dropped",
                input: vec![chunk(0..10), chunk(50..60)],
                start: 20,
                end: 40,
                want: vec![],
                passthrough: true,
            },
            Case {
                name: "range inside a chunk but between samples",
                input: vec![chunk([0, 100])],
                start: 10,
                end: 90,
                want: vec![],
                passthrough: false,
            },
        ];
        for c in cases {
            let input_set = c.input.clone();
            let got = merge_chunks(c.input, c.start, c.end).unwrap();
            assert_eq!(all_samples(&got), c.want, "case {}", c.name);
            assert!(
                got.windows(2).all(|w| w[0].max_time < w[1].min_time),
                "case {}: chunks sorted and disjoint",
                c.name
            );
            for g in &got {
                let s = chunks::decode(g).unwrap();
                assert_eq!(
                    (g.min_time, g.max_time),
                    (s[0].t, s[s.len() - 1].t),
                    "case {}: chunk bounds",
                    c.name
                );
            }
            if c.passthrough {
                assert!(
                    got.iter().all(|g| input_set.contains(g)),
                    "case {}: passed through",
                    c.name
                );
            }
        }
    }

    #[test]
    fn ties_go_to_the_earliest_chunk_then_the_first_replica() {
        let early = chunks::encode_one(&[Sample::new(1, 1.0), Sample::new(2, 2.0)]).unwrap();
        let late = chunks::encode_one(&[Sample::new(2, 20.0), Sample::new(3, 3.0)]).unwrap();
        let want = vec![Sample::new(1, 1.0), Sample::new(2, 2.0), Sample::new(3, 3.0)];
        for input in [vec![early.clone(), late.clone()], vec![late, early]] {
            assert_eq!(
                merge_samples(&input, i64::MIN, i64::MAX).unwrap(),
                chunks::from_floats(&want)
            );
            assert_eq!(all_samples(&merge_chunks(input, i64::MIN, i64::MAX).unwrap()), want);
        }
        let first = chunks::encode_one(&[Sample::new(5, 1.0)]).unwrap();
        let second = chunks::encode_one(&[Sample::new(5, 2.0)]).unwrap();
        let input = vec![first, second];
        assert_eq!(
            merge_samples(&input, 0, 10).unwrap(),
            chunks::from_floats(&[Sample::new(5, 1.0)])
        );
        assert_eq!(all_samples(&merge_chunks(input, 0, 10).unwrap()), [Sample::new(5, 1.0)]);
    }

    proptest::proptest! {
        /// Whatever replicas hold and however they cut chunks, the merge is the union of their samples inside
        /// the range, in chunks that are sorted, disjoint and bounded by their first and last sample.
        #[test]
        fn merge_is_the_trimmed_union_of_replicas(
            base in proptest::collection::btree_set(0i64..3000, 1..400),
            replicas in proptest::collection::vec((proptest::bits::u64::ANY, 1usize..150), 1..4),
            range in (0i64..3000, 0i64..3000),
        ) {
            let (start, end) = (range.0.min(range.1), range.0.max(range.1));
            let base: Vec<i64> = base.into_iter().collect();
            let mut input = Vec::new();
            let mut want = std::collections::BTreeSet::new();
            for (r, (mask, per_chunk)) in replicas.iter().enumerate() {
                // Each replica misses the samples whose bit is clear (bits rotate per replica).
                let held: Vec<Sample> = base
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask.rotate_left((i + r) as u32) & 1 == 1)
                    .map(|(_, t)| Sample::new(*t, (*t as f64).sqrt()))
                    .collect();
                want.extend(held.iter().map(|s| s.t).filter(|t| *t >= start && *t <= end));
                input.extend(held.chunks(*per_chunk).map(|p| chunks::encode_one(p).unwrap()));
            }
            let want: Vec<Sample> = want.into_iter().map(|t| Sample::new(t, (t as f64).sqrt())).collect();
            proptest::prop_assert_eq!(merge_samples(&input, start, end).unwrap(), chunks::from_floats(&want));
            let merged = merge_chunks(input, start, end).unwrap();
            proptest::prop_assert!(merged.windows(2).all(|w| w[0].max_time < w[1].min_time));
            for c in &merged {
                let s = chunks::decode(c).unwrap();
                proptest::prop_assert_eq!((c.min_time, c.max_time), (s[0].t, s[s.len() - 1].t));
            }
            proptest::prop_assert_eq!(all_samples(&merged), want);
        }
    }
}
