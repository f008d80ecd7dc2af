//! Every client the binary builds names itself: the kube client (API server
//! audit logs, API Priority and Fairness), the Prometheus client and the
//! `prescale` client each send `User-Agent: deletion-cost/<version>`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{header, HeaderMap};
use axum::routing::any;
use axum::Router;
use deletion_cost::cli::prescale::{PrescaleArgs, PrescaleOutput};
use deletion_cost::prometheus::{install_crypto_provider, FetchOptions, PrometheusClient};

const WANT: &str = concat!("deletion-cost/", env!("CARGO_PKG_VERSION"));

/// A loopback HTTP server that records the `User-Agent` values of each
/// request and answers every path with an empty JSON object.
async fn listener() -> (String, Arc<Mutex<Vec<Vec<String>>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = Router::new().fallback(any(move |headers: HeaderMap| {
        let log = log.clone();
        async move {
            let agents = headers
                .get_all(header::USER_AGENT)
                .iter()
                .map(|v| v.to_str().unwrap_or("<not text>").to_owned())
                .collect();
            log.lock().unwrap().push(agents);
            ([(header::CONTENT_TYPE, "application/json")], "{}")
        }
    }));
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", socket.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(socket, app).await;
    });
    (url, seen)
}

fn assert_one_agent_each(seen: &Mutex<Vec<Vec<String>>>) {
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty(), "no request arrived");
    for agents in seen {
        assert_eq!(agents, [WANT]);
    }
}

#[test]
fn the_version_is_the_crate_version() {
    assert_eq!(deletion_cost::USER_AGENT, WANT);
}

#[tokio::test]
async fn the_kube_client_sends_it() {
    install_crypto_provider();
    let (url, seen) = listener().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\n\
             clusters: [{{name: test, cluster: {{server: \"{url}\"}}}}]\n\
             users: [{{name: test, user: {{}}}}]\n\
             contexts: [{{name: test, context: {{cluster: test, user: test}}}}]\n"
        ),
    )
    .unwrap();
    let client = deletion_cost::operator::client(Some(&kubeconfig))
        .await
        .unwrap();
    // only the request matters, not whether "{}" decodes as a version
    let _ = client.apiserver_version().await;
    assert_one_agent_each(&seen);
}

#[tokio::test]
async fn the_prometheus_client_sends_it() {
    install_crypto_provider();
    let (url, seen) = listener().await;
    let prometheus = PrometheusClient::new(&url).unwrap();
    let opts = FetchOptions {
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    // "{}" is no query answer: the error is expected, the header is checked
    let _ = prometheus.fetch_utilization("up", "pod", &opts).await;
    assert_one_agent_each(&seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prescale_client_sends_it() {
    let (url, seen) = listener().await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let args = PrescaleArgs {
        namespace: "shop".into(),
        deployment: Some("web".into()),
        replicaset: None,
        replicas: 2,
        scale: false,
        url,
        token_file: token,
        ca_file: None,
        insecure_http: true,
        timeout: 5,
        output: PrescaleOutput::Json,
    };
    // run() blocks on its own runtime
    let _ = tokio::task::spawn_blocking(move || deletion_cost::cli::prescale::run(args))
        .await
        .unwrap();
    assert_one_agent_each(&seen);
}
