//! The two sides of the oracle: a real Prometheus with its remote-write receiver, and a client for the
//! Prometheus HTTP API that heddle serves too (under `/prometheus`).

use heddle_proto::prometheus::WriteRequest;
use heddle_testkit::{ManagedProcess, free_port, push};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A Prometheus that only receives remote writes (no scrapes), killed on drop.
pub struct Prometheus {
    _process: ManagedProcess,
    port: u16,
}

impl Prometheus {
    /// Starts `bin` on a free 127.0.0.1 port with its data in `dir/<name>-data` and waits until it is ready.
    pub fn start(bin: &Path, dir: &Path, name: &str) -> Prometheus {
        Self::start_with(bin, dir, name, &[])
    }

    /// [`Prometheus::start`] with more arguments (`--enable-feature=...`).
    pub fn start_with(bin: &Path, dir: &Path, name: &str, args: &[&str]) -> Prometheus {
        let port = free_port().expect("port");
        let config = dir.join(format!("{name}.yml"));
        std::fs::write(&config, "global:\n  scrape_interval: 1m\n").expect("write prometheus config");
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join(format!("{name}-data")).display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--web.enable-remote-write-receiver")
            .arg("--log.level=warn")
            .args(args);
        let mut process = ManagedProcess::spawn(name, cmd, dir).expect("spawn prometheus");
        process
            .wait_http_ok(([127, 0, 0, 1], port).into(), "/-/ready", Duration::from_secs(60))
            .expect("prometheus ready");
        Prometheus {
            _process: process,
            port,
        }
    }

    /// The API base: `<base>/api/v1/query` is the query endpoint.
    pub fn api_base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The remote-write receiver.
    pub fn write_url(&self) -> String {
        format!("{}/api/v1/write", self.api_base())
    }

    /// What it logged to stderr so far.
    #[allow(dead_code)] // Not every test binary that includes this module reads the log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._process.log_paths().1).unwrap_or_default()
    }
}

/// Sends every request to every URL, in order, and asserts each one is accepted (2xx).
pub async fn write_all(http: &reqwest::Client, urls: &[String], requests: &[WriteRequest]) {
    for (i, req) in requests.iter().enumerate() {
        for url in urls {
            let outcome = push(http, url, None, req)
                .await
                .unwrap_or_else(|e| panic!("remote write {i} to {url}: {e}"));
            assert!(
                outcome.is_success(),
                "remote write {i} to {url}: {}: {}",
                outcome.status,
                outcome.body
            );
        }
    }
}

/// What an API call answered: the `data` of a success, or the error.
#[derive(Debug, Clone)]
pub enum Answer {
    Data(Value),
    Error {
        status: u16,
        /// `errorType` of the JSON error body; empty when the body is not the API's JSON.
        error_type: String,
        message: String,
    },
}

impl Answer {
    /// A one-line description for failure reports.
    pub fn describe(&self) -> String {
        match self {
            Answer::Data(d) if d["resultType"].is_string() => format!("success, resultType {}", d["resultType"]),
            Answer::Data(d) => format!("success, {}", excerpt(&d.to_string(), 160)),
            Answer::Error {
                status,
                error_type,
                message,
            } => format!("HTTP {status} errorType {error_type:?}: {}", excerpt(message, 160)),
        }
    }
}

pub fn excerpt(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

/// Percent-encodes a query-string or form value.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `k=v&k=v`, percent-encoded as Go's `url.Values.Encode` does (Grafana's `match[]` becomes `match%5B%5D`).
pub fn form(params: &[(&str, String)]) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Milliseconds as the decimal seconds the API takes (exact).
pub fn secs(ms: i64) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

/// The Prometheus HTTP API at one base URL.
#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
}

impl Api {
    /// `GET <base><path>?<query>`.
    pub async fn get(&self, path: &str, params: &[(&str, String)]) -> Answer {
        let url = format!("{}{path}?{}", self.base, form(params));
        self.answer(self.http.get(&url), &url).await
    }

    /// `POST <base><path>` with a form body, as Grafana sends queries.
    pub async fn post_form(&self, path: &str, params: &[(&str, String)]) -> Answer {
        let url = format!("{}{path}", self.base);
        let req = self
            .http
            .post(&url)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form(params));
        self.answer(req, &url).await
    }

    async fn answer(&self, req: reqwest::RequestBuilder, url: &str) -> Answer {
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                return Answer::Error {
                    status: 0,
                    error_type: String::new(),
                    message: format!("{url}: {e}"),
                };
            }
        };
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap_or_default();
        match serde_json::from_str::<Value>(&body) {
            Ok(v) if v["status"] == "success" && (200..300).contains(&status) => Answer::Data(v["data"].clone()),
            Ok(v) => Answer::Error {
                status,
                error_type: v["errorType"].as_str().unwrap_or_default().to_owned(),
                message: v["error"].as_str().unwrap_or(&body).to_owned(),
            },
            Err(_) => Answer::Error {
                status,
                error_type: String::new(),
                message: body,
            },
        }
    }
}
