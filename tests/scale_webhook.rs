//! The scale-in admission webhook (`POST /v1/admit-scale-in` on the hook's
//! listener) against the fake API server: it allows every request, makes
//! the workload's costs fresh before it answers a scale-in, names the
//! victims in the audit annotations, and answers at once what is not its
//! business (a scale-out, a dry run, a workload no policy manages).

mod support;

use std::time::Duration;

use deletion_cost::annotations::POD_DELETION_COST;
use deletion_cost::hook::{HookConfig, HookTls};
use deletion_cost_testkit::fake_api::FakeApi;
use deletion_cost_testkit::{eventually, free_addr};
use serde_json::{json, Value};
use support::operator::{http_client, Operator, NS};

fn seed(fake: &FakeApi) {
    for (node, class) in [("spot-1", "spot"), ("od-1", "on-demand")] {
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {"karpenter.sh/capacity-type": class}}}))
            .expect("a node");
    }
    for (name, with_policy) in [("web", true), ("lonely", false)] {
        fake.apply_json(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": format!("{name}-rs"), "namespace": NS, "uid": format!("{name}-rs-uid"),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                    "uid": format!("{name}-uid"), "controller": true}]},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": name}}}}))
            .expect("a ReplicaSet");
        for i in 0..4 {
            let node = if i < 2 { "spot-1" } else { "od-1" };
            fake.apply_json(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-{i}"), "namespace": NS, "labels": {"app": name},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-rs"),
                        "uid": format!("{name}-rs-uid"), "controller": true}]},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
                "status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}]}}))
                .expect("a pod");
        }
        if with_policy {
            fake.apply_json(
                json!({"apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"targetRef": {"kind": "Deployment", "name": name}, "combine": "sum",
                    "signals": [{"billingClass": {"nodeLabel": "karpenter.sh/capacity-type",
                        "costs": {"spot": 10, "on-demand": 100}, "default": 50}}]}}),
            )
            .expect("a policy");
        }
    }
}

/// An AdmissionReview as the API server sends it for an update of
/// `deployments/scale` (what the HPA and `kubectl scale` do).
fn review(uid: &str, name: &str, from: i64, to: i64, dry_run: bool) -> Value {
    let scale = |n: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": name, "namespace": NS}, "spec": {"replicas": n}})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid,
        "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "subResource": "scale",
        "name": name, "namespace": NS, "operation": "UPDATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"},
        "object": scale(to), "oldObject": scale(from), "dryRun": dry_run}})
}

/// Sends an AdmissionReview to the webhook; its answer (always a 200).
async fn post_review(http: &reqwest::Client, hook: std::net::SocketAddr, body: Value) -> Value {
    let resp = http
        .post(format!("http://{hook}/v1/admit-scale-in"))
        .json(&body)
        .send()
        .await
        .expect("the webhook answers");
    assert_eq!(resp.status(), 200);
    resp.json::<Value>().await.expect("a JSON AdmissionReview")
}

/// The victims an answer names for the audit log, sorted.
fn victims(answer: &Value) -> Vec<String> {
    let mut v: Vec<String> = answer["response"]["auditAnnotations"]["victims"]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

fn costs(fake: &FakeApi, app: &str) -> Vec<Option<String>> {
    (0..4)
        .map(|i| {
            fake.get_json("Pod", NS, &format!("{app}-{i}"))
                .and_then(|p| {
                    p["metadata"]["annotations"][POD_DELETION_COST]
                        .as_str()
                        .map(str::to_string)
                })
        })
        .collect()
}

/// The bodies of the scale-in Events written about Deployment `name`.
fn victim_events(fake: &FakeApi, name: &str) -> Vec<Value> {
    fake.writes_to("events")
        .iter()
        .filter_map(|w| serde_json::from_slice::<Value>(&w.body).ok())
        .filter(|e| {
            e["reason"] == "ScaleInVictims"
                && e["regarding"]["kind"] == "Deployment"
                && e["regarding"]["name"] == name
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_makes_costs_fresh_before_it_allows_a_scale_in_and_never_denies() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let mut cfg = support::operator::config("op-0", 100.0, 100);
    cfg.metrics_addr = free_addr();
    // no reconcile after the first: what the webhook does is seen alone
    cfg.debounce = Duration::from_secs(3600);
    cfg.hook_addr = Some(free_addr());
    cfg.hook = HookConfig {
        tls: HookTls::PlainHttp,
        ..HookConfig::default()
    };
    let hook = cfg.hook_addr.expect("a hook address");
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    let http = http_client();
    let admit = |body: Value| post_review(&http, hook, body);

    let want = |c: [&str; 4]| c.map(|c| Some(c.to_string())).to_vec();
    // a scale-in of a managed workload (the reconcile is throttled for an
    // hour: what is written here, the webhook wrote)
    let answer = admit(review("u-1", "web", 4, 2, false)).await;
    let r = &answer["response"];
    assert_eq!(r["uid"], "u-1");
    assert_eq!(r["allowed"], true, "{answer}");
    assert!(r["warnings"].is_null(), "no warning when fresh: {answer}");
    assert_eq!(
        costs(&fake, "web"),
        want(["10", "10", "100", "100"]),
        "the webhook wrote the costs before it answered"
    );
    assert_eq!(r["auditAnnotations"]["policy"], format!("{NS}/web"));
    // the two spot pods tie (same cost, node and age): in either order
    assert_eq!(
        victims(&answer),
        ["web-rs/web-0", "web-rs/web-1"],
        "{answer}"
    );

    // ... and into an Event on the Deployment (written after the answer)
    eventually(
        Duration::from_secs(10),
        "an Event on web names the predicted victims",
        || async {
            victim_events(&fake, "web").iter().any(|e| {
                e["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("web-rs/web-0") && n.contains("web-rs/web-1"))
            })
        },
    )
    .await;
    // it went through the write budget, as every Event does: the operator
    // counted each one the server got
    eventually(
        Duration::from_secs(10),
        "every Event counted in the write budget",
        || async {
            let series = "deletion_cost_api_writes_total{kind=\"events\",outcome=\"ok\"} ";
            let counted = op.metrics().await.lines().find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|v| v.trim().parse::<f64>().ok())
            });
            counted == Some(fake.writes_to("events").len() as f64)
        },
    )
    .await;

    // the nodes swap their billing class: the next scale-in gets the new costs
    for (node, class) in [("spot-1", "on-demand"), ("od-1", "spot")] {
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {"karpenter.sh/capacity-type": class}}}))
            .expect("a node");
    }
    // the node watch delivers at once on the fake; give it a moment
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = fake.writes_to("pods").len();
    let answer = admit(review("u-2", "web", 4, 3, false)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(costs(&fake, "web"), want(["100", "100", "10", "10"]));
    assert_eq!(fake.writes_to("pods").len(), before + 4);
    // web-2 and web-3 tie: either goes
    let victim = victims(&answer);
    assert!(
        victim == ["web-rs/web-2"] || victim == ["web-rs/web-3"],
        "{answer}"
    );

    // the second call of the same scale-in (the ReplicaSet the Deployment
    // controller resizes) finds nothing to write
    let writes = fake.writes_to("pods").len();
    let again = admit(review("u-6", "web", 4, 3, false)).await;
    assert_eq!(again["response"]["allowed"], true);
    assert_eq!(
        fake.writes_to("pods").len(),
        writes,
        "nothing written twice"
    );
    // and still names the victims (from the plan of its own round)
    let victim = victims(&again);
    assert!(
        victim == ["web-rs/web-2"] || victim == ["web-rs/web-3"],
        "{again}"
    );
    assert_eq!(
        again["response"]["auditAnnotations"]["policy"],
        format!("{NS}/web")
    );

    // not its business: allowed at once, nothing written
    for (uid, body) in [
        ("u-3", review("u-3", "web", 2, 4, false)),
        ("u-4", review("u-4", "web", 4, 1, true)),
        ("u-5", review("u-5", "lonely", 4, 2, false)),
    ] {
        let a = admit(body).await;
        assert_eq!(a["response"]["uid"], uid);
        assert_eq!(a["response"]["allowed"], true, "{a}");
        assert!(a["response"]["warnings"].is_null(), "{a}");
    }
    assert_eq!(costs(&fake, "lonely"), vec![None; 4]);
    assert!(
        victim_events(&fake, "lonely").is_empty(),
        "no Event for a workload no policy manages"
    );
    assert_eq!(fake.writes_to("pods").len(), writes, "nothing written");

    let metrics = op.metrics().await;
    for outcome in ["fresh", "not_scale_in", "dry_run", "no_policy"] {
        assert!(
            metrics.contains(&format!(
                "deletion_cost_scale_webhook_calls_total{{outcome=\"{outcome}\"}}"
            )),
            "{outcome} not counted:\n{metrics}"
        );
    }
    assert!(
        metrics.contains("deletion_cost_scale_webhook_seconds_count 6"),
        "{metrics}"
    );

    // what is not an AdmissionReview gets an answer that says so
    let resp = http
        .post(format!("http://{hook}/v1/admit-scale-in"))
        .body("{}")
        .send()
        .await
        .expect("the webhook answers");
    let v: Value = resp.json().await.expect("JSON");
    assert_eq!(v["response"]["allowed"], false, "{v}");
    op.stop().await;
}

/// The policy's `ScaleInsFresh` condition says which scalers get fresh
/// costs: `Unknown` before any scale-in, `True` once the webhook made one
/// fresh (the Deployment controller's follow-up call is not a second one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_says_the_webhook_covers_every_scaler() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let mut cfg = support::operator::config("op-0", 100.0, 100);
    cfg.metrics_addr = free_addr();
    cfg.hook_addr = Some(free_addr());
    cfg.hook = HookConfig {
        tls: HookTls::PlainHttp,
        settle_delay: Duration::from_millis(50),
        ..HookConfig::default()
    };
    let hook = cfg.hook_addr.expect("a hook address");
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    let status = |fake: &FakeApi| {
        support::operator::condition(fake, "web", "ScaleInsFresh").map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
    };
    eventually(Duration::from_secs(20), "ScaleInsFresh Unknown", || {
        std::future::ready(status(&fake).is_some_and(|(s, _)| s == "Unknown"))
    })
    .await;

    let http = http_client();
    let mut follow_up = review("u-2", "web-rs", 4, 3, false);
    follow_up["request"]["resource"] =
        json!({"group": "apps", "version": "v1", "resource": "replicasets"});
    follow_up["request"]["userInfo"] =
        json!({"username": "system:serviceaccount:kube-system:deployment-controller"});
    for body in [review("u-1", "web", 4, 3, false), follow_up] {
        post_review(&http, hook, body).await;
    }
    // the webhook's writes are pod events: the next reconcile writes the status
    eventually(Duration::from_secs(20), "ScaleInsFresh True", || {
        std::future::ready(status(&fake).is_some_and(|(s, _)| s == "True"))
    })
    .await;
    let (_, message) = status(&fake).unwrap_or_default();
    assert!(message.contains("for 1 scale-in(s)"), "{message}");
    assert!(message.contains("by the scale-in webhook"), "{message}");
    op.stop().await;
}
