//! Consolidation as a node order, over workloads the way the scheduler
//! spreads them: equal or nearly equal counts per node.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::comparator::BURST_REPLICAS;
use crate::plan::node_order::wanted_slot;

/// A workload of one ReplicaSet spread over nodes `n-00`, `n-01`, ... with
/// `counts[i]` pods on node i; `node_labels(i)` labels node i. Pods are
/// created a second apart, all Ready, placed round-robin as a scheduler
/// spreading a Deployment places them (so creation time does not group
/// them by node).
fn spread(counts: &[usize], node_labels: impl Fn(usize) -> Vec<(String, String)>) -> Snapshot {
    let mut pods = Vec::new();
    let mut n = 0;
    let rounds = counts.iter().copied().max().unwrap_or(0);
    for round in 0..rounds {
        for (i, _) in counts.iter().enumerate().filter(|(_, &c)| c > round) {
            let created = Timestamp::from_second(1_795_000_000 + n as i64)
                .unwrap()
                .to_string();
            let name = format!("web-abc-{n:05}");
            pods.push(pod(P {
                name: &name,
                node: &node_name(i),
                rs: "web-abc",
                ready: true,
                created: &created,
                annotations: &[],
            }));
            n += 1;
        }
    }
    let mut snap = cluster(pods);
    snap.nodes = (0..counts.len())
        .map(|i| {
            let l = node_labels(i);
            let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            node(&node_name(i), &l)
        })
        .collect();
    snap
}

fn node_name(i: usize) -> String {
    format!("n-{i:02}")
}

fn no_labels(_: usize) -> Vec<(String, String)> {
    Vec::new()
}

fn by(k: usize) -> PlanOptions {
    PlanOptions {
        scale_down_by: Some(k),
        chunks: Chunks::default(),
        ..opts()
    }
}

fn consolidation_policy() -> NamedPolicy {
    policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"nodeConsolidation": {"maxPods": 50}}]
    }))
}

/// The victims of the plan's only ReplicaSet.
fn victims(plan: &Plan) -> BTreeSet<String> {
    plan.replica_sets[0]
        .victims
        .iter()
        .map(|v| v.to_string())
        .collect()
}

/// Pods per node once `gone` are deleted (nodes left empty omitted).
fn left_on_nodes(snap: &Snapshot, gone: &BTreeSet<String>) -> BTreeMap<String, usize> {
    let mut on = BTreeMap::new();
    for p in &snap.pods {
        if !gone.contains(p.identity.name.as_deref().unwrap_or("")) {
            *on.entry(node_of(p).to_string()).or_default() += 1;
        }
    }
    on
}

/// The fewest nodes that can keep `keep` pods when pods do not move: the
/// fullest nodes first.
fn fewest_nodes(counts: &[usize], keep: usize) -> usize {
    let mut c = counts.to_vec();
    c.sort_unstable_by(|a, b| b.cmp(a));
    let mut held = 0;
    c.iter()
        .take_while(|&&n| {
            let more = held < keep;
            held += n;
            more
        })
        .count()
}

/// The snapshot once `gone` are deleted (the controller's deletions) and
/// the plan's patches landed on the rest.
fn after(snap: &Snapshot, plan: &Plan, gone: &BTreeSet<String>) -> Snapshot {
    let mut next = snap.clone();
    apply(&mut next, plan, "web");
    next.pods
        .retain(|p| !gone.contains(p.identity.name.as_deref().unwrap_or("")));
    next
}

/// 38 to 42 pods a node, 1,000 in all, as kube-scheduler spreads a
/// Deployment over 25 equal nodes.
fn scheduler_like() -> Vec<usize> {
    (0..25).map(|i| 38 + i % 5).collect()
}

/// Karpenter's benchmark, 1000 -> 700 -> 20, offline: with the policy the
/// workload ends on the fewest nodes that can hold it after each step.
/// (Without one, on these counts, the default order's rule 5 happens to
/// take whole nodes too, the fullest ones; with equal counts it spreads:
/// [`equal_counts_are_where_a_count_alone_frees_nothing`].)
#[test]
fn karpenter_benchmark_ends_on_the_fewest_nodes() {
    let counts = scheduler_like();
    assert_eq!(counts.iter().sum::<usize>(), 1000);
    let snap = spread(&counts, no_labels);
    let p = consolidation_policy();
    let plan = |s: &Snapshot, k: usize, costs: bool| {
        let o = PlanOptions {
            assume_patches_applied: costs,
            ..by(k)
        };
        super::plan(&p, s, &Default::default(), &Default::default(), &o)
    };

    // 1000 -> 700
    let first = plan(&snap, 300, true);
    let gone = victims(&first);
    assert_eq!(gone.len(), 300);
    let on = left_on_nodes(&snap, &gone);
    assert_eq!(on.len(), fewest_nodes(&counts, 700), "{on:?}");
    // without costs the default order takes the busiest nodes first (rule
    // 5): whole nodes here, but the fullest ones
    let default_first = plan(&snap, 300, false);
    let default_gone = victims(&default_first);
    assert!(left_on_nodes(&snap, &default_gone).len() >= on.len());

    // 700 -> 20: two syncs (500, then 180) with the costs as they now are
    let next = after(&snap, &first, &gone);
    let counts_next: Vec<usize> = on.values().copied().collect();
    let second = plan(&next, 680, true);
    let gone_next = victims(&second);
    assert_eq!(gone_next.len(), 680);
    let on_next = left_on_nodes(&next, &gone_next);
    assert_eq!(on_next.len(), fewest_nodes(&counts_next, 20), "{on_next:?}");
    assert_eq!(on_next.len(), 1);
}

/// Equal counts, the scheduler's ideal spread: the default order spreads
/// the victims over every node (its rules after the cost see no
/// difference), the policy empties whole nodes.
#[test]
fn equal_counts_are_where_a_count_alone_frees_nothing() {
    let counts = [40; 25];
    let snap = spread(&counts, no_labels);
    let p = consolidation_policy();
    let o = |costs| PlanOptions {
        assume_patches_applied: costs,
        ..by(300)
    };
    let with = super::plan(
        &p,
        &snap,
        &Default::default(),
        &Default::default(),
        &o(true),
    );
    let without = super::plan(
        &p,
        &snap,
        &Default::default(),
        &Default::default(),
        &o(false),
    );
    assert_eq!(left_on_nodes(&snap, &victims(&with)).len(), 18);
    assert_eq!(left_on_nodes(&snap, &victims(&without)).len(), 25);
}

/// Without costs, a scale-in past one sync is two rankings: the first
/// takes the busiest nodes' pods until a node is nearly empty, and the
/// second, with the colocation counts the first left, ranks that node's
/// last pods after every other: one ranking of all the victims would have
/// emptied it.
#[test]
fn the_default_order_past_one_sync_ranks_twice() {
    let counts = [260, 250, 240];
    let snap = spread(&counts, no_labels);
    let p = consolidation_policy();
    let o = PlanOptions {
        assume_patches_applied: false,
        ..by(520)
    };
    const { assert!(520 > BURST_REPLICAS) };
    let plan = super::plan(&p, &snap, &Default::default(), &Default::default(), &o);
    let rs = &plan.replica_sets[0];
    // one ranking: 260 + 250, then 10 of the third node
    let one: BTreeSet<String> = rs.predicted[..520].iter().map(|v| v.to_string()).collect();
    assert_eq!(left_on_nodes(&snap, &one).len(), 1);
    // two syncs: 260 + 240 of n-01, then 20 from n-02, which ranks higher
    // than n-01's last 10
    let two = victims(&plan);
    assert_eq!(two.len(), 520);
    let left = left_on_nodes(&snap, &two);
    assert_eq!(left.get("n-01"), Some(&10), "{left:?}");
    assert_eq!(left.get("n-02"), Some(&220), "{left:?}");
}

/// Billing class first, then consolidation: whole nodes of the dearer
/// class go first, fewest pods first within it.
#[test]
fn the_dearer_class_loses_whole_nodes_first() {
    let counts = [10, 12, 8, 10, 11, 9];
    let snap = spread(&counts, |i| {
        let class = if i % 2 == 0 { "on-demand" } else { "spot" };
        vec![("karpenter.sh/capacity-type".into(), class.into())]
    });
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [
            {"billingClass": {"costs": {"on-demand": 0, "spot": 1}}},
            {"nodeConsolidation": {"maxPods": 50}}
        ]
    }));
    let plan = super::plan(&p, &snap, &Default::default(), &Default::default(), &by(20));
    let on = left_on_nodes(&snap, &victims(&plan));
    // on-demand nodes n-00 (10), n-02 (8), n-04 (11): 8 + 10 whole, 2 of n-04
    assert!(
        !on.contains_key("n-00") && !on.contains_key("n-02"),
        "{on:?}"
    );
    assert_eq!(on["n-04"], 9);
    assert_eq!(on.len(), 4);
}

/// Zones and consolidation: whole nodes go, from the fullest zone first,
/// and the zones' counts stay within `maxSkew` plus one node's pods.
#[test]
fn zones_stay_within_their_skew_while_whole_nodes_go() {
    // zone a: 6 nodes of 10; zone b: 4 nodes of 10
    let counts = [10; 10];
    let snap = spread(&counts, |i| {
        let zone = if i < 6 { "a" } else { "b" };
        vec![("topology.kubernetes.io/zone".into(), zone.into())]
    });
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [
            {"zoneBalance": {"maxSkew": 10}},
            {"nodeConsolidation": {"maxPods": 50}}
        ]
    }));
    for k in [10, 20, 30, 45, 60] {
        let plan = super::plan(&p, &snap, &Default::default(), &Default::default(), &by(k));
        let on = left_on_nodes(&snap, &victims(&plan));
        let zone = |n: &str| if n < "n-06" { "a" } else { "b" };
        let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
        for (n, c) in &on {
            *per_zone.entry(zone(n)).or_default() += c;
        }
        let a = per_zone.get("a").copied().unwrap_or(0) as i64;
        let b = per_zone.get("b").copied().unwrap_or(0) as i64;
        // at most one node partly drained
        let partial = on.values().filter(|&&c| c != 10).count();
        assert!(partial <= 1, "by {k}: {on:?}");
        if k >= 20 {
            assert!((a - b).abs() <= 10 + 10, "by {k}: a {a}, b {b}");
        }
    }
}

/// Zones and consolidation after a scale-in: the nodes it did not touch
/// keep their costs (zone values count from `maxPerZone`, not from the
/// fullest zone, which shrank), so only the node it left half drained is
/// written again.
#[test]
fn zones_and_nodes_after_a_scale_in_rewrite_only_the_node_it_touched() {
    let counts = [20, 20, 20, 20, 20, 20, 20, 20];
    let snap = spread(&counts, |i| {
        let zone = if i < 5 { "a" } else { "b" };
        vec![("topology.kubernetes.io/zone".into(), zone.into())]
    });
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [
            {"zoneBalance": {"maxSkew": 20}},
            {"nodeConsolidation": {"maxPods": 50}}
        ]
    }));
    let first = super::plan(&p, &snap, &Default::default(), &Default::default(), &by(50));
    let gone = victims(&first);
    let before = left_on_nodes(&snap, &BTreeSet::new());
    let next = after(&snap, &first, &gone);
    let again = super::plan(&p, &next, &Default::default(), &Default::default(), &by(1));
    let on = left_on_nodes(&next, &BTreeSet::new());
    let node_of_pod: BTreeMap<&str, &str> =
        again.pods.iter().map(|x| (&*x.name, &*x.node)).collect();
    for patch in &again.patches {
        let node = node_of_pod[&*patch.pod];
        assert_ne!(
            on.get(node),
            before.get(node).copied().as_ref(),
            "{node} unchanged but written"
        );
    }
    // 50 pods: two whole nodes and half of a third
    assert_eq!(on.len(), 6, "{on:?}");
}

/// A policy whose other signals leave int32 room for few node slots: a
/// count with more nodes than slots is said (plan warning, and the field
/// the status repeats), the costs stay in int32 and in count order.
#[test]
fn more_nodes_of_one_count_than_slots_is_said_not_wrapped() {
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [
            {"billingClass": {"costs": {"spot": 0, "on-demand": 2000000}}},
            {"nodeConsolidation": {"maxPods": 110}}
        ]
    }));
    let ValidatedSignal::NodeConsolidation(c) = &p.spec.signals[1] else {
        unreachable!()
    };
    // 2^31 / (2,000,001 * 112 bands)
    assert_eq!(c.node_slots, 9);
    let mut counts = vec![3; 12];
    counts.push(2);
    let snap = spread(&counts, no_labels);
    let plan = super::plan(&p, &snap, &Default::default(), &Default::default(), &by(2));
    let said = plan.crowded_node_order.clone().unwrap_or_default();
    assert!(said.contains("12 nodes holding 3 pod(s)"), "{said}");
    assert!(said.contains("room for 9 node(s)"), "{said}");
    assert!(plan.warnings.contains(&said));
    // the node of 2 pods still goes first, and every cost fits
    assert!(victims(&plan).iter().all(|v| {
        plan.pods
            .iter()
            .any(|x| &*x.name == v && &*x.node == "n-12")
    }));
    assert!(plan.pods.iter().all(|x| x.desired.is_some()));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// On an evenly spread workload a scale-in by k empties k / c whole
    /// nodes of c pods and leaves at most one node partly drained, with
    /// every node at its own cost.
    #[test]
    fn an_even_spread_loses_whole_nodes(nodes in 2usize..20, c in 1usize..40, cut in 0.0f64..1.0) {
        let counts = vec![c; nodes];
        let k = ((nodes * c) as f64 * cut) as usize;
        let snap = spread(&counts, no_labels);
        let p = consolidation_policy();
        let plan = super::plan(&p, &snap, &Default::default(), &Default::default(), &by(k));
        let on = left_on_nodes(&snap, &victims(&plan));
        prop_assert_eq!(nodes - on.len(), k / c);
        prop_assert!(on.values().filter(|&&n| n != c).count() <= 1, "{:?}", on);
        let per_node: BTreeMap<&str, BTreeSet<i32>> = plan.pods.iter().fold(
            BTreeMap::new(),
            |mut m, pod| {
                m.entry(&*pod.node).or_insert_with(BTreeSet::new).extend(pod.desired);
                m
            },
        );
        let costs: BTreeSet<i32> = per_node.values().flatten().copied().collect();
        prop_assert!(per_node.values().all(|c| c.len() == 1));
        prop_assert_eq!(costs.len(), nodes, "no two nodes share a cost");
    }

    /// Once the costs landed, a pod more or less on one node rewrites that
    /// node's pods only.
    #[test]
    fn one_nodes_change_rewrites_its_pods_only(
        counts in proptest::collection::vec(1usize..12, 2..25),
        which in any::<proptest::sample::Index>(),
        more in any::<bool>(),
    ) {
        // these node names want distinct slots, so no collision links them
        let slots: BTreeSet<u32> = (0..counts.len()).map(|i| wanted_slot(&node_name(i), 4096)).collect();
        prop_assert_eq!(slots.len(), counts.len());
        let p = consolidation_policy();
        let snap = spread(&counts, no_labels);
        let first = super::plan(&p, &snap, &Default::default(), &Default::default(), &by(1));
        let mut landed = snap.clone();
        apply(&mut landed, &first, "web");
        let settled = super::plan(&p, &landed, &Default::default(), &Default::default(), &by(1));
        prop_assert!(settled.patches.is_empty());

        let m = which.index(counts.len());
        let on_m = node_name(m);
        if more {
            let mut extra = simple("web-abc-extra", &on_m);
            extra.metadata.uid = Some("uid-extra".into());
            landed.pods.push(std::sync::Arc::new(PodRecord::from(extra)));
        } else {
            let i = landed.pods.iter().position(|p| node_of(p) == on_m).unwrap();
            landed.pods.remove(i);
        }
        let changed = super::plan(&p, &landed, &Default::default(), &Default::default(), &by(1));
        let node_of_pod: BTreeMap<&str, &str> =
            changed.pods.iter().map(|p| (&*p.name, &*p.node)).collect();
        for patch in &changed.patches {
            prop_assert_eq!(node_of_pod[&*patch.pod], on_m.as_str());
        }
    }

    /// With every signal wide (as wide as still validates: 201 * 1501 * 302
    /// * 20 values fit int32 with one node slot), the written costs stay inside int32
    /// and inside the policy's range, and nodes of one band still differ.
    #[test]
    fn costs_fit_int32_with_every_signal(
        max_pods in 1u32..300,
        buckets in 1u32..20,
        max_per_zone in 1u32..1500,
        spread_cost in 0i32..200,
    ) {
        let p = policy(json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [
                {"billingClass": {"costs": {"spot": 0, "on-demand": spread_cost}}},
                {"zoneBalance": {"maxPerZone": max_per_zone}},
                {"nodeConsolidation": {"maxPods": max_pods}},
                {"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "buckets": buckets}}
            ]
        }));
        let (lo, hi) = p.spec.combined_range();
        prop_assert!(lo >= 0 && hi <= i64::from(i32::MAX));
        let ValidatedSignal::NodeConsolidation(c) = &p.spec.signals[2] else { unreachable!() };
        prop_assert!(c.node_slots >= 1);
        let snap = spread(&[3, 3, 3], no_labels);
        let plan = super::plan(&p, &snap, &Default::default(), &Default::default(), &by(1));
        for pod in &plan.pods {
            let v = pod.signals[2].value.unwrap_or(-1);
            let (vlo, vhi) = p.spec.signals[2].value_range();
            prop_assert!((vlo..=vhi).contains(&v));
        }
        if c.node_slots >= 3 {
            let values: BTreeSet<i64> = plan.pods.iter().filter_map(|x| x.signals[2].value).collect();
            prop_assert_eq!(values.len(), 3);
        }
    }
}
