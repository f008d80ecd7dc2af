//! The operator end to end against the in-process fake API server: first
//! sync under the write limit, zero writes at steady state, re-costing on a
//! node relabel, Retry-After, kill and restart, leadership, finalizer
//! cleanup, foreign costs, dry run and the policy page. Counts requests,
//! never wall time.

use std::collections::BTreeMap;
use std::time::Duration;

mod support;

use deletion_cost::annotations::POD_DELETION_COST;
use deletion_cost::annotations::POLICY_ANNOTATION;
use deletion_cost::operator::FINALIZER;
use deletion_cost_testkit::fake_api::{FakeApi, Fault, RecordedRequest, Verb};
use deletion_cost_testkit::{eventually, free_port, http_get, http_request};
use serde_json::{json, Value};
use support::operator::{condition, config, cost, owner, successful_writes_per_pod, Operator, NS};

fn node(fake: &FakeApi, name: &str, capacity: &str) {
    fake.apply_json(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"karpenter.sh/capacity-type": capacity}}
    }))
    .unwrap();
}

fn workload(fake: &FakeApi) {
    fake.apply_json(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-abc", "namespace": NS, "uid": "rs-uid",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "dep-uid", "controller": true}]},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
}

fn pod(fake: &FakeApi, name: &str, node: &str, annotations: BTreeMap<&str, &str>) {
    fake.apply_json(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "web"},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "rs-uid", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:1"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}]}
    }))
    .unwrap();
}

fn policy(fake: &FakeApi) {
    fake.apply_json(json!({
        "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}, "default": 50}}],
            "refreshInterval": "1h"
        }
    }))
    .unwrap();
}

/// `n` pods over 4 spot and 4 on-demand nodes (pod i on node i % 8).
fn cluster(fake: &FakeApi, n: usize) {
    for i in 0..4 {
        node(fake, &format!("spot-{i}"), "spot");
        node(fake, &format!("od-{i}"), "on-demand");
    }
    workload(fake);
    for i in 0..n {
        let node = if i % 8 < 4 {
            format!("spot-{}", i % 8)
        } else {
            format!("od-{}", i % 8 - 4)
        };
        pod(fake, &format!("web-{i:04}"), &node, BTreeMap::new());
    }
    policy(fake);
}

fn expected(i: usize) -> &'static str {
    if i % 8 < 4 {
        "0"
    } else {
        "100"
    }
}

fn pod_patches(fake: &FakeApi) -> Vec<RecordedRequest> {
    fake.requests_for(Verb::Patch, "pods")
}

fn converged(fake: &FakeApi, n: usize) -> bool {
    (0..n).all(|i| cost(fake, &format!("web-{i:04}")).as_deref() == Some(expected(i)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_sync_stays_under_the_limit_and_steady_state_writes_nothing() {
    let fake = FakeApi::start().await;
    let n = 1000;
    cluster(&fake, n);
    let (qps, burst) = (250.0, 25);
    let op = Operator::start(&fake, config("operator-a", qps, burst));
    eventually(Duration::from_secs(60), "1,000 pods costed", || async {
        converged(&fake, n)
    })
    .await;

    let patches = pod_patches(&fake);
    assert_eq!(patches.len(), n, "one write per pod");
    // every patch is metadata-only, with our ownership
    let body = patches[0].json().unwrap();
    assert_eq!(body["metadata"]["annotations"][POLICY_ANNOTATION], "web");
    assert!(body.get("spec").is_none() && body.get("status").is_none());
    // GCRA bound: burst + qps * window. Times are recorded where requests
    // arrive, and a write let out before the window may arrive within it; at
    // most the patcher's writes in flight are (its background slots), however
    // late a loaded machine sends them.
    let window = 2.0;
    let in_flight_jitter = deletion_cost::writes::PatcherConfig::new(
        deletion_cost::writes::Rate::new("t", qps, burst).unwrap(),
    )
    .max_in_flight as f64;
    let worst = fake.max_writes_in_window(Some("pods"), Duration::from_secs_f64(window));
    assert!(
        worst as f64 <= qps * window + f64::from(burst) + in_flight_jitter,
        "{worst} writes in {window} s; limit {qps}/s + burst {burst}"
    );
    assert_eq!(owner(&fake, "web-0000").as_deref(), Some("web"));

    // the status reports the outcome once every write is observed
    eventually(Duration::from_secs(10), "status", || async {
        let st = fake
            .get_json("deletioncostpolicies", NS, "web")
            .and_then(|p| p.get("status").cloned())
            .unwrap_or_default();
        st["managedPods"] == json!(n) && st["pendingPatches"] == json!(0)
    })
    .await;
    // each status write is a forced server-side apply of the status
    // subresource, the whole status in metav1 conditions
    let status_writes = fake.writes_to("deletioncostpolicies/status");
    assert!(!status_writes.is_empty());
    for w in &status_writes {
        assert_eq!(w.method, "PATCH");
        assert_eq!(
            w.content_type.as_deref(),
            Some("application/apply-patch+yaml")
        );
        assert_eq!(
            w.query_param("fieldManager").as_deref(),
            Some(deletion_cost::MANAGER)
        );
        assert_eq!(w.query_param("force").as_deref(), Some("true"));
        let body = w.json().unwrap();
        assert_eq!(body["kind"], "DeletionCostPolicy");
        assert!(body["status"]["mismatches"].is_array(), "{body}");
        // a write that landed counts as pending until the pod cache shows
        // it: until then the order is planned on the old value
        if body["status"]["pendingPatches"] == json!(0) {
            let waiting = body["status"]["mismatches"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["reason"] == "PendingPatch");
            assert!(!waiting, "nothing pending, yet a patch is: {body}");
        }
        for c in body["status"]["conditions"].as_array().unwrap() {
            let since = c["lastTransitionTime"].as_str().unwrap();
            assert!(since.parse::<k8s_openapi::jiff::Timestamp>().is_ok(), "{c}");
            assert!(c["reason"].is_string() && c["message"].is_string(), "{c}");
        }
    }
    // the batch is over once its status says every write landed
    eventually(
        Duration::from_secs(10),
        "the status has nothing pending",
        || async {
            fake.get_json("deletioncostpolicies", NS, "web")
                .is_some_and(|p| p["status"]["pendingPatches"].as_u64() == Some(0))
        },
    )
    .await;

    // steady state: a re-sync with nothing changed writes nothing
    fake.clear_requests();
    let mut p = fake.get_json("deletioncostpolicies", NS, "web").unwrap();
    p["metadata"]["labels"] = json!({"touched": "yes"});
    fake.apply_json(p).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    // with their bodies: a status write says what changed
    let writes: Vec<String> = fake
        .writes()
        .iter()
        .filter(|r| r.resource.as_deref() != Some("events"))
        .map(|r| {
            format!(
                "{} {} {}",
                r.method,
                r.path,
                String::from_utf8_lossy(&r.body)
            )
        })
        .collect();
    assert!(writes.is_empty(), "steady state wrote: {writes:#?}");
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relabelled_node_recosts_only_its_pods() {
    let fake = FakeApi::start().await;
    let n = 40;
    cluster(&fake, n);
    let op = Operator::start(&fake, config("operator-a", 100.0, 10));
    eventually(Duration::from_secs(30), "pods costed", || async {
        converged(&fake, n)
    })
    .await;
    fake.clear_requests();
    node(&fake, "spot-1", "on-demand");
    let on_node: Vec<String> = (0..n)
        .filter(|i| i % 8 == 1)
        .map(|i| format!("web-{i:04}"))
        .collect();
    eventually(Duration::from_secs(30), "spot-1 pods re-costed", || async {
        on_node
            .iter()
            .all(|p| cost(&fake, p).as_deref() == Some("100"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut patched: Vec<String> = pod_patches(&fake)
        .iter()
        .filter_map(|r| r.name.clone())
        .collect();
    patched.sort();
    assert_eq!(patched, on_node);
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests_honours_retry_after() {
    let fake = FakeApi::start().await;
    cluster(&fake, 4);
    fake.inject(
        Fault::status(429)
            .on(Verb::Patch, "pods")
            .times(1)
            .retry_after(2),
    );
    let op = Operator::start(&fake, config("operator-a", 100.0, 10));
    eventually(Duration::from_secs(30), "pods costed", || async {
        converged(&fake, 4)
    })
    .await;
    let patches = pod_patches(&fake);
    let first = &patches[0];
    assert_eq!(first.status, 429);
    assert!(
        patches.len() == 5,
        "4 writes plus the refused one: {}",
        patches.len()
    );
    // The four writes leave together (burst 10), so the other three were
    // in flight when the 429 came: each pod once, whenever they arrive (a
    // loaded machine delays an in-flight request's arrival by any amount,
    // so arrival gaps cannot tell in-flight writes from new ones). The one
    // new write is the refused pod's, after the server's 2 s. That nothing
    // else starts during the pause is `tests/writes.rs`'s, on a paused clock.
    let mut others: Vec<_> = patches[1..]
        .iter()
        .filter(|r| r.name != first.name)
        .map(|r| r.name.clone())
        .collect();
    others.sort();
    others.dedup();
    assert_eq!(
        others.len(),
        3,
        "the other pods written once each: {others:?}"
    );
    let retries: Vec<_> = patches[1..]
        .iter()
        .filter(|r| r.name == first.name)
        .collect();
    assert_eq!(retries.len(), 1, "the refused write is retried once");
    let waited = retries[0].at.duration_since(first.at);
    assert!(
        waited >= Duration::from_millis(1900),
        "retried {waited:?} after a 429 asking for 2 s"
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_batch_resumes_without_duplicates_or_losses() {
    let fake = FakeApi::start().await;
    let n = 120;
    cluster(&fake, n);
    let op = Operator::start(&fake, config("operator-a", 40.0, 4));
    eventually(Duration::from_secs(30), "some writes", || async {
        pod_patches(&fake).len() >= 30
    })
    .await;
    op.kill().await;
    let before = pod_patches(&fake).len();
    assert!(before < n, "killed before finishing ({before} writes)");

    let op = Operator::start(&fake, config("operator-a", 40.0, 4));
    eventually(
        Duration::from_secs(60),
        "all pods costed after restart",
        || async { converged(&fake, n) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let per_pod = successful_writes_per_pod(&fake);
    assert_eq!(per_pod.len(), n, "every pod written");
    let dup: Vec<_> = per_pod.iter().filter(|(_, c)| **c > 1).collect();
    assert!(dup.is_empty(), "written twice: {dup:?}");
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_the_lease_writes_nothing() {
    let fake = FakeApi::start().await;
    cluster(&fake, 10);
    let now = deletion_cost_now();
    fake.apply_json(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "deletion-cost", "namespace": NS},
        "spec": {"holderIdentity": "operator-b", "leaseDurationSeconds": 3600,
                 "acquireTime": now, "renewTime": now}
    }))
    .unwrap();
    let mut cfg = config("operator-a", 100.0, 10);
    cfg.leader_election = true;
    let op = Operator::start(&fake, cfg);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes: Vec<String> = fake
        .writes()
        .iter()
        .filter(|r| r.resource.as_deref() != Some("leases"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(writes.is_empty(), "a follower wrote: {writes:?}");
    assert_eq!(cost(&fake, "web-0000"), None);
    op.stop().await;
}

fn deletion_cost_now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_removes_exactly_its_own_values_and_foreign_costs_stay() {
    let fake = FakeApi::start().await;
    for i in 0..4 {
        node(&fake, &format!("spot-{i}"), "spot");
        node(&fake, &format!("od-{i}"), "on-demand");
    }
    workload(&fake);
    for i in 0..6 {
        pod(
            &fake,
            &format!("web-{i:04}"),
            if i % 2 == 0 { "spot-0" } else { "od-0" },
            BTreeMap::new(),
        );
    }
    pod(
        &fake,
        "web-pinned",
        "spot-1",
        BTreeMap::from([(POD_DELETION_COST, "9000")]),
    );
    policy(&fake);
    let op = Operator::start(&fake, config("operator-a", 100.0, 10));
    eventually(Duration::from_secs(30), "pods costed", || async {
        (0..6).all(|i| cost(&fake, &format!("web-{i:04}")).is_some())
    })
    .await;
    eventually(Duration::from_secs(10), "finalizer added", || async {
        fake.get_json("deletioncostpolicies", NS, "web")
            .and_then(|p| p.pointer("/metadata/finalizers/0").cloned())
            == Some(json!(FINALIZER))
    })
    .await;
    assert_eq!(cost(&fake, "web-pinned").as_deref(), Some("9000"));
    assert!(pod_patches(&fake)
        .iter()
        .all(|r| r.name.as_deref() != Some("web-pinned")));

    fake.clear_requests();
    fake.delete_json("deletioncostpolicies", NS, "web").unwrap();
    eventually(Duration::from_secs(30), "policy gone", || async {
        fake.get_json("deletioncostpolicies", NS, "web").is_none()
    })
    .await;
    for i in 0..6 {
        let p = format!("web-{i:04}");
        assert_eq!(cost(&fake, &p), None, "{p} still has a cost");
        assert_eq!(owner(&fake, &p), None);
    }
    assert_eq!(cost(&fake, "web-pinned").as_deref(), Some("9000"));
    let removed: Vec<String> = pod_patches(&fake)
        .iter()
        .filter_map(|r| r.name.clone())
        .collect();
    assert_eq!(removed.len(), 6, "{removed:?}");
    let body: Value = pod_patches(&fake)[0].json().unwrap();
    assert!(body["metadata"]["annotations"][POD_DELETION_COST].is_null());
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_writes_nothing() {
    let fake = FakeApi::start().await;
    cluster(&fake, 16);
    let mut cfg = config("operator-a", 100.0, 10);
    cfg.dry_run = true;
    let op = Operator::start(&fake, cfg);
    // it reads: the caches list pods and policies
    eventually(Duration::from_secs(10), "caches listed", || async {
        !fake.requests_for(Verb::List, "pods").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes: Vec<String> = fake
        .writes()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(writes.is_empty(), "dry run wrote: {writes:?}");
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_policies_older_wins_and_the_loser_reports_conflict() {
    let fake = FakeApi::start().await;
    cluster(&fake, 8);
    // created later: loses the shared pods
    fake.apply_json(json!({
        "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": "zzz-newer", "namespace": NS,
                     "creationTimestamp": "2999-01-01T00:00:00Z"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "signals": [{"billingClass": {"costs": {"spot": 7}, "default": 7}}]}
    }))
    .unwrap();
    let port = free_port();
    let mut cfg = config("operator-a", 100.0, 10);
    cfg.metrics_addr = format!("127.0.0.1:{port}").parse().unwrap();
    let op = Operator::start(&fake, cfg);
    eventually(
        Duration::from_secs(30),
        "pods costed by the older policy",
        || async { converged(&fake, 8) },
    )
    .await;
    eventually(Duration::from_secs(10), "Conflict on the loser", || async {
        condition(&fake, "zzz-newer", "Conflict").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert!((0..8).all(|i| owner(&fake, &format!("web-{i:04}")).as_deref() == Some("web")));
    eventually(Duration::from_secs(10), "a Conflict event", || async {
        fake.writes().iter().any(|r| {
            r.path.contains("/events")
                && String::from_utf8_lossy(&r.body).contains("OverlappingPolicy")
        })
    })
    .await;
    // health and metrics are served
    let (code, _) = http_get(port, "/healthz").await;
    assert_eq!(code, 200);
    eventually(Duration::from_secs(10), "/readyz to answer 200", || async {
        http_get(port, "/readyz").await.0 == 200
    })
    .await;
    let (_, body) = http_get(port, "/metrics").await;
    assert!(
        body.contains("deletion_cost_patches_total{result=\"applied\"} 8"),
        "{body}"
    );
    assert!(body.contains("deletion_cost_leader 1"));
    // the comparator's gates follow the fake server's version (1.33)
    assert!(
        body.contains(
            "deletion_cost_comparator_info{kubernetes_version=\"1.33\",source=\"detected\",\
             logarithmic_scale_down=\"true\",pod_deletion_cost=\"true\"} 1"
        ),
        "{body}"
    );
    op.stop().await;
}

/// The comparator-info line of `/metrics` once it holds every `needle`.
async fn comparator_info(port: u16, needles: &[&str]) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = http_get(port, "/metrics").await;
        let line = body
            .lines()
            .find(|l| l.starts_with("deletion_cost_comparator_info{"))
            .unwrap_or_default()
            .to_string();
        if needles.iter().all(|n| line.contains(n)) {
            return line;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no comparator info with {needles:?}: {line:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The gates follow the API server's version: flags override it, a flag
/// the version forbids stops the start, an unreadable version falls back to
/// the newest defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comparator_gates_follow_the_server_version() {
    let fake = FakeApi::start().await;
    cluster(&fake, 2);

    // 1.37: LogarithmicScaleDown no longer exists, so turning it off is refused
    fake.set_version(Some(
        json!({"major": "1", "minor": "37", "gitVersion": "v1.37.0"}),
    ));
    let mut cfg = config("gates-a", 100.0, 10);
    cfg.feature_gates = Some("LogarithmicScaleDown=false".into());
    let err = Operator::start(&fake, cfg)
        .join()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no longer exists in Kubernetes 1.37") && err.contains("v1.37.0"),
        "{err}"
    );

    // --kubernetes-version overrides the detected version
    let port = free_port();
    let mut cfg = config("gates-b", 100.0, 10);
    cfg.metrics_addr = format!("127.0.0.1:{port}").parse().unwrap();
    cfg.kubernetes_version = "1.21".parse().ok();
    let op = Operator::start(&fake, cfg);
    comparator_info(
        port,
        &[
            "kubernetes_version=\"1.21\",source=\"flag\"",
            "pod_deletion_cost=\"false\"",
        ],
    )
    .await;
    op.stop().await;

    // no version: the newest defaults, and the operator runs
    fake.set_version(None);
    let port = free_port();
    let mut cfg = config("gates-c", 100.0, 10);
    cfg.metrics_addr = format!("127.0.0.1:{port}").parse().unwrap();
    let op = Operator::start(&fake, cfg);
    comparator_info(
        port,
        &[
            "kubernetes_version=\"unknown\",source=\"default\"",
            "logarithmic_scale_down=\"true\",pod_deletion_cost=\"true\"",
        ],
    )
    .await;
    eventually(Duration::from_secs(30), "pods costed", || async {
        converged(&fake, 2)
    })
    .await;
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_leaving_the_selector_lose_our_cost_and_bad_specs_say_why() {
    let fake = FakeApi::start().await;
    cluster(&fake, 8);
    let op = Operator::start(&fake, config("operator-a", 100.0, 10));
    eventually(Duration::from_secs(30), "pods costed", || async {
        converged(&fake, 8)
    })
    .await;
    // web-0003 leaves the selector
    let mut p = fake.get_json("pods", NS, "web-0003").unwrap();
    p["metadata"]["labels"] = json!({"app": "web", "canary": "true"});
    fake.apply_json(p).unwrap();
    let mut pol = fake.get_json("deletioncostpolicies", NS, "web").unwrap();
    pol["spec"]["selector"] = json!({"matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]});
    fake.apply_json(pol).unwrap();
    eventually(Duration::from_secs(30), "web-0003 released", || async {
        cost(&fake, "web-0003").is_none() && owner(&fake, "web-0003").is_none()
    })
    .await;
    assert_eq!(cost(&fake, "web-0002").as_deref(), Some("0"));

    // an invalid spec: Ready=False naming the field, and no writes
    fake.clear_requests();
    let mut pol = fake.get_json("deletioncostpolicies", NS, "web").unwrap();
    pol["spec"]["signals"] = json!([{"utilization": {"prometheus": {"query": "up"},
        "range": {"min": 0, "max": 1}, "buckets": 0}}]);
    fake.apply_json(pol).unwrap();
    eventually(Duration::from_secs(10), "InvalidSpec", || async {
        condition(&fake, "web", "Ready").is_some_and(|c| {
            c["reason"] == "InvalidSpec" && c["message"].to_string().contains("buckets")
        })
    })
    .await;
    assert!(pod_patches(&fake).is_empty());
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_policy_has_its_plan_page_on_the_metrics_port() {
    let fake = FakeApi::start().await;
    let n = 8;
    cluster(&fake, n);
    let port = free_port();
    let mut cfg = config("operator-a", 100.0, 10);
    cfg.metrics_addr = format!("127.0.0.1:{port}").parse().unwrap();
    let op = Operator::start(&fake, cfg);
    eventually(Duration::from_secs(30), "pods costed", || async {
        converged(&fake, n)
    })
    .await;
    // the page plans over the operator's own pod cache, which sees the
    // written costs a moment after the API server does
    eventually(
        Duration::from_secs(30),
        "the page shows the costs landed",
        || async {
            let (code, resp) = http_get(port, "/policies/shop/web?scaleDownBy=2").await;
            code == 200 && resp.contains("order as intended: yes")
        },
    )
    .await;

    let (code, resp) = http_get(port, "/policies/shop/web?scaleDownBy=2").await;
    assert_eq!(code, 200, "{resp}");
    let (head, page) = resp.split_once("\r\n\r\n").unwrap();
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains("content-type: text/html; charset=utf-8"),
        "{head}"
    );
    assert!(
        head.contains("content-security-policy: default-src 'none'"),
        "{head}"
    );
    assert!(page.contains("<h2>Policy shop/web</h2>"));
    for i in 0..n {
        let pod = format!("web-{i:04}");
        assert!(
            page.contains(&format!(" data-pod=\"{pod}\">")),
            "{pod} missing"
        );
    }
    // spot pods cost 0 and go first: a scale-in by 2 takes two of them
    let victims: Vec<&str> = page
        .split("<g class=\"pod victim\" data-pod=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert_eq!(victims.len(), 2, "{victims:?}");
    for v in &victims {
        let i: usize = v.trim_start_matches("web-").parse().unwrap();
        assert!(i % 8 < 4, "{v} is not on a spot node");
    }
    assert!(page.contains("order as intended: yes"));

    let (code, resp) = http_get(port, "/policies/shop/nope").await;
    assert_eq!(code, 404, "{resp}");
    assert!(resp.ends_with("\r\n\r\nno DeletionCostPolicy shop/nope is managed by this operator\n"));
    let (code, resp) = http_get(port, "/policies/shop/web?scaleDownBy=x").await;
    assert_eq!(code, 400, "{resp}");
    let (code, _) = http_request(port, "POST", "/policies/shop/web").await;
    assert_eq!(code, 405, "only GET");
    op.stop().await;
}
