//! The scale-in admission webhook (`POST /v1/admit-scale-in` on the hook's
//! listener) against the fake API server: it allows every request, makes
//! the workload's costs fresh before it answers a scale-in, names the
//! victims in the audit annotations, and answers at once what is not its
//! business (a scale-out, a dry run, a workload no policy manages).

mod support;

use std::time::Duration;

use deletion_cost::annotations::POD_DELETION_COST;
use deletion_cost::hook::{HookConfig, HookTls};
use deletion_cost::operator::RunConfig;
use deletion_cost_testkit::fake_api::{FakeApi, Fault, Verb};
use deletion_cost_testkit::prometheus::{Exporter, PrometheusServer};
use deletion_cost_testkit::{eventually, free_addr, http_get};
use serde_json::{json, Value};
use support::operator::{http_client, Operator, NS};

/// An operator's settings with the hook (and the webhook) on a free port,
/// over plain HTTP, and `hook`'s other settings.
fn with_hook(identity: &str, hook: HookConfig) -> (RunConfig, std::net::SocketAddr) {
    let mut cfg = support::operator::config(identity, 100.0, 100);
    cfg.metrics_addr = free_addr();
    let addr = free_addr();
    cfg.hook_addr = Some(addr);
    cfg.hook = HookConfig {
        tls: HookTls::PlainHttp,
        ..hook
    };
    (cfg, addr)
}

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

/// Whether policy `name`'s status has `managed` pods carrying its costs and
/// no patch it has not seen land.
fn batch_done(fake: &FakeApi, name: &str, managed: u64) -> bool {
    fake.get_json("deletioncostpolicies", NS, name)
        .is_some_and(|p| {
            p["status"]["managedPods"].as_u64() == Some(managed)
                && p["status"]["pendingPatches"].as_u64() == Some(0)
        })
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
    let (mut cfg, hook) = with_hook("op-0", HookConfig::default());
    // no reconcile after the first: what the webhook does is seen alone
    cfg.debounce = Duration::from_secs(3600);
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    let http = http_client();
    let admit = |body: Value| post_review(&http, hook, body);

    // a scale-in of a managed workload (the reconcile is throttled for an
    // hour: what is written here, the webhook wrote)
    let answer = admit(review("u-1", "web", 4, 2, false)).await;
    let r = &answer["response"];
    assert_eq!(r["uid"], "u-1");
    assert_eq!(r["allowed"], true, "{answer}");
    assert!(r["warnings"].is_null(), "no warning when fresh: {answer}");
    // the two spot pods go: written below the others' cost (none: 0), and
    // nothing else is written
    let c = costs(&fake, "web");
    assert_eq!(
        (c[2].clone(), c[3].clone()),
        (None, None),
        "only the victims are written: {c:?}"
    );
    let written = |i: usize| c[i].as_deref().and_then(|v| v.parse::<i32>().ok());
    assert!(
        written(0).is_some_and(|v| v < 0) && written(1).is_some_and(|v| v < 0),
        "the victims go first: {c:?}"
    );
    assert_eq!(
        fake.writes_to("pods").len(),
        2,
        "two writes for a scale-in by two"
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

    // the nodes swap their billing class: the next scale-in wants an
    // on-demand pod of before, and writes that one pod only
    for (node, class) in [("spot-1", "on-demand"), ("od-1", "spot")] {
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {"karpenter.sh/capacity-type": class}}}))
            .expect("a node");
    }
    // no wait for the node watch: the scale-in reads the nodes' labels
    // from the server
    let before = fake.writes_to("pods").len();
    let answer = admit(review("u-2", "web", 4, 3, false)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(
        fake.writes_to("pods").len(),
        before + 1,
        "one write for a scale-in by one"
    );
    // web-2 and web-3 tie: either goes, and it is the one now written lowest
    let victim = victims(&answer);
    assert!(
        victim == ["web-rs/web-2"] || victim == ["web-rs/web-3"],
        "{answer}"
    );
    let c = costs(&fake, "web");
    let cost = |i: usize| c[i].as_deref().map_or(0, |v| v.parse::<i32>().unwrap_or(0));
    let gone = if victim == ["web-rs/web-2"] { 2 } else { 3 };
    assert!(
        (0..4).filter(|&i| i != gone).all(|i| cost(gone) < cost(i)),
        "{c:?}"
    );

    // the second call of the same scale-in (the ReplicaSet the Deployment
    // controller resizes) shares the first one's answer: nothing written,
    // nothing read
    let writes = fake.writes_to("pods").len();
    let again = admit(review("u-6", "web", 4, 3, false)).await;
    assert_eq!(again["response"]["allowed"], true);
    assert_eq!(
        fake.writes_to("pods").len(),
        writes,
        "nothing written twice"
    );
    assert_eq!(victims(&again), victim, "{again}");
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
    for outcome in ["fresh", "shared", "not_scale_in", "dry_run", "no_policy"] {
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
    let (cfg, hook) = with_hook(
        "op-0",
        HookConfig {
            settle_delay: Duration::from_millis(50),
            ..HookConfig::default()
        },
    );
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
    let kept = |fake: &FakeApi| {
        fake.get_json("DeletionCostPolicy", NS, "web")
            .map(|p| p["status"]["scaleIns"]["byWebhook"].clone())
    };
    eventually(
        Duration::from_secs(20),
        "the status keeps the count",
        || std::future::ready(kept(&fake) == Some(json!(1))),
    )
    .await;
    op.stop().await;

    // a restart (or a new leader) counts on from what the status kept
    let (cfg, hook) = with_hook(
        "op-1",
        HookConfig {
            settle_delay: Duration::from_millis(50),
            ..HookConfig::default()
        },
    );
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    post_review(&http, hook, review("u-3", "web", 3, 2, false)).await;
    eventually(Duration::from_secs(20), "the count goes on from 1", || {
        std::future::ready(kept(&fake) == Some(json!(2)))
    })
    .await;
    let (_, message) = status(&fake).unwrap_or_default();
    assert!(message.contains("for 2 scale-in(s)"), "{message}");
    op.stop().await;
}

/// A scale-in right behind another of the same Deployment, before the pod
/// cache shows the first one's victim terminating (the watch lags the API
/// server), names the next pod to go, not the one going already.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_in_right_after_another_does_not_name_its_victim_again() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let (mut cfg, hook) = with_hook(
        "op-0",
        HookConfig {
            settle_delay: Duration::from_millis(50),
            ..HookConfig::default()
        },
    );
    cfg.debounce = Duration::from_secs(3600);
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    let http = http_client();
    let first = post_review(&http, hook, review("u-1", "web", 4, 3, false)).await;
    let gone = victims(&first);
    assert_eq!(gone.len(), 1, "{first}");
    let spot = ["web-rs/web-0", "web-rs/web-1"];
    assert!(spot.contains(&gone[0].as_str()), "{first}");
    // the controller deletes it a moment after the next scale-in arrives
    let pod = gone[0].trim_start_matches("web-rs/").to_string();
    let deleter = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        fake.delete_json("Pod", NS, &pod)
            .expect("the victim deleted");
    };
    let (second, ()) = tokio::join!(
        post_review(&http, hook, review("u-2", "web", 3, 2, false)),
        deleter
    );
    let next = victims(&second);
    let other: Vec<&str> = spot.iter().copied().filter(|v| *v != gone[0]).collect();
    assert_eq!(
        next, other,
        "the second scale-in names the other spot pod: {second}"
    );
    op.stop().await;
}

/// Five pods of `util` whose utilisation the exporter serves, a policy that
/// deletes the least utilised first (10 buckets of 0..1, no hysteresis).
fn seed_utilisation(fake: &FakeApi) {
    fake.apply_json(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n-1"}}))
        .expect("a node");
    fake.apply_json(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "util-rs", "namespace": NS, "uid": "util-rs-uid",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "util",
                "uid": "util-uid", "controller": true}]},
        "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "util"}}}}))
        .expect("a ReplicaSet");
    for i in 0..5 {
        add_util_pod(fake, i);
    }
    fake.apply_json(
        json!({"apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": "util", "namespace": NS},
        "spec": {"targetRef": {"kind": "Deployment", "name": "util"},
            "signals": [{"utilization": {"prometheus": {"query": "pod_util", "podLabel": "pod"},
                "range": {"min": 0, "max": 1}, "buckets": 10, "hysteresis": 0}}]}}),
    )
    .expect("a policy");
}

fn add_util_pod(fake: &FakeApi, i: usize) {
    fake.apply_json(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("util-{i}"), "namespace": NS, "uid": format!("util-{i}-uid"),
            "labels": {"app": "util"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "util-rs",
                "uid": "util-rs-uid", "controller": true}]},
        "spec": {"nodeName": "n-1", "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}]}}))
    .expect("a pod");
}

/// The exporter's text: `pod_util{pod="util-i"} v` for each value.
fn utilisation(values: &[(usize, f64)]) -> String {
    values
        .iter()
        .map(|(i, v)| format!("pod_util{{pod=\"util-{i}\"}} {v}\n"))
        .collect()
}

/// Waits until Prometheus answers `pod_util` of `util-{i}` with `v`.
async fn prometheus_shows(prom: &PrometheusServer, i: usize, v: f64) {
    let url = format!("{}/api/v1/query?query=pod_util", prom.url());
    let http = http_client();
    eventually(
        Duration::from_secs(20),
        "Prometheus shows the new values",
        || {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let Ok(resp) = http.get(&url).send().await else {
                    return false;
                };
                let body: Value = resp.json().await.unwrap_or_default();
                body["data"]["result"].as_array().is_some_and(|r| {
                    r.iter().any(|s| {
                        s["metric"]["pod"] == format!("util-{i}")
                            && s["value"][1].as_str().and_then(|x| x.parse::<f64>().ok()) == Some(v)
                    })
                })
            }
        },
    )
    .await;
}

/// An AdmissionReview of the Deployment controller resizing ReplicaSet `rs`.
fn follow_up(uid: &str, rs: &str, from: i64, to: i64) -> Value {
    let mut r = review(uid, rs, from, to, false);
    r["request"]["resource"] = json!({"group": "apps", "version": "v1", "resource": "replicasets"});
    r["request"]["subResource"] = Value::Null;
    r["request"]["userInfo"] =
        json!({"username": "system:serviceaccount:kube-system:deployment-controller"});
    r
}

/// Each scale-in reads utilisation anew, however close to the one before
/// (no reuse of recent values); the Deployment controller's follow-up call
/// shares the first call's answer without reading or writing; a scale-in
/// with the same numbers once the last one's pods went is a new one; each
/// deletes the least utilised pods as they are now, with at most 2k + 4
/// writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scale_in_reads_signals_once_and_its_follow_up_shares_the_answer() {
    let exporter = Exporter::start(&utilisation(&[
        (0, 0.1),
        (1, 0.2),
        (2, 0.3),
        (3, 0.4),
        (4, 0.5),
    ]));
    let prom = PrometheusServer::scraping(exporter.addr());
    prometheus_shows(&prom, 4, 0.5).await;
    let fake = FakeApi::start().await;
    seed_utilisation(&fake);
    // background rounds run, but leave the pods a scale-in holds alone and
    // read signals only every refreshInterval (5 minutes)
    let (mut cfg, hook) = with_hook("op-0", HookConfig::default());
    cfg.prometheus_url = Some(prom.url());
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    let http = http_client();
    eventually(
        Duration::from_secs(20),
        "the first round wrote every cost",
        || std::future::ready(fake.writes_to("pods").len() >= 5),
    )
    .await;
    // and saw them land: the status says so at the batch's end
    eventually(
        Duration::from_secs(20),
        "the status has every cost landed",
        || std::future::ready(batch_done(&fake, "util", 5)),
    )
    .await;

    // the utilisation of the whole workload changes: util-4 is now the least
    exporter.set(&utilisation(&[
        (0, 0.9),
        (1, 0.8),
        (2, 0.7),
        (3, 0.6),
        (4, 0.0),
    ]));
    prometheus_shows(&prom, 4, 0.0).await;
    let (queries, writes) = (prom.queries(), fake.writes_to("pods").len());
    let first = post_review(&http, hook, review("u-1", "util", 5, 4, false)).await;
    assert_eq!(victims(&first), ["util-rs/util-4"], "{first}");
    assert!(first["response"]["warnings"].is_null(), "{first}");
    assert_eq!(prom.queries(), queries + 1, "one query for the scale-in");
    let w = fake.writes_to("pods").len() - writes;
    assert!((1..=6).contains(&w), "{w} writes for a scale-in by 1");

    // the Deployment controller's ReplicaSet update: the same scale-in
    let (queries, writes) = (prom.queries(), fake.writes_to("pods").len());
    let second = post_review(&http, hook, follow_up("u-2", "util-rs", 5, 4)).await;
    assert_eq!(victims(&second), ["util-rs/util-4"], "{second}");
    assert_eq!(prom.queries(), queries, "the follow-up reads nothing");
    assert_eq!(fake.writes_to("pods").len(), writes, "and writes nothing");

    // the controller deletes util-4; a second later the utilisation
    // changes again and the next scale-in comes
    fake.delete_json("Pod", NS, "util-4")
        .expect("util-4 deleted");
    exporter.set(&utilisation(&[(0, 0.05), (1, 0.8), (2, 0.7), (3, 0.6)]));
    prometheus_shows(&prom, 0, 0.05).await;
    let queries = prom.queries();
    let third = post_review(&http, hook, review("u-3", "util", 4, 3, false)).await;
    assert_eq!(victims(&third), ["util-rs/util-0"], "{third}");
    assert_eq!(prom.queries(), queries + 1, "read anew: {third}");

    // util-0 goes, a new pod comes (a scale-out), and a scale-in with the
    // same numbers follows at once: a new scale-in, not the last one's answer
    fake.delete_json("Pod", NS, "util-0")
        .expect("util-0 deleted");
    add_util_pod(&fake, 5);
    exporter.set(&utilisation(&[(1, 0.8), (2, 0.1), (3, 0.6), (5, 0.9)]));
    prometheus_shows(&prom, 2, 0.1).await;
    // the operator's pod cache shows util-0 gone and util-5 come
    let page = op.metrics_addr().port();
    eventually(
        Duration::from_secs(20),
        "the operator's cache shows util-5, not util-0",
        || async {
            let (code, body) = http_get(page, "/policies/shop/util").await;
            code == 200 && body.contains("util-5") && !body.contains("util-0")
        },
    )
    .await;
    let queries = prom.queries();
    let fourth = post_review(&http, hook, review("u-4", "util", 4, 3, false)).await;
    assert_eq!(victims(&fourth), ["util-rs/util-2"], "{fourth}");
    assert_eq!(prom.queries(), queries + 1, "{fourth}");

    let metrics = op.metrics().await;
    assert!(
        metrics.contains("deletion_cost_scale_webhook_calls_total{outcome=\"shared\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("deletion_cost_scale_webhook_calls_total{outcome=\"fresh\"} 3"),
        "{metrics}"
    );
    op.stop().await;
}

/// Over budget, the answer, the audit annotation and the Event still name
/// the pods that will go (from the costs as they stand), and the warning
/// says how many writes were missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_budget_the_answer_still_names_the_pods_that_go() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let (mut cfg, hook) = with_hook(
        "op-0",
        HookConfig {
            webhook_budget: Duration::from_millis(800),
            ..HookConfig::default()
        },
    );
    cfg.debounce = Duration::from_secs(3600);
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    // every pod write takes 3 s from now on
    fake.inject(
        Fault::delay(Duration::from_secs(3))
            .on(Verb::Patch, "pods")
            .always(),
    );
    let http = http_client();
    let answer = post_review(&http, hook, review("u-1", "web", 4, 3, false)).await;
    let r = &answer["response"];
    assert_eq!(r["allowed"], true, "{answer}");
    let warning = r["warnings"][0].as_str().unwrap_or_default();
    assert!(
        warning.contains("0 of 1 write(s) in place, 1 missing"),
        "{answer}"
    );
    assert!(
        warning.contains("predicted from the costs as they stand"),
        "{answer}"
    );
    // no cost landed: the costs as they stand (none) leave the four pods
    // tied, and the controller takes the first of its list
    assert_eq!(victims(&answer).len(), 1, "{answer}");
    eventually(
        Duration::from_secs(10),
        "a Warning Event names the victim",
        || async {
            victim_events(&fake, "web").iter().any(|e| {
                e["type"] == "Warning"
                    && e["note"]
                        .as_str()
                        .is_some_and(|n| n.contains("predicted victims web-rs/web-"))
            })
        },
    )
    .await;
    let metrics = op.metrics().await;
    assert!(
        metrics.contains("deletion_cost_scale_webhook_calls_total{outcome=\"budget_exceeded\"} 1"),
        "{metrics}"
    );
    fake.clear_faults();
    op.stop().await;
}

/// `writes: OnScaleIn`: no cost in the background, a status that says so
/// until a scale-in call comes, then only what that scale-in needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_scale_in_writes_nothing_until_a_scale_in_needs_it() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let mut policy = fake
        .get_json("DeletionCostPolicy", NS, "web")
        .expect("the policy");
    policy["spec"]["writes"] = json!("OnScaleIn");
    fake.apply_json(policy).expect("OnScaleIn");
    let (cfg, hook) = with_hook("op-0", HookConfig::default());
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    let scale_ins = |fake: &FakeApi| {
        support::operator::condition(fake, "web", "ScaleInsFresh")
            .map(|c| (c["status"].clone(), c["reason"].clone()))
    };
    eventually(
        Duration::from_secs(20),
        "the status says nothing is written",
        || {
            std::future::ready(
                scale_ins(&fake) == Some((json!("False"), json!("NoScaleInCallSeen"))),
            )
        },
    )
    .await;
    assert!(
        fake.writes_to("pods").is_empty(),
        "nothing in the background"
    );
    let answer = post_review(&http_client(), hook, review("u-1", "web", 4, 3, false)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(
        fake.writes_to("pods").len(),
        1,
        "one write for a scale-in by one"
    );
    let v = victims(&answer);
    assert!(v == ["web-rs/web-0"] || v == ["web-rs/web-1"], "{answer}");
    eventually(
        Duration::from_secs(20),
        "the status counts the scale-in",
        || std::future::ready(scale_ins(&fake).is_some_and(|(s, _)| s == "True")),
    )
    .await;
    // the reconciles that followed wrote nothing more
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.writes_to("pods").len(), 1);
    op.stop().await;
}

/// Sets (or with `None` removes) a label on pod `name` of the fake, as an
/// autoscaler would: a merge patch.
async fn label_pod(fake: &FakeApi, name: &str, key: &str, value: Option<&str>) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, Patch, PatchParams};
    let pods: Api<Pod> = Api::namespaced(fake.client(), NS);
    pods.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {key: value}}})),
    )
    .await
    .expect("the label is set");
}

/// "Mark, then scale": a marker set a moment before the scale-in counts,
/// though the pod watch has not shown it yet, and puts the marked pod
/// before the policy's choice and before a neighbour whose foreign cost is
/// far below every cost the policy writes. The answer and the Event say
/// the pod goes first because it is marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_marked_a_moment_before_the_scale_in_goes_first_though_the_watch_lags() {
    use deletion_cost::marker::{KEP_PREFER_FOR_SCALE_DOWN, PREFER_FOR_SCALE_DOWN};
    let fake = FakeApi::start().await;
    seed(&fake);
    // web-0 (spot, the policy's first choice) carries a value someone else set
    let mut pod = fake.get_json("Pod", NS, "web-0").expect("web-0");
    pod["metadata"]["annotations"] = json!({POD_DELETION_COST: "-1000"});
    fake.apply_json(pod).expect("a foreign cost");
    let (mut cfg, hook) = with_hook("op-0", HookConfig::default());
    cfg.debounce = Duration::from_secs(3600);
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    let http = http_client();

    // the pod watch falls behind: it shows nothing new for 1.5 s (within
    // the webhook's budget, which waits for its own writes to show)
    lag_pod_watch(&fake).await;
    // web-3 is on-demand, the policy's last choice
    label_pod(&fake, "web-3", PREFER_FOR_SCALE_DOWN, Some("true")).await;
    let writes_before = fake.writes_to("pods").len();
    let answer = post_review(&http, hook, review("u-1", "web", 4, 3, false)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(answer["response"]["warnings"].is_null(), "{answer}");
    assert_eq!(victims(&answer), ["web-rs/web-3"], "{answer}");
    // one write: web-3 below web-0's -1000; web-0 is not touched
    let pods_written: Vec<String> = fake.writes_to("pods")[writes_before..]
        .iter()
        .filter_map(|w| w.name.clone())
        .collect();
    assert_eq!(pods_written, ["web-3"]);
    let cost = |p: &str| {
        fake.get_json("Pod", NS, p).and_then(|v| {
            v["metadata"]["annotations"][POD_DELETION_COST]
                .as_str()
                .and_then(|c| c.parse::<i32>().ok())
        })
    };
    assert!(
        cost("web-3").is_some_and(|c| c < -1000),
        "{:?}",
        cost("web-3")
    );
    assert_eq!(cost("web-0"), Some(-1000));
    eventually(
        Duration::from_secs(10),
        "the Event says web-3 goes first because it is marked",
        || async {
            victim_events(&fake, "web").iter().any(|e| {
                e["note"].as_str().is_some_and(|n| {
                    n.contains("predicted victims web-rs/web-3")
                        && n.contains("first because marked for scale-down: web-3")
                })
            })
        },
    )
    .await;

    // the controller deletes web-3; then, ahead of the watch again, web-1
    // is marked and unmarked, and web-2 takes the proposal's label (no
    // value): web-2 goes, not web-1
    fake.delete_json("Pod", NS, "web-3").expect("web-3 deleted");
    tokio::time::sleep(Duration::from_millis(500)).await;
    label_pod(&fake, "web-1", PREFER_FOR_SCALE_DOWN, Some("true")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    lag_pod_watch(&fake).await;
    label_pod(&fake, "web-1", PREFER_FOR_SCALE_DOWN, None).await;
    label_pod(&fake, "web-2", KEP_PREFER_FOR_SCALE_DOWN, Some("")).await;
    let answer = post_review(&http, hook, review("u-2", "web", 3, 2, false)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(victims(&answer), ["web-rs/web-2"], "{answer}");
    op.stop().await;
}

/// Makes the pod watch show nothing new for 1.5 s: its connection closed,
/// and its next request held back.
async fn lag_pod_watch(fake: &FakeApi) {
    fake.inject(Fault::delay(Duration::from_millis(1500)).on(Verb::Watch, "pods"));
    fake.close_watches();
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// The background round honours a marker too: labelling one pod (nothing
/// else changes) makes the operator write that pod's cost below every other
/// pod's, and that pod's only; taking the marker off gives it back the
/// policy's cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_round_writes_a_marked_pods_cost_and_only_its() {
    use deletion_cost::marker::PREFER_FOR_SCALE_DOWN;
    let fake = FakeApi::start().await;
    seed(&fake);
    let (cfg, _hook) = with_hook("op-0", HookConfig::default());
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    let policy_costs = || {
        costs(&fake, "web")
            == [
                Some("10".to_string()),
                Some("10".to_string()),
                Some("100".to_string()),
                Some("100".to_string()),
            ]
    };
    eventually(Duration::from_secs(10), "the policy's costs", || async {
        policy_costs()
    })
    .await;
    let before = fake.writes_to("pods").len();
    label_pod(&fake, "web-3", PREFER_FOR_SCALE_DOWN, Some("true")).await;
    eventually(
        Duration::from_secs(10),
        "web-3 written below every other pod",
        || async {
            costs(&fake, "web")[3]
                .as_deref()
                .and_then(|c| c.parse::<i32>().ok())
                .is_some_and(|c| c < 10)
        },
    )
    .await;
    let written: Vec<String> = fake.writes_to("pods")[before..]
        .iter()
        .filter_map(|w| w.name.clone())
        .filter(|n| n != "web-3")
        .collect();
    assert!(written.is_empty(), "{written:?}");
    label_pod(&fake, "web-3", PREFER_FOR_SCALE_DOWN, None).await;
    eventually(Duration::from_secs(10), "web-3 back at 100", || async {
        policy_costs()
    })
    .await;
    op.stop().await;
}

/// Issue 52: a scale-in reads its nodes' labels as the server holds them in
/// one list whatever their number: 300 nodes, one pod each, three of them
/// turned spot a moment before the scale-in. One node carries no hostname
/// label (a kubelet never registered it so): it alone is read by a GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_in_reads_three_hundred_nodes_in_one_list() {
    const N: usize = 300;
    let fake = FakeApi::start().await;
    let node = |i: usize, class: &str| {
        let mut labels = json!({"karpenter.sh/capacity-type": class});
        if i != N - 1 {
            labels["kubernetes.io/hostname"] = json!(format!("n-{i}"));
        }
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("n-{i}"), "labels": labels}})
    };
    for i in 0..N {
        fake.apply_json(node(i, "on-demand")).expect("a node");
    }
    fake.apply_json(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-rs", "namespace": NS, "uid": "web-rs-uid",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": "web-uid", "controller": true}]},
        "spec": {"replicas": N, "selector": {"matchLabels": {"app": "web"}}}}))
        .expect("a ReplicaSet");
    for i in 0..N {
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{i}"), "namespace": NS, "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs",
                    "uid": "web-rs-uid", "controller": true}]},
            "spec": {"nodeName": format!("n-{i}"), "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}]}}))
        .expect("a pod");
    }
    fake.apply_json(
        json!({"apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"targetRef": {"kind": "Deployment", "name": "web"}, "writes": "OnScaleIn",
            "signals": [{"billingClass": {"nodeLabel": "karpenter.sh/capacity-type",
                "costs": {"spot": 10, "on-demand": 100}, "default": 50}}]}}),
    )
    .expect("a policy");
    let (cfg, hook) = with_hook("op-0", HookConfig::default());
    let op = Operator::start(&fake, cfg).serving(&fake).await;

    let turned = [7, 150, N - 1];
    for i in turned {
        fake.apply_json(node(i, "spot")).expect("a node relabelled");
    }
    let sent = tokio::time::Instant::now();
    let answer = post_review(
        &http_client(),
        hook,
        review("u-1", "web", N as i64, 297, false),
    )
    .await;
    assert!(answer["response"]["warnings"].is_null(), "{answer}");
    let mut want = turned.map(|i| format!("web-rs/web-{i}")).to_vec();
    want.sort();
    assert_eq!(victims(&answer), want, "{answer}");
    let reads: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.at >= sent && r.path.starts_with("/api/v1/nodes"))
        .filter(|r| r.query_param("watch").is_none())
        .collect();
    let lists: Vec<_> = reads.iter().filter(|r| r.name.is_none()).collect();
    let gets: Vec<_> = reads.iter().filter_map(|r| r.name.clone()).collect();
    assert_eq!(lists.len(), 1, "one list for 300 nodes: {reads:?}");
    assert!(
        lists[0]
            .query_param("labelSelector")
            .is_some_and(|s| s.starts_with("kubernetes.io/hostname in (")),
        "{:?}",
        lists[0]
    );
    assert_eq!(
        gets,
        [format!("n-{}", N - 1)],
        "a GET for the node without a hostname"
    );
    let metrics = op.metrics().await;
    for line in [
        "deletion_cost_scale_in_node_requests_total{request=\"list\"} 1",
        "deletion_cost_scale_in_node_requests_total{request=\"get\"} 1",
    ] {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }
    op.stop().await;
}
