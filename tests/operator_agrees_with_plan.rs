//! The live operator writes the costs `plan` shows: for every example
//! policy, a cluster-wide operator on the fake API server and
//! `deletion-cost plan` over a snapshot of the same objects (and the same
//! Prometheus) agree pod by pod. The cluster has three namespaces whose pods
//! share nodes, so a node kept busy by another team's pods must count as
//! busy for `nodeConsolidation` in both; and the annotations the autoscalers
//! read (a node's `scale-down-disabled`, another team's `do-not-disrupt`
//! pod, a cost Karpenter manages), which the operator's trimmed caches must
//! keep for both to agree.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

mod support;

use deletion_cost::annotations::{
    CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT, KARPENTER_MANAGED_COST, POD_DELETION_COST,
};
use deletion_cost_testkit::fake_api::FakeApi;
use deletion_cost_testkit::prometheus::{openmetrics, unix_now, PrometheusServer};
use deletion_cost_testkit::{eventually, free_addr, http_get, wait_until};
use serde_json::{json, Value};
use support::operator::{config, Operator, NS};

/// Every example that is a policy.
const POLICIES: &[&str] = &[
    "config/examples/combined.yaml",
    "config/examples/consolidation.yaml",
    "config/examples/least-utilised.yaml",
    "config/examples/payg-first.yaml",
    "config/examples/spot-first.yaml",
    "config/examples/zone-balance.yaml",
];

/// (name, karpenter capacity type, billing class, zone)
const NODES: &[(&str, &str, &str, &str)] = &[
    ("spot-a", "spot", "spot", "zone-a"),
    ("spot-b", "spot", "spot", "zone-b"),
    ("od-a", "on-demand", "reserved", "zone-a"),
    ("payg-b", "on-demand", "pay-as-you-go", "zone-b"),
];

/// The shop's pods: (name, node, CPU cores). Each node holds two or three
/// of them; spot-a and od-a are also full of other namespaces' pods.
const WEB: &[(&str, &str, f64)] = &[
    ("web-0", "spot-a", 0.1),
    ("web-1", "spot-a", 1.7),
    ("web-2", "spot-b", 0.5),
    ("web-3", "spot-b", 0.9),
    ("web-4", "spot-b", 1.3),
    ("web-5", "od-a", 0.3),
    ("web-6", "od-a", 1.1),
    ("web-7", "payg-b", 0.7),
    ("web-8", "payg-b", 1.5),
];

/// Other teams' pods: (namespace, name, node).
fn others() -> Vec<(String, String, &'static str)> {
    let mut out = Vec::new();
    for i in 0..6 {
        out.push(("batch".into(), format!("job-{i}"), "spot-a"));
    }
    for i in 0..4 {
        out.push(("tools".into(), format!("tool-{i}"), "od-a"));
    }
    out
}

/// The node the cluster-autoscaler may not remove.
const KEPT_NODE: &str = "spot-b";
/// Another team's pod that Karpenter must not disrupt (on spot-a).
const KEPT_BY: &str = "job-0";
/// The shop's pod whose cost Karpenter manages, and that cost.
const KARPENTERS: (&str, &str) = ("web-2", "-1000");

/// Every object of the cluster, as the API server lists them.
fn objects() -> Vec<Value> {
    let mut out = Vec::new();
    for (name, capacity, class, zone) in NODES {
        let mut node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "karpenter.sh/capacity-type": capacity,
            "billing.example.com/class": class,
            "topology.kubernetes.io/zone": zone},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"}}});
        if *name == KEPT_NODE {
            node["metadata"]["annotations"][CA_SCALE_DOWN_DISABLED] = json!("true");
        }
        out.push(node);
    }
    out.push(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-abc", "namespace": NS, "uid": "rs-uid",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "dep-uid", "controller": true}]},
        "spec": {"replicas": WEB.len(), "selector": {"matchLabels": {"app": "web"}}}
    }));
    let pod = |ns: &str, name: &str, node: &str, labels: Value, owner: Option<&str>| {
        let owners = owner.map_or(json!([]), |rs| {
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": format!("{rs}-uid"), "controller": true}])
        });
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}"), "labels": labels,
                "ownerReferences": owners},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:1"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}]}
        })
    };
    for (name, node, _) in WEB {
        let mut p = pod(NS, name, node, json!({"app": "web"}), Some("web-abc"));
        if *name == KARPENTERS.0 {
            p["metadata"]["annotations"] =
                json!({POD_DELETION_COST: KARPENTERS.1, KARPENTER_MANAGED_COST: "true"});
        }
        out.push(p);
    }
    for (ns, name, node) in others() {
        // the same labels as the shop's pods: only the namespace tells them apart
        let mut p = pod(&ns, &name, node, json!({"app": "web"}), Some("other-rs"));
        if name == KEPT_BY {
            p["metadata"]["annotations"] = json!({KARPENTER_DO_NOT_DISRUPT: "true"});
        }
        out.push(p);
    }
    out
}

/// A CPU counter per shop pod, a minute apart, whose rate is the pod's cores.
fn cpu_series() -> String {
    let t = unix_now() - 90;
    let mut lines = Vec::new();
    for (name, _, cores) in WEB {
        let series = format!(
            r#"container_cpu_usage_seconds_total{{namespace="{NS}",container="app",app="web",pod="{name}"}}"#
        );
        lines.push((series.clone(), "1000".to_string(), t - 60));
        lines.push((series, format!("{}", 1000.0 + cores * 60.0), t));
    }
    let refs: Vec<(&str, &str, i64)> = lines
        .iter()
        .map(|(s, v, t)| (s.as_str(), v.as_str(), *t))
        .collect();
    openmetrics(&refs)
}

/// The policy's document, as JSON.
fn policy(path: &str) -> Value {
    let text = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR")))
        .expect("an example policy");
    let policies = deletion_cost::input::parse_policies(path, &text).expect("a policy");
    let mut doc = serde_json::to_value(&policies[0].policy).expect("JSON");
    doc["apiVersion"] = json!("deletioncost.dev/v1alpha1");
    doc["kind"] = json!("DeletionCostPolicy");
    doc
}

/// What `deletion-cost plan` wants each shop pod to carry (its desired cost,
/// or none when it keeps what it has).
fn planned(
    path: &str,
    snapshot: &std::path::Path,
    prometheus: &str,
) -> BTreeMap<String, Option<i64>> {
    let out = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["plan", "--policy", path, "--snapshot"])
        .arg(snapshot)
        .args(["--prometheus", prometheus, "-o", "json"])
        .output()
        .expect("deletion-cost runs");
    assert!(
        out.status.success(),
        "plan {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plans: Value = serde_json::from_slice(&out.stdout).expect("JSON plans");
    plans[0]["pods"]
        .as_array()
        .expect("planned pods")
        .iter()
        .map(|p| {
            let name = p["name"].as_str().expect("a name").to_string();
            (name, p["desired"].as_i64())
        })
        .collect()
}

/// The cost each shop pod carries on the fake.
fn written(fake: &FakeApi) -> BTreeMap<String, Option<i64>> {
    WEB.iter()
        .map(|(name, _, _)| {
            let cost = fake
                .get_json("Pod", NS, name)
                .and_then(|p| {
                    p["metadata"]["annotations"][POD_DELETION_COST]
                        .as_str()
                        .map(str::to_string)
                })
                .and_then(|c| c.parse().ok());
            (name.to_string(), cost)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_writes_the_costs_plan_shows_for_every_example_policy() {
    let prom = PrometheusServer::start(&cpu_series());
    let dir = tempfile::tempdir().expect("a temp dir");
    let snapshot = dir.path().join("cluster.json");
    std::fs::write(
        &snapshot,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": objects()}))
            .expect("JSON"),
    )
    .expect("write the snapshot");

    let mut disagreements = Vec::new();
    for path in POLICIES {
        let want = planned(path, &snapshot, &prom.url());
        assert_eq!(
            want.len(),
            WEB.len(),
            "{path}: plan selects every shop pod: {want:?}"
        );
        assert!(
            want.values().any(Option::is_some),
            "{path}: plan writes something: {want:?}"
        );
        assert_eq!(want[KARPENTERS.0], None, "{path}: Karpenter's cost is kept");
        if path.ends_with("consolidation.yaml") {
            // spot-a (by job-0) and spot-b (by its annotation) cannot go:
            // their pods take the band after every count (maxPods 110, plus
            // one); the rest their node's count. Each band holds 4,096
            // node slots.
            let band = |pod: &str| want[pod].map(|c| c / 4096);
            for pod in ["web-0", "web-1", "web-3", "web-4"] {
                assert_eq!(band(pod), Some(111), "{path}: {pod}: {want:?}");
            }
            assert_eq!(band("web-7"), Some(2), "{path}: {want:?}");
            // and no two nodes share a cost
            assert_ne!(want["web-0"], want["web-3"], "{path}: {want:?}");
        }

        let fake = FakeApi::start().await;
        for o in objects() {
            fake.apply_json(o).expect("an object");
        }
        let doc = policy(path);
        let name = doc["metadata"]["name"]
            .as_str()
            .expect("a policy name")
            .to_string();
        fake.apply_json(doc).expect("the policy");
        let mut cfg = config("agreement", 1000.0, 1000);
        cfg.namespace = None;
        cfg.metrics_addr = free_addr();
        cfg.prometheus_url = Some(prom.url());
        let op = Operator::start(&fake, cfg).serving(&fake).await;
        // the round has run and its writes have landed
        eventually(
            Duration::from_secs(30),
            "the policy's round and its writes",
            || async {
                let status = fake
                    .get_json("DeletionCostPolicy", NS, &name)
                    .map(|p| p["status"].clone())
                    .unwrap_or(Value::Null);
                status["observedGeneration"].is_i64()
                    && status["pendingPatches"].as_u64().unwrap_or(0) == 0
                    && want
                        .iter()
                        .all(|(pod, cost)| cost.is_none() || written(&fake)[pod].is_some())
            },
        )
        .await;
        // and nothing else follows
        let settled = written(&fake);
        let changed = wait_until(Duration::from_secs(2), || async {
            written(&fake) != settled
        })
        .await;
        assert!(!changed, "{path}: costs still changing after the round");
        op.stop().await;

        // a pod the plan leaves alone keeps the cost it had
        let expected: BTreeMap<String, Option<i64>> = want
            .iter()
            .map(|(pod, cost)| {
                let kept = (pod == KARPENTERS.0)
                    .then(|| KARPENTERS.1.parse().ok())
                    .flatten();
                (pod.clone(), cost.or(kept))
            })
            .collect();
        if settled != expected {
            disagreements.push(format!(
                "{path}:\n  operator {settled:?}\n  plan     {expected:?}"
            ));
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

/// An operator installed for one namespace cannot see other namespaces'
/// pods: its consolidation plans say that their node counts are partial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_scoped_operator_says_its_node_counts_are_partial() {
    let fake = FakeApi::start().await;
    for o in objects() {
        fake.apply_json(o).expect("an object");
    }
    fake.apply_json(policy("config/examples/consolidation.yaml"))
        .expect("the policy");
    let mut cfg = config("scoped", 1000.0, 1000);
    cfg.metrics_addr = free_addr();
    let port = cfg.metrics_addr.port();
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    eventually(
        Duration::from_secs(30),
        "the policy's first round",
        || async {
            fake.get_json("DeletionCostPolicy", NS, "web-consolidation")
                .is_some_and(|p| p["status"]["observedGeneration"].is_i64())
        },
    )
    .await;
    let (code, page) = http_get(port, "/policies/shop/web-consolidation").await;
    op.stop().await;
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains("counts only namespace shop") && page.contains("pods on each node"),
        "{page}"
    );
}

/// Another namespace's pods landing on a node make it busier for
/// `nodeConsolidation`: the operator re-plans on their events, as `plan`
/// over the new snapshot does, without waiting for the policy's refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_namespaces_pods_moving_in_re_plan_consolidation() {
    let path = "config/examples/consolidation.yaml";
    let fake = FakeApi::start().await;
    let mut cluster = objects();
    for o in &cluster {
        fake.apply_json(o.clone()).expect("an object");
    }
    let mut doc = policy(path);
    // a refresh far away: only events can bring the new counts
    doc["spec"]["refreshInterval"] = json!("1h");
    fake.apply_json(doc).expect("the policy");
    let mut cfg = config("moving-in", 1000.0, 1000);
    cfg.namespace = None;
    cfg.metrics_addr = free_addr();
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    eventually(
        Duration::from_secs(30),
        "the first round's writes",
        || async { written(&fake).values().all(Option::is_some) },
    )
    .await;
    // settled: no event of its own is left to trigger a round
    let before = written(&fake);
    let changed = wait_until(Duration::from_secs(3), || async {
        written(&fake) != before
    })
    .await;
    assert!(!changed, "costs still changing after the first round");

    // eight batch pods move onto payg-b, which held only two shop pods
    for i in 0..8 {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("late-{i}"), "namespace": "batch", "uid": format!("late-{i}"),
                "labels": {"app": "batch"}},
            "spec": {"nodeName": "payg-b", "containers": [{"name": "app", "image": "app:1"}]},
            "status": {"phase": "Running"}
        });
        fake.apply_json(pod.clone()).expect("a batch pod");
        cluster.push(pod);
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let snapshot = dir.path().join("cluster.json");
    std::fs::write(
        &snapshot,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": cluster}))
            .expect("JSON"),
    )
    .expect("write the snapshot");
    let want = planned(path, &snapshot, "http://127.0.0.1:9");
    assert!(
        want["web-7"] != before["web-7"],
        "the new pods change what plan wants for payg-b's pods: {want:?} vs {before:?}"
    );
    let agreed = wait_until(Duration::from_secs(20), || async {
        let now = written(&fake);
        want.iter()
            .all(|(pod, cost)| cost.is_none() || now[pod] == *cost)
    })
    .await;
    let now = written(&fake);
    op.stop().await;
    assert!(
        agreed,
        "the operator did not re-plan on the other namespace's pods:\n  operator {now:?}\n  plan     {want:?}"
    );
}
