//! An in-process fake Kubernetes API server for multi-step tests.
//!
//! It speaks enough of the real HTTP API (list/watch with resourceVersions,
//! create/update/patch/delete, status and scale subresources, finalizers,
//! `Status` errors, token and access reviews) for `kube::Client`, `kube::Api`
//! and `kube::runtime` to run against it unchanged. Tests seed objects, inject
//! faults (429/5xx/delays/watch drops/410) and assert on the recorded requests.
//!
//! Served: core/v1 pods, nodes, events; apps/v1 replicasets and deployments (with
//! `scale`); admissionregistration.k8s.io/v1 validatingwebhookconfigurations;
//! coordination.k8s.io/v1 leases; events.k8s.io/v1 events;
//! deletioncost.dev/v1alpha1 deletioncostpolicies; `status` on pods, nodes,
//! replicasets, deployments and policies; create-only token and access reviews.
//!
//! Differences from a real server, on purpose:
//! - one global resourceVersion counter; `expire_history` bumps it (a real
//!   compaction does not) so that a fresh list is resumable;
//! - `limit`/`continue` pages are offsets into current state, not a snapshot;
//! - strategic merge patches are plain merge patches (lists are replaced, not
//!   merged by key); server-side apply merges the given fields, tracks ownership
//!   per leaf field (lists are leaves) for conflicts (409 unless `force`), and
//!   removes the fields a manager stopped applying that no other manager owns,
//!   within the part it writes (the object, or its `status` subresource); one
//!   ownership set per manager name, whatever the operation; `managedFields`
//!   is not returned;
//! - no defaulting, validation, admission, garbage collection or kubelet: pods
//!   without finalizers disappear at once on delete; namespaces are not objects;
//! - no discovery beyond `/version`; no protobuf, no table output, no `watchList`
//!   paging, no `resourceVersionMatch` semantics (lists are always current).

mod resources;
mod server;
mod store;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use server::parse_query;
pub use store::{ApiError, ErrorCause, ErrorDetails};

use resources::RESOURCES;
use store::Store;

/// The Kubernetes verb of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `GET` of one object.
    Get,
    /// `GET` of a collection.
    List,
    /// `GET` with `watch=true`.
    Watch,
    /// `POST`.
    Create,
    /// `PUT`.
    Update,
    /// `PATCH`.
    Patch,
    /// `DELETE` of one object.
    Delete,
    /// `DELETE` of a collection.
    DeleteCollection,
}

impl Verb {
    /// Whether the verb changes state.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    }
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Arrival time on tokio's clock (follows paused/advanced test time).
    pub at: tokio::time::Instant,
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// Raw query string (empty when none).
    pub query: String,
    /// `Content-Type` header.
    pub content_type: Option<String>,
    /// Request body.
    pub body: Vec<u8>,
    /// Verb, when the path names a known resource.
    pub verb: Option<Verb>,
    /// Resource, with the subresource when there is one (`pods`, `pods/status`).
    pub resource: Option<String>,
    /// Namespace from the path.
    pub namespace: Option<String>,
    /// Object name from the path.
    pub name: Option<String>,
    /// Response status code (0 while the request is still being handled).
    pub status: u16,
    /// Whether an injected fault produced the response.
    pub injected: bool,
    /// Who sent it, as the client names itself in the [`USER_HEADER`]
    /// header: the tests' stand-in for the user of a real audit log.
    pub user: Option<String>,
}

/// The request header a test client names itself in (see
/// [`RecordedRequest::user`]).
pub const USER_HEADER: &str = "x-fake-api-user";

impl RecordedRequest {
    /// The body parsed as JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// Whether the request was a write.
    pub fn is_write(&self) -> bool {
        self.verb.is_some_and(Verb::is_write)
    }

    /// A decoded query parameter.
    pub fn query_param(&self, key: &str) -> Option<String> {
        server::parse_query(&self.query)
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

/// What an injected fault does to a matching request.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction {
    /// Answer with this status code as a `Status` error, touching nothing.
    Respond {
        /// HTTP status code.
        code: u16,
        /// `Retry-After` header and `details.retryAfterSeconds`.
        retry_after: Option<u64>,
    },
    /// Wait this long (tokio time), then handle the request normally.
    Delay(Duration),
}

/// A fault rule: requests matching `verb` and `resource` get `action`, `count` times.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// Only requests with this verb (any when `None`).
    pub verb: Option<Verb>,
    /// Only requests to this resource, e.g. `pods` or `pods/status` (any when `None`).
    pub resource: Option<String>,
    /// What happens.
    pub action: FaultAction,
    /// How many requests it applies to (`None`: until cleared).
    pub count: Option<usize>,
}

impl Fault {
    /// The next matching request is answered with `code` (reason as the real server).
    pub fn status(code: u16) -> Self {
        Self {
            verb: None,
            resource: None,
            action: FaultAction::Respond {
                code,
                retry_after: None,
            },
            count: Some(1),
        }
    }

    /// The next matching request is delayed by `delay` before being handled.
    pub fn delay(delay: Duration) -> Self {
        Self {
            verb: None,
            resource: None,
            action: FaultAction::Delay(delay),
            count: Some(1),
        }
    }

    /// Restricts the fault to one verb and resource (`pods`, `pods/status`, ...).
    pub fn on(mut self, verb: Verb, resource: &str) -> Self {
        self.verb = Some(verb);
        self.resource = Some(resource.to_string());
        self
    }

    /// Restricts the fault to one verb on any resource.
    pub fn verb(mut self, verb: Verb) -> Self {
        self.verb = Some(verb);
        self
    }

    /// Restricts the fault to one resource, any verb.
    pub fn resource(mut self, resource: &str) -> Self {
        self.resource = Some(resource.to_string());
        self
    }

    /// Applies to the next `n` matching requests.
    pub fn times(mut self, n: usize) -> Self {
        self.count = Some(n);
        self
    }

    /// Applies to every matching request until [`FakeApi::clear_faults`].
    pub fn always(mut self) -> Self {
        self.count = None;
        self
    }

    /// Adds `Retry-After: secs` (and `details.retryAfterSeconds`) to a status fault.
    pub fn retry_after(mut self, secs: u64) -> Self {
        if let FaultAction::Respond { retry_after, .. } = &mut self.action {
            *retry_after = Some(secs);
        }
        self
    }

    fn matches(&self, verb: Option<Verb>, resource: Option<&str>) -> bool {
        self.count != Some(0)
            && self.verb.is_none_or(|v| Some(v) == verb)
            && self.resource.as_deref().is_none_or(|r| Some(r) == resource)
    }
}

/// Who a bearer token belongs to, for TokenReview answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenIdentity {
    /// `status.user.username`.
    pub username: String,
    /// `status.user.uid`.
    pub uid: String,
    /// `status.user.groups`.
    pub groups: Vec<String>,
    /// Audiences the token is valid for (empty: the API server's default audience only).
    pub audiences: Vec<String>,
}

/// Decides SubjectAccessReviews: gets the review's `spec`, returns allowed.
pub type AccessPolicy = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

pub(crate) struct Shared {
    store: Mutex<Store>,
    rv_tx: watch::Sender<u64>,
    close_tx: watch::Sender<u64>,
    shutdown_tx: watch::Sender<bool>,
    faults: Mutex<Vec<Fault>>,
    requests: Mutex<Vec<(u64, RecordedRequest)>>,
    request_seq: Mutex<u64>,
    tokens: Mutex<HashMap<String, TokenIdentity>>,
    access: Mutex<Option<AccessPolicy>>,
    bookmark_interval: Mutex<Option<Duration>>,
    open_watches: Mutex<usize>,
    /// The `/version` body; `None` answers 404.
    pub(crate) version: Mutex<Option<Value>>,
}

/// Locks a mutex, ignoring poisoning (a panicking test thread must not hide state).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Runs a store mutation, then wakes the watches.
    fn write<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let mut store = lock(&self.store);
        let out = f(&mut store);
        let rv = store.rv();
        drop(store);
        self.rv_tx.send_replace(rv);
        out
    }
}

/// A running fake API server; stops when dropped.
pub struct FakeApi {
    shared: Arc<Shared>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl FakeApi {
    /// Starts the server on 127.0.0.1 with a free port.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start() -> FakeApi {
        match Self::try_start().await {
            Ok(fake) => fake,
            Err(e) => panic!("cannot bind the fake API server on 127.0.0.1: {e}"),
        }
    }

    /// Starts the server on 127.0.0.1 with a free port.
    pub async fn try_start() -> std::io::Result<FakeApi> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::default()),
            rv_tx: watch::channel(1).0,
            close_tx: watch::channel(0).0,
            shutdown_tx: watch::channel(false).0,
            faults: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
            request_seq: Mutex::new(0),
            tokens: Mutex::new(HashMap::new()),
            access: Mutex::new(None),
            bookmark_interval: Mutex::new(None),
            open_watches: Mutex::new(0),
            version: Mutex::new(Some(serde_json::json!({
                "major": "1", "minor": "33", "gitVersion": "v1.33.0-fake", "platform": "linux/amd64"
            }))),
        });
        let app = server::router(shared.clone());
        let mut shutdown = shared.shutdown_tx.subscribe();
        let task = tokio::spawn(async move {
            let signal = async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
            };
            // Graceful: open connections close once in-flight requests (and the
            // watches, which end on the same signal) are done.
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(signal)
                .await;
        });
        Ok(FakeApi { shared, addr, task })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `kube::Config` for this server: plain HTTP, no auth, namespace `default`,
    /// otherwise kube's defaults. Note `default_retry` is on, so kube's client itself
    /// retries 429/503/504 (honouring `Retry-After`) before the caller sees an error;
    /// turn it off to see every fault. Under paused tokio time, also clear the
    /// read/write/connect timeouts: auto-advance can fire them while a loopback
    /// request is in flight.
    ///
    /// # Panics
    /// When the server URL does not parse as a URI (never expected).
    pub fn config(&self) -> kube::Config {
        match self.url().parse::<axum::http::Uri>() {
            Ok(uri) => kube::Config::new(uri),
            Err(e) => panic!("fake API server URL {} does not parse: {e}", self.url()),
        }
    }

    /// A `kube::Client` built from [`FakeApi::config`]. Installs the ring rustls
    /// provider if none is installed yet (kube builds its TLS stack even for HTTP).
    ///
    /// # Panics
    /// When kube cannot build a client for a plain-HTTP URL (never expected).
    pub fn client(&self) -> kube::Client {
        client_for(self.config())
    }

    // ---- state ----

    /// Creates or replaces a typed object (status included), like a controller
    /// outside the operator would; bumps the resourceVersion and notifies watches.
    pub fn insert<K: Serialize>(&self, obj: &K) -> Result<Value, ApiError> {
        let value = serde_json::to_value(obj)
            .map_err(|e| ApiError::bad_request(format!("object does not serialize: {e}")))?;
        self.apply_json(value)
    }

    /// Creates or replaces an object given as JSON with `apiVersion` and `kind`.
    pub fn apply_json(&self, obj: Value) -> Result<Value, ApiError> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let res = resources::by_kind(api_version, kind).ok_or_else(|| {
            ApiError::bad_request(format!("the fake does not serve {api_version}/{kind}"))
        })?;
        self.shared.write(|s| s.insert(res, obj))
    }

    /// One object by kind (`Pod`) or plural (`pods`); `ns` is ignored for
    /// cluster-scoped kinds. `Event` means core/v1 events.
    pub fn get_json(&self, kind: &str, ns: &str, name: &str) -> Option<Value> {
        let res = resolve_kind(kind)?;
        let ns = if RESOURCES[res].namespaced { ns } else { "" };
        lock(&self.shared.store).get(res, ns, name).ok()
    }

    /// All objects of a kind, in one namespace or all.
    pub fn list_json(&self, kind: &str, ns: Option<&str>) -> Vec<Value> {
        let Some(res) = resolve_kind(kind) else {
            return Vec::new();
        };
        lock(&self.shared.store).list(res, ns, &store::Selectors::default())
    }

    /// Deletes an object as a client would (finalizers delay the removal).
    pub fn delete_json(&self, kind: &str, ns: &str, name: &str) -> Result<Value, ApiError> {
        let res = resolve_kind(kind)
            .ok_or_else(|| ApiError::bad_request(format!("the fake does not serve {kind}")))?;
        let ns = if RESOURCES[res].namespaced { ns } else { "" };
        self.shared.write(|s| s.delete(res, ns, name, None, false))
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).rv()
    }

    // ---- faults ----

    /// Adds a fault rule; rules are checked in insertion order.
    pub fn inject(&self, fault: Fault) {
        lock(&self.shared.faults).push(fault);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// How many more requests the fault rules will hit (`None`: an unlimited rule is active).
    pub fn faults_left(&self) -> Option<usize> {
        lock(&self.shared.faults)
            .iter()
            .try_fold(0, |acc, f| f.count.map(|c| acc + c))
    }

    /// Ends every open watch stream (clients see a clean end of stream and resume).
    pub fn close_watches(&self) {
        self.shared.close_tx.send_modify(|epoch| *epoch += 1);
    }

    /// Drops the watch history: watches resuming from any earlier resourceVersion get
    /// `410 Gone` (an ERROR event, as the real server sends). Bumps the resourceVersion
    /// so a fresh list can be resumed. Open watches keep streaming.
    pub fn expire_history(&self) {
        self.shared.write(Store::expire_history);
    }

    /// Keeps only the last `limit` changes (older resumes and lagging watches get 410).
    pub fn set_history_limit(&self, limit: usize) {
        self.shared.write(|s| s.set_history_limit(limit));
    }

    /// Sends a BOOKMARK on watches that allow them every `interval` (tokio time);
    /// `None` (the default) sends none except after the initial events.
    pub fn set_bookmark_interval(&self, interval: Option<Duration>) {
        *lock(&self.shared.bookmark_interval) = interval;
    }

    /// What `/version` answers (`None`: 404, as a server that hides it);
    /// the default reports 1.33.
    pub fn set_version(&self, body: Option<Value>) {
        *lock(&self.shared.version) = body;
    }

    /// Number of watch streams currently open.
    pub fn open_watches(&self) -> usize {
        *lock(&self.shared.open_watches)
    }

    // ---- authentication and authorization ----

    /// TokenReviews for `token` answer authenticated as `identity`; other tokens fail.
    pub fn add_token(&self, token: &str, identity: TokenIdentity) {
        lock(&self.shared.tokens).insert(token.to_string(), identity);
    }

    /// SubjectAccessReviews are allowed when `policy(spec)` is true (default: denied).
    pub fn set_access_policy(&self, policy: impl Fn(&Value) -> bool + Send + Sync + 'static) {
        *lock(&self.shared.access) = Some(Arc::new(policy));
    }

    // ---- recording ----

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests)
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Write requests (POST/PUT/PATCH/DELETE), in arrival order.
    pub fn writes(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.is_write())
            .collect()
    }

    /// Write requests to one resource (`pods`, `pods/status`, ...).
    pub fn writes_to(&self, resource: &str) -> Vec<RecordedRequest> {
        self.writes()
            .into_iter()
            .filter(|r| r.resource.as_deref() == Some(resource))
            .collect()
    }

    /// Requests with one verb to one resource.
    pub fn requests_for(&self, verb: Verb, resource: &str) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.verb == Some(verb) && r.resource.as_deref() == Some(resource))
            .collect()
    }

    /// The most writes (to `resource`, or all) that arrived within any span of
    /// `window` on tokio's clock: the number a QPS limit is checked against.
    pub fn max_writes_in_window(&self, resource: Option<&str>, window: Duration) -> usize {
        let times: Vec<_> = self
            .writes()
            .into_iter()
            .filter(|r| resource.is_none_or(|res| r.resource.as_deref() == Some(res)))
            .map(|r| r.at)
            .collect();
        let mut best = 0;
        let mut start = 0;
        for end in 0..times.len() {
            while times[end].duration_since(times[start]) >= window {
                start += 1;
            }
            best = best.max(end - start + 1);
        }
        best
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        lock(&self.shared.requests).clear();
    }
}

/// Builds a `kube::Client` from a config (for [`FakeApi::config`] with changes),
/// installing the ring rustls provider if none is installed yet.
///
/// # Panics
/// When kube cannot build the client (never expected for plain HTTP).
pub fn client_for(config: kube::Config) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match kube::Client::try_from(config) {
        Ok(client) => client,
        Err(e) => panic!("cannot build a kube client for the fake API server: {e}"),
    }
}

/// Resource index for a kind (`Pod`) or plural (`pods`).
fn resolve_kind(kind: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|r| r.kind == kind)
        .or_else(|| resources::by_plural(None, kind))
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        // Ends watches and delayed requests, and asks connections to close.
        self.shared.shutdown_tx.send_replace(true);
        // Stops accepting at once; connection tasks finish on the signal above.
        self.task.abort();
    }
}
