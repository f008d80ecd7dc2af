//! A real Prometheus server for tests: backfilled with the test's data by
//! `promtool`, started on 127.0.0.1 on a free port, stopped on drop.
//!
//! Needs Debian's `prometheus` package (server and `promtool`);
//! `scripts/test.sh` installs it. Without it the tests fail, they do not skip.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::free_addr;

/// How long a started server may take to report ready.
const READY_DEADLINE: Duration = Duration::from_secs(30);

/// Current Unix time in whole seconds.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`.
/// Each sample is (series, value, Unix seconds), e.g.
/// `("cpu{pod=\"web-1\"}", "0.5", now - 30)`; samples of one metric must be
/// adjacent and in time order. Values may be `NaN`, `+Inf`, `-Inf`.
pub fn openmetrics(samples: &[(&str, &str, i64)]) -> String {
    let mut out = String::new();
    for (series, value, at) in samples {
        writeln!(out, "{series} {value} {at}").expect("write to string");
    }
    out.push_str("# EOF\n");
    out
}

/// A running Prometheus; killed and reaped on drop.
pub struct PrometheusServer {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
    // Kept until drop: holds the TSDB and the config.
    _dir: tempfile::TempDir,
}

impl PrometheusServer {
    /// Backfills `openmetrics` (see [`openmetrics`]) and starts Prometheus on it.
    /// Panics, with what to do, when Prometheus is missing or does not start.
    pub fn start(openmetrics: &str) -> Self {
        Self::start_with(openmetrics, "global:\n  scrape_interval: 1m\n")
    }

    /// Starts Prometheus scraping `target` (an [`Exporter`]) every second,
    /// logging every query it answers ([`PrometheusServer::queries`]): a
    /// value the exporter changes shows in instant queries within about
    /// three seconds.
    pub fn scraping(target: SocketAddr) -> Self {
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n  query_log_file: QUERY_LOG\n\
             scrape_configs:\n  - job_name: exporter\n    static_configs:\n      - targets: ['{target}']\n"
        );
        Self::start_with("", &config)
    }

    /// How many queries the query log holds (servers started by
    /// [`PrometheusServer::scraping`]).
    pub fn queries(&self) -> usize {
        let log = self.log.with_file_name("queries.log");
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"query\""))
            .count()
    }

    fn start_with(openmetrics: &str, config_text: &str) -> Self {
        require_binary("prometheus");
        require_binary("promtool");
        let dir = tempfile::tempdir().expect("temp dir");
        let tsdb = dir.path().join("tsdb");
        std::fs::create_dir_all(&tsdb).expect("create tsdb dir");
        if openmetrics
            .lines()
            .any(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            backfill(dir.path(), &tsdb, openmetrics);
        }
        let config = dir.path().join("prometheus.yml");
        let query_log = dir.path().join("queries.log");
        let config_text = config_text.replace("QUERY_LOG", &query_log.display().to_string());
        std::fs::write(&config, config_text).expect("write config");
        let log = dir.path().join("prometheus.log");

        // The port is free when picked but could be taken before Prometheus
        // binds it: retry with another port.
        let mut last_log = String::new();
        for _ in 0..3 {
            let addr = free_addr();
            let out = std::fs::File::create(&log).expect("create log");
            let err = out.try_clone().expect("clone log handle");
            let mut child = Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", tsdb.display()))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--log.level=warn")
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .expect("spawn prometheus");
            match wait_ready(&mut child, addr) {
                Ok(()) => {
                    return Self {
                        child,
                        addr,
                        log,
                        _dir: dir,
                    }
                }
                Err(why) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_log = format!(
                        "{why}; log:\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
            }
        }
        panic!("prometheus did not start: {last_log}");
    }

    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Prometheus's own `/metrics` page (e.g. to count the queries it served).
    pub fn self_metrics(&self) -> String {
        let (status, body) = http_get(self.addr, "/metrics").expect("GET /metrics");
        assert_eq!(status, 200, "GET /metrics: {body}");
        body
    }

    /// How many `/api/v1/query` requests Prometheus has answered (any status).
    pub fn instant_queries_served(&self) -> u64 {
        self.self_metrics()
            .lines()
            .filter(|l| {
                l.starts_with("prometheus_http_requests_total{")
                    && l.contains("handler=\"/api/v1/query\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// The server's log so far, for assertion messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A scrape target on 127.0.0.1 serving `/metrics` with whatever text was
/// last [`Exporter::set`]; stopped on drop.
pub struct Exporter {
    addr: SocketAddr,
    body: std::sync::Arc<std::sync::Mutex<String>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Exporter {
    /// Starts serving `text` (Prometheus text format).
    pub fn start(text: &str) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an exporter");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let addr = listener.local_addr().expect("its address");
        let body = std::sync::Arc::new(std::sync::Mutex::new(text.to_string()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (b, st) = (body.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        let _ = conn.set_nonblocking(false);
                        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                        let mut buf = [0u8; 4096];
                        let _ = conn.read(&mut buf);
                        let text = b.lock().map(|t| t.clone()).unwrap_or_default();
                        let _ = write!(
                            conn,
                            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                            text.len()
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Exporter {
            addr,
            body,
            stop,
            thread: Some(thread),
        }
    }

    /// Its address, for [`PrometheusServer::scraping`].
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `text` from the next scrape on.
    pub fn set(&self, text: &str) {
        if let Ok(mut b) = self.body.lock() {
            *b = text.to_string();
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn require_binary(name: &str) {
    match Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`{name}` is not on PATH: these tests need a real Prometheus. Run scripts/test.sh \
             (it installs Debian's prometheus package, as CI does), or \
             `apt-get install -y --no-install-recommends prometheus`."
        ),
        Err(e) => panic!("cannot run `{name} --version`: {e}"),
    }
}

fn backfill(dir: &Path, tsdb: &Path, openmetrics: &str) {
    let input = dir.join("data.om");
    std::fs::write(&input, openmetrics).expect("write openmetrics");
    let out = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&input)
        .arg(tsdb)
        .stdin(Stdio::null())
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool backfill failed: {}{}\ninput:\n{openmetrics}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn wait_ready(child: &mut Child, addr: SocketAddr) -> Result<(), String> {
    let deadline = Instant::now() + READY_DEADLINE;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("prometheus exited with {status}"));
        }
        if let Ok((200, _)) = http_get(addr, "/-/ready") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("not ready within {READY_DEADLINE:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A minimal blocking HTTP/1.0 GET (status, body), so the harness needs no
/// HTTP client of its own.
fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}
