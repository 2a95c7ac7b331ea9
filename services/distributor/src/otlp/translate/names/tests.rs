//! Name tests: each strategy's rules on real-world OTLP names, with the names Prometheus' `otlptranslator`
//! gives them.

use super::*;
use OtelTranslationStrategy::{
    NoTranslation, NoUtf8EscapingWithSuffixes, UnderscoreEscapingWithSuffixes, UnderscoreEscapingWithoutSuffixes,
};

/// What Prometheus refuses shows as this.
const REFUSED: &str = "<refused>";

fn named(name: &str, unit: &str, kind: Kind, strategy: OtelTranslationStrategy) -> String {
    metric_name(name, unit, kind, strategy).unwrap_or_else(|| REFUSED.to_owned())
}

fn default(name: &str, unit: &str, kind: Kind) -> String {
    named(name, unit, kind, UnderscoreEscapingWithSuffixes)
}

#[test]
fn metric_names() {
    let cases: &[(&str, &str, Kind, &str)] = &[
        ("plain gauge", "cpu", Kind::Gauge, "cpu"),
        ("dots", "http.server.duration", Kind::Histogram, "http_server_duration"),
        ("seconds", "http.server.duration", Kind::Gauge, "http_server_duration"),
        ("invalid runs collapse", "a..b--c__d", Kind::Gauge, "a_b_c_d"),
        ("colons kept", "a:b", Kind::Gauge, "a:b"),
        ("leading digit", "2xx.count", Kind::Gauge, "_2xx_count"),
        ("counter", "requests", Kind::Counter, "requests_total"),
        (
            "total moved to the end",
            "total.requests",
            Kind::Counter,
            "requests_total",
        ),
        (
            "up-down counter has no total",
            "queue.size",
            Kind::UpDownCounter,
            "queue_size",
        ),
    ];
    for (case, name, kind, want) in cases {
        assert_eq!(default(name, "", *kind), *want, "case {case}");
    }
    let units: &[(&str, &str, Kind, &str)] = &[
        ("s", "http.duration", Kind::Histogram, "http_duration_seconds"),
        ("ms", "latency", Kind::Gauge, "latency_milliseconds"),
        ("By", "memory.usage", Kind::Gauge, "memory_usage_bytes"),
        ("By", "io", Kind::Counter, "io_bytes_total"),
        ("KiBy", "mem", Kind::Gauge, "mem_kibibytes"),
        ("1", "cpu.utilization", Kind::Gauge, "cpu_utilization_ratio"),
        ("1", "hits", Kind::Counter, "hits_total"),
        ("1", "queue.fill", Kind::UpDownCounter, "queue_fill"),
        ("%", "disk", Kind::Gauge, "disk_percent"),
        ("m/s", "speed", Kind::Gauge, "speed_meters_per_second"),
        ("By/s", "throughput", Kind::Counter, "throughput_bytes_per_second_total"),
        ("{request}", "requests", Kind::Counter, "requests_total"),
        ("{packet}/s", "rate", Kind::Gauge, "rate_per_second"),
        ("s", "duration.seconds", Kind::Gauge, "duration_seconds"),
        ("unknown", "foo", Kind::Gauge, "foo_unknown"),
        ("Cel", "temp", Kind::Gauge, "temp_celsius"),
        ("a-b", "x", Kind::Gauge, "x_a_b"),
    ];
    for (unit, name, kind, want) in units {
        assert_eq!(default(name, unit, *kind), *want, "unit {unit:?} on {name}");
    }
}

#[test]
fn each_strategy_on_real_world_names() {
    // (case, OTLP name, unit, kind, [UnderscoreEscapingWithSuffixes, UnderscoreEscapingWithoutSuffixes,
    // NoUTF8EscapingWithSuffixes, NoTranslation])
    type Case<'a> = (&'a str, &'a str, &'a str, Kind, [&'a str; 4]);
    let cases: &[Case<'_>] = &[
        (
            "histogram in seconds",
            "http.server.request.duration",
            "s",
            Kind::Histogram,
            [
                "http_server_request_duration_seconds",
                "http_server_request_duration",
                "http.server.request.duration_seconds",
                "http.server.request.duration",
            ],
        ),
        (
            "gauge of unit 1",
            "system.cpu.utilization",
            "1",
            Kind::Gauge,
            [
                "system_cpu_utilization_ratio",
                "system_cpu_utilization",
                "system.cpu.utilization_ratio",
                "system.cpu.utilization",
            ],
        ),
        (
            "monotonic sum with an annotation unit",
            "http.server.requests",
            "{request}",
            Kind::Counter,
            [
                "http_server_requests_total",
                "http_server_requests",
                "http.server.requests_total",
                "http.server.requests",
            ],
        ),
        (
            "leading digit",
            "2xx.responses",
            "",
            Kind::Counter,
            [
                "_2xx_responses_total",
                "_2xx_responses",
                "2xx.responses_total",
                "2xx.responses",
            ],
        ),
        (
            "up-down counter in bytes",
            "process.runtime.jvm.memory.usage",
            "By",
            Kind::UpDownCounter,
            [
                "process_runtime_jvm_memory_usage_bytes",
                "process_runtime_jvm_memory_usage",
                "process.runtime.jvm.memory.usage_bytes",
                "process.runtime.jvm.memory.usage",
            ],
        ),
        (
            "per unit on a counter",
            "network.io",
            "By/s",
            Kind::Counter,
            [
                "network_io_bytes_per_second_total",
                "network_io",
                "network.io_bytes_per_second_total",
                "network.io",
            ],
        ),
        (
            "total already in the name",
            "requests.total",
            "",
            Kind::Counter,
            ["requests_total", "requests_total", "requests_total", "requests.total"],
        ),
        (
            "unit already at the end",
            "duration_seconds",
            "s",
            Kind::Gauge,
            [
                "duration_seconds",
                "duration_seconds",
                "duration_seconds",
                "duration_seconds",
            ],
        ),
        (
            "ratio already at the end",
            "cpu.ratio",
            "1",
            Kind::Gauge,
            ["cpu_ratio", "cpu_ratio", "cpu_ratio", "cpu.ratio"],
        ),
        (
            "underscore runs",
            "a__b",
            "",
            Kind::Gauge,
            ["a_b", "a__b", "a__b", "a__b"],
        ),
        (
            "not ASCII",
            "température",
            "Cel",
            Kind::Gauge,
            [
                "temp_rature_celsius",
                "temp_rature",
                "température_celsius",
                "température",
            ],
        ),
        (
            "nothing to keep",
            "...",
            "",
            Kind::Gauge,
            [REFUSED, REFUSED, "...", "..."],
        ),
        (
            "only an underscore left",
            "._.",
            "",
            Kind::Gauge,
            [REFUSED, REFUSED, "._.", "._."],
        ),
    ];
    let strategies = [
        UnderscoreEscapingWithSuffixes,
        UnderscoreEscapingWithoutSuffixes,
        NoUtf8EscapingWithSuffixes,
        NoTranslation,
    ];
    for (case, name, unit, kind, want) in cases {
        for (strategy, want) in strategies.iter().zip(want) {
            assert_eq!(
                named(name, unit, *kind, *strategy),
                *want,
                "case {case}, {}",
                strategy.as_str()
            );
        }
    }
}

#[test]
fn label_names_by_strategy() {
    // (key, escaped, kept by the UTF-8 strategies)
    for (key, escaped, utf8) in [
        ("http.method", Some("http_method"), "http.method"),
        ("service.name", Some("service_name"), "service.name"),
        ("2xx", Some("key_2xx"), "2xx"),
        ("ok_name", Some("ok_name"), "ok_name"),
        ("a-b/c", Some("a_b_c"), "a-b/c"),
        ("__name__", Some("__name__"), "__name__"),
        ("__x", Some("__x"), "__x"),
        ("_private", Some("key_private"), "_private"),
        ("é", Some("key_"), "é"),
        ("...", None, "..."),
    ] {
        for strategy in [UnderscoreEscapingWithSuffixes, UnderscoreEscapingWithoutSuffixes] {
            assert_eq!(
                label_name(key, strategy).as_deref(),
                escaped,
                "key {key:?}, {}",
                strategy.as_str()
            );
        }
        for strategy in [NoUtf8EscapingWithSuffixes, NoTranslation] {
            assert_eq!(
                label_name(key, strategy).as_deref(),
                Some(utf8),
                "key {key:?}, {}",
                strategy.as_str()
            );
        }
    }
}

#[test]
fn units_for_metadata() {
    for (unit, escaped, utf8) in [
        ("s", "seconds", "seconds"),
        ("By/s", "bytes_per_second", "bytes_per_second"),
        ("1", "", ""),
        ("{request}", "", ""),
        ("{packet}/s", "per_second", "per_second"),
        ("a.b", "a_b", "a.b"),
    ] {
        assert_eq!(prometheus_unit(unit, true), escaped, "unit {unit:?}");
        assert_eq!(prometheus_unit(unit, false), utf8, "unit {unit:?}");
    }
}
