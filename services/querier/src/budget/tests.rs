//! The bounds against what parsing really allocates, on a counting allocator.

use super::*;
use crate::matchers::MatcherCache;
use crate::selector::parse_selector_with;
use heddle_testkit::alloc::peak_of;

#[test]
fn vec_bound_holds_a_vec_grown_one_push_at_a_time() {
    for n in [1usize, 2, 3, 4, 5, 8, 9, 100, 1000, 4097] {
        let peak = peak_of(|| {
            let mut v: Vec<(String, String)> = Vec::new();
            for _ in 0..n {
                v.push((String::new(), String::new()));
            }
            v
        });
        let bound = vec_bytes(n, size_of::<(String, String)>());
        assert!(peak <= bound, "n={n}: peak {peak}, bound {bound}");
    }
    assert_eq!(vec_bytes(0, 8), 0);
}

#[test]
fn form_bound_holds_what_parsing_a_form_allocates() {
    let cases: &[(&str, &str, &[u8])] = &[
        ("empty", "", b""),
        ("one pair", "query=up", b""),
        (
            "percent-encoded body",
            "",
            b"match%5B%5D=%7Ba%3D%22b%22%7D&match%5B%5D=c",
        ),
        ("pluses", "q=a+b+c+d", b"x=1+2"),
        ("many empty parts", "", &[b'&'; 10_000]),
        ("many tiny pairs", "", &b"a=b&".repeat(5_000)),
        ("keys without values", "a&b&c&d", b"e&f"),
        ("one long value", "", &[b'x'; 100_000]),
        ("a long encoded value", "", &b"%41".repeat(30_000)),
    ];
    for (name, query, body) in cases {
        let peak = peak_of(|| Form::parse(Some(query), body));
        let bound = form_bytes(query, body);
        assert!(peak <= bound, "case {name}: peak {peak}, bound {bound}");
    }
}

#[test]
fn selector_bound_holds_what_parsing_selectors_allocates() {
    let cases: &[(&str, Vec<String>)] = &[
        ("a metric name", vec!["up".into()]),
        ("a few matchers", vec![r#"up{job="a",instance!="b",x=~"c.*"}"#.into()]),
        ("many bare names", (0..2000).map(|i| format!("m{i}")).collect()),
        ("one name many times", vec!["up".into(); 2000]),
        ("quoted names", vec![format!("{{{}}}", vec![r#""a""#; 500].join(","))]),
        (
            "shortest matchers",
            vec![format!(
                "{{{}}}",
                (0..500).map(|i| format!("a{i}=\"\"")).collect::<Vec<_>>().join(",")
            )],
        ),
        (
            "escaped values",
            vec![format!(r#"x{{a="{}"}}"#, r"\u00e9".repeat(2000))],
        ),
        ("a long value", vec![format!(r#"x{{a="{}"}}"#, "v".repeat(50_000))]),
        ("a long regex", vec![format!(r#"x{{a=~"{}"}}"#, "v|".repeat(1000))]),
        (
            "many distinct regexes",
            (0..300).map(|i| format!(r#"{{a=~"x{i}.*"}}"#)).collect(),
        ),
        ("one regex many times", vec![r#"{a=~"\w+"}"#.to_string(); 300]),
    ];
    for (name, values) in cases {
        let peak = peak_of(|| {
            let mut cache = MatcherCache::new(0, None);
            values
                .iter()
                .map(|s| parse_selector_with(s, &mut cache))
                .collect::<Result<Vec<_>, _>>()
        });
        // As the series API reserves it: the selectors, and each regex's compilation found on the text.
        let scan = MatcherCache::new(0, None);
        let regexes: usize = values.iter().map(|v| scan.check_query(v).unwrap()).sum();
        let bound = selectors_bytes(values.iter().map(String::as_str)) + regexes;
        assert!(peak <= bound, "case {name}: peak {peak}, bound {bound}");
    }
}

#[test]
fn refusals_say_whether_the_request_could_ever_fit() {
    let budget = heddle_server::InflightBytes::new(100, Default::default(), Default::default());
    let mut other = budget.reserve();
    other.grow(60).unwrap();
    let mut r = budget.reserve();
    let busy = grow(&mut r, 50, "the request body").unwrap_err();
    assert_eq!(busy.status().as_u16(), 503, "{busy}");
    let msg = busy.to_string();
    assert!(
        msg.starts_with("err-heddle-querier-max-inflight-requests-bytes:")
            && msg.contains("the request body needs 50 more")
            && msg.contains("--querier.max-inflight-requests-bytes"),
        "{msg}"
    );
    let never = grow(&mut r, 101, "the decoded remote read request").unwrap_err();
    assert_eq!(never.status().as_u16(), 413, "{never}");
    let msg = never.to_string();
    assert!(
        msg.starts_with("err-heddle-query-request-too-large:")
            && msg.contains("the decoded remote read request would hold 101 bytes")
            && msg.contains("--querier.max-inflight-requests-bytes"),
        "{msg}"
    );
    drop(other);
    grow(&mut r, 50, "the request body").expect("fits once the other request is done");
}

/// Patterns that cost most to compile for their length, and ordinary ones: what a matcher's compilation
/// peaks at stays within [`regex_bytes`].
#[test]
fn regex_bound_holds_what_compiling_allocates() {
    let hosts = (0..3000)
        .map(|i| format!("host-{i}.example.com"))
        .collect::<Vec<_>>()
        .join("|");
    let patterns: Vec<String> = [
        "abc",
        "a|b|c",
        ".*",
        ".+",
        "c.*",
        "[a-z]+",
        "[^a]+",
        r"\w+",
        r"\pL+",
        r"\w+\w+\w+\w+",
        ".*.*.*.*.*",
        r"\s*\S+\d\D",
        "[^a][^b][^c][^d]",
        "(?i)abcdef",
        "(?i).*x.*",
        "a{1000}",
        "(a{100}){100}",
        ".{1000}",
        r"\w{100}",
        r"\w{150}",
        r"\pL{200}",
        r"[\s\S]{1000}",
        "(?i)[a-z\u{e9}]{50}x",
    ]
    .iter()
    .map(|p| p.to_string())
    .chain([
        "v|".repeat(30_000),
        hosts.clone(),
        format!("(?i){hosts}"),
        format!(".*({hosts}).*"),
    ])
    .collect();
    for p in &patterns {
        let peak = peak_of(|| Matcher::new(MatchType::RegexMatch, "a", p.as_str()));
        let bound = regex_bytes(p);
        assert!(
            peak <= bound,
            "{:?} ({} bytes): compiling peaked at {peak}, the bound is {bound}",
            &p[..p.len().min(40)],
            p.len()
        );
    }
}

#[tokio::test]
async fn bodies_are_read_within_their_limit_and_reserved() {
    use axum::http::HeaderValue;
    let budget = heddle_server::InflightBytes::new(0, Default::default(), Default::default());
    let declared = |n: usize| {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        h
    };
    let t = Duration::from_secs(5);

    let mut r = budget.reserve();
    let got = read_body(Body::from(vec![7u8; 1000]), &declared(1000), 1000, t, &mut r)
        .await
        .unwrap();
    assert_eq!(got.len(), 1000);
    assert_eq!(r.held(), 1000, "the declared length, reserved before the buffer");

    // Declared over the limit: refused before anything is kept.
    let mut r = budget.reserve();
    let err = read_body(Body::from(vec![0u8; 1001]), &declared(1001), 1000, t, &mut r)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            QuerierError::BodyTooLarge {
                size: 1001,
                limit: 1000
            }
        ),
        "{err}"
    );
    assert!(
        err.body_unread() && err.to_string().contains("--querier.max-body-size"),
        "{err}"
    );
    assert_eq!(r.held(), 0);

    // No length given: refused as soon as more than the limit has arrived, the buffer reserved as it grew.
    let chunks = futures::stream::iter((0..20).map(|_| Ok::<_, std::io::Error>(vec![1u8; 100])));
    let mut r = budget.reserve();
    let err = read_body(Body::from_stream(chunks), &HeaderMap::new(), 1000, t, &mut r)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            QuerierError::BodyTooLarge {
                size: 1100,
                limit: 1000
            }
        ),
        "{err}"
    );
    assert!(r.held() <= 1000, "never more than the limit reserved: {}", r.held());

    // A budget too small for the body: refused before the buffer exists.
    let small = heddle_server::InflightBytes::new(100, Default::default(), Default::default());
    let err = read_body(
        Body::from(vec![0u8; 500]),
        &declared(500),
        1000,
        t,
        &mut small.reserve(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.status().as_u16(), 413, "{err}");
    assert!(err.body_unread(), "{err}");
}
