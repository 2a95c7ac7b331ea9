//! Remote write: lying and broken bodies, encodings, and the values and labels at the edge of what is legal.

use super::case::*;
use heddle_model::METRIC_NAME;
use heddle_testkit::{eq, query};

pub(crate) fn cases(now: i64) -> Vec<Case> {
    vec![
        Case::push(
            "a million empty labels",
            snappy(&heddle_testkit::codec::empty_labels_request(1_000_000)),
        )
        .want(400, &["err-heddle-degenerate-write-request"])
        .peak_growth_below(64 << 20),
        Case::push("snappy header declaring 3 GiB", lying_snappy(3 << 30)).want(
            400,
            &[
                "err-heddle-decompressed-too-large",
                "3221225472",
                "--distributor.max-decompressed-size",
            ],
        ),
        Case::push("snappy header declaring more than 4 GiB", lying_snappy(5 << 30))
            .want(400, &["err-heddle-corrupt-snappy", "larger than allowed"]),
        Case::push("empty body", Vec::new()).want(400, &["err-heddle-corrupt-snappy", "empty body"]),
        Case::push("not snappy", b"this is not snappy at all".to_vec()).want(400, &["snappy"]),
        Case::push("snappy of garbage protobuf", snappy(&[0xff; 64])).want(400, &["protobuf"]),
        Case::push("gzip instead of snappy", write(vec![]))
            .header("Content-Encoding", "gzip")
            .want(415, &["gzip"]),
        Case::push("unknown remote write proto", write(vec![]))
            .header(
                "Content-Type",
                "application/x-protobuf;proto=io.prometheus.write.v3.Request",
            )
            .want(415, &["io.prometheus.write.v3.Request"]),
        Case::push(
            "NaN, infinities and a stale marker are legal values",
            write(vec![series(
                &[(METRIC_NAME, "odd_values")],
                &[
                    (now - 3000, f64::NAN),
                    (now - 2000, f64::INFINITY),
                    (now - 1000, f64::NEG_INFINITY),
                    (now, f64::from_bits(0x7ff0_0000_0000_0002)),
                ],
            )]),
        )
        .want(200, &[]),
        Case::push(
            "same timestamp twice with different values",
            write(vec![series(&[(METRIC_NAME, "dup_ts")], &[(now, 1.0), (now, 2.0)])]),
        )
        .want(400, &["err-heddle-sample-duplicate-timestamp"]),
        Case::push(
            "samples out of order within a series",
            write(vec![series(&[(METRIC_NAME, "ooo")], &[(now, 1.0), (now - 1000, 2.0)])]),
        )
        .want(400, &["err-heddle-sample-out-of-order"]),
        Case::push(
            "label value that is not UTF-8",
            write_raw_label(b"__name__", b"bad\xff\xfeutf8", now),
        )
        .want(
            400,
            &["err-heddle-invalid-protobuf", "invalid utf-8", "prometheus.Label.value"],
        ),
        Case::push(
            "label name with a dash",
            write(vec![series(&[(METRIC_NAME, "dash"), ("bad-name", "v")], &[(now, 1.0)])]),
        )
        .want(400, &["err-heddle-invalid-label", "bad-name"]),
        Case::push(
            "duplicate label names",
            write(vec![series(
                &[(METRIC_NAME, "dupl"), ("a", "1"), ("a", "2")],
                &[(now, 1.0)],
            )]),
        )
        .want(400, &["err-heddle-duplicate-label-names"]),
        Case::push(
            "sample at i64::MAX",
            write(vec![series(&[(METRIC_NAME, "far_future")], &[(i64::MAX, 1.0)])]),
        )
        .want(400, &["err-heddle-too-far-in-future"]),
        Case::push(
            "sample at i64::MIN into a fresh tenant, beside a valid one",
            write(vec![
                series(&[(METRIC_NAME, "ancient")], &[(i64::MIN, 1.0)]),
                series(&[(METRIC_NAME, "recent")], &[(now, 1.0)]),
            ]),
        )
        .tenants(&["fresh-tenant"])
        .want(400, &["err-heddle-sample-out-of-bounds", "-9223372036854775808"]),
        Case::read(
            "the valid sample beside the ancient one landed",
            &read_req(vec![query(now - HOUR, now + HOUR, vec![eq(METRIC_NAME, "recent")])]),
        )
        .tenants(&["fresh-tenant"])
        .want(200, &["recent"]),
    ]
}
