//! The accept loop against real sockets on 127.0.0.1: a slow header is cut off, connections past the limit
//! wait for a free slot, and shutdown lets them finish.

use super::*;
use axum::routing::get;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest any step of these tests waits: far beyond the timeouts under test, so only a hang fails.
const BOUND: Duration = Duration::from_secs(10);

struct Server {
    addr: SocketAddr,
    registry: Registry,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(read_header_timeout: Duration, conn_limit: usize) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut registry = Registry::default();
    let options = HttpServerOptions::new(read_header_timeout, conn_limit, &mut registry);
    let router = Router::new().route("/x", get(|| async { "ok" }));
    let stop = CancellationToken::new();
    let task = tokio::spawn(serve_http(listener, router, stop.clone(), options));
    Server {
        addr,
        registry,
        stop,
        task,
    }
}

impl Server {
    fn metrics(&self) -> String {
        crate::encode_metrics(&self.registry)
    }

    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(BOUND, self.task)
            .await
            .expect("the server stops")
            .unwrap()
            .unwrap();
    }
}

/// Sends one keep-alive request on `stream` and reads its response head and body ("ok").
async fn request(stream: &mut TcpStream) -> String {
    stream.write_all(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut buf = vec![0u8; 1024];
    let mut got = String::new();
    while !got.ends_with("ok") {
        let n = tokio::time::timeout(BOUND, stream.read(&mut buf))
            .await
            .expect("a response")
            .unwrap();
        assert!(n > 0, "closed before the response: {got:?}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    got
}

/// Reads until the server closes the connection; returns how long that took.
async fn closed_after(stream: &mut TcpStream) -> Duration {
    let start = tokio::time::Instant::now();
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(BOUND, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return start.elapsed(),
            Ok(Ok(_)) => continue,
            Err(_) => panic!("the server kept a half-sent header open for {BOUND:?}"),
        }
    }
}

#[tokio::test]
async fn a_half_sent_header_is_cut_off_after_the_timeout() {
    let server = start(Duration::from_millis(300), 100).await;
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    slow.write_all(b"GET /x HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.unwrap();
    let took = closed_after(&mut slow).await;
    assert!(
        took >= Duration::from_millis(250),
        "closed before the timeout: {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "not closed within timeout + margin: {took:?}"
    );

    // A complete request on another connection is served as usual.
    let mut ok = TcpStream::connect(server.addr).await.unwrap();
    assert!(request(&mut ok).await.starts_with("HTTP/1.1 200"));
    drop(ok);
    let metrics = server.metrics();
    assert!(
        metrics.contains("heddle_http_header_read_timeouts_total 1"),
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn connections_past_the_limit_wait_until_one_closes() {
    let server = start(Duration::from_secs(60), 2).await;
    let mut first = TcpStream::connect(server.addr).await.unwrap();
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    assert!(request(&mut first).await.starts_with("HTTP/1.1 200"));
    assert!(request(&mut second).await.starts_with("HTTP/1.1 200"));
    assert!(
        server.metrics().contains("heddle_http_open_connections 2"),
        "{}",
        server.metrics()
    );

    // The third connects (the kernel queues it) but is not served while two are open.
    let mut third = TcpStream::connect(server.addr).await.unwrap();
    third.write_all(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 256];
    let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut buf)).await;
    assert!(early.is_err(), "served past the connection limit: {early:?}");
    assert!(
        server.metrics().contains("heddle_http_connection_limit_waits_total 1"),
        "{}",
        server.metrics()
    );

    // Once one closes, the waiting connection is accepted and its request answered.
    drop(first);
    let mut got = String::new();
    while !got.ends_with("ok") {
        let n = tokio::time::timeout(BOUND, third.read(&mut buf))
            .await
            .expect("served once a slot was free")
            .unwrap();
        assert!(n > 0, "closed: {got:?}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    drop((second, third));
    server.stop().await;
}

#[tokio::test]
async fn shutdown_waits_for_open_connections_to_close() {
    let server = start(Duration::from_secs(60), 0).await;
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    assert!(request(&mut idle).await.starts_with("HTTP/1.1 200"));
    let addr = server.addr;
    server.stop().await;
    // The idle keep-alive connection was closed by the graceful shutdown, and nothing listens any more.
    closed_after(&mut idle).await;
    assert!(TcpStream::connect(addr).await.is_err());
}
