//! Every scale-in priced as it happens (`run --prices`), against the fake
//! API server: the scale-in webhook's Event, the metrics and the policy's
//! status agree on what each scale-in freed with the policy and by the
//! default order; a freed node deleted within the window counts as
//! removed, one still there at its end as not; a restart goes on from the
//! totals in the status.

mod support;

use std::process::Command;
use std::time::Duration;

use deletion_cost::engine::{Pricing, SharedPrices};
use deletion_cost::hook::{HookConfig, HookTls};
use deletion_cost::operator::RunConfig;
use deletion_cost::plan::prices::Money;
use deletion_cost_testkit::fake_api::FakeApi;
use deletion_cost_testkit::{eventually, free_addr};
use serde_json::{json, Value};
use support::operator::{http_client, Operator, NS};

const PRICES: &str = "currency: USD\nbillingClasses: {spot: 0.04, on-demand: 0.19}\n";

/// Three nodes; Deployment web's ReplicaSet has web-0 alone on spot-1,
/// web-1 and web-2 on od-1 (web-2 Ready last), web-3 on od-2; the policy
/// puts spot pods first.
fn seed(fake: &FakeApi) {
    for (node, class) in [
        ("spot-1", "spot"),
        ("od-1", "on-demand"),
        ("od-2", "on-demand"),
    ] {
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {"karpenter.sh/capacity-type": class}}}))
            .expect("a node");
    }
    fake.apply_json(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-rs", "namespace": NS, "uid": "web-rs-uid",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": "web-uid", "controller": true}]},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}}}}))
        .expect("a ReplicaSet");
    for (i, node) in ["spot-1", "od-1", "od-1", "od-2"].into_iter().enumerate() {
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{i}"), "namespace": NS, "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs",
                    "uid": "web-rs-uid", "controller": true}]},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True",
                    "lastTransitionTime": format!("2026-11-0{}T00:00:00Z", i + 1)}]}}))
        .expect("a pod");
    }
    fake.apply_json(
        json!({"apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"targetRef": {"kind": "Deployment", "name": "web"}, "combine": "sum",
            "signals": [{"billingClass": {"nodeLabel": "karpenter.sh/capacity-type",
                "costs": {"spot": 10, "on-demand": 100}, "default": 50}}]}}),
    )
    .expect("a policy");
}

fn config(window: Duration) -> RunConfig {
    let mut cfg = support::operator::config("op-0", 100.0, 100);
    cfg.metrics_addr = free_addr();
    cfg.hook_addr = Some(free_addr());
    cfg.hook = HookConfig {
        tls: HookTls::PlainHttp,
        settle_delay: Duration::from_millis(50),
        ..HookConfig::default()
    };
    cfg.pricing = Some(Pricing {
        prices: SharedPrices::new(
            deletion_cost::input::parse_prices("prices.yaml", PRICES).expect("prices"),
        ),
        removal_window: window,
    });
    cfg
}

/// An AdmissionReview for an update of `deployments/scale` from `from` to
/// `to` replicas, as the HPA sends it.
fn review(uid: &str, from: i64, to: i64) -> Value {
    let scale = |n: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "web", "namespace": NS}, "spec": {"replicas": n}})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid,
        "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "subResource": "scale",
        "name": "web", "namespace": NS, "operation": "UPDATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"},
        "object": scale(to), "oldObject": scale(from), "dryRun": false}})
}

async fn admit(op: &Operator, body: Value) -> Value {
    let resp = http_client()
        .post(format!("http://{}/v1/admit-scale-in", op.hook_addr()))
        .json(&body)
        .send()
        .await
        .expect("the webhook answers");
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.expect("a JSON AdmissionReview");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    answer
}

/// The notes of the `ScaleInVictims` Events on Deployment web.
fn notes(fake: &FakeApi) -> Vec<String> {
    fake.writes_to("events")
        .iter()
        .filter_map(|w| serde_json::from_slice::<Value>(&w.body).ok())
        .filter(|e| e["reason"] == "ScaleInVictims" && e["regarding"]["name"] == "web")
        .filter_map(|e| e["note"].as_str().map(str::to_string))
        .collect()
}

/// What an Event says one choice freed: (victims, nodes, hourly).
fn reported(note: &str, choice: &str) -> (u64, u64, Money) {
    let rest = note
        .split(choice)
        .nth(1)
        .unwrap_or_else(|| panic!("no {choice:?} in {note}"));
    let number = |after: &str| -> &str {
        rest.split(after)
            .next()
            .and_then(|s| s.split_whitespace().last())
            .unwrap_or_else(|| panic!("no number before {after:?} in {note}"))
    };
    let victims = number(" victim(s)").parse().expect("victims");
    let nodes = number(" node(s)").parse().expect("nodes");
    let hourly = Money::parse_amount(number(" USD/h")).expect("an amount");
    (victims, nodes, hourly)
}

/// The policy's `status.pricedScaleIns`, once it has one.
fn totals(fake: &FakeApi) -> Option<Value> {
    fake.get_json("deletioncostpolicies", NS, "web")?
        .pointer("/status/pricedScaleIns")
        .cloned()
}

fn amount(v: &Value) -> Money {
    v.as_str()
        .and_then(Money::parse_amount)
        .unwrap_or_else(|| panic!("not an amount: {v}"))
}

/// The sample of a series in the metrics text.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_ins_are_priced_and_their_nodes_followed_across_a_restart() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let op = Operator::start(&fake, config(Duration::from_secs(3600)))
        .serving(&fake)
        .await;

    // 4 -> 3: the policy deletes web-0, alone on spot-1; the default order
    // deletes one of the two pods on od-1, which frees nothing
    let answer = admit(&op, review("u-1", 4, 3)).await;
    assert_eq!(
        answer["response"]["auditAnnotations"]["victims"],
        "web-rs/web-0"
    );
    // the ReplicaSet controller deletes it: the scale-in is priced over the
    // pods seen going
    fake.delete_json("Pod", NS, "web-0").expect("web-0 deleted");
    eventually(
        Duration::from_secs(10),
        "the Event says what the scale-in freed",
        || std::future::ready(notes(&fake).len() == 1),
    )
    .await;
    let first = notes(&fake)[0].clone();
    assert!(
        first.contains(
            "with the policy 1 victim(s) free 1 node(s) (spot-1), 0.04 USD/h; \
             by the default order 1 victim(s) would free 0 node(s), 0.00 USD/h; predicted victims web-rs/web-0"
        ),
        "{first}"
    );
    let metrics = op.metrics().await;
    let policy = "policy=\"shop/web\"";
    for (series, v) in [
        (
            format!("deletion_cost_scale_ins_priced_total{{{policy}}}"),
            1.0,
        ),
        (
            format!("deletion_cost_scale_in_freed_nodes_total{{{policy},choice=\"policy\"}}"),
            1.0,
        ),
        (
            format!("deletion_cost_scale_in_freed_nodes_total{{{policy},choice=\"default\"}}"),
            0.0,
        ),
        (
            format!("deletion_cost_scale_in_freed_hourly_total{{{policy},choice=\"policy\"}}"),
            0.04,
        ),
        (
            format!("deletion_cost_scale_in_victims_total{{{policy},choice=\"default\"}}"),
            1.0,
        ),
        (
            format!("deletion_cost_freed_nodes_awaiting_removal{{{policy}}}"),
            1.0,
        ),
    ] {
        assert_eq!(sample(&metrics, &series), Some(v), "{series} in\n{metrics}");
    }
    eventually(Duration::from_secs(30), "the status counts it", || {
        std::future::ready(totals(&fake).is_some_and(|t| t["priced"] == 1))
    })
    .await;
    let t = totals(&fake).expect("totals");
    assert_eq!(t["currency"], "USD");
    assert_eq!(t["withPolicy"]["nodes"], 1);
    assert_eq!(
        amount(&t["withPolicy"]["hourly"]),
        Money::parse_amount("0.04").unwrap()
    );
    assert_eq!(t["byDefault"]["nodes"], 0);
    assert_eq!(t["awaitingRemoval"][0]["node"], "spot-1");
    assert_eq!(t["last"]["by"], "webhook");

    // the autoscaler removes spot-1: counted as removed
    fake.delete_json("Node", "", "spot-1")
        .expect("spot-1 deleted");
    eventually(Duration::from_secs(30), "spot-1 counted as removed", || {
        std::future::ready(
            totals(&fake)
                .is_some_and(|t| t["removed"]["nodes"] == 1 && t.get("awaitingRemoval").is_none()),
        )
    })
    .await;
    let metrics = op.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            &format!("deletion_cost_freed_nodes_settled_total{{{policy},outcome=\"removed\"}}")
        ),
        Some(1.0),
        "{metrics}"
    );
    let page = http_client()
        .get(format!("http://{}/policies/{NS}/web", op.metrics_addr()))
        .send()
        .await
        .expect("the page")
        .text()
        .await
        .expect("its text");
    assert!(page.contains("1 scale-in(s) priced"), "{page}");
    assert!(page.contains("<b>1 removed</b> (0.04 USD/h)"), "{page}");

    // a restart: the new process goes on from the status
    op.stop().await;
    let op = Operator::start(&fake, config(Duration::from_secs(2)))
        .serving(&fake)
        .await;
    // 3 -> 1: the three on-demand pods tie; whichever two the answer
    // names, the controller deletes the two on od-1 (the doubled up), and
    // those are the ones priced
    admit(&op, review("u-2", 3, 1)).await;
    for pod in ["web-1", "web-2"] {
        fake.delete_json("Pod", NS, pod).expect("deleted");
    }
    eventually(Duration::from_secs(10), "a second Event", || {
        std::future::ready(notes(&fake).len() == 2)
    })
    .await;
    // od-1 stays past its 2 s window: not removed
    eventually(Duration::from_secs(30), "the status counts both", || {
        std::future::ready(
            totals(&fake).is_some_and(|t| t["priced"] == 2 && t["notRemoved"]["nodes"] == 1),
        )
    })
    .await;

    // the status totals are the sum of what the Events said
    let t = totals(&fake).expect("totals");
    for (choice, field) in [
        ("with the policy ", "withPolicy"),
        ("by the default order ", "byDefault"),
    ] {
        let (mut victims, mut nodes, mut hourly) = (0, 0, Money::ZERO);
        for note in notes(&fake) {
            let (v, n, h) = reported(&note, choice);
            victims += v;
            nodes += n;
            hourly = hourly + h;
        }
        assert_eq!(t[field]["victims"], victims, "{field}: {t}");
        assert_eq!(t[field]["nodes"], nodes, "{field}: {t}");
        assert_eq!(amount(&t[field]["hourly"]), hourly, "{field}: {t}");
    }
    assert_eq!(t["withPolicy"]["nodes"], 2, "{t}");
    assert_eq!(t["removed"]["nodes"], 1, "{t}");
    assert_eq!(
        amount(&t["notRemoved"]["hourly"]),
        Money::parse_amount("0.19").unwrap()
    );
    // this process's metrics count what it priced itself
    let metrics = op.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            &format!("deletion_cost_scale_ins_priced_total{{{policy}}}")
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            &format!("deletion_cost_freed_nodes_settled_total{{{policy},outcome=\"not_removed\"}}")
        ),
        Some(1.0),
        "{metrics}"
    );
    op.stop().await;
}

#[test]
fn a_bad_prices_file_stops_run_before_it_starts_naming_the_field() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let bad = dir.path().join("prices.yaml");
    std::fs::write(&bad, "billingClasses: {spot: -0.1}\n").expect("written");
    for (args, says) in [
        (
            vec!["--prices".to_string(), bad.display().to_string()],
            "billingClasses.spot: must be a price per hour",
        ),
        (
            vec![
                "--prices".to_string(),
                dir.path().join("missing.yaml").display().to_string(),
            ],
            "missing.yaml",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
            .arg("run")
            .args(&args)
            .output()
            .expect("deletion-cost runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
}
