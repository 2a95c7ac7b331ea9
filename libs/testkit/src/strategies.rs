//! Proptest strategies for label sets and samples.

use heddle_model::{METRIC_NAME, Sample};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

/// A valid (legacy charset) label name that is not reserved (`__` prefix).
pub fn label_name() -> impl Strategy<Value = String> {
    "[a-zA-Z][a-zA-Z0-9_]{0,15}"
}

/// A valid metric name (may contain `:`).
pub fn metric_name() -> impl Strategy<Value = String> {
    "[a-zA-Z_:][a-zA-Z0-9_:]{0,30}"
}

/// A non-empty label value of any Unicode text, including quotes, spaces and multi-byte characters.
pub fn label_value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9_.:/-]{1,20}",
        1 => "\\PC{1,12}",
        1 => Just("with \"quotes\" and \\ slash".to_owned()),
    ]
}

/// A valid label set: `__name__` plus up to `max_extra` other labels, sorted by name, unique names, non-empty
/// values, as `(name, value)` pairs.
pub fn label_set(max_extra: usize) -> impl Strategy<Value = Vec<(String, String)>> {
    (metric_name(), btree_map(label_name(), label_value(), 0..=max_extra)).prop_map(|(name, rest)| {
        let mut out = vec![(METRIC_NAME.to_owned(), name)];
        out.extend(rest);
        out.sort();
        out
    })
}

/// Up to `max_len` samples with strictly increasing timestamps from `start` and arbitrary finite values.
pub fn samples(start: i64, max_len: usize) -> impl Strategy<Value = Vec<Sample>> {
    vec(
        (1i64..60_000, any::<f64>().prop_filter("finite", |v| v.is_finite())),
        0..=max_len,
    )
    .prop_map(move |steps| {
        let mut t = start;
        steps
            .into_iter()
            .map(|(dt, v)| {
                t += dt;
                Sample::new(t, v)
            })
            .collect()
    })
}

/// Ways a label set can be invalid, with the rule each one breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelDefect {
    Unsorted,
    DuplicateName,
    MissingMetricName,
    EmptyName,
    InvalidName,
}

/// A label set with exactly one defect, and that defect.
pub fn invalid_label_set() -> impl Strategy<Value = (Vec<(String, String)>, LabelDefect)> {
    let defect = prop_oneof![
        Just(LabelDefect::Unsorted),
        Just(LabelDefect::DuplicateName),
        Just(LabelDefect::MissingMetricName),
        Just(LabelDefect::EmptyName),
        Just(LabelDefect::InvalidName),
    ];
    (label_set(4), defect, label_value()).prop_map(|(mut labels, defect, value)| {
        match defect {
            LabelDefect::Unsorted => {
                // `zzz...` sorts after every generated name, so putting it first breaks the order.
                labels.insert(0, ("zzzz_last".to_owned(), value));
            }
            LabelDefect::DuplicateName => {
                let dup = labels[labels.len() - 1].clone();
                labels.push((dup.0, value));
            }
            LabelDefect::MissingMetricName => {
                labels.retain(|(n, _)| n != METRIC_NAME);
                labels.push(("job".to_owned(), value));
                labels.sort();
                labels.dedup_by(|a, b| a.0 == b.0);
            }
            LabelDefect::EmptyName => {
                labels.insert(0, (String::new(), value));
            }
            LabelDefect::InvalidName => {
                labels.push(("0-bad name".to_owned(), value));
                labels.sort();
            }
        }
        (labels, defect)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_model::{Labels, LabelsError, is_valid_label_name};

    proptest! {
        #[test]
        fn label_sets_are_valid(labels in label_set(8)) {
            let built = Labels::from_sorted(labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            prop_assert!(built.is_ok(), "{:?}", labels);
            prop_assert!(labels.iter().all(|(n, _)| is_valid_label_name(n)));
            prop_assert!(labels.iter().any(|(n, _)| n == METRIC_NAME));
        }

        #[test]
        fn defects_are_real((labels, defect) in invalid_label_set()) {
            let built = Labels::from_sorted(labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            match defect {
                LabelDefect::Unsorted => prop_assert!(matches!(built, Err(LabelsError::Unsorted { .. })), "{:?}", labels),
                LabelDefect::DuplicateName => prop_assert!(matches!(built, Err(LabelsError::Duplicate(_))), "{:?}", labels),
                LabelDefect::EmptyName => prop_assert!(matches!(built, Err(LabelsError::EmptyName)), "{:?}", labels),
                LabelDefect::MissingMetricName => prop_assert!(labels.iter().all(|(n, _)| n != METRIC_NAME)),
                LabelDefect::InvalidName => prop_assert!(labels.iter().any(|(n, _)| !is_valid_label_name(n))),
            }
        }

        #[test]
        fn sample_timestamps_increase(s in samples(1000, 50)) {
            prop_assert!(s.windows(2).all(|w| w[0].t < w[1].t));
        }
    }
}
