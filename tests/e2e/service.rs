//! The hook's Service as a cluster runs it, for operator processes that run
//! outside pods: endpoints are the replicas whose pod carries the leader
//! label (as the endpoints controller reads it) and whose `/readyz` answers
//! (the kubelet's readiness probe of the shipped Deployment: every 2 s, 1 s
//! timeout, unready after 2 failures); each connection is passed, bytes as
//! they are (TLS included), to one of them. Without an endpoint a
//! connection is closed at once, as kube-proxy rejects it. `blackhole`
//! holds connections unanswered instead, as a NetworkPolicy that drops the
//! API server's packets does.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::cluster::{Env, POOL_LABEL};

/// How the readiness probe of the shipped Deployment runs.
const PROBE_PERIOD: Duration = Duration::from_secs(2);
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
const PROBE_FAILURES: u32 = 2;
/// How often the endpoints follow the pods' labels (the endpoints
/// controller and kube-proxy together take about that).
const ENDPOINTS_SYNC: Duration = Duration::from_millis(500);

/// The leader label the operator puts on its pod.
const LEADER_LABEL: &str = deletion_cost::engine::leadership::LEADER_LABEL;

/// One replica behind the Service.
#[derive(Debug, Clone)]
pub struct Backend {
    /// Its identity (the name of its pod).
    pub identity: String,
    /// Its hook listener.
    pub hook: SocketAddr,
    /// Its `/readyz` listener.
    pub metrics: SocketAddr,
}

#[derive(Debug, Default)]
struct State {
    labelled: Vec<String>,
    ready: BTreeMap<String, bool>,
    backends: BTreeMap<String, Backend>,
}

impl State {
    /// The backends the Service routes to now: labelled and ready.
    fn endpoints(&self) -> Vec<&Backend> {
        self.labelled
            .iter()
            .filter(|n| self.ready.get(*n).copied().unwrap_or(false))
            .filter_map(|n| self.backends.get(n))
            .collect()
    }
}

/// A running Service emulation; its tasks stop when it is dropped.
pub struct LeaderService {
    /// Where the API server reaches it.
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    blackhole: tokio::sync::watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    pods: Api<Pod>,
    identities: Vec<String>,
}

impl LeaderService {
    /// Creates the replicas' pods in the operator's namespace (never
    /// scheduled: the operator only labels its own), before the replicas
    /// start: a replica labels its pod when its term begins.
    pub async fn create_pods(env: &Env, identities: &[&str]) {
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.system_ns);
        for name in identities {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "deletion-cost"}},
                "spec": {"nodeSelector": {POOL_LABEL: "none"},
                         "containers": [{"name": "operator", "image": "deletion-cost:e2e"}]}
            }))
            .unwrap_or_else(|e| panic!("{e}"));
            pods.create(&PostParams::default(), &pod)
                .await
                .unwrap_or_else(|e| panic!("creating the pod of {name}: {e}"));
        }
    }

    /// Starts routing to `backends`, whose pods [`LeaderService::create_pods`] made.
    pub async fn start(env: &Env, backends: Vec<Backend>) -> LeaderService {
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.system_ns);
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("binding the Service: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let state = Arc::new(Mutex::new(State {
            backends: backends
                .iter()
                .map(|b| (b.identity.clone(), b.clone()))
                .collect(),
            ..State::default()
        }));
        let mut tasks = Vec::new();
        // the endpoints: which pods carry the label
        {
            let (state, pods) = (state.clone(), pods.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let lp = ListParams::default().labels(&format!("{LEADER_LABEL}=true"));
                    if let Ok(list) = pods.list_metadata(&lp).await {
                        let names = list.items.iter().map(|p| p.name_any()).collect();
                        if let Ok(mut s) = state.lock() {
                            s.labelled = names;
                        }
                    }
                    tokio::time::sleep(ENDPOINTS_SYNC).await;
                }
            }));
        }
        // the readiness probes
        for b in &backends {
            let (state, identity) = (state.clone(), b.identity.clone());
            tasks.push(tokio::spawn(async move {
                let http = reqwest::Client::new();
                // not ready until a probe succeeds; unready after
                // PROBE_FAILURES failures in a row
                let (mut ready, mut failures) = (false, 0u32);
                loop {
                    let metrics = state
                        .lock()
                        .ok()
                        .and_then(|s| s.backends.get(&identity).map(|b| b.metrics));
                    let Some(metrics) = metrics else { return };
                    let ok = http
                        .get(format!("http://{metrics}/readyz"))
                        .timeout(PROBE_TIMEOUT)
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                    if ok {
                        (ready, failures) = (true, 0);
                    } else {
                        failures += 1;
                        ready &= failures < PROBE_FAILURES;
                    }
                    if let Ok(mut s) = state.lock() {
                        s.ready.insert(identity.clone(), ready);
                    }
                    tokio::time::sleep(PROBE_PERIOD).await;
                }
            }));
        }
        // the routing; a blackhole also stalls the connections already
        // piped (the API server keeps its connection to a webhook open)
        let (cut_tx, cut_rx) = tokio::sync::watch::channel(false);
        {
            let state = state.clone();
            let next = Arc::new(AtomicUsize::new(0));
            tasks.push(tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    let mut cut = cut_rx.clone();
                    if *cut.borrow_and_update() {
                        tokio::spawn(async move { hold(inbound, cut).await });
                        continue;
                    }
                    let endpoints: Vec<SocketAddr> = state
                        .lock()
                        .map(|s| s.endpoints().iter().map(|b| b.hook).collect())
                        .unwrap_or_default();
                    if endpoints.is_empty() {
                        continue;
                    }
                    let to = endpoints[next.fetch_add(1, Ordering::Relaxed) % endpoints.len()];
                    tokio::spawn(async move {
                        let Ok(mut outbound) = TcpStream::connect(to).await else {
                            return;
                        };
                        let mut watch = cut.clone();
                        let cut_now = async move { watch.wait_for(|c| *c).await.is_ok() };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                            true = cut_now => {
                                drop(outbound);
                                hold(inbound, cut).await;
                            }
                        }
                    });
                }
            }));
        }
        LeaderService {
            addr,
            state,
            blackhole: cut_tx,
            tasks,
            pods,
            identities: backends.into_iter().map(|b| b.identity).collect(),
        }
    }

    /// A replica restarted in its pod (same identity, new listeners).
    pub fn replace(&self, backend: Backend) {
        if let Ok(mut s) = self.state.lock() {
            s.backends.insert(backend.identity.clone(), backend);
        }
    }

    /// Holds every connection unanswered, the open ones too (`true`), or
    /// routes new ones again (the held ones are closed then).
    pub fn blackhole(&self, on: bool) {
        self.blackhole.send_replace(on);
    }

    /// The identities the Service routes to now.
    pub fn endpoints(&self) -> Vec<String> {
        self.state
            .lock()
            .map(|s| s.endpoints().iter().map(|b| b.identity.clone()).collect())
            .unwrap_or_default()
    }

    /// Stops routing and deletes the backends' pods.
    pub async fn stop(mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        for name in &self.identities {
            let _ = self.pods.delete(name, &Default::default()).await;
        }
    }
}

impl Drop for LeaderService {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Keeps `conn` open and unanswered while the blackhole lasts.
async fn hold(conn: TcpStream, mut cut: tokio::sync::watch::Receiver<bool>) {
    let _ = cut.wait_for(|c| !*c).await.is_ok();
    drop(conn);
}
