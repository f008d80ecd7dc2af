//! Loopback ports and a bare HTTP/1.1 client for the operator's listeners.

use std::net::SocketAddr;

/// 127.0.0.1 with a port nothing listens on right now (another process can
/// take it before the test binds it: harnesses that bind retry on a fresh one).
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

/// The port of [`free_addr`].
pub fn free_port() -> u16 {
    free_addr().port()
}

/// `GET path` on 127.0.0.1:port: (status code, whole response); (0, "") when
/// nothing answers.
pub async fn http_get(port: u16, path: &str) -> (u16, String) {
    http_request(port, "GET", path).await
}

/// `METHOD path` (no body) on 127.0.0.1:port: (status code, whole response);
/// (0, "") when nothing answers.
pub async fn http_request(port: u16, method: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return (0, String::new());
    };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if s.write_all(request.as_bytes()).await.is_err() {
        return (0, String::new());
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    let code = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, out)
}
