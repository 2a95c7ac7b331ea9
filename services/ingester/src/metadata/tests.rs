use super::*;

fn tenant() -> TenantId {
    TenantId::new("t").unwrap()
}

fn m<'a>(family: &'a str, help: &'a str) -> MetadataRef<'a> {
    MetadataRef {
        family,
        kind: MetricType::Counter,
        help,
        unit: "",
    }
}

fn limits(per_user: usize, per_metric: usize) -> EntryLimits {
    EntryLimits {
        max_metadata_per_user: per_user,
        max_metadata_per_metric: per_metric,
        max_exemplars: 0,
    }
}

const ALL: MetadataQuery<'static> = MetadataQuery {
    limit: None,
    limit_per_metric: None,
    metric: None,
};

fn families(store: &TenantMetadata, q: MetadataQuery<'_>) -> Vec<(String, String)> {
    store.query(q).into_iter().map(|m| (m.family, m.help)).collect()
}

#[test]
fn repeated_entries_are_kept_once_and_reads_are_sorted_by_family() {
    let s = TenantMetadata::default();
    let added = s.add(&tenant(), &[m("b", "x"), m("a", "y"), m("b", "x")], limits(0, 0), 1);
    assert_eq!((added.created, added.refused.len()), (2, 0));
    assert_eq!(
        families(&s, ALL),
        vec![("a".into(), "y".into()), ("b".into(), "x".into())]
    );
    assert_eq!(s.len(), 2);
}

#[test]
fn the_per_user_limit_refuses_new_families_only() {
    let s = TenantMetadata::default();
    let added = s.add(
        &tenant(),
        &[m("a", ""), m("b", ""), m("c", ""), m("d", "")],
        limits(2, 0),
        1,
    );
    assert_eq!(added.created, 2);
    assert_eq!(added.refused.len(), 1);
    assert_eq!(added.refused[0].count, 2);
    assert_eq!(added.refused[0].reason, "err-heddle-max-metadata-per-user");
    assert!(
        added.refused[0].message.contains("limit of 2 metric families")
            && added.refused[0].message.contains("metric=\"c\"")
            && added.refused[0]
                .message
                .contains("--ingester.max-global-metadata-per-user"),
        "{}",
        added.refused[0].message
    );
    // A known family still takes a new entry.
    let added = s.add(&tenant(), &[m("a", "new help")], limits(2, 0), 2);
    assert_eq!((added.created, added.refused.len()), (1, 0));
}

#[test]
fn the_per_metric_limit_refuses_more_entries_of_one_family() {
    let s = TenantMetadata::default();
    let added = s.add(&tenant(), &[m("a", "1"), m("a", "2"), m("a", "3")], limits(0, 2), 1);
    assert_eq!(added.created, 2);
    assert_eq!(added.refused[0].reason, "err-heddle-max-metadata-per-metric");
    assert_eq!(
        families(&s, ALL),
        vec![("a".into(), "1".into()), ("a".into(), "2".into())]
    );
}

#[test]
fn entries_expire_unless_pushed_again() {
    let s = TenantMetadata::default();
    s.add(&tenant(), &[m("a", ""), m("b", "")], limits(0, 0), 1_000);
    s.add(&tenant(), &[m("b", "")], limits(0, 0), 5_000);
    assert_eq!(s.purge(2_000), 1, "a was last pushed before the cut");
    assert_eq!(families(&s, ALL), vec![("b".into(), String::new())]);
    assert_eq!(s.purge(6_000), 1);
    assert_eq!(s.len(), 0);
    // A purged family frees its place under the per-user limit.
    assert!(s.add(&tenant(), &[m("c", "")], limits(1, 0), 7_000).refused.is_empty());
}

#[test]
fn reads_apply_limit_limit_per_metric_and_metric() {
    let s = TenantMetadata::default();
    s.add(
        &tenant(),
        &[m("a", "1"), m("a", "2"), m("b", "1"), m("c", "1")],
        limits(0, 0),
        1,
    );
    let q = |limit, per_metric, metric| MetadataQuery {
        limit,
        limit_per_metric: per_metric,
        metric,
    };
    assert_eq!(
        families(&s, q(Some(2), None, None)).len(),
        3,
        "two families, a has two entries"
    );
    assert_eq!(families(&s, q(None, Some(1), None)).len(), 3);
    assert_eq!(families(&s, q(Some(0), None, None)).len(), 0);
    assert_eq!(families(&s, q(None, None, Some("b"))), vec![("b".into(), "1".into())]);
    assert!(families(&s, q(None, None, Some("zzz"))).is_empty());
}

/// A tenant sending a million distinct families holds only its limit, whatever it sends.
#[test]
fn a_million_families_are_bounded_by_the_limit() {
    let s = TenantMetadata::default();
    let names: Vec<String> = (0..1_000_000).map(|i| format!("metric_{i}")).collect();
    let refs: Vec<MetadataRef<'_>> = names.iter().map(|n| m(n, "help")).collect();
    let mut refused = 0;
    for chunk in refs.chunks(10_000) {
        let added = s.add(&tenant(), chunk, limits(1000, 10), 1);
        assert!(added.refused.len() <= 1, "one message per reason");
        refused += added.refused.iter().map(|r| r.count).sum::<u64>();
    }
    assert_eq!(s.len(), 1000);
    assert_eq!(refused, 999_000);
}
