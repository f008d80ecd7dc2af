//! Running the operator in-process against the fake API server: the one
//! harness of the in-process tests (`tests/operator.rs`,
//! `tests/operator_faults.rs`, `tests/hook.rs`).

use std::net::SocketAddr;
use std::time::Duration;

use deletion_cost::operator::{run_with_client, OperatorError, RunConfig};
use deletion_cost_testkit::fake_api::{client_for, FakeApi, USER_HEADER};
use deletion_cost_testkit::{free_addr, http_get, wait_until};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Namespace the scenario tests use.
pub const NS: &str = "shop";

/// How long [`Operator::serving`] waits, and the timeout of [`http_client`].
pub const HANG: Duration = Duration::from_secs(30);

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
        scale_in_allowance: deletion_cost::writes::DEFAULT_SCALE_IN_ALLOWANCE,
        dry_run: false,
        kubeconfig: None,
        leader_election: false,
        lease_name: "deletion-cost".into(),
        lease_namespace: Some(NS.into()),
        identity: identity.into(),
        lease_timings: Default::default(),
        kubernetes_version: None,
        feature_gates: None,
        shutdown_grace: Duration::from_secs(5),
        debounce: Duration::from_millis(100),
        hook_addr: None,
        hook: Default::default(),
        pricing: None,
        prices_file: None,
    }
}

/// The `kube::Config` the operator runs on against `fake`: kube's own retries
/// off, as in production, so every retry must pass our limiter.
pub fn client_config(fake: &FakeApi) -> kube::Config {
    let mut kc = fake.config();
    kc.default_retry = false;
    kc
}

/// An HTTP client for the operator's listeners: [`HANG`] timeout, rustls on ring.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(HANG)
        .build()
        .expect("an HTTP client")
}

/// The operator running in-process; stop it gracefully, or kill it (dropping
/// it kills it too).
pub struct Operator {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), OperatorError>>,
    /// What it was started with, to start it again on fresh ports.
    config: RunConfig,
    client: kube::Client,
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Operator {
    /// Starts the operator on a client of `fake` built from [`client_config`].
    /// Returns at once; [`Operator::serving`] waits until it serves.
    pub fn start(fake: &FakeApi, config: RunConfig) -> Self {
        Self::start_on(client_for(client_config(fake)), config)
    }

    /// [`Operator::start`] with a client that names itself `user` to the
    /// fake (the requests' `user`), as an audit log tells replicas apart.
    pub fn start_as(fake: &FakeApi, config: RunConfig, user: &str) -> Self {
        let mut kc = client_config(fake);
        kc.headers.push((
            reqwest::header::HeaderName::from_static(USER_HEADER),
            reqwest::header::HeaderValue::from_str(user).expect("a header value"),
        ));
        Self::start_on(client_for(kc), config)
    }

    /// [`Operator::start`] on a client of the test's own (one with a layer
    /// that delays some responses, say).
    pub fn start_on(client: kube::Client, config: RunConfig) -> Self {
        let (tx, rx) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = rx.await;
        };
        let task = tokio::spawn(run_with_client(config.clone(), client.clone(), shutdown));
        Self {
            stop: Some(tx),
            task,
            config,
            client,
        }
    }

    /// Waits until the operator serves: `/readyz` answers 200 and the hook,
    /// when it has an address, accepts connections. The configured ports must
    /// be known ones ([`free_addr`]); one picked free can be taken before the
    /// operator binds it, and the operator then ends: it is started again on
    /// fresh ports. Panics with the API requests so far when it is not ready
    /// within [`HANG`].
    pub async fn serving(mut self, fake: &FakeApi) -> Self {
        assert_ne!(
            self.config.metrics_addr.port(),
            0,
            "serving() reads /readyz: give the metrics server a known port"
        );
        for _ in 0..5 {
            let settled = wait_until(HANG, || async {
                self.task.is_finished() || self.serves().await
            })
            .await;
            if !settled {
                let seen: Vec<String> = fake
                    .requests()
                    .iter()
                    .map(|r| format!("{} {}?{} -> {}", r.method, r.path, r.query, r.status))
                    .collect();
                panic!("operator not ready; API requests:\n{}", seen.join("\n"));
            }
            if !self.task.is_finished() {
                return self;
            }
            let ended = (&mut self.task).await;
            eprintln!("the operator ended ({ended:?}): starting it again on fresh ports");
            let mut config = self.config.clone();
            config.metrics_addr = free_addr();
            if config.hook_addr.is_some() {
                config.hook_addr = Some(free_addr());
            }
            self = Self::start_on(self.client.clone(), config);
        }
        panic!("the operator did not start");
    }

    async fn serves(&self) -> bool {
        let ready = http_get(self.config.metrics_addr.port(), "/readyz").await.0 == 200;
        match self.config.hook_addr {
            Some(hook) => ready && tokio::net::TcpStream::connect(hook).await.is_ok(),
            None => ready,
        }
    }

    /// Where its `/metrics`, `/healthz` and `/readyz` are.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.config.metrics_addr
    }

    /// Where its hook listens.
    pub fn hook_addr(&self) -> SocketAddr {
        self.config
            .hook_addr
            .expect("the operator was started without a hook")
    }

    /// Its `/metrics` page.
    pub async fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.metrics_addr());
        let resp = http_client().get(&url).send().await;
        match resp {
            Ok(r) => r.text().await.unwrap_or_else(|e| panic!("{url}: {e}")),
            Err(e) => panic!("{url}: {e}"),
        }
    }

    /// `POST /v1/prescale` over plain HTTP with `body` as JSON: (status, answer).
    pub async fn post(&self, token: Option<&str>, body: &Value) -> (u16, Value) {
        self.post_raw(token, body.to_string().into_bytes()).await
    }

    /// `POST /v1/prescale` over plain HTTP with any body: (status, answer);
    /// panics when the answer is not JSON.
    pub async fn post_raw(&self, token: Option<&str>, body: Vec<u8>) -> (u16, Value) {
        let mut req = http_client()
            .post(format!("http://{}/v1/prescale", self.hook_addr()))
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("hook unreachable");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("the hook's answer");
        let v = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("answer is not JSON ({e}): {text}"));
        (status, v)
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
    pub async fn join(mut self) -> Result<(), OperatorError> {
        // the stop sender stays alive: dropping it would ask for a shutdown
        match tokio::time::timeout(Duration::from_secs(20), &mut self.task).await {
            Ok(Ok(result)) => result,
            other => panic!("the operator did not end: {other:?}"),
        }
    }

    /// Abrupt stop (the process is killed).
    pub async fn kill(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
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
    annotation(fake, pod, deletion_cost::annotations::POD_DELETION_COST)
}

/// The policy that wrote the pod's cost.
pub fn owner(fake: &FakeApi, pod: &str) -> Option<String> {
    annotation(fake, pod, deletion_cost::annotations::POLICY_ANNOTATION)
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

/// Lease timings short enough for tests: a 3 s term, writes stop 2 s after
/// the last renewal, attempts every 0.5 s.
pub fn quick_lease() -> deletion_cost::operator::LeaseTimings {
    deletion_cost::operator::LeaseTimings {
        duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
    }
}

/// Pod patches that landed (HTTP 200), per pod.
pub fn successful_writes_per_pod(fake: &FakeApi) -> std::collections::BTreeMap<String, usize> {
    let mut per_pod = std::collections::BTreeMap::new();
    for r in fake
        .requests_for(deletion_cost_testkit::fake_api::Verb::Patch, "pods")
        .iter()
        .filter(|r| r.status == 200)
    {
        *per_pod
            .entry(r.name.clone().unwrap_or_default())
            .or_default() += 1;
    }
    per_pod
}

/// `n` Running, Ready pods `web-000`... of ReplicaSet `web-abc` (owned by
/// Deployment `web`) in `shop`, even ones on node `spot-0`, odd ones on
/// `od-0`; with `preset_cost`, each already carries that cost from policy `web`.
pub fn seed_web_pods(fake: &FakeApi, n: usize, preset_cost: Option<&str>) {
    use serde_json::json;
    for (name, capacity) in [("spot-0", "spot"), ("od-0", "on-demand")] {
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"karpenter.sh/capacity-type": capacity}}}))
            .expect("a node");
    }
    fake.apply_json(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-abc", "namespace": NS, "uid": "rs-uid",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "dep-uid", "controller": true}]},
        "spec": {"replicas": n, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .expect("a ReplicaSet");
    for i in 0..n {
        let mut annotations = std::collections::BTreeMap::new();
        if let Some(c) = preset_cost {
            annotations.insert(deletion_cost::annotations::POD_DELETION_COST, c);
            annotations.insert(deletion_cost::annotations::POLICY_ANNOTATION, "web");
        }
        fake.apply_json(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{i:03}"), "namespace": NS, "labels": {"app": "web"},
                "annotations": annotations,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "rs-uid", "controller": true}]},
            "spec": {"nodeName": if i % 2 == 0 { "spot-0" } else { "od-0" }, "containers": [{"name": "app", "image": "app:1"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}]}
        }))
        .expect("a pod");
    }
}
