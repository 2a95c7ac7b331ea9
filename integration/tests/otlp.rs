//! A real OpenTelemetry sender pushes to heddle's `/otlp/v1/metrics`: the Python SDK with its OTLP/HTTP
//! protobuf exporter (gzip) sends a counter, an observable gauge and a histogram from a resource with
//! `service.name`, `service.instance.id` and one more attribute; the translated series are read back through
//! `/prometheus/api/v1/series` and remote read, its metrics' metadata through `/prometheus/api/v1/metadata`. The
//! same export as protobuf and as OTLP JSON stores the same series, and the load generator's OTLP mode pushes
//! and verifies.
//!
//! Needs a Python with `opentelemetry-sdk` and `opentelemetry-exporter-otlp-proto-http`: `HEDDLE_OTEL_PYTHON`,
//! else `$HOME/.cache/heddle-tools/otel-venv/bin/python` (`scripts/test` installs both). Without it the test is
//! skipped with a message, unless `CI` is set, in which case it fails.

use heddle_model::Labels;
use heddle_testkit::{
    CommandOutput, HeddleOptions, HeddleProcess, ReadClient, ReadMode, eq, http_client, metric_value, metrics_text,
    now_ms, query, run_bounded, run_loadtest, wait_until_async,
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

/// Runs the Python `script` with heddle's OTLP endpoint as its argument, for at most a minute, and asserts that
/// it exited with success and exported everything (the SDK logs a failed export and still exits with 0).
async fn run_sender(python: PathBuf, script: &'static str, heddle: &HeddleProcess) -> CommandOutput {
    let endpoint = format!("{}/otlp/v1/metrics", heddle.url());
    let sent = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(python);
        cmd.args(["-c", script, &endpoint]);
        run_bounded(cmd, Duration::from_secs(60)).expect("run the python sender")
    })
    .await
    .expect("join");
    assert!(
        sent.status.success(),
        "sender failed: {}\n{}\nheddle:\n{}",
        sent.status,
        sent.stderr,
        heddle.log_tail(30)
    );
    assert!(
        !sent.stderr.contains("Failed to export"),
        "sender failed: {}\nheddle:\n{}",
        sent.stderr,
        heddle.log_tail(30)
    );
    sent
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
    run_sender(python, SENDER, &heddle).await;

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

/// Records the same instruments into an in-memory reader, encodes them with the SDK's own OTLP encoder and
/// sends the one request twice: as protobuf to tenant `protobuf`, and as JSON to tenant `json`, the JSON
/// written by Google's `json_format` (proto3's mapping: 64-bit integers as strings, camelCase names, enums as
/// integers asked for, as OTLP requires). Prints each answer's status, content type and body.
const TWIN_SENDER: &str = r#"
import sys, urllib.request
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource

reader = InMemoryMetricReader()
resource = Resource.create({"service.name": "twin", "service.instance.id": "pod-1"})
provider = MeterProvider(resource=resource, metric_readers=[reader])
meter = provider.get_meter("heddle-otlp-json-test")
orders = meter.create_counter("orders", unit="{order}")
orders.add(3, {"region": "eu"})
orders.add(5, {"region": "us"})
queue = meter.create_up_down_counter("queue.depth")
queue.add(9)
queue.add(-2)
meter.create_observable_gauge(
    "room.temperature", unit="Cel", callbacks=[lambda options: [Observation(-4.25, {"room": "cold"})]]
)
duration = meter.create_histogram("request.duration", unit="s")
for v in (0.1, 0.3, 2.0, 7.5):
    duration.record(v, {"route": "/a"})
request = encode_metrics(reader.get_metrics_data())
provider.shutdown()

def send(tenant, content_type, body):
    req = urllib.request.Request(sys.argv[1], data=body, method="POST", headers={
        "Content-Type": content_type, "X-Scope-OrgID": tenant})
    with urllib.request.urlopen(req, timeout=10) as resp:
        print(tenant, resp.status, resp.headers["Content-Type"], resp.read().decode("latin-1"))

send("protobuf", "application/x-protobuf", request.SerializeToString())
send("json", "application/json", json_format.MessageToJson(request, use_integers_for_enums=True).encode())
"#;

/// OTLP JSON and protobuf carrying the same export store the same series and samples.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_json_stores_what_its_protobuf_twin_stores() {
    let Some(python) = otel_python() else {
        return;
    };
    let heddle = tokio::task::spawn_blocking(|| {
        HeddleProcess::start(HeddleOptions {
            multitenancy: true,
            ..HeddleOptions::default()
        })
    })
    .await
    .expect("join")
    .expect("start heddle");
    let lo = now_ms() - 60_000;
    let sent = run_sender(python, TWIN_SENDER, &heddle).await;
    let stdout = sent.stdout;
    // The protobuf answer is an empty ExportMetricsServiceResponse (no bytes); the JSON one is `{}`.
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["protobuf 200 application/x-protobuf ", "json 200 application/json {}"],
        "{stdout}"
    );

    let http = http_client(Duration::from_secs(30)).expect("client");
    let hi = now_ms() + 60_000;
    let mut stored = Vec::new();
    for tenant in ["protobuf", "json"] {
        let reader = ReadClient::new(http.clone(), &heddle.prometheus_url(), Some(tenant));
        let got = reader
            .read(ReadMode::Samples, vec![query(lo, hi, vec![eq("job", "twin")])])
            .await
            .expect("remote read")
            .remove(0);
        stored.push(got);
    }
    let names: BTreeSet<&str> = stored[0].iter().filter_map(|s| s.labels.get("__name__")).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "orders_total",
            "queue_depth",
            "request_duration_seconds_bucket",
            "request_duration_seconds_count",
            "request_duration_seconds_sum",
            "room_temperature_celsius",
            "target_info",
        ]),
        "{:?}",
        stored[0]
    );
    // 2 orders, queue, temperature, 16 buckets, sum, count, target_info.
    assert_eq!(stored[0].len(), 23, "{:?}", stored[0]);
    assert_eq!(stored[1], stored[0], "JSON stored differently from protobuf");
    let value = |name: &str| {
        stored[1]
            .iter()
            .find(|s| s.labels.get("__name__") == Some(name))
            .map(|s| s.samples[0].v)
    };
    assert_eq!(value("queue_depth"), Some(7.0));
    assert_eq!(value("room_temperature_celsius"), Some(-4.25));
    assert_eq!(value("request_duration_seconds_count"), Some(4.0));
}

/// `heddle-loadtest push --protocol otlp` sends its series as OTLP gauges (gzip protobuf), and `verify`
/// finds every sample through remote read: the translation stores exactly the generated series.
#[test]
fn the_load_generator_pushes_otlp_and_verifies() {
    let heddle = HeddleProcess::start(HeddleOptions::default()).expect("start heddle");
    let common = ["--series=400", "--metrics=9", "--rounds=3"].map(String::from);
    let mut push = vec![
        "push".to_owned(),
        format!("--url={}/otlp/v1/metrics", heddle.url()),
        "--protocol=otlp".to_owned(),
        "--batch-size=150".to_owned(),
        "--progress-s=0".to_owned(),
    ];
    push.extend(common.iter().cloned());
    let out = run_loadtest(&push, Duration::from_secs(120)).expect("heddle-loadtest push");
    let summary: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("push printed no JSON ({e}): {}\n{}", out.stdout, out.stderr));
    assert!(
        out.status.success() && summary["errors"] == 0 && summary["samples_acknowledged"] == 1200,
        "push failed: {summary}\n{}\n{}",
        out.stderr,
        heddle.log_tail(30)
    );
    assert!(summary["wire_bytes"].as_u64().is_some_and(|b| b > 0), "{summary}");
    let mut verify = vec![
        "verify".to_owned(),
        format!("--read-url={}", heddle.prometheus_url()),
        format!("--start-ms={}", summary["start_ms"]),
    ];
    verify.extend(common.iter().cloned());
    let out = run_loadtest(&verify, Duration::from_secs(120)).expect("heddle-loadtest verify");
    let report: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("verify printed no JSON ({e}): {}\n{}", out.stdout, out.stderr));
    assert!(
        report["verified"] == true && report["samples_found"] == 1200,
        "verify: {report}\n{}",
        heddle.log_tail(30)
    );
}

/// Sends the same export, OTel semantic-convention names and all, to tenants `otel-utf8` and `otel-legacy`.
const UTF8_SENDER: &str = r#"
import sys
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

for tenant in ("otel-utf8", "otel-legacy"):
    exporter = OTLPMetricExporter(
        endpoint=sys.argv[1], compression=Compression.Gzip, timeout=10, headers={"X-Scope-OrgID": tenant})
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    resource = Resource.create({
        "service.name": "checkout",
        "service.instance.id": "pod-7",
        "deployment.environment": "test",
    })
    provider = MeterProvider(resource=resource, metric_readers=[reader])
    meter = provider.get_meter("heddle-otlp-utf8-test")
    duration = meter.create_histogram("http.server.request.duration", unit="s")
    for v in (0.1, 0.3):
        duration.record(v, {"http.request.method": "GET"})
    meter.create_counter("http.server.requests", unit="{request}").add(5, {"http.request.method": "GET"})
    meter.create_observable_gauge(
        "system.cpu.utilization", unit="1", callbacks=[lambda options: [Observation(0.25, {"cpu.mode": "idle"})]]
    )
    provider.shutdown()
"#;

/// A tenant with `otel_translation_strategy: NoUTF8EscapingWithSuffixes` and `name_validation_scheme: utf8`
/// (set in the runtime config file, with `deployment.environment` promoted) keeps the SDK's dotted names,
/// suffixes added, and reads them back through the series API and PromQL's quoted names; a tenant on the
/// defaults gets the same export with escaped names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_utf8_tenant_keeps_opentelemetry_names() {
    let Some(python) = otel_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let overrides = dir.path().join("overrides.yaml");
    std::fs::write(
        &overrides,
        "overrides:\n  otel-utf8:\n    otel_translation_strategy: NoUTF8EscapingWithSuffixes\n    \
         name_validation_scheme: utf8\n    promote_otel_resource_attributes: [deployment.environment]\n",
    )
    .expect("write the runtime config");
    let heddle = tokio::task::spawn_blocking(move || {
        HeddleProcess::start(HeddleOptions {
            multitenancy: true,
            args: vec![format!("--runtime-config.file={}", overrides.display())],
            ..HeddleOptions::default()
        })
    })
    .await
    .expect("join")
    .expect("start heddle");
    let lo = now_ms() - 60_000;
    run_sender(python, UTF8_SENDER, &heddle).await;

    let http = http_client(Duration::from_secs(30)).expect("client");
    let get = |tenant: &'static str, path: String| {
        let http = http.clone();
        let url = format!("{}{path}", heddle.prometheus_url());
        async move {
            let resp = http
                .get(&url)
                .header("X-Scope-OrgID", tenant)
                .send()
                .await
                .expect("request");
            let status = resp.status();
            let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await.expect("answer")).expect("JSON");
            assert_eq!(status, 200, "{url}: {body}");
            body["data"].clone()
        }
    };
    let range = format!("start={}&end={}", lo / 1000, now_ms() / 1000 + 60);
    let series_of = |tenant: &'static str| {
        get(
            tenant,
            format!("/api/v1/series?match[]=%7Bjob%3D%22checkout%22%7D&{range}"),
        )
    };
    let names = |series: &serde_json::Value| -> BTreeSet<String> {
        series
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["__name__"].as_str().map(str::to_owned))
            .collect()
    };
    let set = |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| (*n).to_owned()).collect() };

    let utf8 = series_of("otel-utf8").await;
    assert_eq!(
        names(&utf8),
        set(&[
            "http.server.request.duration_seconds_bucket",
            "http.server.request.duration_seconds_count",
            "http.server.request.duration_seconds_sum",
            "http.server.requests_total",
            "system.cpu.utilization_ratio",
            "target_info",
        ]),
        "{utf8}\nheddle:\n{}",
        heddle.log_tail(30)
    );
    for s in utf8.as_array().into_iter().flatten() {
        assert_eq!(s["deployment.environment"], "test", "promoted onto every series: {s}");
        assert_eq!(s["instance"], "pod-7", "{s}");
    }
    let requests = utf8
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["__name__"] == "http.server.requests_total")
        .expect("the counter");
    assert_eq!(
        *requests,
        serde_json::json!({
            "__name__": "http.server.requests_total",
            "deployment.environment": "test",
            "http.request.method": "GET",
            "instance": "pod-7",
            "job": "checkout",
        })
    );

    let legacy = series_of("otel-legacy").await;
    assert_eq!(
        names(&legacy),
        set(&[
            "http_server_request_duration_seconds_bucket",
            "http_server_request_duration_seconds_count",
            "http_server_request_duration_seconds_sum",
            "http_server_requests_total",
            "system_cpu_utilization_ratio",
            "target_info",
        ]),
        "{legacy}"
    );
    assert!(
        legacy
            .as_array()
            .into_iter()
            .flatten()
            .all(|s| s.get("deployment_environment").is_none() || s["__name__"] == "target_info"),
        "nothing is promoted for the tenant on the defaults: {legacy}"
    );

    // PromQL with Prometheus 3's quoted names.
    let query = form_encode(&[
        (
            "query",
            r#"sum by ("http.request.method") ({"http.server.requests_total", "deployment.environment"="test"})"#,
        ),
        // Seconds rounded up: a time truncated to the second can precede a sample written in that second.
        ("time", &(now_ms() / 1000 + 1).to_string()),
    ]);
    let answer = get("otel-utf8", format!("/api/v1/query?{query}")).await;
    assert_eq!(
        answer["result"][0]["metric"],
        serde_json::json!({"http.request.method": "GET"}),
        "{answer}"
    );
    assert_eq!(answer["result"][0]["value"][1], "5", "{answer}");
    let values = get(
        "otel-utf8",
        format!("/api/v1/label/U__http_2e_request_2e_method/values?{range}"),
    )
    .await;
    assert_eq!(values, serde_json::json!(["GET"]));
}

/// `params` as a URL query string, encoded.
fn form_encode(params: &[(&str, &str)]) -> String {
    let url = reqwest::Url::parse_with_params("http://localhost/", params).expect("encode the parameters");
    url.query().unwrap_or_default().to_owned()
}

/// Sends two histograms with exponential bucket aggregation (the SDK's `preferred_aggregation`): one of
/// spread-out values (the SDK lowers its scale to fit its 160 buckets) and one of values so close that the
/// SDK keeps its highest scale, 20, which heddle lowers to native histograms' highest schema, 8.
const EXPONENTIAL_SENDER: &str = r#"
import sys
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation
from opentelemetry.sdk.resources import Resource

exporter = OTLPMetricExporter(
    endpoint=sys.argv[1], timeout=10, preferred_aggregation={Histogram: ExponentialBucketHistogramAggregation()}
)
reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
provider = MeterProvider(resource=Resource.create({"service.name": "checkout"}), metric_readers=[reader])
meter = provider.get_meter("heddle-otlp-exponential-test")
duration = meter.create_histogram("request.duration", unit="s")
for v in (0.1, 0.3, 2.0, 2.0):
    duration.record(v, {"route": "/a"})
size = meter.create_histogram("response.size", unit="By")
for v in (1000.0, 1000.0001):
    size.record(v)
provider.shutdown()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exponential_histograms_from_the_python_sdk_are_native_histograms() {
    let Some(python) = otel_python() else {
        return;
    };
    let heddle = tokio::task::spawn_blocking(|| HeddleProcess::start(HeddleOptions::default()))
        .await
        .expect("join")
        .expect("start heddle");
    run_sender(python, EXPONENTIAL_SENDER, &heddle).await;
    let http = http_client(Duration::from_secs(30)).expect("client");
    let metrics = metrics_text(&http, &heddle.url()).await.expect("metrics");
    let value = |name: &str| metric_value(&metrics, name);
    assert_eq!(
        value("heddle_ingester_ingested_native_histograms_total"),
        Some(2.0),
        "one native histogram per point\n{}",
        metrics
            .lines()
            .filter(|l| l.contains("histogram") || l.contains("discarded"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Only target_info is a float sample: nothing became classic `_bucket` series.
    assert_eq!(value("heddle_ingester_ingested_samples_total"), Some(1.0));
    assert!(!metrics.contains("heddle_discarded_samples_total{"), "nothing refused");
    let series_url = format!(
        "{}/api/v1/series?match[]=%7Bjob%3D%22checkout%22%7D&start=0&end={}",
        heddle.prometheus_url(),
        now_ms() / 1000 + 60
    );
    let body: serde_json::Value = serde_json::from_slice(
        &http
            .get(&series_url)
            .send()
            .await
            .expect("series request")
            .bytes()
            .await
            .expect("series answer"),
    )
    .expect("series JSON");
    let names: BTreeSet<&str> = body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["__name__"].as_str())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["request_duration_seconds", "response_size_bytes", "target_info"]),
        "{body}"
    );
}
