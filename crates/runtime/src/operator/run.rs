//! `deletion-cost run`: the wiring. Checks the config, reads the cluster's
//! version (comparator gates), joins the leader election, starts the
//! watches (trimmed pods, nodes, ReplicaSets, policies) and their caches,
//! builds the [`Engine`] the reconcile and the hook share, opens the
//! listeners, runs the kube-runtime `Controller`, and on SIGTERM stops it
//! all within one grace period.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{predicates, reflector::reflector, watcher, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::config::{check_limits, client, comparator_gates, RunConfig};
use super::error::OperatorError;
use super::listener_state::ServerState;
use super::reconcile::{self, Context};
use super::server;
use super::sync::Retried;
use super::throttle::throttle;
use super::{lease, shutdown, sync};
use crate::annotations::POLICY_ANNOTATION;
use crate::engine::caches::{self, CachedPod, Caches};
use crate::engine::catch_up::CatchUp;
use crate::engine::leadership::{mark_own_pod, Leadership, LeaseName, TermPatcher};
use crate::engine::policy_index::PolicyIndex;
use crate::engine::trim;
use crate::engine::{Engine, SignalSource};
use crate::metrics::Metrics;
use crate::pod::PodRecord;
use crate::policy::selector::selects;
use crate::policy::DeletionCostPolicy;
use crate::prometheus::PrometheusClient;

/// How long a stopping leader keeps writing its queue before it gives the
/// Lease back: writes are level-triggered, so what is left is recomputed and
/// sent by the next leader, which meanwhile waits for the Lease.
const DRAIN_AT_STOP: Duration = Duration::from_secs(3);

/// Runs the operator until SIGTERM/SIGINT.
pub async fn run(config: RunConfig) -> Result<(), OperatorError> {
    check_limits(&config)?;
    // The outer bound: whatever stage the operator is in (even connecting or
    // waiting for a first list), it is gone by the end of the grace period.
    let shutdown = shutdown::Shutdown::spawn(shutdown::signal(), config.shutdown_grace);
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

/// Runs the operator with a given client until `shutdown` resolves (tests
/// pass a client for the fake API server and their own trigger).
pub async fn run_with_client(
    config: RunConfig,
    client: Client,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), OperatorError> {
    check_limits(&config)?;
    let shutdown = shutdown::Shutdown::spawn(shutdown, config.shutdown_grace);
    let term_patcher = TermPatcher::default();
    let metrics = operator_metrics(config.qps, &term_patcher);
    let gates = comparator_gates(&client, &config, &metrics).await?;
    let ns = config.namespace.as_deref();
    let signals = SignalSource {
        prometheus: prometheus_client(&config)?,
        timeout: config.prometheus_timeout,
    };

    let (leadership, election) = leadership_for(&client, &config, term_patcher).await?;

    // Watches with trimmed objects; each reports its API errors to `health`
    // so a replica that cannot list says why.
    let health = sync::WatchHealth::new(&["pods", "nodes", "replicasets", "policies"]);
    // a namespace-scoped install may run without the nodes' ClusterRole
    health.may_go_without(
        "nodes",
        "billing-class signals find no node labels and give every pod their default",
    );
    health.report_gone_without(metrics.gone_without_gauge());
    let watches = watch_all(&client, ns, &health);
    let policies = watches.policies;
    let window = config.debounce;
    let controller = policy_controller(watches.policy_events, &policies, window);

    let waiting_report = tokio::spawn(health.clone().report_until_ready());
    // the listeners' stop: cancelled below, or on any early return
    let stop = CancellationToken::new();
    let stop_on_return = stop.clone().drop_guard();

    let caches = Caches::new(
        watches.pods,
        watches.nodes,
        watches.replica_sets,
        policies.clone(),
        ns.map(str::to_string),
    )
    .with_policy_index(watches.policy_index);
    let following = follow_leadership(&leadership, &client, &config, &metrics, &caches);
    let engine = start_engine(
        caches,
        &leadership,
        &metrics,
        (signals, gates),
        &config,
        &stop,
    );
    let ctx = reconcile_context(&engine, &leadership, &health, config.qps);
    let state = ServerState::new(engine.clone(), health.clone(), config.identity.clone());
    let server = server::serve(config.metrics_addr, Arc::new(state), stop.clone()).await?;

    let leader_changes = leadership.changes();
    let hook_server = serve_hook(&config, &client, &engine, &stop).await?;
    log_starting(&config);
    let reserve = shutdown::reserve(config.shutdown_grace);
    let triggers = policy_triggers(
        engine.status_due(),
        watches.pod_events,
        watches.rs_events,
        watches.node_events,
        &policies,
        window,
    );
    let running = reconciling(controller, triggers, leader_changes, &shutdown, ctx);
    run_until_stopped(running, &shutdown, reserve, &health).await;
    waiting_report.abort();

    // No new patcher from here on; then drain the current one.
    following.abort();
    drain_writes(&shutdown, reserve, &leadership, &metrics).await;
    drop(stop_on_return);
    let listeners = closed(server, hook_server);
    step_down(&shutdown, &leadership, &client, election, listeners).await;
    Ok(())
}

/// The engine over `caches`, following the nodes priced scale-ins freed
/// (removed by the autoscaler or not) until `stop`.
fn start_engine(
    caches: Caches,
    leadership: &Leadership,
    metrics: &Arc<Metrics>,
    (signals, gates): (SignalSource, crate::comparator::FeatureGates),
    config: &RunConfig,
    stop: &CancellationToken,
) -> Arc<Engine> {
    let engine = Arc::new(Engine::new(
        caches,
        leadership.clone(),
        metrics.clone(),
        signals,
        gates,
        config.dry_run,
        config.pricing.clone(),
    ));
    tokio::spawn(
        engine
            .clone()
            .follow_removals(stop.clone().cancelled_owned()),
    );
    engine
}

/// Resolves once the metrics server and the hook's listeners closed.
async fn closed(
    server: tokio::task::JoinHandle<()>,
    hook_server: Option<tokio::task::JoinHandle<()>>,
) {
    let _ = server.await;
    if let Some(hook) = hook_server {
        let _ = hook.await;
    }
}

/// The operator's metrics, reading the write path's figures from the
/// current term's patcher.
fn operator_metrics(qps: f64, term_patcher: &TermPatcher) -> Arc<Metrics> {
    let p = term_patcher.clone();
    Arc::new(Metrics::new(qps, Box::new(move || p.stats())))
}

/// The reconcile's context: its writes (finalizer, status, Events) go
/// within the term's budget.
fn reconcile_context(
    engine: &Arc<Engine>,
    leadership: &Leadership,
    health: &Arc<sync::WatchHealth>,
    qps: f64,
) -> Arc<Context> {
    Arc::new(Context::new(
        leadership.writes(),
        engine.clone(),
        leadership.events(),
        health.clone(),
        qps,
    ))
}

/// What the operator starts with.
fn log_starting(config: &RunConfig) {
    tracing::info!(
        namespace = config.namespace.as_deref().unwrap_or("(all)"),
        qps = config.qps,
        burst = config.burst,
        dry_run = config.dry_run,
        "starting"
    );
}

/// `--prometheus-url`'s client, when one is given.
fn prometheus_client(config: &RunConfig) -> Result<Option<PrometheusClient>, OperatorError> {
    config
        .prometheus_url
        .as_deref()
        .map(PrometheusClient::new)
        .transpose()
        .map_err(|e| OperatorError::Config(format!("--prometheus-url: {e}")))
}

/// The policies' reconciles, on their `triggers` and every leadership
/// change, until the shutdown is asked.
fn reconciling(
    controller: Controller<DeletionCostPolicy>,
    triggers: impl futures::Stream<Item = ObjectRef<DeletionCostPolicy>> + Send + 'static,
    leader_changes: impl futures::Stream<Item = ()> + Send + 'static,
    shutdown: &shutdown::Shutdown,
    ctx: Arc<Context>,
) -> impl std::future::Future<Output = ()> {
    controller
        .reconcile_on(triggers)
        .reconcile_all_on(leader_changes)
        .graceful_shutdown_on(shutdown.asked())
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %crate::error_chain(&e), "reconcile failed");
            }
        })
}

/// The policies' controller, driven by their own events throttled per
/// policy within `window`.
fn policy_controller(
    policy_events: Events<DeletionCostPolicy>,
    policies: &Store<DeletionCostPolicy>,
    window: Duration,
) -> Controller<DeletionCostPolicy> {
    // every trigger is throttled per policy (see `throttle`), the
    // controller's own debounce is off: a steady stream of pod events (the
    // operator's own writes) must not hold a policy's reconcile back
    let policy_events = throttle(
        policy_events,
        window,
        |e: &Result<DeletionCostPolicy, _>| e.as_ref().ok().map(ObjectRef::from_obj),
    );
    Controller::for_stream(policy_events, policies.clone())
        .with_config(controller::Config::default().debounce(Duration::ZERO))
}

/// The pre-scale-down hook and the scale-in webhook (`crates/runtime/src/hook`),
/// when `--hook-addr` is given.
async fn serve_hook(
    config: &RunConfig,
    client: &Client,
    engine: &Arc<Engine>,
    stop: &CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<()>>, OperatorError> {
    let Some(addr) = config.hook_addr else {
        return Ok(None);
    };
    let served = crate::hook::serve(
        addr,
        config.hook.clone(),
        client.clone(),
        engine.clone(),
        stop.clone(),
    )
    .await?;
    Ok(Some(served))
}

/// Follows the leadership: a patcher for each term. With election, each
/// term writes only once its pod cache is as new as a quorum read: an old
/// leader's last writes are not written again.
fn follow_leadership(
    leadership: &Leadership,
    client: &Client,
    config: &RunConfig,
    metrics: &Arc<Metrics>,
    caches: &Caches,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(
        leadership.clone().follow(
            client.clone(),
            crate::writes::WriteLimits {
                qps: config.qps,
                burst: config.burst,
                scale_in_allowance: config.scale_in_allowance,
            },
            config.identity.clone(),
            metrics.clone(),
            config
                .leader_election
                .then(|| CatchUp::new(client.clone(), caches.clone())),
        ),
    )
}

/// Runs the controller until it stops after the shutdown was asked; a
/// replica whose caches never synced stops at once, a controller that
/// outlives the grace is abandoned.
async fn run_until_stopped(
    running: impl std::future::Future<Output = ()>,
    shutdown: &shutdown::Shutdown,
    reserve: Duration,
    health: &Arc<sync::WatchHealth>,
) {
    // kube-runtime's graceful shutdown only stops new triggers and waits for
    // the caches first: bound it, so a replica that never synced still stops.
    let unsynced = {
        let (asked, health) = (shutdown.asked(), health.clone());
        async move {
            asked.await;
            if health.is_ready() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = running => {}
        // no round can have started: nothing to wait for
        _ = unsynced => {
            tracing::info!(waiting_for = ?health.waiting_for().iter().map(|w| w.0).collect::<Vec<_>>(),
                "stopping before the caches synced: no round was running");
        }
        _ = shutdown.deadline(reserve * 2) => {
            tracing::warn!(waiting_for = ?health.waiting_for().iter().map(|w| w.0).collect::<Vec<_>>(),
                "the controller did not stop within the grace period: abandoning it");
        }
    }
}

/// Each watch event as the policies it concerns, with the policies whose
/// status is due, throttled per policy within `window`.
fn policy_triggers(
    status_due: futures::stream::BoxStream<'static, crate::writes::PolicyKey>,
    pod_events: Events<CachedPod>,
    rs_events: Events<ReplicaSet>,
    node_events: Events<Node>,
    policies: &Store<DeletionCostPolicy>,
    window: Duration,
) -> impl futures::Stream<Item = ObjectRef<DeletionCostPolicy>> {
    let in_ns = |store: &Store<DeletionCostPolicy>, ns: Option<String>| {
        store
            .state()
            .into_iter()
            .filter(|p| p.namespace() == ns)
            .map(|p| ObjectRef::from_obj(&*p))
            .collect::<Vec<_>>()
    };
    let (p1, p2, p3) = (policies.clone(), policies.clone(), policies.clone());
    // the watches drive their caches; each event maps to the policies it concerns
    let status_due = status_due
        .map(|k| ObjectRef::<DeletionCostPolicy>::new(&k.name).within(&k.namespace))
        .boxed();
    let mapped = futures::stream::select_all([
        status_due,
        pod_events
            .filter_map(|e| async move { e.ok() })
            .flat_map(move |pod: CachedPod| futures::stream::iter(policies_for_pod(&p1, &pod.0)))
            .boxed(),
        rs_events
            .filter_map(|e| async move { e.ok() })
            .flat_map(move |rs: ReplicaSet| futures::stream::iter(in_ns(&p2, rs.namespace())))
            .boxed(),
        node_events
            .filter_map(|e| async move { e.ok() })
            .flat_map(move |_node: Node| {
                futures::stream::iter(
                    p3.state()
                        .iter()
                        .map(|p| ObjectRef::from_obj(&**p))
                        .collect::<Vec<_>>(),
                )
            })
            .boxed(),
    ]);
    throttle(mapped, window, |r: &ObjectRef<DeletionCostPolicy>| {
        Some(r.clone())
    })
}

/// Drains the current patcher's writes, briefly: the rest is recomputed by
/// the next leader, which waits for this replica's Lease meanwhile.
async fn drain_writes(
    shutdown: &shutdown::Shutdown,
    reserve: Duration,
    leadership: &Leadership,
    metrics: &Metrics,
) {
    if let Some(patcher) = leadership.take_patcher() {
        let within = shutdown
            .remaining()
            .saturating_sub(reserve)
            .min(DRAIN_AT_STOP);
        tracing::info!(
            within_ms = within.as_millis() as u64,
            "shutting down: draining writes"
        );
        let report = patcher.drain(within).await;
        if !report.completed() {
            tracing::warn!(
                abandoned = report.abandoned.len(),
                "writes left at the shutdown deadline (the next leader recomputes them)"
            );
        }
        metrics.leader.set(0);
    }
}

/// Unlabels the pod, gives the Lease back and waits for the `listeners` to
/// close, all within the shutdown's grace.
async fn step_down(
    shutdown: &shutdown::Shutdown,
    leadership: &Leadership,
    client: &Client,
    election: Option<lease::Election>,
    listeners: impl std::future::Future<Output = ()>,
) {
    // Unlabel first: the hook Service must not pick a replica on its way out.
    if leadership.is_leader() {
        let _ = tokio::time::timeout(shutdown.remaining(), mark_own_pod(client, false)).await;
    }
    // Give the Lease back so a follower takes over now, not at its expiry.
    if let Some(election) = election {
        election.stop(shutdown.remaining()).await;
    }
    if tokio::time::timeout(shutdown.remaining(), listeners)
        .await
        .is_err()
    {
        tracing::warn!("listeners still open at the shutdown deadline");
    }
}

/// This replica's leadership: elected through the Lease, or always leading
/// without election. Every write but the pod patches and the Lease goes
/// through the leadership's budgeted client: status, Events, finalizer,
/// leader label.
async fn leadership_for(
    client: &Client,
    config: &RunConfig,
    term_patcher: TermPatcher,
) -> Result<(Leadership, Option<lease::Election>), OperatorError> {
    let (leader_rx, election) = if config.leader_election {
        let (rx, election) = lease::start(client, config).await?;
        // a replica restarted in a pod that led before starts unmarked
        mark_own_pod(client, false).await;
        (rx, Some(election))
    } else {
        (watch::channel(crate::writes::Gate::Open).1, None)
    };
    let reporter = Reporter {
        controller: crate::MANAGER.into(),
        instance: Some(config.identity.clone()),
    };
    let leadership = Leadership::new(
        leader_rx,
        term_patcher,
        LeaseName {
            namespace: config.lease_namespace(),
            name: config.lease_name.clone(),
        },
        client.clone(),
        reporter,
    );
    Ok((leadership, election))
}

/// A watch's events: the objects they touched.
type Events<K> = futures::stream::BoxStream<'static, Result<K, watcher::Error>>;

/// The four watches: each a cache and the objects its events touched.
struct Watches {
    pods: Store<CachedPod>,
    nodes: Store<Node>,
    replica_sets: Store<ReplicaSet>,
    policies: Store<DeletionCostPolicy>,
    /// The policies validated, kept by their watch's events.
    policy_index: Arc<PolicyIndex>,
    pod_events: Events<CachedPod>,
    node_events: Events<Node>,
    rs_events: Events<ReplicaSet>,
    policy_events: Events<DeletionCostPolicy>,
}

/// Starts the watches of `ns` (all namespaces: `None`), each reporting its
/// API errors to `health` and tracked by it until its first list.
fn watch_all(client: &Client, ns: Option<&str>, health: &Arc<sync::WatchHealth>) -> Watches {
    // Lists are quorum reads (resourceVersion ""), as client-go's relist
    // after a 410: a list served from a restarted API server's cache
    // (resourceVersion 0) can be older than that cache's watch window, and
    // the watcher then looped on 410 with a stale store (a policy's new spec
    // never seen after an API server restart, on 1.36 with etcd 3.4).
    let wc = watcher::Config::default().list_semantic(watcher::ListSemantic::MostRecent);
    let (pods, pods_w) = reflector::store::<CachedPod>();
    // decoded with the `ObjectMeta` the watch reads, cached without it
    let pod_events = reflector(
        pods_w,
        watcher(api::<caches::WatchedPod>(client, ns), wc.clone()).map_ok(caches::record_event),
    )
    .inspect(health.observer("pods"))
    .retried()
    .touched_objects()
    .boxed();
    let (nodes, nodes_w) = reflector::store::<Node>();
    let node_events = watcher(Api::<Node>::all(client.clone()), wc.clone())
        .modify(trim::trim_node)
        .reflect(nodes_w)
        .inspect(health.observer("nodes"))
        .retried_patiently(health.clone(), "nodes")
        .touched_objects()
        .predicate_filter(predicates::labels, Default::default())
        .boxed();
    let (replica_sets, rs_w) = reflector::store::<ReplicaSet>();
    let rs_events = watcher(api::<ReplicaSet>(client, ns), wc.clone())
        .modify(trim::trim_replica_set)
        .reflect(rs_w)
        .inspect(health.observer("replicasets"))
        .retried()
        .touched_objects()
        .boxed();
    let (policies, policies_w) = reflector::store::<DeletionCostPolicy>();
    let policy_index = Arc::new(PolicyIndex::default());
    let index = policy_index.clone();
    let policy_events = watcher(api::<DeletionCostPolicy>(client, ns), wc)
        .reflect(policies_w)
        .inspect(move |e| {
            if let Ok(event) = e {
                index.observe(event);
            }
        })
        .inspect(health.observer("policies"))
        .retried()
        .applied_objects()
        .boxed();
    // Health: ready once every cache has synced; until then, say why not.
    health.track("pods", pods.clone());
    health.track("nodes", nodes.clone());
    health.track("replicasets", replica_sets.clone());
    health.track("policies", policies.clone());
    Watches {
        pods,
        nodes,
        replica_sets,
        policies,
        policy_index,
        pod_events,
        node_events,
        rs_events,
        policy_events,
    }
}

/// Policies a pod event concerns: those whose selector matches it, those that
/// target a workload (cheap to re-check), and the one that wrote its cost.
fn policies_for_pod(
    store: &Store<DeletionCostPolicy>,
    pod: &PodRecord,
) -> Vec<ObjectRef<DeletionCostPolicy>> {
    let ns = pod.namespace();
    let writer = pod.annotations().get(POLICY_ANNOTATION);
    let on_a_node = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
    store
        .state()
        .into_iter()
        .filter(|p| {
            if p.namespace() != ns {
                // any namespace's pod changes how busy its node is
                return on_a_node && counts_pods_per_node(p);
            }
            writer == Some(&p.name_any())
                || match &p.spec.selector {
                    Some(sel) => selects(&sel.to_selector(), pod.labels()),
                    None => true,
                }
        })
        .map(|p| ObjectRef::from_obj(&*p))
        .collect()
}

/// Whether a policy has a `nodeConsolidation` signal (it reads every
/// namespace's pods).
fn counts_pods_per_node(policy: &DeletionCostPolicy) -> bool {
    policy
        .spec
        .signals
        .iter()
        .any(|s| s.node_consolidation.is_some())
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
