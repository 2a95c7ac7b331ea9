//! Mapping between wire types and the model, used at every edge that speaks protobuf.

use crate::prometheus::{BucketSpan, Histogram, Label, LabelMatcher, label_matcher::Type};
use heddle_model::{CounterResetHint, HistogramSample, HistogramValue, Labels, MatchType, Matcher, MatcherError, Span};

/// A wire matcher that cannot become a model matcher.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatcherConvertError {
    #[error("unknown label matcher type {kind} for label {name:?}; expected 0 (EQ), 1 (NEQ), 2 (RE) or 3 (NRE)")]
    UnknownType { kind: i32, name: String },
    #[error(transparent)]
    Invalid(#[from] MatcherError),
}

/// A wire matcher as a model matcher; regexes are compiled (and checked) here.
pub fn matcher_from_proto(m: &LabelMatcher) -> Result<Matcher, MatcherConvertError> {
    let kind = match Type::try_from(m.r#type) {
        Ok(Type::Eq) => MatchType::Equal,
        Ok(Type::Neq) => MatchType::NotEqual,
        Ok(Type::Re) => MatchType::RegexMatch,
        Ok(Type::Nre) => MatchType::RegexNoMatch,
        Err(_) => {
            return Err(MatcherConvertError::UnknownType {
                kind: m.r#type,
                name: m.name.clone(),
            });
        }
    };
    Ok(Matcher::new(kind, m.name.as_str(), m.value.as_str())?)
}

/// Every wire matcher of a query as model matchers.
pub fn matchers_from_proto(wire: &[LabelMatcher]) -> Result<Vec<Matcher>, MatcherConvertError> {
    wire.iter().map(matcher_from_proto).collect()
}

/// A model matcher as sent on the wire.
pub fn matcher_to_proto(m: &Matcher) -> LabelMatcher {
    let kind = match m.kind() {
        MatchType::Equal => Type::Eq,
        MatchType::NotEqual => Type::Neq,
        MatchType::RegexMatch => Type::Re,
        MatchType::RegexNoMatch => Type::Nre,
    };
    LabelMatcher {
        r#type: kind as i32,
        name: m.name().to_owned(),
        value: m.value().to_owned(),
    }
}

/// A label set on the wire, in its (sorted) order.
pub fn labels_to_proto(labels: &Labels) -> Vec<Label> {
    labels
        .iter()
        .map(|l| Label {
            name: l.name.to_owned(),
            value: l.value.to_owned(),
        })
        .collect()
}

/// A native histogram sample as remote write 1.0 carries it: integer histograms with `count_int`,
/// `zero_count_int` and delta-encoded buckets, float ones with `count_float`, `zero_count_float` and absolute
/// bucket counts.
pub fn histogram_to_proto(sample: &HistogramSample) -> Histogram {
    use crate::prometheus::histogram::{Count, ResetHint, ZeroCount};
    let spans = |spans: &[Span]| -> Vec<BucketSpan> {
        spans
            .iter()
            .map(|s| BucketSpan {
                offset: s.offset,
                length: s.length,
            })
            .collect()
    };
    let hint = |h: CounterResetHint| {
        match h {
            CounterResetHint::Unknown => ResetHint::Unknown,
            CounterResetHint::CounterReset => ResetHint::Yes,
            CounterResetHint::NotCounterReset => ResetHint::No,
            CounterResetHint::Gauge => ResetHint::Gauge,
        }
        .into()
    };
    match &sample.value {
        HistogramValue::Int(h) => Histogram {
            count: Some(Count::CountInt(h.count)),
            sum: h.sum,
            schema: h.schema,
            zero_threshold: h.zero_threshold,
            zero_count: Some(ZeroCount::ZeroCountInt(h.zero_count)),
            negative_spans: spans(&h.negative_spans),
            negative_deltas: h.negative_buckets.clone(),
            positive_spans: spans(&h.positive_spans),
            positive_deltas: h.positive_buckets.clone(),
            reset_hint: hint(h.counter_reset_hint),
            timestamp: sample.t,
            custom_values: h.custom_values.clone(),
            ..Histogram::default()
        },
        HistogramValue::Float(h) => Histogram {
            count: Some(Count::CountFloat(h.count)),
            sum: h.sum,
            schema: h.schema,
            zero_threshold: h.zero_threshold,
            zero_count: Some(ZeroCount::ZeroCountFloat(h.zero_count)),
            negative_spans: spans(&h.negative_spans),
            negative_counts: h.negative_buckets.clone(),
            positive_spans: spans(&h.positive_spans),
            positive_counts: h.positive_buckets.clone(),
            reset_hint: hint(h.counter_reset_hint),
            timestamp: sample.t,
            custom_values: h.custom_values.clone(),
            ..Histogram::default()
        },
    }
}

/// A series and its chunks (`(min_time, max_time, encoding, bytes)`, oldest first) as `QueryStream` answers
/// carry them. Each chunk says its encoding (XOR, integer or float histogram); peers that predate histogram
/// chunks set XOR on every chunk, so their answers read as they always did.
pub fn chunked_series<'a>(
    labels: &Labels,
    chunks: impl IntoIterator<Item = (i64, i64, crate::prometheus::chunk::Encoding, &'a [u8])>,
) -> crate::prometheus::ChunkedSeries {
    crate::prometheus::ChunkedSeries {
        labels: labels_to_proto(labels),
        chunks: chunks
            .into_iter()
            .map(|(min_time_ms, max_time_ms, encoding, data)| crate::prometheus::Chunk {
                min_time_ms,
                max_time_ms,
                r#type: encoding as i32,
                data: data.to_vec(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matcher_round_trip_and_errors() {
        for (t, kind) in [
            (Type::Eq, MatchType::Equal),
            (Type::Neq, MatchType::NotEqual),
            (Type::Re, MatchType::RegexMatch),
            (Type::Nre, MatchType::RegexNoMatch),
        ] {
            let p = LabelMatcher {
                r#type: t as i32,
                name: "job".into(),
                value: "a.*".into(),
            };
            let m = matcher_from_proto(&p).unwrap();
            assert_eq!(m.kind(), kind, "type {t:?}");
            assert_eq!(matcher_to_proto(&m), p, "type {t:?}");
        }
        let bad = LabelMatcher {
            r#type: Type::Re as i32,
            name: "job".into(),
            value: "(".into(),
        };
        assert!(matches!(matcher_from_proto(&bad), Err(MatcherConvertError::Invalid(_))));
        let unknown = LabelMatcher {
            r#type: 9,
            name: "job".into(),
            value: "x".into(),
        };
        let err = matcher_from_proto(&unknown).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown label matcher type 9 for label \"job\""),
            "{err}"
        );
    }
}
