//! The utilisation client against a real Prometheus (started per test on
//! 127.0.0.1 with backfilled data) and against fake endpoints for the
//! failures a real one does not produce on demand.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use deletion_cost::prometheus::{
    install_crypto_provider, FetchOptions, PromError, PrometheusClient,
};
use deletion_cost::signals::query::render_query;
use deletion_cost::signals::{Sample, SampleProblem};
use deletion_cost_testkit::prometheus::{openmetrics, unix_now, PrometheusServer};
use deletion_cost_testkit::{free_addr, read_request};
use tokio::io::AsyncWriteExt;

/// Upper bound for any single test step that talks to a server.
const STEP_LIMIT: Duration = Duration::from_secs(20);

fn client(url: &str) -> PrometheusClient {
    install_crypto_provider();
    PrometheusClient::new(url).unwrap()
}

fn opts() -> FetchOptions {
    FetchOptions {
        timeout: Duration::from_secs(10),
        max_age: Some(Duration::from_secs(600)),
        ..FetchOptions::default()
    }
}

async fn fetch(
    c: &PrometheusClient,
    query: &str,
    o: &FetchOptions,
) -> Result<deletion_cost::prometheus::Fetched, PromError> {
    tokio::time::timeout(STEP_LIMIT, c.fetch_utilization(query, "pod", o))
        .await
        .expect("fetch did not finish within the test's limit")
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn one_query_maps_values_to_pods() {
    let t = unix_now() - 30;
    let prom = PrometheusServer::start(&openmetrics(&[
        (r#"cpu{namespace="shop",app="web",pod="web-1"}"#, "0.2", t),
        (r#"cpu{namespace="shop",app="web",pod="web-2"}"#, "0.5", t),
        (r#"cpu{namespace="shop",app="web",pod="web-3"}"#, "0.9", t),
        (r#"cpu{namespace="shop",app="db",pod="db-1"}"#, "0.7", t),
        (r#"cpu{namespace="other",app="web",pod="web-9"}"#, "0.1", t),
        // An aggregate without the pod label: counted, not used.
        (
            r#"cpu{namespace="shop",app="web",instance="node-a"}"#,
            "1.6",
            t,
        ),
    ]));
    let c = client(&prom.url());
    let query = render_query(
        r#"cpu{namespace="$namespace",$selector}"#,
        "shop",
        &labels(&[("app", "web")]),
    )
    .unwrap();
    let before = prom.instant_queries_served();
    let got = fetch(&c, &query, &opts()).await.unwrap();
    assert_eq!(
        prom.instant_queries_served() - before,
        1,
        "one query for all pods"
    );

    let want: BTreeMap<String, Sample> = [
        ("web-1", Sample::Value(0.2)),
        ("web-2", Sample::Value(0.5)),
        ("web-3", Sample::Value(0.9)),
    ]
    .into_iter()
    .map(|(p, s)| (p.to_string(), s))
    .collect();
    assert_eq!(got.samples.by_pod, want, "log: {}", prom.log());
    assert_eq!(got.meta.series, 4);
    assert_eq!(got.meta.without_pod_label, 1);
    assert_eq!(got.meta.query, r#"cpu{namespace="shop",app="web"}"#);
    let evaluated = got.meta.evaluated_at.unwrap();
    assert!(
        evaluated >= t as f64,
        "evaluated at {evaluated}, sample at {t}"
    );

    // An empty selector leaves a trailing comma, which PromQL accepts.
    let query = render_query(
        r#"cpu{namespace="$namespace",$selector}"#,
        "other",
        &BTreeMap::new(),
    )
    .unwrap();
    let got = fetch(&c, &query, &opts()).await.unwrap();
    assert_eq!(got.samples.by_pod.keys().collect::<Vec<_>>(), ["web-9"]);

    // Another pod label.
    let got = tokio::time::timeout(
        STEP_LIMIT,
        c.fetch_utilization(r#"cpu{namespace="shop"}"#, "app", &opts()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        got.samples.by_pod["db"],
        Sample::Value(0.7),
        "{:?}",
        got.samples
    );
    assert_eq!(
        got.samples.by_pod["web"],
        Sample::Unusable(SampleProblem::Duplicate)
    );
}

#[tokio::test]
async fn no_series_is_an_empty_answer() {
    let t = unix_now() - 30;
    let prom = PrometheusServer::start(&openmetrics(&[(
        r#"cpu{namespace="shop",pod="web-1"}"#,
        "0.2",
        t,
    )]));
    let c = client(&prom.url());
    let got = fetch(&c, r#"cpu{namespace="nowhere"}"#, &opts())
        .await
        .unwrap();
    assert!(got.samples.by_pod.is_empty());
    assert_eq!(got.meta.series, 0);
    assert_eq!(got.meta.evaluated_at, None);
    let got = fetch(&c, "metric_that_does_not_exist", &opts())
        .await
        .unwrap();
    assert!(got.samples.by_pod.is_empty());
}

#[tokio::test]
async fn nan_and_infinite_values_are_unusable_samples() {
    let t = unix_now() - 30;
    let prom = PrometheusServer::start(&openmetrics(&[
        (r#"cpu{pod="a"}"#, "NaN", t),
        (r#"cpu{pod="b"}"#, "+Inf", t),
        (r#"cpu{pod="c"}"#, "-Inf", t),
        (r#"cpu{pod="d"}"#, "0.25", t),
    ]));
    let c = client(&prom.url());
    let got = fetch(&c, "cpu", &opts()).await.unwrap();
    let s = &got.samples.by_pod;
    assert_eq!(s["a"], Sample::Unusable(SampleProblem::NaN));
    assert_eq!(s["b"], Sample::Unusable(SampleProblem::Infinite));
    assert_eq!(s["c"], Sample::Unusable(SampleProblem::Infinite));
    assert_eq!(s["d"], Sample::Value(0.25));
    // NaN computed by the query itself (0/0) too.
    let got = fetch(&c, r#"cpu{pod="d"} * 0 / 0"#, &opts()).await.unwrap();
    assert_eq!(
        got.samples.by_pod["d"],
        Sample::Unusable(SampleProblem::NaN)
    );
}

#[tokio::test]
async fn several_series_for_one_pod_are_a_duplicate() {
    let t = unix_now() - 30;
    let prom = PrometheusServer::start(&openmetrics(&[
        (r#"cpu{pod="a",container="app"}"#, "0.2", t),
        (r#"cpu{pod="a",container="sidecar"}"#, "0.1", t),
        (r#"cpu{pod="b",container="app"}"#, "0.4", t),
    ]));
    let c = client(&prom.url());
    let got = fetch(&c, "cpu", &opts()).await.unwrap();
    assert_eq!(
        got.samples.by_pod["a"],
        Sample::Unusable(SampleProblem::Duplicate)
    );
    assert_eq!(got.samples.by_pod["b"], Sample::Value(0.4));
    // Aggregating by pod, as queries should, removes the duplicate.
    let got = fetch(&c, "sum by (pod) (cpu)", &opts()).await.unwrap();
    match got.samples.by_pod["a"] {
        Sample::Value(v) => assert!((v - 0.3).abs() < 1e-9, "{v}"),
        other => panic!("expected a value, got {other:?}"),
    }
}

#[tokio::test]
async fn answer_older_than_max_age_is_stale() {
    let now = unix_now();
    let old = now - 1200;
    let prom = PrometheusServer::start(&openmetrics(&[
        (r#"cpu{pod="a"}"#, "0.2", old),
        (r#"cpu{pod="a"}"#, "0.3", old + 60),
    ]));
    let c = client(&prom.url());
    // Evaluated 19 minutes ago: Prometheus answers with that time.
    let at = old + 60;
    let stale = FetchOptions {
        eval_at: Some(at),
        max_age: Some(Duration::from_secs(600)),
        now_secs: Some(now as f64),
        ..opts()
    };
    let got = fetch(&c, "cpu", &stale).await.unwrap();
    assert_eq!(
        got.samples.by_pod["a"],
        Sample::Unusable(SampleProblem::Stale)
    );
    assert_eq!(got.meta.evaluated_at, Some(at as f64));
    // The same answer is fresh enough for a 30-minute maxAge.
    let fresh = FetchOptions {
        max_age: Some(Duration::from_secs(1800)),
        ..stale
    };
    let got = fetch(&c, "cpu", &fresh).await.unwrap();
    assert_eq!(got.samples.by_pod["a"], Sample::Value(0.3));
    // At Prometheus's now the series is past the lookback window: missing.
    let got = fetch(&c, "cpu", &opts()).await.unwrap();
    assert!(got.samples.by_pod.is_empty(), "{:?}", got.samples);
}

#[tokio::test]
async fn bad_promql_surfaces_prometheus_message() {
    let prom = PrometheusServer::start(&openmetrics(&[]));
    let c = client(&prom.url());
    let err = fetch(&c, "sum(cpu", &opts()).await.unwrap_err();
    match &err {
        PromError::Api {
            status,
            error_type,
            message,
            query,
            ..
        } => {
            assert_eq!(*status, 400);
            assert_eq!(error_type, "bad_data");
            assert!(message.contains("parse error"), "{message}");
            assert_eq!(query, "sum(cpu");
        }
        other => panic!("expected an API error, got {other:?}"),
    }
    assert!(err.to_string().contains("parse error"), "{err}");
}

#[tokio::test]
async fn non_vector_results_are_rejected() {
    let t = unix_now() - 30;
    let prom = PrometheusServer::start(&openmetrics(&[(r#"cpu{pod="a"}"#, "0.2", t)]));
    let c = client(&prom.url());
    for (query, kind) in [
        ("cpu[5m]", "matrix"),
        ("scalar(cpu)", "scalar"),
        ("42", "scalar"),
        (r#""text""#, "string"),
    ] {
        match fetch(&c, query, &opts()).await {
            Err(PromError::UnexpectedResultType { result_type, .. }) => {
                assert_eq!(result_type, kind, "for {query}")
            }
            other => panic!("{query}: expected a result-type error, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn prometheus_down_is_unreachable() {
    let addr = free_addr(); // nothing listens: connection refused
    let c = client(&format!("http://{addr}"));
    let err = fetch(&c, "cpu", &opts()).await.unwrap_err();
    assert!(
        matches!(&err, PromError::Unreachable { .. }),
        "expected unreachable, got {err:?}"
    );
    assert!(
        err.to_string().to_lowercase().contains("refused"),
        "message should say why: {err}"
    );
}

/// Accepts connections and answers each with a canned HTTP response, or
/// never answers. Aborted on drop.
struct FakeServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

/// What a [`FakeServer`] sends.
enum Reply {
    /// Accept, read nothing, send nothing, keep the connection open.
    Silence,
    /// Status line (e.g. `502 Bad Gateway`), content type, body.
    Http(&'static str, &'static str, &'static str),
    /// Raw bytes, then close.
    Raw(&'static str),
}

impl FakeServer {
    async fn start(reply: Reply) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let response = match reply {
            Reply::Silence => None,
            Reply::Http(status, content_type, body) => Some(format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )),
            Reply::Raw(raw) => Some(raw.to_string()),
        };
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut sock, _)) = listener.accept().await {
                match &response {
                    Some(r) => {
                        read_request(&mut sock).await;
                        let _ = sock.write_all(r.as_bytes()).await;
                        let _ = sock.shutdown().await;
                    }
                    None => held.push(sock),
                }
            }
        });
        Self { addr, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn slow_answer_beyond_the_timeout() {
    let server = FakeServer::start(Reply::Silence).await;
    let c = client(&server.url());
    let o = FetchOptions {
        timeout: Duration::from_millis(300),
        ..opts()
    };
    let err = fetch(&c, "cpu", &o).await.unwrap_err();
    match &err {
        PromError::Timeout { after, .. } => assert_eq!(*after, Duration::from_millis(300)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        err.to_string().contains("did not answer within 300ms"),
        "{err}"
    );
}

#[tokio::test]
async fn proxy_error_status_is_an_http_error() {
    let server = FakeServer::start(Reply::Http(
        "502 Bad Gateway",
        "text/html",
        "<h1>bad gateway</h1>",
    ))
    .await;
    let c = client(&server.url());
    match fetch(&c, "cpu", &opts()).await {
        Err(PromError::HttpStatus { status, body, .. }) => {
            assert_eq!(status, 502);
            assert!(body.contains("bad gateway"), "{body}");
        }
        other => panic!("expected an HTTP status error, got {other:?}"),
    }
}

#[tokio::test]
async fn invalid_answers_are_reported() {
    for (reply, want) in [
        (
            Reply::Http("200 OK", "application/json", r#"{"status":1}"#),
            "status: invalid type: integer `1`, expected a string",
        ),
        (
            Reply::Http("200 OK", "text/plain", "all good"),
            "$: not JSON",
        ),
        (
            Reply::Http(
                "200 OK",
                "application/json",
                r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1,"lots"]}]}}"#,
            ),
            "data.result[0].value[1]: invalid value: string \"lots\"",
        ),
        (
            Reply::Raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"status\""),
            "reading the body failed",
        ),
    ] {
        let server = FakeServer::start(reply).await;
        let c = client(&server.url());
        match fetch(&c, "cpu", &opts()).await {
            Err(PromError::InvalidBody { problem, .. }) => {
                assert!(problem.starts_with(want), "want {want:?}, got {problem:?}")
            }
            other => panic!("expected an invalid-body error ({want}), got {other:?}"),
        }
    }
}
