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

/// Reads one HTTP/1.1 request (head, then a `Content-Length` body) from `conn`
/// and returns it; what arrived when the peer closed or failed. A stub must
/// read the request before it answers and closes: closing over unread bytes
/// sends a reset, and a client that sees it first reports the server as
/// unreachable instead of reading the answer.
pub async fn read_request<S: tokio::io::AsyncRead + Unpin>(conn: &mut S) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            let body = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if seen.len() >= end + 4 + body {
                return seen;
            }
        }
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return seen,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::read_request;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn reads_the_head_and_a_body_sent_in_pieces() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let sent = tokio::spawn(async move {
            for piece in [
                "POST /q HTTP/1.1\r\nContent-",
                "Length: 7\r\n\r\nque",
                "ry=x",
            ] {
                client.write_all(piece.as_bytes()).await.unwrap();
                tokio::task::yield_now().await;
            }
            client // kept open: the reader must stop at the body's end
        });
        let got = read_request(&mut server).await;
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "POST /q HTTP/1.1\r\nContent-Length: 7\r\n\r\nquery=x"
        );
        drop(sent.await.unwrap());
    }

    #[tokio::test]
    async fn returns_what_came_when_the_peer_closes_early() {
        let (mut client, mut server) = tokio::io::duplex(64);
        client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        drop(client);
        assert_eq!(read_request(&mut server).await, b"GET / HTTP/1.1\r\n");
    }
}
