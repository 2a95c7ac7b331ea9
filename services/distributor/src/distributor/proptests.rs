//! Property: whatever mix of raw and rewritten series a request holds, each ingester receives exactly the
//! series it owns, in request order, with empty-valued labels, future samples and histograms, and exemplars
//! gone and everything else bit-identical.

use super::*;
use crate::distributor::tests::ParityRing;
use crate::testutil::*;
use heddle_proto::prometheus::{Exemplar, Histogram, Label, Sample, TimeSeries};
use http::StatusCode;
use proptest::prelude::*;

const GRACE_MS: i64 = 600_000;

/// A valid series: `__name__` plus sorted, unique label names, some with empty values; samples on both sides
/// of the future limit; sometimes exemplars or histograms.
fn valid_series() -> impl Strategy<Value = TimeSeries> {
    let label = (
        "[a-z]{1,3}",
        prop_oneof![3 => "[a-z0-9]{1,4}", 1 => Just(String::new())],
    );
    let sample = (
        prop_oneof![4 => -1000i64..1000, 1 => GRACE_MS..GRACE_MS + 1000],
        any::<u64>(),
    );
    (
        "[a-z_][a-z0-9_:]{0,5}",
        prop::collection::btree_map(label.0, label.1, 0..5),
        prop::collection::vec(sample.clone(), 0..5),
        0..2usize,
        prop::collection::vec(sample.prop_map(|(dt, _)| dt), 0..3),
    )
        .prop_map(|(name, labels, samples, exemplars, histograms)| {
            let mut all = vec![Label {
                name: "__name__".into(),
                value: name,
            }];
            all.extend(labels.into_iter().map(|(name, value)| Label { name, value }));
            TimeSeries {
                labels: all,
                samples: samples
                    .into_iter()
                    .map(|(dt, bits)| Sample {
                        value: f64::from_bits(bits),
                        timestamp: NOW_MS + dt,
                    })
                    .collect(),
                exemplars: vec![Exemplar::default(); exemplars],
                histograms: histograms
                    .into_iter()
                    .map(|dt| Histogram {
                        timestamp: NOW_MS + dt,
                        ..Histogram::default()
                    })
                    .collect(),
            }
        })
}

/// What an ingester should receive for `s`, or `None` when nothing of it is forwarded.
fn expected(s: &TimeSeries) -> Option<TimeSeries> {
    let samples: Vec<Sample> = s
        .samples
        .iter()
        .filter(|x| x.timestamp <= NOW_MS + GRACE_MS)
        .cloned()
        .collect();
    let histograms: Vec<Histogram> = s
        .histograms
        .iter()
        .filter(|x| x.timestamp <= NOW_MS + GRACE_MS)
        .cloned()
        .collect();
    if samples.is_empty() && histograms.is_empty() {
        return None;
    }
    Some(TimeSeries {
        labels: s.labels.iter().filter(|l| !l.value.is_empty()).cloned().collect(),
        samples,
        exemplars: Vec::new(),
        histograms,
    })
}

fn token(s: &TimeSeries) -> u32 {
    heddle_model::series_token("team-a", s.labels.iter().map(|l| (l.name.as_str(), l.value.as_str())))
}

/// Bit-exact comparison (NaN values included).
fn same(a: &[TimeSeries], b: &[TimeSeries]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.labels == y.labels
                && x.samples.len() == y.samples.len()
                && x.samples
                    .iter()
                    .zip(&y.samples)
                    .all(|(p, q)| p.timestamp == q.timestamp && p.value.to_bits() == q.value.to_bits())
                && x.exemplars.is_empty()
                && x.histograms == y.histograms
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn ingesters_receive_exactly_their_valid_parts(sent in prop::collection::vec(valid_series(), 0..20)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let ring = Arc::new(ParityRing {
            even: fake(Behavior::Accept),
            odd: fake(Behavior::Accept),
        });
        let mut registry = Registry::default();
        let d = Distributor::new(DistributorConfig::default(), Limits::default(), ring.clone(), &mut registry)
            .with_clock(manual_clock());
        let outcome = rt
            .block_on(d.push(&tenant(), &body(sent.clone())))
            .expect("valid request");

        let want: Vec<TimeSeries> = sent.iter().filter_map(expected).collect();
        let ingested: u64 = want.iter().map(|s| s.samples.len() as u64).sum();
        prop_assert_eq!(outcome.samples_ingested, ingested);
        let histograms: u64 = want.iter().map(|s| s.histograms.len() as u64).sum();
        prop_assert_eq!(outcome.histograms_ingested, histograms);
        let any_future = sent.iter().any(|s| {
            s.samples.iter().any(|x| x.timestamp > NOW_MS + GRACE_MS)
                || s.histograms.iter().any(|x| x.timestamp > NOW_MS + GRACE_MS)
        });
        prop_assert_eq!(outcome.status() == StatusCode::OK, !any_future, "{}", outcome.body());

        for (parity, ingester) in [(0, &ring.even), (1, &ring.odd)] {
            let mine: Vec<TimeSeries> = want.iter().filter(|s| token(s) % 2 == parity).cloned().collect();
            let got = ingester.pushed_series();
            prop_assert!(same(&got, &mine), "parity {}: got {:?}, want {:?}", parity, got, mine);
        }
    }
}
