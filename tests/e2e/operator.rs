//! `deletion-cost run` as its own process, talking to the API server through
//! a recording proxy as the operator's ServiceAccount.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use deletion_cost_testkit::{eventually, free_addr};

use crate::cluster::Env;
use crate::proxy::Proxy;

/// How to start one operator process.
#[derive(Debug, Clone)]
pub struct Options {
    /// Its identity (the POD_NAME it would have).
    pub identity: String,
    /// `--qps` and `--burst`.
    pub qps: f64,
    /// `--burst`.
    pub burst: u32,
    /// `--shutdown-grace` in seconds.
    pub grace: u64,
    /// Another ServiceAccount token (a denied identity), else the operator's.
    pub token: Option<String>,
    /// Extra flags.
    pub args: Vec<String>,
    /// Another API server URL for its kubeconfig (an unreachable one), else the proxy.
    pub server: Option<String>,
}

impl Options {
    /// Defaults for `identity`: qps 20, burst 20, grace 10 s.
    pub fn new(identity: &str) -> Options {
        Options {
            identity: identity.into(),
            qps: 20.0,
            burst: 20,
            grace: 10,
            token: None,
            args: Vec::new(),
            server: None,
        }
    }

    /// With the operator's default write limits (`--qps 5 --burst 10`).
    pub fn at_default_limits(mut self) -> Options {
        self.qps = 5.0;
        self.burst = 10;
        self
    }

    /// Serving the hook (and the scale-in webhook) over TLS with `cert` and
    /// `key` (PEM files), as the API server calls a webhook.
    pub fn with_hook_tls(mut self, cert: &std::path::Path, key: &std::path::Path) -> Options {
        self.args.extend([
            "--hook-tls-cert".into(),
            cert.to_string_lossy().into_owned(),
            "--hook-tls-key".into(),
            key.to_string_lossy().into_owned(),
        ]);
        self
    }
}

/// A running operator; killed when dropped.
pub struct Operator {
    child: Child,
    /// Its `/metrics`, `/healthz`, `/readyz` address.
    pub metrics: SocketAddr,
    /// Its hook address (plain HTTP on loopback).
    pub hook: SocketAddr,
    /// The file its stderr goes to.
    pub log: PathBuf,
    /// The recording proxy it talks to.
    pub proxy: Proxy,
    _dir: tempfile::TempDir,
}

impl Operator {
    /// Starts `deletion-cost run` for the run's cluster.
    pub async fn start(env: &Env, opts: Options) -> Operator {
        let token = opts.token.clone().unwrap_or_else(|| env.token.clone());
        let proxy = Proxy::start(&env.config, &token, env.recorder.clone(), &opts.identity).await;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters: [{{name: e2e, cluster: {{server: \"{}\"}}}}]\n\
                 users: [{{name: e2e, user: {{}}}}]\n\
                 contexts: [{{name: e2e, context: {{cluster: e2e, user: e2e}}}}]\ncurrent-context: e2e\n",
                opts.server.as_deref().unwrap_or(&proxy.url)
            ),
        )
        .unwrap_or_else(|e| panic!("kubeconfig: {e}"));
        // two free ports, not one twice (a port let go can be handed out again)
        let metrics = free_addr();
        let hook = std::iter::repeat_with(free_addr)
            .find(|a| *a != metrics)
            .unwrap_or(metrics);
        let log = dir.path().join("operator.log");
        let log_file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("log file: {e}"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_deletion-cost"));
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--metrics-addr", &metrics.to_string()])
            .args(["--hook-addr", &hook.to_string()])
            .args(["--leader-election-namespace", &env.system_ns])
            .args(["--lease-name", &format!("deletion-cost-{}", env.run)])
            .args(["--qps", &opts.qps.to_string()])
            .args(["--burst", &opts.burst.to_string()])
            .args(["--shutdown-grace", &opts.grace.to_string()])
            .args(["--log-format", "json"])
            .args(&opts.args)
            .env("POD_NAME", &opts.identity)
            .env("POD_NAMESPACE", &env.system_ns)
            .env("RUST_LOG", "info,deletion_cost=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        // the operator dies with the suite even when the suite is killed
        // SAFETY: prctl is async-signal-safe and touches no Rust state.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting deletion-cost run: {e}"));
        Operator {
            child,
            metrics,
            hook,
            log,
            proxy,
            _dir: dir,
        }
    }

    /// GET on its metrics listener: (status, body), or None when it does not answer.
    pub async fn http_get(&self, path: &str) -> Option<(u16, String)> {
        let url = format!("http://{}{path}", self.metrics);
        let resp = reqwest::Client::new()
            .get(url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        let code = resp.status().as_u16();
        Some((code, resp.text().await.unwrap_or_default()))
    }

    /// Waits until its caches synced and it leads (writes).
    pub async fn wait_ready(&self) {
        self.wait_synced().await;
        // the scenarios share one Lease, and a scenario's operator dropped
        // with SIGKILL leaves it held until it expires: the next operator
        // writes nothing (and the webhook answers as a follower) until then
        eventually(
            Duration::from_secs(60),
            &format!("the operator leads (log: {})", self.log.display()),
            || async { self.is_leader().await },
        )
        .await;
    }

    /// Waits until its caches synced (`/readyz`), leading or not: for the
    /// replicas a scenario starts as followers.
    pub async fn wait_synced(&self) {
        eventually(
            Duration::from_secs(60),
            &format!("the operator is ready (log: {})", self.log.display()),
            || async {
                self.http_get("/readyz")
                    .await
                    .is_some_and(|(c, _)| c == 200)
            },
        )
        .await;
    }

    /// A metric's value (first sample whose line starts with `series`).
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = self.http_get("/metrics").await?;
        body.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with([' ', '{']))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// An HTTPS client that trusts the CA the operator published for its hook
    /// (the ConfigMap `deletion-cost-hook-ca` in its namespace), once the
    /// hook accepts connections.
    pub async fn hook_client(&self, env: &Env) -> reqwest::Client {
        let maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(env.client.clone(), &env.system_ns);
        let deadline = Instant::now() + Duration::from_secs(30);
        let ca = loop {
            let found = maps
                .get_opt("deletion-cost-hook-ca")
                .await
                .ok()
                .flatten()
                .and_then(|m| m.data)
                .and_then(|d| d.get("ca.crt").cloned());
            if let Some(ca) = found {
                break ca;
            }
            assert!(
                Instant::now() < deadline,
                "the hook's CA was not published within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let cert = reqwest::Certificate::from_pem(ca.as_bytes())
            .unwrap_or_else(|e| panic!("the published CA does not parse: {e}"));
        let client = reqwest::Client::builder()
            .add_root_certificate(cert)
            .build()
            .unwrap_or_else(|e| panic!("https client: {e}"));
        eventually(
            Duration::from_secs(30),
            "the hook accepts connections",
            || async { tokio::net::TcpStream::connect(self.hook).await.is_ok() },
        )
        .await;
        client
    }

    /// Whether it currently holds the lease.
    pub async fn is_leader(&self) -> bool {
        self.metric("deletion_cost_leader").await == Some(1.0)
    }

    /// Its process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends a signal to the process.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "kill({}, {sig})", self.child.id());
    }

    /// Waits for the process to end: its status and how long that took.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<(ExitStatus, Duration)> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some((status, start.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its log lines (JSON) whose message contains `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<serde_json::Value> {
        self.log_text()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| {
                v.pointer("/fields/message")
                    .and_then(|m| m.as_str())
                    .is_some_and(|m| m.contains(needle))
            })
            .collect()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- operator log ({}) ---\n{}",
                self.log.display(),
                tail(&self.log_text(), 60)
            );
        }
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
