//! The scenarios, each asserting its outcome on the real API server.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use deletion_cost::annotations::POD_DELETION_COST;
use deletion_cost::policy::DeletionCostPolicy;
use deletion_cost_testkit::eventually;
use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::params::ValidationDirective;
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

use crate::cluster::{labels, Env, MANAGER, POOL_LABEL, SUITE_LABEL};
use crate::kubelet::PodHealth;
use crate::operator::{Operator, Options};

mod consolidation_benchmark;
mod exact_at_size;
mod leader_faults;
mod marker;
mod priced_scale_ins;
mod scale_series;
mod soak;
mod write_budget;

type Scenario = fn(&'static Env) -> BoxFuture<'static, ()>;

/// Scenarios that run only when asked for (`--ignored`): the soak takes
/// half an hour.
pub const ON_REQUEST: &[&str] = &["w_soak_hpa_cadence_scale_ins_300_replicas"];

/// Every scenario, in the order they run; the RBAC check comes last because
/// it reads what all the others made the operator do.
pub const ALL: &[(&str, Scenario)] = &[
    ("a_crd_and_policies_validated_by_the_server", |e| {
        a_validation(e).boxed()
    }),
    ("b_controller_deletes_the_predicted_victims", |e| {
        b_core_promise(e).boxed()
    }),
    ("c_not_ready_pod_is_reported_and_deleted_first", |e| {
        c_not_ready(e).boxed()
    }),
    ("d_paused_rollout_two_replica_sets", |e| {
        d_paused_rollout(e).boxed()
    }),
    ("e_prescale_hook", |e| e_hook(e).boxed()),
    ("f_policy_deletion_keeps_foreign_costs", |e| {
        f_cleanup(e).boxed()
    }),
    ("g_replaced_pod_is_gone_not_failed", |e| {
        g_replaced_pod(e).boxed()
    }),
    ("h_leader_election_and_takeover", |e| {
        h_leadership(e).boxed()
    }),
    ("i_sigterm_within_grace_in_every_state", |e| {
        i_sigterm(e).boxed()
    }),
    ("j_write_rate_and_steady_state", |e| j_write_rate(e).boxed()),
    ("l_two_replicas_a_paused_and_a_killed_leader", |e| {
        l_two_replicas_under_faults(e).boxed()
    }),
    ("r_new_leader_catches_up_no_value_written_twice", |e| {
        r_handover(e).boxed()
    }),
    ("m_operator_and_plan_agree_across_namespaces", |e| {
        m_agreement(e).boxed()
    }),
    ("n_scale_in_webhook_makes_costs_fresh", |e| {
        n_scale_webhook(e).boxed()
    }),
    ("n_scale_series_four_scalers_webhook_off_then_on", |e| {
        scale_series::n_scale_series(e).boxed()
    }),
    (
        "q_scale_webhook_answers_only_the_api_servers_certificate",
        |e| q_webhook_callers(e).boxed(),
    ),
    ("p_exact_at_any_size_utilisation_20_and_300", |e| {
        exact_at_size::p_exact_at_size(e).boxed()
    }),
    ("q_priced_scale_ins_events_metrics_status_agree", |e| {
        priced_scale_ins::q_priced_scale_ins(e).boxed()
    }),
    ("o_live_reads_equal_a_saved_snapshot", |e| {
        o_live_reads(e).boxed()
    }),
    ("p_one_write_budget_for_twenty_policies", |e| {
        write_budget::p_write_budget(e).boxed()
    }),
    ("t_consolidation_benchmark_1000_700_20", |e| {
        consolidation_benchmark::t_consolidation_benchmark(e).boxed()
    }),
    ("u_marked_pods_go_first_with_every_scaler", |e| {
        marker::u_marked_pods_go_first(e).boxed()
    }),
    ("u_scale_in_remove_with_and_without_a_policy", |e| {
        marker::u_scale_in_remove(e).boxed()
    }),
    ("u_refused_removal_writes_nothing", |e| {
        marker::u_refused_removal(e).boxed()
    }),
    ("v_scale_ins_under_leader_faults", |e| {
        leader_faults::v_scale_ins_under_leader_faults(e).boxed()
    }),
    ("w_soak_hpa_cadence_scale_ins_300_replicas", |e| {
        soak::w_soak(e).boxed()
    }),
    ("k_install_manifests_and_namespace_installs", |e| {
        k_install(e).boxed()
    }),
    ("helm_chart_install_upgrade_uninstall", |e| {
        crate::helm::helm_chart(e).boxed()
    }),
    ("z_rbac_is_what_the_operator_used", |e| z_rbac(e).boxed()),
];

const CAPACITY: &str = "karpenter.sh/capacity-type";
const ZONE: &str = "topology.kubernetes.io/zone";
const SECOND: Duration = Duration::from_secs(1);

/// Scenarios that ran to the end (the RBAC check needs all of them).
static FINISHED: std::sync::Mutex<BTreeSet<&'static str>> = std::sync::Mutex::new(BTreeSet::new());

fn finished(name: &'static str) {
    if let Ok(mut f) = FINISHED.lock() {
        f.insert(name);
    }
}

// ---------------------------------------------------------------- helpers

/// `spot` spot nodes and `on_demand` on-demand nodes in the scenario's pool.
async fn nodes(env: &Env, ns: &str, spot: usize, on_demand: usize) {
    let mut list = Vec::new();
    for i in 0..spot {
        list.push((
            format!("spot-{i}"),
            labels(&[(CAPACITY, "spot"), (ZONE, "zone-a")]),
        ));
    }
    for i in 0..on_demand {
        list.push((
            format!("od-{i}"),
            labels(&[(CAPACITY, "on-demand"), (ZONE, "zone-b")]),
        ));
    }
    let refs: Vec<(&str, BTreeMap<String, String>)> =
        list.iter().map(|(n, l)| (n.as_str(), l.clone())).collect();
    env.kubelet.add_nodes(ns, &refs).await;
}

fn pod_template(ns: &str, app: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app, SUITE_LABEL: "true"}},
        "spec": {
            "nodeSelector": {POOL_LABEL: ns},
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
        }
    })
}

async fn deployment(
    env: &Env,
    ns: &str,
    name: &str,
    replicas: i32,
    extra_spec: Value,
) -> Deployment {
    let mut spec = json!({
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": pod_template(ns, name),
    });
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("deployment {name}: {e}"));
    Api::<Deployment>::namespaced(env.client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap_or_else(|e| panic!("creating deployment {ns}/{name}: {e}"))
}

async fn pods(env: &Env, ns: &str, app: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(env.client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap_or_else(|e| panic!("listing pods of {ns}/{app}: {e}"))
        .items
}

fn is_running_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().is_some_and(|s| {
            s.phase.as_deref() == Some("Running")
                && s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

async fn active_names(env: &Env, ns: &str, app: &str) -> BTreeSet<String> {
    pods(env, ns, app)
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect()
}

async fn terminating(env: &Env, ns: &str, app: &str) -> BTreeSet<String> {
    pods(env, ns, app)
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .map(|p| p.name_any())
        .collect()
}

async fn wait_running(env: &Env, ns: &str, app: &str, n: usize) {
    wait_running_within(env, ns, app, n, Duration::from_secs(60)).await;
}

/// Waits up to `within` until `n` pods of `app` run and are Ready.
async fn wait_running_within(env: &Env, ns: &str, app: &str, n: usize, within: Duration) {
    eventually(
        within,
        &format!("{n} pods of {ns}/{app} run and are Ready"),
        || async {
            pods(env, ns, app)
                .await
                .iter()
                .filter(|p| is_running_ready(p))
                .count()
                == n
        },
    )
    .await;
}

async fn apply_policy(env: &Env, ns: &str, name: &str, spec: Value) {
    let body = json!({
        "apiVersion": "deletioncost.dev/v1alpha1",
        "kind": "DeletionCostPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    });
    Api::<DeletionCostPolicy>::namespaced(env.client.clone(), ns)
        .patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(body))
        .await
        .unwrap_or_else(|e| panic!("applying policy {ns}/{name}: {e}"));
}

fn spot_first(app: &str) -> Value {
    json!({
        "targetRef": {"kind": "Deployment", "name": app},
        "signals": [{"billingClass": {"nodeLabel": CAPACITY, "costs": {"spot": 0, "on-demand": 1000}, "default": 500}}],
    })
}

async fn policy(env: &Env, ns: &str, name: &str) -> DeletionCostPolicy {
    Api::<DeletionCostPolicy>::namespaced(env.client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("reading policy {ns}/{name}: {e}"))
}

fn condition(p: &DeletionCostPolicy, t: &str) -> Option<(String, String)> {
    let v = serde_json::to_value(p.status.as_ref()?).ok()?;
    v["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

fn status_value(p: &DeletionCostPolicy) -> Value {
    serde_json::to_value(p.status.as_ref()).unwrap_or(Value::Null)
}

/// Waits until every active pod of `app` carries a cost and the policy has
/// no pending patches.
async fn wait_costs_landed(env: &Env, ns: &str, app: &str, policy_name: &str) {
    eventually(
        Duration::from_secs(90),
        &format!("every pod of {ns}/{app} carries its cost and {policy_name} has nothing pending"),
        || async {
            let all = pods(env, ns, app).await;
            let costed = all
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .all(|p| p.annotations().contains_key(POD_DELETION_COST));
            let st = status_value(&policy(env, ns, policy_name).await);
            costed && st["pendingPatches"].as_u64() == Some(0) && st["victims"].is_array()
        },
    )
    .await;
}

async fn scale(env: &Env, ns: &str, name: &str, replicas: i32) {
    Api::<Deployment>::namespaced(env.client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap_or_else(|e| panic!("scaling {ns}/{name}: {e}"));
}

/// The policy's status victims per ReplicaSet: (pods, pods in a tie at the cut).
fn status_victims(p: &DeletionCostPolicy) -> BTreeMap<String, (Vec<String>, BTreeSet<String>)> {
    let st = status_value(p);
    st["victims"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            let pods: Vec<String> = v["pods"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect();
            let ties: BTreeSet<String> = v["ties"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|t| t["pods"].as_array().into_iter().flatten())
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect();
            (
                v["replicaSet"].as_str().unwrap_or_default().to_string(),
                (pods, ties),
            )
        })
        .collect()
}

/// Writes a cluster snapshot of `ns` (pods, nodes, ReplicaSets, Deployments)
/// as `kubectl get -o json` prints a List.
async fn snapshot(env: &Env, ns: &str, dir: &Path) -> std::path::PathBuf {
    snapshot_across(env, ns, &[], dir).await
}

/// [`snapshot`], with the pods of the `also` namespaces too (their pods
/// share the scenario's nodes).
async fn snapshot_across(env: &Env, ns: &str, also: &[&str], dir: &Path) -> std::path::PathBuf {
    let lp = ListParams::default();
    let mut items: Vec<Value> = Vec::new();
    let to_values = |v: Vec<Value>| v;
    for pods_ns in std::iter::once(ns).chain(also.iter().copied()) {
        for p in Api::<Pod>::namespaced(env.client.clone(), pods_ns)
            .list(&lp)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
        {
            items.push(with_kind(
                serde_json::to_value(p).unwrap_or_default(),
                "v1",
                "Pod",
            ));
        }
    }
    for n in Api::<Node>::all(env.client.clone())
        .list(&ListParams::default().labels(&format!("{POOL_LABEL}={ns}")))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    {
        items.push(with_kind(
            serde_json::to_value(n).unwrap_or_default(),
            "v1",
            "Node",
        ));
    }
    for r in Api::<ReplicaSet>::namespaced(env.client.clone(), ns)
        .list(&lp)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    {
        items.push(with_kind(
            serde_json::to_value(r).unwrap_or_default(),
            "apps/v1",
            "ReplicaSet",
        ));
    }
    for d in Api::<Deployment>::namespaced(env.client.clone(), ns)
        .list(&lp)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    {
        items.push(with_kind(
            serde_json::to_value(d).unwrap_or_default(),
            "apps/v1",
            "Deployment",
        ));
    }
    let path = dir.join("snapshot.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": to_values(items)});
    std::fs::write(&path, serde_json::to_vec(&list).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    path
}

fn with_kind(mut v: Value, api_version: &str, kind: &str) -> Value {
    v["apiVersion"] = api_version.into();
    v["kind"] = kind.into();
    v
}

fn run_cli(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("deletion-cost {args:?}: {e}"));
    assert!(
        out.status.success(),
        "deletion-cost {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes the policy `namespace/name` with `spec` as a file `plan --policy` reads.
fn write_policy(dir: &Path, namespace: &str, name: &str, spec: &Value) -> std::path::PathBuf {
    let file = dir.join("policy.json");
    let policy = json!({
        "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec,
    });
    std::fs::write(&file, serde_json::to_vec(&policy).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    file
}

/// `plan`'s victims per ReplicaSet, and the pods of a tie at the cut.
fn plan_victims(
    policy_file: &Path,
    snapshot: &Path,
    by: usize,
) -> BTreeMap<String, (Vec<String>, BTreeSet<String>)> {
    plan_victims_as_of(policy_file, snapshot, by, None)
}

/// [`plan_victims`] with the comparator's clock at `now` (RFC 3339): the
/// log2 age buckets of ready and creation times are the controller's only
/// when judged at the moment it sorted.
fn plan_victims_as_of(
    policy_file: &Path,
    snapshot: &Path,
    by: usize,
    now: Option<&str>,
) -> BTreeMap<String, (Vec<String>, BTreeSet<String>)> {
    plan_victims_with(policy_file, snapshot, by, now, &[])
}

/// [`plan_victims_as_of`] with more flags (`--prometheus URL`).
fn plan_victims_with(
    policy_file: &Path,
    snapshot: &Path,
    by: usize,
    now: Option<&str>,
    extra: &[&str],
) -> BTreeMap<String, (Vec<String>, BTreeSet<String>)> {
    let (policy, snap, by_text) = (
        policy_file.to_string_lossy(),
        snapshot.to_string_lossy(),
        by.to_string(),
    );
    let mut args = vec![
        "plan",
        "--policy",
        &policy,
        "--snapshot",
        &snap,
        "--scale-down-by",
        &by_text,
        "-o",
        "json",
    ];
    if let Some(now) = now {
        args.extend(["--now", now]);
    }
    args.extend(extra);
    let out = run_cli(&args);
    let plans: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("plan -o json: {e}\n{out}"));
    plans
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| {
            // each pod's cost once the plan's patches landed
            let costs: BTreeMap<String, i64> = p["pods"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|pod| {
                    let cost = pod["desired"]
                        .as_i64()
                        .or_else(|| pod["current"].as_i64())?;
                    Some((pod["name"].as_str()?.to_string(), cost))
                })
                .collect();
            p["replicaSets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |r| (r, costs.clone()))
        })
        .map(|(r, costs)| {
            let victims = r["victims"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            let names = |v: &Value| -> Vec<String> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            let mut ties: BTreeSet<String> = names(&r["ambiguous"]).into_iter().collect();
            // a group of equals the cut runs through: upstream picks among
            // them by its informer's order (`ties` are ranges of `predicted`)
            if r["tieAtCut"] == true {
                let predicted = names(&r["predicted"]);
                for t in r["ties"].as_array().into_iter().flatten() {
                    let range = (t["start"].as_u64(), t["end"].as_u64());
                    if let (Some(start), Some(end)) = range {
                        let (start, end) = (start as usize, end as usize);
                        if start < by && by < end {
                            ties.extend(
                                predicted
                                    .get(start..end)
                                    .unwrap_or_default()
                                    .iter()
                                    .cloned(),
                            );
                        }
                    }
                }
            }
            // a run of pods the policy costs alike that the cut runs
            // through: the correction lets the live order pick among them
            // (docs/hook.md, the minimal correction)
            let predicted = names(&r["predicted"]);
            let cost_at = |i: usize| predicted.get(i).and_then(|n| costs.get(n)).copied();
            if by > 0 && cost_at(by - 1).is_some() && cost_at(by - 1) == cost_at(by) {
                let run = cost_at(by - 1);
                ties.extend(
                    predicted
                        .iter()
                        .filter(|n| costs.get(*n).copied() == run)
                        .cloned(),
                );
            }
            (
                r["name"].as_str().unwrap_or_default().to_string(),
                (victims, ties),
            )
        })
        .collect()
}

/// `predict`'s first `by` victims of the pods in `snapshot`.
fn predict_victims(snapshot: &Path, dir: &Path, app: &str, by: usize) -> Vec<String> {
    // predict reads pods only
    let list: Value =
        serde_json::from_slice(&std::fs::read(snapshot).unwrap_or_default()).unwrap_or_default();
    let pods: Vec<Value> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["kind"] == "Pod" && i["metadata"]["labels"]["app"] == app)
        .cloned()
        .collect();
    let file = dir.join(format!("pods-{app}.json"));
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": pods}))
            .unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    run_cli(&[
        "predict",
        "-f",
        &file.to_string_lossy(),
        "--scale-down-by",
        &by.to_string(),
        "-o",
        "names",
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

/// Two victim lists agree: position by position the same pod, or two pods
/// of the same tie (whose order upstream leaves to its informer).
fn same_modulo_tie(a: &[String], b: &[String], tie: &BTreeSet<String>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x == y || (tie.contains(x) && tie.contains(y)))
}

/// The deleted pods must be the predicted victims, except inside a tie at
/// the cut that the tool reported (upstream's choice there depends on its
/// informer's list order).
fn assert_matches(
    what: &str,
    deleted: &BTreeSet<String>,
    victims: &[String],
    tie: &BTreeSet<String>,
) {
    let certain: BTreeSet<String> = victims
        .iter()
        .filter(|v| !tie.contains(*v))
        .cloned()
        .collect();
    let allowed: BTreeSet<String> = victims.iter().cloned().chain(tie.iter().cloned()).collect();
    assert_eq!(
        deleted.len(),
        victims.len(),
        "{what}: deleted {deleted:?}, predicted {victims:?}"
    );
    assert!(
        certain.is_subset(deleted) && deleted.is_subset(&allowed),
        "{what}: the controller deleted {deleted:?}, the prediction was {victims:?} (tie at the cut: {tie:?})"
    );
}

async fn service_account_token(env: &Env, ns: &str, name: &str) -> String {
    let api: Api<ServiceAccount> = Api::namespaced(env.client.clone(), ns);
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap_or_default();
    api.create(&PostParams::default(), &sa)
        .await
        .unwrap_or_else(|e| panic!("creating ServiceAccount {ns}/{name}: {e}"));
    api.create_token_request(
        name,
        &PostParams::default(),
        &TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("token for {ns}/{name}: {e}"))
    .status
    .and_then(|s| s.token)
    .unwrap_or_default()
}

/// A dry-run create with strict field validation, as `kubectl apply` sends
/// it by default (kube's PostParams cannot ask for strict validation):
/// the status code and message.
async fn create_strict(env: &Env, ns: &str, doc: &Value) -> (u16, String) {
    let req = http::Request::post(format!(
        "/apis/deletioncost.dev/v1alpha1/namespaces/{ns}/deletioncostpolicies?dryRun=All&fieldValidation=Strict"
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(doc).unwrap_or_default())
    .unwrap_or_else(|e| panic!("{e}"));
    match env.client.request_text(req).await {
        Ok(_) => (201, String::new()),
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(e) => panic!("dry-run create: {e}"),
    }
}

// -------------------------------------------------------------- scenarios

/// a. The CRD and the bundled example policies are accepted by the server;
/// invalid policies are refused with the field named.
async fn a_validation(env: &'static Env) {
    env.scenario("a", |ns| async move {
        let api: Api<DeletionCostPolicy> = Api::namespaced(env.client.clone(), &ns);
        let strict = PatchParams::apply(MANAGER).dry_run().validation(ValidationDirective::Strict);
        let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples");
        let mut accepted = 0;
        for entry in std::fs::read_dir(&examples).unwrap_or_else(|e| panic!("{e}")) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for mut doc in docs.into_iter().filter(|d| d["kind"] == "DeletionCostPolicy") {
                doc["metadata"]["namespace"] = ns.clone().into();
                let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
                api.patch(&name, &strict, &Patch::Apply(doc))
                    .await
                    .unwrap_or_else(|e| panic!("{}: {name} refused by the API server: {e}", path.display()));
                accepted += 1;
            }
        }
        assert!(accepted >= 5, "only {accepted} example policies found");

        let base = json!({"targetRef": {"kind": "Deployment", "name": "web"},
                          "signals": [{"billingClass": {"costs": {"spot": 0}}}]});
        let invalid: Vec<(&str, Value, &str)> = vec![
            ("selector and targetRef together",
             json!({"selector": {"matchLabels": {"app": "web"}}, "targetRef": {"kind": "Deployment", "name": "web"},
                    "signals": [{"billingClass": {"costs": {"spot": 0}}}]}), "targetRef"),
            ("buckets 0",
             json!({"targetRef": {"kind": "Deployment", "name": "web"},
                    "signals": [{"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "buckets": 0}}]}), "buckets"),
            ("hysteresis 1.5",
             json!({"targetRef": {"kind": "Deployment", "name": "web"},
                    "signals": [{"utilization": {"prometheus": {"query": "up"}, "range": {"min": 0, "max": 1}, "hysteresis": 1.5}}]}), "hysteresis"),
            ("maxCost 0", {
                let mut b = base.clone();
                b["maxCost"] = 0.into();
                b
            }, "maxCost"),
            ("an unknown signal",
             json!({"targetRef": {"kind": "Deployment", "name": "web"}, "signals": [{"gpuPrice": {"weight": 1}}]}), "gpuPrice"),
            ("an unknown field", {
                let mut b = base.clone();
                b["combin"] = "sum".into();
                b
            }, "combin"),
        ];
        for (what, spec, field) in invalid {
            let doc = json!({"apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
                             "metadata": {"name": "bad", "namespace": ns}, "spec": spec});
            let (code, message) = create_strict(env, &ns, &doc).await;
            assert!(
                code == 422 || code == 400,
                "{what}: expected 422 or 400 from the API server, got {code}: {message}"
            );
            assert!(message.contains(field), "{what}: the message does not name {field}: {message}");
        }
    })
    .await;
    finished("a");
}

/// b. 3 spot + 3 on-demand nodes, a Deployment of 12, a spot-first policy:
/// the pods the ReplicaSet controller deletes are the victims the operator
/// (status), `plan` and `predict` name, scale-down after scale-down.
async fn b_core_promise(env: &'static Env) {
    env.scenario("b", |ns| async move {
        nodes(env, &ns, 3, 3).await;
        deployment(env, &ns, "web", 12, json!({})).await;
        wait_running(env, &ns, "web", 12).await;
        let op = Operator::start(env, Options::new("b-operator")).await;
        op.wait_ready().await;
        assert_detected_version(env, &op).await;
        let spec = spot_first("web");
        apply_policy(env, &ns, "web", spec.clone()).await;
        wait_costs_landed(env, &ns, "web", "web").await;

        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let policy_file = write_policy(dir.path(), &ns, "web", &spec);

        let mut replicas = 12;
        for by in [4usize, 3, 2] {
            // the operator's status names the same first victims as `plan`
            // over a snapshot taken now (it may take a reconcile to catch up)
            let mut last = String::new();
            let deadline = Instant::now() + Duration::from_secs(20);
            let (plan_pods, plan_tie, status_tie) = loop {
                let p = policy(env, &ns, "web").await;
                let from_status = status_victims(&p);
                assert_eq!(from_status.len(), 1, "one ReplicaSet: {from_status:?}");
                let (rs, (status_pods, status_tie)) =
                    from_status.into_iter().next().unwrap_or_default();
                let snap = snapshot(env, &ns, dir.path()).await;
                let planned = plan_victims(&policy_file, &snap, by);
                let (plan_pods, plan_tie) = planned
                    .get(&rs)
                    .cloned()
                    .unwrap_or_else(|| panic!("plan has no {rs}: {planned:?}"));
                let predicted = predict_victims(&snap, dir.path(), "web", by);
                assert_eq!(plan_pods, predicted, "plan and predict disagree");
                let tie: BTreeSet<String> = plan_tie.union(&status_tie).cloned().collect();
                if same_modulo_tie(status_pods.get(..by).unwrap_or_default(), &plan_pods, &tie) {
                    break (plan_pods, plan_tie, status_tie);
                }
                last = format!("status {status_pods:?}, plan {plan_pods:?}");
                assert!(
                    Instant::now() < deadline,
                    "status and plan disagree for 20 s: {last}"
                );
                tokio::time::sleep(SECOND).await;
            };
            let _ = last;

            let before = terminating(env, &ns, "web").await;
            replicas -= by as i32;
            scale(env, &ns, "web", replicas).await;
            eventually(
                Duration::from_secs(30),
                &format!("{by} pods are deleted"),
                || async { terminating(env, &ns, "web").await.len() == before.len() + by },
            )
            .await;
            let deleted: BTreeSet<String> = terminating(env, &ns, "web")
                .await
                .difference(&before)
                .cloned()
                .collect();
            let tie: BTreeSet<String> = plan_tie.union(&status_tie).cloned().collect();
            assert_matches(&format!("scale-down by {by}"), &deleted, &plan_pods, &tie);
            // the next round's status is computed over the pods left
            eventually(
                Duration::from_secs(30),
                "the status follows the scale-down",
                || async {
                    let p = policy(env, &ns, "web").await;
                    let v = status_victims(&p);
                    v.values()
                        .all(|(pods, _)| pods.iter().all(|n| !deleted.contains(n)))
                        && status_value(&p)["managedPods"].as_u64() == Some(replicas as u64)
                },
            )
            .await;
        }
        // every request carried the operator's User-Agent
        let entries: Vec<_> = env
            .recorder
            .entries()
            .into_iter()
            .filter(|e| e.operator == "b-operator")
            .collect();
        assert!(!entries.is_empty());
        let version = env!("CARGO_PKG_VERSION");
        for e in &entries {
            assert_eq!(
                e.user_agent.as_deref(),
                Some(format!("deletion-cost/{version}").as_str()),
                "{} {} sent another User-Agent",
                e.method,
                e.path
            );
        }
    })
    .await;
    finished("b");
}

/// The operator read the API server's version at start, logged it with the
/// gates it chose, and exports the choice.
async fn assert_detected_version(env: &Env, op: &Operator) {
    let info = env
        .client
        .apiserver_version()
        .await
        .unwrap_or_else(|e| panic!("the server's version: {e}"));
    let lines = op.log_lines("comparator feature gates chosen");
    assert_eq!(lines.len(), 1, "one line about the gates: {lines:?}");
    let fields = &lines[0]["fields"];
    assert_eq!(lines[0]["level"], "INFO", "{fields}");
    assert_eq!(
        fields["detected_version"],
        info.git_version.as_str(),
        "{fields}"
    );
    assert_eq!(fields["source"], "detected", "{fields}");
    // gate defaults follow the emulated version when the server has one
    let (major, minor) = match (&info.emulation_major, &info.emulation_minor) {
        (Some(major), Some(minor)) => (major, minor),
        _ => (&info.major, &info.minor),
    };
    let minor: String = minor.chars().take_while(char::is_ascii_digit).collect();
    let version = format!("{major}.{minor}");
    assert_eq!(fields["kubernetes_version"], version.as_str(), "{fields}");
    let series = format!(
        "deletion_cost_comparator_info{{kubernetes_version=\"{version}\",source=\"detected\",\
         logarithmic_scale_down=\"true\",pod_deletion_cost=\"true\"}}"
    );
    assert_eq!(op.metric(&series).await, Some(1.0), "{series}");
}

/// c. A pod that is not Ready: OrderAsIntended=False with reason NotReady,
/// and the controller deletes it first (a stronger rule than the cost).
async fn c_not_ready(env: &'static Env) {
    env.scenario("c", |ns| async move {
        nodes(env, &ns, 1, 2).await;
        deployment(env, &ns, "api", 6, json!({})).await;
        wait_running(env, &ns, "api", 6).await;
        let op = Operator::start(env, Options::new("c-operator")).await;
        op.wait_ready().await;
        apply_policy(env, &ns, "api", spot_first("api")).await;
        wait_costs_landed(env, &ns, "api", "api").await;
        // the most expensive pod (on-demand) stops being ready
        let all = pods(env, &ns, "api").await;
        let victim = all
            .iter()
            .max_by_key(|p| {
                p.annotations()
                    .get(POD_DELETION_COST)
                    .and_then(|c| c.parse::<i32>().ok())
            })
            .map(|p| p.name_any())
            .unwrap_or_default();
        let not_ready = PodHealth {
            ready: false,
            restarts: 0,
        };
        // twice (not ready, ready, not ready): the same Event is then
        // published again, which the Recorder sends as a patch
        for health in [not_ready, PodHealth::default(), not_ready] {
            env.kubelet.set_health(&ns, &victim, health).await;
            let want = if health.ready {
                ("True", "")
            } else {
                ("False", "NotReady")
            };
            eventually(
                Duration::from_secs(30),
                &format!("OrderAsIntended follows {victim} (ready: {})", health.ready),
                || async {
                    let p = policy(env, &ns, "api").await;
                    condition(&p, "OrderAsIntended")
                        .is_some_and(|(s, r)| s == want.0 && (want.1.is_empty() || r == want.1))
                },
            )
            .await;
        }
        let p = policy(env, &ns, "api").await;
        let st = status_value(&p);
        assert!(
            st["mismatches"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["pod"] == victim.as_str() && m["reason"] == "NotReady"),
            "status.mismatches does not name {victim} as NotReady: {st}"
        );
        let (pods_first, _) = status_victims(&p).into_values().next().unwrap_or_default();
        assert_eq!(
            pods_first.first(),
            Some(&victim),
            "the not-ready pod is not first in status.victims"
        );
        scale(env, &ns, "api", 5).await;
        eventually(Duration::from_secs(30), "one pod is deleted", || async {
            terminating(env, &ns, "api").await.len() == 1
        })
        .await;
        assert_eq!(
            terminating(env, &ns, "api").await,
            BTreeSet::from([victim.clone()])
        );
    })
    .await;
    finished("c");
}

/// d. A rollout stalled with two ReplicaSets holding pods and paused: the
/// Deployment controller splits a scale-down between them and each
/// ReplicaSet deletes the pods the operator predicted for it.
async fn d_paused_rollout(env: &'static Env) {
    env.scenario("d", |ns| async move {
        nodes(env, &ns, 2, 2).await;
        // new pods never become available (minReadySeconds), so the rollout
        // stops at the surge: 6 old + 3 new
        deployment(env, &ns, "shop", 6, json!({
            "minReadySeconds": 3600,
            "progressDeadlineSeconds": 7200,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 0}},
        })).await;
        let rs_api: Api<ReplicaSet> = Api::namespaced(env.client.clone(), &ns);
        let d_api: Api<Deployment> = Api::namespaced(env.client.clone(), &ns);
        eventually(Duration::from_secs(60), "the first ReplicaSet has 6 pods", || async {
            pods(env, &ns, "shop").await.iter().filter(|p| is_running_ready(p)).count() == 6
        })
        .await;
        d_api
            .patch("shop", &PatchParams::default(), &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {"rollout": "2"}}}}})))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        eventually(Duration::from_secs(60), "9 pods run in two ReplicaSets", || async {
            pods(env, &ns, "shop").await.iter().filter(|p| is_running_ready(p)).count() == 9
        })
        .await;
        d_api
            .patch("shop", &PatchParams::default(), &Patch::Merge(json!({"spec": {"paused": true}})))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let op = Operator::start(env, Options::new("d-operator")).await;
        op.wait_ready().await;
        apply_policy(env, &ns, "shop", spot_first("shop")).await;
        wait_costs_landed(env, &ns, "shop", "shop").await;
        // the status is computed at the operator's last round: wait until it
        // has no write pending and names the first victims `plan` names over
        // a snapshot taken now
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let policy_file = write_policy(dir.path(), &ns, "shop", &spot_first("shop"));
        let deadline = Instant::now() + Duration::from_secs(30);
        let predicted = loop {
            let p = policy(env, &ns, "shop").await;
            let from_status = status_victims(&p);
            let snap = snapshot(env, &ns, dir.path()).await;
            let planned = plan_victims(&policy_file, &snap, 2);
            let settled = status_value(&p)["pendingPatches"].as_u64() == Some(0);
            let agree = from_status.len() == 2
                && from_status.iter().all(|(rs, (pods, tie))| {
                    planned.get(rs).is_some_and(|(plan_pods, plan_tie)| {
                        let tie: BTreeSet<String> = plan_tie.union(tie).cloned().collect();
                        pods.len() >= plan_pods.len()
                            && same_modulo_tie(&pods[..plan_pods.len()], plan_pods, &tie)
                    })
                });
            if settled && agree {
                break from_status;
            }
            assert!(
                Instant::now() < deadline,
                "status and plan disagree for 30 s: status {from_status:?}, plan {planned:?}"
            );
            tokio::time::sleep(SECOND).await;
        };

        let owner = |pod: &Pod| {
            pod.owner_references().iter().find(|o| o.controller == Some(true)).map(|o| o.name.clone()).unwrap_or_default()
        };
        scale(env, &ns, "shop", 3).await;
        // proportional scaling: wait until both ReplicaSets reached their new size
        eventually(Duration::from_secs(30), "the ReplicaSets are scaled down", || async {
            let rss = rs_api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
            let want: i32 = rss.iter().map(|r| r.spec.replicas.unwrap_or(0)).sum();
            let active = active_names(env, &ns, "shop").await.len() as i32;
            want < 9 && active == want
        })
        .await;
        let mut by_rs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for pod in pods(env, &ns, "shop").await.into_iter().filter(|p| p.metadata.deletion_timestamp.is_some()) {
            by_rs.entry(owner(&pod)).or_default().insert(pod.name_any());
        }
        assert!(!by_rs.is_empty());
        for (rs, deleted) in &by_rs {
            let (victims, tie) = predicted.get(rs).cloned().unwrap_or_else(|| panic!("no prediction for {rs}: {predicted:?}"));
            assert!(deleted.len() <= victims.len(), "{rs}: more deleted than status shows");
            assert_matches(rs, deleted, &victims[..deleted.len()], &tie);
        }
    })
    .await;
    finished("d");
}

/// e. The hook: victims for a caller allowed to scale, 401 without a token,
/// 403 without permission, `scale: true` deletes the predicted pods (for a
/// Deployment and for a bare ReplicaSet).
async fn e_hook(env: &'static Env) {
    env.scenario("e", |ns| async move {
        nodes(env, &ns, 2, 2).await;
        deployment(env, &ns, "web", 6, json!({})).await;
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": "solo", "namespace": ns},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "solo"}}, "template": pod_template(&ns, "solo")},
        })).unwrap_or_else(|e| panic!("{e}"));
        Api::<ReplicaSet>::namespaced(env.client.clone(), &ns).create(&PostParams::default(), &rs).await.unwrap_or_else(|e| panic!("{e}"));
        wait_running(env, &ns, "web", 6).await;
        wait_running(env, &ns, "solo", 4).await;

        // a caller that may scale both, and one that may not
        let allowed = service_account_token(env, &ns, "scaler").await;
        let denied = service_account_token(env, &ns, "viewer").await;
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "scaler"},
            "rules": [{"apiGroups": ["apps"], "resources": ["deployments/scale", "replicasets/scale"], "verbs": ["get", "update"]}],
        })).unwrap_or_default();
        Api::<Role>::namespaced(env.client.clone(), &ns).create(&PostParams::default(), &role).await.unwrap_or_else(|e| panic!("{e}"));
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "scaler"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "scaler"},
            "subjects": [{"kind": "ServiceAccount", "name": "scaler", "namespace": ns}],
        })).unwrap_or_default();
        Api::<RoleBinding>::namespaced(env.client.clone(), &ns).create(&PostParams::default(), &binding).await.unwrap_or_else(|e| panic!("{e}"));

        let op = Operator::start(env, Options::new("e-operator")).await;
        op.wait_ready().await;
        apply_policy(env, &ns, "web", spot_first("web")).await;
        apply_policy(env, &ns, "solo", json!({
            "selector": {"matchLabels": {"app": "solo"}},
            "signals": [{"billingClass": {"nodeLabel": CAPACITY, "costs": {"spot": 0, "on-demand": 1000}}}],
        })).await;
        wait_costs_landed(env, &ns, "web", "web").await;
        wait_costs_landed(env, &ns, "solo", "solo").await;

        // TLS with the CA the operator published; plain HTTP is refused
        let http = op.hook_client(env).await;
        let url = format!("https://{}/v1/prescale", op.hook);
        let plain = reqwest::Client::new()
            .post(format!("http://{}/v1/prescale", op.hook))
            .body("{}")
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        assert!(plain.is_err(), "the hook answered plain HTTP: {plain:?}");
        let wrong_ca = reqwest::Client::new()
            .post(url.clone())
            .body("{}")
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        assert!(wrong_ca.is_err(), "a client without the operator's CA got through: {wrong_ca:?}");
        let call = |token: Option<String>, body: Value| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let mut req = http.post(url).header("content-type", "application/json").body(body.to_string());
                if let Some(t) = token {
                    req = req.bearer_auth(t);
                }
                let resp = req.timeout(Duration::from_secs(60)).send().await.unwrap_or_else(|e| panic!("hook: {e}"));
                let code = resp.status().as_u16();
                let text = resp.text().await.unwrap_or_default();
                (code, serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)))
            }
        };
        let web = |replicas: i32, scale: bool| json!({"namespace": ns, "workload": {"kind": "Deployment", "name": "web"}, "replicas": replicas, "scale": scale});

        let (code, body) = call(Some(allowed.clone()), web(4, false)).await;
        assert_eq!(code, 200, "{body}");
        let victims: Vec<String> = body["victims"].as_array().into_iter().flatten().filter_map(|v| v["pod"].as_str().map(str::to_string)).collect();
        assert_eq!(victims.len(), 2, "{body}");
        assert_eq!(call(None, web(4, false)).await.0, 401);
        assert_eq!(call(Some(denied), web(4, false)).await.0, 403);
        assert!(terminating(env, &ns, "web").await.is_empty(), "a call without scale deleted pods");

        let (code, body) = call(Some(allowed.clone()), web(4, true)).await;
        assert_eq!(code, 200, "{body}");
        eventually(Duration::from_secs(30), "two web pods are deleted", || async { terminating(env, &ns, "web").await.len() == 2 }).await;
        assert_hook_scaled(&body, &terminating(env, &ns, "web").await, &pods(env, &ns, "web").await);

        let solo = json!({"namespace": ns, "workload": {"kind": "ReplicaSet", "name": "solo"}, "replicas": 3, "scale": true});
        let (code, body) = call(Some(allowed), solo).await;
        assert_eq!(code, 200, "{body}");
        eventually(Duration::from_secs(30), "one solo pod is deleted", || async { terminating(env, &ns, "solo").await.len() == 1 }).await;
        assert_hook_scaled(&body, &terminating(env, &ns, "solo").await, &pods(env, &ns, "solo").await);
    })
    .await;
    finished("e");
}

/// The hook's `scale: true` answer against what the controller deleted: the
/// predicted pods exactly, or, when the answer says the cut fell inside a
/// tie, pods with the same cost as the predicted ones.
fn assert_hook_scaled(body: &Value, deleted: &BTreeSet<String>, all: &[Pod]) {
    let names = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    let comparison = &body["scale"]["comparison"];
    let predicted = names(&comparison["predicted"]);
    assert_eq!(
        &names(&comparison["deleted"]),
        deleted,
        "the hook reports other deletions: {body}"
    );
    let tie = body["replicaSets"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["tieAtCut"] == true);
    if !tie {
        assert_eq!(deleted, &predicted, "hook answer: {body}");
        assert_eq!(comparison["asPredicted"], true, "{body}");
        return;
    }
    let cost = |n: &String| {
        all.iter()
            .find(|p| &p.name_any() == n)
            .and_then(|p| p.annotations().get(POD_DELETION_COST).cloned())
    };
    let want: BTreeSet<_> = predicted.iter().map(cost).collect();
    let got: BTreeSet<_> = deleted.iter().map(cost).collect();
    assert_eq!(deleted.len(), predicted.len(), "hook answer: {body}");
    assert_eq!(
        got, want,
        "the controller chose outside the reported tie: {body}"
    );
}

/// f. Deleting a policy removes its own values and leaves a foreign one.
async fn f_cleanup(env: &'static Env) {
    env.scenario("f", |ns| async move {
        nodes(env, &ns, 1, 1).await;
        deployment(env, &ns, "web", 4, json!({})).await;
        wait_running(env, &ns, "web", 4).await;
        let pod_api: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
        let foreign = pods(env, &ns, "web").await[0].name_any();
        pod_api
            .patch(
                &foreign,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {POD_DELETION_COST: "42"}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let op = Operator::start(env, Options::new("f-operator")).await;
        op.wait_ready().await;
        apply_policy(env, &ns, "web", spot_first("web")).await;
        wait_costs_landed(env, &ns, "web", "web").await;
        let owned = |p: &Pod| {
            p.annotations()
                .get("deletioncost.dev/policy")
                .map(String::as_str)
                == Some("web")
        };
        let all = pods(env, &ns, "web").await;
        assert_eq!(
            all.iter().filter(|p| owned(p)).count(),
            3,
            "three pods carry the policy's cost"
        );
        let api: Api<DeletionCostPolicy> = Api::namespaced(env.client.clone(), &ns);
        api.delete("web", &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        eventually(Duration::from_secs(30), "the policy is gone", || async {
            api.get_opt("web").await.ok().flatten().is_none()
        })
        .await;
        for p in pods(env, &ns, "web").await {
            let a = p.annotations();
            if p.name_any() == foreign {
                assert_eq!(
                    a.get(POD_DELETION_COST).map(String::as_str),
                    Some("42"),
                    "the foreign value was touched"
                );
            } else {
                assert!(
                    !a.contains_key(POD_DELETION_COST)
                        && !a.contains_key("deletioncost.dev/policy"),
                    "{} keeps the policy's cost: {a:?}",
                    p.name_any()
                );
            }
        }
    })
    .await;
    finished("f");
}

/// g. A pod deleted and recreated under the same name while its write is
/// queued: the write is reported gone (never failed) and never lands on the
/// new pod.
async fn g_replaced_pod(env: &'static Env) {
    env.scenario("g", |ns| async move {
        nodes(env, &ns, 1, 0).await;
        let pod_api: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
        let bare = |name: &str| -> Pod {
            let mut t = pod_template(&ns, "bare");
            t["metadata"]["name"] = name.into();
            serde_json::from_value(t).unwrap_or_default()
        };
        let names: Vec<String> = (0..6).map(|i| format!("bare-{i}")).collect();
        for n in &names {
            pod_api
                .create(&PostParams::default(), &bare(n))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        wait_running(env, &ns, "bare", 6).await;
        let mut opts = Options::new("g-operator");
        opts.qps = 0.5;
        opts.burst = 1;
        let op = Operator::start(env, opts).await;
        op.wait_ready().await;
        // the first write is held on its way to the server while the others
        // wait in the operator's queue (qps 0.5)
        op.proxy.hold_pod_writes(Some(&ns));
        apply_policy(
            env,
            &ns,
            "bare",
            json!({
                "selector": {"matchLabels": {"app": "bare"}},
                "signals": [{"billingClass": {"nodeLabel": CAPACITY, "costs": {"spot": 7}}}],
            }),
        )
        .await;
        eventually(
            Duration::from_secs(30),
            "the first write is in flight",
            || async { op.proxy.held() >= 1 },
        )
        .await;
        let mut replaced = 0;
        for p in pods(env, &ns, "bare").await {
            let name = p.name_any();
            pod_api
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            eventually(
                Duration::from_secs(10),
                &format!("{name} is gone"),
                || async { pod_api.get_opt(&name).await.ok().flatten().is_none() },
            )
            .await;
            pod_api
                .create(&PostParams::default(), &bare(&name))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            replaced += 1;
        }
        assert_eq!(replaced, 6);
        op.proxy.hold_pod_writes(None);
        eventually(
            Duration::from_secs(60),
            "a queued write is reported gone",
            || async {
                op.metric("deletion_cost_patches_total{result=\"gone\"}")
                    .await
                    .unwrap_or(0.0)
                    >= 1.0
            },
        )
        .await;
        // the new pods get their own writes later, each with its own UID
        wait_costs_landed(env, &ns, "bare", "bare").await;
        assert_eq!(
            op.metric("deletion_cost_patches_total{result=\"failed\"}")
                .await
                .unwrap_or(0.0),
            0.0
        );
        assert_eq!(
            op.metric("deletion_cost_patches_total{result=\"rejected\"}")
                .await
                .unwrap_or(0.0),
            0.0
        );
        assert!(
            op.log_lines("write refused").is_empty(),
            "a replaced pod was logged as a refused write"
        );
    })
    .await;
    finished("g");
}

/// h. Two replicas: one writer; after the leader is killed the other takes
/// over and writes; after a graceful stop the takeover does not wait for
/// the lease to expire.
async fn h_leadership(env: &'static Env) {
    env.scenario("h", |ns| async move {
        nodes(env, &ns, 1, 1).await;
        deployment(env, &ns, "web", 4, json!({})).await;
        wait_running(env, &ns, "web", 4).await;
        // the replicas' own pods (never scheduled: only their labels matter),
        // and the hook Service's selector as shipped
        let own_pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.system_ns);
        for who in ["h-a", "h-b", "h-c"] {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": who, "labels": {"app.kubernetes.io/name": "deletion-cost"}},
                "spec": {"nodeSelector": {POOL_LABEL: "none"},
                         "containers": [{"name": "operator", "image": "registry.invalid/operator:1"}]},
            }))
            .unwrap_or_default();
            own_pods.create(&PostParams::default(), &pod).await.unwrap_or_else(|e| panic!("{e}"));
        }
        let hook_selector = crate::rbac::hook_service_selector();
        let hook_endpoints = || async {
            own_pods
                .list(&ListParams::default().labels(&hook_selector))
                .await
                .map(|l| l.items.iter().map(|p| p.name_any()).collect::<BTreeSet<_>>())
                .unwrap_or_default()
        };
        let mut a = Operator::start(env, Options::new("h-a")).await;
        a.wait_ready().await;
        eventually(Duration::from_secs(30), "h-a leads", || async {
            a.is_leader().await
        })
        .await;
        eventually(Duration::from_secs(10), "the hook Service selects h-a's pod only", || async {
            hook_endpoints().await == BTreeSet::from(["h-a".to_string()])
        })
        .await;
        let b = Operator::start(env, Options::new("h-b")).await;
        b.wait_synced().await;
        apply_policy(env, &ns, "web", spot_first("web")).await;
        wait_costs_landed(env, &ns, "web", "web").await;
        assert!(!b.is_leader().await);
        let pod_writes = |who: &str| {
            env.recorder
                .entries()
                .into_iter()
                .filter(|e| {
                    e.operator == who
                        && e.method == "PATCH"
                        && e.path.contains(&format!("/namespaces/{ns}/pods/"))
                })
                .count()
        };
        assert!(pod_writes("h-a") >= 4);
        assert_eq!(pod_writes("h-b"), 0, "the follower wrote");

        a.signal(libc::SIGKILL);
        a.wait_exit(Duration::from_secs(5)).await;
        eventually(
            Duration::from_secs(40),
            "h-b takes over after h-a was killed",
            || async { b.is_leader().await },
        )
        .await;
        scale(env, &ns, "web", 6).await;
        wait_running(env, &ns, "web", 6).await;
        wait_costs_landed(env, &ns, "web", "web").await;
        assert!(pod_writes("h-b") >= 2, "the new leader did not write");

        let c = Operator::start(env, Options::new("h-c")).await;
        c.wait_synced().await;
        drop(a);
        let mut b = b;
        b.signal(libc::SIGTERM);
        let stopped = Instant::now();
        b.wait_exit(Duration::from_secs(15))
            .await
            .unwrap_or_else(|| panic!("h-b did not exit"));
        eventually(
            Duration::from_secs(30),
            "h-c takes over after h-b stopped",
            || async { c.is_leader().await },
        )
        .await;
        let takeover = stopped.elapsed();
        // the lease lasts 15 s: a released lease is taken well before
        assert!(
            takeover < Duration::from_secs(8),
            "takeover took {takeover:?}: the lease was not released"
        );
        eprintln!("h: takeover after a graceful stop took {takeover:?}");
        // h-a was killed and could not unmark itself: h-b, leading, took its
        // label off; h-b unmarked itself on the way out; the new leader
        // marked itself
        eventually(Duration::from_secs(10), "the hook Service follows the takeover to h-c", || async {
            let selected = hook_endpoints().await;
            selected.contains("h-c") && !selected.contains("h-b") && !selected.contains("h-a")
        })
        .await;
        for who in ["h-a", "h-b", "h-c"] {
            let _ = own_pods.delete(who, &DeleteParams::default().grace_period(0)).await;
        }
    })
    .await;
    finished("h");
}

async fn assert_exits_within(op: &mut Operator, grace: u64, state: &str) {
    op.signal(libc::SIGTERM);
    let (status, took) = op
        .wait_exit(Duration::from_secs(grace + 5))
        .await
        .unwrap_or_else(|| panic!("{state}: still running {} s after SIGTERM", grace + 5));
    assert!(
        took <= Duration::from_secs(grace) + SECOND,
        "{state}: exit took {took:?} with --shutdown-grace {grace}"
    );
    assert!(status.success(), "{state}: exit status {status}");
    eprintln!("i: {state}: exited in {took:?}");
}

/// i. SIGTERM ends the process within --shutdown-grace in every state.
async fn i_sigterm(env: &'static Env) {
    env.scenario("i", |ns| async move {
        let grace = 4;
        nodes(env, &ns, 1, 1).await;
        deployment(env, &ns, "web", 30, json!({})).await;
        wait_running(env, &ns, "web", 30).await;

        // synced, idle
        let mut opts = Options::new("i-synced");
        opts.grace = grace;
        let mut op = Operator::start(env, opts).await;
        op.wait_ready().await;
        assert_exits_within(&mut op, grace, "synced").await;

        // the API server unreachable: the caches never sync
        let mut opts = Options::new("i-unreachable");
        opts.grace = grace;
        opts.server = Some("http://127.0.0.1:9".into());
        // with leader election it would exit at once: the Lease is unreachable
        opts.args = vec!["--no-leader-election".into()];
        let mut op = Operator::start(env, opts).await;
        eventually(
            Duration::from_secs(10),
            "the unreachable operator serves /healthz",
            || async { op.http_get("/healthz").await.is_some_and(|(c, _)| c == 200) },
        )
        .await;
        assert_eq!(op.http_get("/readyz").await.map(|r| r.0), Some(503));
        assert_exits_within(&mut op, grace, "API server unreachable").await;

        // with a backlog of writes
        let mut opts = Options::new("i-backlog");
        opts.grace = grace;
        opts.qps = 0.2;
        opts.burst = 1;
        let mut op = Operator::start(env, opts).await;
        op.wait_ready().await;
        apply_policy(env, &ns, "web", spot_first("web")).await;
        eventually(Duration::from_secs(30), "writes are queued", || async {
            op.metric("deletion_cost_patch_queue_depth")
                .await
                .unwrap_or(0.0)
                >= 10.0
        })
        .await;
        assert_exits_within(&mut op, grace, "backlog").await;

        // RBAC denies listing policies: an identity with no permissions
        let token = service_account_token(env, &ns, "nobody").await;
        let mut opts = Options::new("i-denied");
        opts.grace = grace;
        opts.token = Some(token);
        opts.args = vec!["--no-leader-election".into()];
        let mut op = Operator::start(env, opts).await;
        eventually(
            Duration::from_secs(40),
            "the denied operator says what it waits for",
            || async {
                op.log_lines("not ready: waiting for the first list")
                    .iter()
                    .any(|l| {
                        l.pointer("/fields/last_error")
                            .and_then(Value::as_str)
                            .is_some_and(|e| e.contains("forbidden"))
                    })
            },
        )
        .await;
        let ready = op.http_get("/readyz").await;
        assert!(
            ready
                .as_ref()
                .is_some_and(|(c, b)| *c == 503 && b.contains("policies")),
            "readyz: {ready:?}"
        );
        assert_exits_within(&mut op, grace, "RBAC denies listing").await;
    })
    .await;
    finished("i");
}

/// j. The write rate the server sees stays within qps and burst; steady
/// state sends nothing.
async fn j_write_rate(env: &'static Env) {
    env.scenario("j", |ns| async move {
        let (qps, burst) = (4.0, 3u32);
        nodes(env, &ns, 2, 2).await;
        deployment(env, &ns, "web", 40, json!({})).await;
        wait_running(env, &ns, "web", 40).await;
        let mut opts = Options::new("j-operator");
        opts.qps = qps;
        opts.burst = burst;
        let op = Operator::start(env, opts).await;
        op.wait_ready().await;
        apply_policy(env, &ns, "web", spot_first("web")).await;
        wait_costs_landed(env, &ns, "web", "web").await;
        let writes = || -> Vec<Instant> {
            env.recorder
                .entries()
                .into_iter()
                .filter(|e| {
                    e.operator == "j-operator"
                        && e.method == "PATCH"
                        && e.path.contains(&format!("/namespaces/{ns}/pods/"))
                })
                .map(|e| e.at)
                .collect()
        };
        let times = writes();
        assert!(times.len() >= 40, "{} writes", times.len());
        // token bucket: any window of length w holds at most burst + qps*w
        // writes (a little slack for the time between limiter and server)
        for w in [1.0f64, 2.0, 5.0] {
            let limit = burst as f64 + qps * (w + 0.25);
            let max = times
                .iter()
                .map(|t| {
                    times
                        .iter()
                        .filter(|u| **u >= *t && u.duration_since(*t).as_secs_f64() < w)
                        .count()
                })
                .max()
                .unwrap_or(0);
            assert!(
                max as f64 <= limit,
                "{max} writes within {w} s (limit {limit})"
            );
            eprintln!("j: at most {max} writes within {w} s (limit {limit})");
        }
        let before = times.len();
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(writes().len(), before, "writes in steady state");
    })
    .await;
    finished("j");
}

/// The lease timings of scenario l (shorter than the defaults, same shape).
const L_LEASE: [&str; 6] = [
    "--lease-duration",
    "6",
    "--renew-deadline",
    "4",
    "--retry-period",
    "1",
];
/// Its renew deadline.
const L_RENEW_DEADLINE: Duration = Duration::from_secs(4);

/// l. Two replicas, each with its own recording proxy (the API server's
/// answers per writer): the leader is paused (SIGSTOP) mid-batch, the other
/// takes over, the paused one is resumed while the new leader writes, then
/// the new leader is killed mid-batch and the first finishes. Counted from
/// the proxies' records against the Lease's accepted changes: no pod write
/// outside its writer's term, no value lost (every pod ends with the value
/// its node's class gives, nothing pending), every Lease change a PUT or a
/// POST (never a patch without the version it read).
async fn l_two_replicas_under_faults(env: &'static Env) {
    env.scenario("l", |ns| async move {
        let n = 24;
        nodes(env, &ns, 2, 2).await;
        deployment(env, &ns, "web", n, json!({})).await;
        wait_running(env, &ns, "web", n as usize).await;
        let opts = |who: &str| {
            let mut o = Options::new(who);
            o.qps = 2.0;
            o.burst = 1;
            o.args = L_LEASE.iter().map(|s| s.to_string()).collect();
            o
        };
        let a = Operator::start(env, opts("l-a")).await;
        a.wait_ready().await;
        eventually(Duration::from_secs(30), "l-a leads", || async { a.is_leader().await }).await;
        let mut b = Operator::start(env, opts("l-b")).await;
        b.wait_synced().await;
        apply_policy(env, &ns, "web", spot_first("web")).await;
        let writes_by = |who: &'static str| {
            let ns = ns.clone();
            move || {
                env.recorder
                    .entries()
                    .into_iter()
                    .filter(|e| {
                        e.operator == who
                            && e.method == "PATCH"
                            && e.status == 200
                            && e.path.contains(&format!("/namespaces/{ns}/pods/"))
                    })
                    .count()
            }
        };
        let (by_a, by_b) = (writes_by("l-a"), writes_by("l-b"));
        eventually(Duration::from_secs(30), "l-a writing", || async { by_a() >= 4 }).await;
        a.signal(libc::SIGSTOP);
        let paused = Instant::now();
        eventually(Duration::from_secs(40), "l-b takes over from the paused l-a", || async {
            b.is_leader().await
        })
        .await;
        eprintln!("l: l-b leads {:?} after l-a was paused", paused.elapsed());
        eventually(Duration::from_secs(30), "l-b writing", || async { by_b() >= 3 }).await;
        a.signal(libc::SIGCONT);
        let a_before = by_a();
        eventually(Duration::from_secs(20), "the resumed l-a follows", || async {
            !a.is_leader().await
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(by_a(), a_before, "the resumed l-a wrote while l-b led");
        // the new leader dies mid-batch (if it has not finished); l-a finishes
        let remaining = || async {
            pods(env, &ns, "web")
                .await
                .iter()
                .filter(|p| !p.annotations().contains_key(POD_DELETION_COST))
                .count()
        };
        if remaining().await > 2 {
            b.signal(libc::SIGKILL);
            b.wait_exit(Duration::from_secs(5)).await;
            eventually(Duration::from_secs(40), "l-a takes the Lease back", || async {
                a.is_leader().await
            })
            .await;
        }
        wait_costs_landed(env, &ns, "web", "web").await;
        // nothing lost: every pod carries the value its node's class gives
        for p in pods(env, &ns, "web").await {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            let want = if node.contains("-spot-") { "0" } else { "1000" };
            assert_eq!(
                p.annotations().get(POD_DELETION_COST).map(String::as_str),
                Some(want),
                "{} on {node}",
                p.name_any()
            );
        }
        // one writer at a time, each inside a term the server recorded
        let entries: Vec<crate::proxy::Entry> = env
            .recorder
            .entries()
            .into_iter()
            .filter(|e| e.operator == "l-a" || e.operator == "l-b")
            .collect();
        let lease_path = format!("/leases/deletion-cost-{}", env.run);
        let lease_changes: Vec<&crate::proxy::Entry> = entries
            .iter()
            .filter(|e| e.path.ends_with(&lease_path) || (e.path.ends_with("/leases") && e.method == "POST"))
            .filter(|e| e.method != "GET")
            .collect();
        for e in &lease_changes {
            assert!(
                e.method == "PUT" || e.method == "POST",
                "a Lease change by {}: {} {}",
                e.operator,
                e.method,
                e.path
            );
        }
        let accepted: Vec<&&crate::proxy::Entry> =
            lease_changes.iter().filter(|e| e.status < 300).collect();
        let mut per_writer: BTreeMap<String, usize> = BTreeMap::new();
        for (writer, _) in pod_writes(env, &ns, &["l-a", "l-b"]) {
            *per_writer.entry(writer).or_default() += 1;
        }
        let outside = written_outside_terms(env, &ns, &["l-a", "l-b"], L_RENEW_DEADLINE);
        eprintln!(
            "l: pod writes per writer {per_writer:?}; {} Lease changes accepted, {} refused (409); written outside a term: {}",
            accepted.len(),
            lease_changes.len() - accepted.len(),
            outside.len()
        );
        assert!(outside.is_empty(), "written outside the writer's term: {outside:?}");
        drop(b);
        drop(a);
    })
    .await;
    finished("l");
}

/// The pod writes (PATCH answered 200) each replica sent to the scenario's
/// pods, by its recording proxy: (identity, when).
pub(super) fn pod_writes(env: &Env, ns: &str, who: &[&str]) -> Vec<(String, Instant)> {
    env.recorder
        .entries()
        .into_iter()
        .filter(|e| {
            who.contains(&e.operator.as_str())
                && e.method == "PATCH"
                && e.status == 200
                && e.path.contains(&format!("/namespaces/{ns}/pods/"))
        })
        .map(|e| (e.operator, e.at))
        .collect()
}

/// The pod writes of `who` outside a term the server recorded for the
/// writer: the last accepted Lease change before the write was not the
/// writer's, or was more than `renew_deadline` before it.
pub(super) fn written_outside_terms(
    env: &Env,
    ns: &str,
    who: &[&str],
    renew_deadline: Duration,
) -> Vec<String> {
    let lease_path = format!("/leases/deletion-cost-{}", env.run);
    let entries = env.recorder.entries();
    let accepted: Vec<_> = entries
        .iter()
        .filter(|e| who.contains(&e.operator.as_str()) && e.method != "GET" && e.status < 300)
        .filter(|e| {
            e.path.ends_with(&lease_path) || (e.path.ends_with("/leases") && e.method == "POST")
        })
        .collect();
    let slack = Duration::from_millis(200);
    pod_writes(env, ns, who)
        .into_iter()
        .filter(|(writer, at)| {
            let term = accepted.iter().rev().find(|r| r.at <= *at);
            !term.is_some_and(|r| {
                &r.operator == writer && at.duration_since(r.at) < renew_deadline + slack
            })
        })
        .map(|(writer, at)| format!("{writer} at {at:?}"))
        .collect()
}

/// r. A handover with the new leader's pod cache behind: the follower's pod
/// watch is held in its proxy while the leader writes every pod, then the
/// leader stops and the follower takes over with a cache that shows none of
/// those writes (released a second later). The new leader reads the pods
/// with a quorum list before its first round and waits for its cache, so
/// across the leader change every pod is written once: counted per pod from
/// both replicas' requests, 0 duplicates.
async fn r_handover(env: &'static Env) {
    env.scenario("r", |ns| async move {
        let n = 12;
        nodes(env, &ns, 2, 2).await;
        deployment(env, &ns, "web", n, json!({})).await;
        wait_running(env, &ns, "web", n as usize).await;
        let mut a = Operator::start(env, Options::new("r-a")).await;
        a.wait_ready().await;
        eventually(Duration::from_secs(30), "r-a leads", || async { a.is_leader().await }).await;
        let b = Operator::start(env, Options::new("r-b")).await;
        b.wait_synced().await;
        // from here on r-b's pod cache sees none of the changes r-a makes
        b.proxy.hold_pod_watch(true);
        apply_policy(env, &ns, "web", spot_first("web")).await;
        wait_costs_landed(env, &ns, "web", "web").await;

        a.signal(libc::SIGTERM);
        a.wait_exit(Duration::from_secs(15))
            .await
            .unwrap_or_else(|| panic!("r-a did not exit"));
        // the Lease says so: r-b's leader gauge waits for its writer, which
        // waits for its cache
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(env.client.clone(), &env.system_ns);
        let lease = format!("deletion-cost-{}", env.run);
        eventually(Duration::from_secs(30), "r-b takes the Lease", || async {
            leases.get_opt(&lease).await.ok().flatten().and_then(|l| l.spec?.holder_identity).as_deref()
                == Some("r-b")
        })
        .await;
        tokio::time::sleep(SECOND).await;
        assert!(!b.is_leader().await, "r-b writes although its cache lags");
        b.proxy.hold_pod_watch(false);
        eventually(Duration::from_secs(10), "r-b writes once its cache caught up", || async {
            b.is_leader().await
        })
        .await;
        // the new term writes the pods that came after the handover
        scale(env, &ns, "web", n + 2).await;
        wait_running(env, &ns, "web", n as usize + 2).await;
        wait_costs_landed(env, &ns, "web", "web").await;
        // and nothing else, a while later
        tokio::time::sleep(Duration::from_secs(3)).await;

        let pods_path = format!("/namespaces/{ns}/pods/");
        let mut per_pod: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for e in env.recorder.entries().into_iter().filter(|e| {
            (e.operator == "r-a" || e.operator == "r-b")
                && e.method == "PATCH"
                && e.status == 200
                && e.path.contains(&pods_path)
        }) {
            let pod = e.path.rsplit('/').next().unwrap_or_default().to_string();
            per_pod.entry(pod).or_default().push(e.operator.clone());
        }
        let by = |who: &str| per_pod.values().flatten().filter(|w| *w == who).count();
        let twice: Vec<_> = per_pod.iter().filter(|(_, w)| w.len() > 1).collect();
        let caught_up = b.log_lines("new term: the pod cache is as new as a quorum read");
        let behind = caught_up
            .last()
            .and_then(|l| l.pointer("/fields/behind"))
            .and_then(Value::as_u64)
            .unwrap_or_default();
        eprintln!(
            "r: {} pods written: {} by r-a, {} by r-b; written twice: {}; r-b's cache was behind a quorum read for {behind} pods when it took over",
            per_pod.len(),
            by("r-a"),
            by("r-b"),
            twice.len()
        );
        assert_eq!(per_pod.len(), n as usize + 2, "{per_pod:?}");
        assert!(twice.is_empty(), "written more than once across the handover: {twice:?}");
        assert_eq!(by("r-b"), 2, "the new leader wrote other pods than the new ones: {per_pod:?}");
        assert!(behind > 0, "r-b's cache was not behind when it took over: the scenario tested nothing");
        drop(b);
    })
    .await;
    finished("r");
}

/// k. The install manifests: the CRD kustomization, every overlay alone and
/// with every component are accepted by the API server (server-side dry run;
/// kinds whose CRDs the cluster lacks are named and skipped); two
/// namespace-scoped installs are applied for real, and deleting one (what
/// `kubectl delete -k` does: every object of its render) leaves the CRD, the
/// other install and the other namespace's policies alone.
async fn k_install(env: &'static Env) {
    env.scenario("k", |ns| async move {
        let install = crate::install::Installer::new(env).await;
        let mut skipped = BTreeSet::new();
        let mut renders = vec![("crd".to_string(), install.render_dir("deploy/crd"))];
        for overlay in ["cluster-wide", "namespace-scoped"] {
            renders.push((overlay.to_string(), install.render_dir(&format!("deploy/overlays/{overlay}"))));
            renders.push((format!("{overlay} + components"), install.render_with_components(overlay)));
        }
        for (what, objects) in &renders {
            for obj in objects {
                if let Err(kind) = install.dry_run(obj, &ns).await {
                    skipped.insert(kind);
                }
            }
            eprintln!("k: {what}: {} objects accepted by the server (dry run)", objects.len());
        }
        if !skipped.is_empty() {
            eprintln!("k: not served by this cluster, not checked: {skipped:?}");
        }

        // two namespace-scoped installs, then one deleted
        let other = env.namespace("k2").await;
        let first = install.namespace_install(&ns);
        let second = install.namespace_install(&other);
        for obj in first.iter().chain(&second) {
            install.apply(obj).await;
        }
        apply_policy(env, &ns, "web", spot_first("web")).await;
        apply_policy(env, &other, "web", spot_first("web")).await;
        for obj in &first {
            install.delete(obj).await;
        }
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            Api::all(env.client.clone());
        assert!(
            crds.get_opt("deletioncostpolicies.deletioncost.dev").await.ok().flatten().is_some(),
            "deleting a namespace install deleted the CRD"
        );
        policy(env, &other, "web").await;
        policy(env, &ns, "web").await;
        for obj in &second {
            assert!(install.exists(obj).await, "deleting {ns}'s install removed {}", crate::install::describe(obj));
        }
        for obj in &first {
            assert!(!install.exists(obj).await, "{} of the deleted install is still there", crate::install::describe(obj));
        }
        for obj in &second {
            install.delete(obj).await;
        }
        env.purge_namespace(&other).await;
    })
    .await;
    finished("k");
}

/// The RBAC check: the permissions every operator process used are the
/// ones kept in the fixture file (which the fast suite compares with every
/// overlay); no request of the operator's own identity was forbidden.
async fn z_rbac(env: &'static Env) {
    let entries: Vec<_> = env
        .recorder
        .entries()
        .into_iter()
        .filter(|e| e.operator != "i-denied")
        .collect();
    // RBAC denials only (a namespace being deleted also answers 403, and so
    // does an API server that restarted until its authorizer caught up)
    let forbidden: Vec<_> = entries
        .iter()
        .filter(|e| e.status == 403 && !e.message.contains("being terminated"))
        .filter(|e| !leader_faults::api_server_restarting(e.at))
        .map(|e| format!("{} {}: {}", e.method, e.path, e.message))
        .collect();
    assert!(
        forbidden.is_empty(),
        "requests refused by RBAC: {forbidden:?}"
    );
    let observed = crate::rbac::permissions(&entries, &env.system_ns);
    let all_ran = FINISHED
        .lock()
        .map(|f| {
            ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"]
                .iter()
                .all(|s| f.contains(s))
        })
        .unwrap_or(false);
    let file = crate::rbac::observed_file();
    if std::env::var_os("E2E_UPDATE_RBAC").is_some() {
        assert!(
            all_ran,
            "E2E_UPDATE_RBAC needs every scenario to have run and passed"
        );
        std::fs::write(&file, crate::rbac::render_file(&observed))
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        eprintln!("wrote {}", file.display());
        return;
    }
    if !all_ran {
        eprintln!("z: not every scenario ran: only checking that nothing was forbidden");
        let kept = crate::rbac::read_file(&file);
        let unknown: Vec<_> = observed.difference(&kept).collect();
        assert!(
            unknown.is_empty(),
            "used but not in {}: {unknown:?}",
            file.display()
        );
        return;
    }
    let kept = crate::rbac::read_file(&file);
    let extra: Vec<_> = kept.difference(&observed).collect();
    let missing: Vec<_> = observed.difference(&kept).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "{} is not what the operator used\n  kept but not used: {extra:?}\n  used but not kept: {missing:?}\n(regenerate with E2E_UPDATE_RBAC=1)",
        file.display()
    );
}

/// A Deployment of `replicas` pods spread evenly over the scenario's nodes
/// (at most one more on any node), running and Ready.
async fn spread_deployment(env: &Env, ns: &str, app: &str, replicas: i32) {
    let mut template = pod_template(ns, app);
    template["spec"]["topologySpreadConstraints"] = json!([{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}}}]);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": app, "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}}, "template": template},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    Api::<Deployment>::namespaced(env.client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap_or_else(|e| panic!("creating {ns}/{app}: {e}"));
    wait_running(env, ns, app, replicas as usize).await;
}

/// The live operator writes the costs `plan` shows over a snapshot of the
/// same objects, when another namespace's pods share the nodes: the node
/// they fill counts as busy for `nodeConsolidation` in both.
async fn m_agreement(env: &'static Env) {
    env.scenario("m", |ns| async move {
        let other = env.namespace("m-other").await;
        nodes(env, &ns, 2, 2).await;
        // another team's pods fill one node of the pool
        let busy = format!("{ns}-spot-0");
        let mut template = pod_template(&ns, "batch");
        template["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": busy});
        let batch: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "batch", "namespace": other},
            "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "batch"}}, "template": template},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Api::<Deployment>::namespaced(env.client.clone(), &other)
            .create(&PostParams::default(), &batch)
            .await
            .unwrap_or_else(|e| panic!("creating {other}/batch: {e}"));
        wait_running(env, &other, "batch", 6).await;
        // two web pods on each of the four nodes
        spread_deployment(env, &ns, "web", 8).await;

        let op = Operator::start(env, Options::new("m-operator")).await;
        op.wait_ready().await;
        let spec = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"nodeConsolidation": {"maxPods": 110}}],
        });
        apply_policy(env, &ns, "web", spec.clone()).await;
        wait_costs_landed(env, &ns, "web", "web").await;

        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let policy_file = write_policy(dir.path(), &ns, "web", &spec);
        let snap = snapshot_across(env, &ns, &[&other], dir.path()).await;
        let out = run_cli(&[
            "plan",
            "--policy",
            &policy_file.to_string_lossy(),
            "--snapshot",
            &snap.to_string_lossy(),
            "-o",
            "json",
        ]);
        let plans: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("plan -o json: {e}\n{out}"));
        let wanted: BTreeMap<String, i64> = plans[0]["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let cost = p["desired"].as_i64().or_else(|| p["current"].as_i64());
                (
                    p["name"].as_str().unwrap_or_default().to_string(),
                    cost.unwrap_or_else(|| panic!("no cost for {p}")),
                )
            })
            .collect();
        let written: BTreeMap<String, i64> = pods(env, &ns, "web")
            .await
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| {
                let cost = p
                    .annotations()
                    .get(POD_DELETION_COST)
                    .and_then(|c| c.parse().ok())
                    .unwrap_or_else(|| panic!("{} carries no cost", p.name_any()));
                (p.name_any(), cost)
            })
            .collect();
        assert_eq!(written.len(), 8, "{written:?}");
        assert_eq!(
            written, wanted,
            "the operator wrote {written:?}, plan over the same objects wants {wanted:?}"
        );
        // the busy node's pods cost the most: it is the last node to empty
        let on_busy: Vec<i64> = pods(env, &ns, "web")
            .await
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(busy.as_str()))
            .filter_map(|p| written.get(&p.name_any()).copied())
            .collect();
        assert_eq!(on_busy.len(), 2, "two web pods on {busy}: {written:?}");
        let others_max = written
            .values()
            .copied()
            .filter(|c| !on_busy.contains(c))
            .max()
            .unwrap_or_default();
        assert!(
            on_busy.iter().all(|c| *c > others_max),
            "pods on the busy node {busy} cost {on_busy:?}, no more than others ({others_max}): {written:?}"
        );
        drop(op);
        env.purge_namespace(&other).await;
    })
    .await;
    finished("m");
}

/// A self-signed CA and a serving certificate for 127.0.0.1 from it, written
/// to `dir`: (certificate file, key file, CA PEM).
fn loopback_certificate(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params
        .self_signed(&ca_key)
        .unwrap_or_else(|e| panic!("{e}"));
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap_or_else(|e| panic!("{e}"));
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params
        .signed_by(&key, &issuer)
        .unwrap_or_else(|e| panic!("{e}"));
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&key_file, key.serialize_pem()).unwrap_or_else(|e| panic!("{e}"));
    (cert_file, key_file, ca.pem())
}

/// Sets the capacity type of the scenario's nodes: `spot` ones spot, the
/// others on-demand.
async fn set_capacity(env: &Env, ns: &str, spot: &[&str], on_demand: &[&str]) {
    let api: Api<Node> = Api::all(env.client.clone());
    for (names, class) in [(spot, "spot"), (on_demand, "on-demand")] {
        for n in names {
            api.patch(
                &format!("{ns}-{n}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {CAPACITY: class}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("labelling node {ns}-{n}: {e}"));
        }
    }
}

/// The scale-in webhook, registered as `deploy/components/scale-webhook`
/// ships it but pointed at the operator under test: every scale-in (the
/// scale subresource as the HPA and `kubectl scale` send it, or
/// `spec.replicas` as a GitOps sync does) deletes pods of the nodes that are
/// spot at that moment, although the billing classes swap just before it.
async fn n_scale_webhook(env: &'static Env) {
    env.scenario("n", |ns| async move {
        nodes(env, &ns, 2, 2).await;
        spread_deployment(env, &ns, "web", 8).await;
        // one node without the hostname label the scale-in lists nodes by
        // (taken off once the pods are spread by it): its fresh class comes
        // from the fallback GET, on the real server
        let bare = format!("{ns}-od-1");
        Api::<Node>::all(env.client.clone())
            .patch(
                &bare,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"kubernetes.io/hostname": null}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("taking {bare}'s hostname label off: {e}"));
        let deployments = Api::<Deployment>::namespaced(env.client.clone(), &ns);

        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (cert, key, ca) = loopback_certificate(dir.path());
        let opts = Options::new("n-operator").with_hook_tls(&cert, &key);
        let op = Operator::start(env, opts).await;
        op.wait_ready().await;
        apply_policy(env, &ns, "web", spot_first("web")).await;
        wait_costs_landed(env, &ns, "web", "web").await;

        let config = scale_series::shipped_webhook(&ns, op.hook, &ca);
        let mut registered = None;

        let mut spot = ["spot-0", "spot-1"];
        let mut on_demand = ["od-0", "od-1"];
        let mut replicas = 8;
        let mut took = Vec::new();
        let (mut agreed, mut agreed_off) = (0, 0);
        let (rounds_off, rounds) = (2, 4);
        for round in 0..rounds_off + rounds {
            let webhook_on = round >= rounds_off;
            if round == rounds_off {
                registered = Some(scale_series::Registered::create(env, &config).await);
            }
            // the classes swap: costs from the last refresh now point at
            // the wrong nodes
            std::mem::swap(&mut spot, &mut on_demand);
            set_capacity(env, &ns, &spot, &on_demand).await;
            let before = terminating(env, &ns, "web").await;
            replicas -= 1;
            let started = Instant::now();
            if round % 2 == 0 {
                // as the HPA and `kubectl scale` do: the scale subresource
                let mut scale = deployments
                    .get_scale("web")
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                scale.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
                deployments
                    .replace_scale("web", &PostParams::default(), &scale)
                    .await
                    .unwrap_or_else(|e| panic!("setting the scale: {e}"));
            } else {
                // as a GitOps sync does: spec.replicas
                scale(env, &ns, "web", replicas).await;
            }
            if webhook_on {
                took.push(started.elapsed());
            }
            eventually(Duration::from_secs(30), "one pod is deleted", || async {
                terminating(env, &ns, "web").await.len() > before.len()
            })
            .await;
            let all = pods(env, &ns, "web").await;
            let spot_nodes: BTreeSet<String> = spot.iter().map(|n| format!("{ns}-{n}")).collect();
            for p in all.iter().filter(|p| {
                p.metadata.deletion_timestamp.is_some() && !before.contains(&p.name_any())
            }) {
                let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
                match (spot_nodes.contains(&node), webhook_on) {
                    (true, true) => agreed += 1,
                    (true, false) => agreed_off += 1,
                    (false, _) => eprintln!(
                        "n: round {round} (webhook {}): {} on {node}, not a spot node {spot_nodes:?}",
                        if webhook_on { "on" } else { "off" },
                        p.name_any()
                    ),
                }
            }
            // the reconcile catches up before the next round
            wait_costs_landed(env, &ns, "web", "web").await;
        }
        if let Some(r) = registered {
            r.remove(env).await;
        }
        let fresh = op
            .metric("deletion_cost_scale_webhook_calls_total{outcome=\"fresh\"}")
            .await
            .unwrap_or(0.0);
        took.sort();
        eprintln!(
            "n: webhook on: {agreed} of {rounds} scale-ins deleted a pod of a spot node (off: {agreed_off} of {rounds_off}); webhook calls answered fresh: {fresh}; scale request latency with it min {:?}, median {:?}, max {:?}",
            took.first(),
            took.get(took.len() / 2),
            took.last()
        );
        assert_eq!(agreed, rounds, "every scale-in deleted a pod the policy meant");
        assert!(fresh >= rounds as f64, "the webhook made the costs fresh: {fresh}");
        let gets = op
            .metric("deletion_cost_scale_in_node_requests_total{request=\"get\"}")
            .await
            .unwrap_or(0.0);
        let lists = op
            .metric("deletion_cost_scale_in_node_requests_total{request=\"list\"}")
            .await
            .unwrap_or(0.0);
        eprintln!("n: node reads: {lists} list(s), {gets} GET(s) ({bare} has no hostname label)");
        assert!(gets >= 1.0, "the node without a hostname label was read by a GET");
        drop(op);
    })
    .await;
    finished("n");
}

/// q. The scale-in webhook on its own listener (`--scale-webhook-addr`, as
/// the component ships it) answering only the API server's client
/// certificate (`--scale-webhook-client-ca`), called by the real API server
/// for a `kubectl scale`-style scale-in. A cluster whose API server presents
/// no client certificate to webhooks (the usual one): the TLS handshake is
/// refused, no round runs, and the scale-in goes through anyway
/// (`failurePolicy: Ignore`). With `E2E_WEBHOOK_CLIENT_CA` naming the CA of
/// the certificate the API server presents (its admission configuration,
/// docs/development.md; `E2E_WEBHOOK_CLIENT_NAME`, a name it carries), the
/// call is answered and the costs are made fresh.
async fn q_webhook_callers(env: &'static Env) {
    env.scenario("q", |ns| async move {
        nodes(env, &ns, 2, 2).await;
        spread_deployment(env, &ns, "web", 4).await;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (cert, key, ca) = loopback_certificate(dir.path());
        let presented = std::env::var_os("E2E_WEBHOOK_CLIENT_CA").map(std::path::PathBuf::from);
        let clients_ca = match &presented {
            Some(file) => file.clone(),
            None => {
                // a CA that issued nothing the API server has
                let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
                let mut params = rcgen::CertificateParams::default();
                params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
                let pem = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}")).pem();
                let file = dir.path().join("clients-ca.crt");
                std::fs::write(&file, pem).unwrap_or_else(|e| panic!("{e}"));
                file
            }
        };
        let webhook = deletion_cost_testkit::free_addr();
        let mut opts = Options::new("q-operator").with_hook_tls(&cert, &key);
        opts.args.extend([
            "--scale-webhook-addr".into(),
            webhook.to_string(),
            "--scale-webhook-client-ca".into(),
            clients_ca.to_string_lossy().into_owned(),
        ]);
        if let Some(name) = std::env::var("E2E_WEBHOOK_CLIENT_NAME").ok().filter(|n| !n.is_empty()) {
            opts.args.extend(["--scale-webhook-client-name".into(), name]);
        }
        let op = Operator::start(env, opts).await;
        op.wait_ready().await;
        apply_policy(env, &ns, "web", spot_first("web")).await;
        wait_costs_landed(env, &ns, "web", "web").await;
        let registered =
            scale_series::Registered::create(env, &scale_series::shipped_webhook(&ns, webhook, &ca))
                .await;
        set_capacity(env, &ns, &["od-0", "od-1"], &["spot-0", "spot-1"]).await;
        let before = terminating(env, &ns, "web").await;
        let deployments = Api::<Deployment>::namespaced(env.client.clone(), &ns);
        let mut scale = deployments.get_scale("web").await.unwrap_or_else(|e| panic!("{e}"));
        scale.spec.get_or_insert_with(Default::default).replicas = Some(3);
        deployments
            .replace_scale("web", &PostParams::default(), &scale)
            .await
            .unwrap_or_else(|e| panic!("setting the scale: {e}"));
        eventually(Duration::from_secs(30), "the scale-in went through", || async {
            terminating(env, &ns, "web").await.len() > before.len()
        })
        .await;
        let fresh = op
            .metric("deletion_cost_scale_webhook_calls_total{outcome=\"fresh\"}")
            .await
            .unwrap_or(0.0);
        let handshakes_refused = op.log_lines("hook TLS handshake failed").len();
        registered.remove(env).await;
        eprintln!(
            "q: API server's client certificate {}: handshakes refused {handshakes_refused}, webhook calls answered fresh {fresh}",
            if presented.is_some() { "presented (E2E_WEBHOOK_CLIENT_CA)" } else { "not configured" }
        );
        if presented.is_some() {
            assert!(fresh >= 1.0, "the API server's certificate was not accepted");
        } else {
            assert!(handshakes_refused >= 1, "the API server was not refused at the handshake");
            assert_eq!(fresh, 0.0, "a caller without a certificate made costs fresh");
        }
        drop(op);
    })
    .await;
    finished("q");
}

/// `predict deployment/web -n NS`, `plan -n NS` and `explain pod/NAME -n NS`
/// read the real API server through KUBECONFIG (read-only) and answer, byte
/// for byte, as the same commands over a saved snapshot of the same objects
/// (`kubectl get pods,nodes,rs,deploy -o json`, `kubectl version -o json`,
/// the policies); also as a kubectl plugin, when kubectl is on PATH.
async fn o_live_reads(env: &'static Env) {
    env.scenario("o", |ns| async move {
        let started = Instant::now();
        nodes(env, &ns, 2, 1).await;
        spread_deployment(env, &ns, "web", 6).await;
        // no operator runs: the plan has patches to show
        apply_policy(env, &ns, "web", spot_first("web")).await;
        // one foreign cost, so explain sees each origin
        let all = pods(env, &ns, "web").await;
        let foreign = all
            .first()
            .map(ResourceExt::name_any)
            .unwrap_or_else(|| panic!("no pods of {ns}/web"));
        Api::<Pod>::namespaced(env.client.clone(), &ns)
            .patch(
                &foreign,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {POD_DELETION_COST: "5"}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("annotating {foreign}: {e}"));

        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let snap = dir.path().join("snapshot");
        std::fs::create_dir_all(&snap).unwrap_or_else(|e| panic!("{e}"));
        snapshot(env, &ns, &snap).await;
        let version = env
            .client
            .apiserver_version()
            .await
            .unwrap_or_else(|e| panic!("/version: {e}"));
        std::fs::write(
            snap.join("version.json"),
            serde_json::to_vec(&json!({"serverVersion": version})).unwrap_or_default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let policies: Vec<Value> = Api::<DeletionCostPolicy>::namespaced(env.client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|p| serde_json::to_value(p).unwrap_or_default())
            .collect();
        let policy_file = dir.path().join("policies.json");
        std::fs::write(
            &policy_file,
            serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": policies}))
                .unwrap_or_default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let (snap, policy_file) = (
            snap.to_string_lossy().into_owned(),
            policy_file.to_string_lossy().into_owned(),
        );
        let now = "2030-01-01T00:00:00Z";
        let ns_ = ns.as_str();
        let explain_foreign = format!("pod/{foreign}");
        let last = all.last().map(ResourceExt::name_any).unwrap_or_default();
        let explain_last = format!("pod/{last}");
        let with_policy = vec!["--policy", policy_file.as_str()];
        let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
            (
                vec![
                    "predict",
                    "deployment/web",
                    "-n",
                    ns_,
                    "-o",
                    "table",
                    "--scale-down-by",
                    "2",
                ],
                vec![],
            ),
            (
                vec!["plan", "-n", ns_, "-o", "json", "--scale-down-by", "2"],
                with_policy.clone(),
            ),
            (
                vec!["explain", &explain_foreign, "-n", ns_],
                with_policy.clone(),
            ),
            (
                vec!["explain", "-o", "json", &explain_last, "-n", ns_],
                with_policy,
            ),
        ];
        for (args, saved_extra) in &cases {
            let mut live = args.clone();
            live.extend(["--now", now]);
            let mut saved = live.clone();
            saved.extend(["--snapshot", &snap]);
            saved.extend(saved_extra.iter().copied());
            let from_cluster = run_cli(&live);
            let from_file = run_cli(&saved);
            assert!(!from_cluster.is_empty(), "{live:?} printed nothing");
            assert_eq!(
                from_cluster, from_file,
                "{live:?} on the cluster and {saved:?} over its snapshot differ"
            );
        }
        // as a kubectl plugin: a file named kubectl-deletion_cost on PATH
        let plugin_dir = dir.path().join("bin");
        std::fs::create_dir_all(&plugin_dir).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_deletion-cost"),
            plugin_dir.join("kubectl-deletion_cost"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let path = format!(
            "{}:{}",
            plugin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        match Command::new("kubectl")
            .args([
                "deletion-cost",
                "predict",
                "deployment/web",
                "-n",
                &ns,
                "--now",
                now,
            ])
            .env("PATH", &path)
            .output()
        {
            Ok(out) => {
                assert!(
                    out.status.success(),
                    "kubectl deletion-cost predict: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let direct = run_cli(&["predict", "deployment/web", "-n", &ns, "--now", now]);
                assert_eq!(String::from_utf8_lossy(&out.stdout), direct);
            }
            Err(e) => eprintln!("o: kubectl not runnable ({e}): the plugin form is not checked"),
        }
        eprintln!("o: live reads checked in {:?}", started.elapsed());
    })
    .await;
    finished("o");
}

/// Creates a `kind` (`ReplicaSet`, else a Deployment) named `name` with
/// `replicas` pods of `template`, selected by `app: name`.
async fn create_workload(
    env: &Env,
    ns: &str,
    kind: &str,
    name: &str,
    replicas: i32,
    template: Value,
) {
    let body = json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": template},
    });
    if kind == "ReplicaSet" {
        let rs: ReplicaSet = serde_json::from_value(body).unwrap_or_else(|e| panic!("{e}"));
        Api::<ReplicaSet>::namespaced(env.client.clone(), ns)
            .create(&PostParams::default(), &rs)
            .await
            .unwrap_or_else(|e| panic!("creating the ReplicaSet {ns}/{name}: {e}"));
    } else {
        let d: Deployment = serde_json::from_value(body).unwrap_or_else(|e| panic!("{e}"));
        Api::<Deployment>::namespaced(env.client.clone(), ns)
            .create(&PostParams::default(), &d)
            .await
            .unwrap_or_else(|e| panic!("creating the Deployment {ns}/{name}: {e}"));
    }
}
