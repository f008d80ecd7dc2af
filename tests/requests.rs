//! The exact requests of a reconcile, a cleanup and a scale-in webhook call:
//! the operator's pieces write to a mock API server that asserts each
//! request in turn (`support/verifier.rs`), so a request added, dropped,
//! repeated or reordered fails here. Watches, leases and several replicas
//! are tested against the fake API server (`tests/operator*.rs`).

mod support;

use std::sync::Arc;
use std::time::Duration;

use deletion_cost::annotations::{POD_DELETION_COST, POLICY_ANNOTATION};
use deletion_cost::operator::reconcile::reconcile;
use deletion_cost::operator::FINALIZER;
use deletion_cost::policy::DeletionCostPolicy;
use deletion_cost_testkit::free_addr;
use kube::runtime::controller::Action;
use serde_json::{json, Value};
use support::verifier::{finished, start, Scenario, World};

const NS: &str = "shop";

/// A pod of ReplicaSet `web-rs` on `node`, with `annotations`.
fn pod(i: usize, node: &str, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("web-{i}"), "namespace": NS, "uid": format!("web-{i}-uid"),
            "resourceVersion": "1", "creationTimestamp": format!("2026-11-01T00:0{i}:00Z"),
            "labels": {"app": "web"}, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs",
                "uid": "web-rs-uid", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:10:00Z"}]}})
}

/// Policy `web` on Deployment `web`: spot pods cost 10, on-demand ones 100.
fn policy() -> DeletionCostPolicy {
    serde_json::from_value(
        json!({"apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": "web", "namespace": NS, "uid": "policy-uid", "generation": 1,
            "resourceVersion": "1"},
        "spec": {"targetRef": {"kind": "Deployment", "name": "web"}, "combine": "sum",
            "signals": [{"billingClass": {"nodeLabel": "karpenter.sh/capacity-type",
                "costs": {"spot": 10, "on-demand": 100}, "default": 50}}]}}),
    )
    .expect("a policy")
}

fn finalized(mut p: DeletionCostPolicy) -> DeletionCostPolicy {
    p.metadata.finalizers = Some(vec![FINALIZER.into()]);
    p
}

/// Two spot and two on-demand nodes' worth of pods of Deployment `web`
/// (pods `web-0`, `web-1` on spot, `web-2`, `web-3` on demand), each with
/// the given annotations, and `policy`.
fn world(annotations: [Value; 4], policy: DeletionCostPolicy) -> World {
    let nodes = nodes([("spot-1", "spot", "1"), ("od-1", "on-demand", "1")]);
    let replica_set = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-rs", "namespace": NS, "uid": "web-rs-uid",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": "web-uid", "controller": true}]},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}}}});
    let pods = annotations
        .into_iter()
        .enumerate()
        .map(|(i, a)| pod(i, if i < 2 { "spot-1" } else { "od-1" }, a))
        .collect();
    World {
        nodes,
        replica_sets: vec![replica_set],
        pods,
        policies: vec![policy],
    }
}

/// Nodes with their billing class and resourceVersion.
fn nodes(classes: [(&str, &str, &str); 2]) -> Vec<Value> {
    classes
        .into_iter()
        .map(|(name, class, rv)| {
            json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "resourceVersion": rv,
                    "labels": {"karpenter.sh/capacity-type": class,
                        "kubernetes.io/hostname": name}}})
        })
        .collect()
}

fn no_annotations() -> [Value; 4] {
    [json!({}), json!({}), json!({}), json!({})]
}

#[tokio::test]
async fn a_new_policy_gets_the_finalizer_and_nothing_else() {
    let (pieces, verifier) = start(world(no_annotations(), policy())).await;
    let server = verifier.run(Scenario::FinalizerCreation(policy()));
    let action = reconcile(Arc::new(policy()), pieces.ctx.clone())
        .await
        .expect("the reconcile succeeds");
    // the finalizer's watch event brings the next reconcile
    assert_eq!(action, Action::await_change());
    let verifier = finished(server).await;
    finished(verifier.run(Scenario::RadioSilence)).await;
}

#[tokio::test]
async fn a_valid_policy_writes_its_costs_then_its_status_then_an_event_per_transition() {
    let mut policy = finalized(policy());
    // the last status, as a term before this one left it: writes failing
    policy.status = Some(
        serde_json::from_value(json!({"conditions": [{"type": "Ready", "status": "False",
            "reason": "WritesFailing", "message": "3 pod writes keep failing",
            "lastTransitionTime": "2026-11-01T00:00:00Z"}], "observedGeneration": 1}))
        .expect("a status"),
    );
    let (pieces, verifier) = start(world(no_annotations(), policy.clone())).await;
    let server = verifier.run(Scenario::Apply {
        policy: policy.clone(),
        // the spot pods are the cheapest to delete
        costs: vec![("web-0", 10), ("web-1", 10), ("web-2", 100), ("web-3", 100)],
        conditions: vec![
            ("Ready", "True", "Reconciled"),
            ("OrderAsIntended", "True", "AsIntended"),
            ("SignalsAvailable", "True", "Available"),
            ("Conflict", "False", "NoConflict"),
            ("ScaleInsFresh", "Unknown", "NoScaleInSeen"),
        ],
        // the status is built as the round hands its writes over
        pending: 4,
        // Ready changed; the other conditions are new and good, no news
        events: vec![(
            "Normal",
            "Reconciled",
            "Ready=True: 4 pods selected, 4 patches pending",
        )],
    });
    let action = reconcile(Arc::new(policy), pieces.ctx.clone())
        .await
        .expect("the reconcile succeeds");
    // planned again at the refresh interval (the default, 300 s)
    assert_eq!(action, Action::requeue(Duration::from_secs(300)));
    let verifier = finished(server).await;
    finished(verifier.run(Scenario::RadioSilence)).await;
}

#[tokio::test]
async fn a_deleted_policy_removes_exactly_its_own_costs_then_its_finalizer() {
    let mut policy = finalized(policy());
    policy.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2026-11-02T00:00:00Z")).expect("a time"));
    let ours = |cost: &str| json!({POD_DELETION_COST: cost, POLICY_ANNOTATION: "web"});
    let annotations = [
        ours("10"),
        ours("10"),
        // another policy's cost, and one set by hand: both stay
        json!({POD_DELETION_COST: "100", POLICY_ANNOTATION: "other"}),
        json!({POD_DELETION_COST: "100"}),
    ];
    let (pieces, verifier) = start(world(annotations, policy.clone())).await;
    let server = verifier.run(Scenario::Cleanup {
        policy: policy.clone(),
        removed: vec!["web-0", "web-1"],
    });
    let action = reconcile(Arc::new(policy), pieces.ctx.clone())
        .await
        .expect("the cleanup succeeds");
    assert_eq!(action, Action::await_change());
    let verifier = finished(server).await;
    finished(verifier.run(Scenario::RadioSilence)).await;
}

/// An AdmissionReview as the API server sends it for the HPA's update of
/// `deployments/web/scale` from `from` to `to` replicas.
fn scale_review(from: i64, to: i64) -> Value {
    let scale = |n: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "web", "namespace": NS, "uid": "web-uid"}, "spec": {"replicas": n}})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "review-1",
        "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "subResource": "scale",
        "name": "web", "namespace": NS, "operation": "UPDATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"},
        "object": scale(to), "oldObject": scale(from), "dryRun": false}})
}

/// The webhook's answer to `review`.
async fn admit(hook: std::net::SocketAddr, review: Value) -> Value {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
        .post(format!("http://{hook}/v1/admit-scale-in"))
        .json(&review)
        .send()
        .await
        .expect("the webhook answers")
        .json()
        .await
        .expect("an AdmissionReview")
}

/// A scale-in 4 -> 2 through the webhook, the pods carrying this policy's
/// `costs` and the nodes as the server holds them (`nodes`): exactly the
/// node reads and `writes`, then the Event, and `victims` in the answer
/// with no warning.
async fn scale_in_exactly(
    costs: [&str; 4],
    nodes: Vec<Value>,
    writes: Vec<(&'static str, i32)>,
    victims: &str,
) {
    let ours = |cost: &str| json!({POD_DELETION_COST: cost, POLICY_ANNOTATION: "web"});
    let (pieces, verifier) = start(world(costs.map(ours), finalized(policy()))).await;
    let hook = free_addr();
    pieces.serve_hook(hook).await;
    let note = format!(
        "scale-in 4 -> 2 ({} cost write(s)); predicted victims {victims}",
        writes.len()
    );
    let server = verifier.run(Scenario::ScaleIn {
        policy: "web",
        deployment: "web",
        nodes,
        writes,
        note,
    });
    let answer = admit(hook, scale_review(4, 2)).await;
    let response = &answer["response"];
    assert_eq!(response["allowed"], true, "{answer}");
    assert_eq!(response["uid"], "review-1", "{answer}");
    assert_eq!(response["auditAnnotations"]["victims"], victims, "{answer}");
    assert!(response.get("warnings").is_none(), "{answer}");
    let verifier = finished(server).await;
    finished(verifier.run(Scenario::RadioSilence)).await;
}

#[tokio::test]
async fn a_scale_in_webhook_call_writes_the_correction_then_names_the_victims_in_an_event() {
    scale_in_exactly(
        // web-0's cost is stale (written under an earlier spec): as the
        // costs stand, web-0 would stay and an on-demand pod would go
        ["1000", "10", "100", "100"],
        // as the cache shows them
        world(no_annotations(), policy()).nodes,
        // the fewest writes that make exactly the spot pods go
        vec![("web-0", 10)],
        "web-rs/web-0,web-rs/web-1",
    )
    .await;
}

#[tokio::test]
async fn a_scale_in_plans_on_the_node_labels_the_server_holds_not_the_caches() {
    scale_in_exactly(
        // as the last round wrote them, when spot-1 was spot
        ["10", "10", "100", "100"],
        // the classes swapped a moment ago: the node watch has not shown it
        nodes([("spot-1", "on-demand", "2"), ("od-1", "spot", "2")]),
        // the pods of od-1, spot now, go: the fewest writes put them just
        // below the others
        vec![("web-2", 9), ("web-3", 9)],
        "web-rs/web-2,web-rs/web-3",
    )
    .await;
}
