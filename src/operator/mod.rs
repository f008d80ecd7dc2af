//! The operator: kube-runtime wiring of the watches, the planner and the
//! patcher. Reflectors keep trimmed pods, nodes and ReplicaSets; each policy
//! reconcile builds a snapshot from them, plans (pure), hands the patches to
//! the rate-limited patcher and writes the status. Only the lease holder writes.

pub mod caches;
pub mod leadership;
pub mod lease;
pub mod memory_trim;
pub mod page;
pub mod round;
pub mod shutdown;
pub mod status;
pub mod sync;

use caches::{CachedPod, Caches};
pub use round::{wins_over, PolicyRound, Rounds};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Error as FinalizerError, Event as FinalizerEvent};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{predicates, watcher, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;

use crate::apply::{PatchRequest, Patcher, PodKey, PolicyKey, Priority, SubmitError};
use crate::comparator::{choose_gates, FeatureGates, KubeVersion, POD_DELETION_COST};
use crate::metrics::Metrics;
use crate::plan::{ResolvedPolicy, POLICY_ANNOTATION};
use crate::policy::{DeletionCostPolicy, DeletionCostPolicyStatus};
use crate::prometheus::PrometheusClient;

/// Finalizer that removes a policy's costs before the policy goes away.
pub const FINALIZER: &str = "deletioncost.dev/cleanup";
pub use crate::MANAGER;

/// Errors of the operator shell.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// Building the Kubernetes client failed.
    #[error("kubernetes client: {0}")]
    Client(String),
    /// An API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The finalizer helper failed (adding or removing it, or the apply or
    /// cleanup it wraps).
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<ControllerError>>),
    /// The patcher refused a batch (queue full, shut down).
    #[error("patch queue: {0}")]
    Submit(#[from] SubmitError),
    /// The planner failed (a bug: it panicked on the blocking pool).
    #[error(transparent)]
    Round(#[from] round::RoundError),
    /// A flag has a bad value.
    #[error("{0}")]
    Config(String),
    /// The metrics/health listener failed.
    #[error("metrics server on {addr}: {message}")]
    Serve {
        /// Listen address.
        addr: SocketAddr,
        /// What failed.
        message: String,
    },
    /// Leader election failed.
    #[error("leader election: {0}")]
    Lease(String),
    /// Removing a deleted policy's costs did not finish; retried.
    #[error("cleanup of {policy}: {remaining} pods still carry its cost")]
    CleanupIncomplete {
        /// namespace/name.
        policy: String,
        /// Pods not yet cleaned.
        remaining: usize,
    },
}

impl From<crate::hook::ServeError> for ControllerError {
    fn from(e: crate::hook::ServeError) -> Self {
        match e {
            crate::hook::ServeError::Bind { addr, message } => ControllerError::Serve {
                addr,
                message: format!("hook listener: {message}"),
            },
            crate::hook::ServeError::Tls(message) => ControllerError::Config(message),
        }
    }
}

impl ControllerError {
    /// Label for the reconcile-errors metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ControllerError::Client(_) => "client",
            ControllerError::Kube(_) => "api",
            ControllerError::Finalizer(e) => match &**e {
                FinalizerError::ApplyFailed(inner) | FinalizerError::CleanupFailed(inner) => {
                    inner.metric_label()
                }
                FinalizerError::AddFinalizer(_) | FinalizerError::RemoveFinalizer(_) => {
                    "finalizer_api"
                }
                _ => "finalizer",
            },
            ControllerError::Submit(_) => "queue",
            ControllerError::Round(_) => "planning",
            ControllerError::Config(_) => "config",
            ControllerError::Serve { .. } => "serve",
            ControllerError::Lease(_) => "lease",
            ControllerError::CleanupIncomplete { .. } => "cleanup",
        }
    }
}

/// Everything `deletion-cost run` is told.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Watch and write only this namespace (Role instead of ClusterRole).
    pub namespace: Option<String>,
    /// Prometheus for utilisation signals.
    pub prometheus_url: Option<String>,
    /// Per-query Prometheus timeout.
    pub prometheus_timeout: Duration,
    /// `/metrics`, `/healthz`, `/readyz` listener.
    pub metrics_addr: SocketAddr,
    /// Operator-wide write rate.
    pub qps: f64,
    /// Operator-wide burst.
    pub burst: u32,
    /// Compute and report, write nothing.
    pub dry_run: bool,
    /// Kubeconfig file (in-cluster or the default kubeconfig when unset).
    pub kubeconfig: Option<PathBuf>,
    /// Take part in leader election (off: always leader).
    pub leader_election: bool,
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace (default: the pod's namespace, or `default`).
    pub lease_namespace: Option<String>,
    /// This replica's identity (pod name).
    pub identity: String,
    /// `--kubernetes-version`: its gate defaults apply instead of those of
    /// the API server's version.
    pub kubernetes_version: Option<KubeVersion>,
    /// `--feature-gates`: overrides on top of the version's defaults.
    pub feature_gates: Option<String>,
    /// How long SIGTERM waits for in-flight writes.
    pub shutdown_grace: Duration,
    /// Quiet time before a triggered reconcile runs.
    pub debounce: Duration,
    /// Pre-scale-down hook listener (`--hook-addr`); no hook when unset.
    pub hook_addr: Option<SocketAddr>,
    /// Pre-scale-down hook settings.
    pub hook: crate::hook::HookConfig,
}

impl RunConfig {
    /// Namespace of the leader-election Lease: the flag, else the pod's
    /// namespace, else `default`.
    pub fn lease_namespace(&self) -> String {
        self.lease_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into())
    }
}

/// Shared by every reconcile.
pub struct Context {
    pub(crate) client: Client,
    pub(crate) config: RunConfig,
    /// The planning rounds (caches, policies' state, leadership, patcher),
    /// shared with the hook and the policy pages.
    pub(crate) rounds: Arc<Rounds>,
    pub(crate) recorder: Recorder,
    /// Which caches have synced (plans over half-listed pods would be wrong).
    pub(crate) health: Arc<sync::WatchHealth>,
    /// Consecutive failed reconciles per policy (retry backoff).
    failures: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    /// Policy pages built at once (one: each plans a whole namespace).
    pub(crate) pages: tokio::sync::Semaphore,
}

impl Context {
    /// Whether this replica holds the lease (and may write).
    pub fn is_leader(&self) -> bool {
        self.rounds.leadership.is_leader()
    }

    /// The patcher of the current leadership term.
    pub fn patcher(&self) -> Option<Patcher> {
        self.rounds.leadership.patcher()
    }
}

fn now_rfc3339() -> String {
    Timestamp::now().to_string()
}

/// Builds the client. kube's own retry layer is off: every write must go
/// through our limiter, retries included.
pub async fn client(kubeconfig: Option<&PathBuf>) -> Result<Client, ControllerError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| ControllerError::Client(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| ControllerError::Client(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| ControllerError::Client(e.to_string()))?,
    };
    config.default_retry = false;
    // kube sends no User-Agent of its own: name us in audit logs and APF.
    config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_static(crate::USER_AGENT),
    ));
    Client::try_from(config).map_err(|e| ControllerError::Client(e.to_string()))
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the operator until SIGTERM/SIGINT.
pub async fn run(config: RunConfig) -> Result<(), ControllerError> {
    check_limits(&config)?;
    memory_trim::configure();
    // The outer bound: whatever stage the operator is in (even connecting or
    // waiting for a first list), it is gone by the end of the grace period.
    let shutdown = shutdown::Shutdown::spawn(shutdown_signal(), config.shutdown_grace);
    let operator = async {
        let client = client(config.kubeconfig.as_ref()).await?;
        run_with_client(config.clone(), client, shutdown.asked()).await
    };
    tokio::select! {
        result = operator => result,
        _ = shutdown.deadline(Duration::ZERO) => {
            tracing::warn!(
                grace_seconds = config.shutdown_grace.as_secs(),
                "still stopping at the end of --shutdown-grace: exiting now"
            );
            Ok(())
        }
    }
}

/// How long the start waits for the API server's version before it goes on
/// with the newest defaults.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The comparator's gates for the cluster: the defaults of its version (as
/// the API server reports it, emulated version first), flags on top; the
/// newest defaults, with a warning, when the version cannot be read. Logs
/// the choice and exports it as `deletion_cost_comparator_info`.
async fn comparator_gates(
    client: &Client,
    config: &RunConfig,
    metrics: &Metrics,
) -> Result<FeatureGates, ControllerError> {
    let fallback = match config.kubernetes_version {
        Some(v) => format!("--kubernetes-version {v} applies"),
        None => "the comparator uses the newest defaults".into(),
    };
    let detected = match tokio::time::timeout(VERSION_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(info)) => {
            let emulated = KubeVersion::emulated(
                info.emulation_major.as_deref(),
                info.emulation_minor.as_deref(),
            );
            match KubeVersion::from_server(&info.major, &info.minor, &info.git_version) {
                Ok(binary) => Some((emulated.unwrap_or(binary), info.git_version)),
                Err(e) => {
                    tracing::warn!(error = %e, "the API server's version does not parse: {fallback}");
                    None
                }
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %crate::error_chain(&e), "cannot read the API server's version: {fallback}");
            None
        }
        Err(_) => {
            tracing::warn!(
                timeout_seconds = VERSION_TIMEOUT.as_secs(),
                "the API server did not tell its version in time: {fallback}"
            );
            None
        }
    };
    let choice = choose_gates(
        config.kubernetes_version,
        detected.as_ref().map(|(v, _)| *v),
        config.feature_gates.as_deref(),
    )
    .map_err(|e| {
        let from = match (&detected, config.kubernetes_version) {
            (Some((_, git)), None) => format!(" (the API server's version: {git})"),
            _ => String::new(),
        };
        ControllerError::Config(format!("--feature-gates: {e}{from}"))
    })?;
    let unknown = || "unknown".to_string();
    tracing::info!(
        detected_version = %detected.as_ref().map_or_else(unknown, |(_, git)| git.clone()),
        kubernetes_version = %choice.version.map_or_else(unknown, |v| v.to_string()),
        source = choice.source.as_str(),
        pod_deletion_cost = choice.gates.pod_deletion_cost,
        logarithmic_scale_down = choice.gates.logarithmic_scale_down,
        "comparator feature gates chosen"
    );
    metrics.comparator_chosen(&choice);
    Ok(choice.gates)
}

fn check_limits(config: &RunConfig) -> Result<(), ControllerError> {
    if !(config.qps.is_finite() && config.qps > 0.0) || config.burst == 0 {
        return Err(ControllerError::Config(format!(
            "--qps must be > 0 and --burst >= 1 (got {} and {})",
            config.qps, config.burst
        )));
    }
    Ok(())
}

/// Runs the operator with a given client until `shutdown` resolves (tests
/// pass a client for the fake API server and their own trigger).
pub async fn run_with_client(
    config: RunConfig,
    client: Client,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), ControllerError> {
    check_limits(&config)?;
    let shutdown = shutdown::Shutdown::spawn(shutdown, config.shutdown_grace);
    let term_patcher = leadership::TermPatcher::default();
    let metrics = Arc::new(Metrics::new(config.qps, {
        let p = term_patcher.clone();
        Box::new(move || p.stats())
    }));
    let gates = comparator_gates(&client, &config, &metrics).await?;
    let ns = config.namespace.as_deref();
    let prometheus = match &config.prometheus_url {
        Some(url) => Some(
            PrometheusClient::new(url)
                .map_err(|e| ControllerError::Config(format!("--prometheus-url: {e}")))?,
        ),
        None => None,
    };

    // Leadership.
    let (leader_rx, election) = if config.leader_election {
        let (rx, election) = lease::start(&client, &config).await?;
        // a replica restarted in a pod that led before starts unmarked
        leadership::mark_own_pod(&client, false).await;
        (rx, Some(election))
    } else {
        (watch::channel(true).1, None)
    };
    let leadership = leadership::Leadership::new(
        leader_rx,
        term_patcher,
        leadership::LeaseName {
            namespace: config.lease_namespace(),
            name: config.lease_name.clone(),
        },
    );
    let following = tokio::spawn(leadership.clone().follow(
        client.clone(),
        config.qps,
        config.burst,
        config.identity.clone(),
        metrics.clone(),
    ));

    // Watches with trimmed objects; each reports its API errors to `health`
    // so a replica that cannot list says why.
    let health = sync::WatchHealth::new(&["pods", "nodes", "replicasets", "policies"]);
    let wc = watcher::Config::default();
    let (pods, pods_w) = reflector::store::<CachedPod>();
    let pod_events = watcher(api::<CachedPod>(&client, ns), wc.clone())
        .reflect(pods_w)
        .inspect(health.observer("pods"))
        .default_backoff()
        .touched_objects();
    let (nodes, nodes_w) = reflector::store::<Node>();
    let node_events = watcher(Api::<Node>::all(client.clone()), wc.clone())
        .modify(caches::trim_node)
        .reflect(nodes_w)
        .inspect(health.observer("nodes"))
        .default_backoff()
        .touched_objects()
        .predicate_filter(predicates::labels, Default::default());
    let (replica_sets, rs_w) = reflector::store::<ReplicaSet>();
    let rs_events = watcher(api::<ReplicaSet>(&client, ns), wc.clone())
        .modify(caches::trim_replica_set)
        .reflect(rs_w)
        .inspect(health.observer("replicasets"))
        .default_backoff()
        .touched_objects();
    let (policies, policies_w) = reflector::store::<DeletionCostPolicy>();
    let policy_events = watcher(api::<DeletionCostPolicy>(&client, ns), wc)
        .reflect(policies_w)
        .inspect(health.observer("policies"))
        .default_backoff()
        .applied_objects();
    let controller = Controller::for_stream(policy_events, policies.clone())
        .with_config(controller::Config::default().debounce(config.debounce));

    // Health: ready once every cache has synced; until then, say why not.
    health.track("pods", pods.clone());
    health.track("nodes", nodes.clone());
    health.track("replicasets", replica_sets.clone());
    health.track("policies", policies.clone());
    let waiting_report = tokio::spawn(health.clone().report_until_ready());
    let (shutdown_tx, shutdown_rx) = watch::channel(false);

    let reporter = Reporter {
        controller: MANAGER.into(),
        instance: Some(config.identity.clone()),
    };
    let rounds = Arc::new(Rounds::new(
        Caches::new(pods.clone(), nodes, replica_sets, policies.clone()),
        leadership.clone(),
        metrics.clone(),
        round::SignalSource {
            prometheus,
            timeout: config.prometheus_timeout,
        },
        gates,
        config.dry_run,
    ));
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client: client.clone(),
        config: config.clone(),
        rounds: rounds.clone(),
        health: health.clone(),
        failures: Default::default(),
        pages: tokio::sync::Semaphore::new(1),
    });
    let server = serve_http(config.metrics_addr, ctx.clone(), shutdown_rx.clone()).await?;
    tokio::spawn(release_heap(ctx.clone(), shutdown_rx.clone()));

    let in_ns = |store: &Store<DeletionCostPolicy>, ns: Option<String>| {
        store
            .state()
            .into_iter()
            .filter(|p| p.namespace() == ns)
            .map(|p| ObjectRef::from_obj(&*p))
            .collect::<Vec<_>>()
    };
    let (p1, p2, p3) = (policies.clone(), policies.clone(), policies.clone());
    let leader_changes = leadership.changes();
    // --- pre-scale-down hook (src/hook) ---
    let hook_server = match config.hook_addr {
        Some(addr) => Some(
            crate::hook::serve(
                addr,
                config.hook.clone(),
                client.clone(),
                rounds.clone(),
                shutdown_rx.clone(),
            )
            .await?,
        ),
        None => None,
    };
    // ---
    tracing::info!(
        namespace = ns.unwrap_or("(all)"),
        qps = config.qps,
        burst = config.burst,
        dry_run = config.dry_run,
        "starting"
    );
    let reserve = shutdown::reserve(config.shutdown_grace);
    let running = controller
        .watches_stream(pod_events, move |pod: CachedPod| {
            policies_for_pod(&p1, &pod)
        })
        .watches_stream(rs_events, move |rs: ReplicaSet| in_ns(&p2, rs.namespace()))
        .watches_stream(node_events, move |_node: Node| {
            p3.state()
                .iter()
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        })
        .reconcile_all_on(leader_changes)
        .graceful_shutdown_on(shutdown.asked())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %crate::error_chain(&e), "reconcile failed");
            }
        });
    // kube-runtime's graceful shutdown only stops new triggers and waits for
    // the caches first: bound it, so a replica that never synced still stops.
    tokio::select! {
        _ = running => {}
        _ = shutdown.deadline(reserve * 2) => {
            tracing::warn!(waiting_for = ?health.waiting_for().iter().map(|w| w.0).collect::<Vec<_>>(),
                "the controller did not stop within the grace period: abandoning it");
        }
    }
    waiting_report.abort();

    // No new patcher from here on; then drain the current one.
    following.abort();
    let patcher = leadership.take_patcher();
    if let Some(patcher) = patcher {
        tracing::info!("shutting down: draining writes");
        let report = patcher
            .drain(shutdown.remaining().saturating_sub(reserve))
            .await;
        if !report.completed() {
            tracing::warn!(
                abandoned = report.abandoned.len(),
                "writes left at the shutdown deadline (the next leader recomputes them)"
            );
        }
        metrics.leader.set(0);
    }
    let _ = shutdown_tx.send(true);
    // Unlabel first: the hook Service must not pick a replica on its way out.
    if leadership.is_leader() {
        let _ = tokio::time::timeout(
            shutdown.remaining(),
            leadership::mark_own_pod(&client, false),
        )
        .await;
    }
    // Give the Lease back so a follower takes over now, not at its expiry.
    if let Some(election) = election {
        election.stop(shutdown.remaining()).await;
    }
    let listeners = async {
        let _ = server.await;
        if let Some(hook) = hook_server {
            let _ = hook.await;
        }
    };
    if tokio::time::timeout(shutdown.remaining(), listeners)
        .await
        .is_err()
    {
        tracing::warn!("listeners still open at the shutdown deadline");
    }
    Ok(())
}

/// How often the release task looks for the end of a busy period.
const HEAP_RELEASE_EVERY: Duration = Duration::from_secs(1);

/// Gives freed heap back to the OS once a busy period (planning rounds, or
/// writes going out while the queue drains) is over, so RSS follows what is
/// live instead of the busiest moment. Not during one: the next round would
/// only fault the same pages back in.
async fn release_heap(ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(HEAP_RELEASE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut last_writes, mut pending) = (0, false);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let writes = ctx.patcher().map_or(0, |p| {
            let s = p.stats();
            s.attempts() + s.rejected + s.abandoned
        });
        let busy = ctx.rounds.churn.take() | (writes != last_writes);
        last_writes = writes;
        if busy {
            pending = true;
        } else if pending {
            pending = false;
            let started = std::time::Instant::now();
            let released = memory_trim::release();
            tracing::debug!(
                released,
                took_us = started.elapsed().as_micros() as u64,
                "returned free heap to the OS"
            );
        }
    }
}

/// Policies a pod event concerns: those whose selector matches it, those that
/// target a workload (cheap to re-check), and the one that wrote its cost.
fn policies_for_pod(
    store: &Store<DeletionCostPolicy>,
    pod: &CachedPod,
) -> Vec<ObjectRef<DeletionCostPolicy>> {
    let ns = pod.namespace();
    let writer = pod.annotations().get(POLICY_ANNOTATION);
    store
        .state()
        .into_iter()
        .filter(|p| p.namespace() == ns)
        .filter(|p| {
            writer == Some(&p.name_any())
                || match &p.spec.selector {
                    Some(sel) => sel.matches(pod.metadata.labels.as_ref()),
                    None => true,
                }
        })
        .map(|p| ObjectRef::from_obj(&*p))
        .collect()
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c().map(|_| ());
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => ctrl_c.await,
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

/// Serves `/metrics`, `/healthz`, `/readyz` and each policy's page.
async fn serve_http(
    addr: SocketAddr,
    ctx: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, ControllerError> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let (metrics, health) = (ctx.rounds.metrics.clone(), ctx.health.clone());
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.encode(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let waiting = health.waiting_for();
                async move {
                    if waiting.is_empty() {
                        (StatusCode::OK, "ready".to_string())
                    } else {
                        let names: Vec<&str> = waiting.iter().map(|w| w.0).collect();
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("caches not synced: {}", names.join(", ")),
                        )
                    }
                }
            }),
        )
        .route("/policies/{namespace}/{name}", get(page::policy_page))
        .with_state(ctx);
    let listener =
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| ControllerError::Serve {
                addr,
                message: e.to_string(),
            })?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz, /policies/<namespace>/<name>");
    Ok(tokio::spawn(async move {
        let stop = async move {
            let _ = shutdown.wait_for(|v| *v).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::error!(error = %e, "metrics server failed");
        }
    }))
}

fn error_policy(
    policy: Arc<DeletionCostPolicy>,
    err: &ControllerError,
    ctx: Arc<Context>,
) -> Action {
    let key = policy_key(&policy);
    let failures = ctx
        .failures
        .lock()
        .map(|mut f| {
            let n = f.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        })
        .unwrap_or(1);
    let delay = retry_delay(failures);
    tracing::warn!(
        policy = %key,
        error = %crate::error_chain(err),
        kind = err.metric_label(),
        failures,
        retry_in_seconds = delay.as_secs(),
        "reconcile failed"
    );
    ctx.rounds.metrics.reconciled(err.metric_label());
    Action::requeue(delay)
}

/// First retry of a failing reconcile.
const RETRY_FIRST: Duration = Duration::from_secs(5);
/// Longest wait between retries of a failing reconcile.
const RETRY_MAX: Duration = Duration::from_secs(300);

/// Exponential backoff for the n-th consecutive failure (n >= 1).
fn retry_delay(failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(16));
    RETRY_FIRST.saturating_mul(factor).min(RETRY_MAX)
}

fn policy_key(p: &DeletionCostPolicy) -> String {
    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
}

async fn reconcile(
    policy: Arc<DeletionCostPolicy>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    if !ctx.is_leader() {
        // followers keep warm caches and wait for the lease
        return Ok(Action::await_change());
    }
    if !ctx.health.is_ready() {
        // pod events seen before the policies were listed map to nothing:
        // plan only once every cache holds the whole cluster
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let key = policy_key(&policy);
    let result = if ctx.config.dry_run {
        apply_policy(policy, &ctx).await
    } else {
        let ns = policy.namespace().unwrap_or_default();
        let api: Api<DeletionCostPolicy> = Api::namespaced(ctx.client.clone(), &ns);
        finalizer(&api, FINALIZER, policy, |event| async {
            match event {
                FinalizerEvent::Apply(p) => apply_policy(p, &ctx).await,
                FinalizerEvent::Cleanup(p) => cleanup(p, &ctx).await,
            }
        })
        .await
        .map_err(|e| ControllerError::Finalizer(Box::new(e)))
    };
    if result.is_ok() {
        if let Ok(mut f) = ctx.failures.lock() {
            f.remove(&key);
        }
    }
    result
}

async fn apply_policy(
    policy: Arc<DeletionCostPolicy>,
    ctx: &Context,
) -> Result<Action, ControllerError> {
    let ns = policy.namespace().unwrap_or_default();
    let name = policy.name_any();
    let key = format!("{ns}/{name}");
    let api: Api<DeletionCostPolicy> = Api::namespaced(ctx.client.clone(), &ns);
    let prev_status = policy.status.clone();
    let resolved = match ResolvedPolicy::resolve(&name, &ns, &policy.spec) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(policy = %key, error = %e, "invalid policy");
            ctx.rounds.metrics.reconciled("invalid");
            // an invalid policy has no order to report
            ctx.rounds
                .remove_series(&key, &mut *ctx.rounds.lock(&key).await);
            let st = status::invalid(
                prev_status.as_ref(),
                &e.errors,
                policy.metadata.generation,
                &now_rfc3339(),
            );
            write_status(ctx, &api, &policy, prev_status.as_ref(), st).await?;
            return Ok(Action::await_change());
        }
    };

    // the policy's state stays locked from planning to submitting: a hook
    // request for the same policy waits (and the other way round)
    let mut state = ctx.rounds.lock(&key).await;
    let round = ctx
        .rounds
        .plan_round(&mut state, &policy, &resolved, false, None)
        .await?;
    let planned = &round.plan;
    let mut pending = 0;
    let mut rejected = 0;
    match ctx
        .rounds
        .submit_round(&mut state, &round, Priority::Background)
    {
        Ok(_) => {
            pending = ctx
                .patcher()
                .map(|p| p.pending_for(&PolicyKey::new(&ns, &name)).len())
                .unwrap_or(0)
        }
        Err(e) => {
            tracing::warn!(policy = %key, error = %e, "patches not submitted; retrying soon");
            rejected = round.requests().len();
        }
    }
    let hold = round.signal_error.is_some();
    let releases = &round.releases;
    tracing::info!(
        policy = %key,
        pods = planned.pods.len(),
        patches = planned.patches.len(),
        releases = releases.len(),
        held = hold,
        dry_run = ctx.config.dry_run,
        "planned"
    );

    // mismatch gauges, under the policy's lock
    ctx.rounds.export_mismatches(&key, &mut state, planned);
    drop(state);

    let observed = status::Observed {
        signals: round.signal_error.clone(),
        conflicts: round.conflicts.clone(),
        pending_patches: pending,
        rejected,
        last_refresh: round.last_refresh.clone(),
        generation: policy.metadata.generation,
    };
    let st = status::build(prev_status.as_ref(), planned, &observed, &now_rfc3339());
    write_status(ctx, &api, &policy, prev_status.as_ref(), st).await?;
    ctx.rounds.metrics.reconciled("ok");
    let again = if rejected > 0 {
        Duration::from_secs(5)
    } else {
        resolved.spec.refresh_interval
    };
    Ok(Action::requeue(again))
}

/// Writes the status when it changed, and one Event per condition transition.
async fn write_status(
    ctx: &Context,
    api: &Api<DeletionCostPolicy>,
    policy: &DeletionCostPolicy,
    prev: Option<&DeletionCostPolicyStatus>,
    new: DeletionCostPolicyStatus,
) -> Result<(), ControllerError> {
    if ctx.config.dry_run || !status::differs(prev, &new) {
        return Ok(());
    }
    let mut body = serde_json::to_value(&new).unwrap_or_default();
    // merge patches keep fields we omit: clear emptied lists explicitly
    if let Some(obj) = body.as_object_mut() {
        for field in ["conditions", "victims", "mismatches"] {
            obj.entry(field).or_insert_with(|| serde_json::json!([]));
        }
    }
    let name = policy.name_any();
    api.patch_status(
        &name,
        &PatchParams::apply(MANAGER),
        &Patch::Merge(serde_json::json!({ "status": body })),
    )
    .await?;
    let reference = policy.object_ref(&());
    for c in status::transitions(prev, &new) {
        let good = (c.status == "True") != (c.type_ == status::CONFLICT);
        let event = Event {
            type_: if good {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: c.reason.clone(),
            note: Some(
                format!("{}={}: {}", c.type_, c.status, c.message)
                    .chars()
                    .take(1000)
                    .collect(),
            ),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, "publishing event failed");
        }
    }
    Ok(())
}

/// Removes this policy's costs (through the limiter) before the finalizer goes.
async fn cleanup(
    policy: Arc<DeletionCostPolicy>,
    ctx: &Context,
) -> Result<Action, ControllerError> {
    let ns = policy.namespace().unwrap_or_default();
    let name = policy.name_any();
    let ours: Vec<Arc<CachedPod>> = ctx
        .rounds
        .caches
        .pods()
        .into_iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str())
                && p.annotations().get(POLICY_ANNOTATION).map(String::as_str) == Some(name.as_str())
                && p.annotations().contains_key(POD_DELETION_COST)
        })
        .collect();
    tracing::info!(policy = %format!("{ns}/{name}"), pods = ours.len(), "policy deleted: removing its costs");
    if ours.is_empty() {
        ctx.rounds.forget(&format!("{ns}/{name}")).await;
        return Ok(Action::await_change());
    }
    let Some(patcher) = ctx.patcher() else {
        return Err(ControllerError::CleanupIncomplete {
            policy: format!("{ns}/{name}"),
            remaining: ours.len(),
        });
    };
    let reqs: Vec<PatchRequest> = ours
        .iter()
        .map(|p| {
            PatchRequest::remove(PodKey::new(&ns, p.name_any()), &name)
                .with_uid(p.uid().unwrap_or_default())
        })
        .collect();
    let batch = patcher.submit_batch(reqs, Priority::Background)?;
    let report = batch.wait().await;
    if report.all_done() {
        ctx.rounds.forget(&format!("{ns}/{name}")).await;
        Ok(Action::await_change())
    } else {
        let remaining = report
            .outcomes
            .iter()
            .filter(|(_, o)| {
                !matches!(
                    o,
                    crate::apply::WriteOutcome::Applied | crate::apply::WriteOutcome::Gone
                )
            })
            .count();
        Err(ControllerError::CleanupIncomplete {
            policy: format!("{ns}/{name}"),
            remaining,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_reconciles_back_off_exponentially_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=8).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, vec![5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX);
    }

    #[test]
    fn finalizer_errors_keep_their_source_and_kind() {
        let inner = ControllerError::CleanupIncomplete {
            policy: "shop/web".into(),
            remaining: 3,
        };
        let err = ControllerError::Finalizer(Box::new(FinalizerError::CleanupFailed(inner)));
        assert_eq!(err.metric_label(), "cleanup");
        let chain = crate::error_chain(&err);
        assert!(chain.contains("3 pods still carry its cost"), "{chain}");
    }
}
