//! Running the operator in-process against the fake API server.

use std::time::Duration;

use deletion_cost::operator::{run_with_client, OperatorError as ControllerError, RunConfig};
use deletion_cost::testing::fake_api::{client_for, FakeApi};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Namespace the scenario tests use.
pub const NS: &str = "shop";

/// A run configuration for tests: namespace `shop`, no Prometheus, metrics on
/// a free loopback port, no leader election, fast debounce.
pub fn config(identity: &str, qps: f64, burst: u32) -> RunConfig {
    RunConfig {
        namespace: Some(NS.into()),
        prometheus_url: None,
        prometheus_timeout: Duration::from_secs(2),
        metrics_addr: "127.0.0.1:0".parse().expect("loopback address"),
        qps,
        burst,
        dry_run: false,
        kubeconfig: None,
        leader_election: false,
        lease_name: "deletion-cost".into(),
        lease_namespace: Some(NS.into()),
        identity: identity.into(),
        kubernetes_version: None,
        feature_gates: None,
        shutdown_grace: Duration::from_secs(5),
        debounce: Duration::from_millis(100),
        hook_addr: None,
        hook: Default::default(),
    }
}

/// An operator task; stop it gracefully or kill it.
pub struct Operator {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ControllerError>>,
}

impl Operator {
    /// Starts the operator on a client of `fake` with kube's own retries off,
    /// as in production: every retry must pass our limiter.
    pub fn start(fake: &FakeApi, config: RunConfig) -> Self {
        let mut kc = fake.config();
        kc.default_retry = false;
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(run_with_client(config, client_for(kc), async move {
            let _ = rx.await;
        }));
        Self {
            stop: Some(tx),
            task,
        }
    }

    /// Graceful stop (SIGTERM); panics when it does not stop cleanly.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match tokio::time::timeout(Duration::from_secs(20), &mut self.task).await {
            Ok(Ok(Ok(()))) => {}
            other => panic!("operator did not stop cleanly: {other:?}"),
        }
    }

    /// Waits for the operator to end on its own (a start that fails).
    pub async fn join(self) -> Result<(), ControllerError> {
        // the stop sender stays alive: dropping it would ask for a shutdown
        let Operator { stop: _stop, task } = self;
        match tokio::time::timeout(Duration::from_secs(20), task).await {
            Ok(Ok(result)) => result,
            other => panic!("the operator did not end: {other:?}"),
        }
    }

    /// Abrupt stop (the process is killed).
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// Polls `done` every 50 ms up to `limit`.
pub async fn eventually(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An annotation of a pod in `shop`, as the fake API server holds it.
pub fn annotation(fake: &FakeApi, pod: &str, key: &str) -> Option<String> {
    fake.get_json("pods", NS, pod)?
        .pointer(&format!("/metadata/annotations/{}", key.replace('/', "~1")))?
        .as_str()
        .map(String::from)
}

/// The pod's deletion cost annotation.
pub fn cost(fake: &FakeApi, pod: &str) -> Option<String> {
    annotation(fake, pod, deletion_cost::comparator::POD_DELETION_COST)
}

/// The policy that wrote the pod's cost.
pub fn owner(fake: &FakeApi, pod: &str) -> Option<String> {
    annotation(fake, pod, deletion_cost::plan::POLICY_ANNOTATION)
}

/// A status condition of a policy in `shop`.
pub fn condition(fake: &FakeApi, policy: &str, type_: &str) -> Option<serde_json::Value> {
    fake.get_json("deletioncostpolicies", NS, policy)?
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Pod patches that landed (HTTP 200), per pod.
pub fn successful_writes_per_pod(fake: &FakeApi) -> std::collections::BTreeMap<String, usize> {
    let mut per_pod = std::collections::BTreeMap::new();
    for r in fake
        .requests_for(deletion_cost::testing::fake_api::Verb::Patch, "pods")
        .iter()
        .filter(|r| r.status == 200)
    {
        *per_pod
            .entry(r.name.clone().unwrap_or_default())
            .or_default() += 1;
    }
    per_pod
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `GET path` on 127.0.0.1:port: (status code, whole response).
pub async fn http_get(port: u16, path: &str) -> (u16, String) {
    http_request(port, "GET", path).await
}

/// `METHOD path` (no body) on 127.0.0.1:port: (status code, whole response).
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
