//! Wire matchers to model matchers.

use crate::error::IngesterError;
use heddle_model::{MatchType, Matcher};
use heddle_proto::prometheus::LabelMatcher;
use heddle_proto::prometheus::label_matcher::Type;

pub(crate) fn matchers(wire: &[LabelMatcher]) -> Result<Vec<Matcher>, IngesterError> {
    wire.iter()
        .map(|m| {
            let kind = match Type::try_from(m.r#type) {
                Ok(Type::Eq) => MatchType::Equal,
                Ok(Type::Neq) => MatchType::NotEqual,
                Ok(Type::Re) => MatchType::RegexMatch,
                Ok(Type::Nre) => MatchType::RegexNoMatch,
                Err(_) => return Err(IngesterError::MatcherType(m.r#type)),
            };
            Ok(Matcher::new(kind, m.name.clone(), m.value.clone())?)
        })
        .collect()
}
