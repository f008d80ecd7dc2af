//! Properties of the planner on generated namespaces: what it patches and
//! what it keeps, how the intended costs relate to the predicted order,
//! and that neither the order pods are listed in nor the thread pool
//! changes a plan. The golden plans (`tests/golden`) pin its exact output.
//!
//! Each namespace mixes two ReplicaSets of Deployment `web`, one of `db`,
//! bare pods and pods of another namespace; pods are on spot, on-demand,
//! unlabelled, missing or no nodes, Ready or not, Running, Pending,
//! finished or terminating, and carry no cost, this policy's, a foreign one,
//! Karpenter's or one that does not parse; a few carry an annotation that
//! keeps their node from an autoscaler, and a node may carry one itself. Times come from a few values, so pods tie
//! and share log2 buckets. Up to 150 pods: the tests' chunks (16 and 64
//! pods) are crossed.

use std::cell::Cell;

use k8s_openapi::api::core::v1::ContainerStatus;

use super::*;
use crate::annotations::{
    CA_SAFE_TO_EVICT, CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT, KARPENTER_MANAGED_COST,
    POLICY_ANNOTATION,
};
use crate::comparator::{parse_deletion_cost, Rule};
use crate::policy::OnSignalMissing;

const NODES: [&str; 7] = ["spot-1", "spot-2", "od-1", "od-2", "plain-1", "gone-1", ""];
/// Seconds before a base time: equal, a second apart (same log2 bucket),
/// an hour and days apart.
const TIMES: [i64; 4] = [0, 1, 3_600, 3 * 86_400];
const COSTS: [&str; 6] = ["0", "5", "-3", "7", "2147483647", "abc"];
const NOW_SECS: i64 = 1_795_316_400;

fn at(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).unwrap())
}

#[derive(Debug, Clone)]
struct PodShape {
    /// 0: web-abc, 1: web-old, 2: db-xyz, 3: no ReplicaSet, 4: another namespace.
    group: u8,
    node: usize,
    ready: bool,
    /// 0: Running, 1: Pending, 2: Succeeded.
    phase: u8,
    deleting: bool,
    created: usize,
    ready_since: usize,
    restarts: i32,
    /// 0: none, 1: this policy's, 2: foreign, 3: another policy's, 4:
    /// Karpenter's.
    cost: u8,
    /// 0: nothing, 1: `do-not-disrupt`, 2: `safe-to-evict: "false"`.
    keeps_node: u8,
    value: usize,
    /// Utilisation sample (`None`: none).
    sample: Option<f64>,
}

fn arb_pod() -> impl Strategy<Value = PodShape> {
    (
        prop_oneof![5 => Just(0u8), 2 => Just(1), 1 => Just(2), 1 => Just(3), 1 => Just(4)],
        0..NODES.len(),
        prop::bool::weighted(0.85),
        prop_oneof![8 => Just(0u8), 1 => Just(1), 1 => Just(2)],
        prop::bool::weighted(0.05),
        0..TIMES.len(),
        0..TIMES.len(),
        prop_oneof![6 => Just(0), 1 => 1i32..4],
        (
            0u8..5,
            prop_oneof![12 => Just(0u8), 1 => Just(1), 1 => Just(2)],
        ),
        0..COSTS.len(),
        prop_oneof![
            1 => Just(None),
            1 => Just(Some(f64::NAN)),
            8 => (0.0f64..1.2).prop_map(Some)
        ],
    )
        .prop_map(
            |(
                group,
                node,
                ready,
                phase,
                deleting,
                created,
                ready_since,
                restarts,
                (cost, keeps_node),
                value,
                sample,
            )| PodShape {
                group,
                node,
                ready,
                phase,
                deleting,
                created,
                ready_since,
                restarts,
                cost,
                keeps_node,
                value,
                sample,
            },
        )
}

fn replica_set(name: &str, app: &str, hash: &str) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            uid: Some(format!("uid-{name}")),
            owner_references: Some(vec![owner("Deployment", app)]),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            selector: K8sSelector {
                match_labels: Some(labels(&[("app", app), ("hash", hash)])),
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

fn build_pod(i: usize, s: &PodShape) -> Pod {
    let (namespace, app, rs) = match s.group {
        0 => ("shop", "web", Some("web-abc")),
        1 => ("shop", "web", Some("web-old")),
        2 => ("shop", "db", Some("db-xyz")),
        3 => ("shop", "web", None),
        _ => ("other", "web", Some("web-abc")),
    };
    let name = format!("{}-{i:03}", rs.unwrap_or("bare"));
    let mut pod_labels = labels(&[("app", app)]);
    if let Some(rs) = rs {
        pod_labels.insert("hash".into(), rs.rsplit('-').next().unwrap().into());
    }
    let value = COSTS[s.value];
    let mut annotations = match s.cost {
        0 => vec![],
        1 => vec![(POD_DELETION_COST, value), (POLICY_ANNOTATION, "web")],
        2 => vec![(POD_DELETION_COST, value)],
        3 => vec![(POD_DELETION_COST, value), (POLICY_ANNOTATION, "other")],
        _ => vec![(POD_DELETION_COST, value), (KARPENTER_MANAGED_COST, "true")],
    };
    match s.keeps_node {
        1 => annotations.push((KARPENTER_DO_NOT_DISRUPT, "true")),
        2 => annotations.push((CA_SAFE_TO_EVICT, "false")),
        _ => {}
    }
    let ready_since = NOW_SECS - 3_600 - TIMES[s.ready_since];
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.into()),
            // unique, and not in the order of the names
            uid: Some(format!(
                "{:016x}",
                (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            )),
            labels: Some(pod_labels),
            annotations: (!annotations.is_empty()).then(|| labels(&annotations)),
            owner_references: rs.map(|r| vec![owner("ReplicaSet", r)]),
            creation_timestamp: Some(at(NOW_SECS - 86_400 - TIMES[s.created])),
            deletion_timestamp: s.deleting.then(|| at(NOW_SECS - 5)),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(NODES[s.node])
                .filter(|n| !n.is_empty())
                .map(String::from),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some(["Running", "Pending", "Succeeded"][s.phase as usize].into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if s.ready { "True" } else { "False" }.into(),
                last_transition_time: Some(at(ready_since)),
                ..Default::default()
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: app.into(),
                ready: s.ready,
                restart_count: s.restarts,
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// A policy, its options and the namespace it plans.
#[derive(Debug, Clone)]
struct World {
    snapshot: Snapshot,
    samples: SignalSamples,
    policy: NamedPolicy,
    opts: PlanOptions,
    excluded: BTreeSet<String>,
}

impl World {
    fn plan(&self) -> Plan {
        self.plan_with(&self.snapshot, &PreviousValues::new())
    }

    fn plan_with(&self, snapshot: &Snapshot, previous: &PreviousValues) -> Plan {
        plan_excluding(
            &self.policy,
            snapshot,
            &self.samples,
            previous,
            &self.opts,
            &self.excluded,
        )
    }

    /// The pods as the API server has them once `plan`'s patches landed.
    fn landed(&self, plan: &Plan) -> Snapshot {
        let mut s = self.snapshot.clone();
        for pod in s.pods.iter_mut().map(std::sync::Arc::make_mut) {
            let ours = pod.identity.namespace.as_deref() == Some("shop");
            let name = pod.identity.name.as_deref().unwrap_or("");
            if let Some(patch) = plan.patches.iter().find(|x| ours && &*x.pod == name) {
                pod.ours.deletion_cost = Some(patch.cost.to_string());
                pod.ours.policy = Some("web".into());
            }
        }
        s
    }

    fn pod(&self, name: &str) -> &PodRecord {
        self.snapshot
            .pods
            .iter()
            .find(|p| {
                p.identity.namespace.as_deref() == Some("shop")
                    && p.identity.name.as_deref() == Some(name)
            })
            .unwrap()
    }
}

/// One signal of the policy, given the combine mode and whether missing
/// values take the default (which utilisation must then have).
fn signal(kind: u8, sum: bool, use_default: bool, knob: u8) -> Value {
    let (name, mut fields) = match kind {
        0 => {
            let mut fields = json!({"costs": {"spot": 0, "on-demand": 2}, "default": 1});
            match knob % 3 {
                0 => {}
                b => fields["budgets"] = json!({ "spot": b * 2 }),
            }
            ("billingClass", fields)
        }
        1 => {
            let mut fields = json!({
                "prometheus": {"query": "up"},
                "range": {"min": 0, "max": 1},
                "buckets": 1 + knob % 10
            });
            if knob % 2 == 1 {
                fields["hysteresis"] = json!(0.4);
            }
            if use_default || knob % 3 == 2 {
                fields["default"] = json!(0.55);
            }
            ("utilization", fields)
        }
        2 => {
            let max_pods = [2, 10, 110][knob as usize % 3];
            ("nodeConsolidation", json!({ "maxPods": max_pods }))
        }
        _ => {
            let max_per_zone = [1, 3, 1000][knob as usize % 3];
            ("zoneBalance", json!({ "maxPerZone": max_per_zone }))
        }
    };
    if sum {
        fields["weight"] = json!(1 + knob % 3);
    }
    json!({ name: fields })
}

fn arb_policy() -> impl Strategy<Value = NamedPolicy> {
    let signals = prop::sample::subsequence(vec![0u8, 1, 2, 3], 1..=4).prop_shuffle();
    (
        0u8..4,
        any::<bool>(),
        signals,
        prop::collection::vec(any::<u8>(), 4),
        0u8..3,
        any::<bool>(),
        prop_oneof![
            Just(None),
            (1i32..4).prop_map(Some),
            (4i32..100).prop_map(Some),
            Just(Some(1_000_000))
        ],
    )
        .prop_map(|(target, sum, signals, knobs, missing, respect, max_cost)| {
            let signals: Vec<Value> = signals
                .iter()
                .zip(knobs)
                .map(|(kind, knob)| signal(*kind, sum, missing == 2, knob))
                .collect();
            let on_signal_missing = ["keepLastValue", "skip", "useDefault"][missing as usize];
            let mut spec = json!({
                "combine": if sum { "sum" } else { "lexicographic" },
                "onSignalMissing": on_signal_missing,
                "respectForeignCosts": respect,
                "signals": signals
            });
            let (field, value) = match target {
                0 => ("selector", json!({"matchLabels": {"app": "web"}})),
                1 => ("targetRef", json!({"kind": "Deployment", "name": "web"})),
                2 => ("targetRef", json!({"kind": "ReplicaSet", "name": "web-abc"})),
                _ => (
                    "selector",
                    json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]}),
                ),
            };
            spec[field] = value;
            if let Some(m) = max_cost {
                spec["maxCost"] = json!(m);
            }
            policy(spec)
        })
}

fn arb_options() -> impl Strategy<Value = PlanOptions> {
    (
        any::<bool>(),
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.8),
        prop::option::of(0usize..20),
    )
        .prop_map(|(assume, cost_gate, log_gate, cut)| PlanOptions {
            gates: FeatureGates {
                pod_deletion_cost: cost_gate,
                logarithmic_scale_down: log_gate,
            },
            now: Some(at(NOW_SECS).0.as_nanosecond()),
            scale_down_by: cut,
            assume_patches_applied: assume,
            chunks: SMALL_CHUNKS,
        })
}

fn arb_world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(arb_pod(), 1..150),
        arb_policy(),
        arb_options(),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(specs, policy, opts, exclude, drop_old, pin_od_1)| {
            let pods: Vec<Pod> = specs
                .iter()
                .enumerate()
                .map(|(i, s)| build_pod(i, s))
                .collect();
            let util = policy
                .spec
                .signals
                .iter()
                .position(|s| matches!(s, ValidatedSignal::Utilization(_)));
            let mut samples = SignalSamples::default();
            if let Some(idx) = util {
                let series = pods
                    .iter()
                    .zip(&specs)
                    .filter_map(|(p, s)| Some((p.metadata.name.clone()?, s.sample?, None)));
                samples
                    .utilization
                    .insert(idx, UtilizationSamples::from_series(series, None, None));
            }
            let excluded = pods
                .iter()
                .enumerate()
                .filter(|(i, _)| exclude && i % 7 == 3)
                .filter_map(|(_, p)| p.metadata.name.clone())
                .collect();
            let mut snapshot = cluster(pods);
            snapshot.nodes.push(node("plain-1", &[]));
            snapshot.nodes[3] = node(
                "od-2",
                &[
                    ("karpenter.sh/capacity-type", "on-demand"),
                    ("topology.kubernetes.io/zone", "c"),
                ],
            );
            if pin_od_1 {
                let mut n = (*snapshot.nodes[2]).clone();
                n.metadata.annotations = Some(labels(&[(CA_SCALE_DOWN_DISABLED, "true")]));
                snapshot.nodes[2] = std::sync::Arc::new(n);
            }
            snapshot.replica_sets = vec![
                replica_set("web-abc", "web", "abc"),
                replica_set("db-xyz", "db", "xyz"),
            ];
            if !drop_old {
                snapshot
                    .replica_sets
                    .push(replica_set("web-old", "web", "old"));
            }
            World {
                snapshot,
                samples,
                policy,
                opts,
                excluded,
            }
        })
}

/// `f` with every plan on this thread forced onto one path.
fn forcing<R>(parallel: bool, f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            FORCE_PARALLEL.with(|c| c.set(None));
        }
    }
    FORCE_PARALLEL.with(|c: &Cell<Option<bool>>| c.set(Some(parallel)));
    let _reset = Reset;
    f()
}

/// What of a ReplicaSet's check cannot depend on the order pods are listed
/// in: upstream keeps its informer's order among pods it ranks equal, and
/// when its comparator is not a strict weak order the result depends on
/// that order too. So pods are sorted within each tie, and an ambiguous
/// ReplicaSet keeps only its pods.
fn listing_independent(rs: &ReplicaSetPlan) -> String {
    let mut rows: Vec<(Arc<str>, i32, i32)> = rs
        .predicted
        .iter()
        .cloned()
        .zip(rs.live_costs.iter().copied())
        .zip(rs.intended_costs.iter().copied())
        .map(|((n, l), i)| (n, l, i))
        .collect();
    let head = format!(
        "{} {:?} related={}",
        rs.name, rs.deployment, rs.related_pods
    );
    if !rs.ambiguous.is_empty() {
        rows.sort();
        let names: Vec<&str> = rows.iter().map(|r| &*r.0).collect();
        return format!("{head} ambiguous {names:?}");
    }
    for t in &rs.ties {
        rows[t.clone()].sort();
    }
    let in_cut_tie = |name: &str| {
        rs.tie_at_cut
            && rs.ties.iter().any(|t| {
                t.contains(&(rs.victims.len() - 1))
                    && rs.predicted[t.clone()].iter().any(|p| &**p == name)
            })
    };
    let mut victims: Vec<&str> = rs
        .victims
        .iter()
        .map(|v| &**v)
        .filter(|v| !in_cut_tie(v))
        .collect();
    victims.sort();
    // an inversion inside a tie (costs ignored with the gate off) depends on the order
    let mismatches: Vec<String> = if rs.ties.is_empty() {
        rs.mismatches.iter().map(|m| format!("{m:?}")).collect()
    } else {
        vec![]
    };
    format!(
        "{head} {rows:?} ties={:?} victims={} {victims:?} tie_at_cut={} {mismatches:?} {:?}",
        rs.ties,
        rs.victims.len(),
        rs.tie_at_cut,
        if rs.ties.is_empty() {
            Some(rs.verdict)
        } else {
            None
        }
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A patch is sent exactly for each pod whose live annotation is not
    /// this policy's decimal of the cost it wants, with that cost, in plan
    /// order; a pod is left unchanged only when it already carries it. Once
    /// the patches landed, planning again sends nothing.
    #[test]
    fn patches_are_exactly_the_costs_that_differ(w in arb_world()) {
        let plan = w.plan();
        let wanted: Vec<(&str, i32)> = plan
            .pods
            .iter()
            .filter_map(|p| match p.action {
                CostAction::Patch(c) => Some((&*p.name, c)),
                _ => None,
            })
            .collect();
        let sent: Vec<(&str, i32)> = plan.patches.iter().map(|x| (&*x.pod, x.cost)).collect();
        prop_assert_eq!(sent, wanted);
        for x in &plan.patches {
            let p = plan.pods.iter().find(|p| p.name == x.pod).unwrap();
            prop_assert_eq!(&*x.namespace, "shop");
            prop_assert_eq!(&x.uid, &p.uid);
        }
        for p in &plan.pods {
            let carries = |c: i32| p.owner == CostOwner::Ours && p.current_raw.as_deref() == Some(c.to_string().as_str());
            match &p.action {
                CostAction::Patch(c) => {
                    prop_assert_eq!(p.desired, Some(*c));
                    prop_assert!(!carries(*c), "{} already carries {}", p.name, c);
                }
                CostAction::Unchanged => {
                    let d = p.desired.unwrap();
                    prop_assert!(carries(d), "{} left at {:?}, wants {}", p.name, p.current_raw, d);
                    prop_assert_eq!(p.current, d);
                }
                CostAction::KeepForeign => prop_assert_eq!(p.desired, None),
                CostAction::KeepKarpenter => {
                    prop_assert_eq!(p.desired, None);
                    prop_assert_eq!(&p.owner, &CostOwner::Karpenter);
                }
                CostAction::KeepLastValue(_) => {
                    prop_assert_eq!(p.desired, None);
                    prop_assert_eq!(w.policy.spec.on_signal_missing, OnSignalMissing::KeepLastValue);
                    prop_assert!(p.signals.iter().any(|s| s.value.is_none() && s.missing));
                }
                // only a plan as an OnScaleIn policy writes leaves costs unwritten
                CostAction::NotWritten(_) => prop_assert!(false, "{} not written", p.name),
            }
        }
        let again = w.plan_with(&w.landed(&plan), &plan.values);
        prop_assert!(again.patches.is_empty(), "{:?}", again.patches);
    }

    /// With `respectForeignCosts`, a cost someone else wrote (another
    /// policy included) is kept and never patched; without it, taken over.
    /// Karpenter's is kept either way.
    #[test]
    fn foreign_costs_are_kept_when_respected(w in arb_world()) {
        let plan = w.plan();
        let respect = w.policy.spec.respect_foreign_costs;
        for p in &plan.pods {
            let foreign = matches!(p.owner, CostOwner::Foreign(_));
            let karpenters = w.pod(&p.name).ours.autoscaler.karpenter_cost;
            prop_assert_eq!(p.owner == CostOwner::Karpenter, karpenters, "{}", p.name);
            prop_assert_eq!(p.action == CostAction::KeepForeign, foreign && respect, "{}: {:?}", p.name, p.action);
            prop_assert_eq!(p.action == CostAction::KeepKarpenter, karpenters, "{}: {:?}", p.name, p.action);
            if (foreign && respect) || karpenters {
                prop_assert_eq!(p.intended(), p.current);
                prop_assert!(!plan.patches.iter().any(|x| x.pod == p.name));
            }
            let raw = w.pod(&p.name).ours.deletion_cost.as_ref();
            prop_assert_eq!(p.current, parse_deletion_cost(raw.map_or("0", String::as_str)).value);
        }
    }

    /// Per ReplicaSet: the intended cost listed for each pod is the one its
    /// plan intends (the live one for pods the policy does not manage), a
    /// mismatch is reported exactly where a pod goes before one with a
    /// lower intended cost, and the verdict follows; victims are the first
    /// pods of the predicted order, and every active pod the ReplicaSet owns
    /// is ordered once.
    #[test]
    fn intended_costs_follow_the_predicted_order(w in arb_world()) {
        let plan = w.plan();
        let mut names: Vec<&str> = plan.pods.iter().map(|p| &*p.name).collect();
        let sorted = { let mut s = names.clone(); s.sort(); s };
        prop_assert_eq!(&names, &sorted, "plans are in name order");
        names.dedup();
        prop_assert_eq!(names.len(), plan.pods.len());
        for rs in &plan.replica_sets {
            let n = rs.predicted.len();
            prop_assert_eq!(rs.intended_costs.len(), n);
            prop_assert_eq!(rs.live_costs.len(), n);
            for (i, name) in rs.predicted.iter().enumerate() {
                match plan.pods.iter().find(|p| p.name == *name) {
                    Some(p) => prop_assert_eq!(rs.intended_costs[i], p.intended()),
                    None => prop_assert_eq!(rs.intended_costs[i], rs.live_costs[i]),
                }
            }
            let inversions: Vec<(&str, &str)> = (1..n)
                .filter(|&i| rs.intended_costs[i - 1] > rs.intended_costs[i])
                .map(|i| (&*rs.predicted[i - 1], &*rs.predicted[i]))
                .collect();
            let reported: Vec<(&str, &str)> = rs.mismatches.iter().map(|m| (m.pod.as_str(), m.before.as_str())).collect();
            prop_assert_eq!(inversions, reported);
            let verdict = if !rs.mismatches.is_empty() {
                Verdict::NotAsIntended
            } else if !rs.ambiguous.is_empty() {
                Verdict::Ambiguous
            } else {
                Verdict::AsIntended
            };
            prop_assert_eq!(rs.verdict, verdict);
            let cut = w.opts.scale_down_by.map_or(0, |c| c.min(n));
            if cut < n {
                prop_assert_eq!(&rs.victims[..], &rs.predicted[..cut]);
            } else {
                // all of them, in the order upstream lists them
                let mut victims = rs.victims.clone();
                victims.sort();
                let mut all = rs.predicted.clone();
                all.sort();
                prop_assert_eq!(victims, all);
            }
            let mut at = 0;
            for t in &rs.ties {
                prop_assert!(t.start >= at && t.end <= n && t.len() >= 2);
                at = t.end;
            }
            prop_assert_eq!(
                rs.tie_at_cut,
                cut > 0 && rs.ties.iter().any(|t| t.contains(&(cut - 1)) && t.contains(&cut))
            );
            if rs.name != "(none)" {
                let mut owned: Vec<&str> = w.snapshot.pods.iter()
                    .filter(|p| p.identity.namespace.as_deref() == Some("shop"))
                    .filter(crate::comparator::is_pod_active)
                    .filter(|p| pod_rs(p).is_some_and(|o| o.name == rs.name))
                    .filter_map(|p| p.identity.name.as_deref())
                    .collect();
                owned.sort();
                let mut predicted: Vec<&str> = rs.predicted.iter().map(|p| &**p).collect();
                predicted.sort();
                prop_assert_eq!(predicted, owned);
            }
        }
    }

    /// `maxCost` keeps every cost the plan wants, and writes, in `0..=maxCost`.
    #[test]
    fn max_cost_keeps_costs_in_range(w in arb_world()) {
        let plan = w.plan();
        if let Some(max) = w.policy.spec.max_cost {
            for p in &plan.pods {
                if let Some(d) = p.desired {
                    prop_assert!((0..=max).contains(&d), "{} wants {} over maxCost {}", p.name, d, max);
                }
            }
            prop_assert!(plan.patches.iter().all(|x| (0..=max).contains(&x.cost)));
        }
    }

    /// The same input gives the same plan, and listing the pods in another
    /// order changes nothing but what upstream itself leaves to the order
    /// (see [`listing_independent`]); the finished and terminating pods are
    /// listed in the snapshot's order.
    #[test]
    fn plans_are_deterministic_and_ignore_the_order_of_pods(w in arb_world(), seed in any::<u64>()) {
        let plan = w.plan();
        prop_assert_eq!(&w.plan(), &plan);
        let mut shuffled = w.snapshot.clone();
        fastrand::Rng::with_seed(seed).shuffle(&mut shuffled.pods);
        let other = w.plan_with(&shuffled, &PreviousValues::new());
        prop_assert_eq!(&other.pods, &plan.pods);
        prop_assert_eq!(&other.patches, &plan.patches);
        prop_assert_eq!(&other.values, &plan.values);
        prop_assert_eq!(&other.warnings, &plan.warnings);
        let set = |v: &[String]| v.iter().cloned().collect::<BTreeSet<String>>();
        prop_assert_eq!(set(&other.inactive), set(&plan.inactive));
        let checks = |p: &Plan| p.replica_sets.iter().map(listing_independent).collect::<Vec<_>>();
        prop_assert_eq!(checks(&other), checks(&plan));
    }

    /// With the patches assumed applied, upstream reads the intended costs,
    /// so a pod goes before a cheaper one only for a reason the check names
    /// and upstream's rule shows: an unscheduled, not Running or not Ready
    /// pod, the deletion-cost gate off, or an ambiguous comparator. With
    /// the gate on, every owned pod scheduled, Running and Ready, and no
    /// ambiguity, the predicted order is the intended one.
    #[test]
    fn assumed_patches_predict_the_intended_order(w in arb_world(), heal in any::<bool>()) {
        let mut w = w;
        w.opts.assume_patches_applied = true;
        if heal {
            // every pod scheduled, Running and Ready: only the gate or an
            // ambiguous comparator can then explain a mismatch
            for p in w.snapshot.pods.iter_mut().map(std::sync::Arc::make_mut) {
                let spec = p.spec.get_or_insert_with(Default::default);
                spec.node_name.get_or_insert_with(|| "spot-1".into());
                let status = p.status.get_or_insert_with(Default::default);
                if status.phase.as_deref() == Some("Pending") {
                    status.phase = Some("Running".into());
                }
                for c in status.ready.iter_mut() {
                    c.status = "True".into();
                }
            }
        }
        let plan = w.plan();
        for rs in &plan.replica_sets {
            prop_assert_eq!(&rs.live_costs, &rs.intended_costs);
            for m in &rs.mismatches {
                let explained = match m.reason {
                    MismatchReason::Unassigned => m.rule == Rule::Unassigned,
                    MismatchReason::NotRunning => m.rule == Rule::Phase,
                    MismatchReason::NotReady => m.rule == Rule::Readiness,
                    MismatchReason::FeatureGateOff => !w.opts.gates.pod_deletion_cost,
                    MismatchReason::Ambiguous => {
                        rs.ambiguous.iter().any(|a| **a == *m.pod)
                            && rs.ambiguous.iter().any(|a| **a == *m.before)
                    }
                    _ => false,
                };
                prop_assert!(explained, "{}: {:?}", rs.name, m);
            }
            let healthy = rs.predicted.iter().all(|name| {
                let p = w.pod(name);
                p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && crate::comparator::is_pod_ready(p)
            });
            if healthy && w.opts.gates.pod_deletion_cost && rs.ambiguous.is_empty() {
                prop_assert_eq!(rs.verdict, Verdict::AsIntended, "{:?}", rs.mismatches);
            }
        }
    }

    /// A node no autoscaler may remove (its own annotation, or an active
    /// pod of any namespace on it with one) is named with the plan when a
    /// selected pod runs there, and `nodeConsolidation` gives its pods the
    /// band after every count; other nodes' pods keep their count.
    #[test]
    fn nodes_no_autoscaler_may_remove_are_drained_last(w in arb_world()) {
        let plan = w.plan();
        let kept_by_pods: BTreeSet<&str> = w.snapshot.pods.iter()
            .filter(|p| crate::comparator::is_pod_active(*p))
            .filter(|p| p.ours.autoscaler.do_not_disrupt || p.ours.autoscaler.not_safe_to_evict)
            .map(|p| node_of(p))
            .filter(|n| !n.is_empty())
            .collect();
        let kept_by_node: BTreeSet<&str> = w.snapshot.nodes.iter()
            .filter(|n| n.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(CA_SCALE_DOWN_DISABLED)))
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        let blocked = |n: &str| kept_by_pods.contains(n) || kept_by_node.contains(n);
        let expected: BTreeSet<&str> = plan.pods.iter().map(|p| &*p.node).filter(|n| blocked(n)).collect();
        let named: Vec<&str> = plan.blocked_nodes.iter().map(|n| n.node.as_str()).collect();
        prop_assert_eq!(named.iter().copied().collect::<BTreeSet<_>>(), expected);
        prop_assert!(named.windows(2).all(|w| w[0] < w[1]), "by name, once each: {:?}", named);
        for n in &plan.blocked_nodes {
            prop_assert!(!n.blockers.is_empty());
            prop_assert_eq!(n.blockers.iter().any(|b| b.pod.is_none()), kept_by_node.contains(n.node.as_str()));
        }
        let consolidation = w.policy.spec.signals.iter().position(|s| matches!(s, ValidatedSignal::NodeConsolidation(_)));
        if let Some(k) = consolidation {
            let ValidatedSignal::NodeConsolidation(c) = &w.policy.spec.signals[k] else { unreachable!() };
            for p in &plan.pods {
                let s = &p.signals[k];
                let band = s.value.map(|v| v / i64::from(c.node_slots));
                if blocked(&p.node) {
                    prop_assert_eq!(band, Some(c.blocked_band()), "{}", p.name);
                    prop_assert!(s.detail.ends_with(", cannot be removed"), "{}", s.detail);
                } else {
                    prop_assert!(!s.detail.contains("cannot"), "{}", s.detail);
                }
            }
        }
    }

    /// The thread pool's path and the calling thread's give the same plan
    /// (the tests' chunks are small, so both cross several), also when pods
    /// share a UID or have none (possible in a file: related pods are then
    /// counted sibling by sibling).
    #[test]
    fn parallel_and_sequential_plans_are_the_same(w in arb_world(), share in any::<bool>()) {
        let mut w = w;
        if share {
            for i in (4..w.snapshot.pods.len()).step_by(5) {
                let uid = std::sync::Arc::make_mut(&mut w.snapshot.pods[i - 1]).identity.uid.clone();
                std::sync::Arc::make_mut(&mut w.snapshot.pods[i]).identity.uid = uid;
                std::sync::Arc::make_mut(&mut w.snapshot.pods[i - 3]).identity.uid = None;
            }
        }
        let parallel = forcing(true, || w.plan());
        let sequential = forcing(false, || w.plan());
        prop_assert_eq!(&parallel, &sequential);
        prop_assert_eq!(&parallel.values, &sequential.values);
        prop_assert_eq!(&parallel, &w.plan());
        let picked = |on: bool| {
            forcing(on, || selected_in_chunks(&w.policy, &w.snapshot, SMALL_CHUNKS.select))
        };
        prop_assert_eq!(picked(true), picked(false));
    }

    /// The planner keys a patched pod with the cost it writes, unparsed: this
    /// holds only if upstream parses our decimal back to the same value.
    #[test]
    fn written_costs_parse_back_unchanged(c in any::<i32>()) {
        prop_assert_eq!(
            parse_deletion_cost(&c.to_string()),
            crate::comparator::ParsedCost { value: c, problem: None }
        );
        let mut buf = String::from("stale");
        prop_assert_eq!(super::super::costing::decimal(&mut buf, c), c.to_string());
    }
}
