//! The pre-scale-down hook end to end: the operator runs in-process against
//! the fake API server; callers use loopback, over TLS with the certificate
//! the operator issues itself (its CA read from the published ConfigMap), or
//! over plain HTTP where a test asks for it explicitly.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use deletion_cost::hook::{HookConfig, HookTls};
use deletion_cost::operator::RunConfig;
use deletion_cost_testkit::fake_api::{FakeApi, Fault, TokenIdentity, Verb};
use deletion_cost_testkit::{eventually, free_addr, free_port};
use futures::future::BoxFuture;
use futures::StreamExt;
use http::{Request, Response};
use kube::client::{Body as KubeBody, ClientBuilder, DynBody};
use serde_json::{json, Value};
use support::operator::{client_config, http_client, Operator, HANG, NS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ALICE: &str = "alice-token";
const BOB: &str = "bob-token";

/// The operator's configuration in these tests: the hook on a free port, over
/// plain HTTP, leases in `ops`.
fn config() -> RunConfig {
    let mut cfg = support::operator::config("op-0", 100.0, 100);
    cfg.metrics_addr = free_addr();
    cfg.lease_namespace = Some("ops".into());
    cfg.shutdown_grace = Duration::from_secs(1);
    // background reconciles wait this long: in these tests only the hook writes
    cfg.debounce = Duration::from_secs(3600);
    cfg.hook_addr = Some(free_addr());
    cfg.hook = HookConfig {
        settle_delay: Duration::from_millis(50),
        read_timeout: Duration::from_secs(1),
        // the tests of the hook's behaviour talk plain HTTP; TLS has its own
        tls: HookTls::PlainHttp,
        ..HookConfig::default()
    };
    cfg
}

/// [`config`] with the default TLS: a certificate the operator issues itself.
fn tls_config() -> RunConfig {
    let mut cfg = config();
    cfg.hook.tls = HookTls::default();
    cfg
}

fn request(workload: &str, replicas: u32) -> Value {
    json!({"namespace": NS, "workload": {"kind": "Deployment", "name": workload}, "replicas": replicas})
}

/// Nodes, tokens and the access policy shared by every test.
fn seed_cluster(fake: &FakeApi) {
    for (node, class) in [("spot-1", "spot"), ("od-1", "on-demand")] {
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {"karpenter.sh/capacity-type": class}}}))
            .unwrap();
    }
    for (token, user) in [
        (ALICE, "system:serviceaccount:ops:autoscaler"),
        (BOB, "system:serviceaccount:ops:other"),
    ] {
        fake.add_token(
            token,
            TokenIdentity {
                username: user.into(),
                uid: format!("uid-{user}"),
                groups: vec!["system:serviceaccounts".into()],
                audiences: vec![],
            },
        );
    }
    fake.set_access_policy(|spec| {
        spec.pointer("/user").and_then(Value::as_str)
            == Some("system:serviceaccount:ops:autoscaler")
            && spec
                .pointer("/resourceAttributes/verb")
                .and_then(Value::as_str)
                == Some("update")
            && spec
                .pointer("/resourceAttributes/subresource")
                .and_then(Value::as_str)
                == Some("scale")
            && spec
                .pointer("/resourceAttributes/group")
                .and_then(Value::as_str)
                == Some("apps")
    });
}

/// A Deployment with one ReplicaSet and `pods` Running, Ready pods: the
/// first half on a spot node (ready for days), the rest on an on-demand node
/// (ready for a minute). Its policy (when asked for) costs spot 10, on-demand
/// 100, so the intended victims are the spot pods, the opposite of the order
/// upstream uses without costs.
fn seed_workload(fake: &FakeApi, name: &str, pods: usize, with_policy: bool) -> Vec<String> {
    let dep = fake
        .apply_json(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": pods, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
            "status": {"replicas": pods}}))
        .unwrap();
    let rs_name = format!("{name}-rs");
    let rs = fake
        .apply_json(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": rs_name, "namespace": NS, "labels": {"app": name},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                    "uid": dep["metadata"]["uid"], "controller": true}]},
            "spec": {"replicas": pods, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
            "status": {"replicas": pods}}))
        .unwrap();
    let mut names = Vec::new();
    let now = k8s_openapi::jiff::Timestamp::now();
    for i in 0..pods {
        // spot pods have been ready for days, on-demand ones for a minute:
        // without costs upstream deletes the on-demand pods (ready most recently) first
        let spot = i < pods / 2;
        let node = if spot { "spot-1" } else { "od-1" };
        let pod = format!("{name}-{i}");
        let age = if spot { 2 * 86_400 } else { 60 };
        let ts = now
            .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(age))
            .unwrap()
            .to_string();
        fake.apply_json(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": NS, "labels": {"app": name},
                "creationTimestamp": ts,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name,
                    "uid": rs["metadata"]["uid"], "controller": true}]},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running", "startTime": ts,
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ts}]}}))
            .unwrap();
        names.push(pod);
    }
    if with_policy {
        fake.apply_json(json!({"apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"targetRef": {"kind": "Deployment", "name": name}, "combine": "sum",
                     "signals": [{"billingClass": {"nodeLabel": "karpenter.sh/capacity-type",
                                                   "costs": {"spot": 10, "on-demand": 100}, "default": 50}}]}}))
            .unwrap();
    }
    names
}

fn spot_pods(names: &[String]) -> Vec<String> {
    names[..names.len() / 2].to_vec()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

fn victims(answer: &Value) -> Vec<String> {
    answer["victims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["pod"].as_str().unwrap().to_string())
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn metric(text: &str, line_start: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_its_status_code_and_json_body() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    seed_workload(&fake, "web", 4, true);
    seed_workload(&fake, "lonely", 2, false);
    let op = Operator::start(&fake, config()).serving(&fake).await;
    let ok = request("web", 2);

    let cases: Vec<(Option<&str>, Vec<u8>, u16, &str)> = vec![
        (None, ok.to_string().into(), 401, "Authorization"),
        (Some("forged"), ok.to_string().into(), 401, "unauthenticated"),
        (Some(BOB), ok.to_string().into(), 403, "may not update deployments/scale"),
        (Some(ALICE), br#"{"namespace":"shop"}"#.to_vec(), 400, "workload"),
        (Some(ALICE), json!({"namespace": NS, "workload": {"kind": "Deployment", "name": "web"}, "replicas": 2, "force": true}).to_string().into(), 400, "force"),
        (Some(ALICE), json!({"namespace": NS, "workload": {"kind": "StatefulSet", "name": "web"}, "replicas": 2}).to_string().into(), 400, "workload.kind"),
        (Some(ALICE), b"not json".to_vec(), 400, "request body"),
        (Some(ALICE), request("web", 9).to_string().into(), 400, "not a scale-in"),
        (Some(ALICE), vec![b' '; 70 * 1024], 413, "larger than"),
        (Some(ALICE), request("ghost", 1).to_string().into(), 404, "does not exist"),
        (Some(ALICE), request("lonely", 1).to_string().into(), 404, "no valid DeletionCostPolicy"),
    ];
    for (token, body, status, needle) in cases {
        let (got, answer) = op.post_raw(token, body).await;
        assert_eq!(got, status, "{answer}");
        assert_eq!(answer["code"], status, "{answer}");
        let msg = answer["error"].as_str().unwrap();
        assert!(msg.contains(needle), "{status}: {msg}");
        assert!(
            !msg.contains(ALICE) && !msg.contains("forged"),
            "token echoed: {msg}"
        );
    }
    // nothing was written for any refused request
    assert!(fake.writes_to("pods").is_empty());
    assert!(fake.writes_to("deployments/scale").is_empty());

    // unknown paths and methods get JSON too
    let resp = http_client()
        .get(format!("http://{}/v1/prescale", op.hook_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let v: Value = resp.json_body().await;
    assert_eq!(v["code"], 404);

    let m = op.metrics().await;
    for (outcome, n) in [
        ("unauthenticated", 2.0),
        ("forbidden", 1.0),
        ("bad_request", 7.0),
        ("not_found", 2.0),
    ] {
        assert_eq!(
            metric(
                &m,
                &format!("deletion_cost_hook_requests_total{{outcome=\"{outcome}\"}}")
            ),
            n,
            "{outcome}\n{m}"
        );
    }
}

/// `json()` without reqwest's json feature.
trait JsonBody {
    async fn json_body(self) -> Value;
}

impl JsonBody for reqwest::Response {
    async fn json_body(self) -> Value {
        serde_json::from_slice(&self.bytes().await.unwrap()).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    let op = Operator::start(&fake, config()).serving(&fake).await;

    // headers never finished: the connection is closed after the read timeout
    let mut s = tokio::net::TcpStream::connect(op.hook_addr())
        .await
        .unwrap();
    s.write_all(b"POST /v1/prescale HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(HANG, s.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "connection still open with half-sent headers");

    // body announced but never sent: 408
    let mut s = tokio::net::TcpStream::connect(op.hook_addr())
        .await
        .unwrap();
    s.write_all(
        format!("POST /v1/prescale HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{").as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(HANG, s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert!(head.contains("\"code\":408"), "{head}");
}

/// Delays every frame of pod watch responses: the operator's pod cache lags
/// the API server by at least `delay`.
#[derive(Clone)]
struct DelayPodWatch<S> {
    inner: S,
    delay: Duration,
}

impl<S> tower::Service<Request<KubeBody>> for DelayPodWatch<S>
where
    S: tower::Service<Request<KubeBody>, Response = Response<Box<DynBody>>> + Send,
    S::Future: Send + 'static,
{
    type Response = Response<Box<DynBody>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<KubeBody>) -> Self::Future {
        let pod_watch = req.uri().path().ends_with("/pods")
            && req.uri().query().is_some_and(|q| q.contains("watch=true"));
        let delay = self.delay;
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            if !pod_watch {
                return Ok(resp);
            }
            Ok(resp.map(|body| {
                let frames = http_body_util::BodyStream::new(body).then(move |frame| async move {
                    tokio::time::sleep(delay).await;
                    frame
                });
                let body: Box<DynBody> =
                    Box::new(http_body_util::StreamBody::new(Box::pin(frames)));
                body
            }))
        })
    }
}

fn lagging_client(fake: &FakeApi, delay: Duration) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let layer = tower::layer::layer_fn(move |inner| DelayPodWatch { inner, delay });
    ClientBuilder::try_from(client_config(fake))
        .unwrap()
        .with_layer(&layer)
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_waits_until_the_cache_shows_every_patch() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    let pods = seed_workload(&fake, "web", 4, true);
    let op = Operator::start_on(lagging_client(&fake, Duration::from_millis(400)), config())
        .serving(&fake)
        .await;

    let (status, answer) = op.post(Some(ALICE), &request("web", 2)).await;
    assert_eq!(status, 200, "{answer}");
    // a scale-in by two: the two spot pods the policy wants deleted are
    // written below the others (which carry no cost: 0), nothing else; both
    // landed, and were in the cache, before the answer
    assert_eq!(answer["patches"]["planned"], 2, "{answer}");
    assert_eq!(answer["patches"]["applied"], 2, "{answer}");
    assert_eq!(answer["patches"]["observed"], true);
    assert_eq!(fake.writes_to("pods").len(), 2);
    // the victims are the spot pods (without the writes the newest,
    // on-demand pods would be)
    assert_eq!(sorted(victims(&answer)), spot_pods(&pods), "{answer}");
    for v in answer["victims"].as_array().unwrap() {
        assert_eq!(v["cost"], -1, "{answer}");
        assert_eq!(v["intendedCost"], 10);
    }
    for pod in &pods {
        let stored = fake.get_json("Pod", NS, pod).unwrap();
        let cost =
            stored.pointer("/metadata/annotations/controller.kubernetes.io~1pod-deletion-cost");
        let want = spot_pods(&pods).contains(pod).then(|| json!("-1"));
        assert_eq!(cost, want.as_ref(), "{pod}");
    }
    assert_eq!(answer["verdict"], "AsIntended", "{answer}");
    assert_eq!(answer["replicaSets"][0]["mismatches"], json!([]));
    assert_eq!(answer["scaleDownBy"], 2);
    assert_eq!(answer["currentReplicas"], 4);
    assert!(answer["scale"].is_null());
    // priority: the patches were urgent, and still no scale write
    assert!(fake.writes_to("deployments/scale").is_empty());

    let m = op.metrics().await;
    assert_eq!(
        metric(&m, "deletion_cost_hook_patch_observed_seconds_count"),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "deletion_cost_hook_requests_total{outcome=\"ok\"}"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_workload_conflicts_and_the_concurrency_limit_answers_busy() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    seed_workload(&fake, "web", 2, true);
    seed_workload(&fake, "api", 2, true);
    let mut cfg = config();
    cfg.hook.max_concurrent = 1;
    let op = Arc::new(Operator::start(&fake, cfg).serving(&fake).await);
    // pod patches hang until the fault is cleared: the first request stays in flight
    fake.inject(
        Fault::delay(Duration::from_secs(3600))
            .on(Verb::Patch, "pods")
            .always(),
    );

    let first = {
        let op = op.clone();
        tokio::spawn(async move { op.post(Some(ALICE), &request("web", 1)).await })
    };
    eventually(HANG, "a pod patch in flight", || async {
        !fake.requests_for(Verb::Patch, "pods").is_empty()
    })
    .await;

    let (status, answer) = op.post(Some(ALICE), &request("web", 1)).await;
    assert_eq!(status, 409, "{answer}");
    assert!(answer["error"]
        .as_str()
        .unwrap()
        .contains("Deployment shop/web"));
    let (status, answer) = op.post(Some(ALICE), &request("api", 1)).await;
    assert_eq!(status, 429, "{answer}");

    fake.clear_faults();
    // kube's client gave up on nothing: the delayed patches were only held
    let (status, answer) = tokio::time::timeout(HANG, first).await.unwrap().unwrap();
    assert_eq!(status, 200, "{answer}");
    // and the workload is free again
    let (status, _) = op.post(Some(ALICE), &request("api", 1)).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_time_answers_504() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    seed_workload(&fake, "web", 2, true);
    let op = Operator::start(&fake, config()).serving(&fake).await;
    fake.inject(
        Fault::delay(Duration::from_secs(3600))
            .on(Verb::Patch, "pods")
            .always(),
    );
    let mut body = request("web", 1);
    body["timeoutSeconds"] = json!(1);
    let (status, answer) = op.post(Some(ALICE), &body).await;
    assert_eq!(status, 504, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("1 of 1 cost write(s) had not shown"),
        "{answer}"
    );
    assert!(fake.writes_to("deployments/scale").is_empty());
    let m = op.metrics().await;
    assert_eq!(
        metric(&m, "deletion_cost_hook_requests_total{outcome=\"timeout\"}"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_answers_503_with_the_leader() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    seed_workload(&fake, "web", 2, true);
    let now = k8s_openapi::jiff::Timestamp::now();
    fake.apply_json(
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "deletion-cost", "namespace": "ops"},
        "spec": {"holderIdentity": "op-1", "leaseDurationSeconds": 3600,
                 "acquireTime": now.to_string(), "renewTime": now.to_string()}}),
    )
    .unwrap();
    let mut cfg = config();
    cfg.leader_election = true;
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    let (status, answer) = op.post(Some(ALICE), &request("web", 1)).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["leader"], "op-1");
    assert!(fake.writes_to("pods").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_operator_predicts_and_writes_nothing() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    let pods = seed_workload(&fake, "web", 4, true);
    let mut cfg = config();
    cfg.dry_run = true;
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    let mut body = request("web", 2);
    body["scale"] = json!(true);
    let (status, answer) = op.post(Some(ALICE), &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["dryRun"], true);
    assert!(answer["patches"]["held"]
        .as_str()
        .unwrap()
        .contains("dry-run"));
    // the two writes a scale-in by two needs, held
    assert_eq!(answer["patches"]["planned"], 2);
    assert_eq!(answer["scale"]["performed"], false);
    // on the pods as they are, the newest (on-demand) pods would go
    assert_eq!(sorted(victims(&answer)), pods[2..].to_vec(), "{answer}");
    assert_eq!(answer["verdict"], "NotAsIntended");
    assert!(fake.writes().iter().all(|w| !matches!(
        w.resource.as_deref(),
        Some("pods") | Some("deployments/scale")
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_on_different_workloads_proceed_in_parallel() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    seed_workload(&fake, "web", 4, true);
    seed_workload(&fake, "api", 4, true);
    let op = Arc::new(Operator::start(&fake, config()).serving(&fake).await);
    // every pod patch is held for a while: a request cannot answer before its
    // patches are answered
    fake.inject(
        Fault::delay(Duration::from_secs(2))
            .on(Verb::Patch, "pods")
            .always(),
    );
    let call = |w: &'static str| {
        let op = op.clone();
        tokio::spawn(async move { op.post(Some(ALICE), &request(w, 2)).await })
    };
    let (a, b) = (call("web"), call("api"));
    let patched = |w: &str| {
        fake.requests_for(Verb::Patch, "pods")
            .iter()
            .any(|r| r.name.as_deref().is_some_and(|n| n.starts_with(w)))
    };
    // in-flight overlap: both workloads have patches in flight and neither
    // request has answered (a serialised hook sends the second workload's
    // patches only after the first answered)
    eventually(HANG, "pod patches of both workloads", || async {
        patched("web") && patched("api")
    })
    .await;
    let in_flight = [&a, &b].iter().filter(|t| !t.is_finished()).count();
    assert_eq!(
        in_flight, 2,
        "a request answered before the other's patches were sent"
    );
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!((a.0, b.0), (200, 200), "{} {}", a.1, b.1);
    // two writes each: the victims of a scale-in by two
    assert_eq!(fake.requests_for(Verb::Patch, "pods").len(), 4);
}

/// With the scale-in allowance off, a scale-in's writes take the
/// operator-wide limit's tokens like every other write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urgent_patches_stay_inside_the_operator_wide_limit() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    seed_workload(&fake, "web", 6, true);
    seed_workload(&fake, "api", 6, true);
    let mut cfg = config();
    cfg.qps = 4.0;
    cfg.burst = 2;
    cfg.scale_in_allowance = 0;
    let op = Arc::new(Operator::start(&fake, cfg).serving(&fake).await);
    let call = |w: &'static str| {
        let op = op.clone();
        tokio::spawn(async move { op.post(Some(ALICE), &request(w, 3)).await })
    };
    let (a, b) = (call("web"), call("api"));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!((a.0, b.0), (200, 200), "{} {}", a.1, b.1);
    // three writes each: the victims of a scale-in by three
    assert_eq!(fake.writes_to("pods").len(), 6);
    // burst 2 + 4/s: never more than 2 + 4 writes within any second
    let worst = fake.max_writes_in_window(Some("pods"), Duration::from_secs(1));
    assert!(worst <= 6, "{worst} pod writes within one second");
}

/// A scale-in whose correction needs more writes than `--qps`/`--burst`
/// allow within its budget: they go on the scale-in allowance, at once,
/// and the counter says so; background work keeps the operator-wide limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_correction_lands_at_once_on_the_scale_in_allowance() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    seed_workload(&fake, "web", 40, true);
    let mut cfg = config();
    cfg.qps = 1.0;
    cfg.burst = 1;
    cfg.scale_in_allowance = 30;
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    let started = std::time::Instant::now();
    let (status, answer) = op.post(Some(ALICE), &request("web", 20)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["patches"]["observed"], true, "{answer}");
    let written = fake.writes_to("pods").len();
    // the 20 pods of one class written below (or above) the other's
    assert_eq!(written, 20, "{answer}");
    // at --qps 1 they would take 20 s; on the allowance they go together
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(fake.max_writes_in_window(Some("pods"), Duration::from_secs(1)) >= 15);
    let metrics = op.metrics().await;
    assert!(
        metrics.contains("deletion_cost_scale_in_allowance_writes_total 20"),
        "{metrics}"
    );
}

/// A hook call while the background round's writes of the same pods are
/// still queued: its writes go ahead of them, the queued values of its pods
/// are dropped (none lands after the correction and moves the cut), none
/// is sent twice, and the background leaves the pods alone while the
/// scale-in happens. (The background's queue used to filter the hook's
/// requests out, and the answer then said "writes are not enabled yet
/// (leadership starting)".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_while_background_writes_are_queued_goes_first_and_drops_them() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    let pods = seed_workload(&fake, "web", 12, true);
    let mut cfg = config();
    cfg.qps = 3.0;
    cfg.burst = 1;
    cfg.debounce = Duration::from_millis(100);
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    eventually(HANG, "the background round writing", || async {
        !fake.writes_to("pods").is_empty()
    })
    .await;
    let (status, answer) = op.post(Some(ALICE), &request("web", 10)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["patches"]["held"], Value::Null, "{answer}");
    assert_eq!(answer["patches"]["failed"], json!([]), "{answer}");
    assert_eq!(answer["patches"]["observed"], true, "{answer}");
    assert_eq!(answer["verdict"], "AsIntended", "{answer}");
    let written = fake.writes_to("pods").len();
    // the background round stays off the workload while the scale-in happens
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        fake.writes_to("pods").len(),
        written,
        "background writes during the hold"
    );
    let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
    for w in fake.writes_to("pods") {
        if w.status == 200 {
            *per_pod.entry(w.name.unwrap_or_default()).or_default() += 1;
        }
    }
    assert!(per_pod.values().all(|n| *n == 1), "{per_pod:?}");
    // not every pod was written: the correction wrote what the cut needs
    assert!(per_pod.len() < pods.len(), "{per_pod:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_true_sets_the_scale_and_reports_the_deleted_pods() {
    let fake = Arc::new(FakeApi::start().await);
    seed_cluster(&fake);
    let pods = seed_workload(&fake, "web", 4, true);
    let op = Operator::start(&fake, config()).serving(&fake).await;

    // the test plays the Deployment and ReplicaSet controllers: once the
    // scale is set, delete the pods the embedded comparator picks
    let controller = {
        let fake = fake.clone();
        tokio::spawn(async move {
            eventually(HANG, "a scale write", || async {
                !fake.writes_to("deployments/scale").is_empty()
            })
            .await;
            let dep = fake.get_json("Deployment", NS, "web").unwrap();
            let replicas = dep.pointer("/spec/replicas").unwrap().as_u64().unwrap() as usize;
            support::controller::delete_victims(&fake, NS, replicas)
        })
    };
    let mut body = request("web", 2);
    body["scale"] = json!(true);
    let (status, answer) = op.post(Some(ALICE), &body).await;
    assert_eq!(status, 200, "{answer}");
    let doomed = controller.await.unwrap();

    let put = fake.writes_to("deployments/scale");
    assert_eq!(put.len(), 1);
    assert_eq!(put[0].method, "PUT");
    assert_eq!(
        put[0].json().unwrap().pointer("/spec/replicas"),
        Some(&json!(2))
    );
    // the costs landed before the scale was set
    let scale_at = put[0].at;
    assert!(fake.writes_to("pods").iter().all(|w| w.at <= scale_at));

    let scale = &answer["scale"];
    assert_eq!(scale["performed"], true, "{answer}");
    let cmp = &scale["comparison"];
    assert_eq!(sorted(strings(&cmp["predicted"])), spot_pods(&pods));
    let mut deleted = strings(&cmp["deleted"]);
    deleted.sort();
    let mut expected = doomed.clone();
    expected.sort();
    assert_eq!(deleted, expected);
    assert_eq!(cmp["complete"], true);
    assert_eq!(cmp["asPredicted"], true, "{answer}");
}

/// The CA the operator published (ConfigMap `deletion-cost-hook-ca`, key `ca.crt`,
/// in the lease namespace `ops`), once it is there.
async fn published_ca(fake: &FakeApi) -> String {
    let mut ca = None;
    eventually(HANG, "the published CA", || {
        ca = fake
            .get_json("ConfigMap", "ops", "deletion-cost-hook-ca")
            .and_then(|cm| {
                cm.pointer("/data/ca.crt")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            });
        std::future::ready(ca.is_some())
    })
    .await;
    ca.unwrap()
}

fn tls_client(ca_pem: &str) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = reqwest::Certificate::from_pem_bundle(ca_pem.as_bytes()).unwrap();
    assert!(!certs.is_empty());
    reqwest::Client::builder()
        .timeout(HANG)
        .tls_certs_only(certs)
        .build()
        .unwrap()
}

/// An error with all its causes.
fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

async fn post_with(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> reqwest::Result<(u16, Value)> {
    let resp = client
        .post(url)
        .bearer_auth(ALICE)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await?;
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await?;
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

/// Runs the `deletion-cost` binary (blocking, so off the runtime's workers).
async fn cli(args: Vec<String>, envs: Vec<(&'static str, String)>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_deletion-cost"))
            .args(&args)
            .env_remove("DELETION_COST_CA_FILE")
            .env_remove("DELETION_COST_HOOK_URL")
            .envs(envs)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn prescale_args(url: &str, token_file: &std::path::Path) -> Vec<String> {
    [
        "prescale",
        "-n",
        NS,
        "--deployment",
        "web",
        "--replicas",
        "2",
        "-o",
        "json",
        "--url",
        url,
        "--token-file",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([token_file.display().to_string()])
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_serves_tls_verified_by_the_published_ca() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    let pods = seed_workload(&fake, "web", 4, true);
    let op = Operator::start(&fake, tls_config()).serving(&fake).await;
    let ca = published_ca(&fake).await;
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");

    // the CA is shared through a Secret (type kubernetes.io/tls) the operator made
    let secret = fake
        .get_json("Secret", "ops", "deletion-cost-hook-ca")
        .unwrap();
    assert_eq!(secret["type"], "kubernetes.io/tls");
    assert!(secret.pointer("/data/tls.key").is_some());
    // and published by server-side apply under the operator's field manager
    let cm_writes = fake.writes_to("configmaps");
    assert!(!cm_writes.is_empty());
    for w in &cm_writes {
        assert_eq!(w.method, "PATCH");
        assert_eq!(
            w.content_type.as_deref(),
            Some("application/apply-patch+yaml")
        );
        assert!(
            w.query.contains("fieldManager=deletion-cost-operator"),
            "{}",
            w.query
        );
    }

    // a TLS call verified by the published CA, by every loopback name
    let client = tls_client(&ca);
    let port = op.hook_addr().port();
    for host in ["localhost", "127.0.0.1"] {
        let url = format!("https://{host}:{port}/v1/prescale");
        let (status, answer) = post_with(&client, &url, &request("web", 2))
            .await
            .unwrap_or_else(|e| panic!("{url}: {}", causes(&e)));
        assert_eq!(status, 200, "{answer}");
        assert_eq!(sorted(victims(&answer)), spot_pods(&pods), "{answer}");
    }

    // `deletion-cost prescale` trusts the CA file named by DELETION_COST_CA_FILE
    let dir = tempfile::tempdir().unwrap();
    let (token, ca_file) = (dir.path().join("token"), dir.path().join("ca.crt"));
    std::fs::write(&token, ALICE).unwrap();
    std::fs::write(&ca_file, &ca).unwrap();
    let url = format!("https://localhost:{port}");
    let out = cli(
        prescale_args(&url, &token),
        vec![("DELETION_COST_CA_FILE", ca_file.display().to_string())],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["verdict"], "AsIntended", "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_and_plain_http_are_refused_by_the_tls_port() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    seed_workload(&fake, "web", 2, true);
    let op = Operator::start(&fake, tls_config()).serving(&fake).await;
    published_ca(&fake).await;
    let port = op.hook_addr().port();
    let url = format!("https://localhost:{port}/v1/prescale");

    // another CA: the handshake fails, nothing reaches the handler
    let other = deletion_cost::hook::cert::new_ca(std::time::SystemTime::now()).unwrap();
    let err = post_with(&tls_client(&other.cert), &url, &request("web", 1))
        .await
        .expect_err("a certificate from an unknown CA was accepted");
    // (every self-issued CA has the same name: the verifier finds the issuer
    // by name and then refuses its signature)
    let msg = causes(&err);
    assert!(msg.contains("invalid peer certificate"), "{msg}");
    // the prescale client says so and exits 1
    let dir = tempfile::tempdir().unwrap();
    let (token, ca_file) = (dir.path().join("token"), dir.path().join("other.crt"));
    std::fs::write(&token, ALICE).unwrap();
    std::fs::write(&ca_file, &other.cert).unwrap();
    let mut args = prescale_args(&format!("https://localhost:{port}"), &token);
    args.extend(["--ca-file".to_string(), ca_file.display().to_string()]);
    let out = cli(args, vec![]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("invalid peer certificate"), "{stderr}");

    // plain HTTP to the TLS port: no HTTP answer, the connection is closed
    let mut s = tokio::net::TcpStream::connect(op.hook_addr())
        .await
        .unwrap();
    s.write_all(
        format!("POST /v1/prescale HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}").as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(HANG, s.read_to_end(&mut buf))
        .await
        .expect("connection left open")
        .ok();
    assert!(
        !String::from_utf8_lossy(&buf).contains("HTTP/"),
        "an HTTP answer on the TLS port: {buf:?}"
    );
    // at most a TLS alert record (content type 21)
    assert!(buf.is_empty() || buf[0] == 21, "{buf:?}");
    let plain = post_with(
        &http_client(),
        &format!("http://127.0.0.1:{port}/v1/prescale"),
        &request("web", 1),
    )
    .await;
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");

    // none of it was authenticated, let alone written
    assert!(fake.requests_for(Verb::Create, "tokenreviews").is_empty());
    assert!(fake.writes_to("pods").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_started_together_share_one_ca() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    seed_workload(&fake, "web", 2, true);
    let mut b = tls_config();
    b.identity = "op-1".into();
    let (a, b) = tokio::join!(
        Operator::start(&fake, tls_config()).serving(&fake),
        Operator::start(&fake, b).serving(&fake)
    );
    let ca = published_ca(&fake).await;
    // both replicas' certificates verify against the one published CA
    let client = tls_client(&ca);
    for op in [&a, &b] {
        let url = format!("https://localhost:{}/v1/prescale", op.hook_addr().port());
        let (status, answer) = post_with(&client, &url, &request("web", 1))
            .await
            .unwrap_or_else(|e| panic!("{url}: {}", causes(&e)));
        assert_eq!(status, 200, "{answer}");
    }
    // one CA was stored; a replica that lost the race to create it read it
    let created: Vec<u16> = fake
        .requests_for(Verb::Create, "secrets")
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(
        created.iter().filter(|s| **s == 201).count(),
        1,
        "{created:?}"
    );
    assert!(
        created.iter().all(|s| *s == 201 || *s == 409),
        "{created:?}"
    );
    assert_eq!(published_ca(&fake).await, ca);

    // a replica started later reuses it too
    let mut c = tls_config();
    c.identity = "op-2".into();
    let c = Operator::start(&fake, c).serving(&fake).await;
    let url = format!("https://localhost:{}/v1/prescale", c.hook_addr().port());
    let (status, _) = post_with(&client, &url, &request("web", 1))
        .await
        .unwrap_or_else(|e| panic!("{url}: {}", causes(&e)));
    assert_eq!(status, 200);
    assert_eq!(published_ca(&fake).await, ca);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prescale_sends_no_token_over_plain_http_unless_asked() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    seed_workload(&fake, "web", 4, true);
    let op = Operator::start(&fake, config()).serving(&fake).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, ALICE).unwrap();
    let url = format!("http://{}", op.hook_addr());

    let out = cli(prescale_args(&url, &token), vec![]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("refusing to send a bearer token over plain HTTP")
            && stderr.contains("--insecure-http"),
        "{stderr}"
    );
    // nothing was sent
    assert!(fake.requests_for(Verb::Create, "tokenreviews").is_empty());

    let mut args = prescale_args(&url, &token);
    args.push("--insecure-http".into());
    let out = cli(args, vec![]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ca_secret(cert: &str, key: Option<&str>) -> k8s_openapi::api::core::v1::Secret {
    let mut data = std::collections::BTreeMap::from([(
        "tls.crt".to_string(),
        k8s_openapi::ByteString(cert.as_bytes().to_vec()),
    )]);
    if let Some(key) = key {
        data.insert(
            "tls.key".to_string(),
            k8s_openapi::ByteString(key.as_bytes().to_vec()),
        );
    }
    k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("deletion-cost-hook-ca".into()),
            namespace: Some("ops".into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_ca_is_reused_after_a_lost_race_and_a_transient_error() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    seed_workload(&fake, "web", 2, true);
    let stored = deletion_cost::hook::cert::new_ca(std::time::SystemTime::now()).unwrap();
    fake.insert(&ca_secret(&stored.cert, Some(&stored.key)))
        .unwrap();
    // the first read misses it (another replica creates it meanwhile), and the
    // first publication fails with a 503
    fake.inject(Fault::status(404).on(Verb::Get, "secrets"));
    fake.inject(Fault::status(503).on(Verb::Patch, "configmaps"));
    let op = Operator::start(&fake, tls_config()).serving(&fake).await;
    eventually(HANG, "every fault spent", || async {
        fake.faults_left() == Some(0)
    })
    .await;
    let ca = published_ca(&fake).await;
    assert_eq!(ca, stored.cert);
    let created: Vec<u16> = fake
        .requests_for(Verb::Create, "secrets")
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(created, vec![409]);
    let url = format!("https://localhost:{}/v1/prescale", op.hook_addr().port());
    let (status, answer) = post_with(&tls_client(&ca), &url, &request("web", 1))
        .await
        .unwrap_or_else(|e| panic!("{url}: {}", causes(&e)));
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_stored_ca_keeps_the_hook_closed_until_it_is_deleted() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    seed_workload(&fake, "web", 2, true);
    let (a, b) = (
        deletion_cost::hook::cert::new_ca(std::time::SystemTime::now()).unwrap(),
        deletion_cost::hook::cert::new_ca(std::time::SystemTime::now()).unwrap(),
    );
    for bad in [ca_secret(&a.cert, None), ca_secret(&a.cert, Some(&b.key))] {
        let _ = fake.delete_json("Secret", "ops", "deletion-cost-hook-ca");
        fake.insert(&bad).unwrap();
        let op = Operator::start(&fake, tls_config()).serving(&fake).await;
        // the Secret is read again and again, never overwritten, nothing is
        // published, and the hook answers nobody
        eventually(HANG, "three reads of the Secret", || async {
            fake.requests_for(Verb::Get, "secrets").len() >= 3
        })
        .await;
        assert!(fake.writes_to("secrets").is_empty());
        assert!(fake
            .get_json("ConfigMap", "ops", "deletion-cost-hook-ca")
            .is_none());
        let _ = rustls::crypto::ring::default_provider().install_default();
        let impatient = reqwest::Client::builder()
            .timeout(Duration::from_millis(500))
            .tls_certs_only(reqwest::Certificate::from_pem_bundle(a.cert.as_bytes()).unwrap())
            .build()
            .unwrap();
        let url = format!("https://localhost:{}/v1/prescale", op.hook_addr().port());
        let early = post_with(&impatient, &url, &request("web", 1)).await;
        assert!(early.is_err(), "{early:?}");

        // deleting the Secret heals it without a restart: a new CA, published
        fake.delete_json("Secret", "ops", "deletion-cost-hook-ca")
            .unwrap();
        let ca = published_ca(&fake).await;
        assert_ne!(ca, a.cert);
        let (status, answer) = post_with(&tls_client(&ca), &url, &request("web", 1))
            .await
            .unwrap_or_else(|e| panic!("{url}: {}", causes(&e)));
        assert_eq!(status, 200, "{answer}");
        drop(op);
        fake.delete_json("ConfigMap", "ops", "deletion-cost-hook-ca")
            .unwrap();
        fake.clear_requests();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_conflicting_or_invalid_hook_tls_flags() {
    let to_args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for (args, needle) in [
        (
            to_args(&[
                "run",
                "--hook-insecure-http",
                "--hook-tls-cert",
                "c.pem",
                "--hook-tls-key",
                "k.pem",
            ]),
            "cannot be used with",
        ),
        (
            to_args(&["run", "--hook-service-name", "Deletion_Cost"]),
            "--hook-service-name",
        ),
    ] {
        let out = cli(args, vec![]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
    }
}

/// A stand-in for the hook Service during a takeover: nothing listens at
/// first (the proxy rules still point at the old leader), then a follower
/// answers 503, then the leader answers. Each connection gets the next answer.
fn takeover_stub(answers: Vec<(u16, &'static str)>, listen_after: Duration) -> u16 {
    let port = free_port();
    std::thread::spawn(move || {
        std::thread::sleep(listen_after);
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        for (status, body) in answers {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let mut seen = Vec::new();
            // read the headers and the (small) body
            while !String::from_utf8_lossy(&seen).contains("\"replicas\"") {
                let n = std::io::Read::read(&mut s, &mut buf).unwrap();
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
            }
            let reply = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            std::io::Write::write_all(&mut s, reply.as_bytes()).unwrap();
        }
    });
    port
}

#[tokio::test]
async fn prescale_tries_again_while_leadership_moves() {
    let port = takeover_stub(
        vec![
            (
                503,
                r#"{"error":"not the leader; send the request to op-b"}"#,
            ),
            (200, r#"{"policy":"shop/web","verdict":"AsIntended"}"#),
        ],
        Duration::from_millis(600),
    );
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, ALICE).unwrap();
    let mut args = prescale_args(&format!("http://127.0.0.1:{port}"), &token);
    args.extend(["--insecure-http".into(), "--timeout".into(), "20".into()]);
    let out = cli(args, vec![]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["verdict"], "AsIntended");
    // said why it waited: first the refused connection, then the 503
    assert!(
        stderr.contains("connection refused: nothing listens there"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hook answered 503: not the leader"),
        "{stderr}"
    );
    assert!(stderr.contains("trying again"), "{stderr}");
}

#[tokio::test]
async fn prescale_gives_up_on_503_when_its_time_is_spent() {
    let answers = vec![
        (
            503,
            r#"{"error":"not the leader; send the request to op-b"}"#
        );
        20
    ];
    let port = takeover_stub(answers, Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, ALICE).unwrap();
    let mut args = prescale_args(&format!("http://127.0.0.1:{port}"), &token);
    args.extend(["--insecure-http".into(), "--timeout".into(), "1".into()]);
    let out = cli(args, vec![]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: hook answered 503: not the leader"),
        "{stderr}"
    );
}

/// With the self-issued certificate the operator sets its CA as the
/// caBundle of the scale-in webhook that calls its Service (the one the
/// `scale-webhook` component installs), and leaves other webhooks alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_in_webhook_gets_the_self_issued_ca() {
    let fake = FakeApi::start().await;
    seed_cluster(&fake);
    let name = deletion_cost::hook::webhook_ca::config_name("ops");
    let webhook = |hook: &str, service: &str| {
        json!({"name": hook, "admissionReviewVersions": ["v1"], "sideEffects": "NoneOnDryRun",
               "clientConfig": {"service": {"name": service, "namespace": "ops", "path": "/v1/admit-scale-in"}}})
    };
    fake.apply_json(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [webhook("scale-in.deletioncost.dev", "deletion-cost-hook"),
                     webhook("someone-else.example.com", "other")]
    }))
    .unwrap();
    let mut cfg = tls_config();
    cfg.hook.webhook_ca = true;
    let op = Operator::start(&fake, cfg).serving(&fake).await;
    let ca = published_ca(&fake).await;
    // typed: caBundle is base64 on the wire
    let bundle = |i: usize| {
        let config: k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration =
            serde_json::from_value(fake.get_json("ValidatingWebhookConfiguration", "", &name)?)
                .ok()?;
        config.webhooks?[i]
            .client_config
            .ca_bundle
            .clone()
            .map(|b| b.0)
    };
    eventually(HANG, "the webhook's caBundle", || {
        std::future::ready(bundle(0).as_deref() == Some(ca.as_bytes()))
    })
    .await;
    assert_eq!(bundle(1), None, "another Service's webhook was changed");
    op.stop().await;
}
