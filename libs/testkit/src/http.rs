//! A minimal blocking HTTP/1.1 GET, for readiness probes from synchronous test code without a runtime.

use crate::TestkitError;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Sends `GET path` to `addr` with `Connection: close` and returns the status code and the body (lossy UTF-8,
/// chunked transfer-encoding left as is). Each socket operation is bounded by `timeout`.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, String), TestkitError> {
    let url = format!("http://{addr}{path}");
    let fail = |detail: String| TestkitError::Http {
        url: url.clone(),
        detail,
    };
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| fail(format!("connect: {e}")))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| fail(format!("socket options: {e}")))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: */*\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| fail(format!("write: {e}")))?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(|e| fail(format!("read: {e}")))?;
    parse_response(&raw).ok_or_else(|| fail(format!("malformed response: {:?}", String::from_utf8_lossy(&raw))))
}

fn parse_response(raw: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status_line = head.lines().next()?;
    let mut parts = status_line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/") {
        return None;
    }
    let status = parts.next()?.parse().ok()?;
    Some((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn parses_status_and_body() {
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nready"),
            Some((200, "ready".to_owned()))
        );
        assert_eq!(
            parse_response(b"HTTP/1.1 503 Service Unavailable\r\n\r\n"),
            Some((503, String::new()))
        );
        assert_eq!(parse_response(b"garbage"), None);
    }

    #[test]
    fn talks_to_a_real_socket() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).expect("read");
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .expect("write");
            req
        });
        let (status, body) = http_get(addr, "/ready", Duration::from_secs(5)).expect("get");
        assert_eq!((status, body.as_str()), (200, "ok"));
        let req = server.join().expect("server thread");
        assert!(req.starts_with("GET /ready HTTP/1.1\r\n"), "{req}");
    }

    #[test]
    fn connection_refused_is_an_error() {
        let port = crate::free_port().expect("port");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        assert!(http_get(addr, "/ready", Duration::from_secs(1)).is_err());
    }
}
