//! Issue 55, item 4: a signal that cannot tell the pods apart, and a
//! scale-down past a ReplicaSet's pods, are said instead of planned in
//! silence.

use super::*;

/// The plan's warnings that mention `needle`.
fn said<'p>(plan: &'p Plan, needle: &str) -> Vec<&'p str> {
    plan.warnings
        .iter()
        .map(String::as_str)
        .filter(|w| w.contains(needle))
        .collect()
}

#[test]
fn a_zone_label_no_node_carries_is_said() {
    let snap = cluster(vec![
        simple("a1", "spot-1"),
        simple("a2", "od-1"),
        simple("b1", "spot-2"),
    ]);
    let typo = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"zoneBalance": {"topologyKey": "topology.kubernetes.io/zones"}}]
    }));
    let p = plan(
        &typo,
        &snap,
        &Default::default(),
        &Default::default(),
        &opts(),
    );
    assert_eq!(
        said(&p, "zoneBalance"),
        [
            "spec.signals[0] (zoneBalance): no node of the selected pods carries the label \
          topology.kubernetes.io/zones (topologyKey), so every pod is in zone (none) and the \
          signal tells no pod apart; did you mean topology.kubernetes.io/zone?"
        ]
    );
    // far from any label: the well-known one is named
    let other = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"zoneBalance": {"topologyKey": "example.com/rack"}}]
    }));
    let p = plan(
        &other,
        &snap,
        &Default::default(),
        &Default::default(),
        &opts(),
    );
    assert!(
        said(&p, "zoneBalance")[0].ends_with("; the nodes carry topology.kubernetes.io/zone"),
        "{:?}",
        p.warnings
    );
    // the label on one node is enough to tell zones apart
    let right = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"zoneBalance": {}}]
    }));
    let p = plan(
        &right,
        &snap,
        &Default::default(),
        &Default::default(),
        &opts(),
    );
    assert_eq!(said(&p, "zoneBalance"), Vec::<&str>::new());
}

#[test]
fn consolidation_over_nodes_all_at_max_pods_is_said() {
    let snap = cluster(vec![
        simple("a1", "od-1"),
        simple("a2", "od-1"),
        simple("a3", "od-1"),
        simple("b1", "od-2"),
        simple("b2", "od-2"),
    ]);
    let capped = |max: u32| {
        policy(json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"nodeConsolidation": {"maxPods": max}}]
        }))
    };
    let p = plan(
        &capped(2),
        &snap,
        &Default::default(),
        &Default::default(),
        &opts(),
    );
    assert_eq!(
        said(&p, "nodeConsolidation"),
        [
            "spec.signals[0] (nodeConsolidation): each of the 2 nodes of the selected pods holds \
          maxPods (2) pods or more, so their counts tell no node apart: nodes are drained in the \
          order of their names' hashes, not the emptiest first; raise maxPods to 3 (the busiest \
          node's count) to tell them apart"
        ]
    );
    // room for the counts: the emptier node goes first, nothing to say
    let p = plan(
        &capped(3),
        &snap,
        &Default::default(),
        &Default::default(),
        &opts(),
    );
    assert_eq!(said(&p, "nodeConsolidation"), Vec::<&str>::new());
    assert_eq!(p.replica_sets[0].victims, vec![Arc::from("b1")]);
}

#[test]
fn a_scale_down_past_the_pods_is_said() {
    let snap = cluster(vec![simple("a", "od-1"), simple("b", "od-2")]);
    let by = |n: usize| PlanOptions {
        scale_down_by: Some(n),
        ..opts()
    };
    let p = plan(
        &spot_first(),
        &snap,
        &Default::default(),
        &Default::default(),
        &by(3),
    );
    assert_eq!(
        said(&p, "scale down by"),
        [
            "scale down by 3: ReplicaSet web-abc has 2 pod(s), fewer than that: it goes to 0, \
          every pod deleted"
        ]
    );
    assert_eq!(p.replica_sets[0].victims.len(), 2);
    // exactly the pods: what was asked, nothing to say
    let p = plan(
        &spot_first(),
        &snap,
        &Default::default(),
        &Default::default(),
        &by(2),
    );
    assert_eq!(said(&p, "scale down by"), Vec::<&str>::new());
}
