//! Nothing lost, one writer: the operator against a fake API server that
//! refuses writes for a while, loses a leader's term mid-batch, stops
//! answering its Lease renewals, and sees two replicas start at the same
//! instant. The fake records who sent each request (the replicas name
//! themselves, as users do in a real audit log), so the tests count writes
//! per writer against the Lease's own record.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use deletion_cost_testkit::fake_api::{FakeApi, Fault, RecordedRequest, Verb};
use deletion_cost_testkit::{eventually, free_port, http_get};
use serde_json::{json, Value};
use support::operator::{
    condition, config, cost, quick_lease, seed_web_pods, successful_writes_per_pod, Operator, NS,
};

/// `n` pods of one ReplicaSet over a spot and an on-demand node, and the
/// policy `web` (billing class only; refreshed every `refresh`).
fn seed(fake: &FakeApi, n: usize, refresh: &str) {
    seed_web_pods(fake, n, None);
    fake.apply_json(json!({
        "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "refreshInterval": refresh,
            "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}}}]
        }
    }))
    .unwrap();
}

fn pod(i: usize) -> String {
    format!("web-{i:03}")
}

fn all_written(fake: &FakeApi, n: usize) -> bool {
    (0..n).all(|i| cost(fake, &pod(i)).as_deref() == Some(if i % 2 == 0 { "0" } else { "100" }))
}

fn ready(fake: &FakeApi) -> (String, String, String) {
    let c = condition(fake, "web", "Ready").unwrap_or(Value::Null);
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"), s("message"))
}

/// Lease changes that the server accepted, in order.
fn lease_writes(fake: &FakeApi) -> Vec<RecordedRequest> {
    fake.requests()
        .into_iter()
        .filter(|r| r.resource.as_deref() == Some("leases") && r.is_write())
        .collect()
}

/// Successful pod writes that no term recorded for their writer covers: a
/// write by `user` at `t` needs a renewal of `user`'s accepted by the server
/// at most `deadline` before `t`, with no other replica's accepted change of
/// the Lease between the two. (The deadline counts from when the renewal was
/// sent, which is before it arrived: the check has that much slack.)
fn writes_outside_terms(fake: &FakeApi, deadline: Duration) -> Vec<String> {
    let renewals: Vec<RecordedRequest> = lease_writes(fake)
        .into_iter()
        .filter(|r| (200..300).contains(&r.status))
        .collect();
    let slack = Duration::from_millis(100);
    fake.requests_for(Verb::Patch, "pods")
        .into_iter()
        .filter(|w| w.status == 200)
        .filter(|w| {
            let last = renewals.iter().rev().find(|r| r.at <= w.at);
            !last.is_some_and(|r| r.user == w.user && w.at.duration_since(r.at) < deadline + slack)
        })
        .map(|w| {
            format!(
                "{} by {:?} at {:?}",
                w.name.clone().unwrap_or_default(),
                w.user,
                w.at
            )
        })
        .collect()
}

/// Every change of the Lease carries the resourceVersion it was based on (a
/// PUT with it, or the POST that creates it): none can overwrite another
/// replica's term unseen.
fn assert_lease_changes_are_conditional(fake: &FakeApi) {
    for r in lease_writes(fake) {
        match r.method.as_str() {
            "POST" => {}
            "PUT" => {
                let rv = r.json().unwrap_or_default()["metadata"]["resourceVersion"].clone();
                assert!(
                    rv.as_str().is_some_and(|v| !v.is_empty()),
                    "a Lease PUT without resourceVersion: {:?}",
                    r.json()
                );
            }
            other => panic!("a Lease change by {other}: {:?}", r.json()),
        }
    }
}

fn elected(identity: &str, qps: f64, burst: u32) -> deletion_cost::operator::RunConfig {
    let mut c = config(identity, qps, burst);
    c.leader_election = true;
    c.lease_timings = quick_lease();
    c
}

/// A restarted API server answers 403 for a moment: every write lands
/// anyway, each pod once, and the status ends with nothing pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_window_loses_no_write() {
    let fake = FakeApi::start().await;
    let n = 30;
    seed(&fake, n, "5m");
    fake.inject(Fault::status(403).on(Verb::Patch, "pods").times(25));
    let op = Operator::start(&fake, config("operator-a", 40.0, 4));
    eventually(Duration::from_secs(60), "every pod written", || async {
        all_written(&fake, n)
    })
    .await;
    let per_pod = successful_writes_per_pod(&fake);
    assert_eq!(per_pod.len(), n);
    assert!(per_pod.values().all(|c| *c == 1), "duplicates: {per_pod:?}");
    eventually(
        Duration::from_secs(20),
        "Ready with nothing pending",
        || async {
            let (status, _, message) = ready(&fake);
            status == "True" && message.contains(" 0 patches pending")
        },
    )
    .await;
    op.stop().await;
}

/// Writes the server refuses for good fail after their retries, show in the
/// status (Ready=False, WritesFailing) and are sent again by the next round
/// once the server takes them. (They used to be remembered as sent and
/// filtered out of every later round, while the status said all was well.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_writes_show_in_the_status_and_are_sent_again() {
    let fake = FakeApi::start().await;
    let n = 8;
    seed(&fake, n, "3s");
    fake.inject(Fault::status(422).on(Verb::Patch, "pods").always());
    let op = Operator::start(&fake, config("operator-a", 50.0, 5));
    eventually(
        Duration::from_secs(30),
        "Ready=False, WritesFailing",
        || async {
            let (status, reason, _) = ready(&fake);
            status == "False" && reason == "WritesFailing"
        },
    )
    .await;
    let (_, _, message) = ready(&fake);
    assert!(message.contains("rejected (422)"), "{message}");
    fake.clear_faults();
    eventually(Duration::from_secs(30), "every pod written", || async {
        all_written(&fake, n)
    })
    .await;
    eventually(Duration::from_secs(20), "Ready again", || async {
        ready(&fake).0 == "True"
    })
    .await;
    op.stop().await;
}

async fn patches_total(port: u16) -> f64 {
    let (_, body) = http_get(port, "/metrics").await;
    body.lines()
        .filter(|l| l.starts_with("deletion_cost_patches_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The leader loses its term in the middle of a batch (another replica's
/// renewal shows in the Lease) and takes it back when that one goes quiet:
/// it writes nothing while another holds the Lease, every pod is written in
/// the end, each once, and its write counters never go back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_lost_mid_batch_loses_no_write() {
    let fake = FakeApi::start().await;
    let n = 40;
    seed(&fake, n, "5m");
    let port = free_port();
    let mut cfg = elected("operator-a", 5.0, 1);
    cfg.metrics_addr = format!("127.0.0.1:{port}").parse().unwrap();
    let op = Operator::start_as(&fake, cfg, "operator-a");
    eventually(
        Duration::from_secs(30),
        "a first batch of writes",
        || async { successful_writes_per_pod(&fake).len() >= 8 },
    )
    .await;
    let before = patches_total(port).await;
    // another replica's term: a renewal the leader did not write
    let mut lease = fake.get_json("leases", NS, "deletion-cost").expect("lease");
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    lease["spec"]["holderIdentity"] = json!("operator-b");
    lease["spec"]["renewTime"] = json!(now);
    lease["spec"]["leaseDurationSeconds"] = json!(3);
    fake.apply_json(lease).unwrap();
    let stolen = tokio::time::Instant::now();
    eventually(Duration::from_secs(30), "every pod written", || async {
        all_written(&fake, n)
    })
    .await;
    let per_pod = successful_writes_per_pod(&fake);
    assert_eq!(per_pod.len(), n);
    assert!(per_pod.values().all(|c| *c == 1), "duplicates: {per_pod:?}");
    // nothing written while operator-b's term ran: from one retry period
    // after the theft (the leader's next read of the Lease; writes already
    // in flight may land) until it took the Lease back
    let retaken = lease_writes(&fake)
        .into_iter()
        .filter(|r| r.at > stolen && r.status < 300)
        .map(|r| r.at)
        .next()
        .expect("operator-a took the lease back");
    let quiet_from = stolen + quick_lease().retry_period + Duration::from_millis(300);
    let during: Vec<String> = fake
        .requests_for(Verb::Patch, "pods")
        .iter()
        .filter(|r| r.status == 200 && r.at > quiet_from && r.at < retaken)
        .filter_map(|r| r.name.clone())
        .collect();
    assert!(
        during.is_empty(),
        "written during another's term: {during:?}"
    );
    assert!(
        retaken.duration_since(stolen) >= Duration::from_secs(3),
        "took over a running term after {:?}",
        retaken.duration_since(stolen)
    );
    let outside = writes_outside_terms(&fake, quick_lease().renew_deadline);
    assert!(outside.is_empty(), "{outside:?}");
    assert!(
        patches_total(port).await >= before,
        "the write counters went back"
    );
    assert_lease_changes_are_conditional(&fake);
    op.stop().await;
}

/// The Lease cannot be renewed (the API server refuses the Lease, pods
/// still take writes): the leader stops writing at its renew deadline,
/// before its term could expire, and resumes when renewals go through again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_writing_at_its_deadline() {
    let fake = FakeApi::start().await;
    // writes every 50 ms: any sent past the deadline would show
    let n = 200;
    seed(&fake, n, "5m");
    let op = Operator::start_as(&fake, elected("operator-a", 20.0, 1), "operator-a");
    eventually(
        Duration::from_secs(30),
        "a first batch of writes",
        || async { successful_writes_per_pod(&fake).len() >= 20 },
    )
    .await;
    fake.inject(Fault::status(500).on(Verb::Get, "leases").always());
    fake.inject(Fault::status(500).on(Verb::Update, "leases").always());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let written = successful_writes_per_pod(&fake).len();
    assert!(
        written < n,
        "the batch ended before the fault: {written} of {n}"
    );
    fake.clear_faults();
    eventually(Duration::from_secs(30), "every pod written", || async {
        all_written(&fake, n)
    })
    .await;
    let outside = writes_outside_terms(&fake, quick_lease().renew_deadline);
    assert!(
        outside.is_empty(),
        "written outside a recorded term: {outside:?}"
    );
    let per_pod = successful_writes_per_pod(&fake);
    assert!(per_pod.values().all(|c| *c == 1), "duplicates: {per_pod:?}");
    op.stop().await;
}

/// Two replicas started at the same instant, many times: one writer each
/// time, every pod written once, by the Lease's holder, inside its term,
/// and every Lease change conditional on the version it read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_started_together_make_one_writer() {
    for round in 0..8 {
        let fake = FakeApi::start().await;
        let n = 6;
        seed(&fake, n, "5m");
        let a = Operator::start_as(&fake, elected("operator-a", 50.0, 5), "operator-a");
        let b = Operator::start_as(&fake, elected("operator-b", 50.0, 5), "operator-b");
        eventually(Duration::from_secs(30), "every pod written", || async {
            all_written(&fake, n)
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut writers: BTreeMap<String, usize> = BTreeMap::new();
        for w in fake.requests_for(Verb::Patch, "pods") {
            if w.status == 200 {
                *writers.entry(w.user.unwrap_or_default()).or_default() += 1;
            }
        }
        assert_eq!(writers.len(), 1, "round {round}: writers {writers:?}");
        let per_pod = successful_writes_per_pod(&fake);
        assert!(
            per_pod.values().all(|c| *c == 1),
            "round {round}: duplicates {per_pod:?}"
        );
        let holder = fake.get_json("leases", NS, "deletion-cost").expect("lease")["spec"]
            ["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(writers.keys().next(), Some(&holder), "round {round}");
        let outside = writes_outside_terms(&fake, quick_lease().renew_deadline);
        assert!(outside.is_empty(), "round {round}: {outside:?}");
        assert_lease_changes_are_conditional(&fake);
        a.stop().await;
        b.stop().await;
    }
}

async fn reconciles_ok(port: u16) -> f64 {
    let (_, body) = http_get(port, "/metrics").await;
    body.lines()
        .find(|l| l.starts_with("deletion_cost_reconciles_total{result=\"ok\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// The pod events of the operator's own writes (one every 100 ms here) do
/// not hold the policy's reconcile back: with a 1 s window it runs about
/// once a second while the batch is written, not once for the whole batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_batch_of_writes_does_not_starve_the_reconcile() {
    let fake = FakeApi::start().await;
    let n = 80;
    seed(&fake, n, "5m");
    let port = free_port();
    let mut cfg = config("operator-a", 10.0, 1);
    cfg.debounce = Duration::from_secs(1);
    cfg.metrics_addr = format!("127.0.0.1:{port}").parse().unwrap();
    let op = Operator::start(&fake, cfg);
    eventually(Duration::from_secs(30), "the batch under way", || async {
        successful_writes_per_pod(&fake).len() >= 5
    })
    .await;
    let before = reconciles_ok(port).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let written = successful_writes_per_pod(&fake).len();
    assert!(written < n, "the batch ended too soon to tell: {written}");
    let during = reconciles_ok(port).await - before;
    assert!(during >= 3.0, "{during} reconciles in 5 s of writes");
    op.stop().await;
}

/// A policy deleted with most of its writes still queued writes none of
/// them: its queue is dropped at once, only pods that carry its value are
/// cleaned, and the policy is gone as soon as those removals land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_policy_drops_its_queued_writes_at_once() {
    let fake = FakeApi::start().await;
    let n = 60;
    seed(&fake, n, "5m");
    let op = Operator::start(&fake, config("operator-a", 5.0, 1));
    eventually(Duration::from_secs(30), "the batch under way", || async {
        successful_writes_per_pod(&fake).len() >= 3
    })
    .await;
    fake.delete_json("deletioncostpolicies", NS, "web").unwrap();
    let deleted = tokio::time::Instant::now();
    eventually(Duration::from_secs(30), "the policy gone", || async {
        fake.get_json("deletioncostpolicies", NS, "web").is_none()
    })
    .await;
    let took = deleted.elapsed();
    let after: Vec<RecordedRequest> = fake
        .requests_for(Verb::Patch, "pods")
        .into_iter()
        .filter(|r| r.at > deleted && r.status == 200)
        .collect();
    let sets: Vec<String> = after
        .iter()
        .filter(|r| {
            !r.json().unwrap_or_default()["metadata"]["annotations"]
                ["controller.kubernetes.io/pod-deletion-cost"]
                .is_null()
        })
        .filter_map(|r| r.name.clone())
        .collect();
    // a write in flight at the deletion may still land
    assert!(
        sets.len() <= 1,
        "values written after the deletion: {sets:?}"
    );
    let written_before: usize = fake
        .requests_for(Verb::Patch, "pods")
        .iter()
        .filter(|r| r.at <= deleted && r.status == 200)
        .count();
    let removals = after.len() - sets.len();
    assert!(
        removals <= written_before + sets.len(),
        "{removals} removals for {written_before} pods written"
    );
    assert!((0..n).all(|i| cost(&fake, &pod(i)).is_none()));
    // 60 writes at 5/s would take 12 s; the removals alone about 1 s
    assert!(
        took < Duration::from_secs(8),
        "the policy took {took:?} to go"
    );
    op.stop().await;
}

/// Issue 52: a new leader takes the leader label off the pod of a replica
/// that led before and could not take it off itself (frozen, killed), so
/// the hook Service stops routing scale-ins to a replica that cannot
/// answer them; its own label and other pods are left alone.
#[tokio::test]
async fn a_new_leader_takes_the_label_off_a_replica_that_led_before() {
    use deletion_cost::engine::leadership::{unmark_other_leaders, LEADER_LABEL};
    let fake = FakeApi::start().await;
    for (name, leader) in [("op-a", true), ("op-b", true), ("op-c", false)] {
        let mut labels = json!({"app.kubernetes.io/name": "deletion-cost"});
        if leader {
            labels[LEADER_LABEL] = json!("true");
        }
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "deletion-cost-system", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "operator"}]}}))
            .expect("a pod");
    }
    let unmarked = unmark_other_leaders(&fake.client(), "deletion-cost-system", "op-b").await;
    assert_eq!(unmarked, ["op-a"]);
    let leader_of = |name: &str| {
        fake.get_json("Pod", "deletion-cost-system", name)
            .and_then(|p| {
                p["metadata"]["labels"][LEADER_LABEL]
                    .as_str()
                    .map(String::from)
            })
    };
    assert_eq!(leader_of("op-a"), None);
    assert_eq!(leader_of("op-b").as_deref(), Some("true"));
    assert_eq!(leader_of("op-c"), None);
    // one list, one write: nothing else touched
    assert_eq!(fake.writes().len(), 1, "{:?}", fake.writes());
}
