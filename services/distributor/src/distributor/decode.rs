//! Stage 1, decode: the snappy body is decompressed into the request arena and decoded there into borrowed
//! series views (DESIGN.md §2 step 2), the same views for remote write 1.0 and 2.0.
//!
//! The declared decompressed length is checked against `distributor.max_decompressed_size` before anything is
//! allocated. Both allocations of this stage are reserved in the in-flight budget before they are made: the
//! decompressed body (its declared length) and the decoded view (its exact size, counted by the measure pass,
//! which also refuses a degenerate request whose view would be many times its size). So is a bound of what
//! validation takes on the heap to decode the request's native histograms. Everything returned borrows from
//! the arena, so nothing of the request can outlive it.

use crate::error::PushError;
use bumpalo::Bump;
use heddle_model::{HistogramSample, MetadataRef};
use heddle_proto::{
    DecodeError, SnappyError, TimeSeriesRef, decode_measured, decode_measured_v2, measure_write_request,
    measure_write_request_v2, snappy_decompress_into, snappy_decompressed_len,
};
use heddle_server::Reservation;

/// How a request body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Snappy block format, as remote write sends it.
    Snappy,
    /// Plain protobuf, as the distributor's own translations (OTLP) produce it: copied into the arena as the
    /// decompressed copy of a snappy body is, so the decoded view borrows from the arena alone.
    Plain,
}

/// Which remote write message a body holds; the HTTP layer tells them apart by content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RemoteWriteVersion {
    /// Remote write 1.0: a `prometheus.WriteRequest`.
    #[default]
    V1,
    /// Remote write 2.0: an `io.prometheus.write.v2.Request`.
    V2,
}

impl RemoteWriteVersion {
    /// The protobuf message of this version, for messages.
    pub fn message(self) -> &'static str {
        match self {
            RemoteWriteVersion::V1 => "prometheus.WriteRequest",
            RemoteWriteVersion::V2 => "io.prometheus.write.v2.Request",
        }
    }
}

/// A decoded request: its series (with their exemplars) and its metric metadata, borrowing the arena.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Decoded<'a> {
    pub(crate) series: &'a [TimeSeriesRef<'a>],
    pub(crate) metadata: &'a [MetadataRef<'a>],
}

/// The series and metadata of the request of `version` in `body` (framed as `framing`), decoded into
/// `arena`, with what that allocates added to `reservation` first.
///
/// A 2.0 request's series are re-encoded (or copied into a batch) before they are forwarded, and their label
/// text, resolved from the symbol table, can be many times the body. So the bound of that size is held
/// against `max_decompressed` (what a 1.0 request of the same series could be) and reserved here, before
/// any of it is written.
pub(crate) fn decode<'a>(
    arena: &'a Bump,
    body: &[u8],
    framing: Framing,
    version: RemoteWriteVersion,
    max_decompressed: usize,
    reservation: &mut Reservation,
) -> Result<Decoded<'a>, PushError> {
    let snappy = |e| match e {
        SnappyError::TooLarge { declared, limit } => PushError::DecompressedTooLarge { declared, limit },
        SnappyError::Corrupt(detail) => PushError::CorruptSnappy { detail },
    };
    let raw = match framing {
        Framing::Snappy => {
            reservation.grow(snappy_decompressed_len(body, max_decompressed).map_err(snappy)?)?;
            snappy_decompress_into(arena, body, max_decompressed).map_err(snappy)?
        }
        Framing::Plain => {
            if body.len() > max_decompressed {
                return Err(PushError::DecompressedTooLarge {
                    declared: body.len(),
                    limit: max_decompressed,
                });
            }
            reservation.grow(body.len())?;
            &*arena.alloc_slice_copy(body)
        }
    };
    let message = version.message();
    let protobuf = |e: DecodeError| match e {
        DecodeError::Degenerate { .. } => PushError::DegenerateRequest {
            message,
            detail: e.to_string(),
        },
        _ => PushError::InvalidProtobuf {
            message,
            detail: e.to_string(),
        },
    };
    match version {
        RemoteWriteVersion::V1 => {
            let measured = measure_write_request(raw).map_err(protobuf)?;
            reservation.grow(measured.shape().decoded_bytes())?;
            let request = decode_measured(arena, measured).map_err(protobuf)?;
            reservation.grow(histogram_bytes(request.timeseries))?;
            Ok(Decoded {
                series: request.timeseries,
                metadata: request.metadata,
            })
        }
        RemoteWriteVersion::V2 => {
            let measured = measure_write_request_v2(raw).map_err(protobuf)?;
            reservation.grow(measured.shape().decoded_bytes())?;
            let request = decode_measured_v2(arena, measured).map_err(protobuf)?;
            if request.expanded_bytes > max_decompressed {
                return Err(PushError::ExpandedTooLarge {
                    expanded: request.expanded_bytes,
                    limit: max_decompressed,
                });
            }
            reservation.grow(request.expanded_bytes)?;
            reservation.grow(histogram_bytes(request.timeseries))?;
            Ok(Decoded {
                series: request.timeseries,
                metadata: request.metadata,
            })
        }
    }
}

/// The most heap bytes the native histograms of `series` take once decoded ([`heddle_proto::HistogramRef`]).
fn histogram_bytes(series: &[TimeSeriesRef<'_>]) -> usize {
    series
        .iter()
        .flat_map(|ts| ts.histograms)
        .map(|h| std::mem::size_of::<HistogramSample>() + h.decoded_heap_bytes())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{body, declared_length, snappy, up};
    use heddle_server::InflightBytes;
    use prometheus_client::metrics::{counter::Counter, gauge::Gauge};
    use std::sync::Arc;

    fn budget(limit: usize) -> Arc<InflightBytes> {
        InflightBytes::new(limit, Gauge::default(), Counter::default())
    }

    fn unlimited() -> Reservation {
        budget(0).reserve()
    }

    #[test]
    fn decodes_series_with_their_raw_bytes() {
        let arena = Bump::new();
        let sent = vec![up("a"), up("b")];
        let series = decode(
            &arena,
            &body(sent.clone()),
            Framing::Snappy,
            RemoteWriteVersion::V1,
            1 << 20,
            &mut unlimited(),
        )
        .unwrap()
        .series;
        assert_eq!(series.len(), 2);
        for (got, want) in series.iter().zip(&sent) {
            assert_eq!(got.labels[0].value, want.labels[0].value);
            assert_eq!(got.samples.len(), 1);
            assert_eq!(
                got.raw,
                prost::Message::encode_to_vec(want).as_slice(),
                "raw bytes kept"
            );
        }
    }

    #[test]
    fn decodes_v2_series_into_the_same_views_without_raw_bytes() {
        let arena = Bump::new();
        let sent = vec![up("a"), up("b")];
        let input = crate::testutil::v2_body(&sent, &[]);
        let series = decode(
            &arena,
            &input,
            Framing::Snappy,
            RemoteWriteVersion::V2,
            1 << 20,
            &mut unlimited(),
        )
        .unwrap()
        .series;
        assert_eq!(series.len(), 2);
        for (got, want) in series.iter().zip(&sent) {
            let labels: Vec<(&str, &str)> = got.labels.iter().map(|l| (l.name, l.value)).collect();
            let want_labels: Vec<(&str, &str)> = want
                .labels
                .iter()
                .map(|l| (l.name.as_str(), l.value.as_str()))
                .collect();
            assert_eq!(labels, want_labels);
            assert_eq!(got.samples.len(), 1);
            assert!(got.raw.is_empty(), "a 2.0 series has no 1.0 bytes");
        }
    }

    /// One long label value named by every series: a small body whose series, resolved, would be far larger
    /// than `distributor.max_decompressed_size` allows a body to be. Refused before anything is re-encoded,
    /// and the bound is reserved when it fits.
    #[test]
    fn a_v2_request_expanding_past_the_decompressed_limit_is_refused() {
        let long = "x".repeat(4000);
        let sent: Vec<_> = (0..50)
            .map(|i| {
                crate::testutil::series(
                    &[("__name__", "up"), ("i", &i.to_string()), ("long", &long)],
                    &[(1, 1.0)],
                )
            })
            .collect();
        let input = crate::testutil::v2_body(&sent, &[]);
        let declared = heddle_proto::snappy_decompressed_len(&input, 1 << 20).unwrap();
        assert!(declared < 8 << 10, "{declared}");
        let arena = Bump::new();
        let err = decode(
            &arena,
            &input,
            Framing::Snappy,
            RemoteWriteVersion::V2,
            64 << 10,
            &mut unlimited(),
        )
        .unwrap_err();
        assert_eq!(err.id(), "err-heddle-decompressed-too-large", "{err}");
        assert!(err.to_string().contains("symbol table"), "{err}");

        let b = budget(0);
        let mut r = b.reserve();
        let arena = Bump::new();
        decode(&arena, &input, Framing::Snappy, RemoteWriteVersion::V2, 1 << 20, &mut r).unwrap();
        assert!(r.held() > 50 * 4000, "the expanded size is reserved: {}", r.held());
    }

    #[test]
    fn refusals_table() {
        let mut truncated = body(vec![up("up")]);
        truncated.truncate(truncated.len() - 5);
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "declared size over limit",
                declared_length(1 << 30),
                "err-heddle-decompressed-too-large",
            ),
            ("corrupt snappy", truncated, "err-heddle-corrupt-snappy"),
            (
                "invalid protobuf",
                snappy(&[0x0a, 0x05, 0x01]),
                "err-heddle-invalid-protobuf",
            ),
            (
                "200,000 empty labels",
                snappy(&degenerate(200_000)),
                "err-heddle-degenerate-write-request",
            ),
        ];
        for (name, input, id) in cases {
            let arena = Bump::new();
            let err = decode(
                &arena,
                &input,
                Framing::Snappy,
                RemoteWriteVersion::V1,
                1 << 20,
                &mut unlimited(),
            )
            .expect_err(name);
            assert_eq!(err.id(), id, "case {name}: {err}");
        }
    }

    /// One series of `n` empty labels: 2 bytes each on the wire, 32 decoded.
    fn degenerate(n: usize) -> Vec<u8> {
        let mut series = Vec::with_capacity(2 * n);
        for _ in 0..n {
            series.extend([0x0a, 0]);
        }
        let mut out = vec![0x0a];
        let mut len = series.len();
        while len >= 0x80 {
            out.push((len as u8) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend(series);
        out
    }

    /// The decoded view, then what its native histograms take on the heap once validation decodes them, are
    /// reserved: exactly the view's size and what the histograms decode to, for 1.0 and 2.0 alike.
    #[test]
    fn native_histograms_are_reserved_before_they_are_decoded() {
        use heddle_proto::prometheus::{BucketSpan, Histogram};
        let h = Histogram {
            positive_spans: vec![BucketSpan { offset: 0, length: 3 }],
            positive_deltas: vec![1, 1, 1],
            timestamp: 5,
            ..Histogram::default()
        };
        let mut series = up("a");
        series.histograms = vec![h.clone(), h.clone()];
        for (version, input) in [
            (RemoteWriteVersion::V1, body(vec![series])),
            (
                RemoteWriteVersion::V2,
                crate::testutil::v2_body(
                    &[up("a")],
                    &[(
                        0,
                        vec![prost::Message::decode(prost::Message::encode_to_vec(&h).as_slice()).unwrap(); 2],
                    )],
                ),
            ),
        ] {
            let declared = heddle_proto::snappy_decompressed_len(&input, 1 << 20).unwrap();
            let mut r = unlimited();
            let arena = Bump::new();
            let decoded = decode(&arena, &input, Framing::Snappy, version, 1 << 20, &mut r).unwrap();
            assert_eq!(decoded.series[0].histograms.len(), 2, "{version:?}");
            // Each decodes into one span and three buckets: 8 bytes each, at exactly that capacity.
            let histograms = 2 * (std::mem::size_of::<HistogramSample>() + 8 * (1 + 3));
            assert!(r.held() > declared + histograms, "{version:?}: {} held", r.held());
            let without = r.held() - histograms;
            let arena = Bump::new();
            let mut view = unlimited();
            let raw = heddle_proto::snappy_decompress_into(&arena, &input, 1 << 20).unwrap();
            let view_bytes = match version {
                RemoteWriteVersion::V1 => heddle_proto::measure_write_request(raw)
                    .unwrap()
                    .shape()
                    .decoded_bytes(),
                RemoteWriteVersion::V2 => {
                    let measured = heddle_proto::measure_write_request_v2(raw).unwrap();
                    let shape = *measured.shape();
                    view.grow(
                        heddle_proto::decode_measured_v2(&arena, measured)
                            .unwrap()
                            .expanded_bytes,
                    )
                    .unwrap();
                    shape.decoded_bytes()
                }
            };
            assert_eq!(without, declared + view_bytes + view.held(), "{version:?}");
        }
    }

    #[test]
    fn every_allocation_is_reserved_first_and_refused_past_the_limit() {
        let input = body(vec![up("a"), up("b")]);
        let declared = heddle_proto::snappy_decompressed_len(&input, 1 << 20).unwrap();

        // Room for the body and the decompressed copy but not the decoded view: refused after decompressing,
        // before decoding.
        let b = budget(input.len() + declared + 1);
        let mut r = b.reserve();
        r.grow(input.len()).unwrap();
        let arena = Bump::new();
        let err = decode(&arena, &input, Framing::Snappy, RemoteWriteVersion::V1, 1 << 20, &mut r).unwrap_err();
        assert_eq!(
            err.id(),
            "err-heddle-distributor-max-inflight-push-requests-bytes",
            "{err}"
        );
        assert_eq!(err.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            err.to_string()
                .contains("--distributor.instance-limits.max-inflight-push-requests-bytes"),
            "{err}"
        );
        assert_eq!(r.held(), input.len() + declared, "the refused step holds nothing");

        // No room for the decompressed copy: refused before anything is allocated.
        let b = budget(input.len() + declared - 1);
        let mut r = b.reserve();
        r.grow(input.len()).unwrap();
        let arena = Bump::new();
        decode(&arena, &input, Framing::Snappy, RemoteWriteVersion::V1, 1 << 20, &mut r).unwrap_err();
        assert_eq!(arena.allocated_bytes(), 0, "nothing allocated for a refused request");

        // Enough room: decoded, and everything is given back with the reservation.
        let b = budget(1 << 20);
        let mut r = b.reserve();
        r.grow(input.len()).unwrap();
        let arena = Bump::new();
        assert_eq!(
            decode(&arena, &input, Framing::Snappy, RemoteWriteVersion::V1, 1 << 20, &mut r)
                .unwrap()
                .series
                .len(),
            2
        );
        assert!(b.in_flight() > input.len() + declared);
        drop(r);
        assert_eq!(b.in_flight(), 0);
    }

    #[test]
    fn a_degenerate_request_is_refused_before_its_view_is_allocated() {
        let input = snappy(&degenerate(1_000_000));
        let mut arena = Bump::new();
        let b = budget(0);
        let mut r = b.reserve();
        let err = decode(&arena, &input, Framing::Snappy, RemoteWriteVersion::V1, 8 << 20, &mut r).unwrap_err();
        assert_eq!(err.id(), "err-heddle-degenerate-write-request", "{err}");
        assert!(err.to_string().contains("1000000 labels"), "{err}");
        let used: usize = arena.iter_allocated_chunks().map(|c| c.len()).sum();
        assert_eq!(used, 2_000_004, "only the decompressed body was allocated");
        assert_eq!(r.held(), 2_000_004, "and only it was reserved");
    }

    #[test]
    fn the_size_check_comes_before_any_allocation() {
        let arena = Bump::new();
        let before = arena.allocated_bytes();
        assert!(
            decode(
                &arena,
                &declared_length(1 << 30),
                Framing::Snappy,
                RemoteWriteVersion::V1,
                4096,
                &mut unlimited()
            )
            .is_err()
        );
        assert_eq!(arena.allocated_bytes(), before, "nothing allocated for a refused body");
    }
}
