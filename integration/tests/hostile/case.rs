//! What every hostile case is made of: the request, the answer it must get, and the helpers that build
//! hostile bodies.

use heddle_model::TENANT_HEADER;
use heddle_proto::admin::admin_client::AdminClient;
use heddle_proto::prometheus::{Query, ReadRequest, WriteRequest};
use heddle_testkit::codec::{encode_write_request, snappy_compress, snappy_decompress};
use prost::Message;
use std::time::Duration;

pub(crate) const WITNESS: &str = "witness";
pub(crate) const ATTACKER: &str = "mallory";
pub(crate) const TOKEN: &str = "s3cr3t-admin-token";
pub(crate) const PROTOBUF: &str = "application/x-protobuf";
pub(crate) const HOUR: i64 = 3_600_000;

/// One hostile request and what must come of it.
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) method: reqwest::Method,
    pub(crate) path: String,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) status: u16,
    pub(crate) contains: Vec<&'static str>,
    /// Substrings the answer must not hold (another tenant's data).
    pub(crate) lacks: Vec<&'static str>,
    /// For a case that could cost memory: the most the process's resident set may grow while it is answered
    /// (its peak, `VmHWM`, reset before the case).
    pub(crate) peak_growth: Option<u64>,
}

impl Case {
    pub(crate) fn new(name: &'static str, method: reqwest::Method, path: &str) -> Case {
        Case {
            name,
            method,
            path: path.to_owned(),
            headers: vec![(TENANT_HEADER, ATTACKER.to_owned())],
            body: Vec::new(),
            status: 200,
            contains: Vec::new(),
            lacks: Vec::new(),
            peak_growth: None,
        }
    }

    pub(crate) fn get(name: &'static str, path: &str) -> Case {
        Case::new(name, reqwest::Method::GET, path)
    }

    pub(crate) fn post(name: &'static str, path: &str, body: Vec<u8>) -> Case {
        Case {
            body,
            ..Case::new(name, reqwest::Method::POST, path)
        }
    }

    /// Remote write with the headers Prometheus sends.
    pub(crate) fn push(name: &'static str, body: Vec<u8>) -> Case {
        Case::post(name, "/api/v1/push", body)
            .header("Content-Type", PROTOBUF)
            .header("Content-Encoding", "snappy")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
    }

    /// Remote read with the headers Prometheus sends.
    pub(crate) fn read(name: &'static str, req: &ReadRequest) -> Case {
        Case::post(name, "/prometheus/api/v1/read", snappy(&req.encode_to_vec()))
            .header("Content-Type", PROTOBUF)
            .header("Content-Encoding", "snappy")
            .header("X-Prometheus-Remote-Read-Version", "0.1.0")
    }

    /// Sets a header, replacing an earlier value.
    pub(crate) fn header(mut self, name: &'static str, value: &str) -> Case {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name, value.to_owned()));
        self
    }

    /// Replaces the tenant header(s): none, or several.
    pub(crate) fn tenants(mut self, tenants: &[&str]) -> Case {
        self.headers.retain(|(n, _)| *n != TENANT_HEADER);
        for t in tenants {
            self.headers.push((TENANT_HEADER, (*t).to_owned()));
        }
        self
    }

    pub(crate) fn admin(self) -> Case {
        self.tenants(&[])
    }

    pub(crate) fn token(self, token: &str) -> Case {
        self.header("Authorization", &format!("Bearer {token}"))
    }

    pub(crate) fn want(mut self, status: u16, contains: &[&'static str]) -> Case {
        self.status = status;
        self.contains = contains.to_vec();
        self
    }

    pub(crate) fn lacks(mut self, words: &[&'static str]) -> Case {
        self.lacks = words.to_vec();
        self
    }

    /// Asserts that answering the case grows the process's peak resident set by at most `bytes`.
    pub(crate) fn peak_growth_below(mut self, bytes: u64) -> Case {
        self.peak_growth = Some(bytes);
        self
    }
}

pub(crate) fn snappy(raw: &[u8]) -> Vec<u8> {
    snappy_compress(raw).expect("snappy")
}

pub(crate) fn write(series: Vec<heddle_proto::prometheus::TimeSeries>) -> Vec<u8> {
    encode_write_request(&WriteRequest {
        timeseries: series,
        ..Default::default()
    })
    .expect("encode")
}

pub(crate) fn series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> heddle_proto::prometheus::TimeSeries {
    heddle_testkit::timeseries(labels, samples)
}

pub(crate) fn read_req(queries: Vec<Query>) -> ReadRequest {
    ReadRequest {
        queries,
        ..Default::default()
    }
}

/// A snappy body whose header declares `len` decompressed bytes but holds almost nothing.
pub(crate) fn lying_snappy(len: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut v = len;
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(&[0x00, 0x00]);
    out
}

/// A write request with one series whose single label is given as raw bytes (not necessarily UTF-8).
pub(crate) fn write_raw_label(name: &[u8], value: &[u8], now: i64) -> Vec<u8> {
    pub(crate) fn field(tag: u8, bytes: &[u8], out: &mut Vec<u8>) {
        out.push(tag);
        prost::encoding::encode_varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    }
    let mut label = Vec::new();
    field(0x0a, name, &mut label);
    field(0x12, value, &mut label);
    let sample = heddle_proto::prometheus::Sample {
        value: 1.0,
        timestamp: now,
    }
    .encode_to_vec();
    let mut ts = Vec::new();
    field(0x0a, &label, &mut ts);
    field(0x12, &sample, &mut ts);
    let mut req = Vec::new();
    field(0x0a, &ts, &mut req);
    snappy(&req)
}

/// A gRPC call and the status code it must end with (the message must hold `contains`).
pub(crate) struct GrpcCase {
    pub(crate) name: &'static str,
    pub(crate) code: tonic::Code,
    pub(crate) contains: &'static str,
    /// `Some` when the call succeeded: what it answered, which must not hold the witness tenant's data.
    pub(crate) call: fn(std::net::SocketAddr) -> BoxedCall,
}

pub(crate) type BoxedCall = std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, tonic::Status>> + Send>>;

pub(crate) fn request<T>(msg: T, tenant: Option<&str>, authorization: Option<&str>) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    if let Some(t) = tenant {
        req.metadata_mut().insert("x-scope-orgid", t.parse().expect("ascii"));
    }
    if let Some(a) = authorization {
        req.metadata_mut().insert("authorization", a.parse().expect("ascii"));
    }
    req.set_timeout(Duration::from_secs(10));
    req
}

pub(crate) async fn admin(addr: std::net::SocketAddr) -> AdminClient<tonic::transport::Channel> {
    AdminClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to Admin")
}

pub(crate) async fn send(http: &reqwest::Client, base: &str, case: &Case) -> (u16, String) {
    let mut req = http
        .request(case.method.clone(), format!("{base}{}", case.path))
        .body(case.body.clone());
    for (name, value) in &case.headers {
        req = req.header(*name, value);
    }
    match req.send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let bytes = resp.bytes().await.unwrap_or_default();
            // Remote-read answers are snappy protobuf: look at the decompressed bytes.
            let text = match snappy_decompress(&bytes) {
                Ok(raw) => String::from_utf8_lossy(&raw).into_owned(),
                Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
            };
            (status, text)
        }
        Err(e) => (0, heddle_testkit::client::error_chain(&e)),
    }
}
