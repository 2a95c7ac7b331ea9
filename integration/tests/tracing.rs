//! One trace across processes: a remote-write push carrying a client's W3C `traceparent` to a distributor
//! process, forwarded over gRPC to an ingester process, shows up at an OTLP receiver as spans of both
//! processes in the client's trace, the distributor's request span a child of the client's span and the
//! ingester's `Push` span a child of a distributor span.
//!
//! The receiver runs inside the test, once for each OTLP protocol: a tonic server implementing the OTLP
//! `TraceService` (`grpc`) and a minimal HTTP/1.1 endpoint decoding `POST /v1/traces` (`http/protobuf`, the
//! default). The processes find it through the standard `OTEL_EXPORTER_OTLP_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_PROTOCOL` variables.

use heddle_proto::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use heddle_testkit::codec::encode_write_request;
use heddle_testkit::{Cluster, ClusterOptions, free_port, http_client, wait_until};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The client's trace and span, as a Prometheus behind a tracing proxy would send them.
const CLIENT_TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN_ID: &str = "00f067aa0ba902b7";

/// One received span, with the `heddle.target` and `process.pid` of the process that sent it.
#[derive(Debug, Clone)]
struct Received {
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    target: String,
    pid: i64,
}

#[derive(Debug, Default, Clone)]
struct Receiver {
    spans: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.record(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    fn record(&self, request: ExportTraceServiceRequest) {
        let mut got = Vec::new();
        for rs in request.resource_spans {
            let (mut target, mut pid) = (String::new(), 0);
            for kv in rs.resource.iter().flat_map(|r| &r.attributes) {
                match (kv.key.as_str(), kv.value.as_ref().and_then(|v| v.value.as_ref())) {
                    ("heddle.target", Some(Value::StringValue(s))) => target = s.clone(),
                    ("process.pid", Some(Value::IntValue(i))) => pid = *i,
                    _ => {}
                }
            }
            for span in rs.scope_spans.iter().flat_map(|s| &s.spans) {
                got.push(Received {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name.clone(),
                    target: target.clone(),
                    pid,
                });
            }
        }
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).extend(got);
    }

    /// Serves OTLP/HTTP `POST /v1/traces` (binary protobuf, `Content-Length` bodies, keep-alive) on `listener`.
    async fn serve_http(self, listener: tokio::net::TcpListener) {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(self.clone().http_connection(conn));
        }
    }

    async fn http_connection(self, mut conn: tokio::net::TcpStream) {
        let mut buf = Vec::new();
        loop {
            let Some(head_end) = read_until_head_end(&mut conn, &mut buf).await else {
                return;
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let body_start = head_end + 4;
            while buf.len() < body_start + length {
                let mut chunk = [0u8; 8192];
                match conn.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let status = match ExportTraceServiceRequest::decode(&buf[body_start..body_start + length]) {
                Ok(request) if head.starts_with("post /v1/traces ") => {
                    self.record(request);
                    "200 OK"
                }
                _ => "400 Bad Request",
            };
            buf.drain(..body_start + length);
            let response =
                format!("HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n");
            if conn.write_all(response.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

/// Reads into `buf` until it holds a whole request head; the offset of its `\r\n\r\n`.
async fn read_until_head_end(conn: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    for _ in 0..10_000 {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i);
        }
        let mut chunk = [0u8; 8192];
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    None
}

/// One cluster at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn one_series() -> WriteRequest {
    WriteRequest {
        timeseries: vec![TimeSeries {
            labels: vec![
                Label {
                    name: "__name__".into(),
                    value: "traced_metric".into(),
                },
                Label {
                    name: "job".into(),
                    value: "tracing-test".into(),
                },
            ],
            samples: vec![Sample {
                value: 1.0,
                timestamp: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64,
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn describe(spans: &[Received]) -> String {
    spans
        .iter()
        .map(|s| {
            format!(
                "{} {} trace={} span={} parent={}",
                s.target, s.name, s.trace_id, s.span_id, s.parent_span_id
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn one_trace_over_otlp_grpc() {
    one_trace_spans_client_distributor_and_ingester("grpc");
}

#[test]
fn one_trace_over_otlp_http_protobuf() {
    one_trace_spans_client_distributor_and_ingester("http/protobuf");
}

fn one_trace_spans_client_distributor_and_ingester(protocol: &str) {
    let _serial = serial();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let port = free_port().unwrap();
    let receiver = Receiver::default();
    if protocol == "grpc" {
        let server = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve(([127, 0, 0, 1], port).into());
        rt.spawn(server);
    } else {
        let listener = rt.block_on(tokio::net::TcpListener::bind(("127.0.0.1", port))).unwrap();
        rt.spawn(receiver.clone().serve_http(listener));
    }

    let cluster = Cluster::start(ClusterOptions {
        ingesters: 1,
        distributors: 1,
        replication_factor: 1,
        env: vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), format!("http://127.0.0.1:{port}")),
            ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), protocol.into()),
            // Export within 100 ms instead of the default 5 s.
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
        ],
        ..ClusterOptions::default()
    })
    .unwrap();

    let url = cluster.distributor(0).push_url();
    let body = encode_write_request(&one_series()).unwrap();
    let status = rt.block_on(async {
        let client = http_client(Duration::from_secs(10)).unwrap();
        client
            .post(&url)
            .header("Content-Encoding", "snappy")
            .header("Content-Type", "application/x-protobuf")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .header("traceparent", format!("00-{CLIENT_TRACE_ID}-{CLIENT_SPAN_ID}-01"))
            .body(body)
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    assert_eq!(status.unwrap(), 200, "push to {url}");

    let in_trace = |s: &Received| s.trace_id == CLIENT_TRACE_ID;
    let ingester_push = |s: &Received| s.target == "ingester" && s.name == "heddle.ingester.v1.Ingester/Push";
    let arrived = wait_until(Duration::from_secs(30), || {
        let spans = receiver.spans();
        spans.iter().any(|s| in_trace(s) && ingester_push(s))
            && spans.iter().any(|s| in_trace(s) && s.target == "distributor")
    });
    let spans: Vec<Received> = receiver.spans().into_iter().filter(in_trace).collect();
    assert!(
        arrived,
        "spans of both processes in trace {CLIENT_TRACE_ID} over {protocol}; received in that trace:\n{}\nall:\n{}",
        describe(&spans),
        describe(&receiver.spans())
    );

    let distributor: Vec<&Received> = spans.iter().filter(|s| s.target == "distributor").collect();
    let ingester: Vec<&Received> = spans.iter().filter(|s| ingester_push(s)).collect();
    assert_ne!(
        distributor[0].pid,
        ingester[0].pid,
        "the spans must come from two processes:\n{}",
        describe(&spans)
    );
    let root = distributor
        .iter()
        .find(|s| s.parent_span_id == CLIENT_SPAN_ID)
        .unwrap_or_else(|| {
            panic!(
                "no distributor span is a child of the client's span:\n{}",
                describe(&spans)
            )
        });
    assert!(root.name.starts_with("POST "), "the request span: {}", root.name);
    for push in &ingester {
        assert!(
            distributor.iter().any(|d| d.span_id == push.parent_span_id),
            "the ingester's Push span must be a child of a distributor span:\n{}",
            describe(&spans)
        );
    }
}
