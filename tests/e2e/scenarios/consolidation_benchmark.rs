//! Karpenter's benchmark for pod-deletion-cost management, on the real
//! control plane: 25 simulated nodes with room for 50 pods each (a CPU
//! request of 1280m against the 64 CPUs the simulated kubelet reports), a
//! Deployment of 1,000 replicas that the kube-scheduler places, scaled
//! 1000 → 700 → 20 through the scale subresource (as the HPA does) with the
//! scale-in webhook registered and the operator at its default limits
//! (`--qps 5 --burst 10`). A node is freed only when none of the workload's
//! pods is left on it, Terminating ones included: the simulated kubelet
//! finishes deleted pods at once, as a real one does after their grace.
//!
//! Phases, each in a namespace and node pool of its own, one after another:
//! (a) no policy, the ReplicaSet controller's own order (which spreads);
//! (b) `nodeConsolidation` (maxPods 50), costs kept in the background;
//! (c) the same with `writes: OnScaleIn`: only what the webhook writes;
//! (d) 13 on-demand and 12 spot nodes, the billing class before
//!     consolidation: whole on-demand nodes first (500 → 350 → 10);
//! (e) two zones, zone balance (maxSkew 50) before consolidation
//!     (500 → 350 → 10).
//!
//! Each phase prints a table: the pods per node before and after each step,
//! the fewest nodes that could hold what is left (pods do not move: the
//! fullest nodes are kept), the nodes still holding the workload, the
//! scale request's time, the webhook's answers, and the operator's pod
//! writes during the converge, each scale-in and the minute after it.
//!
//! The promises, checked once every phase ran: with a consolidation policy
//! the workload sits on the fewest nodes after each step ((b); (d) keeping
//! the spot nodes first, and no spot pod goes while on-demand ones are
//! left); each scale request returns within 1 s (not asserted in (c), whose
//! webhook writes inside the request: its figures are printed); between
//! scale-ins no pod on a node whose count did not change is rewritten.
//! `E2E_BENCH_PHASES` (e.g. `abc`) runs only those phases.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use deletion_cost::annotations::POD_DELETION_COST;
use deletion_cost_testkit::eventually;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

use super::exact_at_size::hpa_scale;
use super::scale_series::{shipped_webhook, Registered};
use super::write_budget::audited_paths;
use super::{
    apply_policy, deployment, finished, is_running_ready, loopback_certificate, pod_template, pods,
    policy, status_value, CAPACITY, ZONE,
};
use crate::cluster::{labels, Env, MANAGER};
use crate::operator::{Operator, Options};

/// The operator identity of this scenario (the recorder's key).
const IDENTITY: &str = "t-bench-operator";
/// The workload, in every phase.
const APP: &str = "web";
/// Nodes per phase.
const NODES: usize = 25;
/// With 64 CPUs a node, room for 50 pods.
const CPU_REQUEST: &str = "1280m";
/// The minute after each scale-in, before the next.
const AFTER: Duration = Duration::from_secs(60);
/// The longest a scale request may take.
const PUT_LIMIT: Duration = Duration::from_secs(1);
/// The two labelled groups of (d) and (e): nodes below this index are the
/// first group (on-demand, zone-a).
const FIRST_GROUP: usize = 13;

/// How a phase labels its nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Labels {
    Plain,
    /// on-demand below `FIRST_GROUP`, spot above.
    Billing,
    /// zone-a below `FIRST_GROUP`, zone-b above.
    Zones,
}

/// One phase of the benchmark.
struct Phase {
    key: char,
    title: &'static str,
    /// Start, then the replicas after each step.
    sizes: [i32; 3],
    labels: Labels,
    /// The policy's spec (its targetRef added), if any.
    policy: Option<Value>,
    /// `writes: OnScaleIn`: nothing before the scale-ins, figures printed only.
    on_scale_in: bool,
    /// The workload must sit on the fewest nodes after each step.
    fewest_promised: bool,
}

fn phases() -> Vec<Phase> {
    let consolidation = json!({"nodeConsolidation": {"maxPods": 50}});
    vec![
        Phase {
            key: 'a',
            title: "no policy",
            sizes: [1000, 700, 20],
            labels: Labels::Plain,
            policy: None,
            on_scale_in: false,
            fewest_promised: false,
        },
        Phase {
            key: 'b',
            title: "nodeConsolidation maxPods 50, writes Continuous",
            sizes: [1000, 700, 20],
            labels: Labels::Plain,
            policy: Some(json!({"signals": [consolidation], "writes": "Continuous"})),
            on_scale_in: false,
            fewest_promised: true,
        },
        Phase {
            key: 'c',
            title: "nodeConsolidation maxPods 50, writes OnScaleIn",
            sizes: [1000, 700, 20],
            labels: Labels::Plain,
            policy: Some(json!({"signals": [consolidation], "writes": "OnScaleIn"})),
            on_scale_in: true,
            fewest_promised: false,
        },
        Phase {
            key: 'd',
            title: "billingClass on-demand 0 spot 1, then nodeConsolidation",
            sizes: [500, 350, 10],
            labels: Labels::Billing,
            policy: Some(json!({"signals": [
                {"billingClass": {"costs": {"on-demand": 0, "spot": 1}}}, consolidation]})),
            on_scale_in: false,
            fewest_promised: true,
        },
        Phase {
            key: 'e',
            title: "zoneBalance maxSkew 50, then nodeConsolidation",
            sizes: [500, 350, 10],
            labels: Labels::Zones,
            policy: Some(json!({"signals": [{"zoneBalance": {"maxSkew": 50}}, consolidation]})),
            on_scale_in: false,
            fewest_promised: false,
        },
    ]
}

impl Phase {
    /// The label (class or zone) of node `i`, as the table shows it.
    fn group(&self, i: usize) -> &'static str {
        match (self.labels, i < FIRST_GROUP) {
            (Labels::Plain, _) => "",
            (Labels::Billing, true) => "od",
            (Labels::Billing, false) => "spot",
            (Labels::Zones, true) => "a",
            (Labels::Zones, false) => "b",
        }
    }

    /// Which nodes are kept first when counting the fewest nodes: in (d)
    /// the spot ones (the policy deletes on-demand pods first).
    fn keep_rank(&self, group: &str) -> u8 {
        u8::from(self.labels == Labels::Billing && group == "od")
    }
}

/// A moment, for the recorder (`Instant`) and the audit log (`Timestamp`).
#[derive(Clone, Copy)]
struct Mark {
    at: Instant,
    ts: Timestamp,
}

impl Mark {
    fn now() -> Mark {
        Mark {
            at: Instant::now(),
            ts: Timestamp::now(),
        }
    }
}

/// One scale-in and what it showed.
struct Step {
    from: i32,
    to: i32,
    /// Active pods per node before the scale request and once the
    /// deletions finished (nodes without pods left out).
    before: BTreeMap<String, usize>,
    after: BTreeMap<String, usize>,
    /// The fewest nodes that could hold `to` pods of `before`.
    fewest: usize,
    /// Nodes holding the workload when the active pods were down to `to`:
    /// active pods only, Terminating ones included, and (Terminating
    /// included) at the end of the minute after.
    held_active: usize,
    held_with_terminating: usize,
    held_later: usize,
    put: Duration,
    /// From the scale request until no deleted pod was left.
    deleted_in: Duration,
    /// The webhook's answers for this step (`scale-in admitted` lines).
    webhook: Vec<String>,
    start: Mark,
    done: Mark,
    end: Mark,
    /// Pods the operator patched during the scale-in, and in the minute after.
    written_in: Vec<Write>,
    written_after: Vec<Write>,
}

/// One pod patch of the operator: the pod, and the API server's answer.
struct Write {
    pod: String,
    status: u16,
}

impl Step {
    /// Nodes whose count this step did not change.
    fn unchanged(&self) -> BTreeSet<&str> {
        self.before
            .iter()
            .filter(|(n, c)| self.after.get(*n).copied().unwrap_or(0) == **c)
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// Of `written`, the pods on nodes whose count did not change.
    fn on_unchanged<'a>(
        &self,
        written: &'a [Write],
        node_of: &HashMap<String, String>,
    ) -> Vec<&'a str> {
        let unchanged = self.unchanged();
        written
            .iter()
            .filter(|w| {
                node_of
                    .get(&w.pod)
                    .is_some_and(|n| unchanged.contains(n.as_str()))
            })
            .map(|w| w.pod.as_str())
            .collect()
    }
}

/// Active (or all) pods of the workload per node.
fn per_node(pods: &[Pod], with_terminating: bool) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for p in pods {
        if !with_terminating && p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            *counts.entry(node).or_default() += 1;
        }
    }
    counts
}

/// The fewest nodes of `counts` that hold `keep` pods when the pods stay
/// where they are: nodes of a lower `rank` first, the fullest first.
fn fewest_nodes(counts: &BTreeMap<String, usize>, keep: usize, rank: impl Fn(&str) -> u8) -> usize {
    let mut nodes: Vec<(u8, std::cmp::Reverse<usize>)> = counts
        .iter()
        .map(|(n, c)| (rank(n), std::cmp::Reverse(*c)))
        .collect();
    nodes.sort_unstable();
    let (mut held, mut used) = (0, 0);
    for (_, std::cmp::Reverse(c)) in nodes {
        if held >= keep {
            break;
        }
        held += c;
        used += 1;
    }
    used
}

/// The operator's pod patches in `ns` between `from` and `to`: when, and which.
fn pod_patches(env: &Env, ns: &str, from: Instant, to: Instant) -> Vec<(Instant, Write)> {
    let prefix = format!("/api/v1/namespaces/{ns}/pods/");
    env.recorder
        .entries()
        .into_iter()
        .filter(|e| e.operator == IDENTITY && e.method == "PATCH" && e.at >= from && e.at < to)
        .filter_map(|e| {
            let pod = e.path.strip_prefix(&prefix)?;
            let write = Write {
                pod: pod.to_string(),
                status: e.status,
            };
            (!pod.contains('/')).then_some((e.at, write))
        })
        .collect()
}

fn written(env: &Env, ns: &str, from: Mark, to: Mark) -> Vec<Write> {
    pod_patches(env, ns, from.at, to.at)
        .into_iter()
        .map(|(_, p)| p)
        .collect()
}

/// Where `written` went: pods per node (`n07:20`), then the answers that
/// were not a success (`404:273`: pods gone by then).
fn where_written(written: &[Write], node_of: &HashMap<String, String>, ns: &str) -> String {
    let mut nodes: BTreeMap<&str, usize> = BTreeMap::new();
    let mut refused: BTreeMap<u16, usize> = BTreeMap::new();
    for w in written {
        let node = node_of.get(&w.pod).map_or("?", |n| {
            n.strip_prefix(ns)
                .and_then(|n| n.strip_prefix('-'))
                .unwrap_or(n)
        });
        *nodes.entry(node).or_default() += 1;
        if !(200..300).contains(&w.status) {
            *refused.entry(w.status).or_default() += 1;
        }
    }
    let mut text: Vec<String> = nodes.iter().map(|(n, c)| format!("{n}:{c}")).collect();
    if !refused.is_empty() {
        text.push(format!(
            "answered {}",
            refused
                .iter()
                .map(|(s, c)| format!("{s}:{c}"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    text.join(" ")
}

/// The webhook's answers for `ns` so far, as `resource: outcome, writes, millis`.
fn webhook_answers(op: &Operator, ns: &str) -> Vec<String> {
    op.log_lines("scale-in admitted")
        .iter()
        .filter(|l| l.pointer("/fields/namespace").and_then(Value::as_str) == Some(ns))
        .map(|l| {
            let field = |f: &str| {
                l.pointer(&format!("/fields/{f}"))
                    .cloned()
                    .unwrap_or_default()
            };
            let sub = field("sub_resource");
            let resource = match sub.as_str() {
                Some(s) if !s.is_empty() => {
                    format!("{}/{s}", field("resource").as_str().unwrap_or(""))
                }
                _ => field("resource").as_str().unwrap_or("").to_string(),
            };
            format!(
                "{resource} {}->{}: {} {} writes {} ms",
                field("from"),
                field("to"),
                field("outcome").as_str().unwrap_or("?"),
                field("writes"),
                field("millis"),
            )
        })
        .collect()
}

fn remember(node_of: &mut HashMap<String, String>, pods: &[Pod]) {
    for p in pods {
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            node_of.insert(p.name_any(), node);
        }
    }
}

/// Waits until `n` pods of the workload run and are Ready, listing them
/// every 2 s (a list of a thousand pods is no small read).
async fn wait_ready(env: &Env, ns: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let ready = pods(env, ns, APP)
            .await
            .iter()
            .filter(|p| is_running_ready(p))
            .count();
        if ready == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ns}: {ready} of {n} pods run and are Ready after 600 s"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Waits until the API server calls the webhook for `ns`: a server-side
/// dry-run scale-in reaches it (and changes nothing).
async fn wait_webhook_called(env: &Env, op: &Operator, ns: &str, replicas: i32) {
    let series = "deletion_cost_scale_webhook_calls_total{outcome=\"dry_run\"}";
    let before = op.metric(series).await.unwrap_or(0.0);
    let api = Api::<Deployment>::namespaced(env.client.clone(), ns);
    let params = PostParams {
        dry_run: true,
        field_manager: Some(MANAGER.into()),
    };
    eventually(
        Duration::from_secs(30),
        &format!("a dry-run scale-in of {ns}/{APP} reaches the webhook"),
        || async {
            if let Ok(mut scale) = api.get_scale(APP).await {
                scale.spec.get_or_insert_with(Default::default).replicas = Some(replicas - 1);
                let _ = api.replace_scale(APP, &params, &scale).await;
            }
            op.metric(series).await.unwrap_or(0.0) > before
        },
    )
    .await;
}

/// Waits until the operator is done with the policy: its status counts
/// every pod with nothing pending, every pod carries its cost (unless
/// `OnScaleIn`) and no pod write went out for 5 s.
async fn converge(env: &Env, ns: &str, replicas: usize, on_scale_in: bool, since: Mark) -> Mark {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let st = status_value(&policy(env, ns, APP).await);
        let costed = pods(env, ns, APP)
            .await
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.annotations().contains_key(POD_DELETION_COST))
            .count();
        let patches = pod_patches(env, ns, since.at, Instant::now());
        let quiet = patches
            .last()
            .is_none_or(|(at, _)| at.elapsed() >= Duration::from_secs(5));
        let done = st["managedPods"].as_u64() == Some(replicas as u64)
            && st["pendingPatches"].as_u64() == Some(0)
            && (on_scale_in || costed == replicas)
            && quiet;
        if done {
            return Mark::now();
        }
        assert!(
            Instant::now() < deadline,
            "{ns}: the operator did not converge in 900 s: {costed} of {replicas} pods costed, {} pod writes; status {st}",
            patches.len()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Scales `ns`'s workload from `from` to `to` replicas, waits until no
/// deleted pod is left, then a minute.
async fn scale_step(
    env: &Env,
    op: &Operator,
    ns: &str,
    phase: &Phase,
    groups: &BTreeMap<String, &'static str>,
    (from, to): (i32, i32),
    node_of: &mut HashMap<String, String>,
) -> Step {
    let all = pods(env, ns, APP).await;
    remember(node_of, &all);
    let before = per_node(&all, false);
    let rank = |n: &str| phase.keep_rank(groups.get(n).copied().unwrap_or(""));
    let fewest = fewest_nodes(&before, to as usize, rank);
    let answered = webhook_answers(op, ns).len();
    let start = Mark::now();
    let put = hpa_scale(env, ns, APP, to).await;
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut at_target = None;
    let after = loop {
        let all = pods(env, ns, APP).await;
        let active = per_node(&all, false);
        if active.values().sum::<usize>() == to as usize {
            let with_terminating = per_node(&all, true);
            at_target.get_or_insert((active.len(), with_terminating.len()));
            if with_terminating == active {
                break active;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{ns}: {from}->{to}: the deletions did not finish in 300 s ({} active, {} pods)",
            active.values().sum::<usize>(),
            all.len()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let done = Mark::now();
    tokio::time::sleep(AFTER).await;
    let end = Mark::now();
    let held_later = per_node(&pods(env, ns, APP).await, true).len();
    let (held_active, held_with_terminating) = at_target.unwrap_or_default();
    Step {
        from,
        to,
        fewest,
        held_active,
        held_with_terminating,
        held_later,
        put,
        deleted_in: done.at - start.at,
        webhook: webhook_answers(op, ns).split_off(answered),
        written_in: written(env, ns, start, done),
        written_after: written(env, ns, done, end),
        before,
        after,
        start,
        done,
        end,
    }
}

/// What a phase measured, printed as its table.
struct Report {
    placed_in: Duration,
    /// The policy's converge: pod writes (and by the audit log), and time.
    converge: Option<(usize, Option<usize>, Duration)>,
    steps: Vec<Step>,
    took: Duration,
}

/// The audit log's pod writes in `ns` in each window (`None` without
/// `E2E_AUDIT_LOG`).
fn audited(env: &Env, ns: &str, from: Mark, windows: &[(Mark, Mark)]) -> Option<Vec<usize>> {
    let user = format!("system:serviceaccount:{}:deletion-cost", env.system_ns);
    let paths = audited_paths(&user, from.ts, Timestamp::now())?;
    let prefix = format!("/api/v1/namespaces/{ns}/pods/");
    let secs = |m: &Mark| m.ts.duration_since(from.ts).as_secs_f64();
    Some(
        windows
            .iter()
            .map(|(a, b)| {
                paths
                    .iter()
                    .filter(|(t, p)| *t >= secs(a) && *t < secs(b) && p.starts_with(&prefix))
                    .count()
            })
            .collect(),
    )
}

/// One phase: its nodes and Deployment, the policy and its converge, the
/// webhook, the two steps; prints its table and adds the promises it broke
/// to `failures` (so that every phase runs and prints).
async fn run_phase(env: &Env, op: &Operator, ca: &str, phase: &Phase, failures: &mut Vec<String>) {
    let started = Mark::now();
    let tag = format!("t-bench ({})", phase.key);
    let ns = env.namespace(&format!("t-bench-{}", phase.key)).await;
    env.kubelet.finish_deleted(&ns).await;
    let names: Vec<String> = (0..NODES).map(|i| format!("n{i:02}")).collect();
    let mut nodes = Vec::new();
    let mut groups = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let group = phase.group(i);
        let node_labels = match phase.labels {
            Labels::Plain => labels(&[]),
            Labels::Billing => {
                labels(&[(CAPACITY, if group == "od" { "on-demand" } else { "spot" })])
            }
            Labels::Zones => labels(&[(ZONE, if group == "a" { "zone-a" } else { "zone-b" })]),
        };
        nodes.push((name.as_str(), node_labels));
        groups.insert(format!("{ns}-{name}"), group);
    }
    env.kubelet.add_nodes(&ns, &nodes).await;

    // placed by the scheduler: a CPU request, no nodeName
    let [start, first, last] = phase.sizes;
    let mut template = pod_template(&ns, APP);
    template["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": CPU_REQUEST}});
    deployment(env, &ns, APP, start, json!({"template": template})).await;
    wait_ready(env, &ns, start as usize).await;
    let placed_in = started.at.elapsed();

    let mut converged_with = None;
    let mut windows = Vec::new();
    if let Some(spec) = &phase.policy {
        let mut spec = spec.clone();
        spec["targetRef"] = json!({"kind": "Deployment", "name": APP});
        let applied = Mark::now();
        apply_policy(env, &ns, APP, spec).await;
        let converged = converge(env, &ns, start as usize, phase.on_scale_in, applied).await;
        converged_with = Some((
            written(env, &ns, applied, converged).len(),
            converged.at - applied.at,
        ));
        windows.push((applied, converged));
    }
    let webhook = Registered::create(env, &shipped_webhook(&ns, op.hook, ca)).await;
    wait_webhook_called(env, op, &ns, start).await;

    let mut node_of = HashMap::new();
    let mut steps = Vec::new();
    for (from, to) in [(start, first), (first, last)] {
        let step = scale_step(env, op, &ns, phase, &groups, (from, to), &mut node_of).await;
        windows.push((step.start, step.done));
        windows.push((step.done, step.end));
        steps.push(step);
    }
    webhook.remove(env).await;
    let audit = audited(env, &ns, started, &windows);
    let report = Report {
        placed_in,
        converge: converged_with.map(|(w, t)| (w, audit.as_ref().map(|a| a[0]), t)),
        steps,
        took: started.at.elapsed(),
    };
    let step_audit: Option<Vec<usize>> =
        audit.map(|a| a[usize::from(phase.policy.is_some())..].to_vec());
    print_table(
        &tag,
        phase,
        &names,
        &ns,
        &groups,
        &report,
        step_audit.as_deref(),
        &node_of,
    );
    check(&tag, phase, &groups, &report, &node_of, failures);
    env.purge_namespace(&ns).await;
    env.kubelet.remove_pool(&ns).await;
}

#[allow(clippy::too_many_arguments)]
fn print_table(
    tag: &str,
    phase: &Phase,
    names: &[String],
    ns: &str,
    groups: &BTreeMap<String, &'static str>,
    report: &Report,
    audit: Option<&[usize]>,
    node_of: &HashMap<String, String>,
) {
    let full: Vec<String> = names.iter().map(|n| format!("{ns}-{n}")).collect();
    let row = |counts: &BTreeMap<String, usize>| -> String {
        full.iter()
            .map(|n| format!("{:>5}", counts.get(n).copied().unwrap_or(0)))
            .collect()
    };
    let converge = match report.converge {
        Some((w, a, t)) => format!(
            "converge: {w} pod writes (audit log: {}) in {:.0} s",
            a.map_or("-".to_string(), |a| a.to_string()),
            t.as_secs_f64()
        ),
        None => "no policy".to_string(),
    };
    eprintln!(
        "{tag} {}: {NODES} nodes, {} pods placed and Ready in {:.0} s; {converge}; phase took {:.0} s",
        phase.title,
        phase.sizes[0],
        report.placed_in.as_secs_f64(),
        report.took.as_secs_f64()
    );
    eprintln!(
        "{tag}   pods per node    {}",
        names
            .iter()
            .map(|n| format!("{:>5}", &n[1..]))
            .collect::<String>()
    );
    if phase.labels != Labels::Plain {
        eprintln!(
            "{tag}   {:<16} {}",
            if phase.labels == Labels::Billing {
                "class"
            } else {
                "zone"
            },
            full.iter()
                .map(|n| format!("{:>5}", groups.get(n).copied().unwrap_or("")))
                .collect::<String>()
        );
    }
    if let Some(first) = report.steps.first() {
        eprintln!(
            "{tag}   {:<16} {}",
            format!("placed {}", first.from),
            row(&first.before)
        );
    }
    for s in &report.steps {
        eprintln!(
            "{tag}   {:<16} {}",
            format!("after {}", s.to),
            row(&s.after)
        );
    }
    eprintln!(
        "{tag}   step        PUT ms  deleted s  fewest  held act/+T/+60s  writes in/after (audit)  after: on unchanged nodes  {}",
        match phase.labels {
            Labels::Plain => "",
            Labels::Billing => "od/spot after",
            Labels::Zones => "zone a/b after (skew)",
        }
    );
    for (i, s) in report.steps.iter().enumerate() {
        let audit = audit
            .and_then(|a| Some(format!("{}/{}", a.get(2 * i)?, a.get(2 * i + 1)?)))
            .unwrap_or_else(|| "-".into());
        let touched = s.on_unchanged(&s.written_after, node_of);
        let touched_nodes: BTreeSet<&str> = touched
            .iter()
            .filter_map(|p| node_of.get(*p).map(String::as_str))
            .collect();
        let split = if phase.labels == Labels::Plain {
            String::new()
        } else {
            let sum = |g: &str| -> usize {
                s.after
                    .iter()
                    .filter(|(n, _)| groups.get(*n).is_some_and(|x| *x == g))
                    .map(|(_, c)| c)
                    .sum()
            };
            let (x, y) = match phase.labels {
                Labels::Billing => (sum("od"), sum("spot")),
                _ => (sum("a"), sum("b")),
            };
            if phase.labels == Labels::Zones {
                format!("{x}/{y} ({})", x.abs_diff(y))
            } else {
                format!("{x}/{y}")
            }
        };
        eprintln!(
            "{tag}   {:<10} {:>7.0} {:>10.1} {:>7} {:>17} {:>24} {:>26}  {split}",
            format!("{}->{}", s.from, s.to),
            s.put.as_secs_f64() * 1000.0,
            s.deleted_in.as_secs_f64(),
            s.fewest,
            format!(
                "{}/{}/{}",
                s.held_active, s.held_with_terminating, s.held_later
            ),
            format!("{}/{} ({audit})", s.written_in.len(), s.written_after.len()),
            format!("{} pods on {} nodes", touched.len(), touched_nodes.len()),
        );
        for w in &s.webhook {
            eprintln!("{tag}     webhook {w}");
        }
        for (when, written) in [
            ("during the scale-in", &s.written_in),
            ("in the minute after", &s.written_after),
        ] {
            if !written.is_empty() {
                eprintln!(
                    "{tag}     written {when}, per node: {}",
                    where_written(written, node_of, ns)
                );
            }
        }
        let in_unchanged = s.on_unchanged(&s.written_in, node_of);
        if !in_unchanged.is_empty() {
            eprintln!(
                "{tag}     during the scale-in {} of the pods written were on nodes whose count did not change",
                in_unchanged.len()
            );
        }
    }
}

/// The promises (see the module's doc), each broken one added to `failures`.
fn check(
    tag: &str,
    phase: &Phase,
    groups: &BTreeMap<String, &'static str>,
    report: &Report,
    node_of: &HashMap<String, String>,
    failures: &mut Vec<String>,
) {
    for s in &report.steps {
        let step = format!("{tag} {}->{}", s.from, s.to);
        if !phase.on_scale_in && s.put > PUT_LIMIT {
            failures.push(format!("{step}: the scale request took {:?}", s.put));
        }
        if phase.fewest_promised && s.held_later != s.fewest {
            failures.push(format!(
                "{step}: the workload is on {} nodes, {} could hold it",
                s.held_later, s.fewest
            ));
        }
        if phase.labels == Labels::Billing {
            let sum = |counts: &BTreeMap<String, usize>, g: &str| -> usize {
                counts
                    .iter()
                    .filter(|(n, _)| groups.get(*n).is_some_and(|x| *x == g))
                    .map(|(_, c)| c)
                    .sum()
            };
            let spot_lost = sum(&s.before, "spot").saturating_sub(sum(&s.after, "spot"));
            let od_left = sum(&s.after, "od");
            if spot_lost > 0 && od_left > 0 {
                failures.push(format!(
                    "{step}: {spot_lost} spot pods went while {od_left} on-demand pods are left"
                ));
            }
        }
        let touched = s.on_unchanged(&s.written_after, node_of);
        if !touched.is_empty() {
            failures.push(format!(
                "{step}: in the minute after, {} pods on nodes whose count did not change were rewritten (e.g. {:?})",
                touched.len(),
                &touched[..touched.len().min(5)]
            ));
        }
    }
}

/// Karpenter's benchmark, phase after phase (see the module's doc).
pub(super) async fn t_consolidation_benchmark(env: &'static Env) {
    env.scenario("t-bench", |_| async move {
        let started = Instant::now();
        let only = std::env::var("E2E_BENCH_PHASES").unwrap_or_else(|_| "abcde".into());
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (cert, key, ca) = loopback_certificate(dir.path());
        let opts = Options::new(IDENTITY)
            .at_default_limits()
            .with_hook_tls(&cert, &key);
        let op = Operator::start(env, opts).await;
        op.wait_ready().await;
        let mut failures = Vec::new();
        for phase in phases().iter().filter(|p| only.contains(p.key)) {
            run_phase(env, &op, &ca, phase, &mut failures).await;
        }
        eprintln!(
            "t-bench: phases {only} took {:.0} s",
            started.elapsed().as_secs_f64()
        );
        assert!(
            failures.is_empty(),
            "promises broken:\n{}",
            failures.join("\n")
        );
    })
    .await;
    finished("t-bench");
}
