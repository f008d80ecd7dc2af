//! The soak (issue 52): HPA-cadence scale-ins and scale-outs, one every
//! 15 s in turn, on a 300-replica Deployment under the operator's default
//! limits, with the whole workload's utilisation reshuffled before every
//! scale-in (a real Prometheus scraping the suite's exporter), for
//! `E2E_SOAK_MINUTES` (30). Every scale-in must delete what a fresh `plan`
//! names; the operator's resident memory is sampled every minute and must
//! not grow after the first 5 minutes (within 10 % and 8 MiB: allocator
//! noise); the writes per hour are printed. Ignored unless asked for
//! (`--ignored`): it takes half an hour.

use std::time::{Duration, Instant};

use deletion_cost_testkit::eventually;
use deletion_cost_testkit::prometheus::{Exporter, PrometheusServer};
use kube::ResourceExt;

use super::exact_at_size::{
    big_deployment, hpa_scale, policy_spec, scale_in, Utilisation, IDENTITY,
};
use super::scale_series::{percentile_ms, shipped_webhook, Registered};
use super::{finished, loopback_certificate, pods};
use crate::cluster::Env;
use crate::operator::{Operator, Options};

const REPLICAS: i32 = 300;
const NODES: usize = 10;
const BY: i32 = 3;
const CADENCE: Duration = Duration::from_secs(15);

fn minutes() -> u64 {
    std::env::var("E2E_SOAK_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(30)
}

/// The operator's resident memory (kB), from /proc.
fn rss_kb(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Active (not Terminating) Ready-or-not pods of `app`.
async fn active(env: &Env, ns: &str, app: &str) -> usize {
    pods(env, ns, app)
        .await
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count()
}

/// w. The soak: see the module docs.
pub(super) async fn w_soak(env: &'static Env) {
    env.scenario("w-soak", |ns| async move {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let exporter = Exporter::start("");
        let prom = PrometheusServer::scraping(exporter.addr());
        let mut util = Utilisation::new(52);
        let mut big = big_deployment(env, &ns, root.path(), REPLICAS, NODES).await;
        super::wait_running_within(env, &ns, "big", REPLICAS as usize, Duration::from_secs(300)).await;
        let names = pods(env, &ns, "big").await.into_iter().map(|p| p.name_any()).collect();
        util.reshuffle(&ns, &names);
        exporter.set(&util.text());

        let (cert, key, ca) = loopback_certificate(root.path());
        let mut opts = Options::new(IDENTITY)
            .at_default_limits()
            .with_hook_tls(&cert, &key);
        opts.args.extend(["--prometheus-url".into(), prom.url()]);
        let op = Operator::start(env, opts).await;
        op.wait_ready().await;
        super::apply_policy(env, &ns, "big", policy_spec("Deployment", "big")).await;
        let webhook = Registered::create(env, &shipped_webhook(&ns, op.hook, &ca)).await;

        let started = Instant::now();
        let length = Duration::from_secs(minutes() * 60);
        let count_writes = || {
            env.recorder
                .entries()
                .into_iter()
                .filter(|e| e.operator == IDENTITY && e.method == "PATCH")
                .filter(|e| e.path.contains(&format!("/namespaces/{ns}/pods/")))
                .count()
        };
        let writes_at_start = count_writes();
        let mut rounds = Vec::new();
        let mut rss: Vec<(u64, u64)> = Vec::new();
        let mut next_sample = started;
        let mut tick = 0u64;
        while started.elapsed() < length {
            let due = started + CADENCE * tick as u32;
            tokio::time::sleep_until(due.into()).await;
            if Instant::now() >= next_sample {
                let minute = started.elapsed().as_secs() / 60;
                if let Some(kb) = rss_kb(op.pid()) {
                    eprintln!("w: minute {minute}: operator RSS {kb} kB, {} scale-ins so far", rounds.len());
                    rss.push((minute, kb));
                }
                next_sample += Duration::from_secs(60);
            }
            if tick.is_multiple_of(2) {
                rounds.push(scale_in(env, &ns, &mut big, BY, &mut util, &exporter, &prom).await);
            } else {
                big.replicas += BY;
                hpa_scale(env, &ns, "big", big.replicas).await;
                let want = big.replicas as usize;
                eventually(Duration::from_secs(60), "the scale-out's pods run", || async {
                    active(env, &ns, "big").await == want
                })
                .await;
                super::wait_running_within(env, &ns, "big", want, Duration::from_secs(60)).await;
            }
            tick += 1;
        }
        let elapsed = started.elapsed();
        let writes = count_writes() - writes_at_start;
        let per_hour = writes as f64 * 3600.0 / elapsed.as_secs_f64();
        let agreed = rounds.iter().filter(|r| r.agrees()).count();
        let took: Vec<Duration> = rounds.iter().map(|r| r.took).collect();
        eprintln!(
            "w: {:.1} min: {agreed} of {} scale-ins deleted what a fresh plan names; scale request p50 {:.0} ms, p99 {:.0} ms; {writes} pod writes ({per_hour:.0} an hour); RSS by minute {rss:?}",
            elapsed.as_secs_f64() / 60.0,
            rounds.len(),
            percentile_ms(&took, 0.5),
            percentile_ms(&took, 0.99),
        );
        for r in rounds.iter().filter(|r| !r.agrees()) {
            eprintln!("w: disagreed: deleted {:?}, planned {:?} (ties {:?})", r.deleted, r.victims, r.ties);
        }
        assert_eq!(agreed, rounds.len(), "every scale-in deletes what a fresh plan names");
        // flat after the first 5 minutes
        let settled: Vec<u64> = rss.iter().filter(|(m, _)| *m >= 5).map(|(_, kb)| *kb).collect();
        if let (Some(first), Some(max)) = (settled.first(), settled.iter().max()) {
            assert!(
                *max <= first + (first / 10).max(8 * 1024),
                "operator memory grew after 5 minutes: {rss:?}"
            );
        }
        webhook.remove(env).await;
        drop(op);
    })
    .await;
    finished("w-soak");
}
