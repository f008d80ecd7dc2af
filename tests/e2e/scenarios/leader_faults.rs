//! The scale-in path under faults (issue 52) on the real control plane: two
//! operator replicas with leader election at the default timings and write
//! limits, the webhook reached through the hook's Service as the shipped
//! Deployment runs it (`crate::service`), a 150-replica Deployment under an
//! `OnScaleIn` spot-first policy. Before each scale-in three pods the policy
//! keeps are marked: only the webhook's correction makes exactly them go,
//! so a scale-in is exact only when the leader assisted it. Faults: the
//! leader frozen (SIGSTOP) 30 ms into a scale-in and resumed past its
//! lease, the leader killed 30 ms into one (its correction in flight), two
//! scale-ins 150 ms apart, the webhook unreachable (connections held). For
//! each: the scale call's time, whether it was exact, and, over the whole
//! run, that no pod was written outside its writer's term nor by two
//! replicas for one scale-in (by each replica's recording proxy and, with
//! `E2E_AUDIT_LOG`, by the API server's audit log: the replicas run as two
//! ServiceAccounts), and at most one victims Event per scale-in. With
//! `E2E_APISERVER_PID_FILE` the API server is also killed mid-scale-in and
//! started again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use deletion_cost::marker::PREFER_FOR_SCALE_DOWN;
use deletion_cost_testkit::eventually;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

use super::marker::{choose, mark, on_demand_nodes, spread};
use super::scale_series::{scale_named, shipped_webhook, Registered, Scaler};
use super::{
    finished, loopback_certificate, pod_writes, pods, terminating, written_outside_terms, CAPACITY,
    ZONE,
};
use crate::cluster::{labels, Env};
use crate::operator::{Operator, Options};
use crate::service::{Backend, LeaderService};

const APP: &str = "web";
/// Prices, so every assisted scale-in is priced (and its Event says so).
const PRICES: &str = "currency: USD\nbillingClasses: {spot: 0.0416, on-demand: 0.192}\n";
const REPLICAS: i32 = 150;
const BY: i32 = 3;
/// The promise: a scale call returns within the webhook's timeout (3 s),
/// plus the API server's own work on the update.
const CALL_LIMIT: Duration = Duration::from_millis(3500);
/// The operator's default lease timings.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RENEW_DEADLINE: Duration = Duration::from_secs(10);

/// The policy: pods of spot nodes go first; costs only at scale-in, so
/// nothing but the webhook's correction puts the marked pods first.
fn policy() -> Value {
    json!({
        "targetRef": {"kind": "Deployment", "name": APP},
        "writes": "OnScaleIn",
        "signals": [{"billingClass": {"nodeLabel": CAPACITY, "costs": {"spot": 0, "on-demand": 1000}, "default": 500}}],
    })
}

/// One scale-in and what it showed.
#[derive(Debug)]
struct Round {
    label: String,
    took: Vec<Duration>,
    marked: BTreeSet<String>,
    deleted: BTreeSet<String>,
    /// When the scale call began and when the deletions were seen.
    window: (Instant, Instant),
    /// The same, on the wall clock (for the audit log).
    wall: (Timestamp, Timestamp),
}

impl Round {
    fn exact(&self) -> bool {
        self.deleted == self.marked
    }
}

struct Run {
    env: &'static Env,
    ns: String,
    replicas: i32,
    rounds: Vec<Round>,
    /// Scale calls retry a failed connection, as the HPA does (the API
    /// server restarting).
    retrying: bool,
}

impl Run {
    /// Marks `BY * calls` pods the policy keeps, waits a second, then
    /// scales in by `BY` `calls` times, `gap` apart (each its own client
    /// call), running `fault` `fault_after` into the first; waits for the
    /// deletions.
    async fn round(
        &mut self,
        label: &str,
        calls: usize,
        gap: Duration,
        fault: Option<(Duration, Box<dyn FnOnce() + Send>)>,
    ) -> &Round {
        let (env, ns) = (self.env, self.ns.clone());
        let all = pods(env, &ns, APP).await;
        let on_demand = on_demand_nodes(env, &ns).await;
        let mut marked = BTreeSet::new();
        for _ in 0..calls {
            let taken: Vec<String> = marked.iter().cloned().collect();
            let rest: Vec<Pod> = all
                .iter()
                .filter(|p| !marked.contains(&p.name_any()))
                .cloned()
                .collect();
            marked.extend(choose(&rest, &on_demand, &taken));
        }
        let before = terminating(env, &ns, APP).await;
        mark(
            env,
            &ns,
            &marked.iter().cloned().collect::<Vec<_>>(),
            PREFER_FOR_SCALE_DOWN,
        )
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (started, started_wall) = (Instant::now(), Timestamp::now());
        let mut calls_running = Vec::new();
        for i in 0..calls {
            self.replicas -= BY;
            let (ns, to) = (ns.clone(), self.replicas);
            let retrying = self.retrying;
            calls_running.push(tokio::spawn(async move {
                if retrying {
                    scale_retrying(env, &ns, to).await
                } else {
                    scale_named(env, &ns, Scaler::HpaScale, APP, to).await
                }
            }));
            if i + 1 < calls {
                tokio::time::sleep(gap).await;
            }
        }
        if let Some((after, fault)) = fault {
            tokio::time::sleep(after.saturating_sub(started.elapsed())).await;
            fault();
        }
        let mut took = Vec::new();
        for c in calls_running {
            took.push(c.await.unwrap_or_else(|e| panic!("a scale call: {e}")));
        }
        let want = before.len() + BY as usize * calls;
        eventually(
            Duration::from_secs(60),
            &format!(
                "{label}: the controller deletes {} pods",
                BY as usize * calls
            ),
            || async { terminating(env, &ns, APP).await.len() >= want },
        )
        .await;
        let (done, done_wall) = (Instant::now(), Timestamp::now());
        // a second sync deleting more would show now
        tokio::time::sleep(Duration::from_secs(1)).await;
        let deleted: BTreeSet<String> = terminating(env, &ns, APP)
            .await
            .difference(&before)
            .cloned()
            .collect();
        // marked pods a scale-in left would go first in the next one
        let left: Vec<String> = marked.difference(&deleted).cloned().collect();
        unmark(env, &ns, &left).await;
        let round = Round {
            label: label.into(),
            took,
            marked,
            deleted,
            window: (started, done),
            wall: (started_wall, done_wall),
        };
        eprintln!(
            "v: {:<28} calls {:?} exact {} (marked {:?}, deleted {:?})",
            round.label,
            round.took,
            round.exact(),
            round.marked,
            round.deleted
        );
        self.rounds.push(round);
        self.rounds.last().unwrap_or_else(|| unreachable!())
    }

    /// Scale-ins every 2 s until one is exact; how long that took from `since`.
    async fn until_exact(&mut self, label: &str, since: Instant, within: Duration) -> Duration {
        loop {
            let exact = self.round(label, 1, Duration::ZERO, None).await.exact();
            if exact {
                return since.elapsed();
            }
            assert!(
                since.elapsed() < within,
                "{label}: no exact scale-in within {within:?}"
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

/// HPA-style `deployments/scale` update to `to` replicas, read and written
/// again after a failed connection or a server error until it lands
/// (the API server restarting): the time from the first try.
async fn scale_retrying(env: &Env, ns: &str, to: i32) -> Duration {
    use k8s_openapi::api::apps::v1::Deployment;
    let api = Api::<Deployment>::namespaced(env.client.clone(), ns);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        let attempt = async {
            let mut scale = api.get_scale(APP).await?;
            if scale.spec.as_ref().and_then(|s| s.replicas) == Some(to) {
                return Ok(());
            }
            scale.spec.get_or_insert_with(Default::default).replicas = Some(to);
            api.replace_scale(APP, &Default::default(), &scale)
                .await
                .map(|_| ())
        };
        match attempt.await {
            Ok(()) => return started.elapsed(),
            Err(e) => eprintln!("v: scale to {to}: {e}; again"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("scaling {ns}/{APP} to {to}: no answer within 60 s");
}

/// v. Issue 52's faults during scale-ins, two replicas, default timings.
pub(super) async fn v_scale_ins_under_leader_faults(env: &'static Env) {
    env.scenario("v-faults", |ns| async move {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut list = Vec::new();
        for (class, zone) in [("spot", "zone-a"), ("on-demand", "zone-b")] {
            for i in 0..5 {
                list.push((format!("{class}-{i}"), labels(&[(CAPACITY, class), (ZONE, zone)])));
            }
        }
        let refs: Vec<(&str, BTreeMap<String, String>)> =
            list.iter().map(|(n, l)| (n.as_str(), l.clone())).collect();
        env.kubelet.add_nodes(&ns, &refs).await;
        super::create_workload(env, &ns, "Deployment", APP, REPLICAS, spread(&ns, APP)).await;
        super::wait_running_within(env, &ns, APP, REPLICAS as usize, Duration::from_secs(180)).await;
        super::apply_policy(env, &ns, APP, policy()).await;

        let (cert, key, ca) = loopback_certificate(dir.path());
        let prices = dir.path().join("prices.yaml");
        std::fs::write(&prices, PRICES).unwrap_or_else(|e| panic!("{e}"));
        // v-b as a ServiceAccount of its own, so the API server's audit log
        // tells the replicas apart
        let token_b = second_service_account(env, SA_B).await;
        let opts = |who: &str| {
            // the operator's default write limits and lease timings
            let mut o = Options::new(who)
                .at_default_limits()
                .with_hook_tls(&cert, &key);
            if who == "v-b" {
                o.token = Some(token_b.clone());
            }
            o.args.extend([
                "--prices".into(),
                prices.to_string_lossy().into_owned(),
            ]);
            o
        };
        LeaderService::create_pods(env, &["v-a", "v-b"]).await;
        let a = Operator::start(env, opts("v-a")).await;
        a.wait_ready().await;
        eventually(Duration::from_secs(30), "v-a leads", || async { a.is_leader().await }).await;
        let mut b = Operator::start(env, opts("v-b")).await;
        b.wait_synced().await;
        let backends = |a: &Operator, b: &Operator| {
            vec![
                Backend { identity: "v-a".into(), hook: a.hook, metrics: a.metrics },
                Backend { identity: "v-b".into(), hook: b.hook, metrics: b.metrics },
            ]
        };
        let svc = LeaderService::start(env, backends(&a, &b)).await;
        eventually(Duration::from_secs(20), "the Service routes to v-a", || async {
            svc.endpoints() == ["v-a"]
        })
        .await;
        let webhook = Registered::create(env, &shipped_webhook(&ns, svc.addr, &ca)).await;
        let mut run = Run { env, ns: ns.clone(), replicas: REPLICAS, rounds: Vec::new(), retrying: false };

        // ---- baseline
        let base = run.round("baseline", 1, Duration::ZERO, None).await;
        assert!(base.exact(), "the baseline scale-in is exact: {base:?}");

        // ---- the leader frozen 30 ms into a scale-in, resumed past its lease
        let pid_a = a.pid();
        let (frozen_at, frozen_ts) = (Instant::now(), Timestamp::now());
        let r = run
            .round(
                "leader frozen mid-call",
                1,
                Duration::ZERO,
                Some((Duration::from_millis(30), Box::new(move || stop(pid_a, libc::SIGSTOP)))),
            )
            .await;
        let frozen_call = r.took[0];
        let to_exact = run
            .until_exact("while v-a is frozen", frozen_at, Duration::from_secs(60))
            .await;
        assert!(b.is_leader().await, "v-b leads after v-a froze");
        // past its lease (it is long over: v-b leads), then resumed
        let frozen_for = LEASE_DURATION + Duration::from_secs(5);
        tokio::time::sleep(frozen_for.saturating_sub(frozen_at.elapsed())).await;
        stop(pid_a, libc::SIGCONT);
        let resumed = Instant::now();
        eventually(Duration::from_secs(20), "the resumed v-a follows", || async {
            !a.is_leader().await
        })
        .await;
        let after = run.round("after v-a resumed", 1, Duration::ZERO, None).await;
        assert!(after.exact(), "exact after the frozen leader resumed: {after:?}");
        let a_late: Vec<_> = pod_writes(env, &ns, &["v-a"])
            .into_iter()
            .filter(|(_, at)| *at >= resumed)
            .collect();
        assert!(a_late.is_empty(), "the resumed v-a wrote pods: {a_late:?}");
        eprintln!(
            "v: frozen leader: the call in flight took {frozen_call:?}; v-b led {:?} and the first scale-in tried after that was exact {to_exact:?} after the freeze",
            leads_after(&b, frozen_ts)
        );

        // ---- the leader (v-b now) killed 30 ms into a scale-in
        let pid_b = b.pid();
        let (killed_at, killed_ts) = (Instant::now(), Timestamp::now());
        let r = run
            .round(
                "leader killed mid-call",
                1,
                Duration::ZERO,
                Some((Duration::from_millis(30), Box::new(move || stop(pid_b, libc::SIGKILL)))),
            )
            .await;
        let killed_call = r.took[0];
        b.wait_exit(Duration::from_secs(5)).await;
        let to_exact_kill = run
            .until_exact("after v-b was killed", killed_at, Duration::from_secs(60))
            .await;
        eprintln!(
            "v: killed leader, not restarted (its node gone): the call in flight took {killed_call:?}; v-a led {:?} and the first scale-in tried after that was exact {to_exact_kill:?} after the kill",
            leads_after(&a, killed_ts)
        );
        // v-b comes back in its pod (same identity), as a follower
        b = Operator::start(env, opts("v-b")).await;
        b.wait_synced().await;
        svc.replace(backends(&a, &b).remove(1));

        // ---- the leader (v-a) killed 30 ms into a scale-in and restarted
        // in its pod at once, as the kubelet does
        let mut a = a;
        let pid_a = a.pid();
        let (restarted_at, restarted_ts) = (Instant::now(), Timestamp::now());
        let r = run
            .round(
                "leader killed, restarted",
                1,
                Duration::ZERO,
                Some((Duration::from_millis(30), Box::new(move || stop(pid_a, libc::SIGKILL)))),
            )
            .await;
        let restarted_call = r.took[0];
        a.wait_exit(Duration::from_secs(5)).await;
        a = Operator::start(env, opts("v-a")).await;
        svc.replace(backends(&a, &b).remove(0));
        let to_exact_restart = run
            .until_exact("after v-a restarted", restarted_at, Duration::from_secs(60))
            .await;
        eprintln!(
            "v: killed leader, restarted at once: the call in flight took {restarted_call:?}; v-a led again {:?} and the first scale-in tried after that was exact {to_exact_restart:?} after the kill",
            leads_after(&a, restarted_ts)
        );

        // ---- two scale-ins 150 ms apart, from two calls
        let two = run.round("two scale-ins 150 ms apart", 2, Duration::from_millis(150), None).await;
        assert!(two.exact(), "both scale-ins exact: {two:?}");

        // ---- the webhook unreachable (a NetworkPolicy dropping the calls)
        svc.blackhole(true);
        let unreachable = run.round("webhook unreachable", 1, Duration::ZERO, None).await;
        let unreachable_call = unreachable.took[0];
        svc.blackhole(false);
        let back = run.round("webhook reachable again", 1, Duration::ZERO, None).await;
        assert!(back.exact(), "exact once the webhook is reached again: {back:?}");

        // ---- a scale-in while a background batch of the same policy is
        // written: the policy turned Continuous writes every pod's cost at
        // 5 a second
        // The last scale-in's hold keeps background writes off the
        // workload's pods for HOLD (15 s) and 50 ms a pod after its
        // answer, and no longer: the batch starts when it ends.
        let last_call = run.rounds.last().map(|r| r.window.0).unwrap_or_else(Instant::now);
        let mut continuous = policy();
        continuous["writes"] = json!("Continuous");
        super::apply_policy(env, &ns, APP, continuous).await;
        let batch_from = Instant::now();
        eventually(Duration::from_secs(30), "the background batch is being written", || async {
            pod_writes(env, &ns, &["v-a", "v-b"]).iter().filter(|(_, at)| *at >= batch_from).count() >= 5
        })
        .await;
        let first_background = pod_writes(env, &ns, &["v-a", "v-b"])
            .into_iter()
            .filter(|(_, at)| *at >= batch_from)
            .map(|(_, at)| at)
            .min()
            .unwrap_or_else(Instant::now);
        let held = first_background.duration_since(last_call);
        eprintln!("v: the first background write came {held:?} after the last scale-in's call");
        assert!(
            held <= deletion_cost::engine::HOLD + Duration::from_secs(5),
            "a hold outlived its time: the background waited {held:?}"
        );
        let during = run.round("during a background batch", 1, Duration::ZERO, None).await;
        assert!(during.exact(), "exact during a background batch: {during:?}");

        // ---- the API server killed (SIGKILL) 80 ms into a scale-in, between
        // the correction and the settle, and started again a second later
        match std::env::var_os("E2E_APISERVER_PID_FILE") {
            Some(pid_file) => {
                let pid_file = std::path::PathBuf::from(pid_file);
                run.retrying = true;
                let restarted = run
                    .round(
                        "API server killed mid-call",
                        1,
                        Duration::ZERO,
                        Some((
                            Duration::from_millis(80),
                            Box::new(move || restart_api_server(&pid_file, Duration::from_secs(1))),
                        )),
                    )
                    .await;
                eprintln!(
                    "v: API server killed mid-call: the scale, retried until the server answered, {:?}",
                    restarted.took
                );
                run.retrying = false;
                let back = run.round("after the API server restart", 1, Duration::ZERO, None).await;
                assert!(back.exact(), "exact after the API server came back: {back:?}");
            }
            None => eprintln!("v: API server restart: not run (E2E_APISERVER_PID_FILE unset)"),
        }

        // ---- what every round shows
        for r in &run.rounds {
            for t in &r.took {
                assert!(*t <= CALL_LIMIT, "{}: a scale call took {t:?}", r.label);
            }
        }
        let outside = written_outside_terms(env, &ns, &["v-a", "v-b"], RENEW_DEADLINE);
        assert!(outside.is_empty(), "pods written outside a term: {outside:?}");
        let writes = pod_writes(env, &ns, &["v-a", "v-b"]);
        for r in &run.rounds {
            let writers: BTreeSet<&str> = writes
                .iter()
                .filter(|(_, at)| *at >= r.window.0 && *at <= r.window.1)
                .map(|(w, _)| w.as_str())
                .collect();
            assert!(writers.len() <= 1, "{}: pods written by {writers:?}", r.label);
        }
        match audited_pod_writes(env, &ns) {
            Some(audited) => {
                let outside = audited_outside_terms(env, &audited);
                assert!(outside.is_empty(), "the audit log has pod writes outside a term: {outside:?}");
                for r in &run.rounds {
                    let users: BTreeSet<&str> = audited
                        .iter()
                        .filter(|w| w.at >= r.wall.0 && w.at <= r.wall.1)
                        .map(|w| w.user.as_str())
                        .collect();
                    assert!(users.len() <= 1, "{}: the audit log has pod writes by {users:?}", r.label);
                }
                let mut by_user: BTreeMap<&str, usize> = BTreeMap::new();
                for w in audited.iter().filter(|w| !w.path.contains("/leases")) {
                    *by_user.entry(w.user.as_str()).or_default() += 1;
                }
                eprintln!("v: audit log: pod writes by user {by_user:?}, 0 outside a term, none by two users in one round");
            }
            None => eprintln!("v: audit log: not read (E2E_AUDIT_LOG unset); judged by the recording proxies only"),
        }
        let (events, priced) = victims_events(env, &ns).await;
        let scale_ins = run.rounds.iter().map(|r| r.took.len()).sum::<usize>();
        assert!(events <= scale_ins, "{events} victims Events for {scale_ins} scale-ins");
        assert!(priced <= events, "{priced} priced of {events} Events");
        let exact = run.rounds.iter().filter(|r| r.exact()).count();
        eprintln!(
            "v: {exact} of {} rounds exact; calls: frozen {frozen_call:?}, killed {killed_call:?}, killed and restarted {restarted_call:?}, unreachable {unreachable_call:?}; {} pod writes, 0 outside a term; {events} victims Events ({priced} priced) for {scale_ins} scale-ins",
            run.rounds.len(),
            writes.len()
        );
        for op in [&a, &b] {
            let lists = op.metric("deletion_cost_scale_in_node_requests_total{request=\"list\"}").await;
            let gets = op.metric("deletion_cost_scale_in_node_requests_total{request=\"get\"}").await;
            eprintln!("v: node reads of a replica: lists {lists:?}, gets {gets:?}");
        }
        webhook.remove(env).await;
        svc.stop().await;
        drop(b);
        drop(a);
    })
    .await;
    finished("v-faults");
}

/// The second replica's ServiceAccount.
const SA_B: &str = "deletion-cost-b";

/// Creates ServiceAccount `name` in the operator's namespace with the
/// operator's RBAC (added to the run's bindings); its token.
async fn second_service_account(env: &Env, name: &str) -> String {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let token = super::service_account_token(env, &env.system_ns, name).await;
    for binding in crate::rbac::rendered(&env.run, &env.system_ns)
        .into_iter()
        .filter(|d| d["kind"].as_str().is_some_and(|k| k.ends_with("Binding")))
    {
        let kind = binding["kind"].as_str().unwrap_or_default();
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            kind,
        ));
        let api: Api<DynamicObject> = match binding["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(env.client.clone(), ns, &ar),
            None => Api::all_with(env.client.clone(), &ar),
        };
        let bname = binding["metadata"]["name"].as_str().unwrap_or_default();
        let mut current = api
            .get(bname)
            .await
            .unwrap_or_else(|e| panic!("reading {kind} {bname}: {e}"));
        if let Some(subjects) = current.data["subjects"].as_array_mut() {
            subjects
                .push(json!({"kind": "ServiceAccount", "name": name, "namespace": env.system_ns}));
        }
        api.replace(bname, &PostParams::default(), &current)
            .await
            .unwrap_or_else(|e| panic!("binding {name} in {kind} {bname}: {e}"));
    }
    token
}

/// One write in the API server's audit log.
#[derive(Debug)]
struct Audited {
    user: String,
    at: Timestamp,
    path: String,
}

/// The operator users' successful pod writes in namespace `ns` and their
/// accepted changes of the run's Lease, from the audit log
/// (`E2E_AUDIT_LOG`); `None` without it. Lease changes have `leases` in
/// their path.
fn audited_pod_writes(env: &Env, ns: &str) -> Option<Vec<Audited>> {
    let path = std::env::var_os("E2E_AUDIT_LOG")?;
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("E2E_AUDIT_LOG: {e}"));
    let users = [
        format!("system:serviceaccount:{}:deletion-cost", env.system_ns),
        format!("system:serviceaccount:{}:{SA_B}", env.system_ns),
    ];
    let lease = format!("/leases/deletion-cost-{}", env.run);
    let pods = format!("/api/v1/namespaces/{ns}/pods/");
    Some(
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["stage"] == "ResponseComplete")
            .filter(|e| {
                e["responseStatus"]["code"]
                    .as_u64()
                    .is_some_and(|c| c < 300)
            })
            .filter(|e| matches!(e["verb"].as_str(), Some("create" | "update" | "patch")))
            .filter_map(|e| {
                let user = e["user"]["username"].as_str()?.to_string();
                if !users.contains(&user) {
                    return None;
                }
                let uri = e["requestURI"].as_str()?.split('?').next()?.to_string();
                let keep =
                    uri.starts_with(&pods) || uri.contains(&lease) || uri.ends_with("/leases");
                let at: Timestamp = e["requestReceivedTimestamp"].as_str()?.parse().ok()?;
                keep.then_some(Audited {
                    user,
                    at,
                    path: uri,
                })
            })
            .collect(),
    )
}

/// The audited pod writes outside their writer's term: the last accepted
/// Lease change before the write was another user's, or more than the
/// renew deadline before it.
fn audited_outside_terms(env: &Env, audited: &[Audited]) -> Vec<String> {
    let lease = format!("/leases/deletion-cost-{}", env.run);
    let changes: Vec<&Audited> = audited
        .iter()
        .filter(|w| w.path.contains(&lease) || w.path.ends_with("/leases"))
        .collect();
    let slack = k8s_openapi::jiff::SignedDuration::from_millis(200);
    let deadline = k8s_openapi::jiff::SignedDuration::try_from(RENEW_DEADLINE).unwrap_or_default();
    audited
        .iter()
        .filter(|w| !w.path.contains("/leases"))
        .filter(|w| {
            let term = changes.iter().rev().find(|c| c.at <= w.at);
            !term.is_some_and(|c| c.user == w.user && w.at.duration_since(c.at) < deadline + slack)
        })
        .map(|w| format!("{} by {} at {}", w.path, w.user, w.at))
        .collect()
}

/// Takes the marker off `names`.
async fn unmark(env: &Env, ns: &str, names: &[String]) {
    let api = Api::<Pod>::namespaced(env.client.clone(), ns);
    for name in names {
        let patch = json!({"metadata": {"labels": {PREFER_FOR_SCALE_DOWN: null}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("unmarking {ns}/{name}: {e}"));
    }
}

/// When `op` last began a term's writes (its log), `since` the instant
/// `zero` (wall clock) stands for.
fn leads_after(op: &Operator, zero: Timestamp) -> Option<Duration> {
    let line = op.log_lines("leading: writes enabled").pop()?;
    let at: Timestamp = line.get("timestamp")?.as_str()?.parse().ok()?;
    at.duration_since(zero).try_into().ok()
}

/// Sends `sig` to `pid` (a replica the scenario runs).
fn stop(pid: i32, sig: i32) {
    // SAFETY: kill(2) on our own child's pid has no memory effects.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

/// The `ScaleInVictims` Events on the Deployment, and how many of them
/// price the scale-in.
async fn victims_events(env: &Env, ns: &str) -> (usize, usize) {
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(env.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let ours: Vec<_> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("ScaleInVictims"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Deployment"))
        .collect();
    let priced = ours
        .iter()
        .filter(|e| e.note.as_deref().is_some_and(|n| n.contains("USD/h")))
        .count();
    (ours.len(), priced)
}

/// When the scenario killed the API server.
static API_SERVER_KILLED: std::sync::Mutex<Vec<Instant>> = std::sync::Mutex::new(Vec::new());

/// How long a restarted API server may refuse requests its RBAC allows:
/// its authorizer's caches fill after it serves again.
const AUTHORIZER_CATCHING_UP: Duration = Duration::from_secs(30);

/// Whether `at` falls while the API server this scenario killed was down
/// or its authorizer catching up: a 403 then is not an RBAC gap.
pub(crate) fn api_server_restarting(at: Instant) -> bool {
    API_SERVER_KILLED.lock().is_ok_and(|killed| {
        killed
            .iter()
            .any(|k| at >= *k && at.duration_since(*k) < AUTHORIZER_CATCHING_UP)
    })
}

/// Kills the API server whose pid `pid_file` holds and starts it again
/// after `down`, with the same command line, directory and environment
/// (its output appended to the log beside its pid file's folder, if any);
/// writes the new pid back. Runs on its own thread: the caller goes on.
fn restart_api_server(pid_file: &std::path::Path, down: Duration) {
    let pid: i32 = std::fs::read_to_string(pid_file)
        .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
    let proc_dir = format!("/proc/{pid}");
    let split = |bytes: Vec<u8>| -> Vec<String> {
        bytes
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    };
    let argv = split(std::fs::read(format!("{proc_dir}/cmdline")).unwrap_or_default());
    let environ = split(std::fs::read(format!("{proc_dir}/environ")).unwrap_or_default());
    let cwd = std::fs::read_link(format!("{proc_dir}/cwd")).unwrap_or_else(|_| "/".into());
    assert!(
        !argv.is_empty(),
        "the API server's command line ({proc_dir})"
    );
    stop(pid, libc::SIGKILL);
    if let Ok(mut at) = API_SERVER_KILLED.lock() {
        at.push(Instant::now());
    }
    let pid_file = pid_file.to_path_buf();
    std::thread::spawn(move || {
        std::thread::sleep(down);
        let log = pid_file
            .parent()
            .and_then(|run| run.parent())
            .map(|root| root.join("logs").join("kube-apiserver.log"))
            .and_then(|p| std::fs::OpenOptions::new().append(true).open(p).ok());
        let mut cmd = std::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]).current_dir(cwd).env_clear();
        for kv in &environ {
            if let Some((k, v)) = kv.split_once('=') {
                cmd.env(k, v);
            }
        }
        match log {
            Some(f) => {
                let err = f.try_clone().unwrap_or_else(|e| panic!("{e}"));
                cmd.stdout(f).stderr(err);
            }
            None => {
                cmd.stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null());
            }
        }
        // its own session: it outlives the suite, as the control plane does
        // SAFETY: setsid is async-signal-safe and touches no Rust state.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::setsid();
                Ok(())
            });
        }
        // not waited for: it outlives the suite, as the control plane does
        #[allow(clippy::zombie_processes)]
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting the API server again: {e}"));
        std::fs::write(&pid_file, format!("{}\n", child.id()))
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
    });
}
