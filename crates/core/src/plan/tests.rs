//! Planner tests: pure, over hand-built snapshots.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector as K8sSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::annotations::{POD_DELETION_COST, POLICY_ANNOTATION};
use crate::policy::DeletionCostPolicySpec;
use crate::signals::{Sample, UtilizationSamples};

const NOW: &str = "2026-11-22T03:00:00Z";

fn ts(s: &str) -> Time {
    Time(s.parse::<Timestamp>().unwrap())
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn owner(kind: &str, name: &str) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        controller: Some(true),
        ..Default::default()
    }
}

fn node(name: &str, extra: &[(&str, &str)]) -> std::sync::Arc<Node> {
    std::sync::Arc::new(Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels(extra)),
            ..Default::default()
        },
        ..Default::default()
    })
}

fn rs(name: &str, deployment: Option<&str>, hash: &str) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            uid: Some(format!("uid-{name}")),
            owner_references: deployment.map(|d| vec![owner("Deployment", d)]),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            selector: K8sSelector {
                match_labels: Some(labels(&[("app", "web"), ("hash", hash)])),
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

struct P<'a> {
    name: &'a str,
    node: &'a str,
    rs: &'a str,
    ready: bool,
    created: &'a str,
    annotations: &'a [(&'a str, &'a str)],
}

fn pod(p: P) -> Pod {
    let hash = p.rs.rsplit('-').next().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            name: Some(p.name.into()),
            namespace: Some("shop".into()),
            uid: Some(format!("uid-{}", p.name)),
            labels: Some(labels(&[("app", "web"), ("hash", hash)])),
            annotations: (!p.annotations.is_empty()).then(|| labels(p.annotations)),
            owner_references: Some(vec![owner("ReplicaSet", p.rs)]),
            creation_timestamp: Some(ts(p.created)),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: (!p.node.is_empty()).then(|| p.node.to_string()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if p.ready { "True" } else { "False" }.into(),
                last_transition_time: Some(ts(p.created)),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn simple(name: &str, node: &str) -> Pod {
    pod(P {
        name,
        node,
        rs: "web-abc",
        ready: true,
        created: "2026-11-20T00:00:00Z",
        annotations: &[],
    })
}

fn policy(spec: Value) -> NamedPolicy {
    let spec: DeletionCostPolicySpec = serde_json::from_value(spec).unwrap();
    NamedPolicy::validate("web", "shop", &spec).unwrap()
}

fn spot_first() -> NamedPolicy {
    policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}, "default": 50}}]
    }))
}

/// Chunks small enough that the tests' plans of a few pods span several.
pub(super) const SMALL_CHUNKS: Chunks = Chunks {
    select: 16,
    cost: 64,
};

fn opts() -> PlanOptions {
    PlanOptions {
        gates: FeatureGates::default(),
        now: Some(NOW.parse::<Timestamp>().unwrap().as_nanosecond()),
        scale_down_by: Some(1),
        assume_patches_applied: true,
        chunks: SMALL_CHUNKS,
    }
}

fn cluster(pods: Vec<Pod>) -> Snapshot {
    Snapshot {
        pods: pods
            .into_iter()
            .map(|p| std::sync::Arc::new(PodRecord::from(p)))
            .collect(),
        nodes: vec![
            node(
                "spot-1",
                &[
                    ("karpenter.sh/capacity-type", "spot"),
                    ("topology.kubernetes.io/zone", "a"),
                ],
            ),
            node(
                "spot-2",
                &[
                    ("karpenter.sh/capacity-type", "spot"),
                    ("topology.kubernetes.io/zone", "b"),
                ],
            ),
            node(
                "od-1",
                &[
                    ("karpenter.sh/capacity-type", "on-demand"),
                    ("topology.kubernetes.io/zone", "a"),
                ],
            ),
            node(
                "od-2",
                &[
                    ("karpenter.sh/capacity-type", "on-demand"),
                    ("topology.kubernetes.io/zone", "b"),
                ],
            ),
        ],
        replica_sets: vec![
            rs("web-abc", Some("web"), "abc"),
            rs("web-old", Some("web"), "old"),
        ],
        deployments: vec![],
        ignored: vec![],
    }
}

/// Applies a plan's patches to the snapshot as the API server would.
fn apply(snapshot: &mut Snapshot, plan: &Plan, policy: &str) {
    for patch in &plan.patches {
        let p = snapshot
            .pods
            .iter_mut()
            .map(std::sync::Arc::make_mut)
            .find(|p| p.identity.name.as_deref() == Some(&*patch.pod))
            .unwrap();
        p.ours.deletion_cost = Some(patch.cost.to_string());
        p.ours.policy = Some(policy.into());
    }
}

fn cost_of(plan: &Plan, pod: &str) -> Option<i32> {
    plan.pods
        .iter()
        .find(|p| &*p.name == pod)
        .and_then(|p| p.desired)
}

/// Node slots of a consolidation-only policy with the default or any
/// `maxPods` up to 524,286: all [`crate::policy::validate::MAX_NODE_SLOTS`].
const SLOTS: i32 = 4096;

/// The band of a pod's node under a consolidation-only policy: its count,
/// or 111 (`maxPods` 110, plus one) when no autoscaler may remove it.
fn band_of(plan: &Plan, pod: &str) -> Option<i32> {
    cost_of(plan, pod).map(|c| c / SLOTS)
}

#[test]
fn spot_first_costs_and_order() {
    let snap = cluster(vec![
        simple("a", "od-1"),
        simple("b", "spot-1"),
        simple("c", "od-2"),
    ]);
    let plan = plan(
        &spot_first(),
        &snap,
        &Default::default(),
        &Default::default(),
        &opts(),
    );
    assert_eq!(cost_of(&plan, "a"), Some(100));
    assert_eq!(cost_of(&plan, "b"), Some(0));
    assert_eq!(plan.patches.len(), 3);
    let rs = &plan.replica_sets[0];
    assert_eq!(rs.victims, vec![Arc::from("b")]);
    assert_eq!(rs.verdict, Verdict::AsIntended);
    assert_eq!(rs.deployment.as_deref(), Some("web"));
}

#[test]
fn second_plan_after_patches_sends_nothing() {
    let mut snap = cluster(vec![simple("a", "od-1"), simple("b", "spot-1")]);
    let p = spot_first();
    let first = plan(&p, &snap, &Default::default(), &Default::default(), &opts());
    apply(&mut snap, &first, "web");
    let second = plan(&p, &snap, &Default::default(), &first.values, &opts());
    assert!(second.patches.is_empty(), "{:?}", second.patches);
    assert!(second
        .pods
        .iter()
        .all(|p| p.action == CostAction::Unchanged));
}

#[test]
fn relabelled_node_recosts_only_its_pods() {
    let mut snap = cluster(vec![
        simple("a", "od-1"),
        simple("b", "spot-1"),
        simple("c", "od-2"),
    ]);
    let p = spot_first();
    let first = plan(&p, &snap, &Default::default(), &Default::default(), &opts());
    apply(&mut snap, &first, "web");
    snap.nodes[0] = node("spot-1", &[("karpenter.sh/capacity-type", "on-demand")]);
    let second = plan(&p, &snap, &Default::default(), &first.values, &opts());
    assert_eq!(second.patches.len(), 1);
    assert_eq!(&*second.patches[0].pod, "b");
    assert_eq!(second.patches[0].cost, 100);
}

#[test]
fn never_patches_outside_the_selector() {
    let mut other = simple("other", "spot-1");
    other.metadata.labels = Some(labels(&[("app", "db")]));
    let mut elsewhere = simple("elsewhere", "spot-1");
    elsewhere.metadata.namespace = Some("other".into());
    let snap = cluster(vec![simple("a", "od-1"), other, elsewhere]);
    let plan = plan(
        &spot_first(),
        &snap,
        &Default::default(),
        &Default::default(),
        &opts(),
    );
    let names: Vec<&str> = plan.patches.iter().map(|p| &*p.pod).collect();
    assert_eq!(names, ["a"]);
}

#[test]
fn foreign_costs_are_left_alone_unless_told() {
    let mut snap = cluster(vec![pod(P {
        name: "pinned",
        node: "spot-1",
        rs: "web-abc",
        ready: true,
        created: "2026-11-20T00:00:00Z",
        annotations: &[(POD_DELETION_COST, "9000")],
    })]);
    let p = spot_first();
    let kept = plan(&p, &snap, &Default::default(), &Default::default(), &opts());
    assert!(kept.patches.is_empty());
    assert_eq!(kept.pods[0].action, CostAction::KeepForeign);
    assert_eq!(kept.pods[0].owner, CostOwner::Foreign(None));
    let mut overwrite = p.clone();
    overwrite.spec.respect_foreign_costs = false;
    let taken = plan(
        &overwrite,
        &snap,
        &Default::default(),
        &Default::default(),
        &opts(),
    );
    assert_eq!(taken.patches.len(), 1);
    // another policy's value is foreign too
    std::sync::Arc::make_mut(&mut snap.pods[0]).ours.policy = Some("someone-else".into());
    let kept = plan(&p, &snap, &Default::default(), &Default::default(), &opts());
    assert_eq!(
        kept.pods[0].owner,
        CostOwner::Foreign(Some("someone-else".into()))
    );
    assert!(kept.patches.is_empty());
}

#[test]
fn budgets_put_the_newest_pods_over_budget_first() {
    let mk = |name, created| {
        pod(P {
            name,
            node: "spot-1",
            rs: "web-abc",
            ready: true,
            created,
            annotations: &[],
        })
    };
    let snap = cluster(vec![
        mk("old", "2026-11-01T00:00:00Z"),
        mk("mid", "2026-11-10T00:00:00Z"),
        mk("new", "2026-11-20T00:00:00Z"),
        simple("od", "od-1"),
    ]);
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"billingClass": {"costs": {"spot": 10, "on-demand": 0}, "budgets": {"spot": 1}}}]
    }));
    let plan = plan(&p, &snap, &Default::default(), &Default::default(), &opts());
    assert_eq!(cost_of(&plan, "new"), Some(0));
    assert_eq!(cost_of(&plan, "mid"), Some(0));
    assert_eq!(cost_of(&plan, "od"), Some(1));
    assert_eq!(cost_of(&plan, "old"), Some(11));
}

fn util_policy(on_missing: &str) -> NamedPolicy {
    policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "onSignalMissing": on_missing,
        "signals": [{"utilization": {
            "prometheus": {"query": "up"},
            "range": {"min": 0, "max": 1},
            "buckets": 10,
            "default": 0.55
        }}]
    }))
}

fn samples(values: &[(&str, f64)]) -> SignalSamples {
    let mut s = SignalSamples::default();
    s.utilization.insert(
        0,
        UtilizationSamples::from_series(
            values.iter().map(|(p, v)| (p.to_string(), *v, None)),
            None,
            None,
        ),
    );
    s
}

#[test]
fn in_bucket_drift_causes_no_patch() {
    let mut snap = cluster(vec![simple("a", "od-1"), simple("b", "od-2")]);
    let p = util_policy("keepLastValue");
    let first = plan(
        &p,
        &snap,
        &samples(&[("a", 0.31), ("b", 0.79)]),
        &Default::default(),
        &opts(),
    );
    assert_eq!(cost_of(&first, "a"), Some(3));
    assert_eq!(cost_of(&first, "b"), Some(7));
    apply(&mut snap, &first, "web");
    // drift within the bucket, and just over an edge (held by hysteresis)
    let second = plan(
        &p,
        &snap,
        &samples(&[("a", 0.38), ("b", 0.81)]),
        &first.values,
        &opts(),
    );
    assert!(second.patches.is_empty(), "{:?}", second.patches);
    let third = plan(
        &p,
        &snap,
        &samples(&[("a", 0.38), ("b", 0.95)]),
        &second.values,
        &opts(),
    );
    assert_eq!(third.patches.len(), 1);
    assert_eq!(third.patches[0].cost, 9);
}

#[test]
fn missing_signal_behaviours() {
    let snap = cluster(vec![simple("a", "od-1"), simple("b", "od-2")]);
    let s = {
        let mut s = samples(&[("a", 0.5)]);
        s.utilization.get_mut(&0).unwrap().by_pod.insert(
            "b".into(),
            Sample::Unusable(crate::signals::SampleProblem::NaN),
        );
        s
    };
    let keep = plan(
        &util_policy("keepLastValue"),
        &snap,
        &s,
        &Default::default(),
        &opts(),
    );
    assert!(
        matches!(keep.pods[1].action, CostAction::KeepLastValue(ref why) if why.contains("NaN"))
    );
    assert_eq!(keep.patches.len(), 1);
    let skip = plan(
        &util_policy("skip"),
        &snap,
        &s,
        &Default::default(),
        &opts(),
    );
    assert_eq!(cost_of(&skip, "b"), Some(0));
    let default = plan(
        &util_policy("useDefault"),
        &snap,
        &s,
        &Default::default(),
        &opts(),
    );
    assert_eq!(cost_of(&default, "b"), Some(5));
}

#[test]
fn zone_balance_is_round_robin_from_the_fullest_zone() {
    let snap = cluster(vec![
        simple("a1", "spot-1"),
        simple("a2", "od-1"),
        simple("a3", "od-1"),
        simple("b1", "spot-2"),
    ]);
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"zoneBalance": {}}]
    }));
    let plan = plan(&p, &snap, &Default::default(), &Default::default(), &opts());
    // maxPerZone (1000) minus the pods the zone keeps from each pod on
    assert_eq!(cost_of(&plan, "a1"), Some(997));
    assert_eq!(cost_of(&plan, "a2"), Some(998));
    assert_eq!(cost_of(&plan, "a3"), Some(999));
    assert_eq!(cost_of(&plan, "b1"), Some(999));
    // a1 goes: the pods after it keep their values, and b1's zone is not
    // renumbered because the fullest zone shrank
    let rest = cluster(vec![
        simple("a2", "od-1"),
        simple("a3", "od-1"),
        simple("b1", "spot-2"),
    ]);
    let after = super::plan(&p, &rest, &Default::default(), &Default::default(), &opts());
    for pod in ["a2", "a3", "b1"] {
        assert_eq!(cost_of(&after, pod), cost_of(&plan, pod), "{pod}");
    }
}

/// Issue 55, item 5: an `OnScaleIn` policy's plan as it writes: nothing in
/// the background, and at a scale-in by k only the correction, which deletes
/// what the Continuous plan deletes.
#[test]
fn on_scale_in_plans_write_only_the_correction() {
    let snap = cluster(vec![
        simple("a", "od-1"),
        simple("b", "od-2"),
        simple("c", "spot-1"),
        simple("d", "spot-2"),
    ]);
    let on_scale_in = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "writes": "OnScaleIn",
        "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}, "default": 50}}]
    }));
    let continuous = spot_first();
    let none = BTreeSet::new();
    let idle = PlanOptions {
        scale_down_by: None,
        ..opts()
    };
    let p = plan_as_written(
        &on_scale_in,
        &snap,
        &Default::default(),
        &Default::default(),
        &idle,
        &none,
    );
    assert_eq!(p.writes, Writes::OnScaleIn);
    assert!(p.patches.is_empty(), "{:?}", p.patches);
    assert!(p
        .pods
        .iter()
        .all(|x| matches!(x.action, CostAction::NotWritten(_))));
    for by in 1..=4 {
        let o = PlanOptions {
            scale_down_by: Some(by),
            ..opts()
        };
        let written = plan_as_written(
            &on_scale_in,
            &snap,
            &Default::default(),
            &Default::default(),
            &o,
            &none,
        );
        let all = plan_as_written(
            &continuous,
            &snap,
            &Default::default(),
            &Default::default(),
            &o,
            &none,
        );
        assert_eq!(all.writes, Writes::Continuous);
        assert_eq!(all.patches.len(), 4);
        assert!(written.patches.len() <= by, "{by}: {:?}", written.patches);
        let victims = |p: &Plan| {
            let mut v = p.replica_sets[0].victims.clone();
            v.sort();
            v
        };
        assert_eq!(victims(&written), victims(&all), "{by}");
        for x in &written.pods {
            let patched = written.patches.iter().any(|w| w.pod == x.name);
            assert_eq!(
                matches!(x.action, CostAction::Patch(_)),
                patched,
                "{by}: {}",
                x.name
            );
        }
    }
}

#[test]
fn consolidation_prefers_emptier_nodes() {
    let mut db = simple("db", "od-1");
    db.metadata.labels = Some(labels(&[("app", "db")]));
    db.metadata.owner_references = Some(vec![owner("ReplicaSet", "db-xyz")]);
    let snap = cluster(vec![
        simple("a", "od-1"),
        simple("b", "od-1"),
        simple("c", "spot-1"),
        db,
    ]);
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"nodeConsolidation": {}}]
    }));
    let plan = plan(&p, &snap, &Default::default(), &Default::default(), &opts());
    assert_eq!(band_of(&plan, "c"), Some(1));
    assert_eq!(band_of(&plan, "a"), Some(3));
    assert_eq!(plan.replica_sets[0].victims, vec![Arc::from("c")]);
}

/// The snapshot: od-a holds one web pod and another namespace's
/// pod annotated do-not-disrupt; od-c carries scale-down-disabled and one
/// web pod; od-b holds three web pods.
fn pinned_nodes(batch: &[(&str, &str)], od_c: &[(&str, &str)]) -> Snapshot {
    let mut batch_x = simple("batch-x", "od-a");
    batch_x.metadata.namespace = Some("jobs".into());
    batch_x.metadata.labels = Some(labels(&[("app", "batch")]));
    batch_x.metadata.owner_references = Some(vec![owner("Job", "batch")]);
    batch_x.metadata.annotations = Some(labels(batch));
    let mut snap = cluster(vec![
        simple("web-a", "od-a"),
        batch_x,
        simple("web-b1", "od-b"),
        simple("web-b2", "od-b"),
        simple("web-b3", "od-b"),
        simple("web-c", "od-c"),
    ]);
    let mut c = (*node("od-c", &[])).clone();
    c.metadata.annotations = Some(labels(od_c));
    snap.nodes = vec![node("od-a", &[]), node("od-b", &[]), Arc::new(c)];
    snap
}

fn consolidation() -> NamedPolicy {
    policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"nodeConsolidation": {"maxPods": 110}}]
    }))
}

#[test]
fn consolidation_drains_only_nodes_an_autoscaler_may_remove() {
    use crate::annotations::{CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT};
    let by_2 = PlanOptions {
        scale_down_by: Some(2),
        ..opts()
    };
    // without the annotations: the emptiest nodes go first, od-c and od-a
    let free = pinned_nodes(&[], &[]);
    let plan_free = plan(
        &consolidation(),
        &free,
        &Default::default(),
        &Default::default(),
        &by_2,
    );
    let mut victims: Vec<&str> = plan_free.replica_sets[0]
        .victims
        .iter()
        .map(|v| &**v)
        .collect();
    victims.sort();
    assert_eq!(victims, ["web-a", "web-c"]);
    assert!(plan_free.blocked_nodes.is_empty());

    // with them: neither can go, so od-b is drained
    let pinned = pinned_nodes(
        &[(KARPENTER_DO_NOT_DISRUPT, "true")],
        &[(CA_SCALE_DOWN_DISABLED, "true")],
    );
    let p = plan(
        &consolidation(),
        &pinned,
        &Default::default(),
        &Default::default(),
        &by_2,
    );
    assert!(
        p.replica_sets[0]
            .victims
            .iter()
            .all(|v| v.starts_with("web-b")),
        "{:?}",
        p.replica_sets[0].victims
    );
    assert_eq!(band_of(&p, "web-a"), Some(111));
    assert_eq!(band_of(&p, "web-c"), Some(111));
    assert_eq!(band_of(&p, "web-b1"), Some(3));
    let why: Vec<String> = p.blocked_nodes.iter().map(|n| n.to_string()).collect();
    assert_eq!(
        why,
        [
            "od-a cannot be removed: jobs/batch-x has karpenter.sh/do-not-disrupt",
            "od-c cannot be removed: the node has cluster-autoscaler.kubernetes.io/scale-down-disabled",
        ]
    );
    let detail = |pod: &str| {
        p.pods.iter().find(|x| &*x.name == pod).unwrap().signals[0]
            .detail
            .to_string()
    };
    assert_eq!(detail("web-a"), "2 pods on node, cannot be removed");
    assert_eq!(detail("web-b1"), "3 pods on node");
    assert_eq!(detail("web-c"), "1 pod on node, cannot be removed");

    // the cluster-autoscaler's pod annotation keeps od-a as well
    use crate::annotations::CA_SAFE_TO_EVICT;
    let ca = pinned_nodes(&[(CA_SAFE_TO_EVICT, "false")], &[]);
    let p = plan(
        &consolidation(),
        &ca,
        &Default::default(),
        &Default::default(),
        &by_2,
    );
    assert_eq!(band_of(&p, "web-a"), Some(111));
    assert_eq!(band_of(&p, "web-c"), Some(1));
    assert_eq!(
        p.blocked_nodes[0].to_string(),
        "od-a cannot be removed: jobs/batch-x has cluster-autoscaler.kubernetes.io/safe-to-evict: \"false\""
    );
    // and Karpenter's node annotation keeps od-c
    let karpenter_node = pinned_nodes(&[], &[(KARPENTER_DO_NOT_DISRUPT, "true")]);
    let p = plan(
        &consolidation(),
        &karpenter_node,
        &Default::default(),
        &Default::default(),
        &by_2,
    );
    assert_eq!(band_of(&p, "web-c"), Some(111));
    assert_eq!(band_of(&p, "web-a"), Some(2));
    assert_eq!(
        p.blocked_nodes[0].to_string(),
        "od-c cannot be removed: the node has karpenter.sh/do-not-disrupt"
    );
    // values that keep nothing change nothing
    let loose = pinned_nodes(
        &[
            (KARPENTER_DO_NOT_DISRUPT, "false"),
            (CA_SAFE_TO_EVICT, "true"),
        ],
        &[(CA_SCALE_DOWN_DISABLED, "false")],
    );
    let p = plan(
        &consolidation(),
        &loose,
        &Default::default(),
        &Default::default(),
        &by_2,
    );
    assert_eq!(p.pods, plan_free.pods);
    assert!(p.blocked_nodes.is_empty());
    // a policy without consolidation still names them, its costs unchanged
    let spot = plan(
        &spot_first(),
        &pinned,
        &Default::default(),
        &Default::default(),
        &by_2,
    );
    assert_eq!(spot.blocked_nodes.len(), 2);
}

#[test]
fn karpenters_costs_are_never_overwritten() {
    use crate::annotations::KARPENTER_MANAGED_COST;
    let snap = cluster(vec![
        pod(P {
            name: "karpenters",
            node: "spot-1",
            rs: "web-abc",
            ready: true,
            created: "2026-11-20T00:00:00Z",
            annotations: &[
                (POD_DELETION_COST, "-1000"),
                (KARPENTER_MANAGED_COST, "true"),
            ],
        }),
        // marked, with no cost (yet): still Karpenter's to set
        pod(P {
            name: "marked",
            node: "spot-1",
            rs: "web-abc",
            ready: true,
            created: "2026-11-20T00:00:00Z",
            annotations: &[(KARPENTER_MANAGED_COST, "true")],
        }),
        // the marker wins over our own annotation
        pod(P {
            name: "both",
            node: "od-1",
            rs: "web-abc",
            ready: true,
            created: "2026-11-20T00:00:00Z",
            annotations: &[
                (POD_DELETION_COST, "7"),
                (POLICY_ANNOTATION, "web"),
                (KARPENTER_MANAGED_COST, "true"),
            ],
        }),
        simple("plain", "od-1"),
    ]);
    for respect in [true, false] {
        let mut p = spot_first();
        p.spec.respect_foreign_costs = respect;
        let plan = plan(&p, &snap, &Default::default(), &Default::default(), &opts());
        let names: Vec<&str> = plan.patches.iter().map(|x| &*x.pod).collect();
        assert_eq!(names, ["plain"], "respectForeignCosts: {respect}");
        for name in ["karpenters", "marked", "both"] {
            let pp = plan.pods.iter().find(|x| &*x.name == name).unwrap();
            assert_eq!(pp.owner, CostOwner::Karpenter, "{name}");
            assert_eq!(pp.action, CostAction::KeepKarpenter, "{name}");
            assert_eq!(pp.desired, None, "{name}");
            assert_eq!(pp.action.to_string(), "keep (Karpenter's)");
        }
    }
    // the order is predicted with Karpenter's value, which it keeps
    let plan = plan(
        &spot_first(),
        &snap,
        &Default::default(),
        &Default::default(),
        &opts(),
    );
    let rs = &plan.replica_sets[0];
    assert_eq!(&*rs.predicted[0], "karpenters");
    assert_eq!((rs.live_costs[0], rs.intended_costs[0]), (-1000, -1000));
}

#[test]
fn target_ref_deployment_follows_ownership() {
    let mut stray = simple("stray", "spot-1");
    stray.metadata.owner_references = Some(vec![owner("ReplicaSet", "other-rs")]);
    let snap = cluster(vec![simple("a", "od-1"), stray]);
    let p = policy(json!({
        "targetRef": {"kind": "Deployment", "name": "web"},
        "signals": [{"billingClass": {"costs": {"spot": 0}, "default": 5}}]
    }));
    let plan = plan(&p, &snap, &Default::default(), &Default::default(), &opts());
    let names: Vec<&str> = plan.pods.iter().map(|p| &*p.name).collect();
    assert_eq!(names, ["a"]);
}

#[test]
fn not_ready_pods_and_pending_patches_explain_mismatches() {
    let mut snap = cluster(vec![
        pod(P {
            name: "unready-od",
            node: "od-1",
            rs: "web-abc",
            ready: false,
            created: "2026-11-20T00:00:00Z",
            annotations: &[],
        }),
        simple("spot", "spot-1"),
    ]);
    let p = spot_first();
    let planned = plan(&p, &snap, &Default::default(), &Default::default(), &opts());
    let rs = &planned.replica_sets[0];
    assert_eq!(rs.verdict, Verdict::NotAsIntended);
    assert_eq!(rs.mismatches[0].pod, "unready-od");
    assert_eq!(rs.mismatches[0].reason, MismatchReason::NotReady);

    // live view before patches land: costs are all 0, so colocation/time decide
    std::sync::Arc::make_mut(&mut snap.pods[0])
        .status
        .as_mut()
        .unwrap()
        .ready
        .as_mut()
        .unwrap()
        .status = "True".into();
    std::sync::Arc::make_mut(&mut snap.pods[1])
        .identity
        .creation_timestamp = Some(ts("2026-11-01T00:00:00Z"));
    std::sync::Arc::make_mut(&mut snap.pods[1])
        .status
        .as_mut()
        .unwrap()
        .ready
        .as_mut()
        .unwrap()
        .last_transition_time = Some(ts("2026-11-01T00:00:00Z"));
    let live = PlanOptions {
        assume_patches_applied: false,
        ..opts()
    };
    let planned = plan(&p, &snap, &Default::default(), &Default::default(), &live);
    let rs = &planned.replica_sets[0];
    assert_eq!(rs.mismatches.len(), 1);
    assert_eq!(rs.mismatches[0].reason, MismatchReason::PendingPatch);

    let gate_off = PlanOptions {
        gates: FeatureGates {
            pod_deletion_cost: false,
            ..FeatureGates::default()
        },
        ..opts()
    };
    let planned = plan(
        &p,
        &snap,
        &Default::default(),
        &Default::default(),
        &gate_off,
    );
    assert_eq!(
        planned.replica_sets[0].mismatches[0].reason,
        MismatchReason::FeatureGateOff
    );
}

#[test]
fn colocation_rank_counts_pods_of_sibling_replica_sets() {
    // "a" shares od-1 with an old-ReplicaSet pod, so upstream ranks it higher
    let old = pod(P {
        name: "old-1",
        node: "od-1",
        rs: "web-old",
        ready: true,
        created: "2026-11-20T00:00:00Z",
        annotations: &[],
    });
    let snap = cluster(vec![simple("a", "od-1"), simple("b", "od-2"), old]);
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web", "hash": "abc"}},
        "signals": [{"billingClass": {"costs": {}, "default": 7}}]
    }));
    let planned = plan(&p, &snap, &Default::default(), &Default::default(), &opts());
    let rs = planned
        .replica_sets
        .iter()
        .find(|r| r.name == "web-abc")
        .unwrap();
    assert_eq!(rs.related_pods, 3);
    assert_eq!(&*rs.predicted[0], "a");
}

#[test]
fn bad_policies_are_rejected_with_the_field() {
    let bad = |spec: Value| {
        let spec: DeletionCostPolicySpec = serde_json::from_value(spec).unwrap();
        NamedPolicy::validate("p", "ns", &spec)
            .unwrap_err()
            .to_string()
    };
    assert!(
        bad(json!({"selector": {}, "signals": [{"zoneBalance": {}}]})).contains("spec.selector")
    );
    assert!(
        bad(json!({"selector": {}, "signals": [{"zoneBalance": {}}]}))
            .starts_with("DeletionCostPolicy ns/p: ")
    );
    assert!(bad(json!({"signals": [{"zoneBalance": {}}]})).contains("targetRef"));
    assert!(
        bad(json!({"selector": {"matchLabels": {"a": "b"}}, "signals": [{}]}))
            .contains("spec.signals[0]")
    );
    assert!(bad(json!({
        "selector": {"matchLabels": {"a": "b"}},
        "signals": [{"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "buckets": 0}}]
    }))
    .contains("spec.signals[0].utilization.buckets"));
    assert!(bad(json!({
        "selector": {"matchLabels": {"a": "b"}},
        "combine": "sum",
        "signals": [{"billingClass": {"costs": {"spot": 2000000000}, "weight": 2}}]
    }))
    .contains("int32"));
    assert!(bad(json!({
        "selector": {"matchLabels": {"a": "b"}},
        "signals": [
            {"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "buckets": 100000}},
            {"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "buckets": 100000}}
        ]
    }))
    .contains("int32"));
}

#[test]
fn max_cost_writes_ranks_in_the_policy_s_order() {
    // spot 0, no class 50, on-demand 100
    let spec = |max_cost: Option<i32>| {
        let mut spec = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}, "default": 50}}]
        });
        if let Some(max) = max_cost {
            spec["maxCost"] = json!(max);
        }
        policy(spec)
    };
    let mut snap = cluster(vec![
        simple("a", "od-1"),
        simple("b", "spot-1"),
        simple("c", "od-2"),
        simple("d", "elsewhere"),
        simple("e", "spot-2"),
    ]);
    let costs = |p: &Plan| -> Vec<Option<i32>> {
        ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| cost_of(p, n))
            .collect()
    };
    let s = SignalSamples::default();
    let as_combined = plan(&spec(None), &snap, &s, &Default::default(), &opts());
    assert_eq!(
        costs(&as_combined),
        [Some(100), Some(0), Some(100), Some(50), Some(0)]
    );
    // 0..=100 fits in 0..=1000: written as combined
    let roomy = plan(&spec(Some(1000)), &snap, &s, &Default::default(), &opts());
    assert_eq!(roomy, as_combined);
    // ranks, ties kept
    let p = spec(Some(2));
    let ranked = plan(&p, &snap, &s, &Default::default(), &opts());
    assert_eq!(
        costs(&ranked),
        [Some(2), Some(0), Some(2), Some(1), Some(0)]
    );
    assert!(
        !ranked.warnings.iter().any(|w| w.contains("maxCost")),
        "{:?}",
        ranked.warnings
    );
    let patched: Vec<(&str, i32)> = ranked.patches.iter().map(|x| (&*x.pod, x.cost)).collect();
    assert_eq!(patched, [("a", 2), ("b", 0), ("c", 2), ("d", 1), ("e", 0)]);
    assert_eq!(
        ranked.replica_sets[0].victims, as_combined.replica_sets[0].victims,
        "the same victims"
    );
    // steady state: nothing to write once the ranks landed
    apply(&mut snap, &ranked, "web");
    let again = plan(&p, &snap, &s, &Default::default(), &opts());
    assert!(again.patches.is_empty(), "{:?}", again.patches);
    assert!(again.pods.iter().all(|x| x.action == CostAction::Unchanged));
    // three costs into 0..=1: the two lowest share 0, and the plan says so
    let squeezed = plan(&spec(Some(1)), &snap, &s, &Default::default(), &opts());
    assert_eq!(
        costs(&squeezed),
        [Some(1), Some(0), Some(1), Some(0), Some(0)]
    );
    assert!(
        squeezed
            .warnings
            .iter()
            .any(|w| w.contains("spec.maxCost 1: the pods want 3 different costs")),
        "{:?}",
        squeezed.warnings
    );
}

fn arb_cluster() -> impl Strategy<Value = (Snapshot, Vec<(String, f64)>)> {
    let nodes = ["spot-1", "spot-2", "od-1", "od-2", ""];
    prop::collection::vec(
        (
            prop::sample::select(nodes.to_vec()),
            any::<bool>(),
            prop::sample::select(vec!["", "5", "-3", "abc", "2147483647"]),
            any::<bool>(),
            0.0f64..2.0,
        ),
        1..25,
    )
    .prop_map(|spec| {
        let mut pods = Vec::new();
        let mut util = Vec::new();
        for (i, (node, ready, cost, ours, u)) in spec.into_iter().enumerate() {
            let name = format!("p{i}");
            let mut ann: Vec<(&str, &str)> = Vec::new();
            if !cost.is_empty() {
                ann.push((POD_DELETION_COST, cost));
                if ours {
                    ann.push((POLICY_ANNOTATION, "web"));
                }
            }
            pods.push(pod(P {
                name: &name,
                node,
                rs: "web-abc",
                ready,
                created: "2026-11-20T00:00:00Z",
                annotations: &ann,
            }));
            util.push((name, u));
        }
        (cluster(pods), util)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn planner_invariants((snap, util) in arb_cluster(), sum in any::<bool>(), respect in any::<bool>()) {
        let combine = if sum { "sum" } else { "lexicographic" };
        let mut p = policy(json!({
            "selector": {"matchLabels": {"app": "web"}},
            "combine": combine,
            "signals": [
                {"billingClass": {"costs": {"spot": -1000000, "on-demand": 1000000}, "default": 0, "weight": 1}},
                {"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 2}, "buckets": 1}}
            ]
        }));
        p.spec.respect_foreign_costs = respect;
        let s = {
            let mut s = SignalSamples::default();
            s.utilization.insert(1, UtilizationSamples::from_series(util.iter().map(|(n, v)| (n.clone(), *v, None)), None, None));
            s
        };
        let mut snap = snap;
        let first = plan(&p, &snap, &s, &Default::default(), &opts());
        for patch in &first.patches {
            let pod = first.pods.iter().find(|x| x.name == patch.pod).unwrap();
            // never a cost someone else wrote while respecting foreign costs
            prop_assert!(!(respect && matches!(pod.owner, CostOwner::Foreign(_))));
            prop_assert_eq!(pod.desired, Some(patch.cost));
        }
        // every active selected pod is planned exactly once
        prop_assert_eq!(first.pods.len(), snap.pods.len());
        apply(&mut snap, &first, "web");
        let second = plan(&p, &snap, &s, &first.values, &opts());
        prop_assert!(second.patches.is_empty(), "idempotence: {:?}", second.patches);
        for rs in &second.replica_sets {
            prop_assert_eq!(rs.predicted.len(), rs.live_costs.len());
            if rs.verdict == Verdict::AsIntended {
                prop_assert!(rs.intended_costs.windows(2).all(|w| w[0] <= w[1]));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// `maxCost` writes costs in `0..=maxCost` in the order the policy
    /// combined them: equal costs stay equal, a lower cost is never written
    /// higher (strictly lower when the ranks fit), and once written, nothing
    /// more is written.
    #[test]
    fn max_cost_keeps_the_order_of_costs(
        (snap, util) in arb_cluster(),
        sum in any::<bool>(),
        max in prop_oneof![1i32..4, 4i32..100],
    ) {
        let combine = if sum { "sum" } else { "lexicographic" };
        let mut spec = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "combine": combine,
            "signals": [
                {"billingClass": {"costs": {"spot": -1000000, "on-demand": 1000000}, "default": 0}},
                {"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 2}, "buckets": 5}}
            ]
        });
        let combined = policy(spec.clone());
        spec["maxCost"] = json!(max);
        let ranked = policy(spec);
        let mut s = SignalSamples::default();
        s.utilization.insert(1, UtilizationSamples::from_series(util.iter().map(|(n, v)| (n.clone(), *v, None)), None, None));
        let a = plan(&combined, &snap, &s, &Default::default(), &opts());
        let b = plan(&ranked, &snap, &s, &Default::default(), &opts());
        let pairs: Vec<(i32, i32)> = a.pods.iter().zip(&b.pods)
            .filter_map(|(x, y)| Some((x.desired?, y.desired?)))
            .collect();
        prop_assert_eq!(pairs.len(), a.pods.iter().filter(|x| x.desired.is_some()).count());
        let distinct: BTreeSet<i32> = pairs.iter().map(|(c, _)| *c).collect();
        let fits = distinct.len() <= max as usize + 1;
        prop_assert_eq!(b.warnings.iter().any(|w| w.contains("spec.maxCost")), !fits);
        for &(c1, w1) in &pairs {
            prop_assert!((0..=max).contains(&w1));
            for &(c2, w2) in &pairs {
                match c1.cmp(&c2) {
                    std::cmp::Ordering::Equal => prop_assert_eq!(w1, w2),
                    std::cmp::Ordering::Less if fits => prop_assert!(w1 < w2),
                    std::cmp::Ordering::Less => prop_assert!(w1 <= w2),
                    std::cmp::Ordering::Greater => {}
                }
            }
        }
        for patch in &b.patches {
            let pod = b.pods.iter().find(|x| x.name == patch.pod).unwrap();
            prop_assert_eq!(pod.desired, Some(patch.cost));
        }
        let mut landed = snap.clone();
        apply(&mut landed, &b, "web");
        let again = plan(&ranked, &landed, &s, &b.values, &opts());
        prop_assert!(again.patches.is_empty(), "{:?}", again.patches);
    }
}

proptest! {
    /// Selection sorts by a prefix key, on one thread or on the pool: byte
    /// order, stable among equal names.
    #[test]
    fn selected_pods_sort_by_name_in_byte_order(
        names in prop::collection::vec("(web-[a-c]{0,3})?[a-c\\x00]{0,20}", 0..40),
        parallel in any::<bool>(),
    ) {
        let pods: Vec<std::sync::Arc<PodRecord>> = names
            .iter()
            .enumerate()
            .map(|(i, n)| std::sync::Arc::new(PodRecord {
                identity: crate::pod::PodIdentity {
                    name: Some(n.clone()),
                    namespace: Some("shop".into()),
                    uid: Some(i.to_string()),
                    ..Default::default()
                },
                shared: crate::pod::SharedMeta::shared(
                    Some(BTreeMap::from([("app".into(), "web".into())])),
                    None,
                ),
                ..Default::default()
            }))
            .collect();
        let p = policy(json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"nodeConsolidation": {"maxPods": 10}}]
        }));
        let split = Split { parallel, chunk: SMALL_CHUNKS.select };
        let selection = selection::select(&p, &pods, &[], &[], &BTreeSet::new(), true, split);
        let got: Vec<&str> = selection
            .active
            .iter()
            .map(|&i| selection.pods[i as usize].pod.identity.uid.as_deref().unwrap_or(""))
            .collect();
        let mut want: Vec<(&str, String)> =
            names.iter().enumerate().map(|(i, n)| (n.as_str(), i.to_string())).collect();
        want.sort_by(|a, b| a.0.cmp(b.0));
        let want: Vec<&str> = want.iter().map(|(_, u)| u.as_str()).collect();
        prop_assert_eq!(got, want);
    }
}

mod apart;
mod consolidation;
mod marked;
mod properties;
