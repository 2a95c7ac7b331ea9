//! Mapping between wire types (`heddle_proto::prometheus`) and the model (`heddle_model`) at the edge.

use crate::error::QuerierError;
use heddle_model::{Labels, MatchType, Matcher};
use heddle_proto::prometheus::{Label, LabelMatcher, label_matcher::Type};

/// A remote-read matcher as a model matcher; regexes are compiled (and checked) here.
pub(crate) fn matcher_from_proto(m: &LabelMatcher) -> Result<Matcher, QuerierError> {
    let kind = match Type::try_from(m.r#type) {
        Ok(Type::Eq) => MatchType::Equal,
        Ok(Type::Neq) => MatchType::NotEqual,
        Ok(Type::Re) => MatchType::RegexMatch,
        Ok(Type::Nre) => MatchType::RegexNoMatch,
        Err(_) => {
            return Err(QuerierError::BadData(format!(
                "unknown label matcher type {} for label {:?}; expected 0 (EQ), 1 (NEQ), 2 (RE) or 3 (NRE)",
                m.r#type, m.name
            )));
        }
    };
    Matcher::new(kind, m.name.as_str(), m.value.as_str()).map_err(|e| QuerierError::BadData(e.to_string()))
}

/// A model matcher as sent to the ingesters.
pub(crate) fn matcher_to_proto(m: &Matcher) -> LabelMatcher {
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
pub(crate) fn labels_to_proto(labels: &Labels) -> Vec<Label> {
    labels
        .iter()
        .map(|l| Label {
            name: l.name.to_owned(),
            value: l.value.to_owned(),
        })
        .collect()
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
        let bad_regex = LabelMatcher {
            r#type: Type::Re as i32,
            name: "job".into(),
            value: "(".into(),
        };
        let err = matcher_from_proto(&bad_regex).unwrap_err();
        assert!(matches!(err, QuerierError::BadData(_)));
        assert!(
            err.to_string()
                .contains(r#"invalid regular expression "(" for label "job""#),
            "{err}"
        );
        let bad_type = LabelMatcher {
            r#type: 9,
            name: "job".into(),
            value: "x".into(),
        };
        assert!(
            matcher_from_proto(&bad_type)
                .unwrap_err()
                .to_string()
                .contains("unknown label matcher type 9")
        );
    }
}
