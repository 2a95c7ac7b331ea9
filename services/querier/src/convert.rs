//! Mapping between wire types (`heddle_proto::prometheus`) and the model (`heddle_model`) at the edge.
//!
//! The conversions live in `heddle_proto`; this maps their errors to the querier's.

use crate::error::QuerierError;
use heddle_model::Matcher;
use heddle_proto::prometheus::LabelMatcher;

pub(crate) use heddle_proto::{labels_to_proto, matcher_to_proto};

/// A remote-read matcher as a model matcher; a bad one is the caller's fault (400).
pub(crate) fn matcher_from_proto(m: &LabelMatcher) -> Result<Matcher, QuerierError> {
    heddle_proto::matcher_from_proto(m).map_err(|e| QuerierError::BadData(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_matchers_are_bad_data() {
        for (name, r#type, value, want) in [
            ("bad regex", 2, "(", r#"invalid regular expression "(" for label "job""#),
            ("unknown type", 9, "x", "unknown label matcher type 9"),
        ] {
            let err = matcher_from_proto(&LabelMatcher {
                r#type,
                name: "job".into(),
                value: value.into(),
            })
            .unwrap_err();
            assert!(matches!(err, QuerierError::BadData(_)), "case {name}");
            assert!(err.to_string().contains(want), "case {name}: {err}");
        }
    }
}
