//! One write budget for every write (issue 42): 20 namespaces with one
//! policy and 15 pods each, batching at once at `--qps 5 --burst 10`. Every
//! write the operator sends but the Lease's (pod patches, status, Events,
//! finalizers) is counted from its recording proxy, and, when
//! `E2E_AUDIT_LOG` names the API server's audit log (JSON lines, Metadata
//! level or more), from the server's own record too: in any window, at
//! most the burst plus `qps` a second.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::Api;
use serde_json::{json, Value};

use super::{apply_policy, finished, nodes, pod_template, pods, spot_first, wait_running};
use crate::cluster::Env;
use crate::operator::{Operator, Options};
use deletion_cost::annotations::POD_DELETION_COST;
use deletion_cost_testkit::eventually;

/// Namespaces, each with one policy over one Deployment.
const POLICIES: usize = 20;
/// Pods of each Deployment.
const PODS_EACH: usize = 15;
/// The operator identity of this scenario (the recorder's key).
const IDENTITY: &str = "p-operator";

/// What a write changes, by its path (as the operator's metric names it).
fn kind(path: &str) -> &'static str {
    if path.contains("/events") {
        "events"
    } else if path.ends_with("/status") {
        "status"
    } else if path.contains("/pods/") {
        "pods"
    } else {
        "other"
    }
}

/// The most of `times` (sorted, seconds) within any span of `window` seconds.
fn max_in_window(times: &[f64], window: f64) -> usize {
    let mut best = 0;
    let mut start = 0;
    for end in 0..times.len() {
        while times[end] - times[start] >= window {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

/// Asserts the token bucket's bound on `times` (seconds, sorted): any window
/// of length w holds at most burst + qps * w writes, with a quarter second of
/// slack for the time between the limiter and where the time is taken.
fn assert_within(times: &[f64], qps: f64, burst: u32, source: &str) {
    for w in [1.0, 10.0, 30.0] {
        let limit = f64::from(burst) + qps * (w + 0.25);
        let max = max_in_window(times, w);
        eprintln!("p: {source}: at most {max} writes of every kind within {w} s (limit {limit})");
        assert!(
            max as f64 <= limit,
            "{source}: {max} writes within {w} s (limit {limit})"
        );
    }
}

/// The operator's writes in the API server's audit log between `from` and
/// `to`: (seconds since `from`, kind), sorted. `None` without `E2E_AUDIT_LOG`.
fn audited_writes(user: &str, from: Timestamp, to: Timestamp) -> Option<Vec<(f64, &'static str)>> {
    let paths = audited_paths(user, from, to)?;
    Some(paths.into_iter().map(|(t, p)| (t, kind(&p))).collect())
}

/// The writes of `user` but the Lease's in the API server's audit log
/// between `from` and `to`: (seconds since `from`, request path without
/// the query), sorted. `None` without `E2E_AUDIT_LOG`.
pub(super) fn audited_paths(
    user: &str,
    from: Timestamp,
    to: Timestamp,
) -> Option<Vec<(f64, String)>> {
    let path = std::env::var_os("E2E_AUDIT_LOG")?;
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("E2E_AUDIT_LOG {}: {e}", path.to_string_lossy()));
    let mut out: Vec<(f64, String)> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["user"]["username"] == user
                && matches!(
                    e["verb"].as_str(),
                    Some("create" | "update" | "patch" | "delete")
                )
                && e["objectRef"]["resource"] != "leases"
        })
        .filter_map(|e| {
            let at: Timestamp = e["requestReceivedTimestamp"].as_str()?.parse().ok()?;
            if at < from || at > to {
                return None;
            }
            let secs = at.duration_since(from).as_secs_f64();
            let uri = e["requestURI"].as_str().unwrap_or_default();
            Some((secs, uri.split('?').next().unwrap_or_default().to_string()))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    Some(out)
}

fn count_by_kind<'a>(kinds: impl Iterator<Item = &'a str>) -> BTreeMap<&'a str, usize> {
    let mut by_kind = BTreeMap::new();
    for k in kinds {
        *by_kind.entry(k).or_default() += 1;
    }
    by_kind
}

/// p. Twenty policies batching at once: every write of every kind inside
/// `--qps`/`--burst`, counted where the operator sends them and, with
/// `E2E_AUDIT_LOG`, where the API server records them.
pub(super) async fn p_write_budget(env: &'static Env) {
    env.scenario("p", |ns| async move {
        let (qps, burst) = (5.0, 10u32);
        nodes(env, &ns, 2, 2).await;
        let mut namespaces = vec![ns.clone()];
        for i in 1..POLICIES {
            namespaces.push(env.namespace(&format!("p{i:02}")).await);
        }
        // one Deployment per namespace, all on the scenario's pool of nodes
        for team in &namespaces {
            let d: Deployment = serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": team},
                "spec": {"replicas": PODS_EACH, "selector": {"matchLabels": {"app": "web"}},
                    "template": pod_template(&ns, "web")},
            }))
            .unwrap_or_else(|e| panic!("{e}"));
            Api::<Deployment>::namespaced(env.client.clone(), team)
                .create(&PostParams::default(), &d)
                .await
                .unwrap_or_else(|e| panic!("creating {team}/web: {e}"));
        }
        for team in &namespaces {
            wait_running(env, team, "web", PODS_EACH).await;
        }
        let mut opts = Options::new(IDENTITY);
        opts.qps = qps;
        opts.burst = burst;
        let op = Operator::start(env, opts).await;
        op.wait_ready().await;

        let (started, started_at) = (Instant::now(), Timestamp::now());
        for team in &namespaces {
            apply_policy(env, team, "web", spot_first("web")).await;
        }
        // at 5 writes a second, 300 pod writes, 20 finalizers and the
        // statuses and Events take about two minutes
        eventually(
            Duration::from_secs(300),
            "every pod of the 20 namespaces carries its cost and every status is done",
            || async {
                for team in &namespaces {
                    let costed = pods(env, team, "web")
                        .await
                        .iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none())
                        .filter(|p| p.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(POD_DELETION_COST)))
                        .count();
                    let policy = super::policy(env, team, "web").await;
                    let st = super::status_value(&policy);
                    if costed != PODS_EACH || st["pendingPatches"].as_u64() != Some(0) {
                        return false;
                    }
                }
                true
            },
        )
        .await;
        let converged = started.elapsed();
        // the batch's last Events follow its last status writes
        tokio::time::sleep(Duration::from_secs(5)).await;
        let ended_at = Timestamp::now();

        let writes: Vec<(f64, String)> = env
            .recorder
            .entries()
            .into_iter()
            .filter(|e| {
                e.operator == IDENTITY
                    && e.method != "GET"
                    && e.at >= started
                    && !e.path.contains("/leases/")
            })
            .map(|e| (e.at.duration_since(started).as_secs_f64(), e.path))
            .collect();
        let by_kind = count_by_kind(writes.iter().map(|(_, p)| kind(p)));
        eprintln!(
            "p: converged {converged:?} after the policies were applied; the operator sent {} writes: {by_kind:?}",
            writes.len()
        );
        assert!(by_kind.get("pods").copied().unwrap_or(0) >= POLICIES * PODS_EACH, "{by_kind:?}");
        assert!(by_kind.get("status").copied().unwrap_or(0) >= POLICIES, "{by_kind:?}");
        assert!(by_kind.get("other").copied().unwrap_or(0) >= POLICIES, "the finalizers: {by_kind:?}");
        let mut times: Vec<f64> = writes.iter().map(|(t, _)| *t).collect();
        times.sort_by(f64::total_cmp);
        assert_within(&times, qps, burst, "the recording proxy");

        // each policy's status shows its progress during the batch: with 20
        // policies at 5/s, every 16 s (a quarter of the budget), plus its
        // turn in the budget
        let mut longest = 0.0f64;
        for team in &namespaces {
            let status: Vec<f64> = writes
                .iter()
                .filter(|(_, p)| {
                    p.ends_with("/status") && p.contains(&format!("/namespaces/{team}/"))
                })
                .map(|(t, _)| *t)
                .collect();
            assert!(!status.is_empty(), "{team}: no status written");
            for pair in status.windows(2) {
                longest = longest.max(pair[1] - pair[0]);
            }
        }
        eprintln!("p: longest time between two status writes of one policy: {longest:.1} s");
        assert!(longest <= 30.0, "a policy's status went {longest:.1} s without a write");

        // the API server's own record, when the run can read it
        let user = format!("system:serviceaccount:{}:deletion-cost", env.system_ns);
        match audited_writes(&user, started_at, ended_at) {
            None => eprintln!("p: E2E_AUDIT_LOG unset: the audit log was not read"),
            Some(audited) => {
                let by_kind = count_by_kind(audited.iter().map(|(_, k)| *k));
                eprintln!("p: the audit log has {} writes of the operator: {by_kind:?}", audited.len());
                assert!(
                    by_kind.get("pods").copied().unwrap_or(0) >= POLICIES * PODS_EACH,
                    "the audit log misses pod writes (is E2E_AUDIT_LOG this server's?): {by_kind:?}"
                );
                let times: Vec<f64> = audited.iter().map(|(t, _)| *t).collect();
                assert_within(&times, qps, burst, "the audit log");
            }
        }
        drop(op);
        for team in &namespaces[1..] {
            env.purge_namespace(team).await;
        }
    })
    .await;
    finished("p");
}
