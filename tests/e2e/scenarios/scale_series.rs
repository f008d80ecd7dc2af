//! The scale-in webhook's series (issue 28, point 5): every scaler people
//! run, scale-in after scale-in, first with the webhook off and then on.
//! Before each scale-in the billing classes of the workload's nodes swap, so
//! the costs from the last refresh point at the wrong pods; each deleted pod
//! is checked against a `plan` over a snapshot taken after the swap.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::ByteString;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

use super::{
    apply_policy, finished, loopback_certificate, plan_victims_as_of, pod_template, pods, snapshot,
    terminating, wait_running, write_policy, CAPACITY, ZONE,
};
use crate::cluster::{labels, Env, MANAGER, POOL_LABEL, SUITE_LABEL};
use crate::operator::{Operator, Options};
use deletion_cost::annotations::POD_DELETION_COST;
use deletion_cost_testkit::eventually;

/// Node label that keeps each workload on nodes of its own, so swapping one
/// workload's billing classes leaves the others' costs right.
pub(super) const GROUP_LABEL: &str = "e2e.deletioncost.dev/group";
/// Replicas each workload starts with; every scale-in removes one.
const START: i32 = 12;
/// Scale-ins per scaler and per webhook setting (4 scalers: 20 on, 20 off).
const PER_SCALER: usize = 5;
/// The operator identity of this scenario (the recorder's key).
const IDENTITY: &str = "n-series-operator";

// ------------------------------------------------------ webhook registration

/// The shipped webhook (`deploy/components/scale-webhook`), pointed at the
/// operator under test (`clientConfig.url`, trusting `ca`) and at namespace
/// `ns` only, named after `ns` and carrying the suite label (a run that
/// dies leaves it to the next run's leftover removal).
pub(super) fn shipped_webhook(
    ns: &str,
    hook: SocketAddr,
    ca: &str,
) -> ValidatingWebhookConfiguration {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/components/scale-webhook/webhook.yaml"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let mut config: ValidatingWebhookConfiguration =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("webhook.yaml: {e}"));
    config.metadata.name = Some(format!("deletion-cost-e2e-{ns}"));
    config.metadata.annotations = None;
    config.metadata.labels = Some(labels(&[(SUITE_LABEL, "true")]));
    for w in config.webhooks.iter_mut().flatten() {
        w.client_config.service = None;
        w.client_config.url = Some(format!("https://{hook}/v1/admit-scale-in"));
        w.client_config.ca_bundle = Some(ByteString(ca.as_bytes().to_vec()));
        w.namespace_selector = Some(
            serde_json::from_value(json!({"matchLabels": {"kubernetes.io/metadata.name": ns}}))
                .unwrap_or_else(|e| panic!("{e}")),
        );
    }
    config
}

/// A registered webhook configuration. It is removed by [`Registered::remove`]
/// or, when the scenario panics first, when it is dropped: a webhook left
/// pointing at a stopped operator would be called by every later scale-in
/// of the namespace.
pub(super) struct Registered {
    config: kube::Config,
    name: String,
    removed: bool,
}

impl Registered {
    /// Creates `config` on the server.
    pub(super) async fn create(env: &Env, config: &ValidatingWebhookConfiguration) -> Registered {
        Api::<ValidatingWebhookConfiguration>::all(env.client.clone())
            .create(&PostParams::default(), config)
            .await
            .unwrap_or_else(|e| panic!("registering the webhook: {e}"));
        Registered {
            config: env.config.clone(),
            name: config.name_any(),
            removed: false,
        }
    }

    /// Removes it, asserting the server did.
    pub(super) async fn remove(mut self, env: &Env) {
        Api::<ValidatingWebhookConfiguration>::all(env.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("removing the webhook {}: {e}", self.name));
        self.removed = true;
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        // Drop cannot await, and the suite's runtime may be the one polling
        // us: a runtime and a client of its own on another thread.
        let (config, name) = (self.config.clone(), self.name.clone());
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
                Api::<ValidatingWebhookConfiguration>::all(client)
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        })
        .join();
        if !matches!(done, Ok(Ok(()))) {
            eprintln!(
                "could not remove the webhook {} ({done:?}): the next run removes it",
                self.name
            );
        }
    }
}

// ------------------------------------------------------------------ scalers

/// The four ways a workload gets scaled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Scaler {
    /// `kubectl scale deployment` (the real binary).
    KubectlDeployment,
    /// An update of `deployments/scale`, as the HPA sends it.
    HpaScale,
    /// A Deployment update with fewer `spec.replicas`, as a GitOps sync.
    GitOps,
    /// `kubectl scale replicaset` on a ReplicaSet no Deployment owns.
    KubectlBareReplicaSet,
}

impl Scaler {
    pub(super) const ALL: [Scaler; 4] = [
        Scaler::KubectlDeployment,
        Scaler::HpaScale,
        Scaler::GitOps,
        Scaler::KubectlBareReplicaSet,
    ];

    /// Its workload (a Deployment, or the bare ReplicaSet).
    pub(super) fn app(self) -> &'static str {
        match self {
            Scaler::KubectlDeployment => "kubectl",
            Scaler::HpaScale => "hpa",
            Scaler::GitOps => "gitops",
            Scaler::KubectlBareReplicaSet => "bare",
        }
    }

    pub(super) fn kind(self) -> &'static str {
        match self {
            Scaler::KubectlBareReplicaSet => "ReplicaSet",
            _ => "Deployment",
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            Scaler::KubectlDeployment => "kubectl scale deployment",
            Scaler::HpaScale => "PUT deployments/scale (HPA)",
            Scaler::GitOps => "PUT deployment, fewer spec.replicas (GitOps)",
            Scaler::KubectlBareReplicaSet => "kubectl scale replicaset (bare)",
        }
    }
}

/// Runs the real `kubectl` with the suite's KUBECONFIG; its stdout.
pub(super) async fn kubectl(args: &[&str]) -> String {
    let out = tokio::process::Command::new("kubectl")
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"));
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Scales `scaler`'s workload to `replicas`: the time of the request that
/// scales (for kubectl the whole command, its start included).
pub(super) async fn scale_with(env: &Env, ns: &str, scaler: Scaler, replicas: i32) -> Duration {
    scale_named(env, ns, scaler, scaler.app(), replicas).await
}

/// [`scale_with`] for the workload `app` (of `scaler`'s kind).
pub(super) async fn scale_named(
    env: &Env,
    ns: &str,
    scaler: Scaler,
    app: &str,
    replicas: i32,
) -> Duration {
    let deployments = Api::<Deployment>::namespaced(env.client.clone(), ns);
    let to = format!("--replicas={replicas}");
    let params = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match scaler {
        Scaler::KubectlDeployment | Scaler::KubectlBareReplicaSet => {
            let resource = if scaler == Scaler::KubectlDeployment {
                "deployment"
            } else {
                "replicaset"
            };
            let started = Instant::now();
            kubectl(&["scale", resource, app, &to, "-n", ns]).await;
            started.elapsed()
        }
        Scaler::HpaScale => {
            // read, then update: what the HPA's scale client does (a write
            // that lost a race with the Deployment controller is read again)
            for _ in 0..5 {
                let mut scale = deployments
                    .get_scale(app)
                    .await
                    .unwrap_or_else(|e| panic!("reading {ns}/{app}/scale: {e}"));
                scale.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
                let started = Instant::now();
                match deployments.replace_scale(app, &params, &scale).await {
                    Ok(_) => return started.elapsed(),
                    Err(e) if is_conflict(&e) => continue,
                    Err(e) => panic!("updating {ns}/{app}/scale: {e}"),
                }
            }
            panic!("updating {ns}/{app}/scale: five conflicts in a row")
        }
        Scaler::GitOps => {
            for _ in 0..5 {
                let mut d = deployments
                    .get(app)
                    .await
                    .unwrap_or_else(|e| panic!("reading {ns}/{app}: {e}"));
                d.metadata.managed_fields = None;
                d.spec.replicas = Some(replicas);
                let started = Instant::now();
                match deployments.replace(app, &params, &d).await {
                    Ok(_) => return started.elapsed(),
                    Err(e) if is_conflict(&e) => continue,
                    Err(e) => panic!("updating {ns}/{app}: {e}"),
                }
            }
            panic!("updating {ns}/{app}: five conflicts in a row")
        }
    }
}

// ---------------------------------------------------------------- workloads

/// One scaler's workload, its nodes and what the series knows of them.
struct Workload {
    scaler: Scaler,
    replicas: i32,
    /// Full names of its nodes that are spot now, and on-demand now.
    spot: Vec<String>,
    on_demand: Vec<String>,
    /// Its policy as `plan --policy` reads it, and where snapshots go.
    policy_file: PathBuf,
    dir: PathBuf,
}

fn policy_spec(scaler: Scaler) -> Value {
    json!({
        "targetRef": {"kind": scaler.kind(), "name": scaler.app()},
        "signals": [{"billingClass": {"nodeLabel": CAPACITY, "costs": {"spot": 0, "on-demand": 1000}, "default": 500}}],
    })
}

/// Two spot and two on-demand nodes for `app` alone.
async fn workload_nodes(env: &Env, ns: &str, app: &str) -> (Vec<String>, Vec<String>) {
    let mut list = Vec::new();
    for (class, zone) in [("spot", "zone-a"), ("on-demand", "zone-b")] {
        for i in 0..2 {
            list.push((
                format!("{app}-{class}-{i}"),
                labels(&[(CAPACITY, class), (ZONE, zone), (GROUP_LABEL, app)]),
            ));
        }
    }
    let refs: Vec<(&str, BTreeMap<String, String>)> =
        list.iter().map(|(n, l)| (n.as_str(), l.clone())).collect();
    env.kubelet.add_nodes(ns, &refs).await;
    let full = |class: &str| -> Vec<String> {
        (0..2).map(|i| format!("{ns}-{app}-{class}-{i}")).collect()
    };
    (full("spot"), full("on-demand"))
}

/// `app`'s pods: on its own nodes, spread over them (one more on a node at most).
pub(super) fn spread_template(ns: &str, app: &str) -> Value {
    let mut template = pod_template(ns, app);
    template["spec"]["nodeSelector"] = json!({POOL_LABEL: ns, GROUP_LABEL: app});
    template["spec"]["topologySpreadConstraints"] = json!([{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}}}]);
    template
}

/// Creates `scaler`'s workload with its nodes and policy file.
async fn workload(env: &Env, ns: &str, scaler: Scaler, dir: &Path) -> Workload {
    let app = scaler.app();
    let (spot, on_demand) = workload_nodes(env, ns, app).await;
    let kind = if scaler == Scaler::KubectlBareReplicaSet {
        "ReplicaSet"
    } else {
        "Deployment"
    };
    super::create_workload(env, ns, kind, app, START, spread_template(ns, app)).await;
    let dir = dir.join(app);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let policy_file = write_policy(&dir, ns, app, &policy_spec(scaler));
    Workload {
        scaler,
        replicas: START,
        spot,
        on_demand,
        policy_file,
        dir,
    }
}

/// Waits until every active pod of `w` carries the cost its node's class
/// has now: the costs are fresh before the signal changes again.
async fn wait_costs_match(env: &Env, ns: &str, w: &Workload) {
    let app = w.scaler.app();
    eventually(
        Duration::from_secs(60),
        &format!(
            "the costs of {ns}/{app} follow its nodes' classes (spot {:?})",
            w.spot
        ),
        || async {
            pods(env, ns, app)
                .await
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .all(|p| {
                    let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                    let want = if node.is_some_and(|n| w.spot.contains(&n)) {
                        "0"
                    } else {
                        "1000"
                    };
                    p.annotations().get(POD_DELETION_COST).map(String::as_str) == Some(want)
                })
        },
    )
    .await;
}

/// Sets the capacity type of `w`'s nodes as `w` says.
async fn label_nodes(env: &Env, w: &Workload) {
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.client.clone());
    for (names, class) in [(&w.spot, "spot"), (&w.on_demand, "on-demand")] {
        for n in names {
            api.patch(
                n,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {CAPACITY: class}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("labelling node {n}: {e}"));
        }
    }
}

/// The deletion-cost annotation of every pod of the namespace.
async fn costs(env: &Env, ns: &str) -> BTreeMap<String, Option<String>> {
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(env.client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap_or_else(|e| panic!("listing pods of {ns}: {e}"))
        .into_iter()
        .map(|p| {
            (
                p.name_any(),
                p.annotations().get(POD_DELETION_COST).cloned(),
            )
        })
        .collect()
}

/// The pod writes (patches) the operator under test sent since `since`.
fn pod_writes_since(env: &Env, ns: &str, since: Instant) -> Vec<String> {
    let prefix = format!("/api/v1/namespaces/{ns}/pods/");
    env.recorder
        .entries()
        .into_iter()
        .filter(|e| e.operator == IDENTITY && e.at >= since && e.method != "GET")
        .filter(|e| e.path.starts_with(&prefix))
        .map(|e| format!("{} {}", e.method, e.path))
        .collect()
}

// ------------------------------------------------------------------- rounds

/// One scale-in and what it showed.
struct Round {
    scaler: Scaler,
    webhook: bool,
    took: Duration,
    deleted: BTreeSet<String>,
    victims: Vec<String>,
    ties: BTreeSet<String>,
    /// Where the deleted and the planned pods run, and their costs.
    detail: String,
}

impl Round {
    /// Deleted pods a fresh plan does not name (nor puts in a tie at the cut).
    fn wrong(&self) -> usize {
        self.deleted
            .iter()
            .filter(|d| !self.victims.contains(d) && !self.ties.contains(*d))
            .count()
    }

    /// The deleted pods are the plan's victims, up to its reported tie.
    fn agrees(&self) -> bool {
        self.deleted.len() == self.victims.len()
            && self.wrong() == 0
            && self
                .victims
                .iter()
                .all(|v| self.ties.contains(v) || self.deleted.contains(v))
    }
}

/// Swaps the classes of `w`'s nodes, scales it in by one with its scaler,
/// and compares the pod deleted with a plan over the objects as they were
/// just before the scale-in.
async fn scale_in(env: &Env, ns: &str, w: &mut Workload, webhook: bool) -> Round {
    let app = w.scaler.app();
    wait_costs_match(env, ns, w).await;
    // the signal changes: the costs of the last refresh now name the pods
    // of the nodes that just became on-demand
    std::mem::swap(&mut w.spot, &mut w.on_demand);
    label_nodes(env, w).await;
    let snap = snapshot(env, ns, &w.dir).await;
    let before = terminating(env, ns, app).await;
    w.replicas -= 1;
    let took = scale_with(env, ns, w.scaler, w.replicas).await;
    // about when the controller sorts: the age buckets are judged as of then
    let sorted_at = k8s_openapi::jiff::Timestamp::now().to_string();
    eventually(
        Duration::from_secs(30),
        &format!("the controller deletes a pod of {ns}/{app}"),
        || async { terminating(env, ns, app).await.len() > before.len() },
    )
    .await;
    let deleted: BTreeSet<String> = terminating(env, ns, app)
        .await
        .difference(&before)
        .cloned()
        .collect();
    let planned = plan_victims_as_of(&w.policy_file, &snap, 1, Some(&sorted_at));
    assert_eq!(
        planned.len(),
        1,
        "one ReplicaSet of {app} planned: {planned:?}"
    );
    let (victims, ties) = planned.into_values().next().unwrap_or_default();
    // node and cost now of the pods in question, for a failure message
    let all = pods(env, ns, app).await;
    let detail = deleted
        .iter()
        .chain(&victims)
        .map(|n| {
            let p = all.iter().find(|p| p.name_any() == *n);
            let node = p
                .and_then(|p| p.spec.as_ref()?.node_name.clone())
                .unwrap_or_default();
            let cost = p.and_then(|p| p.annotations().get(POD_DELETION_COST).cloned());
            format!("{n} on {node} (cost now {cost:?})")
        })
        .collect::<Vec<_>>()
        .join(", ");
    Round {
        scaler: w.scaler,
        webhook,
        took,
        deleted,
        victims,
        ties,
        detail,
    }
}

/// Nearest-rank percentile of `xs` (sorted here), in milliseconds.
pub(super) fn percentile_ms(xs: &[Duration], p: f64) -> f64 {
    let mut v: Vec<f64> = xs.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn rounds_summary(rounds: &[Round], webhook: bool, scaler: Option<Scaler>) -> String {
    let picked: Vec<&Round> = rounds
        .iter()
        .filter(|r| r.webhook == webhook && scaler.is_none_or(|s| r.scaler == s))
        .collect();
    let took: Vec<Duration> = picked.iter().map(|r| r.took).collect();
    let victims: usize = picked.iter().map(|r| r.deleted.len()).sum();
    let wrong: usize = picked.iter().map(|r| r.wrong()).sum();
    format!(
        "{} of {} scale-ins as a fresh plan says, {wrong} of {victims} victims wrong; scale request p50 {:.0} ms, p99 {:.0} ms",
        picked.iter().filter(|r| r.agrees()).count(),
        picked.len(),
        percentile_ms(&took, 0.5),
        percentile_ms(&took, 0.99),
    )
}

// ----------------------------------------------------------------- scenario

/// Issue 28's series on the real control plane: 20 scale-ins with the
/// webhook off, then 20 with it on, five by each scaler; a dry-run scale
/// and a scale-in of a workload no policy selects write nothing; the
/// operator stopped, a scale-in still goes through at once.
pub(super) async fn n_scale_series(env: &'static Env) {
    env.scenario("n-series", |ns| async move {
        let started = Instant::now();
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut workloads = Vec::new();
        for scaler in Scaler::ALL {
            workloads.push(workload(env, &ns, scaler, dir.path()).await);
        }
        // a workload no policy selects, on the pool's nodes
        let lone: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "lone", "namespace": ns},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "lone"}},
                     "template": pod_template(&ns, "lone")},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let deployments = Api::<Deployment>::namespaced(env.client.clone(), &ns);
        deployments
            .create(&PostParams::default(), &lone)
            .await
            .unwrap_or_else(|e| panic!("creating {ns}/lone: {e}"));
        for w in &workloads {
            wait_running(env, &ns, w.scaler.app(), START as usize).await;
        }
        wait_running(env, &ns, "lone", 3).await;

        let (cert, key, ca) = loopback_certificate(dir.path());
        let opts = Options::new(IDENTITY).with_hook_tls(&cert, &key);
        let op = Operator::start(env, opts).await;
        op.wait_ready().await;
        for w in &workloads {
            apply_policy(env, &ns, w.scaler.app(), policy_spec(w.scaler)).await;
        }
        let setup = started.elapsed();

        // ---- the webhook off: the costs are as old as the last refresh
        let mut rounds = Vec::new();
        for _ in 0..PER_SCALER {
            for w in workloads.iter_mut() {
                rounds.push(scale_in(env, &ns, w, false).await);
            }
        }

        // ---- the webhook registered
        let webhook = Registered::create(env, &shipped_webhook(&ns, op.hook, &ca)).await;
        let metric = |outcome: &str| {
            format!("deletion_cost_scale_webhook_calls_total{{outcome=\"{outcome}\"}}")
        };
        for w in &workloads {
            wait_costs_match(env, &ns, w).await;
        }

        // a server-side dry run reaches the webhook (which also shows the
        // server now calls it) and writes nothing
        let hpa = &workloads[1];
        let (before_costs, before_gone) = (costs(env, &ns).await, terminating(env, &ns, "hpa").await);
        let dry_runs = op.metric(&metric("dry_run")).await.unwrap_or(0.0);
        let since = Instant::now();
        let to = format!("--replicas={}", hpa.replicas - 1);
        eventually(
            Duration::from_secs(30),
            "a server-side dry-run scale-in reaches the webhook",
            || async {
                kubectl(&["scale", "deployment", "hpa", &to, "--dry-run=server", "-n", &ns]).await;
                op.metric(&metric("dry_run")).await.unwrap_or(0.0) > dry_runs
            },
        )
        .await;
        // what a write would have changed by now (the webhook waits for its cache)
        tokio::time::sleep(Duration::from_secs(1)).await;
        let replicas = deployments
            .get("hpa")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .spec
            .replicas;
        assert_eq!(replicas, Some(hpa.replicas), "a dry run changed the replicas");
        assert_eq!(
            terminating(env, &ns, "hpa").await,
            before_gone,
            "a dry run deleted pods"
        );
        assert_eq!(costs(env, &ns).await, before_costs, "a dry run changed costs");
        let writes = pod_writes_since(env, &ns, since);
        assert!(writes.is_empty(), "the operator wrote during a dry run: {writes:?}");

        // a workload no policy selects: answered at once, nothing written
        let (no_policy, under, count) = (
            op.metric(&metric("no_policy")).await.unwrap_or(0.0),
            op.metric("deletion_cost_scale_webhook_seconds_bucket{le=\"0.05\"}")
                .await
                .unwrap_or(0.0),
            op.metric("deletion_cost_scale_webhook_seconds_count")
                .await
                .unwrap_or(0.0),
        );
        let since = Instant::now();
        let lone_gone = terminating(env, &ns, "lone").await;
        kubectl(&["scale", "deployment", "lone", "--replicas=2", "-n", &ns]).await;
        eventually(
            Duration::from_secs(30),
            "the scale-in of lone goes through",
            || async { terminating(env, &ns, "lone").await.len() > lone_gone.len() },
        )
        .await;
        // the Deployment's call and its ReplicaSet's
        eventually(
            Duration::from_secs(10),
            "the webhook answered both calls of lone's scale-in",
            || async { op.metric(&metric("no_policy")).await.unwrap_or(0.0) >= no_policy + 2.0 },
        )
        .await;
        let calls = op
            .metric("deletion_cost_scale_webhook_seconds_count")
            .await
            .unwrap_or(0.0)
            - count;
        let fast = op
            .metric("deletion_cost_scale_webhook_seconds_bucket{le=\"0.05\"}")
            .await
            .unwrap_or(0.0)
            - under;
        assert!(
            calls >= 2.0 && fast == calls,
            "the webhook answered {calls} calls for a workload no policy selects, {fast} of them within 50 ms"
        );
        let lone_millis: Vec<u64> = op
            .log_lines("scale-in admitted")
            .iter()
            .filter(|l| l.pointer("/fields/outcome").and_then(Value::as_str) == Some("no_policy"))
            .filter_map(|l| l.pointer("/fields/millis").and_then(Value::as_u64))
            .collect();
        assert!(
            !lone_millis.is_empty() && lone_millis.iter().all(|m| *m < 50),
            "no-policy answers took {lone_millis:?} ms"
        );
        let lone_costs: Vec<String> = pods(env, &ns, "lone")
            .await
            .iter()
            .filter(|p| p.annotations().contains_key(POD_DELETION_COST))
            .map(|p| p.name_any())
            .collect();
        assert!(lone_costs.is_empty(), "pods of lone got costs: {lone_costs:?}");
        let writes = pod_writes_since(env, &ns, since);
        assert!(
            writes.iter().all(|w| !w.contains("/pods/lone-")),
            "the operator wrote pods of lone: {writes:?}"
        );

        // ---- the webhook on: each scale-in gets fresh costs
        let fresh_before = op.metric(&metric("fresh")).await.unwrap_or(0.0);
        for _ in 0..PER_SCALER {
            for w in workloads.iter_mut() {
                rounds.push(scale_in(env, &ns, w, true).await);
            }
        }
        let fresh = op.metric(&metric("fresh")).await.unwrap_or(0.0) - fresh_before;
        let answered: Vec<Duration> = op
            .log_lines("scale-in admitted")
            .iter()
            .filter(|l| l.pointer("/fields/outcome").and_then(Value::as_str) == Some("fresh"))
            .filter_map(|l| l.pointer("/fields/millis").and_then(Value::as_u64))
            .map(Duration::from_millis)
            .collect();

        // the predicted victims are in an Event on each scaled workload, and
        // not again on the ReplicaSets the Deployment controller resized
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(env.client.clone(), &ns);
        eventually(
            Duration::from_secs(10),
            "a ScaleInVictims Event on every scaled workload",
            || async {
                let regarding: BTreeSet<(String, String)> = events
                    .list(&Default::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|e| e.reason.as_deref() == Some("ScaleInVictims"))
                    .filter_map(|e| {
                        let r = e.regarding?;
                        Some((r.kind?, r.name?))
                    })
                    .collect();
                let want: BTreeSet<(String, String)> = Scaler::ALL
                    .iter()
                    .map(|s| (s.kind().to_string(), s.app().to_string()))
                    .collect();
                regarding == want
            },
        )
        .await;

        // ---- the operator stopped while the webhook is registered
        drop(op);
        let kubectl_w = &mut workloads[0];
        let gone = terminating(env, &ns, "kubectl").await;
        kubectl_w.replicas -= 1;
        let took = scale_with(env, &ns, Scaler::KubectlDeployment, kubectl_w.replicas).await;
        assert!(
            took < Duration::from_secs(5),
            "with the operator stopped kubectl scale took {took:?} (failurePolicy Ignore should let it through at once)"
        );
        let hpa_w = &mut workloads[1];
        hpa_w.replicas -= 1;
        let took_hpa = scale_with(env, &ns, Scaler::HpaScale, hpa_w.replicas).await;
        assert!(
            took_hpa < Duration::from_secs(2),
            "with the operator stopped a scale update took {took_hpa:?}"
        );
        eventually(
            Duration::from_secs(30),
            "the scale-in with the operator stopped deletes a pod",
            || async { terminating(env, &ns, "kubectl").await.len() > gone.len() },
        )
        .await;
        webhook.remove(env).await;

        // ---- the figures
        for webhook in [false, true] {
            eprintln!(
                "n-series: webhook {}: {}",
                if webhook { "on " } else { "off" },
                rounds_summary(&rounds, webhook, None)
            );
            for s in Scaler::ALL {
                eprintln!(
                    "n-series:   {:<46} {}",
                    s.describe(),
                    rounds_summary(&rounds, webhook, Some(s))
                );
            }
        }
        eprintln!(
            "n-series: the webhook's own answer (fresh calls, {} of them): p50 {:.0} ms, p99 {:.0} ms; operator stopped: kubectl scale {:.0} ms, scale update {:.0} ms; setup {:.0} s, total {:.0} s",
            answered.len(),
            percentile_ms(&answered, 0.5),
            percentile_ms(&answered, 0.99),
            took.as_secs_f64() * 1000.0,
            took_hpa.as_secs_f64() * 1000.0,
            setup.as_secs_f64(),
            started.elapsed().as_secs_f64(),
        );
        let on: Vec<&Round> = rounds.iter().filter(|r| r.webhook).collect();
        let off_wrong: usize = rounds.iter().filter(|r| !r.webhook).map(Round::wrong).sum();
        assert_eq!(on.len(), 4 * PER_SCALER);
        for r in &on {
            assert!(
                r.agrees(),
                "webhook on, {}: the controller deleted {:?}, a fresh plan names {:?} (tie at the cut: {:?}; {})",
                r.scaler.describe(),
                r.deleted,
                r.victims,
                r.ties,
                r.detail
            );
        }
        assert!(
            fresh >= on.len() as f64,
            "{fresh} webhook calls made the costs fresh for {} scale-ins",
            on.len()
        );
        // without it the swap must have fooled the stale costs, or the
        // series showed nothing
        assert!(
            off_wrong > 0,
            "with the webhook off every victim was right: the signal change did not make costs stale"
        );
    })
    .await;
    finished("n-series");
}
