//! The operator when its world misbehaves: Prometheus down or answering
//! garbage (no cost changes, `SignalsAvailable=False`, recovery under the
//! limit), API errors and watch drops (every write lands exactly once), and
//! two replicas racing for the lease (one writer, no duplicates).

mod support;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deletion_cost::operator::sync::{GONE_WITHOUT_RETRY, REFUSED_GRACE};
use deletion_cost_testkit::fake_api::{FakeApi, Fault, TokenIdentity, Verb};
use deletion_cost_testkit::prometheus::{openmetrics, unix_now, PrometheusServer};
use deletion_cost_testkit::{eventually, free_addr, free_port, http_get, read_request};
use serde_json::{json, Value};
use support::lag::held_pod_watch;
use support::operator::{
    condition, config, cost, seed_web_pods, successful_writes_per_pod, Operator, NS,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

fn seed(fake: &FakeApi, n: usize, policy_spec: Value, preset_cost: Option<&str>) {
    seed_web_pods(fake, n, preset_cost);
    fake.apply_json(json!({
        "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": "web", "namespace": NS},
        "spec": policy_spec
    }))
    .unwrap();
}

/// A TCP front for Prometheus the test can switch: refuse, answer garbage,
/// or forward to a real server.
struct Switch {
    mode: Arc<AtomicU8>,
    upstream: Arc<std::sync::Mutex<String>>,
    delay: Arc<std::sync::Mutex<Duration>>,
    port: u16,
    task: JoinHandle<()>,
}

const REFUSE: u8 = 0;
const GARBAGE: u8 = 1;
const FORWARD: u8 = 2;

impl Switch {
    async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(AtomicU8::new(REFUSE));
        let upstream = Arc::new(std::sync::Mutex::new(upstream));
        let delay = Arc::new(std::sync::Mutex::new(Duration::ZERO));
        let (m, up, d) = (mode.clone(), upstream.clone(), delay.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let mode = m.load(Ordering::SeqCst);
                let upstream = up.lock().unwrap().clone();
                let delay = d.clone();
                tokio::spawn(async move {
                    match mode {
                        GARBAGE => {
                            read_request(&mut conn).await;
                            let _ = conn
                                .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\nConnection: close\r\n\r\n{\"status\":4}")
                                .await;
                        }
                        FORWARD => {
                            if let Ok(up) = tokio::net::TcpStream::connect(
                                upstream.trim_start_matches("http://"),
                            )
                            .await
                            {
                                // every request (each chunk the client sends on a
                                // kept-alive connection) waits the current delay
                                let (mut from_client, mut to_client) = conn.into_split();
                                let (mut from_up, mut to_up) = up.into_split();
                                let requests = async move {
                                    let mut buf = vec![0u8; 64 * 1024];
                                    loop {
                                        let n = match from_client.read(&mut buf).await {
                                            Ok(0) | Err(_) => break,
                                            Ok(n) => n,
                                        };
                                        let wait = *delay.lock().unwrap();
                                        tokio::time::sleep(wait).await;
                                        if to_up.write_all(&buf[..n]).await.is_err() {
                                            break;
                                        }
                                    }
                                };
                                let answers = tokio::io::copy(&mut from_up, &mut to_client);
                                let _ = tokio::join!(requests, answers);
                            }
                        }
                        _ => drop(conn),
                    }
                });
            }
        });
        Self {
            mode,
            upstream,
            delay,
            port,
            task,
        }
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    /// Forwards to another server from the next connection on.
    fn forward_to(&self, url: String) {
        *self.upstream.lock().unwrap() = url;
    }

    /// Holds every request `delay` before forwarding it (a slow Prometheus).
    fn slow_down(&self, delay: Duration) {
        *self.delay.lock().unwrap() = delay;
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_signal_data_changes_no_cost_and_recovery_stays_under_the_limit() {
    let t = unix_now() - 20;
    let series: Vec<(String, String)> = (0..20)
        .map(|i| {
            (
                format!(r#"cpu{{namespace="shop",pod="web-{i:03}"}}"#),
                format!("{}", i as f64 / 10.0 + 0.05),
            )
        })
        .collect();
    let rows: Vec<(&str, &str, i64)> = series
        .iter()
        .map(|(s, v)| (s.as_str(), v.as_str(), t))
        .collect();
    let prom = PrometheusServer::start(&openmetrics(&rows));
    let switch = Switch::start(prom.url()).await;

    let fake = FakeApi::start().await;
    seed(
        &fake,
        20,
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"utilization": {"prometheus": {"query": "cpu{namespace=\"$namespace\"}"},
                "range": {"min": 0, "max": 2}, "buckets": 10}}],
            "refreshInterval": "1s"
        }),
        Some("5"),
    );
    let mut cfg = config("operator-a", 10.0, 2);
    cfg.prometheus_url = Some(format!("http://127.0.0.1:{}", switch.port));
    let op = Operator::start(&fake, cfg);

    // Prometheus unreachable, then answering garbage: no pod is touched
    eventually(
        Duration::from_secs(15),
        "SignalsAvailable=False",
        || async {
            condition(&fake, "web", "SignalsAvailable")
                .is_some_and(|c| c["status"] == "False" && c["reason"] == "Unreachable")
        },
    )
    .await;
    switch.set(GARBAGE);
    eventually(Duration::from_secs(15), "InvalidBody reported", || async {
        condition(&fake, "web", "SignalsAvailable").is_some_and(|c| c["reason"] == "InvalidBody")
    })
    .await;
    assert!(
        fake.requests_for(Verb::Patch, "pods").is_empty(),
        "a cost changed on bad data"
    );
    assert!((0..20).all(|i| cost(&fake, &format!("web-{i:03}")).as_deref() == Some("5")));

    // recovery: every pod re-costed, at no more than the limit
    switch.set(FORWARD);
    eventually(Duration::from_secs(30), "costs from real data", || async {
        (0..20).all(|i| cost(&fake, &format!("web-{i:03}")) == Some((i / 2).to_string()))
    })
    .await;
    eventually(Duration::from_secs(10), "SignalsAvailable=True", || async {
        condition(&fake, "web", "SignalsAvailable").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let worst = fake.max_writes_in_window(Some("pods"), Duration::from_secs(1));
    assert!(
        worst <= 10 + 2 + 2,
        "{worst} writes in a second after recovery (limit 10/s, burst 2)"
    );
    // web-005 has cost 2 from 0.5 ... and pods already at 5 (web-010, web-011) were left alone
    let writes = successful_writes_per_pod(&fake);
    assert!(
        !writes.contains_key("web-010") && !writes.contains_key("web-011"),
        "{writes:?}"
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_and_watch_drops_still_land_every_write_exactly_once() {
    let fake = FakeApi::start().await;
    let n = 60;
    seed(
        &fake,
        n,
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}}}]
        }),
        None,
    );
    fake.inject(Fault::status(500).on(Verb::Patch, "pods").times(8));
    fake.inject(Fault::status(503).on(Verb::Patch, "pods").times(4));
    fake.inject(Fault::status(429).on(Verb::Patch, "pods").times(2));
    fake.inject(Fault::status(409).on(Verb::Patch, "pods").times(3));
    let (qps, burst) = (40.0, 4);
    let op = Operator::start(&fake, config("operator-a", qps, burst));
    eventually(Duration::from_secs(20), "some writes", || async {
        successful_writes_per_pod(&fake).len() >= 20
    })
    .await;
    fake.close_watches();
    fake.expire_history();
    eventually(Duration::from_secs(60), "all pods written", || async {
        (0..n).all(|i| cost(&fake, &format!("web-{i:03}")).is_some())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let per_pod = successful_writes_per_pod(&fake);
    assert_eq!(per_pod.len(), n);
    assert!(per_pod.values().all(|c| *c == 1), "duplicates: {per_pod:?}");
    let refused = fake
        .requests_for(Verb::Patch, "pods")
        .iter()
        .filter(|r| r.status >= 400)
        .count();
    assert_eq!(
        refused,
        8 + 4 + 2 + 3,
        "every injected fault was hit and retried"
    );
    // retries included, the write rate stays under the limit
    let worst = fake.max_writes_in_window(Some("pods"), Duration::from_secs(2));
    assert!(
        worst as f64 <= 2.0 * qps + f64::from(burst) + 4.0,
        "{worst} writes in 2 s"
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_racing_write_each_pod_once() {
    let fake = FakeApi::start().await;
    let n = 40;
    seed(
        &fake,
        n,
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}}}]
        }),
        None,
    );
    let mut a = config("operator-a", 50.0, 5);
    a.leader_election = true;
    let mut b = config("operator-b", 50.0, 5);
    b.leader_election = true;
    let op_a = Operator::start(&fake, a);
    let op_b = Operator::start(&fake, b);
    eventually(Duration::from_secs(60), "all pods written", || async {
        (0..n).all(|i| cost(&fake, &format!("web-{i:03}")).is_some())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let per_pod = successful_writes_per_pod(&fake);
    assert_eq!(per_pod.len(), n);
    assert!(per_pod.values().all(|c| *c == 1), "duplicates: {per_pod:?}");
    let lease = fake
        .get_json("leases", NS, "deletion-cost")
        .expect("a lease was taken");
    let holder = lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(holder == "operator-a" || holder == "operator-b", "{lease}");
    op_a.stop().await;
    op_b.stop().await;
}

async fn leader_gauge(port: u16) -> Option<String> {
    let (_, body) = http_get(port, "/metrics").await;
    body.lines()
        .find(|l| l.starts_with("deletion_cost_leader "))
        .map(|l| l.trim_start_matches("deletion_cost_leader ").to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_lost_stops_writes_and_regained_resumes_them() {
    let fake = FakeApi::start().await;
    seed(
        &fake,
        6,
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}}}]
        }),
        None,
    );
    let port = free_port();
    let mut cfg = config("operator-a", 50.0, 5);
    cfg.leader_election = true;
    cfg.metrics_addr = format!("127.0.0.1:{port}").parse().unwrap();
    let op = Operator::start(&fake, cfg);
    eventually(Duration::from_secs(30), "first pods written", || async {
        (0..6).all(|i| cost(&fake, &format!("web-{i:03}")).is_some())
    })
    .await;

    // another replica takes the lease
    let mut lease = fake
        .get_json("leases", NS, "deletion-cost")
        .expect("lease taken");
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    lease["spec"]["holderIdentity"] = json!("operator-b");
    lease["spec"]["renewTime"] = json!(now);
    lease["spec"]["acquireTime"] = json!(now);
    lease["spec"]["leaseDurationSeconds"] = json!(20);
    fake.apply_json(lease).unwrap();
    eventually(
        Duration::from_secs(30),
        "operator-a to notice the lost lease",
        || async { leader_gauge(port).await.as_deref() == Some("0") },
    )
    .await;

    // a new pod while following: not written
    fake.apply_json(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-new", "namespace": NS, "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "rs-uid", "controller": true}]},
        "spec": {"nodeName": "spot-0", "containers": [{"name": "app", "image": "app:1"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}]}
    }))
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(leader_gauge(port).await.as_deref(), Some("0"));
    assert_eq!(cost(&fake, "web-new"), None, "a follower wrote");

    // operator-b stops renewing: operator-a takes the lease back and catches up
    eventually(
        Duration::from_secs(60),
        "web-new written after regaining the lease",
        || async { cost(&fake, "web-new").as_deref() == Some("0") },
    )
    .await;
    let per_pod = successful_writes_per_pod(&fake);
    assert!(per_pod.values().all(|c| *c == 1), "duplicates: {per_pod:?}");
    op.stop().await;
}

/// SIGTERM while RBAC denies listing policies (the caches never sync): the
/// operator says what it waits for on /readyz and still ends within
/// `--shutdown-grace` (kube-runtime's graceful shutdown alone waited forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_the_policy_list_is_denied_ends_within_the_grace() {
    let fake = FakeApi::start().await;
    fake.inject(
        Fault::status(403)
            .on(Verb::List, "deletioncostpolicies")
            .always(),
    );
    let port = free_port();
    let mut cfg = config("operator-a", 50.0, 5);
    cfg.metrics_addr = format!("127.0.0.1:{port}").parse().unwrap();
    cfg.shutdown_grace = Duration::from_secs(2);
    let op = Operator::start(&fake, cfg);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = http_get(port, "/readyz").await;
        if code == 503 && body.contains("policies") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz: {code} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started = std::time::Instant::now();
    op.stop().await;
    let took = started.elapsed();
    assert!(
        took <= Duration::from_millis(2500),
        "stopping took {took:?} with a 2 s grace"
    );
}

/// A namespace-scoped install without its ClusterRole may not list nodes:
/// after the grace the operator goes on without node labels (billing classes
/// unknown, the signal's default applies) instead of never becoming ready,
/// and once nodes may be read their classes apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_refused_for_good_leave_classes_unknown_not_the_operator_unready() {
    let fake = FakeApi::start().await;
    fake.inject(Fault::status(403).on(Verb::List, "nodes").always());
    seed(
        &fake,
        4,
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}, "default": 50}}],
            "refreshInterval": "1s"
        }),
        None,
    );
    let port = free_port();
    let mut cfg = config("operator-a", 50.0, 5);
    cfg.metrics_addr = format!("127.0.0.1:{port}").parse().unwrap();
    let started = std::time::Instant::now();
    let op = Operator::start(&fake, cfg);
    let readyz = || async move { http_get(port, "/readyz").await };

    // inside the grace: not ready, saying why, and nothing written
    eventually(
        Duration::from_secs(10),
        "/readyz names the nodes",
        || async {
            let (code, body) = readyz().await;
            code == 503 && body.contains("nodes")
        },
    )
    .await;
    assert!(fake.requests_for(Verb::Patch, "pods").is_empty());

    let gone_without = |value: u8| async move {
        let (_, text) = http_get(port, "/metrics").await;
        text.contains(&format!(
            "deletion_cost_cache_gone_without{{cache=\"nodes\"}} {value}"
        ))
    };
    assert!(gone_without(0).await, "the gauge is 0 inside the grace");
    eventually(REFUSED_GRACE + Duration::from_secs(15), "ready", || async {
        readyz().await.0 == 200
    })
    .await;
    let (_, body) = readyz().await;
    assert!(
        body.ends_with("ready without: nodes (list refused)"),
        "{body}"
    );
    assert!(
        gone_without(1).await,
        "the gauge says the nodes are gone without"
    );
    assert!(
        started.elapsed() >= REFUSED_GRACE,
        "ready after {:?}, inside the grace",
        started.elapsed()
    );
    // the refused list is retried with a growing delay (0.5 s doubling to
    // 5 s, jittered): about 10 lists in 30 s, not one every half second
    let lists = fake.requests_for(Verb::List, "nodes").len();
    assert!(lists <= 15, "{lists} node lists in {:?}", started.elapsed());
    // gone without: listed again GONE_WITHOUT_RETRY after the refusal that
    // ended the grace (kube warns of each), not every 5-10 s as before
    let before = fake.requests_for(Verb::List, "nodes").len();
    tokio::time::sleep(Duration::from_secs(25)).await;
    let lists = fake.requests_for(Verb::List, "nodes").len() - before;
    assert!(lists <= 1, "{lists} node lists in 25 s while gone without");
    eventually(
        Duration::from_secs(15),
        "the default on every pod",
        || async { (0..4).all(|i| cost(&fake, &format!("web-{i:03}")).as_deref() == Some("50")) },
    )
    .await;

    // the ClusterRole arrives: the nodes' classes apply at the next list
    fake.clear_faults();
    let allowed = GONE_WITHOUT_RETRY + Duration::from_secs(20);
    eventually(allowed, "costs by class", || async {
        (0..4).all(|i| {
            let want = if i % 2 == 0 { "0" } else { "100" };
            cost(&fake, &format!("web-{i:03}")).as_deref() == Some(want)
        })
    })
    .await;
    assert!(gone_without(0).await, "the gauge is back to 0");
    let (code, body) = readyz().await;
    assert!(code == 200 && body.ends_with("\r\n\r\nready"), "{body}");
    op.stop().await;
}

/// A leader that stops gracefully gives its Lease back, and a follower takes
/// it at once instead of waiting for the term to expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_stop_releases_the_lease_and_the_follower_takes_over() {
    let fake = FakeApi::start().await;
    seed(
        &fake,
        2,
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}}}]
        }),
        None,
    );
    let holder = |fake: &FakeApi| {
        fake.get_json("leases", NS, "deletion-cost")
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
    };
    let mut a = config("operator-a", 50.0, 5);
    a.leader_election = true;
    let op_a = Operator::start(&fake, a);
    eventually(Duration::from_secs(20), "operator-a leads", || async {
        holder(&fake).as_deref() == Some("operator-a")
    })
    .await;
    let mut b = config("operator-b", 50.0, 5);
    b.leader_election = true;
    let op_b = Operator::start(&fake, b);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(holder(&fake).as_deref(), Some("operator-a"));
    let stopped = std::time::Instant::now();
    op_a.stop().await;
    // the term lasts 15 s: taking over sooner means the lease was released
    eventually(
        Duration::from_secs(5),
        "operator-b takes the lease",
        || async { holder(&fake).as_deref() == Some("operator-b") },
    )
    .await;
    assert!(stopped.elapsed() < Duration::from_secs(5));
    op_b.stop().await;
}

/// A new leader whose pod cache has not yet seen the old leader's writes
/// (its pod watch held back) reads the pods with a quorum list before its
/// first round and waits until its cache is as new: across the handover
/// every pod is written once. (Without it the new leader's first round,
/// planned on the stale cache, wrote every value again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_whose_cache_lags_writes_no_value_twice() {
    let fake = FakeApi::start().await;
    let n = 20;
    seed_web_pods(&fake, n, None);
    let holder = |fake: &FakeApi| {
        fake.get_json("leases", NS, "deletion-cost")
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
    };
    let mut a = config("operator-a", 50.0, 20);
    a.leader_election = true;
    a.metrics_addr = free_addr();
    let op_a = Operator::start(&fake, a).serving(&fake).await;
    eventually(Duration::from_secs(20), "operator-a leads", || async {
        holder(&fake).as_deref() == Some("operator-a")
    })
    .await;
    let (client_b, hold) = held_pod_watch(&fake);
    let mut b = config("operator-b", 50.0, 20);
    b.leader_election = true;
    b.metrics_addr = free_addr();
    let op_b = Operator::start_on(client_b, b).serving(&fake).await;
    // from here on operator-b's cache sees no pod change: none of a's writes
    hold.hold();
    fake.apply_json(json!({
        "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}}}]
        }
    }))
    .unwrap();
    eventually(
        Duration::from_secs(30),
        "operator-a wrote every pod",
        || async { (0..n).all(|i| cost(&fake, &format!("web-{i:03}")).is_some()) },
    )
    .await;

    // a gives the Lease back; b takes it with a cache that lags, which
    // catches up a second later
    op_a.stop().await;
    eventually(
        Duration::from_secs(10),
        "operator-b takes the lease",
        || async { holder(&fake).as_deref() == Some("operator-b") },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    hold.release();
    // the new term's rounds (and a pod change that triggers more)
    tokio::time::sleep(Duration::from_secs(3)).await;
    fake.apply_json(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-new", "namespace": NS, "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "rs-uid", "controller": true}]},
        "spec": {"nodeName": "spot-0", "containers": [{"name": "app", "image": "app:1"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}]}
    }))
    .unwrap();
    eventually(
        Duration::from_secs(20),
        "the new leader writes the new pod",
        || async { cost(&fake, "web-new").as_deref() == Some("0") },
    )
    .await;
    let per_pod = successful_writes_per_pod(&fake);
    assert_eq!(per_pod.len(), n + 1, "{per_pod:?}");
    let twice: Vec<_> = per_pod.iter().filter(|(_, c)| **c > 1).collect();
    assert!(twice.is_empty(), "written more than once: {twice:?}");
    op_b.stop().await;
}

/// A hook request and reconciles of the same utilisation policy at the same
/// time: with Prometheus slow (so rounds overlap in their signal refresh),
/// no write is sent twice and hysteresis survives — a value that crossed a
/// bucket boundary by less than the hysteresis changes nothing. (Rounds that
/// took the policy's state out of the shared map across the query planned
/// with empty hysteresis and re-sent writes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_and_reconcile_of_one_policy_never_interleave() {
    let n = 8;
    let t = unix_now() - 20;
    let data = |value: &str| {
        let series: Vec<String> = (0..n)
            .map(|i| format!(r#"cpu{{namespace="shop",pod="web-{i:03}"}}"#))
            .collect();
        let rows: Vec<(&str, &str, i64)> = series.iter().map(|s| (s.as_str(), value, t)).collect();
        PrometheusServer::start(&openmetrics(&rows))
    };
    // 0.39 and 0.41 sit either side of the 0.4 boundary (buckets of 0.2):
    // 0.05 of a bucket past it, inside the hysteresis of 0.2
    let (below, above) = (data("0.39"), data("0.41"));
    let switch = Switch::start(below.url()).await;
    switch.set(FORWARD);

    let fake = FakeApi::start().await;
    seed(
        &fake,
        n,
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"utilization": {"prometheus": {"query": "cpu{namespace=\"$namespace\"}"},
                "range": {"min": 0, "max": 2}, "buckets": 10, "hysteresis": 0.2}}],
            "refreshInterval": "1s"
        }),
        None,
    );
    fake.add_token(
        "caller",
        TokenIdentity {
            username: "system:serviceaccount:ops:autoscaler".into(),
            uid: "uid-autoscaler".into(),
            groups: vec!["system:serviceaccounts".into()],
            audiences: vec![],
        },
    );
    fake.set_access_policy(|_| true);
    let hook = free_port();
    let mut cfg = config("operator-a", 50.0, 10);
    cfg.prometheus_url = Some(format!("http://127.0.0.1:{}", switch.port));
    cfg.hook_addr = Some(format!("127.0.0.1:{hook}").parse().unwrap());
    cfg.hook.tls = deletion_cost::hook::HookTls::PlainHttp;
    cfg.debounce = Duration::from_millis(10);
    let op = Operator::start(&fake, cfg);
    eventually(Duration::from_secs(30), "every pod costed", || async {
        (0..n).all(|i| cost(&fake, &format!("web-{i:03}")).is_some())
    })
    .await;
    let first: Vec<Option<String>> = (0..n)
        .map(|i| cost(&fake, &format!("web-{i:03}")))
        .collect();

    switch.forward_to(above.url());
    switch.slow_down(Duration::from_millis(300));
    let http = reqwest::Client::new();
    for round in 0..6 {
        // a reconcile (the policy changed) and a hook call, together
        let touch = async {
            let mut policy = fake.get_json("deletioncostpolicies", NS, "web").unwrap();
            policy["metadata"]["annotations"] = json!({"round": round.to_string()});
            fake.apply_json(policy).unwrap();
        };
        let call = http
            .post(format!("http://127.0.0.1:{hook}/v1/prescale"))
            .bearer_auth("caller")
            .header("content-type", "application/json")
            .body(
                json!({"namespace": NS, "workload": {"kind": "ReplicaSet", "name": "web-abc"},
                       "replicas": n - 1})
                .to_string(),
            )
            .timeout(Duration::from_secs(20))
            .send();
        let (_, answer) = tokio::join!(touch, call);
        let answer = answer.expect("hook unreachable");
        assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now: Vec<Option<String>> = (0..n)
        .map(|i| cost(&fake, &format!("web-{i:03}")))
        .collect();
    assert_eq!(now, first, "a value inside the hysteresis changed a cost");
    let per_pod = successful_writes_per_pod(&fake);
    assert!(
        per_pod.values().all(|c| *c == 1),
        "writes sent twice: {per_pod:?}"
    );
    op.stop().await;
}

/// The per-policy series (`deletion_cost_order_mismatches{policy}`) go away
/// with the policy instead of reporting a mismatch that no longer exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_policy_series_are_removed_with_the_policy() {
    let fake = FakeApi::start().await;
    seed(
        &fake,
        4,
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "signals": [{"billingClass": {"costs": {"spot": 0, "on-demand": 100}}}]
        }),
        None,
    );
    // an expensive pod that is not ready: deleted first against the policy
    let mut pod = fake.get_json("pods", NS, "web-001").unwrap();
    pod["status"]["conditions"][0]["status"] = json!("False");
    fake.apply_json(pod).unwrap();
    let port = free_port();
    let mut cfg = config("operator-a", 50.0, 5);
    cfg.metrics_addr = format!("127.0.0.1:{port}").parse().unwrap();
    let op = Operator::start(&fake, cfg);
    let series = r#"deletion_cost_order_mismatches{policy="shop/web",reason="NotReady"}"#;
    eventually(Duration::from_secs(20), "the mismatch series", || async {
        http_get(port, "/metrics").await.1.contains(series)
    })
    .await;
    // the pod gets ready: the reason goes away and leaves a zeroed series,
    // which must go with the policy too
    let mut pod = fake.get_json("pods", NS, "web-001").unwrap();
    pod["status"]["conditions"][0]["status"] = json!("True");
    fake.apply_json(pod).unwrap();
    let zeroed = format!("{series} 0");
    eventually(
        Duration::from_secs(20),
        "the series to be zeroed",
        || async { http_get(port, "/metrics").await.1.contains(&zeroed) },
    )
    .await;
    fake.delete_json("deletioncostpolicies", NS, "web").unwrap();
    eventually(Duration::from_secs(20), "the policy is gone", || async {
        fake.get_json("deletioncostpolicies", NS, "web").is_none()
    })
    .await;
    eventually(
        Duration::from_secs(10),
        "the series of the deleted policy to go",
        || async {
            !http_get(port, "/metrics")
                .await
                .1
                .contains("policy=\"shop/web\"")
        },
    )
    .await;
    op.stop().await;
}
