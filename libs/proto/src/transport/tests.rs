//! End-to-end tests of the gRPC transport: a real tonic server on 127.0.0.1 serving a fake ingester, called
//! through [`GrpcIngesterClient`] and through plain generated/prost clients.

use super::*;
use crate::client::IngesterClient;
use crate::ingester::ingester_client::IngesterClient as GeneratedClient;
use crate::ingester::{
    LabelNamesRequest, LabelValuesRequest, MetadataError, MetricsMetadataRequest, PushResponse, QueryRequest,
    SeriesError, SeriesRequest,
};
use crate::prometheus::{self, ChunkedSeries, Label, TimeSeries, WriteRequest};
use crate::testing::{Call, FakeIngester, Fault, PushAnswer, PushFn};
use bytes::Bytes;
use futures::StreamExt;
use heddle_model::TenantId;
use prost::Message;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;
use tonic::transport::Channel;
use tonic::transport::server::TcpIncoming;

/// The shared fake, made to behave by tenant: "slow" never answers, "refuse" fails every call,
/// "midstream" and "stall" break a query stream after its first message, anything else succeeds. Pushes
/// are answered with the body's length and a per-series error naming the tenant, so the response fields
/// are seen to travel back.
fn fake() -> FakeIngester {
    let echo: PushFn = Arc::new(|tenant: &TenantId, body: &Bytes| {
        Ok(PushResponse {
            samples_ingested: body.len() as u64,
            errors: vec![SeriesError {
                series_index: 1,
                reason: "err-heddle-sample-out-of-order".into(),
                message: format!("tenant {tenant}: out of order"),
                samples_rejected: 2,
            }],
            metadata_errors: vec![MetadataError {
                reason: "err-heddle-max-metadata-per-user".into(),
                message: format!("tenant {tenant}: too many families"),
            }],
        })
    });
    let mut fake = FakeIngester::new()
        .with_push_answer(PushAnswer::Custom(echo))
        .with_tenant_fault("slow", Fault::Hang)
        .with_tenant_fault("refuse", Fault::Fail(refused()))
        .with_tenant_fault(
            "midstream",
            Fault::BreakStream {
                after: 1,
                error: tonic::Status::internal("chunk 7 of series m1 is corrupt"),
            },
        )
        .with_tenant_fault("stall", Fault::StallStream { after: 1 })
        .with_metadata(prometheus::MetricMetadata {
            r#type: 2,
            metric_family_name: "up".into(),
            help: "is it up".into(),
            unit: String::new(),
        });
    for i in 0..3 {
        let series = chunked(&format!("m{i}"));
        let labels =
            heddle_model::Labels::from_unsorted(series.labels.iter().map(|l| (l.name.as_str(), l.value.as_str())))
                .unwrap();
        fake = fake.with_series(labels, series.chunks);
    }
    fake
}

fn refused() -> tonic::Status {
    tonic::Status::resource_exhausted("tenant refuse is over its series limit (err-heddle-max-series-per-user)")
}

fn chunked(name: &str) -> ChunkedSeries {
    ChunkedSeries {
        labels: vec![
            Label {
                name: "__name__".into(),
                value: name.into(),
            },
            Label {
                name: "job".into(),
                value: "j".into(),
            },
        ],
        chunks: vec![prometheus::Chunk {
            min_time_ms: 11,
            max_time_ms: 12,
            r#type: prometheus::chunk::Encoding::Xor as i32,
            data: vec![0, 1, 2, 3],
        }],
    }
}

struct Harness {
    fake: Arc<FakeIngester>,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Harness {
    async fn start() -> Self {
        let fake = Arc::new(fake());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = ingester_service(fake.clone());
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
                    let _ = stopped.await;
                }),
        );
        Self {
            fake,
            addr,
            stop: Some(stop),
            server,
        }
    }

    fn client(&self, timeout: Duration) -> GrpcIngesterClient {
        GrpcIngesterClient::connect_lazy(&self.addr.to_string(), timeout).unwrap()
    }

    async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.server)
            .await
            .expect("server stops")
            .unwrap()
            .unwrap();
    }
}

fn tenant(id: &str) -> TenantId {
    TenantId::new(id).unwrap()
}

fn write_request() -> WriteRequest {
    WriteRequest {
        timeseries: (0..3)
            .map(|i| TimeSeries {
                labels: vec![Label {
                    name: "__name__".into(),
                    value: format!("metric_{i}"),
                }],
                samples: vec![prometheus::Sample {
                    value: f64::from_bits(heddle_model::STALE_NAN_BITS),
                    timestamp: i,
                }],
                ..Default::default()
            })
            .collect(),
        metadata: vec![],
    }
}

#[tokio::test]
async fn push_passes_bytes_and_tenant_through() {
    let h = Harness::start().await;
    let client = h.client(Duration::from_secs(10));
    let bodies = [
        ("encoded WriteRequest", Bytes::from(write_request().encode_to_vec())),
        ("empty body", Bytes::new()),
        // Push does not decode: even bytes that are not protobuf arrive untouched for the ingester to refuse.
        ("not protobuf", Bytes::from_static(&[0xff, 0x00, 0x0e, 0x80])),
        ("large body", Bytes::from(vec![0x5a; 6 << 20])),
    ];
    for (name, body) in &bodies {
        let response = client.push(&tenant("team-a"), body.clone()).await.unwrap();
        assert_eq!(response.samples_ingested, body.len() as u64, "case {name}");
        assert_eq!(response.errors[0].message, "tenant team-a: out of order", "case {name}");
        assert_eq!(
            response.metadata_errors[0].message, "tenant team-a: too many families",
            "case {name}"
        );
        let (got_tenant, got_body) = h.fake.pushes().pop().unwrap();
        assert_eq!(got_tenant.as_str(), "team-a", "case {name}");
        assert_eq!(&got_body, body, "case {name}");
    }
    h.stop().await;
}

#[tokio::test]
async fn push_is_an_ordinary_protobuf_call_on_the_wire() {
    let h = Harness::start().await;
    // A client that knows nothing of raw bytes: plain prost WriteRequest through the standard codec.
    let mut grpc = tonic::client::Grpc::new(h.channel().await);
    grpc.ready().await.unwrap();
    let mut request = tonic::Request::new(write_request());
    request
        .metadata_mut()
        .insert(TENANT_METADATA, "prost-client".parse().unwrap());
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/heddle.ingester.v1.Ingester/Push");
    let codec = tonic_prost::ProstCodec::<WriteRequest, PushResponse>::default();
    grpc.unary(request, path, codec).await.unwrap();
    let (got_tenant, got_body) = h.fake.pushes().pop().unwrap();
    assert_eq!(got_tenant.as_str(), "prost-client");
    assert_eq!(got_body, write_request().encode_to_vec());
    h.stop().await;
}

#[tokio::test]
async fn query_stream_streams_every_message_and_errors_midway() {
    let h = Harness::start().await;
    let client = h.client(Duration::from_secs(10));
    let req = QueryRequest {
        start_timestamp_ms: 10,
        end_timestamp_ms: 20,
        matchers: vec![prometheus::LabelMatcher {
            r#type: prometheus::label_matcher::Type::Re as i32,
            name: "__name__".into(),
            value: "m.*".into(),
        }],
    };
    let stream = client.query_stream(&tenant("team-b"), req.clone()).await.unwrap();
    let got: Vec<_> = stream.map(Result::unwrap).collect().await;
    let names: Vec<_> = got.iter().map(|r| r.series[0].labels[0].value.as_str()).collect();
    assert_eq!(names, ["m0", "m1", "m2"]);
    assert_eq!(got[2].series[0], chunked("m2"));
    assert_eq!(h.fake.calls().pop().unwrap(), Call::QueryStream(tenant("team-b"), req));

    let mut stream = client
        .query_stream(&tenant("midstream"), QueryRequest::default())
        .await
        .unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    let err = stream.next().await.unwrap().unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    assert_eq!(err.message(), "chunk 7 of series m1 is corrupt");
    assert!(stream.next().await.is_none());
    h.stop().await;
}

#[tokio::test]
async fn label_and_series_calls_carry_the_tenant() {
    let h = Harness::start().await;
    let client = h.client(Duration::from_secs(10));
    let t = tenant("team-c");
    // The fake records each request as it arrived (tenant and fields) and answers from its series.
    let names_req = LabelNamesRequest {
        start_timestamp_ms: 42,
        ..Default::default()
    };
    let names = client.label_names(&t, names_req.clone()).await.unwrap();
    assert_eq!(names.names, ["__name__", "job"]);
    assert_eq!(h.fake.calls().pop().unwrap(), Call::LabelNames(t.clone(), names_req));
    let values_req = LabelValuesRequest {
        name: "job".into(),
        ..Default::default()
    };
    let values = client.label_values(&t, values_req.clone()).await.unwrap();
    assert_eq!(values.values, ["j"]);
    assert_eq!(h.fake.calls().pop().unwrap(), Call::LabelValues(t.clone(), values_req));
    let series_req = SeriesRequest {
        selectors: vec![Default::default(); 2],
        ..Default::default()
    };
    let series = client.series(&t, series_req.clone()).await.unwrap();
    assert_eq!(series.series[0].labels, chunked("m0").labels);
    assert_eq!(series.series.len(), 3);
    assert_eq!(h.fake.calls().pop().unwrap(), Call::Series(t.clone(), series_req));
    let metadata_req = MetricsMetadataRequest {
        limit: 3,
        limit_per_metric: -1,
        metric: "up".into(),
    };
    let metadata = client.metrics_metadata(&t, metadata_req.clone()).await.unwrap();
    assert_eq!(metadata.metadata[0].help, "is it up");
    assert_eq!(
        h.fake.calls().pop().unwrap(),
        Call::MetricsMetadata(t.clone(), metadata_req)
    );
    h.stop().await;
}

#[tokio::test]
async fn ingester_errors_keep_their_code_and_message() {
    let h = Harness::start().await;
    let client = h.client(Duration::from_secs(10));
    let t = tenant("refuse");
    let want = refused();
    let errors = [
        ("push", client.push(&t, Bytes::new()).await.unwrap_err()),
        (
            "query_stream",
            client.query_stream(&t, QueryRequest::default()).await.err().unwrap(),
        ),
        (
            "label_names",
            client.label_names(&t, Default::default()).await.unwrap_err(),
        ),
        (
            "label_values",
            client.label_values(&t, Default::default()).await.unwrap_err(),
        ),
        ("series", client.series(&t, Default::default()).await.unwrap_err()),
    ];
    for (name, err) in errors {
        assert_eq!(err.code(), want.code(), "case {name}");
        assert_eq!(err.message(), want.message(), "case {name}");
    }
    h.stop().await;
}

#[tokio::test]
async fn calls_past_the_timeout_fail_with_deadline_exceeded() {
    let h = Harness::start().await;
    let client = h.client(Duration::from_millis(200));
    let err = client.push(&tenant("slow"), Bytes::new()).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    let err = client
        .query_stream(&tenant("slow"), QueryRequest::default())
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");

    // The deadline covers the whole stream, not only its first message.
    let mut stream = client
        .query_stream(&tenant("stall"), QueryRequest::default())
        .await
        .unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    let err = stream.next().await.unwrap().unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(stream.next().await.is_none());
    h.stop().await;
}

#[tokio::test]
async fn missing_or_invalid_tenant_is_refused_with_a_precise_status() {
    let h = Harness::start().await;
    let mut raw = GeneratedClient::new(h.channel().await);
    let cases: [(&str, Vec<&str>, Code, &str); 4] = [
        (
            "missing",
            vec![],
            Code::Unauthenticated,
            "no tenant id: the request has no x-scope-orgid metadata",
        ),
        (
            "bad char",
            vec!["team/a"],
            Code::InvalidArgument,
            "invalid tenant id in x-scope-orgid metadata",
        ),
        (
            "reserved",
            vec![".."],
            Code::InvalidArgument,
            "invalid tenant id in x-scope-orgid metadata",
        ),
        (
            "two tenants",
            vec!["a", "b"],
            Code::InvalidArgument,
            "x-scope-orgid metadata has 2 values",
        ),
    ];
    for (name, values, code, message) in cases {
        let mut request = tonic::Request::new(Bytes::from_static(b"x"));
        for v in values {
            request.metadata_mut().append(TENANT_METADATA, v.parse().unwrap());
        }
        let err = raw.push(request).await.unwrap_err();
        assert_eq!(err.code(), code, "case {name}: {err:?}");
        assert!(err.message().starts_with(message), "case {name}: {:?}", err.message());
    }
    assert!(h.fake.calls().is_empty(), "no refused call reached the ingester");
    h.stop().await;
}

#[test]
fn tenant_from_metadata_accepts_a_valid_id() {
    let mut metadata = tonic::metadata::MetadataMap::new();
    metadata.insert(TENANT_METADATA, "tenant-1".parse().unwrap());
    assert_eq!(tenant_from_metadata(&metadata).unwrap().as_str(), "tenant-1");
}

/// `with_credentials` sends the token on every call kind (unary, raw push, stream), so an ingester that checks
/// it with [`BearerToken::verify`] answers; the same client without it is refused.
#[tokio::test]
async fn credentials_travel_with_every_call() {
    let token = BearerToken::parse("cluster-token").unwrap();
    let check = token.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service = tonic::service::interceptor::InterceptedService::new(
        ingester_service(Arc::new(fake())),
        move |req: tonic::Request<()>| {
            let header = req.metadata().get(AUTHORIZATION_METADATA).map(|v| v.as_bytes());
            check
                .verify(header)
                .map(|()| req)
                .map_err(|r| tonic::Status::unauthenticated(r.reason()))
        },
    );
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
                let _ = stopped.await;
            }),
    );
    let plain = GrpcIngesterClient::connect_lazy(&addr.to_string(), Duration::from_secs(10)).unwrap();
    let with = plain.clone().with_credentials(&token);
    let t = tenant("alpha");
    let body = Bytes::from(write_request().encode_to_vec());
    with.push(&t, body.clone()).await.expect("push with the token");
    with.label_names(&t, LabelNamesRequest::default())
        .await
        .expect("label names with the token");
    let stream = with
        .query_stream(&t, QueryRequest::default())
        .await
        .expect("query with the token");
    assert!(
        stream.collect::<Vec<_>>().await.iter().all(Result::is_ok),
        "the stream answered"
    );
    let refused = plain.push(&t, body).await.expect_err("push without the token");
    assert_eq!(
        (refused.code(), refused.message()),
        (Code::Unauthenticated, "missing_token")
    );
    let refused = plain
        .label_names(&t, LabelNamesRequest::default())
        .await
        .expect_err("label names without the token");
    assert_eq!(refused.code(), Code::Unauthenticated);
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("server stops")
        .unwrap()
        .unwrap();
}
