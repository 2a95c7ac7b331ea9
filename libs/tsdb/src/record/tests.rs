use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    Labels::from_sorted(pairs.iter().copied()).unwrap()
}

/// The series record of the brief's example, byte by byte from the format:
/// type 1 | ref 1 as u64 BE | 2 labels | "__name__"="up" | "job"="a".
#[test]
fn golden_series_record() {
    let l = labels(&[("__name__", "up"), ("job", "a")]);
    let mut buf = Vec::new();
    encode_series([(1u64, l.iter())], &mut buf);
    let want: Vec<u8> = [
        &[0x01][..],                                             // Series
        &[0, 0, 0, 0, 0, 0, 0, 1],                               // ref 1
        &[0x02],                                                 // 2 labels
        &[0x08, b'_', b'_', b'n', b'a', b'm', b'e', b'_', b'_'], // len 8, "__name__"
        &[0x02, b'u', b'p'],                                     // len 2, "up"
        &[0x03, b'j', b'o', b'b'],                               // len 3, "job"
        &[0x01, b'a'],                                           // len 1, "a"
    ]
    .concat();
    assert_eq!(buf, want);
    assert_eq!(
        decode(&buf).unwrap(),
        Record::Series(vec![RefSeries {
            series_ref: 1,
            labels: l
        }])
    );
}

/// Samples (ref 5, t 1000, 1.0) and (ref 4, t 1100, -2.5): the first sample is repeated as zero deltas;
/// the second's deltas are -1 (zigzag 1) and 100 (zigzag 200 = uvarint 0xC8 0x01).
#[test]
fn golden_samples_record() {
    let samples = [
        RefSample {
            series_ref: 5,
            t: 1000,
            v: 1.0,
        },
        RefSample {
            series_ref: 4,
            t: 1100,
            v: -2.5,
        },
    ];
    let mut buf = Vec::new();
    encode_samples(&samples, &mut buf);
    let want: Vec<u8> = [
        &[0x02][..],                     // Samples
        &[0, 0, 0, 0, 0, 0, 0, 5],       // first ref 5
        &[0, 0, 0, 0, 0, 0, 0x03, 0xE8], // first t 1000
        &[0x00, 0x00],                   // deltas of the first sample
        &[0x3F, 0xF0, 0, 0, 0, 0, 0, 0], // 1.0
        &[0x01, 0xC8, 0x01],             // ref delta -1, t delta +100
        &[0xC0, 0x04, 0, 0, 0, 0, 0, 0], // -2.5
    ]
    .concat();
    assert_eq!(buf, want);
    assert_eq!(decode(&buf).unwrap(), Record::Samples(samples.to_vec()));
}

#[test]
fn golden_tombstones_record() {
    let stones = [Tombstone {
        series_ref: 3,
        mint: -1,
        maxt: 64,
    }];
    let mut buf = Vec::new();
    encode_tombstones(&stones, &mut buf);
    assert_eq!(buf, [0x03, 0, 0, 0, 0, 0, 0, 0, 3, 0x01, 0x80, 0x01]);
    assert_eq!(decode(&buf).unwrap(), Record::Tombstones(stones.to_vec()));
}

#[test]
fn empty_records() {
    let mut buf = Vec::new();
    encode_samples(&[], &mut buf);
    assert_eq!(buf, [TYPE_SAMPLES]);
    assert_eq!(decode(&buf).unwrap(), Record::Samples(Vec::new()));
    assert_eq!(decode(&[TYPE_SERIES]).unwrap(), Record::Series(Vec::new()));
    assert_eq!(decode(&[TYPE_TOMBSTONES]).unwrap(), Record::Tombstones(Vec::new()));
    assert_eq!(decode(&[]).unwrap_err(), RecordError::Empty);
}

#[test]
fn encoders_append() {
    let mut buf = vec![0xAA];
    encode_samples(
        &[RefSample {
            series_ref: 1,
            t: 2,
            v: 3.0,
        }],
        &mut buf,
    );
    assert_eq!(buf[0], 0xAA);
    assert!(matches!(decode(&buf[1..]).unwrap(), Record::Samples(s) if s.len() == 1));
}

#[test]
fn many_labels_use_a_multi_byte_count() {
    let names: Vec<String> = (0..200).map(|i| format!("l{i:03}")).collect();
    let l = Labels::from_sorted(names.iter().map(|n| (n.as_str(), "v"))).unwrap();
    let mut buf = Vec::new();
    encode_series([(9u64, l.iter())], &mut buf);
    assert_eq!(&buf[9..11], &[0xC8, 0x01], "200 labels as uvarint");
    assert_eq!(
        decode(&buf).unwrap(),
        Record::Series(vec![RefSeries {
            series_ref: 9,
            labels: l
        }])
    );
}

#[test]
fn unknown_types_are_reported_not_decoded() {
    // Mmap markers (5), metadata (6), and types no Prometheus writes; 7 to 10 are histograms (`histogram`).
    for typ in [0u8, 5, 6, 11, 255] {
        assert_eq!(decode(&[typ, 1, 2, 3]).unwrap(), Record::Unknown(typ), "type {typ}");
    }
}

#[test]
fn malformed_records() {
    type Case = (&'static str, Vec<u8>, fn(&RecordError) -> bool);
    let cases: Vec<Case> = vec![
        ("series ref cut", vec![1, 0, 0, 0], |e| {
            matches!(
                e,
                RecordError::Truncated {
                    field: "series ref",
                    ..
                }
            )
        }),
        ("label count missing", vec![1, 0, 0, 0, 0, 0, 0, 0, 1], |e| {
            matches!(
                e,
                RecordError::Truncated {
                    field: "label count",
                    ..
                }
            )
        }),
        ("label name cut", vec![1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 5, b'a'], |e| {
            matches!(
                e,
                RecordError::Truncated {
                    field: "label name",
                    ..
                }
            )
        }),
        (
            "varint overflow",
            [vec![1, 0, 0, 0, 0, 0, 0, 0, 1], vec![0xFF; 11]].concat(),
            |e| matches!(e, RecordError::VarintOverflow { offset: 9, .. }),
        ),
        (
            "tenth varint byte too large",
            [vec![1; 9], vec![0x80; 9], vec![2]].concat(),
            |e| matches!(e, RecordError::VarintOverflow { .. }),
        ),
        ("not utf-8", vec![1, 0, 0, 0, 0, 0, 0, 0, 7, 1, 1, 0xFF, 1, b'v'], |e| {
            matches!(
                e,
                RecordError::InvalidUtf8 {
                    series_ref: 7,
                    offset: 11
                }
            )
        }),
        (
            "unsorted labels",
            vec![1, 0, 0, 0, 0, 0, 0, 0, 7, 2, 1, b'b', 1, b'v', 1, b'a', 1, b'v'],
            |e| {
                matches!(
                    e,
                    RecordError::Labels {
                        series_ref: 7,
                        source: LabelsError::Unsorted { .. }
                    }
                )
            },
        ),
        (
            "empty label name",
            vec![1, 0, 0, 0, 0, 0, 0, 0, 7, 1, 0, 1, b'v'],
            |e| {
                matches!(
                    e,
                    RecordError::Labels {
                        source: LabelsError::EmptyName,
                        ..
                    }
                )
            },
        ),
        ("samples header cut", vec![2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0], |e| {
            matches!(
                e,
                RecordError::Truncated {
                    field: "first timestamp",
                    ..
                }
            )
        }),
        (
            "sample value cut",
            [vec![2], vec![0; 16], vec![0, 0, 1, 2, 3]].concat(),
            |e| {
                matches!(
                    e,
                    RecordError::Truncated {
                        field: "value",
                        offset: 19,
                        ..
                    }
                )
            },
        ),
        ("tombstone maxt missing", vec![3, 0, 0, 0, 0, 0, 0, 0, 1, 2], |e| {
            matches!(e, RecordError::Truncated { field: "maxt", .. })
        }),
    ];
    for (name, bytes, check) in cases {
        match decode(&bytes) {
            Err(e) => assert!(check(&e), "{name}: unexpected error {e:?}"),
            Ok(r) => panic!("{name}: decoded {r:?}"),
        }
    }
}

fn arb_labels() -> impl Strategy<Value = Labels> {
    // Values of 128 bytes and more take a two-byte length, and the string-by-string path of `Decoder::labels`.
    prop::collection::btree_map(
        "[a-zA-Z_][a-zA-Z0-9_]{0,12}|\\PC{1,8}",
        "\\PC{1,20}|[a-z]{120,140}",
        0..12,
    )
    .prop_map(|m: BTreeMap<String, String>| {
        Labels::from_sorted(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap()
    })
}

fn arb_sample() -> impl Strategy<Value = RefSample> {
    let reference = prop_oneof![0u64..1000, any::<u64>()];
    let t = prop_oneof![1_700_000_000_000i64..1_800_000_000_000, any::<i64>()];
    (reference, t, any::<u64>()).prop_map(|(series_ref, t, bits)| RefSample {
        series_ref,
        t,
        v: f64::from_bits(bits),
    })
}

fn bits(samples: &[RefSample]) -> Vec<(u64, i64, u64)> {
    samples.iter().map(|s| (s.series_ref, s.t, s.v.to_bits())).collect()
}

proptest! {
    #[test]
    fn series_round_trip(series in prop::collection::vec((any::<u64>(), arb_labels()), 0..20)) {
        let mut buf = Vec::new();
        encode_series(series.iter().map(|(r, l)| (*r, l.iter())), &mut buf);
        let want: Vec<RefSeries> =
            series.into_iter().map(|(series_ref, labels)| RefSeries { series_ref, labels }).collect();
        prop_assert_eq!(decode(&buf).unwrap(), Record::Series(want));
    }

    #[test]
    fn samples_round_trip(samples in prop::collection::vec(arb_sample(), 0..200)) {
        let mut buf = Vec::new();
        encode_samples(&samples, &mut buf);
        match decode(&buf).unwrap() {
            Record::Samples(got) => prop_assert_eq!(bits(&got), bits(&samples)),
            other => prop_assert!(false, "decoded {:?}", other),
        }
    }

    #[test]
    fn tombstones_round_trip(stones in prop::collection::vec((any::<u64>(), any::<i64>(), any::<i64>()), 0..50)) {
        let stones: Vec<Tombstone> =
            stones.into_iter().map(|(series_ref, mint, maxt)| Tombstone { series_ref, mint, maxt }).collect();
        let mut buf = Vec::new();
        encode_tombstones(&stones, &mut buf);
        prop_assert_eq!(decode(&buf).unwrap(), Record::Tombstones(stones));
    }

    #[test]
    fn arbitrary_bytes_never_panic(typ in 0u8..5, body in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut rec = vec![typ];
        rec.extend_from_slice(&body);
        let _ = decode(&rec);
    }

    #[test]
    fn damaged_records_never_panic(
        samples in prop::collection::vec(arb_sample(), 1..20),
        series in prop::collection::vec((any::<u64>(), arb_labels()), 1..5),
        at in any::<prop::sample::Index>(),
        xor in 1u8..,
        cut in any::<prop::sample::Index>(),
    ) {
        let mut a = Vec::new();
        encode_samples(&samples, &mut a);
        let mut b = Vec::new();
        encode_series(series.iter().map(|(r, l)| (*r, l.iter())), &mut b);
        for mut rec in [a, b] {
            let i = at.index(rec.len());
            rec[i] ^= xor;
            let _ = decode(&rec);
            rec.truncate(cut.index(rec.len()));
            let _ = decode(&rec);
        }
    }

    /// `Decoder::labels` checks runs of short labels for UTF-8 in one go; whatever the bytes (multi-byte and
    /// broken characters, lengths that overrun, long strings), it reads what reading string by string reads,
    /// stops where it stops, and fails where it fails.
    #[test]
    fn labels_read_as_string_by_string(
        n in 0u64..5,
        strings in prop::collection::vec(
            (
                prop_oneof![
                    4 => "\\PC{0,30}|[a-z]{120,140}".prop_map(String::into_bytes),
                    1 => prop::collection::vec(
                        prop::sample::select(vec![b'a', 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x80, 0xFF]),
                        0..8,
                    ),
                ],
                prop::option::weighted(0.1, 0u64..200),
            ),
            0..10,
        ),
    ) {
        // Each string with its length, or (now and then) a wrong one.
        let mut buf = Vec::new();
        for (bytes, lie) in &strings {
            put_uvarint(&mut buf, lie.unwrap_or(bytes.len() as u64));
            buf.extend_from_slice(bytes);
        }
        let mut fast = Decoder { buf: &buf, pos: 0, typ: TYPE_SERIES };
        let mut got = Vec::new();
        let got = fast.labels(7, n, &mut got).map(|()| (got, fast.pos));
        let mut slow = Decoder { buf: &buf, pos: 0, typ: TYPE_SERIES };
        let want = (0..n)
            .map(|_| Ok(LabelRef { name: slow.string(7, "label name")?, value: slow.string(7, "label value")? }))
            .collect::<Result<Vec<_>, RecordError>>()
            .map(|labels| (labels, slow.pos));
        prop_assert_eq!(got, want);
    }
}

proptest::proptest! {
    #[test]
    fn exemplars_records_round_trip(
        exemplars in proptest::collection::vec(
            (
                proptest::prelude::any::<u64>(),
                proptest::prelude::any::<i64>(),
                proptest::prelude::any::<u64>(),
                proptest::collection::vec(("[a-z_]{0,8}", ".{0,8}"), 0..4),
            ),
            0..8,
        )
    ) {
        let exemplars: Vec<RefExemplar> = exemplars
            .into_iter()
            .map(|(series_ref, t, bits, labels)| RefExemplar {
                series_ref,
                t,
                v: f64::from_bits(bits),
                labels: labels
                    .into_iter()
                    .map(|(name, value)| heddle_model::Label { name, value })
                    .collect(),
            })
            .collect();
        let mut buf = Vec::new();
        encode_exemplars(&exemplars, &mut buf);
        let Record::Exemplars(got) = decode(&buf).unwrap() else {
            panic!("not an exemplars record");
        };
        proptest::prop_assert_eq!(got.len(), exemplars.len());
        for (g, w) in got.iter().zip(&exemplars) {
            proptest::prop_assert_eq!((g.series_ref, g.t, g.v.to_bits(), &g.labels), (w.series_ref, w.t, w.v.to_bits(), &w.labels));
        }
    }
}

#[test]
fn truncated_exemplars_records_are_errors() {
    let mut buf = Vec::new();
    encode_exemplars(
        &[RefExemplar {
            series_ref: 1,
            t: 2,
            v: 3.0,
            labels: vec![heddle_model::Label {
                name: "a".into(),
                value: "b".into(),
            }],
        }],
        &mut buf,
    );
    assert_eq!(
        decode(&buf[..1]).unwrap(),
        Record::Exemplars(Vec::new()),
        "the type byte alone"
    );
    assert_eq!(
        decode(&buf[..17]).unwrap(),
        Record::Exemplars(Vec::new()),
        "a header and no exemplar"
    );
    for len in (2..17).chain(18..buf.len()) {
        assert!(decode(&buf[..len]).is_err(), "cut at {len}");
    }
}
