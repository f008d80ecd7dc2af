//! One budget for every write, against the in-process fake API server: 50
//! policies batching at once, and every write the operator sends (pod
//! patches, status, Events, finalizers) counted from the fake's request log,
//! by the user the operator's client names itself as.

use std::collections::BTreeMap;
use std::time::Duration;

mod support;

use deletion_cost::annotations::POD_DELETION_COST;
use deletion_cost_testkit::eventually;
use deletion_cost_testkit::fake_api::{FakeApi, RecordedRequest};
use serde_json::json;
use support::operator::{config, Operator, NS};

const POLICIES: usize = 50;
const PODS_EACH: usize = 8;
/// The operator's user in the request log.
const USER: &str = "budget-operator";

/// `POLICIES` policies, each selecting its own ReplicaSet of `PODS_EACH`
/// pods, half on spot and half on on-demand nodes: every pod gets a cost.
fn cluster(fake: &FakeApi) {
    for (name, capacity) in [("spot-0", "spot"), ("od-0", "on-demand")] {
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"karpenter.sh/capacity-type": capacity}}}))
            .unwrap();
    }
    for p in 0..POLICIES {
        let app = format!("app-{p:02}");
        fake.apply_json(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": format!("{app}-rs"), "namespace": NS, "uid": format!("rs-{p}"),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": app,
                    "uid": format!("dep-{p}"), "controller": true}]},
            "spec": {"replicas": PODS_EACH, "selector": {"matchLabels": {"app": app}}}
        }))
        .unwrap();
        for i in 0..PODS_EACH {
            fake.apply_json(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{app}-{i}"), "namespace": NS, "labels": {"app": app},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": format!("{app}-rs"), "uid": format!("rs-{p}"), "controller": true}]},
                "spec": {"nodeName": if i % 2 == 0 { "spot-0" } else { "od-0" },
                    "containers": [{"name": "app", "image": "app:1"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                    "lastTransitionTime": "2026-11-01T00:00:00Z"}]}
            }))
            .unwrap();
        }
    }
}

/// The 50 policies, created at once (they batch together).
fn policies(fake: &FakeApi) {
    for p in 0..POLICIES {
        fake.apply_json(json!({
            "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
            "metadata": {"name": format!("policy-{p:02}"), "namespace": NS},
            "spec": {
                "selector": {"matchLabels": {"app": format!("app-{p:02}")}},
                "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}, "default": 50}}],
                "refreshInterval": "1h"
            }
        }))
        .unwrap();
    }
}

/// What a write changed, as the operator's metric names it.
fn kind(r: &RecordedRequest) -> &'static str {
    match r.resource.as_deref() {
        Some("pods") => "pods",
        Some("deletioncostpolicies/status") => "status",
        Some("events") => "events",
        _ => "other",
    }
}

/// The most of `times` (sorted) within any span of `window`.
fn max_in_window(times: &[tokio::time::Instant], window: Duration) -> usize {
    let mut best = 0;
    let mut start = 0;
    for end in 0..times.len() {
        while times[end].duration_since(times[start]) >= window {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

/// A counter of the operator's `/metrics` page.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_policies_batching_keep_every_write_within_the_limit_and_show_progress() {
    let fake = FakeApi::start().await;
    cluster(&fake);
    // a quarter of 40/s affords each of the 50 policies' progress every 5 s:
    // it is written at the shortest interval, every 8 s
    let (qps, burst) = (40.0, 10);
    let mut cfg = config("budget", qps, burst);
    cfg.metrics_addr = deletion_cost_testkit::free_addr();
    let op = Operator::start_as(&fake, cfg, USER).serving(&fake).await;
    policies(&fake);
    let pods = POLICIES * PODS_EACH;
    eventually(
        Duration::from_secs(120),
        "every pod costed and every status done",
        || async {
            let costed = fake
                .list_json("pods", Some(NS))
                .iter()
                .filter(|p| p["metadata"]["annotations"][POD_DELETION_COST].is_string())
                .count();
            let done = fake
                .list_json("deletioncostpolicies", Some(NS))
                .iter()
                .filter(|p| {
                    p["status"]["pendingPatches"] == json!(0)
                        && p["status"]["managedPods"] == json!(PODS_EACH)
                })
                .count();
            costed == pods && done == POLICIES
        },
    )
    .await;
    // what the batch's last writes trigger (the last Events) settles
    tokio::time::sleep(Duration::from_secs(2)).await;

    let writes: Vec<RecordedRequest> = fake
        .writes()
        .into_iter()
        .filter(|r| r.user.as_deref() == Some(USER))
        .collect();
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for w in &writes {
        *by_kind.entry(kind(w)).or_default() += 1;
    }
    let times: Vec<_> = writes.iter().map(|w| w.at).collect();
    let span = times.last().unwrap().duration_since(times[0]);
    let worst = max_in_window(&times, Duration::from_secs(10));
    eprintln!(
        "{} writes in {span:?} ({by_kind:?}); at most {worst} in any 10 s (limit {})",
        writes.len(),
        qps * 10.0 + f64::from(burst)
    );
    assert_eq!(by_kind.get("pods"), Some(&pods), "one write per pod");
    assert_eq!(by_kind.get("other"), Some(&POLICIES), "one finalizer each");
    assert!(
        by_kind.get("status") >= Some(&(2 * POLICIES)),
        "{by_kind:?}"
    );
    assert!(by_kind.get("events") >= Some(&POLICIES), "{by_kind:?}");
    // GCRA bound over every kind: burst + qps * window. Times are taken where
    // requests arrive, so a write granted just before a window may arrive in it.
    let in_flight_jitter = 2.0;
    for (window, what) in [(1.0, "1 s"), (10.0, "10 s")] {
        let worst = max_in_window(&times, Duration::from_secs_f64(window));
        assert!(
            worst as f64 <= qps * window + f64::from(burst) + in_flight_jitter,
            "{worst} writes of every kind in {what}; limit {qps}/s + burst {burst}"
        );
    }

    // each policy's status shows its progress at least every 10 s until its
    // batch is done, the pending count never going up
    let mut longest = Duration::ZERO;
    for p in 0..POLICIES {
        let name = format!("policy-{p:02}");
        let status: Vec<(tokio::time::Instant, u64)> = writes
            .iter()
            .filter(|w| kind(w) == "status" && w.name.as_deref() == Some(name.as_str()))
            .map(|w| {
                let body = w.json().unwrap_or_default();
                (w.at, body["status"]["pendingPatches"].as_u64().unwrap_or(0))
            })
            .collect();
        let end = status
            .iter()
            .position(|(_, pending)| *pending == 0)
            .unwrap_or_else(|| panic!("{name}: no status with nothing pending: {status:?}"));
        let batch = &status[..=end];
        for pair in batch.windows(2) {
            let gap = pair[1].0.duration_since(pair[0].0);
            longest = longest.max(gap);
            assert!(
                gap <= Duration::from_secs(10),
                "{name}: no progress shown for {gap:?} (pending {} then {})",
                pair[0].1,
                pair[1].1
            );
            assert!(pair[1].1 <= pair[0].1, "{name}: pending went up: {batch:?}");
        }
    }
    eprintln!("longest time without a status write during a policy's batch: {longest:?}");

    // the operator's own count of its writes by kind is the log's
    let text = op.metrics().await;
    for (k, n) in &by_kind {
        let series = format!("deletion_cost_api_writes_total{{kind=\"{k}\",outcome=\"ok\"}}");
        assert_eq!(metric(&text, &series), Some(*n as f64), "{series}");
    }
    op.stop().await;
}
