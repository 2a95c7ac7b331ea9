use super::bstream::BitReader;
use super::*;
use crate::error::ChunkError;
use heddle_model::{STALE_NAN_BITS, Sample};
use proptest::prelude::*;

/// Packs a human-written bit string ("10 0110 ...", spaces ignored) into bytes, zero-padding the last one.
fn bits(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, c) in s.chars().filter(|c| !c.is_whitespace()).enumerate() {
        if n % 8 == 0 {
            out.push(0u8);
        }
        if c == '1' {
            *out.last_mut().unwrap() |= 0x80 >> (n % 8);
        }
    }
    out
}

fn encode(samples: &[(i64, f64)]) -> XorChunk {
    let mut c = XorChunk::new();
    for (t, v) in samples {
        c.append(*t, *v).unwrap();
    }
    c
}

fn assert_bit_eq(got: &[Sample], want: &[(i64, f64)], name: &str) {
    assert_eq!(got.len(), want.len(), "{name}: sample count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.t, w.0, "{name}: t of sample {i}");
        assert_eq!(g.v.to_bits(), w.1.to_bits(), "{name}: value bits of sample {i}");
    }
}

#[test]
fn golden_constant_step_and_one_change() {
    // (1000, 1.0) (2000, 1.0) (3000, 2.0) (4000, 2.0)
    let c = encode(&[(1000, 1.0), (2000, 1.0), (3000, 2.0), (4000, 2.0)]);
    let mut want = vec![0x00, 0x04]; // 4 samples, u16 BE
    want.extend([0xd0, 0x0f]); // varint(1000): zigzag 2000 = 0b1111_1010000 -> 0xd0 0x0f
    want.extend(1.0f64.to_bits().to_be_bytes()); // 0x3ff0000000000000
    want.extend([0xe8, 0x07]); // uvarint(1000) = 0b111_1101000 -> 0xe8 0x07
    want.extend(bits(concat!(
        "0 ",                            // sample 2: XOR 0
        "0 ",                            // sample 3: dod 0
        "1 1 00001 001011 11111111111 ", // XOR 0x7ff0.. : new window, 1 leading zero, 11 significant bits
        "0 ",                            // sample 4: dod 0
        "0",                             // XOR 0
    )));
    assert_eq!(
        want,
        [
            0x00, 0x04, 0xd0, 0x0f, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0xe8, 0x07, 0x30, 0x97, 0xff, 0xc0
        ]
    );
    assert_eq!(c.bytes(), &want[..]);
    assert_eq!(c.min_time(), Some(1000));
    assert_eq!(c.max_time(), Some(4000));
}

#[test]
fn golden_dod_buckets_and_window_reuse() {
    // t: 0, 10, 25, 30, 35 -> deltas 10, 15, 5, 5 -> dods 5, -10, 0. Values 0, 1, 3, 3, 2.
    let c = encode(&[(0, 0.0), (10, 1.0), (25, 3.0), (30, 3.0), (35, 2.0)]);
    let mut want = vec![0x00, 0x05, 0x00]; // 5 samples, varint(0)
    want.extend([0u8; 8]); // 0.0
    want.push(0x0a); // uvarint(10)
    want.extend(bits(concat!(
        // 1.0 ^ 0.0 = 0x3ff0..: 2 leading zeros, 52 trailing, 10 significant bits.
        "1 1 00010 001010 1111111111 ",
        // dod 5 in the 14-bit bucket.
        "10 00000000000101 ",
        // 3.0 ^ 1.0 = 0x7ff8..: 1 leading zero < 2, so a new window: 1 leading, 12 significant.
        "1 1 00001 001100 111111111111 ",
        // dod -10: 14-bit two's complement 2^14 - 10.
        "10 11111111110110 ",
        // 3.0 ^ 3.0 = 0.
        "0 ",
        // dod 0.
        "0 ",
        // 2.0 ^ 3.0 = 0x0008..: 12 leading >= 1 and 51 trailing >= 51: reuse the window, 12 bits.
        "1 0 000000000001",
    )));
    assert_eq!(c.bytes(), &want[..]);
}

#[test]
fn dod_bucket_boundaries() {
    // Third sample's dod goes in: 1 bit for 0, else prefix + n bits.
    let cases: &[(i64, u64, u32)] = &[
        (0, 0b0, 0),
        (1, 0b10, 14),
        (8192, 0b10, 14),
        (-8191, 0b10, 14),
        (8193, 0b110, 17),
        (-8192, 0b110, 17),
        (65536, 0b110, 17),
        (-65535, 0b110, 17),
        (65537, 0b1110, 20),
        (-65536, 0b1110, 20),
        (524288, 0b1110, 20),
        (-524287, 0b1110, 20),
        (524289, 0b1111, 64),
        (-524288, 0b1111, 64),
        (i64::MAX / 2, 0b1111, 64),
    ];
    for &(dod, prefix, nbits) in cases {
        let samples = [(0i64, 0.0), (1_000_000, 0.0), (2_000_000 + dod, 0.0)];
        let c = encode(&samples);
        // Header 2 B, varint(0) 1 B, value 8 B, uvarint(1e6) 3 B, then bits: XOR '0', the dod.
        let mut r = BitReader::new(&c.bytes()[14..]);
        assert_eq!(r.read_bit(), Some(false), "dod {dod}: second value");
        let plen = match prefix {
            0b0 => 1,
            0b10 => 2,
            0b110 => 3,
            _ => 4,
        };
        assert_eq!(r.read_bits(plen), Some(prefix), "dod {dod}: prefix");
        let raw = r.read_bits(nbits).unwrap();
        let mask = if nbits == 64 { u64::MAX } else { (1u64 << nbits) - 1 };
        assert_eq!(raw, (dod as u64) & mask, "dod {dod}: payload");
        assert_bit_eq(&decode_xor(c.bytes()).unwrap(), &samples, &format!("dod {dod}"));
    }
}

#[test]
fn sixty_four_significant_bits_are_written_as_zero() {
    // 1.0 ^ f64::from_bits(0xc00..01) has 0 leading and 0 trailing zeros.
    let v1 = f64::from_bits(0x3ff0_0000_0000_0000 ^ 0x8000_0000_0000_0001);
    let c = encode(&[(0, 1.0), (1, v1)]);
    let mut r = BitReader::new(&c.bytes()[2 + 1 + 8 + 1..]);
    assert_eq!(r.read_bits(2), Some(0b11));
    assert_eq!(r.read_bits(5), Some(0), "leading");
    assert_eq!(r.read_bits(6), Some(0), "64 significant bits stored as 0");
    assert_eq!(r.read_bits(64), Some(0x8000_0000_0000_0001));
    assert_bit_eq(&decode_xor(c.bytes()).unwrap(), &[(0, 1.0), (1, v1)], "64 sig bits");
}

#[test]
fn leading_zeros_are_clamped_to_31() {
    // XOR = 1: 63 leading zeros, clamped to 31, so 33 significant bits.
    let v1 = f64::from_bits(1);
    let c = encode(&[(0, 0.0), (1, v1)]);
    let mut r = BitReader::new(&c.bytes()[12..]);
    assert_eq!(r.read_bits(2), Some(0b11));
    assert_eq!(r.read_bits(5), Some(31));
    assert_eq!(r.read_bits(6), Some(33));
    assert_eq!(r.read_bits(33), Some(1));
}

#[test]
fn empty_and_short_inputs() {
    let c = XorChunk::new();
    assert_eq!(c.bytes(), &[0, 0]);
    assert_eq!(c.iter().count(), 0);
    assert_eq!(c.min_time(), None);
    assert_eq!(decode_xor(&[0]), Err(ChunkError::TooShort { len: 1 }));
    assert_eq!(decode_xor(&[0, 1]), Err(ChunkError::Truncated { sample: 0 }));
    assert!(XorChunk::from_bytes(vec![0, 0]).unwrap().is_empty());
}

#[test]
fn full_chunk_refuses_more_samples() {
    let mut c = XorChunk::new();
    for t in 0..i64::from(u16::MAX) {
        c.append(t, 1.0).unwrap();
    }
    assert_eq!(c.append(1 << 20, 1.0), Err(ChunkError::Full { samples: u16::MAX }));
    assert_eq!(c.iter().count(), usize::from(u16::MAX));
}

#[test]
fn reopened_chunk_continues_and_ignores_a_spare_zero_byte() {
    let first = [(100, 1.5), (200, 2.5), (300, 2.5)];
    let rest = [(410, -1.0), (520, f64::NAN), (630, 7.0)];
    let mut all = first.to_vec();
    all.extend(rest);
    for spare in [false, true] {
        let mut bytes = encode(&first).into_bytes();
        if spare {
            bytes.push(0); // what Prometheus < 3.0 sometimes left after a byte-aligned write
        }
        let mut c = XorChunk::from_bytes(bytes).unwrap();
        assert_eq!(c.min_time(), Some(100), "spare {spare}");
        assert_eq!(c.last().map(|s| s.t), Some(300), "spare {spare}");
        for (t, v) in rest {
            c.append(t, v).unwrap();
        }
        assert_bit_eq(&decode_xor(c.bytes()).unwrap(), &all, &format!("spare {spare}"));
    }
}

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::from_bits(STALE_NAN_BITS)),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(-0.0),
        (-1000i32..1000).prop_map(f64::from),
        any::<f64>(),
        any::<u64>().prop_map(f64::from_bits),
    ]
}

fn monotonic_series() -> impl Strategy<Value = Vec<(i64, f64)>> {
    let delta = prop_oneof![Just(15_000i64), 14_990i64..15_010, 0i64..100_000, 0i64..(1 << 40),];
    (any::<i32>(), proptest::collection::vec((delta, value()), 0..240)).prop_map(|(start, steps)| {
        let mut t = i64::from(start);
        steps
            .into_iter()
            .map(|(d, v)| {
                t = t.saturating_add(d);
                (t, v)
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn monotonic_samples_round_trip_bit_exact(samples in monotonic_series()) {
        let c = encode(&samples);
        prop_assert_eq!(usize::from(c.num_samples()), samples.len());
        let got = decode_xor(c.bytes()).unwrap();
        assert_bit_eq(&got, &samples, "monotonic");
        // Reopening restores the appender: appending continues the same series.
        let reopened = XorChunk::from_bytes(c.bytes().to_vec()).unwrap();
        prop_assert_eq!(reopened.bytes(), c.bytes());
        prop_assert_eq!(reopened.max_time(), c.max_time());
        prop_assert_eq!(reopened.min_time(), c.min_time());
    }

    #[test]
    fn any_timestamps_round_trip(samples in proptest::collection::vec((any::<i64>(), value()), 0..50)) {
        let c = encode(&samples);
        assert_bit_eq(&decode_xor(c.bytes()).unwrap(), &samples, "any timestamps");
    }

    #[test]
    fn split_append_round_trips(samples in monotonic_series(), split in any::<prop::sample::Index>()) {
        let at = if samples.is_empty() { 0 } else { split.index(samples.len() + 1) };
        let mut c = XorChunk::from_bytes(encode(&samples[..at]).into_bytes()).unwrap();
        for (t, v) in &samples[at..] {
            c.append(*t, *v).unwrap();
        }
        assert_bit_eq(&decode_xor(c.bytes()).unwrap(), &samples, "split");
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let decoded = decode_xor(&bytes);
        let mut it = XorIter::new(&bytes);
        let n = it.by_ref().count();
        prop_assert!(n <= usize::from(it.num_samples()));
        prop_assert_eq!(decoded.is_ok(), it.error().is_none());
        if let Ok(mut c) = XorChunk::from_bytes(bytes) {
            // A chunk that decodes can be continued and still decodes.
            let before = decode_xor(c.bytes()).unwrap();
            let next_t = c.max_time().map_or(0, |t| t.wrapping_add(1));
            if c.append(next_t, 1.0).is_ok() {
                let after = decode_xor(c.bytes()).unwrap();
                prop_assert_eq!(after.len(), before.len() + 1);
                prop_assert_eq!(after.last().map(|s| s.t), Some(next_t));
            }
        }
    }
}

/// The decoder as it was before the reader peeked 64-bit words: one bit at a time, every read checked.
/// The fast decoder must agree with it on every input: the samples, the error and its sample index, and
/// where the stream ends (which `from_bytes` truncates at).
mod reference {
    use crate::error::ChunkError;

    struct Bits<'a> {
        data: &'a [u8],
        pos: usize,
    }

    impl Bits<'_> {
        fn bits(&mut self, n: u32) -> Option<u64> {
            let mut v = 0;
            for _ in 0..n {
                let byte = self.data.get(self.pos / 8)?;
                v = (v << 1) | u64::from((byte >> (7 - self.pos % 8)) & 1);
                self.pos += 1;
            }
            Some(v)
        }

        fn uvarint(&mut self) -> Result<Option<u64>, ()> {
            let mut x = 0u64;
            for i in 0..10 {
                let Some(b) = self.bits(8) else {
                    return Ok(None);
                };
                if b < 0x80 {
                    if i == 9 && b > 1 {
                        return Err(());
                    }
                    return Ok(Some(x | (b << (7 * i))));
                }
                x |= (b & 0x7f) << (7 * i);
            }
            Err(())
        }
    }

    fn signed(bits: u64, n: u32) -> i64 {
        if bits > 1 << (n - 1) {
            bits as i64 - (1i64 << n)
        } else {
            bits as i64
        }
    }

    /// (t, value bits) of the samples decoded, why decoding stopped early, and the stream bits used.
    pub(super) fn decode(bytes: &[u8]) -> (Vec<(i64, u64)>, Option<ChunkError>, usize) {
        let [hi, lo, rest @ ..] = bytes else {
            return (Vec::new(), Some(ChunkError::TooShort { len: bytes.len() }), 0);
        };
        let total = u16::from_be_bytes([*hi, *lo]);
        let mut r = Bits { data: rest, pos: 0 };
        let (mut t, mut v, mut delta, mut leading, mut trailing) = (0i64, 0u64, 0u64, 0u32, 0u32);
        let mut out = Vec::new();
        for sample in 0..total {
            let truncated = Some(ChunkError::Truncated { sample });
            let overflow = Some(ChunkError::VarintOverflow { sample });
            if sample < 2 {
                match r.uvarint() {
                    Err(()) => return (out, overflow, r.pos),
                    Ok(None) => return (out, truncated, r.pos),
                    Ok(Some(x)) if sample == 0 => t = ((x >> 1) as i64) ^ -((x & 1) as i64),
                    Ok(Some(x)) => delta = x,
                }
            } else {
                let mut ones = 0;
                while ones < 4 {
                    match r.bits(1) {
                        None => return (out, truncated, r.pos),
                        Some(0) => break,
                        Some(_) => ones += 1,
                    }
                }
                let dod = match ones {
                    0 => Some(0),
                    1 => r.bits(14).map(|b| signed(b, 14)),
                    2 => r.bits(17).map(|b| signed(b, 17)),
                    3 => r.bits(20).map(|b| signed(b, 20)),
                    _ => r.bits(64).map(|b| b as i64),
                };
                let Some(dod) = dod else {
                    return (out, truncated, r.pos);
                };
                delta = delta.wrapping_add(dod as u64);
            }
            if sample > 0 {
                t = t.wrapping_add(delta as i64);
            }
            if sample == 0 {
                let Some(bits) = r.bits(64) else {
                    return (out, truncated, r.pos);
                };
                v = bits;
            } else {
                let Some(control) = r.bits(1) else {
                    return (out, truncated, r.pos);
                };
                if control == 1 {
                    let Some(new_window) = r.bits(1) else {
                        return (out, truncated, r.pos);
                    };
                    if new_window == 1 {
                        let (Some(l), Some(s)) = (r.bits(5), r.bits(6)) else {
                            return (out, truncated, r.pos);
                        };
                        let s = if s == 0 { 64 } else { s as u32 };
                        if l as u32 + s > 64 {
                            let err = ChunkError::BadWindow {
                                sample,
                                leading: l as u8,
                                sig: s as u8,
                            };
                            return (out, Some(err), r.pos);
                        }
                        (leading, trailing) = (l as u32, 64 - l as u32 - s);
                    }
                    let Some(bits) = r.bits(64 - leading - trailing) else {
                        return (out, truncated, r.pos);
                    };
                    v ^= bits << trailing;
                }
            }
            out.push((t, v));
        }
        (out, None, r.pos)
    }
}

/// Decodes `bytes` with [`XorIter`] and [`XorChunk::from_bytes`] and checks both against [`reference`].
fn assert_same_as_reference(bytes: &[u8], name: &str) {
    let (want, want_err, used) = reference::decode(bytes);
    let mut it = XorIter::new(bytes);
    let got: Vec<(i64, u64)> = it.by_ref().map(|s| (s.t, s.v.to_bits())).collect();
    assert_eq!(got, want, "{name}: samples");
    assert_eq!(it.error(), want_err.as_ref(), "{name}: error");
    match XorChunk::from_bytes(bytes) {
        Ok(c) => {
            assert_eq!(want_err, None, "{name}: from_bytes accepted it");
            // What from_bytes keeps: the header and the used bits, padding bits cleared.
            let bits = 16 + used;
            let mut kept = bytes[..bits.div_ceil(8)].to_vec();
            let free = (8 - bits % 8) % 8;
            if let Some(last) = kept.last_mut() {
                *last &= !((1u8 << free) - 1);
            }
            assert_eq!(c.bytes(), &kept[..], "{name}: bytes kept by from_bytes");
        }
        Err(e) => assert_eq!(Some(e), want_err, "{name}: from_bytes error"),
    }
}

/// Chunks whose last fields end at or near the end of the buffer, where the reader's 8-byte peeks run past it.
fn edge_chunks() -> Vec<(&'static str, Vec<u8>)> {
    let big = f64::from_bits(0x3ff0_0000_0000_0000 ^ 0x8000_0000_0000_0001);
    let mut cases = vec![
        (
            "64-bit dod last",
            encode(&[(0, 1.0), (10, 1.0), (1 << 40, 1.0)]).into_bytes(),
        ),
        ("sig 64 last", encode(&[(0, 1.0), (10, 1.0), (20, big)]).into_bytes()),
        (
            "64-bit dod and sig 64 last",
            encode(&[(0, 1.0), (10, 1.0), (1 << 40, big)]).into_bytes(),
        ),
        (
            "every dod bucket",
            // Deltas 10, 10, 11, 10_009, 90_060, then 2^40 - 100_100: dods 0, 1, 9_998, 80_051, ~2^40.
            encode(&[
                (0, 0.5),
                (10, 1.5),
                (20, 2.5),
                (31, 3.5),
                (10_040, 4.5),
                (100_100, 5.5),
                (1 << 40, 6.5),
            ])
            .into_bytes(),
        ),
        (
            "window reuse last",
            encode(&[(0, 0.0), (10, 1.0), (25, 3.0), (35, 2.0)]).into_bytes(),
        ),
        ("one sample", encode(&[(-5, -2.0)]).into_bytes()),
        ("two samples", encode(&[(-5, -2.0), (i64::MAX, f64::NAN)]).into_bytes()),
    ];
    let spare: Vec<_> = cases.iter().map(|(_, b)| [&b[..], &[0]].concat()).collect();
    cases.extend(
        ["64-bit dod last + spare byte", "sig 64 last + spare byte"]
            .into_iter()
            .zip(spare),
    );
    cases
}

#[test]
fn edge_chunks_round_trip_and_truncate_like_the_reference() {
    for (name, bytes) in edge_chunks() {
        assert!(decode_xor(&bytes).is_ok(), "{name}: decodes");
        for cut in 0..=bytes.len() {
            assert_same_as_reference(&bytes[..cut], &format!("{name} cut at {cut}"));
        }
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 0x80 >> (bit % 8);
            assert_same_as_reference(&flipped, &format!("{name} bit {bit} flipped"));
        }
    }
}

#[test]
fn truncated_wide_fields_report_their_sample() {
    // 12 bytes (header, varint, first value, uvarint), then '0' (value of sample 1), '1111' + the 64-bit dod of
    // sample 2, '0': 70 bits.
    let c = encode(&[(0, 1.0), (10, 1.0), (1 << 40, 1.0)]);
    let bytes = c.bytes();
    assert_eq!(bytes.len(), 12 + 9, "64-bit dod chunk length");
    for cut in 13..bytes.len() {
        assert_eq!(
            decode_xor(&bytes[..cut]),
            Err(ChunkError::Truncated { sample: 2 }),
            "dod cut at {cut}"
        );
    }
    // Sample 1 with 64 significant bits: '11' + 11 bits + 64 bits right after the uvarint.
    let big = f64::from_bits(0x3ff0_0000_0000_0000 ^ 0x8000_0000_0000_0001);
    let c = encode(&[(0, 1.0), (1, big)]);
    let bytes = c.bytes();
    for cut in 12..bytes.len() {
        assert_eq!(
            decode_xor(&bytes[..cut]),
            Err(ChunkError::Truncated { sample: 1 }),
            "sig cut at {cut}"
        );
    }
}

#[test]
fn bad_window_wins_over_a_missing_payload() {
    // Sample 1: '11', 31 leading zeros, 40 significant bits (71 > 64), then nothing: the window is checked
    // before the payload is read, as before.
    let mut bytes = vec![0x00, 0x02, 0x00];
    bytes.extend(1.0f64.to_bits().to_be_bytes());
    bytes.push(0x0a);
    bytes.extend(bits("11 11111 101000"));
    assert_eq!(
        decode_xor(&bytes),
        Err(ChunkError::BadWindow {
            sample: 1,
            leading: 31,
            sig: 40
        })
    );
    assert_same_as_reference(&bytes, "bad window");
}

fn mutation() -> impl Strategy<Value = (usize, usize, u16)> {
    (any::<usize>(), any::<usize>(), any::<u16>())
}

proptest! {
    #[test]
    fn arbitrary_bytes_decode_like_the_reference(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        assert_same_as_reference(&bytes, "arbitrary");
    }

    #[test]
    fn damaged_chunks_decode_like_the_reference(samples in monotonic_series(), (cut, bit, count) in mutation()) {
        let bytes = encode(&samples).into_bytes();
        assert_same_as_reference(&bytes, "whole");
        assert_same_as_reference(&bytes[..cut % (bytes.len() + 1)], "cut");
        let mut flipped = bytes.clone();
        let bit = bit % (bytes.len() * 8);
        flipped[bit / 8] ^= 0x80 >> (bit % 8);
        assert_same_as_reference(&flipped, "bit flipped");
        let mut recounted = bytes;
        recounted[..2].copy_from_slice(&count.to_be_bytes());
        assert_same_as_reference(&recounted, "sample count changed");
    }
}

proptest! {
    /// A chunk restored with its true newest sample reads as its bytes at once, and after more appends its
    /// bytes are exactly those of a chunk decoded up front ([`XorChunk::from_bytes`]) given the same appends.
    #[test]
    fn restored_chunks_append_like_decoded_ones(samples in monotonic_series(), split in any::<prop::sample::Index>()) {
        prop_assume!(!samples.is_empty());
        let at = split.index(samples.len() + 1).max(1);
        let head = encode(&samples[..at]);
        let (t, bits) = head.last_bits().unwrap();
        let mut restored = XorChunk::restore(head.bytes().to_vec(), t, bits).unwrap();
        let mut decoded = XorChunk::from_bytes(head.bytes()).unwrap();
        prop_assert_eq!(restored.num_samples(), head.num_samples());
        prop_assert_eq!((restored.min_time(), restored.max_time()), (head.min_time(), head.max_time()));
        prop_assert_eq!(restored.last_bits(), head.last_bits());
        assert_bit_eq(&restored.iter().collect::<Vec<_>>(), &samples[..at], "restored, before appends");
        for (t, v) in &samples[at..] {
            restored.append(*t, *v).unwrap();
            decoded.append(*t, *v).unwrap();
        }
        prop_assert!(!restored.is_pending() || at == samples.len());
        prop_assert_eq!(restored.bytes(), decoded.bytes());
        assert_bit_eq(&decode_xor(restored.bytes()).unwrap(), &samples, "restored, then appended");
    }

    /// A chunk restored with another newest sample than its bytes hold, or whose bytes are damaged past the
    /// first sample, refuses appends (and resumes) and stays as it was.
    #[test]
    fn restored_chunks_that_disagree_refuse_appends(samples in monotonic_series(), (cut, bit, _) in mutation()) {
        prop_assume!(samples.len() > 2);
        let chunk = encode(&samples);
        let (t, bits) = chunk.last_bits().unwrap();
        let bytes = chunk.bytes().to_vec();
        let mut cases = vec![
            ("newer time", bytes.clone(), t + 1, bits),
            ("other value", bytes.clone(), t, bits ^ 1),
            ("cut", bytes[..(cut % bytes.len()).max(2)].to_vec(), t, bits),
        ];
        let mut flipped = bytes.clone();
        let bit = bit % (bytes.len() * 8);
        flipped[bit / 8] ^= 0x80 >> (bit % 8);
        cases.push(("bit flipped", flipped, t, bits));
        for (name, b, t, bits) in cases {
            // What `resume` promises to check: the bytes decode and end in the given sample. A damaged header
            // count can still pass, when the sample it now ends at equals the last one (a zero time delta).
            let decodes_as_given = XorChunk::from_bytes(b.as_slice()).ok().and_then(|c| c.last_bits()) == Some((t, bits));
            let Ok(mut c) = XorChunk::restore(b.clone(), t, bits) else { continue };
            if decodes_as_given {
                continue;
            }
            let before = c.bytes().to_vec();
            prop_assert!(c.append(t + 10, 1.0).is_err(), "{}: append accepted", name);
            prop_assert!(c.resume().is_err(), "{}: resume accepted", name);
            prop_assert!(c.is_pending(), "{}", name);
            prop_assert_eq!(c.bytes(), &before[..], "{}: bytes changed", name);
        }
    }
}

/// Short chunks are decoded at once by [`XorChunk::restore`], and checked against the newest sample given like
/// longer ones are at their first append: a header whose count was lowered to two (the rest of the bytes
/// intact) must not restore as a shorter chunk that then takes appends.
#[test]
fn short_restored_chunks_must_end_in_the_given_sample() {
    let samples: Vec<(i64, f64)> = (0..8).map(|i| (1_000 + i * 15_000, i as f64)).collect();
    let chunk = encode(&samples);
    let (t, bits) = chunk.last_bits().unwrap();
    let mut lowered = chunk.bytes().to_vec();
    lowered[..2].copy_from_slice(&2u16.to_be_bytes());
    let err = XorChunk::restore(lowered, t, bits).unwrap_err();
    assert!(
        matches!(err, ChunkError::NotAsRestored { samples: 2, t: 16_000, want_t, .. } if want_t == t),
        "{err}"
    );

    let two = encode(&samples[..2]);
    let (t, bits) = two.last_bits().unwrap();
    assert!(XorChunk::restore(two.bytes().to_vec(), t, bits ^ 1).is_err());
    assert!(XorChunk::restore(two.bytes().to_vec(), t + 1, bits).is_err());
    let restored = XorChunk::restore(two.bytes().to_vec(), t, bits).unwrap();
    assert_eq!(restored.bytes(), two.bytes());
    assert!(
        XorChunk::restore(encode(&[]).bytes().to_vec(), 0, 0).is_err(),
        "an empty chunk has no newest sample"
    );
}
