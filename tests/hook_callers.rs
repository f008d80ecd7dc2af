//! Who may call the hook's listeners, against the fake API server: the
//! scale-in webhook answers only callers with a TLS client certificate from
//! `--scale-webhook-client-ca` (carrying a `--scale-webhook-client-name`),
//! on the hook's listener or on its own (`--scale-webhook-addr`, where the
//! handshake itself requires the certificate); and every source address has
//! its own budget of calls to both (`--hook-source-qps`/`--hook-source-burst`).

mod support;

use std::net::SocketAddr;
use std::path::Path;

use deletion_cost::annotations::POD_DELETION_COST;
use deletion_cost::hook::{HookConfig, HookTls, TlsFiles, WebhookClients};
use deletion_cost::writes::Rate;
use deletion_cost_testkit::fake_api::FakeApi;
use deletion_cost_testkit::free_addr;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use serde_json::{json, Value};
use support::operator::{config, seed_web_pods, Operator, HANG, NS};

/// A CA: its certificate (PEM) and what issues from it.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// A certificate from `ca` with subject `cn` and `sans`, for `usage`:
/// certificate and key, PEM.
fn issue(ca: &Ca, cn: &str, sans: &[&str], usage: ExtendedKeyUsagePurpose) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// The hook's serving certificate for 127.0.0.1 from `ca`, as files in `dir`.
/// The webhook's callers: certificates of `clients_ca` (its PEM written to
/// `dir`) naming one of `names` (any name when empty).
fn webhook_clients(dir: &Path, clients_ca: &Ca, names: &[&str]) -> WebhookClients {
    let ca = dir.join("clients-ca.crt");
    std::fs::write(&ca, &clients_ca.pem).unwrap();
    WebhookClients {
        ca,
        names: names.iter().map(|n| n.to_string()).collect(),
    }
}

fn serving_files(dir: &Path, ca: &Ca) -> TlsFiles {
    let (cert, key) = issue(
        ca,
        "127.0.0.1",
        &["127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let files = TlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    std::fs::write(&files.cert, cert).unwrap();
    std::fs::write(&files.key, key).unwrap();
    files
}

/// An HTTPS client trusting `server_ca`, presenting `identity` (certificate
/// and key PEM) when given.
fn https(server_ca: &Ca, identity: Option<&(String, String)>) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut b = reqwest::Client::builder()
        .timeout(HANG)
        .add_root_certificate(reqwest::Certificate::from_pem(server_ca.pem.as_bytes()).unwrap());
    if let Some((cert, key)) = identity {
        b = b.identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap());
    }
    b.build().unwrap()
}

/// The fake cluster: Deployment `web` (4 pods, 2 on a spot node, 2 on an
/// on-demand one) and the policy that manages it.
fn seed(fake: &FakeApi) {
    seed_web_pods(fake, 4, None);
    fake.apply_json(
        json!({"apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"targetRef": {"kind": "Deployment", "name": "web"},
            "signals": [{"billingClass": {"costs": {"spot": 10, "on-demand": 100}}}]}}),
    )
    .unwrap();
}

/// The AdmissionReview the API server sends for `kubectl scale deployment/web`.
fn review(uid: &str, from: i64, to: i64) -> Value {
    let scale = |n: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "web", "namespace": NS}, "spec": {"replicas": n}})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid,
        "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "subResource": "scale", "name": "web", "namespace": NS, "operation": "UPDATE",
        "userInfo": {"username": "kubernetes-admin"},
        "object": scale(to), "oldObject": scale(from), "dryRun": false}})
}

/// POST `body` to `url`: (status, JSON answer), or the client's error
/// (a refused handshake).
async fn post(http: &reqwest::Client, url: &str, body: &Value) -> Result<(u16, Value), String> {
    let resp = http
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    Ok((status, v))
}

fn costs_written(fake: &FakeApi) -> usize {
    (0..4)
        .filter(|i| {
            fake.get_json("Pod", NS, &format!("web-{i:03}"))
                .is_some_and(|p| p["metadata"]["annotations"][POD_DELETION_COST].is_string())
        })
        .count()
}

fn calls(metrics: &str, outcome: &str) -> f64 {
    let start = format!("deletion_cost_scale_webhook_calls_total{{outcome=\"{outcome}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&start))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// The operator with the hook over TLS (`files`) and `hook` settings; no
/// reconcile after the start's (an hour's throttle), so what is written at a
/// scale-in, the webhook wrote.
async fn start(fake: &FakeApi, files: TlsFiles, hook: HookConfig) -> (Operator, SocketAddr) {
    let mut cfg = config("op-0", 100.0, 100);
    cfg.metrics_addr = free_addr();
    cfg.debounce = std::time::Duration::from_secs(3600);
    let addr = free_addr();
    cfg.hook_addr = Some(addr);
    cfg.hook = HookConfig {
        tls: HookTls::Files(files),
        ..hook
    };
    (Operator::start(fake, cfg).serving(fake).await, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_answers_only_the_client_certificate_it_was_told_of() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let dir = tempfile::tempdir().unwrap();
    let (server_ca, clients_ca, other_ca) = (ca("hook CA"), ca("webhook clients"), ca("intruder"));
    let hook = HookConfig {
        webhook_clients: Some(webhook_clients(
            dir.path(),
            &clients_ca,
            &["kube-apiserver"],
        )),
        ..HookConfig::default()
    };
    let (op, addr) = start(&fake, serving_files(dir.path(), &server_ca), hook).await;
    let url = format!("https://{addr}/v1/admit-scale-in");
    let client = ExtendedKeyUsagePurpose::ClientAuth;
    let apiserver = issue(&clients_ca, "kube-apiserver", &[], client.clone());
    let kubelet = issue(
        &clients_ca,
        "system:node:n1",
        &["n1.example"],
        client.clone(),
    );
    let intruder = issue(&other_ca, "kube-apiserver", &[], client);

    // no certificate: 401, and no round ran
    let (status, body) = post(&https(&server_ca, None), &url, &review("u-1", 4, 2))
        .await
        .unwrap();
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("--scale-webhook-client-ca"),
        "{body}"
    );
    // the hook's own callers share the listener without a certificate
    let (status, body) = post(
        &https(&server_ca, None),
        &format!("https://{addr}/v1/prescale"),
        &json!({}),
    )
    .await
    .unwrap();
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("Authorization"),
        "{body}"
    );
    // a certificate from the CA with another name: 403
    let (status, body) = post(
        &https(&server_ca, Some(&kubelet)),
        &url,
        &review("u-2", 4, 2),
    )
    .await
    .unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("system:node:n1, n1.example"),
        "{body}"
    );
    // a certificate from another CA: the handshake fails
    let refused = post(
        &https(&server_ca, Some(&intruder)),
        &url,
        &review("u-3", 4, 2),
    )
    .await;
    assert!(
        refused.is_err(),
        "another CA's certificate was accepted: {refused:?}"
    );
    assert_eq!(costs_written(&fake), 0, "a refused call ran a round");

    // the API server's certificate: the scale-in gets its costs
    let (status, body) = post(
        &https(&server_ca, Some(&apiserver)),
        &url,
        &review("u-4", 4, 2),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"]["uid"], "u-4");
    assert_eq!(body["response"]["allowed"], true, "{body}");
    // the scale-in's correction was written (only the costs it needs)
    assert!(costs_written(&fake) > 0, "{body}");

    let m = op.metrics().await;
    assert_eq!(calls(&m, "unauthenticated"), 1.0, "{m}");
    assert_eq!(calls(&m, "forbidden"), 1.0, "{m}");
    assert_eq!(calls(&m, "fresh"), 1.0, "{m}");
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_on_its_own_listener_requires_the_certificate_at_the_handshake() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let dir = tempfile::tempdir().unwrap();
    let (server_ca, clients_ca) = (ca("hook CA"), ca("webhook clients"));
    let webhook = free_addr();
    let hook = HookConfig {
        webhook_addr: Some(webhook),
        webhook_clients: Some(webhook_clients(dir.path(), &clients_ca, &[])),
        ..HookConfig::default()
    };
    let (op, addr) = start(&fake, serving_files(dir.path(), &server_ca), hook).await;
    let apiserver = issue(
        &clients_ca,
        "kube-apiserver",
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    );

    // the hook's listener no longer answers the webhook
    let (status, body) = post(
        &https(&server_ca, None),
        &format!("https://{addr}/v1/admit-scale-in"),
        &review("u-1", 4, 2),
    )
    .await
    .unwrap();
    assert_eq!(status, 404, "{body}");
    // the webhook's: no certificate, no connection
    let url = format!("https://{webhook}/v1/admit-scale-in");
    let refused = post(&https(&server_ca, None), &url, &review("u-2", 4, 2)).await;
    assert!(
        refused.is_err(),
        "answered without a certificate: {refused:?}"
    );
    assert_eq!(costs_written(&fake), 0);
    // with one (any name: none was asked for)
    let api = https(&server_ca, Some(&apiserver));
    let (status, body) = post(&api, &url, &review("u-3", 4, 2)).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(costs_written(&fake) > 0, "{body}");
    // and only the webhook
    let (status, body) = post(&api, &format!("https://{webhook}/v1/prescale"), &json!({}))
        .await
        .unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("scale-in webhook"),
        "{body}"
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_over_its_budget_gets_no_round() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let dir = tempfile::tempdir().unwrap();
    let server_ca = ca("hook CA");
    // three calls, then one every 100 s
    let hook = HookConfig {
        per_source: Some(Rate::new("test", 0.01, 3).unwrap()),
        ..HookConfig::default()
    };
    let (op, addr) = start(&fake, serving_files(dir.path(), &server_ca), hook).await;
    let http = https(&server_ca, None);
    let url = format!("https://{addr}/v1/admit-scale-in");
    // two scale-outs (nothing to do) and a prescale without a token
    for uid in ["u-1", "u-2"] {
        let (status, body) = post(&http, &url, &review(uid, 2, 4)).await.unwrap();
        assert_eq!(
            (status, &body["response"]["allowed"]),
            (200, &json!(true)),
            "{body}"
        );
    }
    let prescale = format!("https://{addr}/v1/prescale");
    let (status, _) = post(&http, &prescale, &json!({})).await.unwrap();
    assert_eq!(status, 401);

    // over the budget: the scale-in is allowed, with why its costs are not fresh
    let (status, body) = post(&http, &url, &review("u-3", 4, 2)).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let r = &body["response"];
    assert_eq!(
        (&r["uid"], &r["allowed"]),
        (&json!("u-3"), &json!(true)),
        "{body}"
    );
    let warning = r["warnings"][0].as_str().unwrap_or_default();
    assert!(
        warning.contains("not made fresh") && warning.contains("127.0.0.1"),
        "{body}"
    );
    assert_eq!(costs_written(&fake), 0, "a round ran over the budget");
    // and the hook answers 429 with when to come back
    let resp = http.post(&prescale).json(&json!({})).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=100).contains(&retry), "Retry-After {retry}");
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("too many calls"),
        "{body}"
    );

    let m = op.metrics().await;
    assert_eq!(calls(&m, "rate_limited"), 1.0, "{m}");
    assert!(
        m.contains("deletion_cost_hook_requests_total{outcome=\"rate_limited\"} 1"),
        "{m}"
    );
    op.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_servers_certificate_is_not_counted_against_the_budget() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let dir = tempfile::tempdir().unwrap();
    let (server_ca, clients_ca) = (ca("hook CA"), ca("webhook clients"));
    // one call, then one every 100 s
    let hook = HookConfig {
        per_source: Some(Rate::new("test", 0.01, 1).unwrap()),
        webhook_clients: Some(webhook_clients(dir.path(), &clients_ca, &[])),
        ..HookConfig::default()
    };
    let (op, addr) = start(&fake, serving_files(dir.path(), &server_ca), hook).await;
    let apiserver = issue(
        &clients_ca,
        "kube-apiserver",
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let api = https(&server_ca, Some(&apiserver));
    let url = format!("https://{addr}/v1/admit-scale-in");
    for (uid, from, to) in [("u-1", 4, 3), ("u-2", 3, 2), ("u-3", 2, 1)] {
        let (status, body) = post(&api, &url, &review(uid, from, to)).await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body["response"]["warnings"].is_null(), "{body}");
    }
    // the same address without the certificate is counted
    let prescale = format!("https://{addr}/v1/prescale");
    let plain = https(&server_ca, None);
    let (first, _) = post(&plain, &prescale, &json!({})).await.unwrap();
    let (second, _) = post(&plain, &prescale, &json!({})).await.unwrap();
    assert_eq!((first, second), (401, 429));
    let m = op.metrics().await;
    assert_eq!(calls(&m, "rate_limited"), 0.0, "{m}");
    op.stop().await;
}
