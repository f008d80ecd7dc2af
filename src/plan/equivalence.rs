//! The optimised planner must give exactly the plans of the reference
//! implementation (the planner as first written) on generated clusters.

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;

use foldhash::HashMap;

use super::cost::decimal;
use super::*;
use crate::comparator::{parse_deletion_cost, POD_DELETION_COST};
use crate::policy::DeletionCostPolicySpec;
use crate::signals::UtilizationSamples;

#[path = "../../tests/golden/cluster.rs"]
mod cluster;

#[allow(dead_code)]
#[path = "../../tests/golden/cases.rs"]
mod cases;

/// The golden plans (`tests/golden/plans`, written by the optimised planner
/// with the production chunk sizes) are the reference planner's plans, and
/// this build's with the tests' small chunks.
#[test]
fn the_golden_plans_are_the_reference_planner_s() {
    for name in cases::CLUSTERS {
        let path = format!(
            "{}/tests/golden/plans/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let golden: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let g = cases::build(name);
        let start = std::time::Instant::now();
        let by_reference = cases::render(&g, &reference::plan_excluding);
        let reference_time = start.elapsed();
        assert!(
            by_reference == golden,
            "{name}: the reference planner disagrees with {path}"
        );
        let by_optimised = cases::render(&g, &plan_excluding);
        assert!(
            by_optimised == golden,
            "{name}: small chunks disagree with {path}"
        );
        println!(
            "{name}: {} plans of the golden file agree with the reference planner ({:.1?}) and the small-chunk build",
            golden["plans"].as_array().unwrap().len(),
            reference_time
        );
    }
}

fn snapshot(c: &cluster::Cluster) -> Snapshot {
    Snapshot {
        pods: c.pods.clone(),
        nodes: c.nodes.clone(),
        replica_sets: c.replica_sets.clone(),
        deployments: vec![],
        ignored: vec![],
    }
}

fn samples(c: &cluster::Cluster) -> SignalSamples {
    let mut s = SignalSamples::default();
    s.utilization.insert(
        1,
        UtilizationSamples::from_series(
            c.utilization.iter().map(|(n, v)| (n.clone(), *v, None)),
            None,
            None,
        ),
    );
    s
}

fn resolve(yaml: &str) -> ResolvedPolicy {
    let spec: DeletionCostPolicySpec = serde_saphyr::from_str(yaml).unwrap();
    ResolvedPolicy::resolve(cluster::POLICY, cluster::NAMESPACE, &spec).unwrap()
}

/// The bench policy with `lexicographic` and `sum`, a selector variant that
/// also selects pods without a ReplicaSet and of another Deployment, and
/// one without the consolidation signal (nodes then go uncounted).
fn policies(pods: usize) -> Vec<ResolvedPolicy> {
    let budget = pods / 3;
    let all = cluster::policy_yaml("lexicographic", budget);
    let by_selector = all.replace(
        "targetRef: {kind: Deployment, name: web}",
        "selector: {matchLabels: {team: platform}}",
    );
    let without_consolidation = all.replace("- nodeConsolidation: {maxPods: 110}\n", "");
    assert_ne!(without_consolidation, all, "the bench policy changed shape");
    // maxCost: ranks that fit, and ranks scaled down with ties added
    let ranked = format!("{all}maxCost: 1000000\n");
    let squeezed = format!("{}maxCost: 7\n", cluster::policy_yaml("sum", budget));
    vec![
        resolve(&all),
        resolve(&cluster::policy_yaml("sum", budget)),
        resolve(&by_selector),
        resolve(&without_consolidation),
        resolve(&ranked),
        resolve(&squeezed),
    ]
}

fn options(assume: bool, scale_down_by: Option<usize>) -> PlanOptions {
    PlanOptions {
        gates: FeatureGates::default(),
        now: Some(
            Timestamp::from_second(cluster::NOW_SECS)
                .unwrap()
                .as_nanosecond(),
        ),
        scale_down_by,
        assume_patches_applied: assume,
    }
}

/// Where two plans first differ, for a readable failure.
fn first_difference(new: &Plan, reference: &Plan) -> String {
    let (a, b) = (
        serde_json::to_value(new).unwrap(),
        serde_json::to_value(reference).unwrap(),
    );
    for key in ["pods", "patches", "replicaSets", "inactive", "warnings"] {
        let (x, y) = (&a[key], &b[key]);
        if x != y {
            let (xs, ys) = (x.as_array().unwrap(), y.as_array().unwrap());
            if xs.len() != ys.len() {
                return format!("{key}: {} vs {} entries", xs.len(), ys.len());
            }
            let i = (0..xs.len()).find(|&i| xs[i] != ys[i]).unwrap();
            return format!("{key}[{i}]:\n new: {}\n ref: {}", xs[i], ys[i]);
        }
    }
    if new.values != reference.values {
        return "hysteresis values differ".into();
    }
    "policy name differs".into()
}

/// Plans with both implementations, twice (the second time after the first
/// plan's patches landed, with its values for hysteresis), and compares.
fn assert_same(
    p: &ResolvedPolicy,
    snap: &Snapshot,
    s: &SignalSamples,
    opts: &PlanOptions,
    excluded: &BTreeSet<String>,
) {
    let none = PreviousValues::new();
    let new = plan_excluding(p, snap, s, &none, opts, excluded);
    let reference = reference::plan_excluding(p, snap, s, &none, opts, excluded);
    assert!(new == reference, "{}", first_difference(&new, &reference));

    let mut landed = snap.clone();
    let by_name: HashMap<&str, i32> = new.patches.iter().map(|x| (&*x.pod, x.cost)).collect();
    for pod in landed
        .pods
        .iter_mut()
        .filter(|x| x.metadata.namespace.as_deref() == Some(p.namespace.as_str()))
    {
        if let Some(c) = pod.metadata.name.as_deref().and_then(|n| by_name.get(n)) {
            let a = pod
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            a.insert(POD_DELETION_COST.into(), c.to_string());
            a.insert(POLICY_ANNOTATION.into(), p.name.clone());
        }
    }
    let again = plan_excluding(p, &landed, s, &new.values, opts, excluded);
    let again_ref = reference::plan_excluding(p, &landed, s, &new.values, opts, excluded);
    assert!(
        again == again_ref,
        "{}",
        first_difference(&again, &again_ref)
    );
}

#[test]
fn optimised_planner_matches_the_reference_on_a_2000_pod_cluster() {
    let c = cluster::generate(2000, 7);
    let s = samples(&c);
    let mut snap = snapshot(&c);
    let none = BTreeSet::new();
    for p in policies(2000) {
        for (assume, cut) in [(true, Some(5)), (false, None), (true, Some(100_000))] {
            assert_same(&p, &snap, &s, &options(assume, cut), &none);
        }
    }
    // a few pods won by another policy, a ReplicaSet and a node gone from the snapshot
    let excluded: BTreeSet<String> = c
        .pods
        .iter()
        .step_by(97)
        .filter_map(|x| x.metadata.name.clone())
        .collect();
    snap.replica_sets
        .retain(|r| r.metadata.name.as_deref() != Some("worker-6b8c9d7f4"));
    snap.nodes.truncate(snap.nodes.len() - 3);
    let gates_off = PlanOptions {
        gates: FeatureGates {
            pod_deletion_cost: false,
            ..FeatureGates::default()
        },
        ..options(true, Some(3))
    };
    for p in policies(2000) {
        assert_same(&p, &snap, &s, &options(false, Some(7)), &excluded);
        assert_same(&p, &snap, &s, &gates_off, &BTreeSet::new());
    }
}

#[test]
fn pods_sharing_a_uid_count_once_as_upstream_lists_them() {
    // In a file two pods can share a UID (or both lack one): upstream keeps
    // the first it meets sibling ReplicaSet by sibling ReplicaSet, so which
    // pod's node counts depends on the siblings' order, not the pods'.
    for n in [300, 2000] {
        let c = cluster::generate(n, 11);
        let mut snap = snapshot(&c);
        let web = |rs: &str| -> Vec<usize> {
            snap.pods
                .iter()
                .enumerate()
                .filter(|(_, p)| pod_rs(p).is_some_and(|r| r.name == rs))
                .map(|(i, _)| i)
                .collect()
        };
        let rs_names: Vec<String> = snap
            .replica_sets
            .iter()
            .filter(|r| r.metadata.namespace.as_deref() == Some(cluster::NAMESPACE))
            .filter_map(|r| r.metadata.name.clone())
            .filter(|r| r.starts_with("web-"))
            .collect();
        assert_eq!(rs_names.len(), 2, "the cluster has two web ReplicaSets");
        let (first, second) = (web(&rs_names[0]), web(&rs_names[1]));
        // pairs on different nodes share a UID; in half of them the pod of
        // the second sibling comes first in the namespace
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
            let uid = snap.pods[a].metadata.uid.clone();
            snap.pods[b].metadata.uid = uid;
        }
        snap.pods[first[10]].metadata.uid = None;
        snap.pods[second[10]].metadata.uid = None;
        let s = samples(&c);
        for p in policies(n) {
            assert_same(&p, &snap, &s, &options(true, Some(5)), &BTreeSet::new());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// The planner keys a patched pod with the cost it writes, unparsed: this
    /// holds only if upstream parses our decimal back to the same value.
    #[test]
    fn written_costs_parse_back_unchanged(c in any::<i32>()) {
        prop_assert_eq!(
            parse_deletion_cost(&c.to_string()),
            crate::comparator::ParsedCost { value: c, problem: None }
        );
        let mut buf = String::from("stale");
        prop_assert_eq!(decimal(&mut buf, c), c.to_string());
    }

    #[test]
    fn optimised_planner_matches_the_reference_on_small_clusters(
        n in 1usize..300,
        seed in any::<u64>(),
        which in 0usize..6,
        assume in any::<bool>(),
        cut in prop::option::of(0usize..50),
    ) {
        let c = cluster::generate(n, seed);
        let p = policies(n).swap_remove(which);
        assert_same(&p, &snapshot(&c), &samples(&c), &options(assume, cut), &BTreeSet::new());
    }
}
