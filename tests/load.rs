//! Load harness (ignored by default; run by hand):
//!
//! ```sh
//! cargo test --release --test load -- --ignored --nocapture
//! ```
//!
//! Runs the real `deletion-cost run` binary as its own process against the
//! in-process fake API server with 10,000 pods across 50 policies, and
//! reports time to converge, writes per second against the configured QPS,
//! writes at steady state, the operator's RSS with 10k pods (at steady state,
//! as the last write lands, after a refresh, and its peak) and 100k pods watched,
//! and CPU per refresh cycle of all policies. It measures; it asserts only the
//! properties the product promises (the limit and zero steady-state writes).

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use deletion_cost_testkit::fake_api::{FakeApi, Verb};
use deletion_cost_testkit::free_port;
use serde_json::json;

const NAMESPACES: usize = 5;
const POLICIES_PER_NS: usize = 10;
/// Pods per policy; `LOAD_PODS_PER_POLICY` overrides (default 200: 10,000 pods).
fn pods_per_policy() -> usize {
    std::env::var("LOAD_PODS_PER_POLICY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}
const NODES: usize = 300;
const QPS: f64 = 500.0;
const BURST: u32 = 50;

struct OperatorProcess {
    child: Child,
    metrics_port: u16,
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A kubeconfig for the fake API server, in `dir`.
fn write_kubeconfig(url: &str, dir: &tempfile::TempDir) -> std::path::PathBuf {
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"{url}\"}}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context: {{cluster: fake, user: u}}\n\
             current-context: c\n"
        ),
    )
    .unwrap();
    kubeconfig
}

fn start_operator(fake: &FakeApi, dir: &tempfile::TempDir) -> OperatorProcess {
    let kubeconfig = write_kubeconfig(&fake.url(), dir);
    let metrics_port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args([
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--no-leader-election",
            "--qps",
            &QPS.to_string(),
            "--burst",
            &BURST.to_string(),
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
            "--log-format",
            "json",
        ])
        .env(
            "RUST_LOG",
            std::env::var("LOAD_OPERATOR_LOG_LEVEL").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(match std::env::var("LOAD_OPERATOR_LOG") {
            // `LOAD_OPERATOR_LOG=FILE` keeps the operator's logs
            Ok(path) => std::fs::File::create(path)
                .map(Stdio::from)
                .unwrap_or(Stdio::null()),
            Err(_) => Stdio::null(),
        })
        .spawn()
        .unwrap();
    OperatorProcess {
        child,
        metrics_port,
    }
}

fn proc_field(pid: u32, file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A `/proc/PID/status` memory field (`VmRSS:`, `VmHWM:`) in MiB.
fn status_mib(pid: u32, field: &str) -> f64 {
    proc_field(pid, "status", field).unwrap_or(0) as f64 / 1024.0
}

fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS:")
}

/// utime + stime in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // fields after the command name, which is in parentheses
    let rest = stat.rsplit(')').next().unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

async fn ready(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    if s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out.starts_with("HTTP/1.1 200")
}

fn seed(fake: &FakeApi) {
    for n in 0..NODES {
        let capacity = if n % 3 == 0 { "on-demand" } else { "spot" };
        fake.apply_json(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node-{n}"), "labels": {
                "karpenter.sh/capacity-type": capacity,
                "topology.kubernetes.io/zone": format!("zone-{}", n % 3)}}
        }))
        .unwrap();
    }
    let mut pod_i = 0;
    for ns in 0..NAMESPACES {
        let namespace = format!("team-{ns}");
        for p in 0..POLICIES_PER_NS {
            let app = format!("svc-{p}");
            let rs = format!("{app}-abc");
            fake.apply_json(json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": rs, "namespace": namespace, "uid": format!("{namespace}-{rs}"),
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": app,
                        "uid": format!("{namespace}-{app}"), "controller": true}]},
                "spec": {"replicas": pods_per_policy(), "selector": {"matchLabels": {"app": app}}}
            }))
            .unwrap();
            for k in 0..pods_per_policy() {
                pod_i += 1;
                fake.apply_json(pod_json(&namespace, &app, &rs, k, pod_i))
                    .unwrap();
            }
            fake.apply_json(json!({
                "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
                "metadata": {"name": app, "namespace": namespace},
                "spec": {
                    "selector": {"matchLabels": {"app": app}},
                    "signals": [
                        {"billingClass": {"costs": {"spot": 0, "on-demand": 2}, "default": 1}},
                        {"nodeConsolidation": {"maxPods": 50}},
                        {"zoneBalance": {"maxPerZone": 300}}
                    ],
                    "refreshInterval": "1h"
                }
            }))
            .unwrap();
        }
    }
}

fn pod_json(namespace: &str, app: &str, rs: &str, k: usize, i: usize) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{app}-{k:05}"), "namespace": namespace,
            "labels": {"app": app},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(600)},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                "uid": format!("{namespace}-{rs}"), "controller": true}]},
        "spec": {"nodeName": format!("node-{}", i % NODES),
            "containers": [{"name": "app", "image": "registry.example/app:1.2.3",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": (i % 4) as i32,
                "image": "registry.example/app:1.2.3", "imageID": "sha256:abc"}]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load harness: run by hand, see the module doc"]
async fn ten_thousand_pods_fifty_policies() {
    let fake = FakeApi::start().await;
    let total = NAMESPACES * POLICIES_PER_NS * pods_per_policy();
    seed(&fake);
    let dir = tempfile::tempdir().unwrap();
    fake.clear_requests();
    let op = start_operator(&fake, &dir);
    let pid = op.child.id();
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(600);
    let ok_writes = |fake: &FakeApi| {
        fake.requests_for(Verb::Patch, "pods")
            .iter()
            .filter(|r| r.status == 200)
            .count()
    };
    while ok_writes(&fake) < total {
        assert!(Instant::now() < deadline, "did not converge in 10 minutes");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let converge = t0.elapsed();
    let writes = fake.requests_for(Verb::Patch, "pods");
    let first = writes.iter().map(|r| r.at).min().unwrap();
    let mut per_second: BTreeMap<u64, usize> = BTreeMap::new();
    for r in &writes {
        *per_second
            .entry(r.at.duration_since(first).as_secs())
            .or_default() += 1;
    }
    let peak = per_second.values().copied().max().unwrap_or(0);
    let full: Vec<usize> = per_second.values().copied().skip(1).collect();
    let mean = full.iter().sum::<usize>() as f64 / full.len().max(1) as f64;
    let worst_2s = fake.max_writes_in_window(Some("pods"), Duration::from_secs(2));
    let rss_converged = rss_mib(pid);

    // steady state: nothing changes, nothing is written
    tokio::time::sleep(Duration::from_secs(3)).await;
    fake.clear_requests();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let steady = fake.requests_for(Verb::Patch, "pods").len();
    let rss_10k = rss_mib(pid);

    // one refresh cycle of every policy (touch each policy, wait for quiet)
    let cpu0 = cpu_seconds(pid);
    let c0 = Instant::now();
    for ns in 0..NAMESPACES {
        for p in 0..POLICIES_PER_NS {
            let (namespace, name) = (format!("team-{ns}"), format!("svc-{p}"));
            let mut obj = fake
                .get_json("deletioncostpolicies", &namespace, &name)
                .unwrap();
            obj["metadata"]["labels"] = json!({"cycle": "1"});
            fake.apply_json(obj).unwrap();
        }
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cpu_cycle = cpu_seconds(pid) - cpu0;
    let cycle_wall = c0.elapsed();
    let cycle_writes = fake.requests_for(Verb::Patch, "pods").len();
    let rss_after_cycle = rss_mib(pid);
    let peak_10k = status_mib(pid, "VmHWM:");
    drop(op);

    // 100k pods watched: 90k more pods nobody selects, fresh operator
    let mut i = total;
    for k in 0..90_000 {
        i += 1;
        fake.apply_json(pod_json("bulk", "bulk", "bulk-abc", k, i))
            .unwrap();
    }
    let op = start_operator(&fake, &dir);
    let pid100 = op.child.id();
    let r0 = Instant::now();
    while !ready(op.metrics_port).await {
        assert!(
            r0.elapsed() < Duration::from_secs(600),
            "100k-pod operator never ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sync_100k = r0.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_100k = rss_mib(pid100);
    drop(op);

    println!("\n| measure | value |\n|---|---:|");
    println!(
        "| pods / policies | {total} / {} |",
        NAMESPACES * POLICIES_PER_NS
    );
    println!("| configured limit | {QPS} qps, burst {BURST} |");
    println!(
        "| time to converge (all {total} pods written) | {:.1} s |",
        converge.as_secs_f64()
    );
    println!("| writes per second: mean / peak (1 s buckets) | {mean:.0} / {peak} |");
    println!(
        "| most writes in any 2 s window | {worst_2s} (bound {:.0}) |",
        2.0 * QPS + f64::from(BURST)
    );
    println!("| pod writes in 10 s of steady state | {steady} |");
    println!("| pod writes during a refresh of all 50 policies | {cycle_writes} |");
    println!(
        "| CPU for that refresh cycle | {cpu_cycle:.2} s (over {:.1} s wall) |",
        cycle_wall.as_secs_f64()
    );
    println!("| operator RSS, 10k pods watched (steady state) | {rss_10k:.1} MiB |");
    println!("| operator RSS, 10k pods: as the last write lands / 5 s after a refresh of all policies / peak | {rss_converged:.1} / {rss_after_cycle:.1} / {peak_10k:.1} MiB |");
    println!("| operator RSS, 100k pods watched | {rss_100k:.1} MiB |");
    println!(
        "| cache sync with 100k pods | {:.1} s |",
        sync_100k.as_secs_f64()
    );

    assert_eq!(steady, 0, "steady state must write nothing");
    assert_eq!(
        cycle_writes, 0,
        "a refresh with nothing changed must write nothing"
    );
    assert!((worst_2s as f64) <= 2.0 * QPS + f64::from(BURST) + 16.0);
}

/// How long one GET or POST on loopback takes to answer (connection
/// included), or `None` when it does not answer within 5 s.
async fn answer_time(port: u16, request: &[u8]) -> Option<Duration> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let started = Instant::now();
    let work = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(request).await.ok()?;
        let mut first = [0u8; 12];
        s.read_exact(&mut first).await.ok()?;
        Some(started.elapsed())
    };
    tokio::time::timeout(Duration::from_secs(5), work)
        .await
        .ok()
        .flatten()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// One namespace of 100,000 pods (`LOAD_BIG_NAMESPACE_PODS` overrides) and
/// one policy re-planned every second: `/readyz` and the hook (an
/// unauthenticated call, answered 401 without planning) are probed 20 times
/// a second the whole time. Planning runs on the blocking pool, so the
/// answers stay fast; this reports their latency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load harness: run by hand, see the module doc"]
async fn probes_answer_while_a_hundred_thousand_pod_namespace_is_planned() {
    let pods: usize = std::env::var("LOAD_BIG_NAMESPACE_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let fake = FakeApi::start().await;
    for n in 0..NODES {
        let capacity = if n % 3 == 0 { "on-demand" } else { "spot" };
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node-{n}"), "labels": {"karpenter.sh/capacity-type": capacity}}}))
            .unwrap();
    }
    let (ns, app, rs) = ("big", "svc", "svc-abc");
    fake.apply_json(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": rs, "namespace": ns, "uid": "big-rs",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": app,
                "uid": "big-dep", "controller": true}]},
        "spec": {"replicas": pods, "selector": {"matchLabels": {"app": app}}}
    }))
    .unwrap();
    for k in 0..pods {
        let mut pod = pod_json(ns, app, rs, k, k);
        pod["metadata"]["ownerReferences"][0]["uid"] = json!("big-rs");
        pod["metadata"]["name"] = json!(format!("{app}-{k:06}"));
        fake.apply_json(pod).unwrap();
    }
    // costs already as the policy wants them: the rounds plan, nothing is written
    let dir = tempfile::tempdir().unwrap();
    let hook_port = free_port();
    let kubeconfig = write_kubeconfig(&fake.url(), &dir);
    let metrics_port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args([
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--no-leader-election",
            "--dry-run",
        ])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
        .args(["--hook-addr", &format!("127.0.0.1:{hook_port}")])
        .arg("--hook-insecure-http")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let op = OperatorProcess {
        child,
        metrics_port,
    };
    let started = Instant::now();
    while !ready(op.metrics_port).await {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "operator not ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    fake.apply_json(json!({
        "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": app, "namespace": ns},
        "spec": {"selector": {"matchLabels": {"app": app}},
                 "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 2}, "default": 1}},
                             {"nodeConsolidation": {"maxPods": 50}}],
                 "refreshInterval": "1s"}
    }))
    .unwrap();
    let cpu_before = cpu_seconds(op.child.id());
    let (mut readyz, mut hook) = (Vec::new(), Vec::new());
    let probe_for = Duration::from_secs(30);
    let t0 = Instant::now();
    while t0.elapsed() < probe_for {
        let r = answer_time(
            op.metrics_port,
            b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        let h = answer_time(
            hook_port,
            b"POST /v1/prescale HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        )
        .await;
        readyz.push(r.unwrap_or(Duration::from_secs(5)));
        hook.push(h.unwrap_or(Duration::from_secs(5)));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let busy = cpu_seconds(op.child.id()) - cpu_before;
    let rounds = {
        let (_, body) = http_metrics(op.metrics_port).await;
        body.lines()
            .find(|l| l.starts_with("deletion_cost_reconciles_total{result=\"ok\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    readyz.sort();
    hook.sort();
    println!(
        "{pods} pods, {rounds} planning rounds in {:?} ({busy:.1} CPU-s):\n  \
         /readyz  p50 {:?}  p99 {:?}  max {:?}\n  hook 401 p50 {:?}  p99 {:?}  max {:?}",
        probe_for,
        percentile(&readyz, 0.5),
        percentile(&readyz, 0.99),
        readyz.last().copied().unwrap_or_default(),
        percentile(&hook, 0.5),
        percentile(&hook, 0.99),
        hook.last().copied().unwrap_or_default(),
    );
    assert!(rounds >= 2.0, "the policy was not planned while probing");
}

async fn http_metrics(port: u16) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    let code = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, out)
}

/// Writes per hour of `writes: Continuous` against `writes: OnScaleIn`
/// (issue 37, point 6): one Deployment of 1,000 pods whose utilisation
/// churns (a tenth of the pods get a new value every 30 s, the policy
/// refreshes every 30 s), a scale-in by 2 through the webhook every 60 s
/// (the victims then deleted and replaced, as the ReplicaSet controller and
/// a scale-out would), the operator at its default limits (`--qps 5
/// --burst 10`). Each mode runs `LOAD_WPH_MINUTES` minutes (default 5);
/// pod writes are counted at the fake API server and scaled to an hour.
///
/// ```sh
/// cargo test --release --test load writes_per_hour -- --ignored --nocapture
/// ```
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load harness: run by hand, see the module doc"]
async fn writes_per_hour_continuous_against_on_scale_in() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let minutes: u64 = std::env::var("LOAD_WPH_MINUTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    for mode in ["Continuous", "OnScaleIn"] {
        let (writes, scale_ins, correction) =
            writes_in(mode, Duration::from_secs(60 * minutes)).await;
        let per_hour = writes as f64 * 60.0 / minutes as f64;
        eprintln!(
            "writes per hour: {mode:<10} {per_hour:>8.0} pod writes/h ({writes} in {minutes} min, {scale_ins} scale-ins, their corrections {correction:?})"
        );
    }
}

/// One mode's run: pod writes in `span`, scale-ins made, writes each
/// scale-in's correction made.
async fn writes_in(mode: &str, span: Duration) -> (usize, usize, Vec<u64>) {
    use deletion_cost_testkit::prometheus::{Exporter, PrometheusServer};
    const PODS: usize = 1000;
    let fake = FakeApi::start().await;
    for n in 0..20 {
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node-{n}")}}))
            .unwrap();
    }
    fake.apply_json(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-abc", "namespace": "shop", "uid": "web-abc",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": "web", "controller": true}]},
        "spec": {"replicas": PODS, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    let mut next = 0usize;
    let mut live: Vec<String> = Vec::new();
    let mut add_pod = |fake: &FakeApi, live: &mut Vec<String>| {
        let p = pod_json("shop", "web", "web-abc", next, next);
        live.push(format!("web-{next:05}"));
        next += 1;
        fake.apply_json(p).unwrap();
    };
    for _ in 0..PODS {
        add_pod(&fake, &mut live);
    }
    let mut seed = 37u64;
    let mut rand = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    let mut util: BTreeMap<String, f64> = live
        .iter()
        .map(|p| (p.clone(), (rand() % 1000) as f64 / 1000.0))
        .collect();
    let text = |u: &BTreeMap<String, f64>| -> String {
        u.iter()
            .map(|(p, v)| format!("pod_util{{pod=\"{p}\"}} {v}\n"))
            .collect()
    };
    let exporter = Exporter::start(&text(&util));
    let prom = PrometheusServer::scraping(exporter.addr());
    fake.apply_json(json!({
        "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"targetRef": {"kind": "Deployment", "name": "web"}, "writes": mode,
            "refreshInterval": "30s",
            "signals": [{"utilization": {"prometheus": {"query": "pod_util", "podLabel": "pod"},
                "range": {"min": 0, "max": 1}, "buckets": 10}}]}
    }))
    .unwrap();
    // Prometheus has a first scrape before the operator asks
    tokio::time::sleep(Duration::from_secs(4)).await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = write_kubeconfig(&fake.url(), &dir);
    let (metrics_port, hook_port) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
        .args([
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--no-leader-election",
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
            "--hook-addr",
            &format!("127.0.0.1:{hook_port}"),
            "--hook-insecure-http",
            "--prometheus-url",
            &prom.url(),
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !ready(metrics_port).await {
        assert!(started.elapsed() < Duration::from_secs(60), "not ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    fake.clear_requests();
    let http = reqwest::Client::new();
    let (mut scale_ins, mut correction) = (0, Vec::new());
    let (mut last_churn, mut last_scale) = (Instant::now(), Instant::now());
    let begin = Instant::now();
    let mut replicas = PODS as i64;
    while begin.elapsed() < span {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if last_churn.elapsed() >= Duration::from_secs(30) {
            last_churn = Instant::now();
            let pods: Vec<String> = util.keys().cloned().collect();
            for p in pods {
                if rand() % 10 == 0 {
                    util.insert(p, (rand() % 1000) as f64 / 1000.0);
                }
            }
            exporter.set(&text(&util));
        }
        if last_scale.elapsed() >= Duration::from_secs(60) {
            last_scale = Instant::now();
            let before = fake.writes_to("pods").len();
            let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": format!("u-{scale_ins}"),
                "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
                "subResource": "scale", "name": "web", "namespace": "shop", "operation": "UPDATE",
                "userInfo": {"username": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"},
                "object": {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": replicas - 2}},
                "oldObject": {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": replicas}},
                "dryRun": false}});
            let answer: serde_json::Value = http
                .post(format!("http://127.0.0.1:{hook_port}/v1/admit-scale-in"))
                .json(&review)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            correction.push((fake.writes_to("pods").len() - before) as u64);
            scale_ins += 1;
            // the controller deletes the victims; a scale-out replaces them
            let victims = answer["response"]["auditAnnotations"]["victims"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            for v in victims.split(',').filter(|v| !v.is_empty()) {
                let pod = v.rsplit('/').next().unwrap_or_default();
                let _ = fake.delete_json("Pod", "shop", pod);
                util.remove(pod);
                live.retain(|p| p != pod);
            }
            for _ in 0..2 {
                add_pod(&fake, &mut live);
                util.insert(
                    live.last().unwrap().clone(),
                    (rand() % 1000) as f64 / 1000.0,
                );
            }
            exporter.set(&text(&util));
            replicas = live.len() as i64;
        }
    }
    let writes = fake
        .writes_to("pods")
        .iter()
        .filter(|w| w.verb == Some(Verb::Patch))
        .count();
    let _ = child.kill();
    let _ = child.wait();
    (writes, scale_ins, correction)
}
