//! A real OpenTelemetry sender pushes to heddle's `/otlp/v1/metrics`: the Python SDK with its OTLP/HTTP
//! protobuf exporter (gzip) sends a counter, an observable gauge and a histogram from a resource with
//! `service.name`, `service.instance.id` and one more attribute; the translated series are read back through
//! `/prometheus/api/v1/series` and remote read, its metrics' metadata through `/prometheus/api/v1/metadata`.
//!
//! Needs a Python with `opentelemetry-sdk` and `opentelemetry-exporter-otlp-proto-http`: `HEDDLE_OTEL_PYTHON`,
//! else `$HOME/.cache/heddle-tools/otel-venv/bin/python` (`scripts/test` installs both). Without it the test is
//! skipped with a message, unless `CI` is set, in which case it fails.

use heddle_model::Labels;
use heddle_testkit::{
    HeddleOptions, HeddleProcess, ReadClient, ReadMode, eq, http_client, now_ms, query, wait_until_async,
};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Sends one export of three instruments and shuts the provider down (which flushes it).
const SENDER: &str = r#"
import sys
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

exporter = OTLPMetricExporter(endpoint=sys.argv[1], compression=Compression.Gzip, timeout=10)
reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
resource = Resource.create({
    "service.name": "checkout",
    "service.instance.id": "pod-7",
    "deployment.environment": "test",
})
provider = MeterProvider(resource=resource, metric_readers=[reader])
meter = provider.get_meter("heddle-otlp-test")
orders = meter.create_counter("orders", unit="{order}", description="orders placed")
orders.add(3, {"region": "eu"})
orders.add(4, {"region": "eu"})
meter.create_observable_gauge(
    "room.temperature", unit="Cel", callbacks=[lambda options: [Observation(21.5, {"room": "lab"})]]
)
duration = meter.create_histogram("request.duration", unit="s", description="time to serve a request")
for v in (0.1, 0.3, 2.0):
    duration.record(v)
provider.shutdown()
"#;

fn otel_python() -> Option<PathBuf> {
    let path = std::env::var_os("HEDDLE_OTEL_PYTHON").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/heddle-tools/otel-venv/bin/python"),
        PathBuf::from,
    );
    let ready = path.is_file()
        && Command::new(&path)
            .args(["-c", "import opentelemetry.exporter.otlp.proto.http.metric_exporter"])
            .output()
            .is_ok_and(|o| o.status.success());
    if ready {
        return Some(path);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !ci,
        "{} lacks the OpenTelemetry SDK and CI is set: scripts/test installs it",
        path.display()
    );
    eprintln!(
        "SKIPPED otlp: {} lacks opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http (scripts/test installs \
         them); with CI=true this is a failure",
        path.display()
    );
    None
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    Labels::from_unsorted(pairs.iter().copied()).expect("labels")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_opentelemetry_python_sdk_pushes_to_heddle() {
    let Some(python) = otel_python() else {
        return;
    };
    let heddle = tokio::task::spawn_blocking(|| HeddleProcess::start(HeddleOptions::default()))
        .await
        .expect("join")
        .expect("start heddle");
    let lo = now_ms() - 60_000;
    let endpoint = format!("{}/otlp/v1/metrics", heddle.url());
    let sent = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .args(["-c", SENDER, &endpoint])
            .output()
            .expect("run the python sender")
    })
    .await
    .expect("join");
    assert!(
        sent.status.success() && !String::from_utf8_lossy(&sent.stderr).contains("Failed to export"),
        "sender failed: {}\n{}\nheddle:\n{}",
        sent.status,
        String::from_utf8_lossy(&sent.stderr),
        heddle.log_tail(30)
    );

    let http = http_client(Duration::from_secs(30)).expect("client");
    let series_url = format!(
        "{}/api/v1/series?match[]=%7Bjob%3D%22checkout%22%7D&start={}&end={}",
        heddle.prometheus_url(),
        lo / 1000,
        now_ms() / 1000 + 60
    );
    // The push was acknowledged before the sender returned, so the series are there at once; a few tries
    // only absorb a slow first query.
    let mut names = BTreeSet::new();
    let arrived = wait_until_async(Duration::from_secs(30), || {
        let (http, url) = (http.clone(), series_url.clone());
        async move {
            let Ok(resp) = http.get(&url).send().await else {
                return false;
            };
            let Ok(bytes) = resp.bytes().await else {
                return false;
            };
            serde_json::from_slice::<serde_json::Value>(&bytes).is_ok_and(|body| {
                body["data"]
                    .as_array()
                    .is_some_and(|series| series.iter().filter(|s| s["instance"] == "pod-7").count() >= 8)
            })
        }
    })
    .await;
    let bytes = http
        .get(&series_url)
        .send()
        .await
        .expect("series request")
        .bytes()
        .await
        .expect("series answer");
    let body: serde_json::Value = serde_json::from_slice(&bytes).expect("series JSON");
    for s in body["data"].as_array().into_iter().flatten() {
        assert_eq!(s["instance"], "pod-7", "{s}");
        names.insert(s["__name__"].as_str().expect("name").to_owned());
    }
    let want: BTreeSet<String> = [
        "orders_total",
        "room_temperature_celsius",
        "request_duration_seconds_bucket",
        "request_duration_seconds_count",
        "request_duration_seconds_sum",
        "target_info",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert!(
        arrived,
        "series did not arrive: {names:?}\nheddle:\n{}",
        heddle.log_tail(30)
    );
    assert_eq!(names, want);
    // orders, temperature, 16 histogram buckets (15 default bounds and +Inf), sum, count, target_info.
    assert_eq!(body["data"].as_array().map(Vec::len), Some(21), "{body}");

    // Each metric's metadata: its description as help, its unit's words, the type it became.
    let metadata: serde_json::Value = serde_json::from_slice(
        &http
            .get(format!("{}/api/v1/metadata", heddle.prometheus_url()))
            .send()
            .await
            .expect("metadata request")
            .bytes()
            .await
            .expect("metadata answer"),
    )
    .expect("metadata JSON");
    let entry = |family: &str| metadata["data"][family][0].clone();
    assert_eq!(
        entry("orders_total"),
        serde_json::json!({"type": "counter", "help": "orders placed", "unit": ""}),
        "{metadata}"
    );
    assert_eq!(
        entry("request_duration_seconds"),
        serde_json::json!({"type": "histogram", "help": "time to serve a request", "unit": "seconds"}),
        "{metadata}"
    );
    assert_eq!(
        entry("room_temperature_celsius"),
        serde_json::json!({"type": "gauge", "help": "", "unit": "celsius"}),
        "{metadata}"
    );

    let reader = ReadClient::new(http.clone(), &heddle.prometheus_url(), None);
    let hi = now_ms() + 60_000;
    let job = [("job", "checkout"), ("instance", "pod-7")];
    /// (metric name, labels besides `job` and `instance`, value)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, f64);
    let cases: Vec<Case<'_>> = vec![
        ("orders_total", vec![("region", "eu")], 7.0),
        ("room_temperature_celsius", vec![("room", "lab")], 21.5),
        ("request_duration_seconds_count", vec![], 3.0),
        ("request_duration_seconds_sum", vec![], 2.4),
        ("request_duration_seconds_bucket", vec![("le", "0")], 0.0),
        ("request_duration_seconds_bucket", vec![("le", "5")], 3.0),
        ("request_duration_seconds_bucket", vec![("le", "+Inf")], 3.0),
        // The SDK adds `telemetry.sdk.*` to every resource; its version is checked for presence only.
        (
            "target_info",
            vec![
                ("deployment_environment", "test"),
                ("telemetry_sdk_language", "python"),
                ("telemetry_sdk_name", "opentelemetry"),
            ],
            1.0,
        ),
    ];
    for (name, extra, value) in cases {
        let mut matchers = vec![eq("__name__", name)];
        matchers.extend(extra.iter().map(|(k, v)| eq(k, v)));
        let got = reader
            .read(ReadMode::Samples, vec![query(lo, hi, matchers)])
            .await
            .expect("remote read")
            .remove(0);
        assert_eq!(got.len(), 1, "{name}{extra:?}: {got:?}");
        let mut want_labels: Vec<(&str, &str)> = vec![("__name__", name)];
        want_labels.extend(job);
        want_labels.extend(extra.iter().copied());
        let sdk_version = "telemetry_sdk_version";
        if name == "target_info" {
            assert!(got[0].labels.get(sdk_version).is_some_and(|v| !v.is_empty()), "{name}");
        }
        assert_eq!(
            got[0].labels.filtered(|n| n != sdk_version),
            labels(&want_labels),
            "{name}"
        );
        assert_eq!(got[0].samples.len(), 1, "{name}: {:?}", got[0].samples);
        let v = got[0].samples[0].v;
        assert!((v - value).abs() < 1e-9, "{name}{extra:?}: {v}, want {value}");
    }
}
