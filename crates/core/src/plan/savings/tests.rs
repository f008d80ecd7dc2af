//! Savings tests: the model over plain facts, upstream's choice without the
//! policy's costs, and the whole computation over small snapshots.

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::comparator::FeatureGates;
use crate::policy::DeletionCostPolicySpec;

/// Prices by billing class and by instance type, each `name: price, …`.
fn prices(billing_classes: &[(&str, &str)], instance_types: &[(&str, &str)]) -> Prices {
    let map = |entries: &[(&str, &str)]| {
        entries
            .iter()
            .map(|(name, price)| (name.to_string(), money(price)))
            .collect()
    };
    Prices {
        source: "prices.yaml".into(),
        currency: None,
        billing_classes: map(billing_classes),
        instance_types: map(instance_types),
    }
}

fn money(s: &str) -> Money {
    Money::from_price(s.parse().unwrap()).unwrap()
}

fn node<'a>(name: &'a str, class: Option<&str>, instance_type: Option<&'a str>) -> NodeFacts<'a> {
    NodeFacts {
        name,
        billing_class: class.map(str::to_string),
        instance_type,
        cpu_millicores: Some(2000),
        memory_bytes: Some(8 << 30),
        blockers: Vec::new(),
    }
}

fn pod<'a>(namespace: &'a str, name: &'a str, node: &'a str) -> PodFacts<'a> {
    PodFacts {
        namespace,
        name,
        node,
        active: true,
        daemon_set: false,
        blocker: None,
    }
}

fn victims<'a>(names: &[&'a str]) -> Victims<'a> {
    Victims {
        pods: names.iter().map(|n| ("shop", *n)).collect(),
        tie_at_cut: false,
    }
}

fn freed(c: &Choice) -> Vec<&str> {
    c.freed_nodes.iter().map(|n| n.name.as_str()).collect()
}

#[test]
fn a_node_is_freed_when_only_daemon_set_and_inactive_pods_stay() {
    let nodes = [
        node("spot-1", Some("spot"), Some("m6i.large")),
        node("od-1", Some("on-demand"), None),
        node("bare-1", None, None),
        node("spot-2", Some("spot"), None),
    ];
    let mut ds = pod("kube-system", "node-exporter-x", "spot-1");
    ds.daemon_set = true;
    let mut finished = pod("batch", "job-1", "spot-1");
    finished.active = false;
    let pods = [
        pod("shop", "web-a", "spot-1"),
        ds,
        finished,
        // another namespace's active pod keeps od-1
        pod("shop", "web-b", "od-1"),
        pod("billing", "invoice-1", "od-1"),
        pod("shop", "web-c", "bare-1"),
        pod("shop", "web-d", "spot-2"),
        pod("shop", "web-e", "spot-2"),
        pod("shop", "web-f", ""),
    ];
    let p = Prices {
        currency: Some("USD".into()),
        ..prices(
            &[("spot", "0.12"), ("on-demand", "0.40")],
            &[("m6i.large", "0.05")],
        )
    };
    let s = compute(
        &nodes,
        &pods,
        &p,
        &victims(&["web-a", "web-b", "web-c", "web-d", "web-f"]),
        &victims(&["web-d", "web-e"]),
    );
    // spot-2 keeps web-e; web-f has no node
    assert_eq!(freed(&s.policy), ["bare-1", "spot-1"]);
    let spot_1 = &s.policy.freed_nodes[1];
    assert_eq!(spot_1.hourly, Some(money("0.05")));
    assert_eq!(spot_1.price_from, Some(PriceFrom::InstanceType));
    assert_eq!(s.policy.unpriced_nodes, ["bare-1"]);
    assert_eq!(s.policy.hourly, money("0.05"));
    assert_eq!(s.policy.monthly, money("36.5"));
    // classes by name, nodes without a class last
    let classes: Vec<(Option<&str>, usize, usize)> = s
        .policy
        .by_billing_class
        .iter()
        .map(|c| (c.billing_class.as_deref(), c.nodes, c.unpriced_nodes))
        .collect();
    assert_eq!(classes, [(Some("spot"), 1, 0), (None, 1, 1)]);
    assert_eq!(
        s.policy.by_billing_class[0].allocatable_cpu_millicores,
        Some(2000)
    );
    assert_eq!(freed(&s.upstream), ["spot-2"]);
    assert_eq!(s.upstream.hourly, money("0.12"));
    assert_eq!(s.difference.nodes, 1);
    assert_eq!(s.difference.hourly, money("0.05") - money("0.12"));
    assert_eq!(s.difference.monthly.to_string(), "-51.10");
    assert!(!s.difference.complete, "bare-1 has no price");
    assert_eq!(s.currency.as_deref(), Some("USD"));
}

#[test]
fn allocatable_is_summed_where_reported() {
    let mut a = node("a", Some("spot"), None);
    a.memory_bytes = None;
    let b = node("b", Some("spot"), None);
    let pods = [pod("shop", "x", "a"), pod("shop", "y", "b")];
    let s = compute(
        &[a, b],
        &pods,
        &prices(&[("spot", "1")], &[]),
        &victims(&["x", "y"]),
        &victims(&[]),
    );
    let spot = &s.policy.by_billing_class[0];
    assert_eq!(spot.nodes, 2);
    assert_eq!(spot.allocatable_cpu_millicores, Some(4000));
    assert_eq!(spot.allocatable_memory_bytes, Some(8 << 30));
    assert_eq!(spot.nodes_without_allocatable, 1);
    assert_eq!(spot.monthly, money("1460"));
    assert!(s.upstream.freed_nodes.is_empty());
    assert_eq!(s.upstream.hourly, Money::ZERO);
}

#[test]
fn quantities_read_as_kubernetes_writes_them() {
    let q = |s: &str| quantity(s);
    assert_eq!(q("2"), Some(2.0));
    assert_eq!(q("1930m").map(|v| whole(v * 1000.0)), Some(1930));
    assert_eq!(q("1.93").map(|v| whole(v * 1000.0)), Some(1930));
    assert_eq!(q("7934440Ki"), Some(7934440.0 * 1024.0));
    assert_eq!(q("16Gi"), Some(16.0 * (1u64 << 30) as f64));
    assert_eq!(q("1e3"), Some(1000.0));
    assert_eq!(q("1E3"), Some(1000.0));
    assert_eq!(q("2E"), Some(2e18));
    assert_eq!(q("500M"), Some(5e8));
    assert_eq!(q("0.5"), Some(0.5));
    for bad in ["", "Gi", "abc", "1Qi", "-1", "1-2", "."] {
        assert_eq!(q(bad), None, "{bad}");
    }
    assert_eq!(whole(0.0001), 1, "rounded up as Kubernetes does");
}

const NOW: &str = "2026-11-22T03:00:00Z";

fn opts(scale_down_by: usize) -> PlanOptions {
    PlanOptions {
        gates: FeatureGates::default(),
        now: Some(NOW.parse::<Timestamp>().unwrap().as_nanosecond()),
        scale_down_by: Some(scale_down_by),
        assume_patches_applied: true,
        chunks: crate::plan::tests::SMALL_CHUNKS,
    }
}

fn policy(spec: Value) -> NamedPolicy {
    let spec: DeletionCostPolicySpec = serde_json::from_value(spec).unwrap();
    NamedPolicy::validate("web", "shop", &spec).unwrap()
}

/// A pod of ReplicaSet web-1 in shop, Ready since `ready`, with
/// `annotations` and on `node`.
fn pod_item(name: &str, node: &str, ready: &str, annotations: Value) -> Value {
    json!({
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": format!("uid-{name}"),
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "labels": {"app": "web"},
            "annotations": annotations,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs-1", "controller": true}
            ]
        },
        "spec": {"nodeName": node},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready}]
        }
    })
}

/// ReplicaSet `name` (uid `uid`) of shop, selecting `app: web`.
fn replica_set(name: &str, uid: &str) -> Value {
    json!({
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "shop", "uid": uid},
        "spec": {"selector": {"matchLabels": {"app": "web"}}}
    })
}

/// Node `name` with `labels`.
fn node_item(name: &str, labels: Value) -> Value {
    json!({"kind": "Node", "metadata": {"name": name, "labels": labels}})
}

fn snapshot(items: Vec<Value>) -> Snapshot {
    Snapshot::from_value(json!({"kind": "List", "items": items}))
}

#[test]
fn upstream_default_drops_the_policys_costs_and_keeps_foreign_ones() {
    let ours = json!({
        "controller.kubernetes.io/pod-deletion-cost": "100",
        "deletioncost.dev/policy": "web"
    });
    let foreign = json!({
        "controller.kubernetes.io/pod-deletion-cost": "50",
        "deletioncost.dev/policy": "other"
    });
    // ready most recently: b, then a, then c (upstream deletes the most recent first)
    let s = snapshot(vec![
        replica_set("web-1", "rs-1"),
        pod_item("a", "n1", "2026-11-21T00:00:00Z", ours),
        pod_item("b", "n2", "2026-11-22T02:00:00Z", foreign),
        pod_item("c", "n3", "2026-11-10T00:00:00Z", json!({})),
    ]);
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"nodeConsolidation": {}}]
    }));
    let rs = upstream_default(&p, &s, &opts(3));
    assert_eq!(rs.len(), 1);
    let order: Vec<&str> = rs[0].predicted.iter().map(|n| &**n).collect();
    // a's cost (ours) is gone, b's (foreign) stays: a, c at 0 before b at 50
    assert_eq!(order, ["a", "c", "b"]);
    assert_eq!(rs[0].live_costs, [0, 0, 50]);
    // with the policy's own cost kept, c would go before a
    let kept = plan(
        &p,
        &s,
        &SignalSamples::default(),
        &PreviousValues::new(),
        &PlanOptions {
            assume_patches_applied: false,
            ..opts(1)
        },
    );
    assert_eq!(&*kept.replica_sets[0].predicted[0], "c");
}

#[test]
fn plan_savings_compares_the_policy_with_upstream() {
    // upstream deletes the most recently ready pod, a on od-1; the spot-first
    // policy deletes b on spot-1; c keeps od-2
    let s = snapshot(vec![
        json!({
            "kind": "Node",
            "metadata": {
                "name": "spot-1",
                "labels": {
                    "karpenter.sh/capacity-type": "spot",
                    "node.kubernetes.io/instance-type": "m6i.large"
                }
            },
            "status": {"allocatable": {"cpu": "1930m", "memory": "7934440Ki"}}
        }),
        json!({
            "kind": "Node",
            "metadata": {"name": "od-1", "labels": {"karpenter.sh/capacity-type": "on-demand"}},
            "status": {"allocatable": {"cpu": "4", "memory": "lots"}}
        }),
        node_item("od-2", json!({"karpenter.sh/capacity-type": "on-demand"})),
        json!({
            "kind": "Pod",
            "metadata": {
                "name": "exporter-1",
                "namespace": "monitoring",
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "exporter", "uid": "ds-1", "controller": true}
                ]
            },
            "spec": {"nodeName": "od-1"},
            "status": {"phase": "Running"}
        }),
        replica_set("web-1", "rs-1"),
        pod_item("a", "od-1", "2026-11-22T02:00:00Z", json!({})),
        pod_item("b", "spot-1", "2026-11-10T00:00:00Z", json!({})),
        pod_item("c", "od-2", "2026-11-01T00:00:00Z", json!({})),
    ]);
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}}}]
    }));
    let o = opts(1);
    let planned = plan(
        &p,
        &s,
        &SignalSamples::default(),
        &PreviousValues::new(),
        &o,
    );
    let (savings, warnings) = plan_savings(
        &p,
        &s,
        &planned,
        &prices(&[("spot", "0.12")], &[("m6i.large", "0.04")]),
        &o,
    );
    assert_eq!(savings.policy.victims, ["b"]);
    assert_eq!(freed(&savings.policy), ["spot-1"]);
    assert_eq!(
        savings.policy.freed_nodes[0].allocatable_cpu_millicores,
        Some(1930)
    );
    assert_eq!(
        savings.policy.freed_nodes[0].allocatable_memory_bytes,
        Some(7934440 * 1024)
    );
    assert_eq!(savings.policy.hourly, money("0.04"));
    // the DaemonSet pod does not keep od-1
    assert_eq!(savings.upstream.victims, ["a"]);
    assert_eq!(freed(&savings.upstream), ["od-1"]);
    assert_eq!(savings.upstream.unpriced_nodes, ["od-1"]);
    assert_eq!(savings.difference.hourly, money("0.04"));
    assert!(!savings.difference.complete);
    assert_eq!(
        warnings,
        [
            "node od-1: status.allocatable.memory \"lots\" is not a quantity; left out of the freed capacity",
            "prices.yaml: no price for freed node(s) od-1 (neither their instance type nor their billing class is listed); left out of the sums",
        ]
    );
    let class = &savings.upstream.by_billing_class[0];
    assert_eq!(class.billing_class.as_deref(), Some("on-demand"));
    assert_eq!(
        (
            class.allocatable_cpu_millicores,
            class.allocatable_memory_bytes
        ),
        (Some(4000), None)
    );
}

#[test]
fn a_live_scale_in_is_priced_over_its_own_victims_and_replica_sets() {
    // a second ReplicaSet of the namespace, not scaled: its pods stay, and
    // upstream's choice counts only the scaled one's
    let mut other = pod_item("z", "od-2", "2026-11-22T02:30:00Z", json!({}));
    other["metadata"]["ownerReferences"][0]["name"] = json!("web-2");
    other["metadata"]["ownerReferences"][0]["uid"] = json!("rs-2");
    let s = snapshot(vec![
        node_item("spot-1", json!({"karpenter.sh/capacity-type": "spot"})),
        node_item("od-1", json!({"karpenter.sh/capacity-type": "on-demand"})),
        node_item("od-2", json!({"karpenter.sh/capacity-type": "on-demand"})),
        replica_set("web-1", "rs-1"),
        replica_set("web-2", "rs-2"),
        pod_item("a", "od-1", "2026-11-22T02:00:00Z", json!({})),
        pod_item("b", "spot-1", "2026-11-10T00:00:00Z", json!({})),
        pod_item("c", "od-2", "2026-11-01T00:00:00Z", json!({})),
        other,
    ]);
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}}}]
    }));
    let o = PlanOptions {
        assume_patches_applied: false,
        ..opts(1)
    };
    let prices = Prices {
        currency: Some("USD".into()),
        ..prices(&[("spot", "0.04"), ("on-demand", "0.19")], &[])
    };
    // the pods the scale-in deleted, whatever a plan would pick: b
    let victims = vec![("web-1".to_string(), vec![Arc::<str>::from("b")])];
    let (savings, warnings) = scale_in_savings(&p, &s, &victims, &prices, &o);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(savings.policy.victims, ["b"]);
    assert_eq!(freed(&savings.policy), ["spot-1"]);
    assert_eq!(savings.policy.hourly, money("0.04"));
    // upstream deletes web-1's most recently ready pod, a, which frees
    // od-1; web-2's z (readier still) is not part of this scale-in
    assert_eq!(savings.upstream.victims, ["a"]);
    assert_eq!(freed(&savings.upstream), ["od-1"]);
    assert_eq!(savings.difference.hourly, Money::ZERO - money("0.15"));
    assert_eq!(savings.currency.as_deref(), Some("USD"));
    // the victims of `plan --prices` over the same snapshot price the same
    let planned = plan(
        &p,
        &s,
        &SignalSamples::default(),
        &PreviousValues::new(),
        &o,
    );
    let web_1: Vec<(String, Vec<Arc<str>>)> = planned
        .replica_sets
        .iter()
        .filter(|r| r.name == "web-1")
        .map(|r| (r.name.clone(), r.victims.clone()))
        .collect();
    let (live, _) = scale_in_savings(&p, &s, &web_1, &prices, &o);
    let (offline, _) = plan_savings(&p, &s, &planned, &prices, &o);
    assert_eq!(live.policy.freed_nodes, offline.policy.freed_nodes);
    assert_eq!(live.upstream.victims, ["a"]);
}

#[test]
fn the_billing_class_is_read_as_the_policys_signal_reads_it() {
    let custom = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"billingClass": {"nodeLabel": "example.com/class", "costs": {"reserved": 1}}}]
    }));
    let none = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"nodeConsolidation": {}}]
    }));
    let s = snapshot(vec![node_item(
        "node-a",
        json!({"example.com/class": "reserved", "eks.amazonaws.com/capacityType": "ON_DEMAND"}),
    )]);
    let class = |p: &NamedPolicy| {
        node_facts(&billing_source(p), &s.nodes).0[0]
            .billing_class
            .clone()
    };
    assert_eq!(class(&custom).as_deref(), Some("reserved"));
    // without a billingClass signal: the default preset, as a signal without one reads
    assert_eq!(class(&none).as_deref(), Some("on-demand"));
}

/// Facts for the property test: node `i` is `n{i}`; pods name `n6` (in no
/// snapshot) or no node at all. A node's flag: it carries an annotation
/// that keeps it; a pod's last flag: so does the pod (counted only when it
/// is active and scheduled, as the facts read from pods are).
#[derive(Debug, Clone)]
struct World {
    nodes: Vec<(Option<&'static str>, Option<&'static str>, bool)>,
    pods: Vec<(usize, usize, bool, bool, bool)>,
    policy: Vec<bool>,
    upstream: Vec<bool>,
    classes: Vec<(&'static str, u32)>,
    types: Vec<(&'static str, u32)>,
}

const NODE_NAMES: [&str; 8] = ["n0", "n1", "n2", "n3", "n4", "n5", "n6", ""];
const NAMESPACES: [&str; 2] = ["shop", "other"];

fn world() -> impl Strategy<Value = World> {
    let class = prop::option::of(prop::sample::select(vec!["spot", "on-demand", "payg"]));
    let itype = prop::option::of(prop::sample::select(vec!["a", "b"]));
    (
        prop::collection::vec((class, itype, prop::bool::weighted(0.2)), 0..6),
        prop::collection::vec(
            (
                0..2usize,
                0..8usize,
                any::<bool>(),
                any::<bool>(),
                prop::bool::weighted(0.15),
            ),
            0..16,
        ),
        prop::collection::vec(
            (
                prop::sample::select(vec!["spot", "on-demand", "payg"]),
                0..2_000_000u32,
            ),
            0..3,
        ),
        prop::collection::vec(
            (prop::sample::select(vec!["a", "b"]), 0..2_000_000u32),
            0..2,
        ),
    )
        .prop_flat_map(|(nodes, pods, classes, types)| {
            let n = pods.len();
            (
                Just(nodes),
                Just(pods),
                prop::collection::vec(any::<bool>(), n),
                prop::collection::vec(any::<bool>(), n),
                Just(classes),
                Just(types),
            )
        })
        .prop_map(|(nodes, pods, policy, upstream, classes, types)| World {
            nodes,
            pods,
            policy,
            upstream,
            classes,
            types,
        })
}

fn node_blocker() -> Blocker {
    Blocker {
        pod: None,
        annotation: crate::annotations::CA_SCALE_DOWN_DISABLED,
        value: "true",
    }
}

fn pod_blocker_of(ns: &str, name: &str) -> Blocker {
    Blocker {
        pod: Some(format!("{ns}/{name}")),
        annotation: crate::annotations::KARPENTER_DO_NOT_DISRUPT,
        value: "true",
    }
}

#[test]
fn a_node_an_autoscaler_may_not_remove_is_not_freed() {
    let mut kept_node = node("od-c", Some("on-demand"), None);
    kept_node.blockers.push(node_blocker());
    let nodes = [
        node("od-a", Some("on-demand"), None),
        node("od-b", Some("on-demand"), None),
        kept_node,
        node("od-d", Some("on-demand"), None),
    ];
    let mut batch = pod("jobs", "batch-x", "od-a");
    batch.blocker = Some(pod_blocker_of("jobs", "batch-x"));
    // a DaemonSet pod keeps no node, but its do-not-disrupt does (Karpenter)
    let mut agent = pod("kube-system", "agent-d", "od-d");
    agent.daemon_set = true;
    agent.blocker = Some(pod_blocker_of("kube-system", "agent-d"));
    // a victim that carries one takes it away with it
    let mut leaving = pod("shop", "web-b", "od-b");
    leaving.blocker = Some(pod_blocker_of("shop", "web-b"));
    let pods = [
        pod("shop", "web-a", "od-a"),
        batch,
        leaving,
        pod("shop", "web-c", "od-c"),
        pod("shop", "web-d", "od-d"),
        agent,
    ];
    let p = prices(&[("on-demand", "0.40")], &[]);
    let s = compute(
        &nodes,
        &pods,
        &p,
        &victims(&["web-a", "web-b", "web-c", "web-d"]),
        &victims(&[]),
    );
    assert_eq!(freed(&s.policy), ["od-b"]);
    assert_eq!(s.policy.hourly, money("0.40"));
    let why: Vec<String> = s
        .policy
        .not_removable
        .iter()
        .map(|n| n.to_string())
        .collect();
    // od-a is not emptied at all: batch-x, active, stays on it
    assert_eq!(
        why,
        [
            "od-c cannot be removed: the node has cluster-autoscaler.kubernetes.io/scale-down-disabled",
            "od-d cannot be removed: kube-system/agent-d has karpenter.sh/do-not-disrupt",
        ]
    );
    // only emptied nodes are named
    let s = compute(&nodes, &pods, &p, &victims(&["web-c"]), &victims(&[]));
    assert!(s.policy.freed_nodes.is_empty());
    assert_eq!(s.policy.not_removable.len(), 1);
    assert_eq!(s.policy.not_removable[0].node, "od-c");
    let s = compute(&nodes, &pods, &p, &victims(&["web-d"]), &victims(&[]));
    assert_eq!(s.policy.not_removable[0].node, "od-d");
    let json = serde_json::to_value(&s.policy).unwrap();
    assert_eq!(json["notRemovable"][0]["node"], "od-d");
    assert!(serde_json::to_value(&s.upstream)
        .unwrap()
        .get("notRemovable")
        .is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn savings_keep_their_invariants(w in world()) {
        let names: Vec<String> = (0..w.pods.len()).map(|i| format!("p{i}")).collect();
        let nodes: Vec<NodeFacts> = w.nodes.iter().enumerate().map(|(i, (class, itype, kept))| NodeFacts {
            name: NODE_NAMES[i],
            billing_class: class.map(str::to_string),
            instance_type: *itype,
            cpu_millicores: Some(1000 * i as u64),
            memory_bytes: (i % 2 == 0).then_some(1 << 30),
            blockers: if *kept { vec![node_blocker()] } else { Vec::new() },
        }).collect();
        let pods: Vec<PodFacts> = w.pods.iter().enumerate().map(|(i, &(ns, node, active, ds, keeps))| PodFacts {
            namespace: NAMESPACES[ns],
            name: &names[i],
            node: NODE_NAMES[node],
            active,
            daemon_set: ds,
            blocker: (keeps && active && !NODE_NAMES[node].is_empty())
                .then(|| pod_blocker_of(NAMESPACES[ns], &names[i])),
        }).collect();
        let node_kept = |n: &str| nodes.iter().any(|f| f.name == n && !f.blockers.is_empty());
        // victims are active pods that are not DaemonSet pods, as upstream's are
        let pick = |mask: &[bool]| Victims {
            pods: pods.iter().zip(mask).filter(|(p, &m)| m && p.keeps_node()).map(|(p, _)| (p.namespace, p.name)).collect(),
            tie_at_cut: false,
        };
        let (pv, uv) = (pick(&w.policy), pick(&w.upstream));
        let mut p = Prices::default();
        for (c, micros) in &w.classes {
            p.billing_classes.insert(c.to_string(), Money::from_micros(i128::from(*micros)));
        }
        for (t, micros) in &w.types {
            p.instance_types.insert(t.to_string(), Money::from_micros(i128::from(*micros)));
        }
        let s = compute(&nodes, &pods, &p, &pv, &uv);
        for (choice, v) in [(&s.policy, &pv), (&s.upstream, &uv)] {
            let victim: BTreeSet<(&str, &str)> = v.pods.iter().copied().collect();
            let hosting: BTreeSet<&str> = pods.iter()
                .filter(|p| !p.node.is_empty() && victim.contains(&(p.namespace, p.name)))
                .map(|p| p.node).collect();
            let freed: BTreeSet<&str> = choice.freed_nodes.iter().map(|n| n.name.as_str()).collect();
            prop_assert_eq!(freed.len(), choice.freed_nodes.len(), "a node listed twice");
            // freed nodes host a victim, and nothing else keeps them
            prop_assert!(freed.is_subset(&hosting));
            for pod in pods.iter().filter(|p| freed.contains(p.node)) {
                prop_assert!(!pod.keeps_node() || victim.contains(&(pod.namespace, pod.name)));
            }
            // and every node hosting a victim that nothing else keeps is
            // freed, unless an annotation keeps it: then it is named
            let not_removable: BTreeSet<&str> = choice.not_removable.iter().map(|n| n.node.as_str()).collect();
            for n in &hosting {
                let stays = |p: &&PodFacts| p.node == *n && !victim.contains(&(p.namespace, p.name));
                let kept = pods.iter().filter(stays).any(|p| p.keeps_node());
                let blocked = node_kept(n) || pods.iter().filter(stays).any(|p| p.blocker.is_some());
                prop_assert_eq!(freed.contains(n), !kept && !blocked, "{}", n);
                prop_assert_eq!(not_removable.contains(n), !kept && blocked, "{}", n);
            }
            prop_assert!(not_removable.is_subset(&hosting));
            // sums: the priced nodes, the month, the classes
            let priced: Money = choice.freed_nodes.iter().filter_map(|n| n.hourly).sum();
            prop_assert_eq!(choice.hourly, priced);
            prop_assert_eq!(choice.monthly, priced.times(HOURS_PER_MONTH));
            let unpriced: Vec<&str> = choice.freed_nodes.iter().filter(|n| n.hourly.is_none()).map(|n| n.name.as_str()).collect();
            prop_assert_eq!(&choice.unpriced_nodes, &unpriced);
            prop_assert_eq!(choice.by_billing_class.iter().map(|c| c.nodes).sum::<usize>(), freed.len());
            prop_assert_eq!(choice.by_billing_class.iter().map(|c| c.hourly).sum::<Money>(), choice.hourly);
            prop_assert_eq!(choice.by_billing_class.iter().map(|c| c.unpriced_nodes).sum::<usize>(), unpriced.len());
        }
        prop_assert_eq!(s.difference.hourly, s.policy.hourly - s.upstream.hourly);
        prop_assert_eq!(s.difference.monthly, s.policy.monthly - s.upstream.monthly);
        prop_assert_eq!(s.difference.nodes, s.policy.freed_nodes.len() as i64 - s.upstream.freed_nodes.len() as i64);
        // the other way round, the difference changes sign
        let swapped = compute(&nodes, &pods, &p, &uv, &pv);
        prop_assert_eq!(swapped.difference.hourly, Money::ZERO - s.difference.hourly);
        prop_assert_eq!(swapped.difference.nodes, -s.difference.nodes);
    }
}
