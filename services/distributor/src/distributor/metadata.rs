//! Stage 3b, metadata: the request's metric metadata entries checked against the tenant's
//! `max_metadata_length` and deduplicated (a remote write 2.0 sender repeats a family's metadata on each of
//! its series).
//!
//! An invalid entry is dropped with a precise message (tenant, family, what is too long, the limit and its
//! flag) and counted in `heddle_distributor_discarded_metadata_total`; the request's series and other entries
//! go on, so a Prometheus whose help text is long loses that entry alone, with a 400 that names it.

use super::validate::Discards;
use crate::error::InvalidEntry;
use crate::outcome::Rejection;
use heddle_limits::Limits;
use heddle_model::{MetadataRef, quoted};
use std::collections::HashSet;

/// Checks one entry in Mimir's order: a family name, then the lengths of name, help and unit.
pub(crate) fn validate_entry(m: &MetadataRef<'_>, limits: &Limits) -> Result<(), InvalidEntry> {
    let limit = limits.max_metadata_length;
    if m.family.is_empty() {
        return Err(InvalidEntry::MetadataMissingName);
    }
    if m.family.len() > limit {
        return Err(InvalidEntry::MetadataNameTooLong {
            len: m.family.len(),
            limit,
        });
    }
    if m.help.len() > limit {
        return Err(InvalidEntry::MetadataHelpTooLong {
            len: m.help.len(),
            limit,
        });
    }
    if m.unit.len() > limit {
        return Err(InvalidEntry::MetadataUnitTooLong {
            len: m.unit.len(),
            limit,
        });
    }
    Ok(())
}

/// The valid, distinct entries of `metadata`, in request order; the invalid ones are reported.
pub(crate) fn validate<'a>(
    limits: &Limits,
    metadata: &[MetadataRef<'a>],
    discards: Discards<'_>,
    rejections: &mut Vec<Rejection>,
) -> Vec<MetadataRef<'a>> {
    let mut seen = HashSet::with_capacity(metadata.len());
    let mut kept = Vec::with_capacity(metadata.len());
    for m in metadata {
        if !seen.insert(*m) {
            continue;
        }
        match validate_entry(m, limits) {
            Ok(()) => kept.push(*m),
            Err(e) => {
                let (tenant, id) = (discards.tenant, e.id());
                discards.metrics.discarded_metadata(tenant.as_str(), id, 1);
                let family = quoted(m.family);
                if let Some(suppressed) = discards.warn.check(tokio::time::Instant::now()) {
                    tracing::warn!(reason = id, %family, suppressed, error = %e, "discarded invalid metadata");
                }
                rejections.push(Rejection {
                    reason: id.to_owned(),
                    message: format!("{id}: {e} (tenant={tenant}, metric={family:?}): {}", e.remedy()),
                });
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_model::MetricType;

    fn entry<'a>(family: &'a str, help: &'a str, unit: &'a str) -> MetadataRef<'a> {
        MetadataRef {
            family,
            kind: MetricType::Counter,
            help,
            unit,
        }
    }

    #[test]
    fn entries_are_checked_in_mimirs_order() {
        let limits = Limits {
            max_metadata_length: 8,
            ..Limits::default()
        };
        let long = "x".repeat(9);
        let cases: &[(&str, MetadataRef<'_>, Option<&str>)] = &[
            ("valid", entry("up", "help", "s"), None),
            ("at the limit", entry("up", &long[..8], ""), None),
            (
                "no family",
                entry("", "h", ""),
                Some("err-heddle-metadata-missing-metric-name"),
            ),
            (
                "long family",
                entry(&long, &long, ""),
                Some("err-heddle-metadata-metric-name-too-long"),
            ),
            (
                "long help",
                entry("up", &long, &long),
                Some("err-heddle-metadata-help-too-long"),
            ),
            (
                "long unit",
                entry("up", "", &long),
                Some("err-heddle-metadata-unit-too-long"),
            ),
        ];
        for (name, m, want) in cases {
            let got = validate_entry(m, &limits).err().map(|e| e.id());
            assert_eq!(got, *want, "case {name}");
        }
    }

    #[test]
    fn invalid_entries_are_reported_with_the_limit_and_duplicates_dropped() {
        let sinks = crate::distributor::tests::StageSinks::new();
        let discards = sinks.discards();
        let limits = Limits {
            max_metadata_length: 4,
            ..Limits::default()
        };
        let mut rejections = Vec::new();
        let sent = [
            entry("up", "h", ""),
            entry("up", "h", ""),
            entry("up", "too long help", ""),
            entry("b", "", ""),
        ];
        let kept = validate(&limits, &sent, discards, &mut rejections);
        assert_eq!(kept, vec![entry("up", "h", ""), entry("b", "", "")]);
        assert_eq!(rejections.len(), 1);
        assert_eq!(
            rejections[0].message,
            "err-heddle-metadata-help-too-long: metadata HELP is 13 bytes long (tenant=team-a, metric=\"up\"): the limit \
             is 4 bytes; the entry is dropped: shorten it or raise `limits.max_metadata_length` \
             (--validation.max-metadata-length)"
        );
    }
}
