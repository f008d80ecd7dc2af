//! Upstream's tests, ported case for case:
//! `pkg/controller/controller_utils_test.go` `TestSortingActivePodsWithRanks`
//! and `pkg/controller/replicaset/replica_set_test.go` `TestGetPodsToDelete`.
//! Pods are built as the Go helpers build them; outcomes are upstream's.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::key::go_time;
use super::{order_pods, Comparator, FeatureGates, RankKey};
use crate::annotations::POD_DELETION_COST;

// ---------------------------------------------------------------------------
// TestSortingActivePodsWithRanks
// ---------------------------------------------------------------------------

/// Go's `metav1.Now()` carries nanoseconds; so does this fixed `now`.
fn now() -> Timestamp {
    "2025-03-10T12:34:56.789123456Z".parse().unwrap()
}

fn hours_ago(h: i64) -> Option<Timestamp> {
    Some(now().checked_sub(SignedDuration::from_hours(h)).unwrap())
}

/// `now.AddDate(0, -1, 0)`.
fn one_month_ago() -> Option<Timestamp> {
    Some("2025-02-10T12:34:56.789123456Z".parse().unwrap())
}

/// Go's `metav1.Time{}`: absent in the API object.
const ZERO: Option<Timestamp> = None;

/// The Go test's `pod(...)` helper. Not-ready pods get no container statuses,
/// exactly as in Go, so their restart counts are 0.
#[allow(clippy::too_many_arguments)]
fn pod(
    name: &str,
    node: &str,
    phase: &str,
    ready: bool,
    restarts: i32,
    side_restarts: i32,
    ready_since: Option<Timestamp>,
    created: Option<Timestamp>,
    annotations: Option<BTreeMap<String, String>>,
) -> Pod {
    let (conditions, statuses, init_statuses) = if ready {
        (
            Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: ready_since.map(Time),
                ..Default::default()
            }]),
            Some(vec![ContainerStatus {
                restart_count: restarts,
                ..Default::default()
            }]),
            Some(vec![ContainerStatus {
                name: "sidecar".into(),
                restart_count: side_restarts,
                ..Default::default()
            }]),
        )
    } else {
        (None, None, None)
    };
    Pod {
        metadata: ObjectMeta {
            creation_timestamp: created.map(Time),
            name: Some(name.into()),
            annotations,
            ..Default::default()
        },
        spec: Some(PodSpec {
            // Go's NodeName is a plain string: "" for unscheduled
            node_name: Some(node.into()),
            init_containers: Some(vec![Container {
                name: "sidecar".into(),
                restart_policy: Some("Always".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: Some(PodStatus {
            conditions,
            container_statuses: statuses,
            init_container_statuses: init_statuses,
            phase: Some(phase.into()),
            ..Default::default()
        }),
    }
}

fn cost(v: &str) -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([(
        POD_DELETION_COST.to_string(),
        v.to_string(),
    )]))
}

/// The named pods of the Go test.
struct Fixture {
    unscheduled_pod: Pod,
    scheduled_pending_pod: Pod,
    unknown_phase_pod: Pod,
    running_not_ready_pod: Pod,
    running_ready_no_last_transition_time_pod: Pod,
    running_ready_now: Pod,
    running_ready_then: Pod,
    running_ready_now_high_restarts: Pod,
    running_ready_now_high_side_restarts: Pod,
    running_ready_now_created_then: Pod,
    low_pod_deletion_cost: Pod,
    high_pod_deletion_cost: Pod,
    unscheduled_5_hours: Pod,
    unscheduled_8_hours: Pod,
    ready_2_hours: Pod,
    ready_5_hours: Pod,
    ready_10_hours: Pod,
}

fn fixture() -> Fixture {
    let n = Some(now());
    let m = one_month_ago();
    Fixture {
        unscheduled_pod: pod("unscheduled", "", "Pending", false, 0, 0, ZERO, ZERO, None),
        scheduled_pending_pod: pod("pending", "node", "Pending", false, 0, 0, ZERO, ZERO, None),
        unknown_phase_pod: pod(
            "unknown-phase",
            "node",
            "Unknown",
            false,
            0,
            0,
            ZERO,
            ZERO,
            None,
        ),
        running_not_ready_pod: pod(
            "not-ready",
            "node",
            "Running",
            false,
            0,
            0,
            ZERO,
            ZERO,
            None,
        ),
        running_ready_no_last_transition_time_pod: pod(
            "ready-no-last-transition-time",
            "node",
            "Running",
            true,
            0,
            0,
            ZERO,
            ZERO,
            None,
        ),
        running_ready_now: pod("ready-now", "node", "Running", true, 0, 0, n, n, None),
        running_ready_then: pod("ready-then", "node", "Running", true, 0, 0, m, m, None),
        running_ready_now_high_restarts: pod(
            "ready-high-restarts",
            "node",
            "Running",
            true,
            9001,
            0,
            n,
            n,
            None,
        ),
        running_ready_now_high_side_restarts: pod(
            "ready-high-restarts",
            "node",
            "Running",
            true,
            9001,
            9001,
            n,
            n,
            None,
        ),
        running_ready_now_created_then: pod(
            "ready-now-created-then",
            "node",
            "Running",
            true,
            0,
            0,
            n,
            m,
            None,
        ),
        low_pod_deletion_cost: pod(
            "low-deletion-cost",
            "node",
            "Running",
            true,
            0,
            0,
            n,
            m,
            cost("10"),
        ),
        high_pod_deletion_cost: pod(
            "high-deletion-cost",
            "node",
            "Running",
            true,
            0,
            0,
            n,
            m,
            cost("100"),
        ),
        unscheduled_5_hours: pod(
            "unscheduled-5-hours",
            "",
            "Pending",
            false,
            0,
            0,
            hours_ago(5),
            hours_ago(5),
            None,
        ),
        unscheduled_8_hours: pod(
            "unscheduled-10-hours",
            "",
            "Pending",
            false,
            0,
            0,
            hours_ago(8),
            hours_ago(8),
            None,
        ),
        ready_2_hours: pod(
            "ready-2-hours",
            "",
            "Running",
            true,
            0,
            0,
            hours_ago(2),
            m,
            None,
        ),
        ready_5_hours: pod(
            "ready-5-hours",
            "",
            "Running",
            true,
            0,
            0,
            hours_ago(5),
            m,
            None,
        ),
        ready_10_hours: pod(
            "ready-10-hours",
            "",
            "Running",
            true,
            0,
            0,
            hours_ago(8),
            m,
            None,
        ),
    }
}

fn comparator(gates: FeatureGates) -> Comparator {
    Comparator {
        gates,
        now: go_time(Some(&Time(now()))),
    }
}

/// `ActivePodsWithRanks{Pods: {p1, p2}, Rank: {r1, r2}, Now: now}`.
fn keys<'a>(
    cmp: &Comparator,
    p1: (&'a Pod, i64),
    p2: (&'a Pod, i64),
) -> (RankKey<'a>, RankKey<'a>) {
    let key = |(p, rank): (&'a Pod, i64)| -> RankKey<'a> {
        let mut k = RankKey::from_pod(p).with_now(cmp.now);
        k.rank = rank;
        k
    };
    (key(p1), key(p2))
}

fn equality_tests(f: &Fixture) -> Vec<(&Pod, Option<&Pod>)> {
    vec![
        (&f.unscheduled_pod, None),
        (&f.scheduled_pending_pod, None),
        (&f.unknown_phase_pod, None),
        (&f.running_not_ready_pod, None),
        (&f.running_ready_now_created_then, None),
        (&f.running_ready_now, None),
        (&f.running_ready_then, None),
        (&f.running_ready_now_high_restarts, None),
        (&f.running_ready_now_created_then, None),
        (&f.unscheduled_5_hours, Some(&f.unscheduled_8_hours)),
        (&f.ready_5_hours, Some(&f.ready_10_hours)),
    ]
}

#[test]
fn sorting_active_pods_with_ranks_equality() {
    let f = fixture();
    let cmp = comparator(FeatureGates::default());
    for (i, (p1, p2)) in equality_tests(&f).into_iter().enumerate() {
        let p2 = p2.unwrap_or(p1);
        let (a, b) = keys(&cmp, (p1, 1), (p2, 1));
        assert!(
            !cmp.less(&a, &b) && !cmp.less(&b, &a),
            "Equality tests {i}: expected pod {:?} to be equivalent to {:?}",
            a.name,
            b.name
        );
    }
}

/// (lesser, greater, disablePodDeletioncost)
type Inequality<'a> = ((&'a Pod, i64), (&'a Pod, i64), bool);

fn inequality_tests(f: &Fixture) -> Vec<Inequality<'_>> {
    vec![
        (
            (&f.unscheduled_pod, 1),
            (&f.scheduled_pending_pod, 2),
            false,
        ),
        (
            (&f.unscheduled_pod, 2),
            (&f.scheduled_pending_pod, 1),
            false,
        ),
        (
            (&f.scheduled_pending_pod, 1),
            (&f.unknown_phase_pod, 2),
            false,
        ),
        (
            (&f.unknown_phase_pod, 1),
            (&f.running_not_ready_pod, 2),
            false,
        ),
        (
            (&f.running_not_ready_pod, 1),
            (&f.running_ready_no_last_transition_time_pod, 1),
            false,
        ),
        (
            (&f.running_ready_no_last_transition_time_pod, 1),
            (&f.running_ready_now, 1),
            false,
        ),
        (
            (&f.running_ready_now, 2),
            (&f.running_ready_no_last_transition_time_pod, 1),
            false,
        ),
        ((&f.running_ready_now, 1), (&f.running_ready_then, 1), false),
        ((&f.running_ready_now, 2), (&f.running_ready_then, 1), false),
        (
            (&f.running_ready_now_high_restarts, 1),
            (&f.running_ready_now, 1),
            false,
        ),
        (
            (&f.running_ready_now_high_side_restarts, 1),
            (&f.running_ready_now_high_restarts, 1),
            false,
        ),
        (
            (&f.running_ready_now, 2),
            (&f.running_ready_now_high_restarts, 1),
            false,
        ),
        (
            (&f.running_ready_now, 1),
            (&f.running_ready_now_created_then, 1),
            false,
        ),
        (
            (&f.running_ready_now_created_then, 2),
            (&f.running_ready_now, 1),
            false,
        ),
        (
            (&f.low_pod_deletion_cost, 2),
            (&f.high_pod_deletion_cost, 1),
            false,
        ),
        (
            (&f.high_pod_deletion_cost, 2),
            (&f.low_pod_deletion_cost, 1),
            true,
        ),
        ((&f.ready_2_hours, 1), (&f.ready_5_hours, 1), false),
    ]
}

#[test]
fn sorting_active_pods_with_ranks_inequality() {
    let f = fixture();
    let cases = inequality_tests(&f);
    assert_eq!(cases.len(), 17, "every upstream case");
    for (i, (lesser, greater, disable_cost)) in cases.into_iter().enumerate() {
        let cmp = comparator(FeatureGates {
            pod_deletion_cost: !disable_cost,
            logarithmic_scale_down: true,
        });
        let (a, b) = keys(&cmp, lesser, greater);
        assert!(
            cmp.less(&a, &b),
            "Inequality tests {i}: expected pod {:?} with rank {} to be less than {:?} with rank {}",
            a.name,
            a.rank,
            b.name,
            b.rank
        );
        assert!(
            !cmp.less(&b, &a),
            "Inequality tests {i}: expected pod {:?} with rank {} not to be less than {:?} with rank {}",
            b.name,
            b.rank,
            a.name,
            a.rank
        );
    }
}

/// Releases 1.22-1.30 ran the same cases with `LogarithmicScaleDown` toggled
/// per case (`disableLogarithmicScaleDown`, never set). With the gate off,
/// every inequality still holds; the two equalities that rest on equal log2
/// buckets become plain time comparisons (more recent first).
#[test]
fn sorting_active_pods_with_ranks_logarithmic_gate_off() {
    let f = fixture();
    let gates = FeatureGates {
        pod_deletion_cost: true,
        logarithmic_scale_down: false,
    };
    let cmp = comparator(gates);
    for (i, (p1, p2)) in equality_tests(&f).into_iter().enumerate() {
        let (a, b) = keys(&cmp, (p1, 1), (p2.unwrap_or(p1), 1));
        if p2.is_none() {
            assert!(!cmp.less(&a, &b) && !cmp.less(&b, &a), "equality {i}");
        } else {
            // p1 is 5h old, p2 8h: with plain times the newer goes first
            assert!(cmp.less(&a, &b) && !cmp.less(&b, &a), "equality {i}");
        }
    }
    for (i, (lesser, greater, disable_cost)) in inequality_tests(&f).into_iter().enumerate() {
        let cmp = comparator(FeatureGates {
            pod_deletion_cost: !disable_cost,
            ..gates
        });
        let (a, b) = keys(&cmp, lesser, greater);
        assert!(cmp.less(&a, &b) && !cmp.less(&b, &a), "inequality {i}");
    }
}

/// An explicit 0001-01-01T00:00:00Z is Go's zero time, like an absent field.
#[test]
fn explicit_zero_time_is_zero() {
    let f = fixture();
    let cmp = comparator(FeatureGates::default());
    let zero: Timestamp = "0001-01-01T00:00:00Z".parse().unwrap();
    let explicit = pod(
        "explicit-zero",
        "node",
        "Running",
        true,
        0,
        0,
        Some(zero),
        Some(zero),
        None,
    );
    let (a, b) = keys(
        &cmp,
        (&explicit, 1),
        (&f.running_ready_no_last_transition_time_pod, 1),
    );
    assert!(!cmp.less(&a, &b) && !cmp.less(&b, &a));
    let (a, b) = keys(&cmp, (&explicit, 1), (&f.running_ready_now, 1));
    assert!(cmp.less(&a, &b) && !cmp.less(&b, &a));
}

// ---------------------------------------------------------------------------
// TestGetPodsToDelete
// ---------------------------------------------------------------------------

/// The replica_set_test `newPod` helper (properly owned, namespace default,
/// a Ready=True condition without lastTransitionTime for Running pods).
fn new_pod(name: &str, uid: &str, phase: &str) -> Pod {
    let conditions = (phase == "Running").then(|| {
        vec![PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]
    });
    Pod {
        metadata: ObjectMeta {
            uid: Some(uid.into()),
            name: Some(name.into()),
            namespace: Some("default".into()),
            labels: Some(BTreeMap::from([("name".into(), "foo".into())])),
            owner_references: Some(vec![OwnerReference {
                uid: "rs-uid".into(),
                api_version: "v1beta1".into(),
                kind: "ReplicaSet".into(),
                name: "foobar".into(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec::default()),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            conditions,
            ..Default::default()
        }),
    }
}

fn with_node(mut p: Pod, node: &str) -> Pod {
    p.spec.get_or_insert_with(Default::default).node_name = Some(node.into());
    p
}

fn with_ready(mut p: Pod, status: &str) -> Pod {
    p.status.get_or_insert_with(Default::default).conditions = Some(vec![PodCondition {
        type_: "Ready".into(),
        status: status.into(),
        ..Default::default()
    }]);
    p
}

/// Upstream's `getPodsToDelete(filteredPods, relatedPods, diff)`, with
/// `Now: metav1.Now()` as the controller passes it.
fn get_pods_to_delete<'a>(pods: &[&'a Pod], related: &[&'a Pod], diff: usize) -> Vec<String> {
    let cmp = Comparator {
        gates: FeatureGates::default(),
        now: go_time(Some(&Time(Timestamp::now()))),
    };
    let ordered = order_pods(&cmp, pods.iter().copied(), related.iter().copied());
    ordered
        .victims(diff)
        .into_iter()
        .map(|i| ordered.keys[i].name.to_string())
        .collect()
}

#[test]
fn get_pods_to_delete_cases() {
    let unscheduled_pending = new_pod("unscheduled-pending-pod", "u1", "Pending");
    let scheduled_pending = with_node(
        new_pod("scheduled-pending-pod", "u2", "Pending"),
        "fake-node",
    );
    let running_not_ready = with_ready(
        with_node(
            new_pod("scheduled-running-not-ready-pod", "u3", "Running"),
            "fake-node",
        ),
        "False",
    );
    let ready_node1 = with_ready(
        with_node(
            new_pod("scheduled-running-ready-pod-on-node-1", "u4", "Running"),
            "fake-node-1",
        ),
        "True",
    );
    let ready_node2 = with_ready(
        with_node(
            new_pod("scheduled-running-ready-pod-on-node-2", "u5", "Running"),
            "fake-node-2",
        ),
        "True",
    );
    let name = |p: &Pod| p.metadata.name.clone().unwrap();

    struct Case<'a> {
        name: &'static str,
        pods: Vec<&'a Pod>,
        // related defaults to pods if None
        related: Option<Vec<&'a Pod>>,
        diff: usize,
        expected: Vec<&'a Pod>,
    }
    let various = vec![
        &ready_node1,
        &ready_node1,
        &ready_node2,
        &running_not_ready,
        &scheduled_pending,
        &unscheduled_pending,
    ];
    let cases = vec![
        Case {
            name: "len(pods) = 0 (i.e., diff = 0 too)",
            pods: vec![],
            related: None,
            diff: 0,
            expected: vec![],
        },
        Case {
            name: "diff = len(pods)",
            pods: vec![&running_not_ready, &ready_node1],
            related: None,
            diff: 2,
            expected: vec![&running_not_ready, &ready_node1],
        },
        Case {
            name: "diff < len(pods)",
            pods: vec![&ready_node1, &running_not_ready],
            related: None,
            diff: 1,
            expected: vec![&running_not_ready],
        },
        Case {
            name: "various pod phases and conditions, diff = len(pods)",
            pods: various.clone(),
            related: None,
            diff: 6,
            expected: various.clone(),
        },
        Case {
            name: "various pod phases and conditions, diff = len(pods), relatedPods empty",
            pods: various.clone(),
            related: Some(vec![]),
            diff: 6,
            expected: various.clone(),
        },
        Case {
            name: "scheduled vs unscheduled, diff < len(pods)",
            pods: vec![&scheduled_pending, &unscheduled_pending],
            related: None,
            diff: 1,
            expected: vec![&unscheduled_pending],
        },
        Case {
            name: "ready vs not-ready, diff < len(pods)",
            pods: vec![&ready_node1, &running_not_ready, &running_not_ready],
            related: None,
            diff: 2,
            expected: vec![&running_not_ready, &running_not_ready],
        },
        Case {
            name: "ready and colocated with another ready pod vs not colocated, diff < len(pods)",
            pods: vec![&ready_node1, &ready_node2],
            related: Some(vec![&ready_node1, &ready_node2, &ready_node2]),
            diff: 1,
            expected: vec![&ready_node2],
        },
        Case {
            name: "pending vs running, diff < len(pods)",
            pods: vec![&scheduled_pending, &running_not_ready],
            related: None,
            diff: 1,
            expected: vec![&scheduled_pending],
        },
        Case {
            name: "various pod phases and conditions, diff < len(pods)",
            pods: vec![
                &ready_node1,
                &ready_node2,
                &running_not_ready,
                &scheduled_pending,
                &unscheduled_pending,
            ],
            related: None,
            diff: 3,
            expected: vec![&unscheduled_pending, &scheduled_pending, &running_not_ready],
        },
    ];
    assert_eq!(cases.len(), 10, "every upstream case");
    for case in cases {
        let related = case.related.clone().unwrap_or_else(|| case.pods.clone());
        let got = get_pods_to_delete(&case.pods, &related, case.diff);
        let want: Vec<String> = case.expected.iter().map(|p| name(p)).collect();
        assert_eq!(got, want, "{}", case.name);
    }
}

/// The colocation case decides by rank alone: the duplicate in `related`
/// counts twice (upstream de-duplicates only when it lists related pods).
#[test]
fn get_pods_to_delete_ranks_count_duplicates() {
    let a = with_node(new_pod("a", "ua", "Running"), "n1");
    let b = with_node(new_pod("b", "ub", "Running"), "n2");
    let cmp = Comparator {
        gates: FeatureGates::default(),
        now: go_time(Some(&Time(now()))),
    };
    let ordered = order_pods(&cmp, [&a, &b], [&a, &b, &b]);
    assert_eq!(ordered.keys[0].rank, 1);
    assert_eq!(ordered.keys[1].rank, 2);
    let names: Vec<&str> = ordered.in_order().map(|k| &*k.name).collect();
    assert_eq!(names, ["b", "a"]);
    assert_eq!(ordered.ranking.decided_by, [super::Rule::Colocation]);
}
