//! Prometheus exposition (`/metrics`): the operator's own counters plus the
//! patcher's, read at scrape time.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::comparator::GateChoice;
use crate::writes::stats::{ERROR_REASONS, OUTCOMES, WAIT_BUCKETS};
use crate::writes::{StatsSnapshot, WriteKind};

/// Label `result`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// Outcome.
    pub result: String,
}

/// Label `reason`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why.
    pub reason: String,
}

/// Labels `policy`, `reason`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyReason {
    /// namespace/name.
    pub policy: String,
    /// Why.
    pub reason: String,
}

/// Label `outcome`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// Outcome.
    pub outcome: String,
}

/// Label `request`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    /// The kind of API request (`list`, `get`).
    pub request: String,
}

/// Labels `kind`, `outcome` of `deletion_cost_api_writes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindOutcome {
    /// What the write changed: `pods`, `status`, `events`, `other`.
    pub kind: String,
    /// `ok`, or why it failed.
    pub outcome: String,
}

/// Label `policy`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabel {
    /// namespace/name.
    pub policy: String,
}

/// Labels `policy`, `choice` of the priced scale-ins' counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyChoice {
    /// namespace/name.
    pub policy: String,
    /// `policy`: the pods the scale-in deleted; `default`: those the
    /// default order would have deleted without the policy's costs.
    pub choice: String,
}

/// Which choice of victims a priced scale-in's figures are about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChoiceLabel(&'static str);

impl ChoiceLabel {
    /// The pods the scale-in deleted (the policy's order).
    pub const POLICY: ChoiceLabel = ChoiceLabel("policy");
    /// The pods the default order would have deleted.
    pub const DEFAULT: ChoiceLabel = ChoiceLabel("default");
    /// Both.
    pub const ALL: [ChoiceLabel; 2] = [ChoiceLabel::POLICY, ChoiceLabel::DEFAULT];
}

/// Labels `policy`, `outcome` of the freed nodes' fate: `removed` or
/// `not_removed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyOutcome {
    /// namespace/name.
    pub policy: String,
    /// `removed` or `not_removed`.
    pub outcome: String,
}

/// Label `cache`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabel {
    /// The watched kind (`nodes`).
    pub cache: String,
}

/// A counter of amounts (hourly prices).
type AmountCounter = Counter<f64, AtomicU64>;

/// Labels of `deletion_cost_comparator_info`: the gates the comparator uses and why.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ComparatorLabels {
    /// `MAJOR.MINOR` whose defaults apply, `unknown` for the newest defaults.
    pub kubernetes_version: String,
    /// `detected`, `flag` or `default`.
    pub source: String,
    /// `true` or `false`.
    pub logarithmic_scale_down: String,
    /// `true` or `false`.
    pub pod_deletion_cost: String,
}

/// Buckets (seconds) of `deletion_cost_hook_patch_observed_seconds`.
const HOOK_OBSERVED_BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0];

/// Buckets (seconds) of `deletion_cost_scale_webhook_seconds`: from an
/// answer with nothing to do to one at the end of the 10 s webhook timeout.
const WEBHOOK_BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// Buckets of `deletion_cost_scale_in_writes`: pod writes per scale-in
/// (2k + 4 at most for a scale-in by k; hundreds when a large scale-in
/// under `writes: OnScaleIn` writes its whole cut).
const SCALE_IN_WRITES_BUCKETS: [f64; 12] = [
    0.0, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
];

/// Every metric the operator exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Reconciles by result (`ok`, `invalid`, `error`).
    pub reconciles: Family<ResultLabel, Counter>,
    /// Current order mismatches by policy and reason.
    pub order_mismatches: Family<PolicyReason, Gauge>,
    /// Signal fetch failures by policy and reason.
    pub signal_fetch_errors: Family<PolicyReason, Counter>,
    /// Pre-scale-down hook requests by outcome.
    pub hook_requests: Family<OutcomeLabel, Counter>,
    /// Hook: time from submitting a workload's patches to seeing all of them in the pod cache.
    pub hook_patch_observed: Histogram,
    /// Scale-in webhook calls by outcome.
    pub scale_webhook_calls: Family<OutcomeLabel, Counter>,
    /// Scale-in webhook: the time it adds to a scale-in (its answer's latency).
    pub scale_webhook_seconds: Histogram,
    /// Pod writes each scale-in made (its minimal correction).
    pub scale_in_writes: Histogram,
    /// API requests scale-ins sent to read their nodes, by request (`list`:
    /// one per scale-in; `get`: a node the list could not select).
    pub scale_in_node_requests: Family<RequestLabel, Counter>,
    /// Scale-ins priced, by policy.
    pub scale_ins_priced: Family<PolicyLabel, Counter>,
    /// Pods deleted by priced scale-ins, by policy and choice.
    pub scale_in_victims: Family<PolicyChoice, Counter>,
    /// Nodes priced scale-ins freed, by policy and choice.
    pub scale_in_freed_nodes: Family<PolicyChoice, Counter>,
    /// Hourly prices of the nodes priced scale-ins freed, by policy and choice.
    pub scale_in_freed_hourly: Family<PolicyChoice, AmountCounter>,
    /// Nodes freed with the policy, by what became of them.
    pub freed_nodes_settled: Family<PolicyOutcome, Counter>,
    /// Their hourly prices, the same way.
    pub freed_hourly_settled: Family<PolicyOutcome, AmountCounter>,
    /// Nodes freed with the policy still watched.
    pub freed_nodes_awaiting: Family<PolicyLabel, Gauge>,
    /// `--prices` read again after a change, by result (`ok`, `failed`).
    pub prices_reloads: Family<ResultLabel, Counter>,
    /// 1 while this replica leads and writes.
    pub leader: Gauge,
    /// 1 for the comparator's gates in use, labelled with how they were chosen.
    pub comparator_info: Family<ComparatorLabels, Gauge>,
    /// 1 while the operator goes on without a cache whose list is refused.
    pub caches_gone_without: Family<CacheLabel, Gauge>,
}

/// Where the patcher's counters come from at scrape time (the current
/// leadership term's patcher; zeros while following).
pub type PatcherStatsSource = Box<dyn Fn() -> StatsSnapshot + Send + Sync>;

/// Reads the patcher's counters at scrape time.
struct PatcherCollector {
    stats: PatcherStatsSource,
    qps: f64,
}

impl std::fmt::Debug for PatcherCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatcherCollector")
            .field("qps", &self.qps)
            .finish_non_exhaustive()
    }
}

impl Collector for PatcherCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = (self.stats)();
        encode_patch_results(&mut encoder, &stats)?;
        encode_patch_errors(&mut encoder, &stats)?;
        encode_api_writes(&mut encoder, &stats)?;
        ConstGauge::new(i64::try_from(stats.permits_waiting).unwrap_or(i64::MAX)).encode(
            encoder.encode_descriptor(
                "deletion_cost_api_writes_waiting",
                "Writes other than pod patches (status, Events, the finalizer) waiting for their turn in the write budget",
                None,
                MetricType::Gauge,
            )?,
        )?;
        ConstGauge::new(i64::try_from(stats.queue_depth).unwrap_or(i64::MAX)).encode(
            encoder.encode_descriptor(
                "deletion_cost_patch_queue_depth",
                "Pods queued, in flight or waiting to retry",
                None,
                MetricType::Gauge,
            )?,
        )?;
        ConstCounter::new(stats.scale_in_allowance).encode(encoder.encode_descriptor(
            "deletion_cost_scale_in_allowance_writes",
            "Scale-in pod writes sent on the scale-in allowance (--scale-in-allowance), beyond --qps/--burst",
            None,
            MetricType::Counter,
        )?)?;
        ConstGauge::new(self.qps).encode(encoder.encode_descriptor(
            "deletion_cost_configured_qps",
            "Operator-wide write limit (--qps)",
            None,
            MetricType::Gauge,
        )?)?;
        encode_rate_limit_wait(&mut encoder, &stats)
    }
}

/// `deletion_cost_patches`: pod patches by result.
fn encode_patch_results(
    encoder: &mut DescriptorEncoder<'_>,
    stats: &StatsSnapshot,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        "deletion_cost_patches",
        "Pod patches by result (applied, gone, retried, failed, coalesced, rejected, abandoned)",
        None,
        MetricType::Counter,
    )?;
    for (result, v) in [
        ("applied", stats.applied),
        ("gone", stats.gone),
        ("retried", stats.retried),
        ("failed", stats.failed),
        ("coalesced", stats.coalesced),
        ("rejected", stats.rejected),
        ("abandoned", stats.abandoned),
    ] {
        let labels = ResultLabel {
            result: result.into(),
        };
        ConstCounter::new(v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// `deletion_cost_patch_errors`: failed pod write attempts by reason.
fn encode_patch_errors(
    encoder: &mut DescriptorEncoder<'_>,
    stats: &StatsSnapshot,
) -> Result<(), std::fmt::Error> {
    let mut errors = encoder.encode_descriptor(
        "deletion_cost_patch_errors",
        "Failed pod write attempts by reason (unauthorized: 401/403, rejected: other 4xx, ...)",
        None,
        MetricType::Counter,
    )?;
    for (reason, v) in ERROR_REASONS.iter().zip(stats.errors) {
        let labels = ReasonLabel {
            reason: (*reason).into(),
        };
        ConstCounter::new(v).encode(errors.encode_family(&labels)?)?;
    }
    Ok(())
}

/// `deletion_cost_api_writes`: every write in the budget by kind and outcome.
fn encode_api_writes(
    encoder: &mut DescriptorEncoder<'_>,
    stats: &StatsSnapshot,
) -> Result<(), std::fmt::Error> {
    let mut writes = encoder.encode_descriptor(
        "deletion_cost_api_writes",
        "Writes sent to the API server, every kind but the Lease's, within the one --qps/--burst budget (scale-ins' pod writes first on their --scale-in-allowance): by kind (pods, status, events, other: the finalizer) and outcome (ok, or why it failed)",
        None,
        MetricType::Counter,
    )?;
    for (kind, counts) in WriteKind::ALL.iter().zip(stats.writes) {
        for (outcome, v) in OUTCOMES.iter().zip(counts) {
            let labels = KindOutcome {
                kind: kind.label().into(),
                outcome: (*outcome).into(),
            };
            ConstCounter::new(v).encode(writes.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// `deletion_cost_rate_limit_wait_seconds`: the histogram of the time ready
/// writes were held back.
fn encode_rate_limit_wait(
    encoder: &mut DescriptorEncoder<'_>,
    stats: &StatsSnapshot,
) -> Result<(), std::fmt::Error> {
    let buckets: Vec<(f64, u64)> = WAIT_BUCKETS
        .iter()
        .copied()
        .chain([f64::INFINITY])
        .zip(stats.wait_buckets)
        .collect();
    let count = stats.wait_buckets.iter().sum();
    encoder
        .encode_descriptor(
            "deletion_cost_rate_limit_wait_seconds",
            "Time ready writes were held back by the rate limiters",
            None,
            MetricType::Histogram,
        )?
        .encode_histogram::<ResultLabel>(stats.rate_limit_wait.as_secs_f64(), count, &buckets, None)
}

impl Metrics {
    /// Registers every metric. `qps` is the operator-wide write limit;
    /// `patcher_stats` reads the patcher's counters at scrape time.
    pub fn new(qps: f64, patcher_stats: PatcherStatsSource) -> Self {
        let mut metrics = Self::unregistered();
        // registration order is the exposition order
        metrics.register_scale_in();
        metrics.register_priced();
        metrics.register_operator();
        metrics
            .registry
            .register_collector(Box::new(PatcherCollector {
                stats: patcher_stats,
                qps,
            }));
        metrics
    }

    /// Every metric at zero, in a registry that holds none of them yet.
    fn unregistered() -> Self {
        Self {
            registry: Registry::default(),
            reconciles: Family::default(),
            order_mismatches: Family::default(),
            signal_fetch_errors: Family::default(),
            hook_requests: Family::default(),
            hook_patch_observed: Histogram::new(HOOK_OBSERVED_BUCKETS.iter().copied()),
            scale_webhook_calls: Family::default(),
            scale_webhook_seconds: Histogram::new(WEBHOOK_BUCKETS.iter().copied()),
            scale_in_writes: Histogram::new(SCALE_IN_WRITES_BUCKETS.iter().copied()),
            scale_in_node_requests: Family::default(),
            scale_ins_priced: Family::default(),
            scale_in_victims: Family::default(),
            scale_in_freed_nodes: Family::default(),
            scale_in_freed_hourly: Family::default(),
            freed_nodes_settled: Family::default(),
            freed_hourly_settled: Family::default(),
            freed_nodes_awaiting: Family::default(),
            prices_reloads: Family::default(),
            leader: Gauge::default(),
            comparator_info: Family::default(),
            caches_gone_without: Family::default(),
        }
    }

    /// Registers the scale-in webhook's calls and time, and the pod writes
    /// per scale-in.
    fn register_scale_in(&mut self) {
        self.registry.register(
            "deletion_cost_scale_webhook_calls",
            "Scale-in admission webhook calls by outcome (fresh, shared, budget_exceeded, no_policy, dry_run, follower, writer_starting, signals_unavailable, planner_failed, writes_failed, unreachable, not_scale_in, rate_limited, unauthenticated, forbidden)",
            self.scale_webhook_calls.clone(),
        );
        self.registry.register(
            "deletion_cost_scale_in_writes",
            "Pod writes each scale-in made (the hook's and the webhook's minimal correction)",
            self.scale_in_writes.clone(),
        );
        self.registry.register(
            "deletion_cost_scale_in_node_requests",
            "API requests scale-ins sent to read their nodes' labels, by request (list: one per scale-in; get: a node the list could not select)",
            self.scale_in_node_requests.clone(),
        );
        self.registry.register(
            "deletion_cost_scale_webhook_seconds",
            "Scale-in admission webhook: time from the call to the answer (what it adds to a scale-in)",
            self.scale_webhook_seconds.clone(),
        );
    }

    /// Registers the priced scale-ins' figures, the freed nodes' fate and
    /// the prices file's reloads.
    fn register_priced(&mut self) {
        self.registry.register(
            "deletion_cost_scale_ins_priced",
            "Scale-ins priced as they happened (run --prices), by policy",
            self.scale_ins_priced.clone(),
        );
        self.registry.register(
            "deletion_cost_scale_in_victims",
            "Pods deleted by priced scale-ins, by policy and choice (policy: the pods the scale-in deleted; default: those the default order would have deleted without the policy's costs)",
            self.scale_in_victims.clone(),
        );
        self.registry.register(
            "deletion_cost_scale_in_freed_nodes",
            "Nodes priced scale-ins left without a pod that keeps them, by policy and choice",
            self.scale_in_freed_nodes.clone(),
        );
        self.registry.register(
            "deletion_cost_scale_in_freed_hourly",
            "Hourly prices (the prices file's currency) of the nodes priced scale-ins freed, summed, by policy and choice",
            self.scale_in_freed_hourly.clone(),
        );
        self.registry.register(
            "deletion_cost_freed_nodes_settled",
            "Nodes freed with the policy, by outcome: removed (the Node object went away within --node-removal-window) or not_removed",
            self.freed_nodes_settled.clone(),
        );
        self.registry.register(
            "deletion_cost_freed_hourly_settled",
            "Hourly prices of the nodes freed with the policy, by outcome (removed, not_removed)",
            self.freed_hourly_settled.clone(),
        );
        self.registry.register(
            "deletion_cost_freed_nodes_awaiting_removal",
            "Nodes freed with the policy whose removal window is still open",
            self.freed_nodes_awaiting.clone(),
        );
        self.registry.register(
            "deletion_cost_prices_reloads",
            "The --prices file read again after it changed, by result (ok; failed: the prices before it stay)",
            self.prices_reloads.clone(),
        );
    }

    /// Registers the reconciles, the order mismatches, the signal and hook
    /// figures, leadership and the comparator's gates.
    fn register_operator(&mut self) {
        self.registry.register(
            "deletion_cost_reconciles",
            "Policy reconciles by result",
            self.reconciles.clone(),
        );
        self.registry.register(
            "deletion_cost_order_mismatches",
            "Pods deleted before cheaper ones, by policy and reason",
            self.order_mismatches.clone(),
        );
        self.registry.register(
            "deletion_cost_signal_fetch_errors",
            "Signal fetch failures by policy and reason",
            self.signal_fetch_errors.clone(),
        );
        self.registry.register(
            "deletion_cost_hook_requests",
            "Pre-scale-down hook requests by outcome",
            self.hook_requests.clone(),
        );
        self.registry.register(
            "deletion_cost_hook_patch_observed_seconds",
            "Pre-scale-down hook: time from submitting patches to seeing them all in the pod cache",
            self.hook_patch_observed.clone(),
        );
        self.registry.register(
            "deletion_cost_leader",
            "1 while this replica leads and writes (with leader election: from the end of its term's catch-up, a quorum read of the pods)",
            self.leader.clone(),
        );
        self.registry.register(
            "deletion_cost_comparator_info",
            "The comparator's feature gates (1), by the Kubernetes version whose defaults apply and where it came from",
            self.comparator_info.clone(),
        );
        self.registry.register(
            "deletion_cost_cache_gone_without",
            "1 while the operator goes on without this cache because its list is refused (403); for nodes, billing-class signals give every pod their default",
            self.caches_gone_without.clone(),
        );
    }

    /// Counts a reading of the changed prices file.
    pub fn prices_reload(&self, result: &str) {
        self.prices_reloads
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }

    /// Counts a priced scale-in of `policy`.
    pub fn scale_in_priced(&self, policy: &str) {
        self.scale_ins_priced
            .get_or_create(&PolicyLabel {
                policy: policy.into(),
            })
            .inc();
    }

    /// Adds what one choice of a priced scale-in freed.
    pub fn scale_in_freed(
        &self,
        policy: &str,
        choice: ChoiceLabel,
        victims: usize,
        nodes: usize,
        hourly: f64,
    ) {
        let labels = PolicyChoice {
            policy: policy.into(),
            choice: choice.0.into(),
        };
        self.scale_in_victims
            .get_or_create(&labels)
            .inc_by(victims as u64);
        self.scale_in_freed_nodes
            .get_or_create(&labels)
            .inc_by(nodes as u64);
        self.scale_in_freed_hourly
            .get_or_create(&labels)
            .inc_by(hourly);
    }

    /// Counts what became of a node freed with the policy.
    pub fn freed_node_settled(&self, policy: &str, removed: bool, hourly: f64) {
        let labels = PolicyOutcome {
            policy: policy.into(),
            outcome: if removed { "removed" } else { "not_removed" }.into(),
        };
        self.freed_nodes_settled.get_or_create(&labels).inc();
        self.freed_hourly_settled
            .get_or_create(&labels)
            .inc_by(hourly);
    }

    /// Sets how many nodes freed with `policy` are watched.
    pub fn freed_nodes_awaiting(&self, policy: &str, n: usize) {
        self.freed_nodes_awaiting
            .get_or_create(&PolicyLabel {
                policy: policy.into(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Drops every watched-nodes series (a new leadership term counts
    /// afresh from the statuses).
    pub fn freed_nodes_awaiting_clear(&self) {
        self.freed_nodes_awaiting.clear();
    }

    /// Removes a deleted policy's priced scale-in series.
    pub fn forget_priced(&self, policy: &str) {
        let policy = policy.to_string();
        self.scale_ins_priced.remove(&PolicyLabel {
            policy: policy.clone(),
        });
        self.freed_nodes_awaiting.remove(&PolicyLabel {
            policy: policy.clone(),
        });
        for choice in ChoiceLabel::ALL {
            let labels = PolicyChoice {
                policy: policy.clone(),
                choice: choice.0.into(),
            };
            self.scale_in_victims.remove(&labels);
            self.scale_in_freed_nodes.remove(&labels);
            self.scale_in_freed_hourly.remove(&labels);
        }
        for outcome in ["removed", "not_removed"] {
            let labels = PolicyOutcome {
                policy: policy.clone(),
                outcome: outcome.into(),
            };
            self.freed_nodes_settled.remove(&labels);
            self.freed_hourly_settled.remove(&labels);
        }
    }

    /// Records the comparator's gates (chosen once, at start).
    pub fn comparator_chosen(&self, choice: &GateChoice) {
        self.comparator_info.clear();
        self.comparator_info
            .get_or_create(&ComparatorLabels {
                kubernetes_version: choice
                    .version
                    .map_or_else(|| "unknown".into(), |v| v.to_string()),
                source: choice.source.as_str().into(),
                logarithmic_scale_down: choice.gates.logarithmic_scale_down.to_string(),
                pod_deletion_cost: choice.gates.pod_deletion_cost.to_string(),
            })
            .set(1);
    }

    /// Sets `deletion_cost_cache_gone_without` (see
    /// [`crate::operator::sync::WatchHealth::report_gone_without`]). It
    /// holds the gauge only: a watch that holds it must not keep the
    /// metrics' source, the term's patcher, alive.
    pub fn gone_without_gauge(&self) -> impl Fn(&'static str, bool) + Send + Sync + 'static {
        let family = self.caches_gone_without.clone();
        move |cache, gone| {
            family
                .get_or_create(&CacheLabel {
                    cache: cache.into(),
                })
                .set(i64::from(gone));
        }
    }

    /// Counts one reconcile.
    pub fn reconciled(&self, result: &str) {
        self.reconciles
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }

    /// Counts one hook request by outcome.
    pub fn hook_request(&self, outcome: &str) {
        self.hook_requests
            .get_or_create(&OutcomeLabel {
                outcome: outcome.into(),
            })
            .inc();
    }

    /// Counts a scale-in webhook call and the time it took.
    pub fn scale_webhook_call(&self, outcome: &str, seconds: f64) {
        self.scale_webhook_calls
            .get_or_create(&OutcomeLabel {
                outcome: outcome.into(),
            })
            .inc();
        self.scale_webhook_seconds.observe(seconds);
    }

    /// Counts `n` API requests of kind `request` a scale-in sent to read its
    /// nodes.
    pub fn scale_in_node_requests(&self, request: &str, n: usize) {
        if n > 0 {
            self.scale_in_node_requests
                .get_or_create(&RequestLabel {
                    request: request.into(),
                })
                .inc_by(n as u64);
        }
    }

    /// Counts the pod writes one scale-in made.
    pub fn scale_in_writes(&self, writes: u64) {
        self.scale_in_writes.observe(writes as f64);
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding metrics");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_names_match_the_dashboard() {
        let m = Metrics::new(
            5.0,
            Box::new(|| {
                let mut s = StatsSnapshot::default();
                s.writes[1][0] = 7;
                s.writes[2][2] = 1;
                s.permits_waiting = 2;
                s.scale_in_allowance = 300;
                s
            }),
        );
        m.reconciled("ok");
        m.order_mismatches
            .get_or_create(&PolicyReason {
                policy: "shop/web".into(),
                reason: "NotReady".into(),
            })
            .set(2);
        m.leader.set(1);
        m.hook_request("ok");
        m.hook_patch_observed.observe(0.3);
        m.scale_in_priced("shop/web");
        m.scale_in_freed("shop/web", ChoiceLabel::POLICY, 2, 1, 0.0416);
        m.scale_in_freed("shop/web", ChoiceLabel::DEFAULT, 2, 0, 0.0);
        m.freed_node_settled("shop/web", true, 0.0416);
        m.freed_nodes_awaiting("shop/web", 0);
        let detected = crate::comparator::choose_gates(None, "1.36".parse().ok(), None);
        m.comparator_chosen(&detected.unwrap());
        m.gone_without_gauge()("nodes", true);
        let text = m.encode();
        for name in [
            "deletion_cost_reconciles_total{result=\"ok\"} 1",
            "deletion_cost_order_mismatches{policy=\"shop/web\",reason=\"NotReady\"} 2",
            "deletion_cost_leader 1",
            "deletion_cost_comparator_info{kubernetes_version=\"1.36\",source=\"detected\",logarithmic_scale_down=\"true\",pod_deletion_cost=\"true\"} 1",
            "deletion_cost_hook_requests_total{outcome=\"ok\"} 1",
            "deletion_cost_hook_patch_observed_seconds_bucket{le=\"0.5\"} 1",
            "deletion_cost_hook_patch_observed_seconds_count 1",
            "deletion_cost_patches_total{result=\"applied\"} 0",
            "deletion_cost_patch_errors_total{reason=\"unauthorized\"} 0",
            "deletion_cost_patch_queue_depth 0",
            "deletion_cost_configured_qps 5.0",
            "deletion_cost_rate_limit_wait_seconds_bucket{le=\"+Inf\"} 0",
            "deletion_cost_api_writes_total{kind=\"pods\",outcome=\"ok\"} 0",
            "deletion_cost_api_writes_total{kind=\"status\",outcome=\"ok\"} 7",
            "deletion_cost_api_writes_total{kind=\"events\",outcome=\"too_many_requests\"} 1",
            "deletion_cost_api_writes_total{kind=\"other\",outcome=\"rejected\"} 0",
            "deletion_cost_api_writes_waiting 2",
            "deletion_cost_scale_in_allowance_writes_total 300",
            "deletion_cost_scale_ins_priced_total{policy=\"shop/web\"} 1",
            "deletion_cost_scale_in_victims_total{policy=\"shop/web\",choice=\"policy\"} 2",
            "deletion_cost_scale_in_freed_nodes_total{policy=\"shop/web\",choice=\"policy\"} 1",
            "deletion_cost_scale_in_freed_nodes_total{policy=\"shop/web\",choice=\"default\"} 0",
            "deletion_cost_scale_in_freed_hourly_total{policy=\"shop/web\",choice=\"policy\"} 0.0416",
            "deletion_cost_freed_nodes_settled_total{policy=\"shop/web\",outcome=\"removed\"} 1",
            "deletion_cost_freed_hourly_settled_total{policy=\"shop/web\",outcome=\"removed\"} 0.0416",
            "deletion_cost_freed_nodes_awaiting_removal{policy=\"shop/web\"} 0",
            "deletion_cost_cache_gone_without{cache=\"nodes\"} 1",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
        // a deleted policy's series go with it
        m.forget_priced("shop/web");
        let text = m.encode();
        assert!(!text.contains("policy=\"shop/web\",choice"), "{text}");
        assert!(
            !text.contains("deletion_cost_freed_nodes_awaiting_removal{"),
            "{text}"
        );
    }
}
