//! Marked pods (`deletioncost.dev/prefer-for-scale-down`, or the proposal's
//! `kubernetes.io/prefer-for-scale-down`) go before every unmarked pod,
//! whatever the signals, foreign costs, `maxCost` ranks and node order say.

use std::collections::BTreeSet;

use super::*;
use crate::marker::{FirstAnyway, KEP_PREFER_FOR_SCALE_DOWN, PREFER_FOR_SCALE_DOWN};
use crate::plan::correction::ScaleInTarget;

/// `p` carrying the marker `label`.
fn marked(mut p: Pod, label: &str) -> Pod {
    p.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(label.into(), "true".into());
    p
}

/// A Ready pod of `web-abc` on `node`, with `annotations`.
fn with(name: &str, node: &str, annotations: &[(&str, &str)]) -> Pod {
    pod(P {
        name,
        node,
        rs: "web-abc",
        ready: true,
        created: "2026-11-20T00:00:00Z",
        annotations,
    })
}

fn by(k: usize) -> PlanOptions {
    PlanOptions {
        scale_down_by: Some(k),
        ..opts()
    }
}

fn victims(plan: &Plan) -> BTreeSet<String> {
    plan.replica_sets[0]
        .victims
        .iter()
        .map(|v| v.to_string())
        .collect()
}

fn names(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_marked_pod_on_dear_capacity_goes_before_spot_pods() {
    let snap = cluster(vec![
        marked(simple("od", "od-1"), PREFER_FOR_SCALE_DOWN),
        simple("spot-a", "spot-1"),
        simple("spot-b", "spot-2"),
        simple("od-b", "od-2"),
    ]);
    let plan = plan(
        &spot_first(),
        &snap,
        &Default::default(),
        &Default::default(),
        &by(1),
    );
    // the unmarked costs do not move: spot 0, on-demand 100
    assert_eq!(cost_of(&plan, "spot-a"), Some(0));
    assert_eq!(cost_of(&plan, "od-b"), Some(100));
    // the policy writes 0..=100: the marked pod's 100 moves 101 down
    assert_eq!(cost_of(&plan, "od"), Some(-1));
    assert_eq!(victims(&plan), names(&["od"]));
    assert_eq!(plan.replica_sets[0].verdict, Verdict::AsIntended);
    let od = plan.pods.iter().find(|p| &*p.name == "od").unwrap();
    assert_eq!(od.wanted_text(), "-1 (marked)");
    assert_eq!(
        od.marked.map(|m| m.to_string()).as_deref(),
        Some("marked (deletioncost.dev/prefer-for-scale-down)")
    );
}

#[test]
fn marked_pods_keep_the_policy_s_order_among_themselves() {
    let snap = cluster(vec![
        marked(simple("od", "od-1"), PREFER_FOR_SCALE_DOWN),
        marked(simple("spot", "spot-1"), KEP_PREFER_FOR_SCALE_DOWN),
        simple("spot-b", "spot-2"),
        simple("od-b", "od-2"),
    ]);
    let plan = plan(
        &spot_first(),
        &snap,
        &Default::default(),
        &Default::default(),
        &by(1),
    );
    // spot is the policy's first choice: among marked pods it still is
    assert_eq!(cost_of(&plan, "spot"), Some(-101));
    assert_eq!(cost_of(&plan, "od"), Some(-1));
    assert_eq!(victims(&plan), names(&["spot"]));
    let two = super::plan(
        &spot_first(),
        &snap,
        &Default::default(),
        &Default::default(),
        &by(2),
    );
    assert_eq!(victims(&two), names(&["spot", "od"]));
}

#[test]
fn a_foreign_cost_below_the_policy_s_range_does_not_go_first() {
    // spot-b carries a value someone else set, far below anything the
    // policy writes: the marked pod goes below it
    let snap = cluster(vec![
        marked(simple("od", "od-1"), PREFER_FOR_SCALE_DOWN),
        with("spot-b", "spot-2", &[(POD_DELETION_COST, "-1000")]),
        simple("od-b", "od-2"),
    ]);
    let plan = plan(
        &spot_first(),
        &snap,
        &Default::default(),
        &Default::default(),
        &by(1),
    );
    let spot_b = plan.pods.iter().find(|p| &*p.name == "spot-b").unwrap();
    assert_eq!(spot_b.action, CostAction::KeepForeign);
    assert_eq!(cost_of(&plan, "od"), Some(100 - (100 - (-1000) + 1)));
    assert_eq!(victims(&plan), names(&["od"]));
    // the order check agrees: nothing out of order
    assert_eq!(plan.replica_sets[0].verdict, Verdict::AsIntended);
}

#[test]
fn a_marked_pod_keeps_a_foreign_cost_and_the_plan_says_so() {
    let snap = cluster(vec![
        marked(
            with("od", "od-1", &[(POD_DELETION_COST, "500")]),
            PREFER_FOR_SCALE_DOWN,
        ),
        simple("spot-b", "spot-2"),
    ]);
    let plan = plan(
        &spot_first(),
        &snap,
        &Default::default(),
        &Default::default(),
        &by(1),
    );
    let od = plan.pods.iter().find(|p| &*p.name == "od").unwrap();
    assert_eq!(od.action, CostAction::KeepForeign);
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.contains("marked pod(s) keep a cost") && w.contains("od")),
        "{:?}",
        plan.warnings
    );
}

#[test]
fn max_cost_ranks_stay_in_range_and_marked_pods_go_below_them() {
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "maxCost": 1,
        "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}, "default": 50}}]
    }));
    let snap = cluster(vec![
        marked(simple("od", "od-1"), PREFER_FOR_SCALE_DOWN),
        simple("spot-a", "spot-1"),
        simple("od-b", "od-2"),
    ]);
    let plan = plan(&p, &snap, &Default::default(), &Default::default(), &by(1));
    assert_eq!(cost_of(&plan, "spot-a"), Some(0));
    assert_eq!(cost_of(&plan, "od-b"), Some(1));
    // rank 1, moved below 0..=1
    assert_eq!(cost_of(&plan, "od"), Some(-1));
    assert_eq!(victims(&plan), names(&["od"]));
}

#[test]
fn a_marked_pod_with_a_missing_signal_still_goes_first() {
    let p = util_policy("keepLastValue");
    let snap = cluster(vec![
        marked(simple("busy", "od-1"), PREFER_FOR_SCALE_DOWN),
        simple("idle", "od-2"),
    ]);
    // no sample for the marked pod; the idle one is the least utilised
    let s = samples(&[("idle", 0.0)]);
    let plan = plan(&p, &snap, &s, &Default::default(), &by(1));
    assert!(matches!(
        plan.pods.iter().find(|x| &*x.name == "busy").unwrap().action,
        CostAction::Patch(c) if c < 0
    ));
    assert_eq!(victims(&plan), names(&["busy"]));
}

#[test]
fn a_marker_on_a_pod_deleted_first_anyway_costs_no_write() {
    let not_ready = pod(P {
        name: "sick",
        node: "od-1",
        rs: "web-abc",
        ready: false,
        created: "2026-11-20T00:00:00Z",
        annotations: &[(POD_DELETION_COST, "100"), (POLICY_ANNOTATION, "web")],
    });
    let snap = cluster(vec![
        marked(not_ready, PREFER_FOR_SCALE_DOWN),
        with(
            "spot-b",
            "spot-2",
            &[(POD_DELETION_COST, "0"), (POLICY_ANNOTATION, "web")],
        ),
    ]);
    let plan = plan(
        &spot_first(),
        &snap,
        &Default::default(),
        &Default::default(),
        &by(1),
    );
    assert!(plan.patches.is_empty(), "{:?}", plan.patches);
    let sick = plan.pods.iter().find(|p| &*p.name == "sick").unwrap();
    assert_eq!(sick.action, CostAction::Unchanged);
    assert_eq!(
        sick.marked.and_then(|m| m.first_anyway),
        Some(FirstAnyway::NotReady)
    );
    assert_eq!(sick.wanted_text(), "100");
    assert_eq!(victims(&plan), names(&["sick"]));
}

#[test]
fn under_a_node_order_marking_one_pod_writes_that_pod_alone() {
    let p = policy(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "signals": [{"nodeConsolidation": {}}]
    }));
    let pods = |mark: bool| {
        let a1 = simple("a1", "od-1");
        vec![
            if mark {
                marked(a1, PREFER_FOR_SCALE_DOWN)
            } else {
                a1
            },
            simple("a2", "od-1"),
            simple("a3", "od-1"),
            simple("b1", "od-2"),
            simple("c1", "spot-1"),
            simple("c2", "spot-1"),
        ]
    };
    let mut snap = cluster(pods(false));
    let before = plan(&p, &snap, &Default::default(), &Default::default(), &by(1));
    apply(&mut snap, &before, "web");
    // a pod on the fullest node, which the node order keeps longest
    let mut marked_snap = cluster(pods(true));
    apply(&mut marked_snap, &before, "web");
    let after = plan(
        &p,
        &marked_snap,
        &Default::default(),
        &Default::default(),
        &by(1),
    );
    let written: Vec<&str> = after.patches.iter().map(|w| &*w.pod).collect();
    assert_eq!(written, ["a1"]);
    assert!(cost_of(&after, "a1").unwrap() < 0);
    assert_eq!(victims(&after), names(&["a1"]));
    // the node bands of the others do not move
    for name in ["a2", "a3", "b1", "c1", "c2"] {
        assert_eq!(cost_of(&after, name), cost_of(&before, name), "{name}");
    }
}

#[test]
fn the_scale_in_correction_lowers_exactly_the_marked_pods() {
    // costs as the background wrote them before the pods were marked
    let mut snap = cluster(vec![
        simple("od-a", "od-1"),
        simple("od-b", "od-2"),
        simple("spot-a", "spot-1"),
        simple("spot-b", "spot-2"),
        with("pinned", "spot-2", &[(POD_DELETION_COST, "-50")]),
    ]);
    let p = spot_first();
    let first = plan(&p, &snap, &Default::default(), &Default::default(), &by(2));
    apply(&mut snap, &first, "web");
    for pod in snap.pods.iter_mut().map(std::sync::Arc::make_mut) {
        if matches!(pod.identity.name.as_deref(), Some("od-a" | "od-b")) {
            let mut labels = pod.labels().cloned().unwrap_or_default();
            labels.insert(PREFER_FOR_SCALE_DOWN.into(), "true".into());
            pod.shared =
                crate::pod::SharedMeta::shared(Some(labels), pod.owner_references().cloned());
        }
    }
    let target = ScaleInTarget {
        replica_sets: ["web-abc".to_string()].into(),
        by: 2,
        in_flight: Default::default(),
    };
    let live = PlanOptions {
        assume_patches_applied: false,
        ..by(2)
    };
    let (_, corrections) = plan_scale_in(
        &p,
        &snap,
        &Default::default(),
        &Default::default(),
        &live,
        &BTreeSet::new(),
        &target,
    );
    let c = &corrections[0];
    let written: BTreeSet<String> = c.writes.iter().map(|w| w.pod.to_string()).collect();
    // the two marked pods, below the foreign -50 of their unmarked neighbour
    assert_eq!(written, names(&["od-a", "od-b"]));
    assert!(c.writes.iter().all(|w| w.cost < -50), "{:?}", c.writes);
    let after: BTreeSet<String> = c.after().iter().map(|p| p.to_string()).collect();
    assert_eq!(after, names(&["od-a", "od-b"]));
    assert_eq!(c.correction.unreachable, None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the billing classes, the foreign costs on unmarked pods and
    /// the pods marked, a scale-in by the number of marked pods takes
    /// exactly the marked pods, once the plan's writes landed.
    #[test]
    fn a_scale_in_by_the_marked_count_takes_the_marked_pods(
        pods in proptest::collection::vec(
            (0usize..4, proptest::option::of(-2000i32..2000), any::<bool>()),
            2..12,
        ),
        max_cost in proptest::option::of(1i32..4),
    ) {
        let nodes = ["spot-1", "spot-2", "od-1", "od-2"];
        let mut made = Vec::new();
        let mut want = BTreeSet::new();
        for (i, (node, foreign, mark)) in pods.iter().enumerate() {
            let name = format!("p{i:02}");
            let cost = foreign.map(|c| c.to_string());
            let annotations: Vec<(&str, &str)> = cost
                .as_deref()
                // a foreign value only on unmarked pods: the marker does
                // not move a marked pod's foreign value
                .filter(|_| !mark)
                .map(|c| vec![(POD_DELETION_COST, c)])
                .unwrap_or_default();
            let p = with(&name, nodes[*node], &annotations);
            if *mark {
                want.insert(name);
                made.push(marked(p, PREFER_FOR_SCALE_DOWN));
            } else {
                made.push(p);
            }
        }
        prop_assume!(!want.is_empty() && want.len() < made.len());
        let mut spec = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}, "default": 50}}]
        });
        if let Some(m) = max_cost {
            spec["maxCost"] = json!(m);
        }
        let policy = policy(spec);
        let snap = cluster(made);
        let plan = plan(&policy, &snap, &Default::default(), &Default::default(), &by(want.len()));
        prop_assert_eq!(victims(&plan), want);
        prop_assert_eq!(plan.replica_sets[0].tie_at_cut, false);
    }
}
