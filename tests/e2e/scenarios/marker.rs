//! Say which pods go (issue 51) on the real control plane: "mark, then
//! scale". Pods the policy would keep are labelled with the scale-down
//! marker a second before a scale-in by their number, by each scaler of the
//! webhook suite, on 300-replica workloads under the operator's default
//! write limits: the ReplicaSet controller must delete exactly the marked
//! pods, and the scale command take at most a second.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use deletion_cost::annotations::POD_DELETION_COST;
use deletion_cost::marker::{KEP_PREFER_FOR_SCALE_DOWN, PREFER_FOR_SCALE_DOWN};
use deletion_cost_testkit::eventually;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

use super::scale_series::{scale_named, shipped_webhook, Registered, Scaler};
use super::write_budget::audited_paths;
use super::{
    finished, is_running_ready, loopback_certificate, plan_victims, pod_template, pods, snapshot,
    terminating, write_policy, CAPACITY, ZONE,
};
use crate::cluster::{labels, Env, MANAGER, POOL_LABEL};
use crate::operator::{Operator, Options};

/// The operator identity of the scenario (the recorder's key).
const IDENTITY: &str = "u-marker-operator";
/// Replicas of each workload, and the pods marked before each scale-in.
const REPLICAS: i32 = 300;
const BY: i32 = 3;
/// Nodes of each billing class, shared by both workloads.
const NODES_PER_CLASS: usize = 5;
/// The promise: the scale command returns within this.
const SCALE_CALL_LIMIT: Duration = Duration::from_secs(1);

/// The policy: pods of spot nodes go first, then the others.
fn spot_first(kind: &str, name: &str) -> Value {
    json!({
        "targetRef": {"kind": kind, "name": name},
        "signals": [{"billingClass": {"nodeLabel": CAPACITY, "costs": {"spot": 0, "on-demand": 1000}, "default": 500}}],
    })
}

/// `app`'s pods spread over the pool's nodes (one more on a node at most).
pub(super) fn spread(ns: &str, app: &str) -> Value {
    let mut template = pod_template(ns, app);
    template["spec"]["topologySpreadConstraints"] = json!([{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}}}]);
    template
}

/// The nodes of the pool that are on-demand (the policy keeps their pods).
pub(super) async fn on_demand_nodes(env: &Env, ns: &str) -> BTreeSet<String> {
    Api::<Node>::all(env.client.clone())
        .list(&ListParams::default().labels(&format!("{POOL_LABEL}={ns},{CAPACITY}=on-demand")))
        .await
        .unwrap_or_else(|e| panic!("listing nodes: {e}"))
        .into_iter()
        .map(|n| n.name_any())
        .collect()
}

fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// `BY` Ready pods of `app` the policy keeps longest: on on-demand nodes,
/// one a node, from the nodes with the fewest of `app`'s pods (the
/// controller's colocation rule deletes from the fullest nodes first),
/// and none of `planned` (what the policy would delete now).
pub(super) fn choose(all: &[Pod], on_demand: &BTreeSet<String>, planned: &[String]) -> Vec<String> {
    let active: Vec<&Pod> = all.iter().filter(|p| is_running_ready(p)).collect();
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for p in &active {
        *per_node.entry(node_of(p)).or_default() += 1;
    }
    let mut nodes: Vec<(&String, &usize)> = per_node
        .iter()
        .filter(|(n, _)| on_demand.contains(*n))
        .collect();
    nodes.sort_by_key(|(n, c)| (**c, (*n).clone()));
    let chosen: Vec<String> = nodes
        .iter()
        .filter_map(|(n, _)| {
            active
                .iter()
                .filter(|p| node_of(p) == **n && !planned.contains(&p.name_any()))
                .map(|p| p.name_any())
                .min()
        })
        .take(BY as usize)
        .collect();
    assert_eq!(
        chosen.len(),
        BY as usize,
        "{BY} on-demand nodes with a pod the policy keeps: {per_node:?}"
    );
    chosen
}

/// Sets the marker `label` on each of `names` (as an autoscaler would).
pub(super) async fn mark(env: &Env, ns: &str, names: &[String], label: &str) {
    let api = Api::<Pod>::namespaced(env.client.clone(), ns);
    for name in names {
        api.patch(
            name,
            &PatchParams {
                field_manager: Some(MANAGER.into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"metadata": {"labels": {label: "true"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("marking {ns}/{name}: {e}"));
    }
}

/// The operator's pod writes to `app`'s pods from `from` to `to` (its
/// recording proxy, when they reached it): pod and milliseconds after `zero`.
fn recorded_writes(
    env: &Env,
    ns: &str,
    app: &str,
    (from, zero, to): (Instant, Instant, Instant),
) -> Vec<(String, f64)> {
    let prefix = format!("/api/v1/namespaces/{ns}/pods/{app}-");
    env.recorder
        .entries()
        .into_iter()
        .filter(|e| e.operator == IDENTITY && e.at >= from && e.at < to && e.method != "GET")
        .filter(|e| e.path.starts_with(&prefix))
        .map(|e| {
            let ms = if e.at >= zero {
                (e.at - zero).as_secs_f64() * 1000.0
            } else {
                -(zero - e.at).as_secs_f64() * 1000.0
            };
            (
                e.path.rsplit('/').next().unwrap_or_default().to_string(),
                ms,
            )
        })
        .collect()
}

/// The operator's pod writes to `app`'s pods in the API server's audit log
/// from `from` to `to`, as milliseconds after `zero`; `None` without
/// `E2E_AUDIT_LOG`.
fn audited_writes(
    env: &Env,
    ns: &str,
    app: &str,
    (from, zero, to): (Timestamp, Timestamp, Timestamp),
) -> Option<Vec<f64>> {
    let user = format!("system:serviceaccount:{}:deletion-cost", env.system_ns);
    let prefix = format!("/api/v1/namespaces/{ns}/pods/{app}-");
    let offset = from.duration_since(zero).as_secs_f64() * 1000.0;
    let paths = audited_paths(&user, from, to)?;
    Some(
        paths
            .iter()
            .filter(|(_, p)| p.starts_with(&prefix))
            .map(|(t, _)| t * 1000.0 + offset)
            .collect(),
    )
}

fn ms_list(xs: impl IntoIterator<Item = f64>) -> String {
    let v: Vec<String> = xs.into_iter().map(|x| format!("{x:.0}")).collect();
    format!("[{}]", v.join(", "))
}

/// One scale-in after marking, and what it showed.
struct Round {
    scaler: Scaler,
    label: &'static str,
    from: i32,
    marked: Vec<String>,
    /// What a plan over the objects just before marking named.
    planned: Vec<String>,
    took: Duration,
    deleted: BTreeSet<String>,
    /// The operator's pod writes from marking to the deletions, by its
    /// proxy (pod, ms after the scale call began) and by the audit log
    /// (ms after the call began).
    writes: Vec<(String, f64)>,
    audited: Option<Vec<f64>>,
    /// The webhook's answers: outcome, writes, milliseconds.
    answers: Vec<String>,
}

impl Round {
    fn exact(&self) -> bool {
        self.deleted == self.marked.iter().cloned().collect::<BTreeSet<_>>()
    }
}

/// The webhook's answers logged since the `seen` first ones.
fn answers_since(op: &Operator, seen: usize) -> Vec<String> {
    op.log_lines("scale-in admitted")
        .iter()
        .skip(seen)
        .map(|l| {
            let field = |k: &str| l.pointer(&format!("/fields/{k}")).cloned();
            format!(
                "{}:{}w/{}ms",
                field("outcome")
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                field("writes").unwrap_or_default(),
                field("millis").unwrap_or_default(),
            )
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
async fn mark_then_scale(
    env: &Env,
    op: &Operator,
    ns: &str,
    scaler: Scaler,
    app: &str,
    replicas: &mut i32,
    label: &'static str,
    policy_file: &Path,
    dir: &Path,
) -> Round {
    let all = pods(env, ns, app).await;
    let snap = snapshot(env, ns, dir).await;
    let planned: Vec<String> = plan_victims(policy_file, &snap, BY as usize)
        .into_values()
        .flat_map(|(v, _)| v)
        .collect();
    let marked = choose(&all, &on_demand_nodes(env, ns).await, &planned);
    let before = terminating(env, ns, app).await;
    let seen = op.log_lines("scale-in admitted").len();

    let (marked_at, marked_ts) = (Instant::now(), Timestamp::now());
    mark(env, ns, &marked, label).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let from = *replicas;
    *replicas -= BY;
    let (since, since_ts) = (Instant::now(), Timestamp::now());
    let took = scale_named(env, ns, scaler, app, *replicas).await;
    eventually(
        Duration::from_secs(60),
        &format!("the controller deletes {BY} pods of {ns}/{app}"),
        || async { terminating(env, ns, app).await.len() >= before.len() + BY as usize },
    )
    .await;
    let (done, done_ts) = (Instant::now(), Timestamp::now());
    // more than BY would show a second sync deleting others: look once more
    tokio::time::sleep(Duration::from_secs(1)).await;
    let deleted: BTreeSet<String> = terminating(env, ns, app)
        .await
        .difference(&before)
        .cloned()
        .collect();
    Round {
        scaler,
        label,
        from,
        marked,
        planned,
        took,
        deleted,
        writes: recorded_writes(env, ns, app, (marked_at, since, done)),
        audited: audited_writes(env, ns, app, (marked_ts, since_ts, done_ts)),
        answers: answers_since(op, seen),
    }
}

/// Waits until the operator sent no pod write for 5 s (after at least one):
/// its first background writes are done, so a round's counts are its own.
async fn wait_quiet(env: &Env, within: Duration) {
    eventually(
        within,
        "the operator's background writes are done",
        || async {
            let entries = env.recorder.entries();
            let writes = entries.iter().filter(|e| {
                e.operator == IDENTITY && e.method == "PATCH" && e.path.contains("/pods/")
            });
            let quiet = Instant::now() - Duration::from_secs(5);
            let mut any = false;
            for e in writes {
                if e.at >= quiet {
                    return false;
                }
                any = true;
            }
            any
        },
    )
    .await;
}

/// u. (a) of issue 51: for each scaler of the webhook suite, three Ready
/// pods the policy keeps longest are marked, a second later the workload
/// is scaled in by three: exactly those three are deleted, and the scale
/// call takes at most a second.
pub(super) async fn u_marked_pods_go_first(env: &'static Env) {
    env.scenario("u-mark", |ns| async move {
        let started = Instant::now();
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut list = Vec::new();
        for (class, zone) in [("spot", "zone-a"), ("on-demand", "zone-b")] {
            for i in 0..NODES_PER_CLASS {
                list.push((
                    format!("{class}-{i}"),
                    labels(&[(CAPACITY, class), (ZONE, zone)]),
                ));
            }
        }
        let refs: Vec<(&str, BTreeMap<String, String>)> =
            list.iter().map(|(n, l)| (n.as_str(), l.clone())).collect();
        env.kubelet.add_nodes(&ns, &refs).await;

        // the Deployment for three scalers, the bare ReplicaSet for the fourth
        let workloads = [("Deployment", "web"), ("ReplicaSet", "bare")];
        let mut files = BTreeMap::new();
        for (kind, name) in workloads {
            super::create_workload(env, &ns, kind, name, REPLICAS, spread(&ns, name)).await;
            let sub = dir.path().join(name);
            std::fs::create_dir_all(&sub).unwrap_or_else(|e| panic!("{e}"));
            let file = write_policy(&sub, &ns, name, &spot_first(kind, name));
            files.insert(name, (file, sub));
        }
        for (_, name) in workloads {
            // hundreds of pods to schedule
            super::wait_running_within(env, &ns, name, REPLICAS as usize, Duration::from_secs(300))
                .await;
        }

        let (cert, key, ca) = loopback_certificate(dir.path());
        let opts = Options::new(IDENTITY)
            .at_default_limits()
            .with_hook_tls(&cert, &key);
        let op = Operator::start(env, opts).await;
        op.wait_ready().await;
        for (kind, name) in workloads {
            super::apply_policy(env, &ns, name, spot_first(kind, name)).await;
        }
        // 600 costs at 5 writes a second
        wait_quiet(env, Duration::from_secs(400)).await;
        let webhook = Registered::create(env, &shipped_webhook(&ns, op.hook, &ca)).await;
        let setup = started.elapsed();

        let mut rounds = Vec::new();
        let mut replicas: BTreeMap<&str, i32> =
            workloads.iter().map(|(_, n)| (*n, REPLICAS)).collect();
        for scaler in Scaler::ALL {
            let app = if scaler == Scaler::KubectlBareReplicaSet {
                "bare"
            } else {
                "web"
            };
            // one scaler marks with the proposal's label
            let label = if scaler == Scaler::GitOps {
                KEP_PREFER_FOR_SCALE_DOWN
            } else {
                PREFER_FOR_SCALE_DOWN
            };
            let (file, sub) = &files[app];
            let r = mark_then_scale(
                env,
                &op,
                &ns,
                scaler,
                app,
                replicas.get_mut(app).unwrap_or_else(|| panic!("{app}")),
                label,
                file,
                sub,
            )
            .await;
            let in_call = |t: f64| (0.0..=r.took.as_secs_f64() * 1000.0).contains(&t);
            eprintln!(
                "u-mark: {:<46} {} -> {}: marked {:?} ({}), deleted {:?}: {}; scale call {:.0} ms",
                scaler.describe(),
                r.from,
                r.from - BY,
                r.marked,
                r.label,
                r.deleted,
                if r.exact() { "exact" } else { "NOT EXACT" },
                r.took.as_secs_f64() * 1000.0,
            );
            eprintln!(
                "u-mark:   operator pod writes from marking to the deletions (ms after the call began): proxy {}, audit log {}; during the call: proxy {}, audit log {}; webhook answers {:?}",
                ms_list(r.writes.iter().map(|(_, t)| *t)),
                r.audited.as_ref().map_or("not read".into(), |a| ms_list(a.iter().copied())),
                r.writes.iter().filter(|(_, t)| in_call(*t)).count(),
                r.audited.as_ref().map_or("not read".into(), |a| a.iter().filter(|t| in_call(**t)).count().to_string()),
                r.answers,
            );
            rounds.push(r);
        }

        webhook.remove(env).await;

        let took: Vec<Duration> = rounds.iter().map(|r| r.took).collect();
        eprintln!(
            "u-mark: {} of {} scale-ins deleted exactly the marked pods; scale calls {:?} ms; setup {:.0} s, total {:.0} s",
            rounds.iter().filter(|r| r.exact()).count(),
            rounds.len(),
            took.iter().map(|d| d.as_millis()).collect::<Vec<_>>(),
            setup.as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
        for r in &rounds {
            assert!(
                r.planned.iter().all(|p| !r.marked.contains(p)),
                "{}: a marked pod was one the policy deletes anyway: marked {:?}, planned {:?}",
                r.scaler.describe(),
                r.marked,
                r.planned
            );
            assert!(
                r.exact(),
                "{}: marked {:?}, the controller deleted {:?} (the policy alone would delete {:?})",
                r.scaler.describe(),
                r.marked,
                r.deleted,
                r.planned
            );
            assert!(
                r.took <= SCALE_CALL_LIMIT,
                "{}: the scale call took {:?}",
                r.scaler.describe(),
                r.took
            );
        }
        // the Event of each scale-in says its victims go first because marked
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(env.client.clone(), &ns);
        let notes = || async {
            events
                .list(&Default::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("ScaleInVictims"))
                .filter_map(|e| e.note)
                .collect::<Vec<String>>()
        };
        eventually(
            Duration::from_secs(10),
            "each scale-in's Event names its marked victims",
            || async {
                let notes = notes().await;
                rounds.iter().all(|r| {
                    notes.iter().any(|n| {
                        n.contains("first because marked for scale-down")
                            && r.marked.iter().all(|m| n.contains(m.as_str()))
                    })
                })
            },
        )
        .await;
        let costs: Vec<(String, Option<String>)> = Api::<Pod>::namespaced(env.client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("listing pods of {ns}: {e}"))
            .iter()
            .filter(|p| rounds.iter().any(|r| r.marked.contains(&p.name_any())))
            .map(|p| (p.name_any(), p.annotations().get(POD_DELETION_COST).cloned()))
            .collect();
        eprintln!("u-mark: the marked pods' costs now: {costs:?}");
        drop(op);
    })
    .await;
    finished("u-mark");
}

// ------------------------------------------------------ scale-in --remove

/// One run of `deletion-cost scale-in`, and when it ran.
struct CliRun {
    args: Vec<String>,
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
    from: Timestamp,
    to: Timestamp,
}

impl CliRun {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "scale-in {:?}: -o json: {e}\nstdout: {}\nstderr: {}",
                self.args, self.stdout, self.stderr
            )
        })
    }

    fn show(&self) -> String {
        format!(
            "deletion-cost {} -> exit {:?} in {:.0} ms\nstdout: {}\nstderr: {}",
            self.args.join(" "),
            self.code,
            self.took.as_secs_f64() * 1000.0,
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

/// Runs `deletion-cost scale-in ARGS` with the suite's kubeconfig (also
/// passed as `--kubeconfig` when KUBECONFIG names one file); killed if the
/// scenario stops first or it outlives two minutes.
async fn scale_in_cli(args: &[&str]) -> CliRun {
    let mut all: Vec<String> = std::iter::once("scale-in")
        .chain(args.iter().copied())
        .map(str::to_string)
        .collect();
    if let Some(file) = std::env::var("KUBECONFIG")
        .ok()
        .filter(|k| !k.contains(':') && Path::new(k).is_file())
    {
        all.extend(["--kubeconfig".into(), file]);
    }
    let from = Timestamp::now();
    let started = Instant::now();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args(&all)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .unwrap_or_else(|_| panic!("deletion-cost {all:?} ran over two minutes"))
        .unwrap_or_else(|e| panic!("deletion-cost {all:?}: {e}"));
    CliRun {
        args: all,
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
        from,
        to: Timestamp::now(),
    }
}

/// The command's requests in the API server's audit log between `from` and
/// `to` (its User-Agent, any user but the operator's): (verb, path without
/// the query). `None` without `E2E_AUDIT_LOG`.
fn cli_requests(env: &Env, from: Timestamp, to: Timestamp) -> Option<Vec<(String, String)>> {
    let path = std::env::var_os("E2E_AUDIT_LOG")?;
    // the server writes an entry once the response is complete: let the
    // last ones reach the file
    std::thread::sleep(Duration::from_millis(500));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("E2E_AUDIT_LOG {}: {e}", path.to_string_lossy()));
    let operator = format!("system:serviceaccount:{}:deletion-cost", env.system_ns);
    Some(
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| {
                e["stage"] == "ResponseComplete"
                    && e["user"]["username"] != operator.as_str()
                    && e["userAgent"]
                        .as_str()
                        .is_some_and(|a| a.starts_with("deletion-cost/"))
            })
            .filter(|e| {
                e["requestReceivedTimestamp"]
                    .as_str()
                    .and_then(|t| t.parse::<Timestamp>().ok())
                    .is_some_and(|t| t >= from && t <= to)
            })
            .map(|e| {
                let uri = e["requestURI"].as_str().unwrap_or_default();
                (
                    e["verb"].as_str().unwrap_or_default().to_string(),
                    uri.split('?').next().unwrap_or_default().to_string(),
                )
            })
            .collect(),
    )
}

fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// The writes among `requests`.
fn writes_of(requests: &[(String, String)]) -> Vec<String> {
    requests
        .iter()
        .filter(|(v, _)| is_write(v))
        .map(|(v, p)| format!("{v} {p}"))
        .collect()
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// A Deployment of `replicas` spread over the nodes of `pool`, in `ns`.
async fn pooled_deployment(env: &Env, ns: &str, pool: &str, name: &str, replicas: i32) {
    let mut template = spread(pool, name);
    template["spec"]["nodeSelector"] = json!({POOL_LABEL: pool});
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": template},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    Api::<Deployment>::namespaced(env.client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap_or_else(|e| panic!("creating {ns}/{name}: {e}"));
}

/// Two spot and two on-demand nodes in `ns`'s pool.
async fn four_nodes(env: &Env, ns: &str) {
    let mut list = Vec::new();
    for (class, zone) in [("spot", "zone-a"), ("on-demand", "zone-b")] {
        for i in 0..2 {
            list.push((
                format!("{class}-{i}"),
                labels(&[(CAPACITY, class), (ZONE, zone)]),
            ));
        }
    }
    let refs: Vec<(&str, BTreeMap<String, String>)> =
        list.iter().map(|(n, l)| (n.as_str(), l.clone())).collect();
    env.kubelet.add_nodes(ns, &refs).await;
}

/// Two Ready pods of `app` on on-demand nodes, from different nodes: pods a
/// spot-first policy keeps, and that the controller's own ranking (equal
/// costs, the same number on each node) has no reason to pick.
async fn two_kept(env: &Env, ns: &str, pool: &str, app: &str) -> Vec<String> {
    let all = pods(env, ns, app).await;
    let on_demand = on_demand_nodes(env, pool).await;
    let mut by_node: BTreeMap<String, String> = BTreeMap::new();
    for p in all.iter().filter(|p| is_running_ready(p)) {
        let node = node_of(p);
        if on_demand.contains(&node) {
            let name = p.name_any();
            let e = by_node.entry(node).or_insert_with(|| name.clone());
            if name < *e {
                *e = name;
            }
        }
    }
    let chosen: Vec<String> = by_node.into_values().take(2).collect();
    assert_eq!(chosen.len(), 2, "two on-demand nodes with pods of {app}");
    chosen
}

/// The last two of a deletion order (the pods kept longest).
fn last_two(order: &[String]) -> Vec<String> {
    assert!(
        order.len() >= 2,
        "a deletion order of two pods or more: {order:?}"
    );
    order[order.len() - 2..].to_vec()
}

/// Checks one `scale-in --remove` that must have deleted exactly `named`:
/// exit 0, the JSON report, the pods Terminating, and the command's writes
/// in the audit log (the named pods and the scale, nothing else).
#[allow(clippy::too_many_arguments)]
async fn assert_removed(
    env: &Env,
    ns: &str,
    app: &str,
    run: &CliRun,
    named: &[String],
    before: &BTreeSet<String>,
    policy: Option<String>,
    from: i32,
) {
    assert_eq!(run.code, Some(0), "{}", run.show());
    let report = run.json();
    let want: BTreeSet<String> = named.iter().cloned().collect();
    assert_eq!(report["workload"], format!("deployment/{app}"), "{report}");
    assert_eq!(report["namespace"], ns, "{report}");
    assert_eq!(report["from"], from, "{report}");
    assert_eq!(report["to"], from - named.len() as i32, "{report}");
    assert_eq!(strings(&report["remove"]), want, "{report}");
    assert_eq!(report["policy"], json!(policy), "{report}");
    assert_eq!(strings(&report["deleted"]), want, "{report}");
    assert_eq!(report["exact"], true, "{report}");
    assert_eq!(report["dryRun"], false, "{report}");
    let wrote: BTreeSet<String> = report["wrote"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["pod"].as_str().map(str::to_string))
        .collect();
    if policy.is_some() {
        assert_eq!(strings(&report["marked"]), want, "{report}");
        assert!(wrote.is_empty(), "under a policy it wrote costs: {report}");
    } else {
        assert!(strings(&report["marked"]).is_empty(), "{report}");
        assert!(
            wrote.is_subset(&want),
            "without a policy it wrote pods not named: {report}"
        );
    }
    let deleted: BTreeSet<String> = terminating(env, ns, app)
        .await
        .difference(before)
        .cloned()
        .collect();
    assert_eq!(deleted, want, "the controller deleted {deleted:?}");

    if let Some(requests) = cli_requests(env, run.from, run.to) {
        let writes = writes_of(&requests);
        let allowed: BTreeSet<String> = named
            .iter()
            .map(|p| format!("patch /api/v1/namespaces/{ns}/pods/{p}"))
            .chain([format!(
                "patch /apis/apps/v1/namespaces/{ns}/deployments/{app}/scale"
            )])
            .collect();
        eprintln!(
            "u-remove:   audit log: {} requests of the command, writes {writes:?}",
            requests.len()
        );
        assert!(
            writes.iter().all(|w| allowed.contains(w)),
            "the command wrote more than the named pods and the scale: {writes:?}"
        );
        let scaled = writes.iter().filter(|w| w.ends_with("/scale")).count();
        assert_eq!(scaled, 1, "one scale write: {writes:?}");
    } else {
        eprintln!("u-remove:   E2E_AUDIT_LOG unset: the audit log was not read");
    }
}

/// u. (b) of issue 51: `scale-in deployment/NAME --remove A,B` deletes
/// exactly A and B, under a policy (it marks them and scales; the operator's
/// webhook does the rest) and in a namespace without one (it writes costs
/// on A and B only and scales). With the operator stopped it scales
/// nothing (exit 1) and takes its markers back.
pub(super) async fn u_scale_in_remove(env: &'static Env) {
    env.scenario("u-remove", |ns| async move {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        four_nodes(env, &ns).await;
        let plain_ns = env.namespace("u-remove-plain").await;
        pooled_deployment(env, &ns, &ns, "web", 12).await;
        pooled_deployment(env, &plain_ns, &ns, "plain", 8).await;
        super::wait_running(env, &ns, "web", 12).await;
        super::wait_running(env, &plain_ns, "plain", 8).await;

        let (cert, key, ca) = loopback_certificate(dir.path());
        let opts = Options::new("u-remove-operator")
            .at_default_limits()
            .with_hook_tls(&cert, &key);
        let op = Operator::start(env, opts).await;
        op.wait_ready().await;
        super::apply_policy(env, &ns, "web", spot_first("Deployment", "web")).await;
        super::wait_costs_landed(env, &ns, "web", "web").await;
        let webhook = Registered::create(env, &shipped_webhook(&ns, op.hook, &ca)).await;

        // ---- under the policy: the two pods its plan deletes last
        let snap = snapshot(env, &ns, dir.path()).await;
        let policy_file = write_policy(dir.path(), &ns, "web", &spot_first("Deployment", "web"));
        let order: Vec<String> = plan_victims(&policy_file, &snap, 12)
            .into_values()
            .flat_map(|(v, _)| v)
            .collect();
        let named = last_two(&order);
        let before = terminating(env, &ns, "web").await;
        let run = scale_in_cli(&[
            "deployment/web",
            "--remove",
            &named.join(","),
            "-n",
            &ns,
            "-o",
            "json",
            "--timeout",
            "60",
        ])
        .await;
        eprintln!("u-remove: with a policy: {}", run.show());
        assert_removed(
            env,
            &ns,
            "web",
            &run,
            &named,
            &before,
            Some(format!("{ns}/web")),
            12,
        )
        .await;
        let answers = answers_of(&op);
        eprintln!("u-remove:   the webhook's answers: {answers:?}");

        // ---- no policy in the namespace: the two pods the controller's own
        // ranking deletes last
        let order: Vec<String> = super::run_cli(&[
            "predict",
            "deployment/plain",
            "-n",
            &plain_ns,
            "-o",
            "names",
        ])
        .lines()
        .map(str::to_string)
        .collect();
        let named = last_two(&order);
        let before = terminating(env, &plain_ns, "plain").await;
        let costs_before = pod_costs(env, &plain_ns).await;
        // the kubeconfig's current context, named (the flag is read)
        let context = kube::config::Kubeconfig::read()
            .ok()
            .and_then(|k| k.current_context)
            .unwrap_or_else(|| panic!("the suite's kubeconfig has no current context"));
        let run = scale_in_cli(&[
            "deployment/plain",
            "--remove",
            &named.join(","),
            "-n",
            &plain_ns,
            "--context",
            &context,
            "-o",
            "json",
        ])
        .await;
        eprintln!("u-remove: without a policy: {}", run.show());
        assert_removed(env, &plain_ns, "plain", &run, &named, &before, None, 8).await;
        // no other pod's cost changed
        let costs_after = pod_costs(env, &plain_ns).await;
        let changed: Vec<&String> = costs_after
            .iter()
            .filter(|(p, c)| costs_before.get(*p) != Some(*c))
            .map(|(p, _)| p)
            .filter(|p| !named.contains(p))
            .collect();
        assert!(
            changed.is_empty(),
            "costs of pods not named changed: {changed:?}"
        );

        // ---- the operator stopped and its webhook gone: nothing would honour
        // the marker, so the command scales nothing (exit 1), nothing is
        // deleted, and its markers come off again
        webhook.remove(env).await;
        drop(op);
        let snap = snapshot(env, &ns, dir.path()).await;
        let order: Vec<String> = plan_victims(&policy_file, &snap, 10)
            .into_values()
            .flat_map(|(v, _)| v)
            .collect();
        let named = last_two(&order);
        let before = terminating(env, &ns, "web").await;
        let replicas_before = deployment_replicas(env, &ns, "web").await;
        let run = scale_in_cli(&[
            "deployment/web",
            "--remove",
            &named.join(","),
            "-n",
            &ns,
            "--timeout",
            "5",
        ])
        .await;
        eprintln!("u-remove: with a policy, no operator: {}", run.show());
        assert_eq!(run.code, Some(1), "{}", run.show());
        assert!(
            run.stderr
                .contains("did not write the marked pods' costs within 5 s")
                && run
                    .stderr
                    .contains("Nothing scaled, the markers are taken back"),
            "{}",
            run.show()
        );
        assert_eq!(
            deployment_replicas(env, &ns, "web").await,
            replicas_before,
            "nothing scaled"
        );
        assert_eq!(
            terminating(env, &ns, "web").await,
            before,
            "nothing deleted"
        );
        let still_marked: Vec<String> = pods(env, &ns, "web")
            .await
            .iter()
            .filter(|p| named.contains(&p.name_any()))
            .filter(|p| deletion_cost::marker::marker_of(p.metadata.labels.as_ref()).is_some())
            .map(|p| p.name_any())
            .collect();
        assert!(still_marked.is_empty(), "markers left on {still_marked:?}");
        let last = run.stderr.lines().last().unwrap_or_default();
        assert!(last.starts_with("error:"), "{}", run.show());
        env.purge_namespace(&plain_ns).await;
    })
    .await;
    finished("u-remove");
}

/// The webhook's answers so far: outcome, writes, milliseconds.
fn answers_of(op: &Operator) -> Vec<String> {
    answers_since(op, 0)
}

/// Every pod of `ns` and its cost annotation.
async fn pod_costs(env: &Env, ns: &str) -> BTreeMap<String, Option<String>> {
    Api::<Pod>::namespaced(env.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing pods of {ns}: {e}"))
        .into_iter()
        .map(|p| {
            let cost = p.annotations().get(POD_DELETION_COST).cloned();
            (p.name_any(), cost)
        })
        .collect()
}

/// Every pod of `ns` with its labels and annotations, and the replicas of
/// its Deployments: what a refused command must leave as it was.
async fn state_of(env: &Env, ns: &str) -> (Value, BTreeMap<String, Option<i32>>) {
    let pods: Vec<Value> = Api::<Pod>::namespaced(env.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing pods of {ns}: {e}"))
        .into_iter()
        .map(|p| {
            json!({"name": p.name_any(), "labels": p.metadata.labels,
                   "annotations": p.metadata.annotations,
                   "deleting": p.metadata.deletion_timestamp.is_some()})
        })
        .collect();
    let replicas = Api::<Deployment>::namespaced(env.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing deployments of {ns}: {e}"))
        .into_iter()
        .map(|d| (d.name_any(), d.spec.replicas))
        .collect();
    (Value::Array(pods), replicas)
}

/// u. (c) of issue 51: refused removals exit 2 with one `error:` line and
/// write nothing (the audit log shows no write of the command, the pods
/// and replicas are as they were): a pod of another workload, a workload
/// with a pod not Ready that is not named, another pod marked for
/// scale-down; and a dry run writes nothing either.
pub(super) async fn u_refused_removal(env: &'static Env) {
    env.scenario("u-refuse", |ns| async move {
        four_nodes(env, &ns).await;
        pooled_deployment(env, &ns, &ns, "web", 6).await;
        pooled_deployment(env, &ns, &ns, "plain", 4).await;
        super::wait_running(env, &ns, "web", 6).await;
        super::wait_running(env, &ns, "plain", 4).await;
        // a policy for web (no operator needed: the command refuses first)
        super::apply_policy(env, &ns, "web", spot_first("Deployment", "web")).await;

        let web = two_kept(env, &ns, &ns, "web").await;
        let plain: Vec<String> = pods(env, &ns, "plain")
            .await
            .iter()
            .map(|p| p.name_any())
            .collect();
        let mut seen_reads = 0;
        let mut check = |what: &'static str, run: CliRun, refused: bool| {
            eprintln!("u-refuse: {what}: {}", run.show());
            if refused {
                assert_eq!(run.code, Some(2), "{what}: {}", run.show());
                let lines: Vec<&str> = run.stderr.lines().collect();
                assert!(
                    lines.len() == 1 && lines[0].starts_with("error:"),
                    "{what}: stderr must be one line starting `error:`: {}",
                    run.show()
                );
            } else {
                assert_eq!(run.code, Some(0), "{what}: {}", run.show());
                assert_eq!(run.json()["dryRun"], true, "{what}: {}", run.show());
            }
            match cli_requests(env, run.from, run.to) {
                Some(requests) => {
                    let writes = writes_of(&requests);
                    eprintln!(
                        "u-refuse:   audit log: {} requests of the command, {} writes {writes:?}",
                        requests.len(),
                        writes.len()
                    );
                    // the command's reads are there: the log is this server's
                    assert!(
                        !requests.is_empty(),
                        "{what}: no request of the command in the audit log"
                    );
                    seen_reads += requests.len();
                    assert!(writes.is_empty(), "{what}: the command wrote {writes:?}");
                }
                None => eprintln!("u-refuse:   E2E_AUDIT_LOG unset: the audit log was not read"),
            }
        };

        // a pod of another workload
        let state = state_of(env, &ns).await;
        let names = format!("{},{}", web[0], plain[0]);
        let run = scale_in_cli(&["deployment/web", "--remove", &names, "-n", &ns]).await;
        check("a pod not in the workload", run, true);
        assert_eq!(
            state_of(env, &ns).await,
            state,
            "a refused command changed something"
        );

        // a pod of plain not Ready, not named
        env.kubelet
            .set_health(
                &ns,
                &plain[3],
                crate::kubelet::PodHealth {
                    ready: false,
                    restarts: 0,
                },
            )
            .await;
        eventually(
            Duration::from_secs(30),
            "the pod shows not Ready",
            || async {
                pods(env, &ns, "plain")
                    .await
                    .iter()
                    .any(|p| p.name_any() == plain[3] && !is_running_ready(p))
            },
        )
        .await;
        let state = state_of(env, &ns).await;
        let names = format!("{},{}", plain[0], plain[1]);
        let run = scale_in_cli(&["deployment/plain", "--remove", &names, "-n", &ns]).await;
        check("an unnamed pod not Ready", run, true);
        assert_eq!(
            state_of(env, &ns).await,
            state,
            "a refused command changed something"
        );

        // another pod of web marked for scale-down
        let other = pods(env, &ns, "web")
            .await
            .iter()
            .map(|p| p.name_any())
            .find(|n| !web.contains(n))
            .unwrap_or_else(|| panic!("a third pod of web"));
        mark(
            env,
            &ns,
            std::slice::from_ref(&other),
            PREFER_FOR_SCALE_DOWN,
        )
        .await;
        let state = state_of(env, &ns).await;
        let names = web.join(",");
        let run = scale_in_cli(&["deployment/web", "--remove", &names, "-n", &ns]).await;
        check("another pod marked", run, true);
        assert_eq!(
            state_of(env, &ns).await,
            state,
            "a refused command changed something"
        );

        // a dry run of a removal that would go through
        let api = Api::<Pod>::namespaced(env.client.clone(), &ns);
        api.patch(
            &other,
            &PatchParams {
                field_manager: Some(MANAGER.into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"metadata": {"labels": {PREFER_FOR_SCALE_DOWN: null}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("unmarking {other}: {e}"));
        let state = state_of(env, &ns).await;
        let run = scale_in_cli(&[
            "deployment/web",
            "--remove",
            &names,
            "-n",
            &ns,
            "--dry-run",
            "-o",
            "json",
        ])
        .await;
        check("a dry run", run, false);
        assert_eq!(
            state_of(env, &ns).await,
            state,
            "a dry run changed something"
        );
        eprintln!("u-refuse: {seen_reads} reads of the command in the audit log, no write");
    })
    .await;
    finished("u-refuse");
}

/// `spec.replicas` of Deployment `name`.
async fn deployment_replicas(env: &Env, ns: &str, name: &str) -> Option<i32> {
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), ns);
    api.get(name)
        .await
        .unwrap_or_else(|e| panic!("deployment {name}: {e}"))
        .spec
        .replicas
}
