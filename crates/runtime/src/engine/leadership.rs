//! Leadership terms: whether this replica leads, and the writer that comes
//! with a term. The election itself is the operator's Lease; this module
//! turns its answer into what the engine and the operator use: a [`Leadership`]
//! handle that says whether this replica leads and hands out the patcher of
//! the current term, the `deletion_cost_leader` gauge, and the leader label
//! on the replica's own pod (the hook's Service selects it).
//!
//! A new term gets a new patcher; a lost term drops the old one's queue, so a
//! follower never writes. Within a term the patcher checks the election's
//! [`Gate`] right before each write: leadership is known in one place. Every
//! other write of a term (status, Events, the finalizer, the leader label)
//! goes through [`Leadership::writes`], a client whose writes wait for a
//! token of the same patcher: one budget for all of them.
//! The patcher starts only once the pod cache is as new as a quorum read
//! ([`super::catch_up`]): a new leader never plans its first writes on a
//! cache that misses the old leader's last ones.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use tokio::sync::watch;

use super::catch_up::CatchUp;
use crate::metrics::Metrics;
use crate::writes::{
    budgeted_client, Gate, KubePodWriter, Patcher, PatcherConfig, PatcherStats, StatsSnapshot,
    WriteGate, WriteLimits,
};

/// Label the leader puts on its own pod: the hook's Service selects it, so
/// hook calls through the Service always reach the leader.
pub const LEADER_LABEL: &str = "deletioncost.dev/leader";

/// The patcher of the current leadership term (none while following). One
/// slot for the whole process: the metrics endpoint reads its counters at
/// scrape time, so it exists before the election starts.
/// The counters are the process's, shared by every term's patcher, so the
/// exported totals never go back when a term ends.
#[derive(Debug, Clone, Default)]
pub struct TermPatcher {
    slot: Arc<RwLock<Option<Patcher>>>,
    stats: Arc<PatcherStats>,
}

impl TermPatcher {
    /// The patcher, while this replica leads.
    pub fn get(&self) -> Option<Patcher> {
        self.slot.read().ok().and_then(|p| p.clone())
    }

    fn set(&self, patcher: Option<Patcher>) {
        if let Ok(mut slot) = self.slot.write() {
            *slot = patcher;
        }
    }

    /// Empties the slot, returning the patcher it held.
    fn take(&self) -> Option<Patcher> {
        self.slot.write().ok().and_then(|mut p| p.take())
    }

    /// The counters of every term so far (gauges: the current term's).
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }
}

/// Which Lease the replicas compete for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseName {
    /// Namespace of the Lease (the operator's own by default).
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
}

/// Whether this replica leads, and its writers while it does. Cheap to
/// clone; every clone sees the same term.
#[derive(Clone)]
pub struct Leadership {
    /// The election's write gate (open for good without election).
    gate: watch::Receiver<Gate>,
    /// Whether this replica holds a term (the gate is not closed); changes
    /// only when that flips, not at every renewal.
    leader: watch::Receiver<bool>,
    /// Counts the terms whose writer started (after their catch-up).
    writers: Arc<watch::Sender<u64>>,
    patcher: TermPatcher,
    lease: LeaseName,
    /// Every write but the pod patches and the Lease, through the term's
    /// budget.
    writes: Client,
    /// Events, written through `writes`.
    events: Recorder,
    /// Who publishes the Events.
    reporter: Reporter,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("leader", &*self.leader.borrow())
            .field("patcher", &self.patcher)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// A handle on the terms `gate` announces ([`Gate::Open`] for good
    /// without election), writing pod patches through `patcher`'s slot and
    /// every other write through `client` under that patcher's budget
    /// (Events reported as `reporter`). Call within the runtime: a task
    /// follows the gate.
    pub fn new(
        gate: watch::Receiver<Gate>,
        patcher: TermPatcher,
        lease: LeaseName,
        client: Client,
        reporter: Reporter,
    ) -> Self {
        let holds = |g: &Gate| *g != Gate::Closed;
        let (tx, leader) = watch::channel(holds(&gate.borrow()));
        let mut terms = gate.clone();
        tokio::spawn(async move {
            while terms.changed().await.is_ok() {
                let now = holds(&terms.borrow_and_update());
                tx.send_if_modified(|v| std::mem::replace(v, now) != now);
            }
        });
        let term = patcher.clone();
        let writes = budgeted_client(client, Arc::new(move || term.get()));
        let events = Recorder::new(writes.clone(), reporter.clone());
        Leadership {
            gate,
            leader,
            writers: Arc::new(watch::channel(0).0),
            patcher,
            lease,
            writes,
            events,
            reporter,
        }
    }

    /// Whether this replica holds the lease (writes still wait for the
    /// gate: a term whose renewal is late holds them).
    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// The write gate of this replica's terms.
    pub fn gate(&self) -> WriteGate {
        WriteGate::new(self.gate.clone())
    }

    /// The patcher of the current leadership term.
    pub fn patcher(&self) -> Option<Patcher> {
        self.patcher.get()
    }

    /// A client for every write of this replica's terms but the pod
    /// patches (the patcher's) and the Lease (the election's): each write
    /// waits for a token of the term's patcher, after a scale-in's pod
    /// writes; refused while following. Reads go straight through.
    pub fn writes(&self) -> Client {
        self.writes.clone()
    }

    /// Publishes Events through [`Leadership::writes`]: they count against
    /// the operator-wide limit like every other write.
    pub fn events(&self) -> Recorder {
        self.events.clone()
    }

    /// A recorder of its own for one Event, through the same budget: the
    /// Event is always a new one. The shared recorder folds an Event with
    /// the same reason on the same object within minutes into the first
    /// one's count, keeping the first one's note: right for a condition
    /// seen again, wrong for a scale-in's victims and price.
    pub fn one_event(&self) -> Recorder {
        Recorder::new(self.writes.clone(), self.reporter.clone())
    }

    /// The Lease the replicas compete for.
    pub fn lease(&self) -> &LeaseName {
        &self.lease
    }

    /// A stream that yields when this replica stops leading and when a
    /// term's writer starts (its pod cache caught up): rounds planned in
    /// between are held (`WriterStarting`), so every policy is due again
    /// then.
    pub fn changes(&self) -> impl futures::Stream<Item = ()> + Send {
        let stopped = futures::stream::unfold(self.leader.clone(), |mut rx| async move {
            loop {
                rx.changed().await.ok()?;
                if !*rx.borrow_and_update() {
                    return Some(((), rx));
                }
            }
        });
        let writing = futures::stream::unfold(self.writers.subscribe(), |mut rx| async move {
            rx.changed().await.ok().map(|_| ((), rx))
        });
        futures::stream::select(stopped, writing)
    }

    /// Ends the current term's writer for good (shutdown): the patcher is
    /// taken out of the slot, for the caller to drain. Call after the task
    /// running [`Leadership::follow`] is stopped, so no new one appears.
    pub fn take_patcher(&self) -> Option<Patcher> {
        self.patcher.take()
    }

    /// Follows the terms until the election ends: a patcher writing within
    /// `limits` (a scale-in's writes first on their allowance) while
    /// leading, none otherwise; the leader gauge and the
    /// leader label on this replica's pod follow too. With leader election,
    /// a term's patcher starts after `catch_up` ran: the pod cache is then
    /// as new as a quorum read (or its time ran out). Without (`None`: one
    /// replica, leading from the start on a cache its first list filled)
    /// it starts at once.
    pub async fn follow(
        self,
        client: Client,
        limits: WriteLimits,
        identity: String,
        metrics: Arc<Metrics>,
        catch_up: Option<CatchUp>,
    ) {
        let mut leader = self.leader.clone();
        loop {
            let leading = *leader.borrow_and_update();
            let current = self.patcher.get();
            match (leading, current) {
                (true, None) => match limits.rate() {
                    Ok(rate) => {
                        if let Some(catch_up) = &catch_up {
                            // the term may end while the cache catches up; a
                            // gate whose sender is gone changes no more
                            let flipped = async {
                                if leader.changed().await.is_err() {
                                    std::future::pending::<()>().await;
                                }
                            };
                            tokio::select! {
                                _ = catch_up.run() => {}
                                _ = flipped => continue,
                            }
                        }
                        let mut config = PatcherConfig::new(rate);
                        config.scale_in_allowance = limits.scale_in();
                        config.gate = self.gate();
                        config.stats = Arc::clone(&self.patcher.stats);
                        let patcher = Patcher::start(KubePodWriter::new(client.clone()), config);
                        self.patcher.set(Some(patcher));
                        if catch_up.is_some() {
                            // rounds held meanwhile are due again
                            self.writers.send_modify(|n| *n += 1);
                        }
                        metrics.leader.set(1);
                        tracing::info!(identity = %identity, "leading: writes enabled");
                        // writes of the term: inside its budget
                        mark_own_pod(&self.writes, true).await;
                        if let Some((namespace, own)) = own_pod() {
                            unmark_other_leaders(&self.writes, &namespace, &own).await;
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "cannot build the write limiter"),
                },
                (false, Some(patcher)) => {
                    self.patcher.set(None);
                    metrics.leader.set(0);
                    mark_own_pod(&client, false).await;
                    let report = patcher.drain(Duration::ZERO).await;
                    tracing::warn!(
                        abandoned = report.abandoned.len(),
                        "lost the lease: writes stopped, queued values dropped (the new leader recomputes them)"
                    );
                }
                _ => {}
            }
            if leader.changed().await.is_err() {
                return;
            }
        }
    }
}

/// This replica's pod (namespace, name), from POD_NAMESPACE and POD_NAME
/// (the Downward API); `None` outside a pod.
fn own_pod() -> Option<(String, String)> {
    let name = std::env::var("POD_NAME").ok()?;
    let namespace = std::env::var("POD_NAMESPACE").ok()?;
    Some((namespace, name))
}

/// Marks (or unmarks) this replica's own pod as the leader's. Needs
/// POD_NAME and POD_NAMESPACE (the Downward API); outside a pod it does
/// nothing. Failures are logged: the hook Service then lags, writes do not.
pub async fn mark_own_pod(client: &Client, leading: bool) {
    let Some((namespace, name)) = own_pod() else {
        tracing::debug!("POD_NAME/POD_NAMESPACE unset: not labelling the leader's pod");
        return;
    };
    let value = if leading {
        serde_json::json!("true")
    } else {
        serde_json::Value::Null
    };
    match set_leader_label(client, &namespace, &name, value).await {
        Ok(()) => {
            tracing::info!(pod = %name, leading, "leader label updated on the operator's pod")
        }
        Err(e) => {
            tracing::warn!(pod = %name, leading, error = %e, "cannot update the leader label on the operator's pod")
        }
    }
}

/// Takes the leader label off every pod of `namespace` but `own`: at the
/// start of a term, the label another replica left behind. A leader that
/// was frozen (SIGSTOP, a hung node) or killed cannot take its own label
/// off, and its pod stays among the hook Service's endpoints until its
/// readiness probe fails: every scale-in routed there waits for the
/// webhook's whole timeout. The new leader holds the term, so no other
/// replica may carry the label. Returns the pods unlabelled; failures are
/// logged (the readiness probe still takes the pod out).
pub async fn unmark_other_leaders(client: &Client, namespace: &str, own: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = match pods
        .list_metadata(&ListParams::default().labels(&format!("{LEADER_LABEL}=true")))
        .await
    {
        Ok(list) => list,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the operator's pods for a leader label left behind");
            return Vec::new();
        }
    };
    let mut unmarked = Vec::new();
    for other in listed.items {
        let Some(name) = other.metadata.name else {
            continue;
        };
        if name == own {
            continue;
        }
        match set_leader_label(client, namespace, &name, serde_json::Value::Null).await {
            Ok(()) => {
                tracing::info!(pod = %name, "took the leader label off a replica that no longer leads");
                unmarked.push(name);
            }
            Err(e) => {
                tracing::warn!(pod = %name, error = %e, "cannot take the leader label off a replica that no longer leads")
            }
        }
    }
    unmarked
}

async fn set_leader_label(
    client: &Client,
    namespace: &str,
    name: &str,
    value: serde_json::Value,
) -> Result<(), kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({"metadata": {"labels": {LEADER_LABEL: value}}});
    pods.patch_metadata(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}
