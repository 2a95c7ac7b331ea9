//! Wire matchers to model matchers.

use crate::error::IngesterError;
use heddle_model::Matcher;
use heddle_proto::prometheus::LabelMatcher;

pub(crate) fn matchers(wire: &[LabelMatcher]) -> Result<Vec<Matcher>, IngesterError> {
    Ok(heddle_proto::matchers_from_proto(wire)?)
}
