//! The operator's pieces (caches, leadership, engine, reconcile context,
//! hook) around a kube `Client` whose other end is a mock
//! (`tower_test::mock`): an [`ApiServerVerifier`] takes each request the
//! operator sends, asserts it is exactly the one a [`Scenario`] expects, and
//! answers it, as kube-rs's controller-rs tests its reconcile. Nothing else
//! answers, so a request the scenario does not name fails the test.
//!
//! The fake API server (`testkit/src/fake_api`) stays for what only a
//! server can do: watches, leases, injected faults, several replicas.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use deletion_cost::annotations::{POD_DELETION_COST, POLICY_ANNOTATION};
use deletion_cost::comparator::FeatureGates;
use deletion_cost::engine::caches::CachedPod;
use deletion_cost::engine::caches::Caches;
use deletion_cost::engine::leadership::{Leadership, LeaseName, TermPatcher};
use deletion_cost::engine::{Engine, SignalSource};
use deletion_cost::hook::{HookConfig, HookTls};
use deletion_cost::metrics::Metrics;
use deletion_cost::operator::reconcile::Context;
use deletion_cost::operator::sync::WatchHealth;
use deletion_cost::operator::FINALIZER;
use deletion_cost::pod::PodRecord;
use deletion_cost::policy::DeletionCostPolicy;
use deletion_cost::writes::Gate;
use deletion_cost_testkit::wait_until;
use http::{Method, Request, Response};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Node;
use kube::client::Body;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower_test::mock;

/// The operator-wide write rate of the pieces: high enough that no write
/// waits for a token, so the order is the operator's, not the limiter's
/// (a round's pod writes all go before the status it then writes). The
/// tests run on tokio's current-thread runtime, which keeps that order.
pub const QPS: f64 = 1000.0;
/// Its burst: every write of a scenario at once.
pub const BURST: u32 = 100;
/// The field manager every write records.
pub const MANAGER: &str = "deletion-cost-operator";
/// How long a scenario waits for the operator's next request.
const NEXT_WITHIN: Duration = Duration::from_secs(10);
/// How long the operator must send nothing for [`Scenario::RadioSilence`].
const SILENCE: Duration = Duration::from_millis(500);

/// What the API server holds when the operator starts: every cache is
/// listed from it.
#[derive(Default)]
pub struct World {
    /// Nodes (their labels are the billing classes).
    pub nodes: Vec<Value>,
    /// ReplicaSets.
    pub replica_sets: Vec<Value>,
    /// Pods.
    pub pods: Vec<Value>,
    /// Policies.
    pub policies: Vec<DeletionCostPolicy>,
}

/// The operator's pieces, wired as `run` wires them, writing to a mock.
pub struct Pieces {
    /// The engine the reconcile and the hook share.
    pub engine: Arc<Engine>,
    /// What every reconcile shares.
    pub ctx: Arc<Context>,
    /// The client whose other end is the verifier (the hook's).
    pub client: Client,
    stop: CancellationToken,
}

impl Drop for Pieces {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The pieces over `world`, leading from the start (no election), and the
/// verifier that answers their requests. Reading and syncing the caches
/// sends nothing: they are filled here, as their first lists would fill
/// them.
pub async fn start(world: World) -> (Pieces, ApiServerVerifier) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");

    let (pods, mut pods_w) = reflector::store::<CachedPod>();
    let (nodes, mut nodes_w) = reflector::store::<Node>();
    let (replica_sets, mut rs_w) = reflector::store::<ReplicaSet>();
    let (policies, mut policies_w) = reflector::store::<DeletionCostPolicy>();
    listed(
        &mut pods_w,
        parse::<PodRecord>(&world.pods)
            .into_iter()
            .map(|r| CachedPod(Arc::new(r)))
            .collect(),
    );
    listed(&mut nodes_w, parse(&world.nodes));
    listed(&mut rs_w, parse(&world.replica_sets));
    listed(&mut policies_w, world.policies.clone());
    let health = WatchHealth::new(&["pods", "nodes", "replicasets", "policies"]);
    health.track("pods", pods.clone());
    health.track("nodes", nodes.clone());
    health.track("replicasets", replica_sets.clone());
    health.track("policies", policies.clone());

    let term = TermPatcher::default();
    let metrics = Arc::new(Metrics::new(QPS, {
        let term = term.clone();
        Box::new(move || term.stats())
    }));
    let reporter = Reporter {
        controller: MANAGER.into(),
        instance: Some("op-0".into()),
    };
    // the gate of an operator without election: open for good
    let gate = tokio::sync::watch::channel(Gate::Open).1;
    let lease = LeaseName {
        namespace: "ops".into(),
        name: "deletion-cost".into(),
    };
    let leadership = Leadership::new(gate, term, lease, client.clone(), reporter);
    tokio::spawn(leadership.clone().follow(
        client.clone(),
        deletion_cost::writes::WriteLimits {
            qps: QPS,
            burst: BURST,
            scale_in_allowance: 0,
        },
        "op-0".into(),
        metrics.clone(),
        None,
    ));
    let engine = Arc::new(Engine::new(
        Caches::new(pods, nodes, replica_sets, policies, None),
        leadership.clone(),
        metrics,
        SignalSource {
            prometheus: None,
            timeout: Duration::from_secs(2),
        },
        FeatureGates::default(),
        false,
        None,
    ));
    let ctx = Arc::new(Context::new(
        leadership.writes(),
        engine.clone(),
        leadership.events(),
        health.clone(),
        QPS,
    ));
    let ready = || {
        let ready = leadership.patcher().is_some() && health.is_ready();
        async move { ready }
    };
    assert!(
        wait_until(NEXT_WITHIN, ready).await,
        "the term's patcher and the caches are ready"
    );
    let verifier = ApiServerVerifier {
        handle,
        pods: world
            .pods
            .into_iter()
            .map(|p| {
                (
                    p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    p,
                )
            })
            .collect(),
        watch: pods_w,
    };
    let pieces = Pieces {
        engine,
        ctx,
        client,
        stop: CancellationToken::new(),
    };
    (pieces, verifier)
}

impl Pieces {
    /// Serves the hook (the scale-in webhook) on `addr`, plain HTTP, until
    /// the pieces are dropped.
    pub async fn serve_hook(&self, addr: SocketAddr) {
        let config = HookConfig {
            tls: HookTls::PlainHttp,
            ..HookConfig::default()
        };
        deletion_cost::hook::serve(
            addr,
            config,
            self.client.clone(),
            self.engine.clone(),
            self.stop.clone(),
        )
        .await
        .expect("the hook listens");
    }
}

fn parse<T: serde::de::DeserializeOwned>(objects: &[Value]) -> Vec<T> {
    objects
        .iter()
        .map(|o| serde_json::from_value(o.clone()).expect("a well-formed object"))
        .collect()
}

/// A store as its first list leaves it.
fn listed<K>(writer: &mut Writer<K>, objects: Vec<K>)
where
    K: reflector::Lookup + Clone,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

/// What the operator is expected to send, request by request.
pub enum Scenario {
    /// A policy without the finalizer: the finalizer is added (a JSON
    /// patch that first tests the list is absent), and nothing else.
    FinalizerCreation(DeletionCostPolicy),
    /// A valid policy's round: its pods' costs, one merge patch each
    /// (sent together, so in any order among themselves), then its status
    /// by server-side apply, then its Events, in order.
    Apply {
        /// The policy.
        policy: DeletionCostPolicy,
        /// Each pod written, with its cost.
        costs: Vec<(&'static str, i32)>,
        /// The status's conditions: type, status and reason, in order.
        conditions: Vec<(&'static str, &'static str, &'static str)>,
        /// The status's `pendingPatches`.
        pending: u64,
        /// The Events about the policy: type, reason and note.
        events: Vec<(&'static str, &'static str, &'static str)>,
    },
    /// A deleted policy: exactly the pods carrying its own cost get both
    /// annotations removed (in any order among themselves), then the
    /// finalizer goes.
    Cleanup {
        /// The policy.
        policy: DeletionCostPolicy,
        /// The pods whose cost it wrote.
        removed: Vec<&'static str>,
    },
    /// A scale-in webhook call: the reads of its pods' nodes (metadata
    /// only, in any order), the correction's cost writes (in any order
    /// among themselves), then the `ScaleInVictims` Event on the workload.
    ScaleIn {
        /// The policy that manages the workload.
        policy: &'static str,
        /// The Deployment scaled in.
        deployment: &'static str,
        /// Its pods' nodes as the server holds them now (each read once).
        nodes: Vec<Value>,
        /// Each pod written, with its cost.
        writes: Vec<(&'static str, i32)>,
        /// The Event's note.
        note: String,
    },
    /// Nothing at all.
    RadioSilence,
}

/// One request as the verifier took it.
struct Seen {
    method: Method,
    path: String,
    query: String,
    accept: String,
    content_type: String,
    body: Value,
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}?{} {}",
            self.method, self.path, self.query, self.body
        )
    }
}

type Answer = mock::SendResponse<Response<Body>>;

/// Takes the operator's requests from the mock's end, asserts each, and
/// answers as an API server would. Pod patches change the pods it holds and
/// reach the pod cache as the pod watch would carry them.
pub struct ApiServerVerifier {
    handle: mock::Handle<Request<Body>, Response<Body>>,
    /// The pods as the server holds them, by name.
    pods: BTreeMap<String, Value>,
    /// The pod cache's writer: the pod watch.
    watch: Writer<CachedPod>,
}

/// Waits for a scenario to be played out, and gets the verifier back for
/// the next one.
pub async fn finished(scenario: JoinHandle<ApiServerVerifier>) -> ApiServerVerifier {
    tokio::time::timeout(NEXT_WITHIN * 2, scenario)
        .await
        .expect("the scenario played out in time")
        .expect("the scenario's expectations held")
}

impl ApiServerVerifier {
    /// Plays `scenario` on its own task; [`finished`] waits for it.
    pub fn run(self, scenario: Scenario) -> JoinHandle<ApiServerVerifier> {
        tokio::spawn(async move {
            match scenario {
                Scenario::FinalizerCreation(policy) => self.finalizer_creation(policy).await,
                Scenario::Apply {
                    policy,
                    costs,
                    conditions,
                    pending,
                    events,
                } => {
                    let costs = costs.into_iter().map(|(p, c)| (p, Some(c))).collect();
                    let mut this = self.pod_patches(&policy.name_any(), costs).await;
                    this = this.status_patch(&policy, &conditions, pending).await;
                    this.policy_events(&policy, &events).await
                }
                Scenario::Cleanup { policy, removed } => {
                    let removals = removed.into_iter().map(|p| (p, None)).collect();
                    let this = self.pod_patches(&policy.name_any(), removals).await;
                    this.finalizer_removal(policy).await
                }
                Scenario::ScaleIn {
                    policy,
                    deployment,
                    nodes,
                    writes,
                    note,
                } => {
                    let writes = writes.into_iter().map(|(p, c)| (p, Some(c))).collect();
                    let this = self.node_reads(nodes).await;
                    let this = this.pod_patches(policy, writes).await;
                    this.victims_event(deployment, &note).await
                }
                Scenario::RadioSilence => self.radio_silence().await,
            }
        })
    }

    async fn next(&mut self) -> (Seen, Answer) {
        let next = tokio::time::timeout(NEXT_WITHIN, self.handle.next_request()).await;
        let (req, send) = next
            .expect("the operator sends its next request in time")
            .expect("the operator's client is still there");
        let (parts, body) = req.into_parts();
        let bytes = body.collect_bytes().await.expect("a request body");
        let header = |name| {
            let value = parts.headers.get(name).and_then(|v| v.to_str().ok());
            value.unwrap_or_default().to_string()
        };
        let seen = Seen {
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            accept: header(http::header::ACCEPT),
            content_type: header(http::header::CONTENT_TYPE),
            method: parts.method,
            body: if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).expect("a JSON request body")
            },
        };
        (seen, send)
    }

    /// The next request, which must be a `method` on a path under
    /// `prefix` (`what` it is, for the failure): it, the name after the
    /// prefix, and where its answer goes.
    async fn next_on(
        &mut self,
        method: Method,
        prefix: &str,
        what: &str,
    ) -> (Seen, String, Answer) {
        let (seen, send) = self.next().await;
        assert_eq!(seen.method, method, "{what}: {seen}");
        let name = seen
            .path
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{what}: {seen}"))
            .to_string();
        (seen, name, send)
    }

    async fn finalizer_creation(self, policy: DeletionCostPolicy) -> Self {
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ]);
        self.finalizer_patch(policy, patch, Some(vec![FINALIZER.into()]))
            .await
    }

    async fn finalizer_removal(self, policy: DeletionCostPolicy) -> Self {
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ]);
        self.finalizer_patch(policy, patch, None).await
    }

    /// The policy's JSON patch of its finalizers, exactly `patch`; answered
    /// with the policy holding `finalizers`.
    async fn finalizer_patch(
        mut self,
        policy: DeletionCostPolicy,
        patch: serde_json::Value,
        finalizers: Option<Vec<String>>,
    ) -> Self {
        let (seen, send) = self.next().await;
        assert_eq!(seen.method, Method::PATCH, "{seen}");
        assert_eq!(seen.path, policy_path(&policy, ""), "{seen}");
        assert_eq!(seen.content_type, "application/json-patch+json", "{seen}");
        assert_eq!(seen.body, patch, "{seen}");
        let mut answered = policy;
        answered.metadata.finalizers = finalizers;
        send.send_response(ok(&serde_json::to_value(&answered).expect("a policy")));
        self
    }

    /// A scale-in's reads: one LIST of its pods' nodes selected by their
    /// hostname label and a GET for each node without one, asking for
    /// metadata only, answered with `nodes` as the server holds them; and
    /// beside them one metadata-only LIST of the namespace's pods per
    /// scale-down marker label (no pod marked here). All in any order, each
    /// node once.
    async fn node_reads(mut self, nodes: Vec<Value>) -> Self {
        let mut want: BTreeMap<String, Value> = nodes
            .into_iter()
            .map(|n| {
                (
                    n["metadata"]["name"]
                        .as_str()
                        .expect("a node name")
                        .to_string(),
                    n,
                )
            })
            .collect();
        let mut marker_lists: Vec<&str> = deletion_cost::marker::MARKER_LABELS.to_vec();
        while !want.is_empty() || !marker_lists.is_empty() {
            let (seen, send) = self.next().await;
            assert!(
                seen.accept.contains("as=PartialObjectMetadata"),
                "metadata only ({}): {seen}",
                seen.accept
            );
            if seen.path == "/api/v1/namespaces/shop/pods" {
                let label = marker_lists
                    .iter()
                    .position(|l| {
                        seen.query
                            .contains(&format!("labelSelector={}", l.replace('/', "%2F")))
                    })
                    .map(|i| marker_lists.remove(i))
                    .unwrap_or_else(|| panic!("a marker list, each label once: {seen}"));
                assert_eq!(seen.method, Method::GET, "the list of {label}: {seen}");
                send.send_response(ok(&json!({"apiVersion": "meta.k8s.io/v1",
                    "kind": "PartialObjectMetadataList", "metadata": {"resourceVersion": "1"},
                    "items": []})));
                continue;
            }
            assert_eq!(seen.method, Method::GET, "a node read: {seen}");
            if seen.path == "/api/v1/nodes" {
                let selected = node_list_selection(&seen.query)
                    .unwrap_or_else(|| panic!("one list selecting nodes by hostname: {seen}"));
                let items: Vec<Value> = selected
                    .iter()
                    .map(|host| {
                        let (name, node) = want
                            .iter()
                            .find(|(_, n)| {
                                n["metadata"]["labels"][HOSTNAME_LABEL].as_str() == Some(host)
                            })
                            .unwrap_or_else(|| panic!("{host} selected once, as expected: {seen}"));
                        let name = name.clone();
                        let node = node["metadata"].clone();
                        want.remove(&name);
                        json!({"metadata": node})
                    })
                    .collect();
                send.send_response(ok(&json!({"apiVersion": "meta.k8s.io/v1",
                    "kind": "PartialObjectMetadataList", "metadata": {"resourceVersion": "1"},
                    "items": items})));
                continue;
            }
            let name = seen
                .path
                .strip_prefix("/api/v1/nodes/")
                .unwrap_or_else(|| panic!("a node read or a marker list: {seen}"))
                .to_string();
            let node = want
                .remove(&name)
                .unwrap_or_else(|| panic!("node {name} read once, as expected: {seen}"));
            send.send_response(ok(&json!({"apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata", "metadata": node["metadata"]})));
        }
        self
    }

    /// One merge patch per pod of `expected` (a cost, or `None` for the
    /// removal of both annotations), in any order, each exactly once.
    async fn pod_patches(mut self, policy: &str, expected: Vec<(&str, Option<i32>)>) -> Self {
        let mut want: BTreeMap<&str, Option<i32>> = expected.into_iter().collect();
        while !want.is_empty() {
            let (seen, name, send) = self
                .next_on(
                    Method::PATCH,
                    "/api/v1/namespaces/shop/pods/",
                    "a pod patch",
                )
                .await;
            let cost = want
                .remove(name.as_str())
                .unwrap_or_else(|| panic!("pod {name} written once, as expected: {seen}"));
            assert_eq!(seen.query, format!("&fieldManager={MANAGER}"), "{seen}");
            assert_eq!(seen.content_type, "application/merge-patch+json", "{seen}");
            let pod = self
                .pods
                .get_mut(&name)
                .unwrap_or_else(|| panic!("pod {name} exists"));
            let annotations = match cost {
                Some(c) => json!({POD_DELETION_COST: c.to_string(), POLICY_ANNOTATION: policy}),
                None => json!({POD_DELETION_COST: null, POLICY_ANNOTATION: null}),
            };
            assert_eq!(
                seen.body,
                json!({"metadata": {"annotations": annotations, "uid": pod["metadata"]["uid"]}}),
                "{seen}"
            );
            merge(&mut pod["metadata"]["annotations"], &annotations);
            let rv = pod["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(1);
            pod["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
            let answer = json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": pod["metadata"]});
            let record: PodRecord = serde_json::from_value(pod.clone()).expect("a pod");
            send.send_response(ok(&answer));
            // the pod watch carries the change to the cache
            self.watch
                .apply_watcher_event(&watcher::Event::Apply(CachedPod(Arc::new(record))));
        }
        self
    }

    async fn status_patch(
        mut self,
        policy: &DeletionCostPolicy,
        conditions: &[(&str, &str, &str)],
        pending: u64,
    ) -> Self {
        let (seen, send) = self.next().await;
        assert_eq!(seen.method, Method::PATCH, "{seen}");
        assert_eq!(seen.path, policy_path(policy, "/status"), "{seen}");
        assert_eq!(
            seen.query,
            format!("&force=true&fieldManager={MANAGER}"),
            "{seen}"
        );
        assert_eq!(seen.content_type, "application/apply-patch+yaml", "{seen}");
        assert_eq!(
            seen.body["apiVersion"], "deletioncost.dev/v1alpha1",
            "{seen}"
        );
        assert_eq!(seen.body["kind"], "DeletionCostPolicy", "{seen}");
        let status = &seen.body["status"];
        let got: Vec<(&str, &str, &str)> = status["conditions"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        let s = |k: &str| c[k].as_str().unwrap_or_default();
                        (s("type"), s("status"), s("reason"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(got, conditions, "{seen}");
        assert_eq!(status["pendingPatches"], json!(pending), "{seen}");
        assert_eq!(
            status["observedGeneration"],
            json!(policy.metadata.generation),
            "{seen}"
        );
        let mut answered = policy.clone();
        answered.status = Some(serde_json::from_value(status.clone()).expect("a status"));
        send.send_response(ok(&serde_json::to_value(&answered).expect("a policy")));
        self
    }

    /// `events` about the policy, in order.
    async fn policy_events(
        mut self,
        policy: &DeletionCostPolicy,
        events: &[(&str, &str, &str)],
    ) -> Self {
        for (type_, reason, note) in events {
            let (seen, send) = self.next().await;
            assert_eq!(seen.method, Method::POST, "{seen}");
            assert_eq!(
                seen.path, "/apis/events.k8s.io/v1/namespaces/shop/events",
                "{seen}"
            );
            let e = &seen.body;
            assert_eq!(e["type"], *type_, "{seen}");
            assert_eq!(e["reason"], *reason, "{seen}");
            assert_eq!(e["note"], *note, "{seen}");
            assert_eq!(e["action"], "Reconcile", "{seen}");
            assert_eq!(e["regarding"]["kind"], "DeletionCostPolicy", "{seen}");
            assert_eq!(e["regarding"]["name"], policy.name_any(), "{seen}");
            assert_eq!(e["regarding"]["uid"], json!(policy.metadata.uid), "{seen}");
            assert_eq!(e["reportingController"], MANAGER, "{seen}");
            send.send_response(ok(e));
        }
        self
    }

    async fn victims_event(mut self, deployment: &str, note: &str) -> Self {
        let (seen, send) = self.next().await;
        assert_eq!(seen.method, Method::POST, "{seen}");
        assert_eq!(
            seen.path, "/apis/events.k8s.io/v1/namespaces/shop/events",
            "{seen}"
        );
        let e = &seen.body;
        assert_eq!(e["reason"], "ScaleInVictims", "{seen}");
        assert_eq!(e["action"], "AdmitScaleIn", "{seen}");
        assert_eq!(e["type"], "Normal", "{seen}");
        assert_eq!(e["note"], note, "{seen}");
        assert_eq!(e["regarding"]["kind"], "Deployment", "{seen}");
        assert_eq!(e["regarding"]["name"], deployment, "{seen}");
        assert_eq!(e["reportingController"], MANAGER, "{seen}");
        send.send_response(ok(e));
        self
    }

    async fn radio_silence(mut self) -> Self {
        let next = tokio::time::timeout(SILENCE, self.handle.next_request()).await;
        if let Ok(Some((req, _))) = next {
            panic!("no request expected, got {} {}", req.method(), req.uri());
        }
        self
    }
}

/// The path of `policy` (`sub`: a subresource such as `/status`).
fn policy_path(policy: &DeletionCostPolicy, sub: &str) -> String {
    format!(
        "/apis/deletioncost.dev/v1alpha1/namespaces/{}/deletioncostpolicies/{}{sub}",
        policy.namespace().unwrap_or_default(),
        policy.name_any()
    )
}

/// A 200 with `body`.
fn ok(body: &Value) -> Response<Body> {
    Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(body).expect("JSON")))
        .expect("a response")
}

/// A JSON merge patch of `patch` into `target` (RFC 7386).
fn merge(target: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (k, v) in fields {
        if v.is_null() {
            if let Some(t) = target.as_object_mut() {
                t.remove(k);
            }
        } else {
            merge(&mut target[k], v);
        }
    }
}

/// The label every kubelet puts on its node.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The hostnames a node list's `labelSelector=kubernetes.io/hostname in
/// (a,b)` selects, from its query string.
fn node_list_selection(query: &str) -> Option<Vec<String>> {
    let (_, selector) = deletion_cost_testkit::fake_api::parse_query(query)
        .into_iter()
        .find(|(k, _)| k == "labelSelector")?;
    let inner = selector
        .strip_prefix(&format!("{HOSTNAME_LABEL} in ("))?
        .strip_suffix(')')?;
    Some(inner.split(',').map(str::to_string).collect())
}
