//! The golden clusters, the plans made on each, and how a plan is written
//! down in its golden file.
//!
//! Each cluster comes from the generator in `cluster.rs` (fixed size and
//! seed), sometimes altered (pods sharing a UID, pods won by another policy,
//! a ReplicaSet and nodes missing from the snapshot, pods listed out of
//! order, the autoscalers' annotations). Each case plans it with one policy and one set of options; some
//! plan a second time as the operator would on its next round: once the
//! first plan's patches landed, with its values for hysteresis and
//! utilisation samples that moved.
//!
//! A plan is written down as one line per pod (signal values, current cost,
//! action), its patches, and per ReplicaSet the predicted order with the
//! live and intended costs, victims, verdict, mismatches, ties and
//! ambiguity. Lists longer than [`FULL`] lines keep about [`SAMPLE`] of
//! them, evenly spaced, and a digest of all of them; each plan also has a
//! digest of everything it holds (node, UID and readable detail of each
//! signal included), so large clusters stay small on disk and still pin
//! every field.

use std::collections::BTreeSet;

use deletion_cost_testkit::shuffle;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use deletion_cost::comparator::FeatureGates;
use deletion_cost::plan::{
    plan_excluding, Chunks, CostAction, CostOwner, NamedPolicy, Plan, PlanOptions, PodPlan,
    PreviousValues, ReplicaSetPlan, Snapshot,
};
use deletion_cost::pod::PodRecord;
use deletion_cost::policy::DeletionCostPolicySpec;
use deletion_cost::signals::{SignalSamples, UtilizationSamples};

use super::cluster::{self, Cluster};

/// The golden clusters, smallest first; each has `plans/<name>.json`.
pub const CLUSTERS: [&str; 8] = [
    "small",
    "ties",
    "shared-uids",
    "autoscalers",
    "ns-1500",
    "mixed-2000",
    "shuffled-13k",
    "large-20k",
];

/// Lists up to this long are written in full.
pub const FULL: usize = 80;
/// Longer lists keep about this many lines (and the last one).
pub const SAMPLE: usize = 24;

/// A golden cluster and the plans made on it.
pub struct Golden {
    /// File name, without `.json`.
    pub name: &'static str,
    /// What the cluster is and which of the planner's thresholds it crosses.
    pub about: String,
    /// The cluster.
    pub snapshot: Snapshot,
    samples: SignalSamples,
    /// The samples of the second round: every value 0.06 higher.
    drifted: SignalSamples,
    cases: Vec<Case>,
}

struct Case {
    name: String,
    policy: NamedPolicy,
    opts: PlanOptions,
    excluded: BTreeSet<String>,
    /// Plan again once the patches landed.
    again: bool,
}

fn resolve(yaml: &str) -> NamedPolicy {
    let spec: DeletionCostPolicySpec = serde_saphyr::from_str(yaml).unwrap();
    NamedPolicy::validate(cluster::POLICY, cluster::NAMESPACE, &spec).unwrap()
}

/// The policies, by name. All use every signal unless named otherwise:
/// the bench policy (`targetRef` Deployment `web`, `keepLastValue`,
/// foreign costs respected, a spot budget of a third of the pods) under
/// both combine modes; a label selector that also takes `worker` and the
/// bare pods; one without `nodeConsolidation` (nodes then go uncounted);
/// `maxCost` that ranks without merging and one that merges; one that
/// overwrites foreign costs and skips missing signals; one targeting a
/// ReplicaSet, with `useDefault`, a default and hysteresis for
/// utilisation and a weight.
fn policy(name: &str, pods: usize) -> NamedPolicy {
    let budget = pods / 3;
    let lex = cluster::policy_yaml("lexicographic", budget);
    let sum = cluster::policy_yaml("sum", budget);
    let yaml = match name {
        "lexicographic" => lex,
        "sum" => sum,
        "selector" => replaced(
            &lex,
            "targetRef: {kind: Deployment, name: web}",
            "selector: {matchLabels: {team: platform}}",
        ),
        "no-consolidation" => replaced(&lex, "- nodeConsolidation: {maxPods: 110}\n", ""),
        "max-cost-1000000" => format!("{lex}maxCost: 1000000\n"),
        "sum-max-cost-7" => format!("{sum}maxCost: 7\n"),
        "overwrite-skip" => replaced(
            &replaced(
                &lex,
                "respectForeignCosts: true",
                "respectForeignCosts: false",
            ),
            "onSignalMissing: keepLastValue",
            "onSignalMissing: skip",
        ),
        "replica-set-default" => replaced(
            &replaced(
                &replaced(
                    &replaced(
                        &sum,
                        "targetRef: {kind: Deployment, name: web}",
                        "targetRef: {kind: ReplicaSet, name: web-7d9f8b6c5}",
                    ),
                    "onSignalMissing: keepLastValue",
                    "onSignalMissing: useDefault",
                ),
                "buckets: 10}",
                "buckets: 10, default: 0.55, hysteresis: 0.4}",
            ),
            "maxPerZone: 1000}",
            "maxPerZone: 1000, weight: 3}",
        ),
        other => panic!("no policy {other}"),
    };
    resolve(&yaml)
}

/// `s` with `from` replaced, which must be there.
fn replaced(s: &str, from: &str, to: &str) -> String {
    assert!(
        s.contains(from),
        "the bench policy changed shape: no {from:?}"
    );
    s.replace(from, to)
}

/// Every policy of [`policy`].
const POLICIES: [&str; 8] = [
    "lexicographic",
    "sum",
    "selector",
    "no-consolidation",
    "max-cost-1000000",
    "sum-max-cost-7",
    "overwrite-skip",
    "replica-set-default",
];

/// The options of a case.
#[derive(Clone, Copy)]
enum View {
    /// Patches assumed applied (`plan`), victims of a scale-down by this many.
    Assumed(Option<usize>),
    /// The pods as they are (the operator's check).
    Live(Option<usize>),
    /// `PodDeletionCost` off, patches assumed applied.
    GateOff(Option<usize>),
    /// `LogarithmicScaleDown` off, the pods as they are.
    Linear(Option<usize>),
}

impl View {
    fn options(self) -> PlanOptions {
        let (assume, cut, gates) = match self {
            View::Assumed(c) => (true, c, FeatureGates::default()),
            View::Live(c) => (false, c, FeatureGates::default()),
            View::GateOff(c) => (
                true,
                c,
                FeatureGates {
                    pod_deletion_cost: false,
                    ..FeatureGates::default()
                },
            ),
            View::Linear(c) => (
                false,
                c,
                FeatureGates {
                    logarithmic_scale_down: false,
                    ..FeatureGates::default()
                },
            ),
        };
        PlanOptions {
            gates,
            now: Some(
                Timestamp::from_second(cluster::NOW_SECS)
                    .unwrap()
                    .as_nanosecond(),
            ),
            scale_down_by: cut,
            assume_patches_applied: assume,
            // production sizes: the large clusters cross them (see main.rs)
            chunks: Chunks::default(),
        }
    }

    fn describe(self) -> String {
        let (what, cut) = match self {
            View::Assumed(c) => ("patches assumed applied", c),
            View::Live(c) => ("live", c),
            View::GateOff(c) => ("PodDeletionCost off, patches assumed applied", c),
            View::Linear(c) => ("LogarithmicScaleDown off, live", c),
        };
        match cut {
            Some(n) => format!("{what}, scale down by {n}"),
            None => what.to_string(),
        }
    }
}

/// `(policy, view, plan again)` for each case of a cluster of `pods` pods.
type Spec = (&'static str, View, bool);

/// Builds the golden cluster `name`.
pub fn build(name: &'static str) -> Golden {
    let none = BTreeSet::new();
    let (n, seed, about, specs): (usize, u64, &str, Vec<Spec>) = match name {
        "small" => (
            60,
            9,
            "every policy, live and with patches assumed applied (planned again after they \
             land), both feature gates off; under every threshold: one thread, one chunk",
            POLICIES
                .iter()
                .flat_map(|&p| {
                    [
                        (p, View::Assumed(Some(5)), true),
                        (p, View::Live(Some(7)), false),
                    ]
                })
                .chain([
                    ("lexicographic", View::GateOff(Some(3)), false),
                    ("sum", View::Linear(None), false),
                ])
                .collect(),
        ),
        "ties" => (
            100,
            13,
            "the namespace's pods created at one of two times a second apart and Ready since \
             one of three, two of them a second apart: pods upstream ranks equal (ties, also at \
             the cut) and pairs only their UIDs order",
            vec![
                ("lexicographic", View::Live(Some(7)), false),
                ("lexicographic", View::Assumed(Some(5)), true),
                ("sum", View::Linear(Some(10)), false),
                ("no-consolidation", View::GateOff(Some(4)), false),
            ],
        ),
        "shared-uids" => (
            300,
            11,
            "pods of the two web ReplicaSets share UIDs pairwise (and two have none): related \
             pods are counted sibling by sibling as upstream lists them",
            ["lexicographic", "selector", "no-consolidation"]
                .iter()
                .map(|&p| (p, View::Assumed(Some(5)), false))
                .collect(),
        ),
        "autoscalers" => (
            300,
            17,
            "the annotations Karpenter and the cluster-autoscaler read: nodes 1 and 4 may not be \
             removed (scale-down-disabled, do-not-disrupt), nodes 2 and 5 each hold a pod of \
             another namespace that keeps them (do-not-disrupt, safe-to-evict \"false\"), nodes \
             7 and 8 values that keep nothing; every 9th web pod carries a cost Karpenter \
             manages, the 10th only its marker",
            vec![
                ("lexicographic", View::Assumed(Some(10)), true),
                ("sum", View::Live(Some(7)), false),
                ("overwrite-skip", View::Assumed(Some(10)), false),
                ("no-consolidation", View::Live(Some(7)), false),
            ],
        ),
        "ns-1500" => (
            1500,
            3,
            "over 1,000 pods in the namespace (costing and keying on the thread pool) but under \
             2,000 in the snapshot (the scan on one thread)",
            vec![
                ("lexicographic", View::Assumed(Some(5)), true),
                ("sum", View::Live(Some(7)), false),
                ("sum-max-cost-7", View::Assumed(Some(5)), false),
                ("selector", View::Live(None), false),
            ],
        ),
        "mixed-2000" => (
            2000,
            7,
            "2,000 pods in the snapshot (the scan on the thread pool, one chunk); every 97th \
             pod won by another policy, ReplicaSet worker-6b8c9d7f4 and the last 3 nodes missing",
            POLICIES
                .iter()
                .map(|&p| (p, View::Live(Some(7)), false))
                .chain([
                    ("lexicographic", View::GateOff(Some(3)), false),
                    ("sum", View::GateOff(Some(3)), false),
                    ("lexicographic", View::Assumed(Some(100_000)), false),
                ])
                .collect(),
        ),
        "shuffled-13k" => (
            13_000,
            5,
            "pods listed in a shuffled order, so every scan chunk mixes namespaces; every \
             101st pod won by another policy and the last 4 nodes missing; 2 scan chunks of \
             8,192, 3 costing chunks of 4,096 for the web Deployment, 2 chunks for the name sort",
            vec![
                ("lexicographic", View::Assumed(Some(10)), true),
                ("selector", View::Live(Some(7)), false),
                ("replica-set-default", View::Assumed(Some(10)), false),
            ],
        ),
        "large-20k" => (
            20_000,
            42,
            "the bench's cluster at 20,000 pods: 3 scan chunks of 8,192, 4 costing chunks of \
             4,096 for the web Deployment, 2 chunks for the name sort",
            vec![
                ("lexicographic", View::Assumed(Some(10)), true),
                ("sum", View::Assumed(Some(10)), false),
                ("selector", View::Live(Some(7)), false),
                ("max-cost-1000000", View::Assumed(Some(10)), false),
                ("sum-max-cost-7", View::Assumed(Some(10)), false),
                ("overwrite-skip", View::Live(None), false),
            ],
        ),
        other => panic!("no golden cluster {other}"),
    };
    let mut c = cluster::generate(n, seed);
    if name == "autoscalers" {
        annotate_for_autoscalers(&mut c);
    }
    let mut snapshot = Snapshot {
        pods: c
            .pods
            .iter()
            .map(|p| std::sync::Arc::new(PodRecord::from(p)))
            .collect(),
        nodes: c.nodes.iter().cloned().map(std::sync::Arc::new).collect(),
        replica_sets: c.replica_sets.clone(),
        deployments: vec![],
        ignored: vec![],
    };
    let excluded = match name {
        "ties" => {
            coarse_times(&mut snapshot);
            none.clone()
        }
        "shared-uids" => {
            share_uids(&mut snapshot);
            none.clone()
        }
        "mixed-2000" => {
            snapshot
                .replica_sets
                .retain(|r| r.metadata.name.as_deref() != Some("worker-6b8c9d7f4"));
            snapshot.nodes.truncate(snapshot.nodes.len() - 3);
            every_nth(&c, 97)
        }
        "shuffled-13k" => {
            shuffle(&mut snapshot.pods, 0x5eed);
            snapshot.nodes.truncate(snapshot.nodes.len() - 4);
            every_nth(&c, 101)
        }
        _ => none.clone(),
    };
    let in_namespace = snapshot
        .pods
        .iter()
        .filter(|p| p.identity.namespace.as_deref() == Some(cluster::NAMESPACE))
        .count();
    let cases = specs
        .into_iter()
        .map(|(p, view, again)| Case {
            name: format!("{p}, {}", view.describe()),
            policy: policy(p, n),
            opts: view.options(),
            excluded: excluded.clone(),
            again,
        })
        .collect();
    Golden {
        name,
        about: format!(
            "{n} pods (seed {seed}), {in_namespace} in namespace {}: {about}",
            cluster::NAMESPACE
        ),
        snapshot,
        samples: samples(&c, 0.0),
        drifted: samples(&c, 0.06),
        cases,
    }
}

/// The utilisation samples of the policies' signal 1, each moved by `drift`.
fn samples(c: &Cluster, drift: f64) -> SignalSamples {
    let mut s = SignalSamples::default();
    s.utilization.insert(
        1,
        UtilizationSamples::from_series(
            c.utilization
                .iter()
                .map(|(n, v)| (n.clone(), v + drift, None)),
            None,
            None,
        ),
    );
    s
}

/// The annotations of the `autoscalers` cluster (see its `about`), set on
/// the generated objects before they are read as the planner reads them.
fn annotate_for_autoscalers(c: &mut Cluster) {
    use deletion_cost::annotations::{
        CA_SAFE_TO_EVICT, CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT, KARPENTER_MANAGED_COST,
        POD_DELETION_COST,
    };
    let set = |a: &mut Option<std::collections::BTreeMap<String, String>>, k: &str, v: &str| {
        a.get_or_insert_with(Default::default)
            .insert(k.to_string(), v.to_string());
    };
    for (i, k, v) in [
        (1, CA_SCALE_DOWN_DISABLED, "true"),
        (4, KARPENTER_DO_NOT_DISRUPT, "true"),
        (7, KARPENTER_DO_NOT_DISRUPT, "false"),
    ] {
        set(&mut c.nodes[i].metadata.annotations, k, v);
    }
    let node_name = |i: usize| c.nodes[i].metadata.name.clone();
    for (i, k, v) in [
        (2, KARPENTER_DO_NOT_DISRUPT, "true"),
        (5, CA_SAFE_TO_EVICT, "false"),
        (8, CA_SAFE_TO_EVICT, "true"),
    ] {
        let node = node_name(i);
        let pod = c
            .pods
            .iter_mut()
            .find(|p| {
                p.metadata.namespace.as_deref() != Some(cluster::NAMESPACE)
                    && p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && p.spec.as_ref().and_then(|s| s.node_name.clone()) == node
            })
            .expect("an active pod of another namespace on the node");
        set(&mut pod.metadata.annotations, k, v);
    }
    let web = c.pods.iter_mut().filter(|p| {
        p.metadata.namespace.as_deref() == Some(cluster::NAMESPACE)
            && p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .map(String::as_str)
                == Some("web")
    });
    for (i, pod) in web.enumerate() {
        if i % 9 == 0 {
            set(
                &mut pod.metadata.annotations,
                KARPENTER_MANAGED_COST,
                "true",
            );
            set(&mut pod.metadata.annotations, POD_DELETION_COST, "-1000");
        } else if i == 10 {
            set(
                &mut pod.metadata.annotations,
                KARPENTER_MANAGED_COST,
                "true",
            );
            if let Some(a) = pod.metadata.annotations.as_mut() {
                a.remove(POD_DELETION_COST);
            }
        }
    }
}

/// Names of every `n`-th pod, the first included.
fn every_nth(c: &Cluster, n: usize) -> BTreeSet<String> {
    c.pods
        .iter()
        .step_by(n)
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// The namespace's pods created at one of two times a second apart, and
/// Ready since one of three times, two of them a second apart (in the same
/// log2 bucket, where upstream orders by UID).
fn coarse_times(snap: &mut Snapshot) {
    let at = |secs: i64| Time(Timestamp::from_second(cluster::NOW_SECS - secs).unwrap());
    for (i, pod) in snap
        .pods
        .iter_mut()
        .map(std::sync::Arc::make_mut)
        .enumerate()
        .filter(|(_, p)| p.identity.namespace.as_deref() == Some(cluster::NAMESPACE))
    {
        pod.identity.creation_timestamp = Some(at(2 * 86_400 + (i % 2) as i64));
        let ready_since = at([3_600, 3_601, 7_200][i % 3]);
        for c in pod.status.iter_mut().flat_map(|s| s.ready.iter_mut()) {
            c.last_transition_time = Some(ready_since.clone());
        }
    }
}

/// Six pairs of pods of the two web ReplicaSets on different nodes share a
/// UID (in half of them the second ReplicaSet's pod is listed first) and
/// one pod of each has none: possible in a file, and then which pod's node
/// counts depends on the order upstream lists the siblings in.
fn share_uids(snap: &mut Snapshot) {
    let owned_by =
        |snap: &Snapshot, rs: &str| -> Vec<usize> {
            snap.pods
                .iter()
                .enumerate()
                .filter(|(_, p)| {
                    p.owner_references().iter().copied().flatten().any(|o| {
                        o.controller == Some(true) && o.kind == "ReplicaSet" && o.name == rs
                    })
                })
                .map(|(i, _)| i)
                .collect()
        };
    let first = owned_by(snap, "web-7d9f8b6c5");
    let second = owned_by(snap, "web-5c4b7f9d8");
    let node = |i: usize| snap.pods[i].spec.as_ref().and_then(|s| s.node_name.clone());
    let pairs: Vec<(usize, usize)> = first
        .iter()
        .zip(&second)
        .filter(|(&a, &b)| node(a) != node(b))
        .map(|(&a, &b)| (a, b))
        .take(6)
        .collect();
    assert_eq!(pairs.len(), 6);
    for (k, &(a, b)) in pairs.iter().enumerate() {
        if (k % 2 == 0) == (a < b) {
            snap.pods.swap(a, b);
        }
        let uid = snap.pods[a].identity.uid.clone();
        std::sync::Arc::make_mut(&mut snap.pods[b]).identity.uid = uid;
    }
    std::sync::Arc::make_mut(&mut snap.pods[first[10]])
        .identity
        .uid = None;
    std::sync::Arc::make_mut(&mut snap.pods[second[10]])
        .identity
        .uid = None;
}

/// Plans every case of `g` and writes the plans down.
pub fn render(g: &Golden) -> Value {
    let mut plans = Vec::new();
    for case in &g.cases {
        let (p, opts, excluded) = (&case.policy, &case.opts, &case.excluded);
        let first = plan_excluding(
            p,
            &g.snapshot,
            &g.samples,
            &PreviousValues::new(),
            opts,
            excluded,
        );
        plans.push(render_plan(&case.name, &first));
        if case.again {
            let landed = with_patches(&g.snapshot, &first, p);
            let again = plan_excluding(p, &landed, &g.drifted, &first.values, opts, excluded);
            let name = format!(
                "{}; again once the patches landed, samples 0.06 higher",
                case.name
            );
            plans.push(render_plan(&name, &again));
        }
    }
    json!({
        "cluster": g.name,
        "about": g.about,
        "plans": plans,
    })
}

/// `snapshot` once the API server applied `plan`'s patches.
fn with_patches(snapshot: &Snapshot, plan: &Plan, policy: &NamedPolicy) -> Snapshot {
    let costs: std::collections::HashMap<&str, i32> =
        plan.patches.iter().map(|x| (&*x.pod, x.cost)).collect();
    let mut landed = snapshot.clone();
    for pod in landed
        .pods
        .iter_mut()
        .map(std::sync::Arc::make_mut)
        .filter(|x| x.identity.namespace.as_deref() == Some(policy.namespace.as_str()))
    {
        if let Some(c) = pod.identity.name.as_deref().and_then(|n| costs.get(n)) {
            pod.ours.deletion_cost = Some(c.to_string());
            pod.ours.policy = Some(policy.name.clone());
        }
    }
    landed
}

/// A serialised enum's name.
fn variant<T: serde::Serialize>(x: &T) -> String {
    match serde_json::to_value(x) {
        Ok(Value::String(s)) => s,
        other => panic!("not a unit variant: {other:?}"),
    }
}

/// `name [signal values] current -> action`: a value is `-` when missing
/// and kept, marked `?` when it stands in for a missing one.
fn pod_line(p: &PodPlan) -> String {
    let signals: Vec<String> = p
        .signals
        .iter()
        .map(|s| match (s.value, s.missing) {
            (None, _) => "-".to_string(),
            (Some(v), false) => v.to_string(),
            (Some(v), true) => format!("{v}?"),
        })
        .collect();
    let current = match (&p.current_raw, &p.owner) {
        (None, CostOwner::Karpenter) => "none (Karpenter's)".to_string(),
        (None, _) => "none".to_string(),
        (Some(raw), CostOwner::Ours) => format!("{raw:?}"),
        (Some(raw), CostOwner::Foreign(None)) => format!("{raw:?} (foreign)"),
        (Some(raw), CostOwner::Foreign(Some(w))) => format!("{raw:?} (foreign: {w})"),
        (Some(raw), CostOwner::None) => format!("{raw:?} (no owner)"),
        (Some(raw), CostOwner::Karpenter) => format!("{raw:?} (Karpenter's)"),
    };
    let action = match &p.action {
        CostAction::Unchanged => "unchanged".to_string(),
        CostAction::Patch(c) => format!("set {c}"),
        CostAction::KeepForeign => "keep (foreign)".to_string(),
        CostAction::KeepKarpenter => "keep (Karpenter's)".to_string(),
        CostAction::KeepLastValue(why) => format!("keep ({why})"),
        CostAction::NotWritten(c) => format!("not written ({c})"),
    };
    format!("{} [{}] {current} -> {action}", p.name, signals.join(" "))
}

fn render_plan(case: &str, plan: &Plan) -> Value {
    let pods = plan.pods.iter().map(pod_line).collect();
    let patches = plan
        .patches
        .iter()
        .map(|x| format!("{} {}", x.pod, x.cost))
        .collect();
    let replica_sets: Vec<Value> = plan.replica_sets.iter().map(render_replica_set).collect();
    let mut out = json!({
        "case": case,
        "digest": digest(&everything(plan)),
        "pods": listing(pods),
        "patches": listing(patches),
        "hysteresisValues": plan.values.len(),
        "inactive": listing(plan.inactive.clone()),
        "warnings": plan.warnings,
        "replicaSets": replica_sets,
    });
    // only plans over nodes an autoscaler may not remove carry the key
    if !plan.blocked_nodes.is_empty() {
        out["blockedNodes"] = plan.blocked_nodes.iter().map(|n| n.to_string()).collect();
    }
    out
}

fn render_replica_set(rs: &ReplicaSetPlan) -> Value {
    let predicted = rs
        .predicted
        .iter()
        .zip(rs.live_costs.iter().zip(&rs.intended_costs))
        .map(|(name, (live, intended))| {
            if live == intended {
                format!("{name} {live}")
            } else {
                format!("{name} {live} -> {intended}")
            }
        })
        .collect();
    let mismatches = rs
        .mismatches
        .iter()
        .map(|m| {
            format!(
                "{} before {}: {} ({})",
                m.pod,
                m.before,
                variant(&m.reason),
                variant(&m.rule)
            )
        })
        .collect();
    json!({
        "name": rs.name,
        "deployment": rs.deployment,
        "verdict": variant(&rs.verdict),
        "relatedPods": rs.related_pods,
        "victims": listing(rs.victims.iter().map(|v| v.to_string()).collect()),
        "tieAtCut": rs.tie_at_cut,
        "predicted (live -> intended cost)": listing(predicted),
        "mismatches": listing(mismatches),
        "ties": listing(rs.ties.iter().map(|r| format!("{}..{}", r.start, r.end)).collect()),
        "ambiguous": listing(rs.ambiguous.iter().map(|v| v.to_string()).collect()),
    })
}

/// Every field of a plan, one line each, for its digest.
fn everything(plan: &Plan) -> Vec<String> {
    let mut out = vec![format!("policy {}", plan.policy)];
    for p in &plan.pods {
        let signals: Vec<String> = p
            .signals
            .iter()
            .map(|s| format!("{}={:?}/{:?}/{}", s.signal, s.value, s.detail, s.missing))
            .collect();
        out.push(format!(
            "pod {} uid={:?} node={:?} rs={:?} [{}] raw={:?} current={} owner={:?} desired={:?} action={:?}",
            p.name,
            p.uid,
            p.node,
            p.replica_set,
            signals.join(" "),
            p.current_raw,
            p.current,
            p.owner,
            p.desired,
            p.action,
        ));
    }
    for x in &plan.patches {
        out.push(format!(
            "patch {}/{} uid={} {}",
            x.namespace, x.pod, x.uid, x.cost
        ));
    }
    for rs in &plan.replica_sets {
        out.push(format!(
            "rs {} deployment={:?} related={} verdict={:?} tie_at_cut={} ties={:?}",
            rs.name, rs.deployment, rs.related_pods, rs.verdict, rs.tie_at_cut, rs.ties
        ));
        for ((name, live), intended) in rs
            .predicted
            .iter()
            .zip(&rs.live_costs)
            .zip(&rs.intended_costs)
        {
            out.push(format!("  {name} {live} {intended}"));
        }
        out.push(format!("  victims {:?}", rs.victims));
        for m in &rs.mismatches {
            out.push(format!("  mismatch {m:?}"));
        }
        out.push(format!("  ambiguous {:?}", rs.ambiguous));
    }
    for (pod, signal, v) in plan.values.iter() {
        out.push(format!("value {pod} {signal} {v}"));
    }
    out.extend(plan.inactive.iter().map(|i| format!("inactive {i}")));
    out.extend(plan.warnings.iter().map(|w| format!("warning {w}")));
    out.extend(plan.blocked_nodes.iter().map(|n| format!("blocked {n:?}")));
    out
}

/// FNV-1a (64 bits) of the lines, each ended by a newline.
fn digest(lines: &[String]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in lines.iter().flat_map(|l| l.bytes().chain([b'\n'])) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The lines in full when at most [`FULL`], else their number, their digest
/// and every k-th line (and the last), each after its index.
fn listing(lines: Vec<String>) -> Value {
    if lines.len() <= FULL {
        return json!(lines);
    }
    let step = lines.len().div_ceil(SAMPLE);
    let last = lines.len() - 1;
    let sample: Vec<String> = lines
        .iter()
        .enumerate()
        .filter(|&(i, _)| i % step == 0 || i == last)
        .map(|(i, l)| format!("#{i} {l}"))
        .collect();
    json!({
        "count": lines.len(),
        "digest": digest(&lines),
        "sample": sample,
    })
}
