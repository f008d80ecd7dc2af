//! Every scale-in priced as it happens (issue 39, items 3 and 4), on the
//! real API server: the operator runs with `--prices`, the shipped scale-in
//! webhook is registered, and a spot-first policy's Deployment (10 pods, two
//! on each of two spot and three on-demand nodes) is scaled in five times,
//! HPA-style. The `ScaleInVictims` Events, the metrics and
//! `status.pricedScaleIns` must agree: the totals are the sum of what the Events
//! report. A node the policy emptied, deleted by the test (standing in for
//! the autoscaler), counts as removed. After a restart of the operator the
//! status keeps the totals, the new process goes on watching the freed
//! node left, and a sixth scale-in adds to them.

use std::collections::BTreeSet;
use std::time::Duration;

use deletion_cost::plan::prices::Money;
use deletion_cost_testkit::eventually;
use kube::Api;
use serde_json::{json, Value};

use super::exact_at_size::hpa_scale;
use super::scale_series::{shipped_webhook, Registered};
use super::{
    apply_policy, finished, loopback_certificate, nodes, pod_template, policy, spot_first,
    status_value, terminating, wait_costs_landed, wait_running,
};
use crate::cluster::Env;
use crate::operator::{Operator, Options};

const IDENTITY: &str = "q-priced-operator";
const REPLICAS: i32 = 10;
const PRICES: &str = "currency: USD\nbillingClasses: {spot: 0.0416, on-demand: 0.192}\n";

/// What the Events said one choice freed, summed.
#[derive(Debug, Default, PartialEq, Eq)]
struct Reported {
    victims: u64,
    nodes: u64,
    hourly: Money,
}

/// One choice's figures in a `ScaleInVictims` note: `with the policy 1
/// victim(s) free 1 node(s) (n), 0.0416 USD/h; by the default order ...`.
fn reported(note: &str, choice: &str) -> Reported {
    let rest = note
        .split(choice)
        .nth(1)
        .unwrap_or_else(|| panic!("no {choice:?} in the Event {note:?}"));
    let before = |marker: &str| -> &str {
        rest.split(marker)
            .next()
            .and_then(|s| s.split_whitespace().last())
            .unwrap_or_else(|| panic!("nothing before {marker:?} in {note:?}"))
    };
    Reported {
        victims: before(" victim(s)")
            .parse()
            .unwrap_or_else(|e| panic!("{e}: {note}")),
        nodes: before(" node(s)")
            .parse()
            .unwrap_or_else(|e| panic!("{e}: {note}")),
        hourly: Money::parse_amount(before(" USD/h"))
            .unwrap_or_else(|| panic!("no amount in {note:?}")),
    }
}

/// The notes of the `ScaleInVictims` Events on Deployment web.
async fn notes(env: &Env, ns: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.client.clone(), ns);
    events
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ScaleInVictims"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("web"))
        .filter_map(|e| e.note)
        .collect()
}

/// The sums of what the Events said, per choice.
fn sums(notes: &[String], choice: &str) -> Reported {
    let mut out = Reported::default();
    for n in notes {
        let r = reported(n, choice);
        out.victims += r.victims;
        out.nodes += r.nodes;
        out.hourly = out.hourly + r.hourly;
    }
    out
}

async fn scale_ins(env: &Env, ns: &str) -> Value {
    status_value(&policy(env, ns, "web").await)["pricedScaleIns"].clone()
}

fn amount(v: &Value) -> Money {
    v.as_str()
        .and_then(Money::parse_amount)
        .unwrap_or_else(|| panic!("not an amount: {v}"))
}

/// The status totals of a choice as the Events' sums.
fn status_choice(totals: &Value, field: &str) -> Reported {
    Reported {
        victims: totals[field]["victims"].as_u64().unwrap_or_default(),
        nodes: totals[field]["nodes"].as_u64().unwrap_or_default(),
        hourly: amount(&totals[field]["hourly"]),
    }
}

/// The operator's counters for a choice.
async fn metric_choice(op: &Operator, ns: &str, choice: &str) -> Reported {
    let labels = format!("{{policy=\"{ns}/web\",choice=\"{choice}\"}}");
    let get = |name: &str| {
        let series = format!("{name}{labels}");
        async move { op.metric(&series).await.unwrap_or_default() }
    };
    Reported {
        victims: get("deletion_cost_scale_in_victims_total").await as u64,
        nodes: get("deletion_cost_scale_in_freed_nodes_total").await as u64,
        hourly: Money::from_price(get("deletion_cost_scale_in_freed_hourly_total").await)
            .unwrap_or_default(),
    }
}

/// Scales web in by one, HPA-style, and waits for the controller's deletion
/// and for the scale-in's Event.
async fn scale_in_once(env: &Env, ns: &str, replicas: &mut i32, events: usize) {
    let before = terminating(env, ns, "web").await.len();
    *replicas -= 1;
    hpa_scale(env, ns, "web", *replicas).await;
    eventually(
        Duration::from_secs(60),
        &format!("the controller deletes a pod of {ns}/web ({replicas} left)"),
        || async { terminating(env, ns, "web").await.len() > before },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        &format!("{events} ScaleInVictims Event(s) with their price"),
        || async { notes(env, ns).await.len() >= events },
    )
    .await;
}

fn operator_options(identity: &str, args: &[String]) -> Options {
    let mut opts = Options::new(identity);
    opts.args = args.to_vec();
    opts
}

/// Waits until `status.pricedScaleIns` counts `priced` scale-ins, then checks its
/// totals are the sum of what the Events said.
async fn assert_status_is_the_events_sum(env: &Env, ns: &str, priced: u64) -> Value {
    eventually(
        Duration::from_secs(60),
        &format!("status.pricedScaleIns counts {priced} scale-ins"),
        || async { scale_ins(env, ns).await["priced"].as_u64() == Some(priced) },
    )
    .await;
    let notes = notes(env, ns).await;
    assert_eq!(notes.len() as u64, priced, "{notes:#?}");
    let totals = scale_ins(env, ns).await;
    for (choice, field) in [
        ("with the policy ", "withPolicy"),
        ("by the default order ", "byDefault"),
    ] {
        assert_eq!(
            status_choice(&totals, field),
            sums(&notes, choice),
            "status.pricedScaleIns.{field} against the Events: {totals}\n{notes:#?}"
        );
    }
    totals
}

pub(super) async fn q_priced_scale_ins(env: &'static Env) {
    env.scenario("q-priced", |ns| async move {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        nodes(env, &ns, 2, 3).await;
        let mut template = pod_template(&ns, "web");
        template["spec"]["topologySpreadConstraints"] = json!([{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}}}]);
        super::deployment(env, &ns, "web", REPLICAS, json!({"template": template})).await;
        wait_running(env, &ns, "web", REPLICAS as usize).await;

        let prices = dir.path().join("prices.yaml");
        std::fs::write(&prices, PRICES).unwrap_or_else(|e| panic!("{e}"));
        let (cert, key, ca) = loopback_certificate(dir.path());
        let args: Vec<String> = [
            "--hook-tls-cert",
            &cert.to_string_lossy(),
            "--hook-tls-key",
            &key.to_string_lossy(),
            "--prices",
            &prices.to_string_lossy(),
            "--node-removal-window",
            "600",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut op = Operator::start(env, operator_options(IDENTITY, &args)).await;
        op.wait_ready().await;
        apply_policy(env, &ns, "web", spot_first("web")).await;
        wait_costs_landed(env, &ns, "web", "web").await;
        let webhook = Registered::create(env, &shipped_webhook(&ns, op.hook, &ca)).await;

        // five scale-ins: the four spot pods go first, and empty both spot nodes
        let mut replicas = REPLICAS;
        for i in 1..=5 {
            scale_in_once(env, &ns, &mut replicas, i).await;
        }
        let totals = assert_status_is_the_events_sum(env, &ns, 5).await;
        let notes_5 = notes(env, &ns).await;
        for (choice, label) in [
            ("with the policy ", "policy"),
            ("by the default order ", "default"),
        ] {
            assert_eq!(
                metric_choice(&op, &ns, label).await,
                sums(&notes_5, choice),
                "the {label} counters against the Events"
            );
        }
        assert_eq!(
            op.metric(&format!(
                "deletion_cost_scale_ins_priced_total{{policy=\"{ns}/web\"}}"
            ))
            .await,
            Some(5.0)
        );
        let freed: Vec<String> = totals["awaitingRemoval"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["node"].as_str().map(str::to_string))
            .collect();
        let spot: BTreeSet<String> = (0..2).map(|i| format!("{ns}-spot-{i}")).collect();
        assert_eq!(
            freed.iter().cloned().collect::<BTreeSet<_>>(),
            spot,
            "the policy emptied both spot nodes: {totals}"
        );
        assert_eq!(
            amount(&totals["withPolicy"]["hourly"]),
            Money::parse_amount("0.0832").unwrap_or_default(),
            "{totals}"
        );
        for n in notes_5
            .iter()
            .filter(|n| !n.contains("victim(s) free 0 node(s)"))
        {
            eprintln!("q-priced: an Event of a scale-in that freed a node: {n}");
        }
        eprintln!(
            "q-priced: five scale-ins: with the policy {:?}, by the default order {:?}",
            sums(&notes_5, "with the policy "),
            sums(&notes_5, "by the default order ")
        );

        // the autoscaler removes the first node the policy freed
        env.kubelet.remove_node(&freed[0]).await;
        eventually(
            Duration::from_secs(60),
            &format!("{} counted as removed", freed[0]),
            || async {
                let t = scale_ins(env, &ns).await;
                t["removed"]["nodes"] == 1
                    && t["awaitingRemoval"].as_array().map(Vec::len) == Some(1)
            },
        )
        .await;
        let removed = format!(
            "deletion_cost_freed_nodes_settled_total{{policy=\"{ns}/web\",outcome=\"removed\"}}"
        );
        assert_eq!(op.metric(&removed).await, Some(1.0));
        let before_restart = scale_ins(env, &ns).await;
        assert_eq!(
            amount(&before_restart["removed"]["hourly"]),
            Money::parse_amount("0.0416").unwrap_or_default()
        );

        // a restart: the status keeps the totals, the new process goes on
        webhook.remove(env).await;
        op.signal(libc::SIGTERM);
        assert!(
            op.wait_exit(Duration::from_secs(30)).await.is_some(),
            "the operator stops on SIGTERM"
        );
        let op = Operator::start(env, operator_options(&format!("{IDENTITY}-2"), &args)).await;
        op.wait_ready().await;
        eventually(
            Duration::from_secs(60),
            "the new process leads and reconciles",
            || async {
                op.is_leader().await
                    && op
                        .metric("deletion_cost_reconciles_total{result=\"ok\"}")
                        .await
                        .unwrap_or_default()
                        >= 1.0
            },
        )
        .await;
        assert_eq!(
            scale_ins(env, &ns).await,
            before_restart,
            "the restart changed the totals"
        );
        // the freed node still watched is the new process's to follow
        env.kubelet.remove_node(&freed[1]).await;
        eventually(
            Duration::from_secs(60),
            &format!("{} counted as removed after the restart", freed[1]),
            || async {
                let t = scale_ins(env, &ns).await;
                t["removed"]["nodes"] == 2 && t.get("awaitingRemoval").is_none()
            },
        )
        .await;
        let webhook = Registered::create(env, &shipped_webhook(&ns, op.hook, &ca)).await;
        scale_in_once(env, &ns, &mut replicas, 6).await;
        let totals = assert_status_is_the_events_sum(env, &ns, 6).await;
        assert_eq!(totals["removed"]["nodes"], 2, "{totals}");
        assert_eq!(
            op.metric(&format!(
                "deletion_cost_scale_ins_priced_total{{policy=\"{ns}/web\"}}"
            ))
            .await,
            Some(1.0),
            "the new process counts what it priced"
        );
        webhook.remove(env).await;
        eprintln!("q-priced: after the restart: {totals}");
    })
    .await;
    finished("q-priced");
}
