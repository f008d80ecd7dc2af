//! A recording proxy between an operator process and the API server: the
//! operator's kubeconfig points here (loopback, plain HTTP) and the proxy
//! forwards every request unchanged, authenticated with the operator's
//! ServiceAccount token. What it records is what the RBAC must grant (and
//! nothing more), and which User-Agent the operator sends.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body as AxumBody;
use axum::extract::{Request, State};
use axum::response::Response;
use futures::StreamExt;
use http_body_util::BodyExt;
use kube::config::AuthInfo;

/// One request an operator made.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Which operator process (its identity).
    pub operator: String,
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// The query string.
    pub query: String,
    /// The API server's answer.
    pub status: u16,
    /// The User-Agent header as sent.
    pub user_agent: Option<String>,
    /// When the request arrived.
    pub at: std::time::Instant,
    /// The server's message when it refused the request.
    pub message: String,
}

impl Entry {
    /// `watch`, `list`, `get`, `create`, `update`, `patch`, `delete`, ...
    /// as the API server's authorizer names the request's verb.
    pub fn verb(&self) -> &'static str {
        let watch = self
            .query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1");
        match self.method.as_str() {
            "GET" if watch => "watch",
            "GET" if crate::rbac::is_collection(&self.path) => "list",
            "GET" => "get",
            "POST" => "create",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" if crate::rbac::is_collection(&self.path) => "deletecollection",
            "DELETE" => "delete",
            _ => "other",
        }
    }
}

/// Every request recorded so far, shared by all proxies of the run.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<Entry>>>);

impl Recorder {
    /// A copy of the entries so far.
    pub fn entries(&self) -> Vec<Entry> {
        self.0.lock().map(|e| e.clone()).unwrap_or_default()
    }

    fn push(&self, e: Entry) {
        if let Ok(mut v) = self.0.lock() {
            v.push(e);
        }
    }
}

#[derive(Clone)]
struct Forward {
    client: kube::Client,
    recorder: Recorder,
    operator: String,
    hold: Arc<Hold>,
}

/// Holds pod writes on their way to the server (a write in flight while
/// its pod is replaced), and pod watch events on their way to the operator
/// (a cache that lags the server).
#[derive(Default)]
struct Hold {
    /// The namespace whose pod writes are held, while holding.
    on: tokio::sync::watch::Sender<Option<String>>,
    held: std::sync::atomic::AtomicUsize,
    /// While true, the frames of pod watch answers wait here, in order.
    pod_watch: tokio::sync::watch::Sender<bool>,
}

/// A running proxy; stops when dropped.
pub struct Proxy {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    task: tokio::task::JoinHandle<()>,
    hold: Arc<Hold>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// While set, PATCH requests on pods of `namespace` wait here until it
    /// is cleared (`None`).
    pub fn hold_pod_writes(&self, namespace: Option<&str>) {
        self.hold.on.send_replace(namespace.map(str::to_string));
    }

    /// While `true`, the pod watch events the server sends wait in the
    /// proxy (in order): the operator's pod cache sees no pod change. They
    /// go on when it is `false` again. Lists are never held.
    pub fn hold_pod_watch(&self, on: bool) {
        self.hold.pod_watch.send_replace(on);
    }

    /// How many pod writes were held so far.
    pub fn held(&self) -> usize {
        self.hold.held.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Starts a proxy forwarding to the cluster of `config` with `token`.
    pub async fn start(
        config: &kube::Config,
        token: &str,
        recorder: Recorder,
        operator: &str,
    ) -> Proxy {
        let mut config = config.clone();
        config.auth_info = serde_json::from_value::<AuthInfo>(serde_json::json!({"token": token}))
            .unwrap_or_else(|e| panic!("auth info: {e}"));
        // the operator sees the server's 429s and does its own retrying
        config.default_retry = false;
        config.headers.clear();
        let client = kube::Client::try_from(config).unwrap_or_else(|e| panic!("proxy client: {e}"));
        let hold = Arc::new(Hold::default());
        let state = Forward {
            client,
            recorder,
            operator: operator.into(),
            hold: hold.clone(),
        };
        let app = axum::Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap_or_else(|e| panic!("proxy listener: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("proxy address: {e}"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy {
            url: format!("http://{addr}"),
            task,
            hold,
        }
    }
}

async fn forward(State(fw): State<Forward>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let at = std::time::Instant::now();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or_default().to_string();
    let pod_watch = parts.method == http::Method::GET
        && path.ends_with("/pods")
        && query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1");
    let user_agent = parts
        .headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return plain(502, format!("proxy: reading the request: {e}")),
    };
    let mut out = http::Request::builder().method(parts.method.clone()).uri(
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/"),
    );
    for (k, v) in &parts.headers {
        if k != http::header::HOST && k != http::header::AUTHORIZATION {
            out = out.header(k, v);
        }
    }
    let out = match out.body(kube::client::Body::from(bytes.to_vec())) {
        Ok(r) => r,
        Err(e) => return plain(502, format!("proxy: building the request: {e}")),
    };
    let held_ns = fw.hold.on.borrow().clone();
    let held = held_ns.is_some_and(|ns| path.contains(&format!("/namespaces/{ns}/pods/")));
    if parts.method == http::Method::PATCH && held {
        fw.hold
            .held
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut on = fw.hold.on.subscribe();
        let _ = on.wait_for(Option::is_none).await;
    }
    let answer = fw.client.send(out).await;
    let status = answer.as_ref().map(|r| r.status().as_u16()).unwrap_or(502);
    // an error answer is small: keep its message, then pass it on
    let (answer, message) = match answer {
        Ok(resp) if status >= 400 => {
            let (p, body) = resp.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let message = String::from_utf8_lossy(&bytes).into_owned();
            (
                Ok(http::Response::from_parts(
                    p,
                    kube::client::Body::from(bytes.to_vec()),
                )),
                message,
            )
        }
        other => (other, String::new()),
    };
    fw.recorder.push(Entry {
        operator: fw.operator.clone(),
        method: parts.method.to_string(),
        path,
        query,
        status,
        user_agent,
        at,
        message,
    });
    match answer {
        Ok(resp) if pod_watch => {
            let (parts, body) = resp.into_parts();
            let held = fw.hold.pod_watch.subscribe();
            let frames = http_body_util::BodyStream::new(body).then(move |frame| {
                let mut held = held.clone();
                async move {
                    let _ = held.wait_for(|h| !h).await;
                    frame
                }
            });
            let body = http_body_util::StreamBody::new(Box::pin(frames));
            Response::from_parts(parts, AxumBody::new(body))
        }
        Ok(resp) => {
            let (parts, body) = resp.into_parts();
            Response::from_parts(parts, AxumBody::new(body))
        }
        Err(e) => plain(502, format!("proxy: {e}")),
    }
}

fn plain(code: u16, text: String) -> Response {
    Response::builder()
        .status(code)
        .body(AxumBody::from(text))
        .unwrap_or_default()
}
