use super::*;
use crate::prometheus;
use crate::write_v2;
use proptest::prelude::*;
use prost::Message as _;

/// A series as tests describe it: labels (name, value) and samples (timestamp, value).
type Spec = (Vec<(String, String)>, Vec<(i64, f64)>);

/// A 2.0 request of `series` (labels, samples), symbols interned in first-use order after "".
fn v2_request(series: &[Spec]) -> write_v2::Request {
    let mut symbols = vec![String::new()];
    let mut intern = |s: &str| match symbols.iter().position(|x| x == s) {
        Some(i) => i as u32,
        None => {
            symbols.push(s.to_owned());
            (symbols.len() - 1) as u32
        }
    };
    let timeseries = series
        .iter()
        .map(|(labels, samples)| write_v2::TimeSeries {
            labels_refs: labels.iter().flat_map(|(n, v)| [intern(n), intern(v)]).collect(),
            samples: samples
                .iter()
                .map(|&(timestamp, value)| write_v2::Sample {
                    value,
                    timestamp,
                    start_timestamp: 0,
                })
                .collect(),
            ..write_v2::TimeSeries::default()
        })
        .collect();
    write_v2::Request { symbols, timeseries }
}

fn v1_request(series: &[Spec]) -> prometheus::WriteRequest {
    prometheus::WriteRequest {
        timeseries: series
            .iter()
            .map(|(labels, samples)| prometheus::TimeSeries {
                labels: labels
                    .iter()
                    .map(|(name, value)| prometheus::Label {
                        name: name.clone(),
                        value: value.clone(),
                    })
                    .collect(),
                samples: samples
                    .iter()
                    .map(|&(timestamp, value)| prometheus::Sample { value, timestamp })
                    .collect(),
                ..prometheus::TimeSeries::default()
            })
            .collect(),
        ..prometheus::WriteRequest::default()
    }
}

fn series_strategy() -> impl Strategy<Value = Vec<Spec>> {
    let label = ("[a-z_]{0,6}", "\\PC{0,8}");
    let sample = (any::<i64>(), any::<f64>());
    prop::collection::vec(
        (prop::collection::vec(label, 0..6), prop::collection::vec(sample, 0..4)),
        0..8,
    )
}

proptest! {
    /// A 2.0 request built with prost decodes to the same labels and samples (bit for bit) as the
    /// equivalent 1.0 request does with the 1.0 decoder.
    #[test]
    fn v2_decodes_like_the_equivalent_v1_request(series in series_strategy()) {
        let v2 = v2_request(&series).encode_to_vec();
        let v1 = v1_request(&series).encode_to_vec();
        let (a2, a1) = (Bump::new(), Bump::new());
        let got = decode_write_request_v2(&a2, &v2).unwrap();
        let want = crate::arena::decode_write_request(&a1, &v1).unwrap();
        prop_assert_eq!(got.timeseries.len(), want.timeseries.len());
        let mut v1_bytes = 0;
        for (g, w) in got.timeseries.iter().zip(want.timeseries) {
            prop_assert_eq!(g.labels, w.labels);
            prop_assert_eq!(g.samples.len(), w.samples.len());
            for (gs, ws) in g.samples.iter().zip(w.samples) {
                prop_assert!(gs.bit_eq(ws), "{:?} != {:?}", gs, ws);
            }
            prop_assert!(g.raw.is_empty());
            v1_bytes += w.raw.len() + 6;
        }
        prop_assert!(got.expanded_bytes >= v1_bytes, "bound {} below {}", got.expanded_bytes, v1_bytes);
    }

    /// The fast path and the general walker decode the same series alike: each series of a request is given
    /// an unknown field (number 15), which the fast path declines, so the general walker reads it.
    #[test]
    fn fast_and_general_paths_agree(series in series_strategy()) {
        let req = v2_request(&series);
        let fast = req.encode_to_vec();
        let mut general = Vec::new();
        for s in &req.symbols {
            general.extend(write_v2::Request { symbols: vec![s.clone()], timeseries: vec![] }.encode_to_vec());
        }
        for ts in &req.timeseries {
            let mut raw = ts.encode_to_vec();
            raw.extend([15 << 3, 1]);
            general.push(0x2a);
            prost::encoding::encode_varint(raw.len() as u64, &mut general);
            general.extend(raw);
        }
        let (a, b) = (Bump::new(), Bump::new());
        let want = decode_write_request_v2(&a, &fast).unwrap();
        let got = decode_write_request_v2(&b, &general).unwrap();
        prop_assert_eq!(got.timeseries.len(), want.timeseries.len());
        for (g, w) in got.timeseries.iter().zip(want.timeseries) {
            prop_assert_eq!(g.labels, w.labels);
            prop_assert_eq!(g.samples.len(), w.samples.len());
            for (gs, ws) in g.samples.iter().zip(w.samples) {
                prop_assert!(gs.bit_eq(ws), "{:?} != {:?}", gs, ws);
            }
        }
        prop_assert_eq!(got.expanded_bytes, want.expanded_bytes);
    }

    /// Series written before, between or after the symbols (repeated fields may come in any order) decode to
    /// what the usual order (symbols first) decodes to.
    #[test]
    fn symbols_after_series_decode_the_same(series in series_strategy(), cut in any::<prop::sample::Index>()) {
        let req = v2_request(&series);
        let usual = req.encode_to_vec();
        let k = cut.index(req.symbols.len() + 1);
        let part = |symbols: &[String], timeseries: &[write_v2::TimeSeries]| {
            write_v2::Request { symbols: symbols.to_vec(), timeseries: timeseries.to_vec() }.encode_to_vec()
        };
        let mut reordered = part(&req.symbols[..k], &[]);
        reordered.extend(part(&[], &req.timeseries));
        reordered.extend(part(&req.symbols[k..], &[]));
        let (a, b) = (Bump::new(), Bump::new());
        let want = decode_write_request_v2(&a, &usual).unwrap();
        let got = decode_write_request_v2(&b, &reordered).unwrap();
        prop_assert_eq!(got.timeseries.len(), want.timeseries.len());
        for (g, w) in got.timeseries.iter().zip(want.timeseries) {
            prop_assert_eq!(g.labels, w.labels);
            prop_assert_eq!(g.samples.len(), w.samples.len());
        }
        prop_assert_eq!(got.expanded_bytes, want.expanded_bytes);
    }
}

#[test]
fn exemplars_metadata_histograms_and_created_timestamps_are_decoded() {
    // symbols: "", "__name__", "h", "trace_id", "abc", "help text", "seconds"
    let mut req = v2_request(&[(vec![("__name__".into(), "h".into())], vec![])]);
    req.symbols
        .extend(["trace_id", "abc", "help text", "seconds"].map(String::from));
    let ts = &mut req.timeseries[0];
    ts.histograms = vec![
        write_v2::Histogram {
            timestamp: 7,
            ..Default::default()
        };
        2
    ];
    ts.exemplars = vec![
        write_v2::Exemplar {
            labels_refs: vec![3, 4],
            value: 1.5,
            timestamp: 5,
        },
        write_v2::Exemplar {
            labels_refs: vec![],
            value: -1.0,
            timestamp: -7,
        },
    ];
    ts.metadata = Some(write_v2::Metadata {
        r#type: write_v2::metadata::MetricType::Histogram as i32,
        help_ref: 5,
        unit_ref: 6,
    });
    ts.created_timestamp = 1000;
    // A second series whose metadata says nothing: no entry.
    let mut quiet = req.timeseries[0].clone();
    quiet.exemplars.clear();
    quiet.metadata = Some(write_v2::Metadata::default());
    req.timeseries.push(quiet);
    let body = req.encode_to_vec();
    let arena = Bump::new();
    let got = decode_write_request_v2(&arena, &body).unwrap();
    let ts = &got.timeseries[0];
    assert_eq!((ts.histograms.len(), ts.exemplars.len()), (2, 2));
    assert_eq!(ts.histograms[1].t, 7);
    assert_eq!(
        ts.exemplars[0].labels,
        &[LabelRef {
            name: "trace_id",
            value: "abc"
        }]
    );
    assert_eq!((ts.exemplars[0].t, ts.exemplars[0].value), (5, 1.5));
    assert_eq!((ts.exemplars[1].t, ts.exemplars[1].labels.len()), (-7, 0));
    assert!(got.timeseries[1].exemplars.is_empty());
    assert_eq!(
        got.metadata,
        &[MetadataRef {
            family: "h",
            kind: MetricType::Histogram,
            help: "help text",
            unit: "seconds",
        }]
    );
    assert_eq!((ts.created, got.timeseries[1].created), (1000, 1000));
    assert_eq!(
        ts.labels,
        &[LabelRef {
            name: "__name__",
            value: "h"
        }]
    );
}

#[test]
fn exemplar_and_metadata_references_are_checked() {
    let cases: Vec<(&str, write_v2::TimeSeries)> = vec![
        (
            "exemplar reference past the symbols",
            write_v2::TimeSeries {
                exemplars: vec![write_v2::Exemplar {
                    labels_refs: vec![1, 99],
                    ..Default::default()
                }],
                ..Default::default()
            },
        ),
        (
            "odd exemplar references",
            write_v2::TimeSeries {
                exemplars: vec![write_v2::Exemplar {
                    labels_refs: vec![1],
                    ..Default::default()
                }],
                ..Default::default()
            },
        ),
        (
            "help reference past the symbols",
            write_v2::TimeSeries {
                metadata: Some(write_v2::Metadata {
                    help_ref: 42,
                    ..Default::default()
                }),
                ..Default::default()
            },
        ),
    ];
    for (name, ts) in cases {
        let req = write_v2::Request {
            symbols: vec![String::new(), "a".into()],
            timeseries: vec![ts],
        };
        let arena = Bump::new();
        let err = decode_write_request_v2(&arena, &req.encode_to_vec()).expect_err(name);
        assert!(
            matches!(
                err,
                DecodeError::SymbolOutOfRange { .. } | DecodeError::OddLabelRefs { .. }
            ),
            "case {name}: {err}"
        );
    }
}

#[test]
fn unpacked_label_references_pair_across_fields() {
    // symbols ["", "a", "b"]; series { labels_refs: 1 (unpacked), labels_refs: [2] (packed) }.
    let body = [
        0x22, 0, 0x22, 1, b'a', 0x22, 1, b'b', //
        0x2a, 5, 0x08, 1, 0x0a, 1, 2,
    ];
    let arena = Bump::new();
    let got = decode_write_request_v2(&arena, &body).unwrap();
    assert_eq!(got.timeseries[0].labels, &[LabelRef { name: "a", value: "b" }]);
}

#[test]
fn hostile_requests_get_precise_errors() {
    let arena = Bump::new();
    let cases: &[(&str, &[u8], DecodeError)] = &[
        (
            "reference past the symbol table",
            // symbols [""]; series { labels_refs: [0, 7] }
            &[0x22, 0, 0x2a, 4, 0x0a, 2, 0, 7],
            DecodeError::SymbolOutOfRange {
                index: 7,
                symbols: 1,
                offset: 7,
            },
        ),
        (
            "odd number of references",
            &[0x22, 0, 0x2a, 5, 0x0a, 3, 0, 0, 0],
            DecodeError::OddLabelRefs { count: 3, offset: 4 },
        ),
        (
            "first symbol not empty",
            &[0x22, 1, b'x', 0x2a, 0],
            DecodeError::FirstSymbolNotEmpty { offset: 0, len: 1 },
        ),
        (
            "truncated packed reference",
            &[0x22, 0, 0x2a, 3, 0x0a, 1, 0x80],
            DecodeError::Truncated {
                message: TIME_SERIES,
                field: 1,
                what: "packed label reference",
                offset: 6,
                needed: 2,
                available: 1,
            },
        ),
        (
            "overlong packed reference",
            // symbols [""]; series { labels_refs: [0, <11-byte varint>] }
            &[
                0x22, 0, 0x2a, 14, 0x0a, 12, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
            ],
            DecodeError::VarintOverflow {
                message: TIME_SERIES,
                what: "packed label reference",
                offset: 7,
            },
        ),
        (
            "truncated series",
            &[0x22, 0, 0x2a, 9, 0x0a],
            DecodeError::LengthOverflow {
                message: REQUEST,
                field: 5,
                offset: 3,
                len: 9,
                available: 1,
            },
        ),
        (
            "symbol not utf-8",
            &[0x22, 0, 0x22, 1, 0xff],
            DecodeError::InvalidUtf8 {
                field: "io.prometheus.write.v2.Request.symbols",
                start: 4,
                offset: 4,
            },
        ),
        (
            "a remote write 1.0 body",
            // WriteRequest{timeseries{labels{name:"a"}}}
            &[0x0a, 5, 0x0a, 3, 0x0a, 1, b'a'],
            DecodeError::ReservedV2Field { field: 1, offset: 0 },
        ),
        (
            "sample value as varint",
            &[0x2a, 4, 0x12, 2, 0x08, 1],
            DecodeError::WrongWireType {
                what: "io.prometheus.write.v2.Sample.value",
                offset: 4,
                found: 0,
                expected: 1,
            },
        ),
    ];
    for (name, body, want) in cases {
        assert_eq!(decode_write_request_v2(&arena, body).unwrap_err(), *want, "case {name}");
    }
}

#[test]
fn a_request_of_empty_series_is_refused_before_allocating() {
    // 100,000 empty series: 2 bytes each on the wire, 56 decoded.
    let body: Vec<u8> = std::iter::repeat_n([0x2a, 0], 100_000).flatten().collect();
    let err = measure_write_request_v2(&body).unwrap_err();
    assert!(matches!(err, DecodeError::Degenerate { series: 100_000, .. }), "{err}");
}

#[test]
fn one_long_symbol_referenced_often_is_reported_in_the_expanded_size() {
    let long = "x".repeat(10_000);
    let series: Vec<_> = (0..100)
        .map(|_| (vec![("__name__".to_owned(), long.clone())], vec![(1, 1.0)]))
        .collect();
    let body = v2_request(&series).encode_to_vec();
    let arena = Bump::new();
    let got = decode_write_request_v2(&arena, &body).unwrap();
    assert!(body.len() < 12_000, "{}", body.len());
    assert!(got.expanded_bytes > 100 * 10_000, "{}", got.expanded_bytes);
}

#[test]
fn a_created_timestamp_comes_from_the_series_or_else_its_first_samples_start() {
    let sample = |timestamp, start_timestamp| write_v2::Sample {
        value: 1.0,
        timestamp,
        start_timestamp,
    };
    let mut req = v2_request(&[
        (vec![("__name__".into(), "rc4".into())], vec![]),
        (vec![("__name__".into(), "both".into())], vec![]),
        (vec![("__name__".into(), "none".into())], vec![(5, 1.0)]),
    ]);
    // rc.4: the start rides on each sample; a reset inside the request (a later, different start) is not kept.
    req.timeseries[0].samples = vec![sample(2000, 1500), sample(3000, 2500)];
    // rc.3's series field wins over a sample's.
    req.timeseries[1].samples = vec![sample(2000, 1500)];
    req.timeseries[1].created_timestamp = 1200;
    let body = req.encode_to_vec();
    let arena = Bump::new();
    let got = decode_write_request_v2(&arena, &body).unwrap();
    let created: Vec<i64> = got.timeseries.iter().map(|t| t.created).collect();
    assert_eq!(created, [1500, 1200, 0]);
    assert_eq!(
        got.timeseries[0].samples,
        &[Sample { t: 2000, v: 1.0 }, Sample { t: 3000, v: 1.0 }]
    );

    // A start timestamp of the wrong wire type is named: a series {labels_refs [1, 2], Sample{3: ""}}.
    let mut body = write_v2::Request {
        symbols: vec![String::new(), "__name__".into(), "x".into()],
        timeseries: vec![],
    }
    .encode_to_vec();
    body.extend([0x2a, 8, 0x0a, 2, 1, 2, 0x12, 2, 0x1a, 0x00]);
    let err = decode_write_request_v2(&arena, &body).unwrap_err();
    assert!(
        err.to_string()
            .contains("io.prometheus.write.v2.Sample.start_timestamp"),
        "{err}"
    );
}

proptest! {
    /// Start timestamps on any samples and a created timestamp on any series change no sample, and the
    /// series' `created` is its own created timestamp, else its first sample's start.
    #[test]
    fn created_timestamps_decode_and_change_no_sample(
        series in series_strategy(),
        created in prop::collection::vec(prop_oneof![Just(0i64), any::<i64>()], 8),
        starts in prop::collection::vec(prop_oneof![Just(0i64), any::<i64>()], 32),
    ) {
        let plain = v2_request(&series);
        let mut req = plain.clone();
        let mut starts = starts.into_iter().cycle();
        for (ts, &c) in req.timeseries.iter_mut().zip(&created) {
            ts.created_timestamp = c;
            ts.samples.iter_mut().for_each(|s| s.start_timestamp = starts.next().unwrap_or(0));
        }
        let (plain, req_bytes) = (plain.encode_to_vec(), req.encode_to_vec());
        let (a, b) = (Bump::new(), Bump::new());
        let want = decode_write_request_v2(&a, &plain).unwrap();
        let got = decode_write_request_v2(&b, &req_bytes).unwrap();
        prop_assert_eq!(got.timeseries.len(), want.timeseries.len());
        for ((g, w), ts) in got.timeseries.iter().zip(want.timeseries).zip(&req.timeseries) {
            prop_assert_eq!(g.labels, w.labels);
            prop_assert_eq!(g.samples.len(), w.samples.len());
            for (gs, ws) in g.samples.iter().zip(w.samples) {
                prop_assert!(gs.bit_eq(ws), "{:?} != {:?}", gs, ws);
            }
            let first_start = ts.samples.first().map_or(0, |s| s.start_timestamp);
            let expected = if ts.created_timestamp != 0 { ts.created_timestamp } else { first_start };
            prop_assert_eq!(g.created, expected);
        }
    }
}
