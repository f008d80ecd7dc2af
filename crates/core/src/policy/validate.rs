//! Validation in code: turns a raw [`DeletionCostPolicySpec`] into a
//! [`ValidatedPolicy`] with defaults applied, durations parsed and the
//! combination checked against int32, so later stages never read the raw
//! custom resource. Pure; every error names the field it is about.
//!
//! The CRD schema rejects much of this at admission already; this module
//! covers what the schema cannot express (placeholders, duplicates, overflow)
//! and policies read from files, which never pass through an API server.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use super::types::{
    BillingClassSignal, BillingPreset, Combine, DeletionCostPolicySpec, LabelSelector,
    NodeConsolidationSignal, OnSignalMissing, RateLimit, Signal, TargetRef, UtilizationSignal,
    ValueRange, Writes, ZoneBalanceSignal,
};

/// Buckets of a utilisation signal when `buckets` is unset.
pub const DEFAULT_BUCKETS: u32 = 10;
/// Hysteresis of a utilisation signal when `hysteresis` is unset.
pub const DEFAULT_HYSTERESIS: f64 = 0.2;
/// Weight of a signal when `weight` is unset.
pub const DEFAULT_WEIGHT: i32 = 1;
/// Result label holding the pod name when `podLabel` is unset.
pub const DEFAULT_POD_LABEL: &str = "pod";
/// Age beyond which a sample is stale when `maxAge` is unset.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(10 * 60);
/// How often signals are re-read when `refreshInterval` is unset.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// Shortest accepted `refreshInterval`: one Prometheus query per policy per
/// refresh must stay cheap.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// Node pod count cap when `maxPods` is unset (kubelet's default max pods).
pub const DEFAULT_MAX_PODS: u32 = 110;
/// The most node slots a pod count gets (see [`NodeConsolidation::node_slots`]):
/// enough that nodes seldom want the same slot (among 40 nodes of one
/// count, a node's change moves another node's cost about once in a
/// hundred), small enough that a consolidation policy alone writes costs
/// below half a million (a few thousandths of a pod to Karpenter).
pub const MAX_NODE_SLOTS: u32 = 4096;
/// Per-zone replica count cap when `maxPerZone` is unset.
pub const DEFAULT_MAX_PER_ZONE: u32 = 1000;
/// Replicas zones may differ by when `maxSkew` is unset: strict round-robin.
pub const DEFAULT_MAX_SKEW: u32 = 1;
/// Node label holding the zone when `topologyKey` is unset.
pub const DEFAULT_TOPOLOGY_KEY: &str = "topology.kubernetes.io/zone";
/// Billing preset when neither `nodeLabel` nor `preset` is set.
pub const DEFAULT_PRESET: BillingPreset = BillingPreset::Auto;
/// Placeholders a PromQL query may use.
pub const QUERY_PLACEHOLDERS: [&str; 2] = ["namespace", "selector"];

/// One problem with a policy, at one field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// Field path from the object root, e.g. `spec.signals[1].utilization.buckets`.
    pub field: String,
    /// What is wrong and, where it helps, how to fix it.
    pub message: String,
}

impl ValidationError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Every problem found in a policy (never empty when returned as an error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Which pods a policy manages.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// Pods in the policy's namespace matching this (checked, non-empty) selector.
    Selector(LabelSelector),
    /// Pods of this Deployment or ReplicaSet in the policy's namespace.
    Workload(TargetRef),
}

/// Where a billing-class signal reads the class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BillingSource {
    /// A custom node label, its value used as the class as written.
    NodeLabel(String),
    /// Well-known labels, classes normalised to `spot` / `on-demand`.
    Preset(BillingPreset),
}

impl BillingSource {
    /// The node labels this source reads.
    pub fn node_labels(&self) -> Vec<&str> {
        match self {
            BillingSource::NodeLabel(l) => vec![l.as_str()],
            BillingSource::Preset(p) => p.node_labels().to_vec(),
        }
    }
}

impl BillingPreset {
    /// The node labels a preset reads, in the order `auto` tries them.
    pub fn node_labels(self) -> &'static [&'static str] {
        const ALL: [&str; 5] = [
            "karpenter.sh/capacity-type",
            "eks.amazonaws.com/capacityType",
            "cloud.google.com/gke-spot",
            "cloud.google.com/gke-preemptible",
            "kubernetes.azure.com/scalesetpriority",
        ];
        match self {
            BillingPreset::Auto => &ALL,
            BillingPreset::Karpenter => &ALL[0..1],
            BillingPreset::Eks => &ALL[1..2],
            BillingPreset::GkeSpot => &ALL[2..3],
            BillingPreset::GkePreemptible => &ALL[3..4],
            BillingPreset::Azure => &ALL[4..5],
        }
    }
}

/// A validated billing-class signal.
#[derive(Debug, Clone, PartialEq)]
pub struct BillingClass {
    /// Where the class comes from.
    pub source: BillingSource,
    /// Class -> cost; lower is deleted first.
    pub costs: BTreeMap<String, i32>,
    /// Cost for a node with no class or a class not in `costs`.
    pub default: i32,
    /// Class -> most pods of the workload to keep on it.
    pub budgets: BTreeMap<String, u32>,
    /// Weight under `combine: sum`.
    pub weight: i32,
}

impl BillingClass {
    /// The cost of a node's class (`None`: the node has no class).
    pub fn cost_of(&self, class: Option<&str>) -> i32 {
        class
            .and_then(|c| self.costs.get(c))
            .copied()
            .unwrap_or(self.default)
    }

    /// The value for a pod over its class's budget: one below every cost, so
    /// such pods go first. `None` when the signal has no budgets.
    pub fn over_budget_value(&self) -> Option<i64> {
        if self.budgets.is_empty() {
            return None;
        }
        Some(self.lowest_cost() - 1)
    }

    fn lowest_cost(&self) -> i64 {
        self.costs
            .values()
            .copied()
            .chain(std::iter::once(self.default))
            .min()
            .map_or(i64::from(self.default), i64::from)
    }

    fn highest_cost(&self) -> i64 {
        self.costs
            .values()
            .copied()
            .chain(std::iter::once(self.default))
            .max()
            .map_or(i64::from(self.default), i64::from)
    }
}

/// A validated utilisation signal.
#[derive(Debug, Clone, PartialEq)]
pub struct Utilization {
    /// PromQL with only `$namespace` / `$selector` placeholders.
    pub query: String,
    /// Result label holding the pod name.
    pub pod_label: String,
    /// Samples older than this are stale.
    pub max_age: Duration,
    /// Range quantised into buckets (`max > min`, both finite).
    pub range: ValueRange,
    /// Number of buckets (at least 1); values are `0..=buckets-1`.
    pub buckets: u32,
    /// Fraction of a bucket a value must pass a boundary by (in `[0, 1)`).
    pub hysteresis: f64,
    /// Value under `onSignalMissing: useDefault` (finite).
    pub default: Option<f64>,
    /// Weight under `combine: sum`.
    pub weight: i32,
}

/// A validated node-consolidation signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConsolidation {
    /// Node pod counts above this count as this (at least 1).
    pub max_pods: u32,
    /// Weight under `combine: sum`.
    pub weight: i32,
    /// Values each pod count has room for, one per node (at least 1): a
    /// node's value is `band * node_slots + its slot`, so nodes with equal
    /// counts still get different costs. Under `lexicographic` as many as
    /// int32 leaves beside the other signals, at most [`MAX_NODE_SLOTS`];
    /// under `sum` 1 (the count alone, as the weights mean it).
    pub node_slots: u32,
}

impl NodeConsolidation {
    /// The band of nodes no autoscaler may remove: after every count.
    pub fn blocked_band(&self) -> i64 {
        i64::from(self.max_pods) + 1
    }
}

/// A validated zone-balance signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneBalance {
    /// Node label holding the zone.
    pub topology_key: String,
    /// Per-zone replica counts above this count as this (at least 1).
    pub max_per_zone: u32,
    /// Replicas the zones may differ by before this signal decides (at
    /// least 1): within that the next signal picks.
    pub max_skew: u32,
    /// Weight under `combine: sum`.
    pub weight: i32,
}

/// One validated signal, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub enum ValidatedSignal {
    /// Cost by the node's billing class.
    BillingClass(BillingClass),
    /// Utilisation bucket from Prometheus.
    Utilization(Utilization),
    /// Pod count of the pod's node.
    NodeConsolidation(NodeConsolidation),
    /// Replica count of the pod's zone.
    ZoneBalance(ZoneBalance),
}

impl ValidatedSignal {
    /// The field name of this kind of signal (`billingClass`, ...).
    pub fn kind_name(&self) -> &'static str {
        match self {
            ValidatedSignal::BillingClass(_) => "billingClass",
            ValidatedSignal::Utilization(_) => "utilization",
            ValidatedSignal::NodeConsolidation(_) => "nodeConsolidation",
            ValidatedSignal::ZoneBalance(_) => "zoneBalance",
        }
    }

    /// Weight under `combine: sum` (ignored by `lexicographic`).
    pub fn weight(&self) -> i32 {
        match self {
            ValidatedSignal::BillingClass(s) => s.weight,
            ValidatedSignal::Utilization(s) => s.weight,
            ValidatedSignal::NodeConsolidation(s) => s.weight,
            ValidatedSignal::ZoneBalance(s) => s.weight,
        }
    }

    /// Inclusive range of the values this signal produces, `(min, max)`:
    /// billing class: lowest..highest of `costs` and `default` (one lower when
    /// budgets are set, see [`BillingClass::over_budget_value`]); utilisation:
    /// `0..=buckets-1`; node consolidation: `maxPods + 2` bands (the counts
    /// 0 to `maxPods`, then the nodes no autoscaler may remove) of
    /// `node_slots` values each; zone balance:
    /// `0..=maxPerZone`. [`ValidatedPolicy::combine`] clamps values into it.
    pub fn value_range(&self) -> (i64, i64) {
        match self {
            ValidatedSignal::BillingClass(b) => (
                b.over_budget_value().unwrap_or_else(|| b.lowest_cost()),
                b.highest_cost(),
            ),
            ValidatedSignal::Utilization(u) => (0, i64::from(u.buckets) - 1),
            ValidatedSignal::NodeConsolidation(n) => {
                (0, (n.blocked_band() + 1) * i64::from(n.node_slots) - 1)
            }
            ValidatedSignal::ZoneBalance(z) => (0, i64::from(z.max_per_zone)),
        }
    }

    /// Number of distinct values: `max - min + 1`.
    pub fn value_count(&self) -> i64 {
        let (min, max) = self.value_range();
        max - min + 1
    }
}

/// A policy that passed validation, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedPolicy {
    /// Which pods the policy manages.
    pub target: Target,
    /// Signals, most important first.
    pub signals: Vec<ValidatedSignal>,
    /// How signal values combine.
    pub combine: Combine,
    /// Written costs stay within `0..=max_cost` (at least 1), if set.
    pub max_cost: Option<i32>,
    /// How often signals are re-read.
    pub refresh_interval: Duration,
    /// This policy's write limit (`qps > 0`, `burst >= 1`), if set.
    pub rate_limit: Option<RateLimit>,
    /// What to do for a pod whose signal value is missing.
    pub on_signal_missing: OnSignalMissing,
    /// Never overwrite a cost this policy did not write.
    pub respect_foreign_costs: bool,
    /// When costs are written.
    pub writes: Writes,
    /// Per-signal factor of [`ValidatedPolicy::combine`].
    multipliers: Vec<i64>,
}

impl ValidatedPolicy {
    /// Per-signal factors, one per signal: under `lexicographic` the last is 1
    /// and each earlier one is the product of the later signals' value
    /// counts; under `sum` they are the weights.
    pub fn multipliers(&self) -> &[i64] {
        &self.multipliers
    }

    /// Combines one value per signal (in signal order) into a deletion cost.
    ///
    /// Each value is first clamped into its signal's
    /// [`ValidatedSignal::value_range`]; a missing trailing value counts as
    /// the signal's minimum, extra values are ignored.
    /// `lexicographic`: `sum((v - min) * multiplier)`, so a signal only
    /// matters where all earlier ones tie. `sum`: `sum(weight * v)`.
    /// Validation guarantees the result fits in int32; it is clamped anyway.
    pub fn combine(&self, values: &[i64]) -> i32 {
        let mut total: i128 = 0;
        for (i, (signal, m)) in self.signals.iter().zip(&self.multipliers).enumerate() {
            let (min, max) = signal.value_range();
            let v = values.get(i).copied().unwrap_or(min).clamp(min, max);
            total += match self.combine {
                Combine::Lexicographic => i128::from(v - min) * i128::from(*m),
                Combine::Sum => i128::from(v) * i128::from(*m),
            };
        }
        total.clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32
    }

    /// Labels that `$selector` in a query stands for: the selector's
    /// `matchLabels` (none for a `targetRef`).
    pub fn selector_labels(&self) -> BTreeMap<String, String> {
        match &self.target {
            Target::Selector(s) => s.match_labels.clone(),
            Target::Workload(_) => BTreeMap::new(),
        }
    }

    /// The utilisation signals with their index in `signals`.
    pub fn utilization_signals(&self) -> Vec<(usize, &Utilization)> {
        self.signals
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                ValidatedSignal::Utilization(u) => Some((i, u)),
                _ => None,
            })
            .collect()
    }

    /// `maxCost` when it changes what is written: when
    /// [`ValidatedPolicy::combined_range`] leaves `0..=maxCost`. Costs are then
    /// written as [`CostRanks`]; otherwise as combined.
    pub fn ranked_max_cost(&self) -> Option<i32> {
        let max = self.max_cost?;
        let (lo, hi) = self.combined_range();
        (lo < 0 || hi > i64::from(max)).then_some(max)
    }

    /// Inclusive range of [`ValidatedPolicy::combine`]'s results.
    pub fn combined_range(&self) -> (i64, i64) {
        match self.combine {
            Combine::Lexicographic => {
                let top: i64 = self
                    .signals
                    .iter()
                    .zip(&self.multipliers)
                    .map(|(s, m)| (s.value_count() - 1) * m)
                    .sum();
                (0, top)
            }
            Combine::Sum => {
                self.signals
                    .iter()
                    .zip(&self.multipliers)
                    .fold((0, 0), |(lo, hi), (s, w)| {
                        let (min, max) = s.value_range();
                        let (a, b) = (min * w, max * w);
                        (lo + a.min(b), hi + a.max(b))
                    })
            }
        }
    }
}

/// The costs written under `maxCost` (see [`ValidatedPolicy::ranked_max_cost`]):
/// each wanted cost's rank among the distinct wanted costs (0 for the
/// lowest), scaled down into `0..=max` when there are more than `max + 1` of
/// them. Equal costs get equal ranks and a lower cost never a higher rank;
/// a lower cost gets a strictly lower rank unless the ranks had to be scaled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostRanks {
    /// The distinct wanted costs, ascending.
    distinct: Vec<i32>,
    /// The highest written cost.
    max: i32,
}

impl CostRanks {
    /// Ranks `wanted` (any order, repeats allowed) into `0..=max` (`max >= 1`).
    pub fn new(wanted: impl IntoIterator<Item = i32>, max: i32) -> Self {
        let mut distinct: Vec<i32> = wanted.into_iter().collect();
        distinct.sort_unstable();
        distinct.dedup();
        Self {
            distinct,
            max: max.max(1),
        }
    }

    /// Whether some different costs had to share a written value: more
    /// distinct costs than `max + 1`.
    pub fn merges(&self) -> bool {
        self.distinct.len() > self.max as usize + 1
    }

    /// Number of distinct wanted costs.
    pub fn distinct(&self) -> usize {
        self.distinct.len()
    }

    /// The cost written for `wanted` (one of the costs given to [`CostRanks::new`];
    /// another value gets the rank it would have had).
    pub fn written(&self, wanted: i32) -> i32 {
        let rank = self.distinct.partition_point(|&c| c < wanted) as i64;
        let top = self.distinct.len().saturating_sub(1) as i64;
        let max = i64::from(self.max);
        let scaled = if top <= max { rank } else { rank * max / top };
        // at most `max`, an i32
        scaled.min(max) as i32
    }
}

/// Parses a duration: one or more whole numbers, each followed by `ms`, `s`,
/// `m` or `h` (`30s`, `5m`, `1h30m`, `1500ms`). Written by hand rather than
/// reusing Go-style parsers, which accept fractions and signs and can panic
/// on overflow.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.is_empty() {
        return Err("empty duration (write e.g. 30s, 5m, 1h30m)".into());
    }
    let mut rest = text;
    let mut total_ms: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(format!(
                "{text:?} is not a duration: expected a number at {rest:?} (write e.g. 30s, 5m, 1h30m)"
            ));
        }
        let (number, after) = rest.split_at(digits);
        let (unit_ms, unit_len) = if after.starts_with("ms") {
            (1, 2)
        } else if after.starts_with('s') {
            (1_000, 1)
        } else if after.starts_with('m') {
            (60_000, 1)
        } else if after.starts_with('h') {
            (3_600_000, 1)
        } else if after.is_empty() {
            return Err(format!(
                "{text:?} is not a duration: {number} has no unit (use ms, s, m or h)"
            ));
        } else {
            return Err(format!(
                "{text:?} is not a duration: unknown unit at {after:?} (use ms, s, m or h)"
            ));
        };
        let too_large = || format!("{text:?} is too large");
        let n: u64 = number.parse().map_err(|_| too_large())?;
        total_ms = n
            .checked_mul(unit_ms)
            .and_then(|ms| total_ms.checked_add(ms))
            .ok_or_else(too_large)?;
        rest = &after[unit_len..];
    }
    Ok(Duration::from_millis(total_ms))
}

/// Checks a PromQL query: non-empty, and every `$` starts `$namespace` or
/// `$selector`. Returns what is wrong.
pub fn check_query(query: &str) -> Result<(), String> {
    if query.trim().is_empty() {
        return Err("must not be empty".into());
    }
    let mut bad = Vec::new();
    for (i, _) in query.match_indices('$') {
        let after = &query[i + 1..];
        let word_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let word = &after[..word_len];
        if !QUERY_PLACEHOLDERS.contains(&word) {
            let shown = if word.is_empty() {
                "a lone `$`".to_string()
            } else {
                format!("`${word}`")
            };
            if !bad.contains(&shown) {
                bad.push(shown);
            }
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "unknown placeholder {} (only $namespace and $selector are replaced)",
            bad.join(", ")
        ))
    }
}

/// Validates a policy spec; on success every default is applied and the
/// combination is known to fit in int32. Field paths start at `spec`.
pub fn validate(spec: &DeletionCostPolicySpec) -> Result<ValidatedPolicy, ValidationErrors> {
    let mut errors = Vec::new();
    let target = validate_target(spec, &mut errors);

    let refresh_interval = validate_refresh_interval(spec, &mut errors);
    validate_rate_limit(spec, &mut errors);

    if spec.signals.is_empty() {
        errors.push(ValidationError::new(
            "spec.signals",
            "must list at least one signal",
        ));
    }
    let mut signals = Vec::new();
    for (i, raw) in spec.signals.iter().enumerate() {
        let at = format!("spec.signals[{i}]");
        if let Some(s) = validate_signal(&at, raw, spec, &mut errors) {
            signals.push((at, s));
        }
    }
    check_duplicates(&signals, &mut errors);

    let complete = signals.len() == spec.signals.len();
    let mut signals: Vec<ValidatedSignal> = signals.into_iter().map(|(_, s)| s).collect();
    give_node_slots(spec.combine, &mut signals);
    // Overflow is only meaningful once every signal's range is known.
    let multipliers = if complete && !signals.is_empty() {
        match combination_factors(spec.combine, &signals) {
            Ok(m) => m,
            Err(e) => {
                errors.push(e);
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };

    if let Some(max) = spec.max_cost.filter(|m| *m < 1) {
        errors.push(ValidationError::new(
            "spec.maxCost",
            format!("must be at least 1, found {max}"),
        ));
    }

    match target {
        Some(target) if errors.is_empty() => Ok(ValidatedPolicy {
            target,
            signals,
            combine: spec.combine,
            max_cost: spec.max_cost,
            refresh_interval,
            rate_limit: spec.rate_limit,
            on_signal_missing: spec.on_signal_missing,
            respect_foreign_costs: spec.respect_foreign_costs,
            writes: spec.writes,
            multipliers,
        }),
        _ => Err(ValidationErrors(errors)),
    }
}

/// `spec.refreshInterval`, its default when unset or wrong.
fn validate_refresh_interval(
    spec: &DeletionCostPolicySpec,
    errors: &mut Vec<ValidationError>,
) -> Duration {
    match &spec.refresh_interval {
        None => DEFAULT_REFRESH_INTERVAL,
        Some(text) => match parse_duration(text) {
            Ok(d) if d < MIN_REFRESH_INTERVAL => {
                errors.push(ValidationError::new(
                    "spec.refreshInterval",
                    format!("{text:?} is too short: must be at least 1s"),
                ));
                DEFAULT_REFRESH_INTERVAL
            }
            Ok(d) => d,
            Err(message) => {
                errors.push(ValidationError::new("spec.refreshInterval", message));
                DEFAULT_REFRESH_INTERVAL
            }
        },
    }
}

/// `spec.rateLimit`: a positive qps and a burst of at least 1.
fn validate_rate_limit(spec: &DeletionCostPolicySpec, errors: &mut Vec<ValidationError>) {
    if let Some(rl) = &spec.rate_limit {
        if !(rl.qps.is_finite() && rl.qps > 0.0) {
            errors.push(ValidationError::new(
                "spec.rateLimit.qps",
                format!("must be a number greater than 0, got {}", rl.qps),
            ));
        }
        if rl.burst < 1 {
            errors.push(ValidationError::new(
                "spec.rateLimit.burst",
                "must be at least 1",
            ));
        }
    }
}

fn validate_target(
    spec: &DeletionCostPolicySpec,
    errors: &mut Vec<ValidationError>,
) -> Option<Target> {
    match (&spec.selector, &spec.target_ref) {
        (Some(_), Some(_)) => {
            errors.push(ValidationError::new(
                "spec",
                "set exactly one of selector and targetRef, not both",
            ));
            None
        }
        (None, None) => {
            errors.push(ValidationError::new(
                "spec",
                "set exactly one of selector and targetRef (neither is set)",
            ));
            None
        }
        (Some(sel), None) => {
            if sel.is_empty() {
                errors.push(ValidationError::new(
                    "spec.selector",
                    "must not be empty (it would select every pod in the namespace); set matchLabels or matchExpressions",
                ));
                return None;
            }
            if let Err(e) = sel.check() {
                errors.push(ValidationError::new("spec.selector", e.to_string()));
                return None;
            }
            Some(Target::Selector(sel.clone()))
        }
        (None, Some(r)) => {
            if r.name.is_empty() {
                errors.push(ValidationError::new(
                    "spec.targetRef.name",
                    "must not be empty",
                ));
                return None;
            }
            Some(Target::Workload(r.clone()))
        }
    }
}

fn weight_of(
    at: &str,
    weight: Option<i32>,
    combine: Combine,
    errors: &mut Vec<ValidationError>,
) -> i32 {
    let w = weight.unwrap_or(DEFAULT_WEIGHT);
    if w == 0 && combine == Combine::Sum {
        errors.push(ValidationError::new(
            format!("{at}.weight"),
            "must not be 0 under combine: sum (the signal would do nothing; remove it instead)",
        ));
    }
    w
}

fn validate_signal(
    at: &str,
    raw: &Signal,
    spec: &DeletionCostPolicySpec,
    errors: &mut Vec<ValidationError>,
) -> Option<ValidatedSignal> {
    let set: Vec<&str> = [
        raw.billing_class.is_some().then_some("billingClass"),
        raw.utilization.is_some().then_some("utilization"),
        raw.node_consolidation
            .is_some()
            .then_some("nodeConsolidation"),
        raw.zone_balance.is_some().then_some("zoneBalance"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if set.len() != 1 {
        let found = if set.is_empty() {
            "none is set".to_string()
        } else {
            format!("found {}", set.join(", "))
        };
        errors.push(ValidationError::new(
            at,
            format!(
                "set exactly one of billingClass, utilization, nodeConsolidation, zoneBalance ({found})"
            ),
        ));
        return None;
    }
    let before = errors.len();
    let signal = if let Some(b) = &raw.billing_class {
        ValidatedSignal::BillingClass(billing_class(
            &format!("{at}.billingClass"),
            b,
            spec,
            errors,
        ))
    } else if let Some(u) = &raw.utilization {
        ValidatedSignal::Utilization(utilization(&format!("{at}.utilization"), u, spec, errors))
    } else if let Some(n) = &raw.node_consolidation {
        ValidatedSignal::NodeConsolidation(node_consolidation(
            &format!("{at}.nodeConsolidation"),
            n,
            spec,
            errors,
        ))
    } else if let Some(z) = &raw.zone_balance {
        ValidatedSignal::ZoneBalance(zone_balance(&format!("{at}.zoneBalance"), z, spec, errors))
    } else {
        return None;
    };
    (errors.len() == before).then_some(signal)
}

fn billing_class(
    at: &str,
    b: &BillingClassSignal,
    spec: &DeletionCostPolicySpec,
    errors: &mut Vec<ValidationError>,
) -> BillingClass {
    let source = match (&b.node_label, b.preset) {
        (Some(label), Some(_)) => {
            errors.push(ValidationError::new(
                at,
                "set nodeLabel or preset, not both",
            ));
            // as a label, so the preset class check adds no second error
            BillingSource::NodeLabel(label.clone())
        }
        (Some(label), None) => {
            if label.trim().is_empty() {
                errors.push(ValidationError::new(
                    format!("{at}.nodeLabel"),
                    "must not be empty",
                ));
            }
            BillingSource::NodeLabel(label.clone())
        }
        (None, preset) => BillingSource::Preset(preset.unwrap_or(DEFAULT_PRESET)),
    };
    for (field, keys) in [
        ("costs", b.costs.keys().collect::<Vec<_>>()),
        ("budgets", b.budgets.keys().collect()),
    ] {
        for key in keys {
            if key.is_empty() {
                errors.push(ValidationError::new(
                    format!("{at}.{field}"),
                    "class names must not be empty",
                ));
            } else if matches!(source, BillingSource::Preset(_))
                && *key != key.trim().to_ascii_lowercase()
            {
                // presets lower-case what they read (SPOT -> spot)
                errors.push(ValidationError::new(
                    format!("{at}.{field}.{key}"),
                    format!(
                        "presets produce lower-case classes (spot, on-demand, reserved), so {key:?} never matches; write {:?}, or use nodeLabel to read classes as written",
                        key.trim().to_ascii_lowercase()
                    ),
                ));
            }
        }
    }
    BillingClass {
        source,
        costs: b.costs.clone(),
        default: b.default,
        budgets: b.budgets.clone(),
        weight: weight_of(at, b.weight, spec.combine, errors),
    }
}

fn utilization(
    at: &str,
    u: &UtilizationSignal,
    spec: &DeletionCostPolicySpec,
    errors: &mut Vec<ValidationError>,
) -> Utilization {
    let mut err = |field: &str, message: String| {
        errors.push(ValidationError::new(format!("{at}.{field}"), message));
    };
    if let Err(message) = check_query(&u.prometheus.query) {
        err("prometheus.query", message);
    }
    let pod_label = u
        .prometheus
        .pod_label
        .clone()
        .unwrap_or_else(|| DEFAULT_POD_LABEL.to_string());
    if pod_label.trim().is_empty() {
        err("prometheus.podLabel", "must not be empty".into());
    }
    let max_age = max_age_of(&u.prometheus.max_age, &mut err);
    let range = u.range;
    check_range(range, &mut err);
    let buckets = u.buckets.unwrap_or(DEFAULT_BUCKETS);
    if buckets < 1 {
        err("buckets", "must be at least 1".into());
    }
    let hysteresis = u.hysteresis.unwrap_or(DEFAULT_HYSTERESIS);
    if !(0.0..1.0).contains(&hysteresis) {
        err(
            "hysteresis",
            format!("must be at least 0 and below 1, got {hysteresis}"),
        );
    }
    match u.default {
        Some(d) if !d.is_finite() => err("default", format!("must be a finite number, got {d}")),
        None if spec.on_signal_missing == OnSignalMissing::UseDefault => err(
            "default",
            "must be set when spec.onSignalMissing is useDefault".into(),
        ),
        _ => {}
    }
    Utilization {
        query: u.prometheus.query.clone(),
        pod_label,
        max_age,
        range,
        buckets,
        hysteresis,
        default: u.default,
        weight: weight_of(at, u.weight, spec.combine, errors),
    }
}

/// A utilisation signal's `prometheus.maxAge`, its default when unset or
/// wrong (`err` takes the field under the signal and the problem).
fn max_age_of(max_age: &Option<String>, err: &mut impl FnMut(&str, String)) -> Duration {
    match max_age {
        None => DEFAULT_MAX_AGE,
        Some(text) => match parse_duration(text) {
            Ok(d) if d.is_zero() => {
                err("prometheus.maxAge", "must be greater than 0".into());
                DEFAULT_MAX_AGE
            }
            Ok(d) => d,
            Err(message) => {
                err("prometheus.maxAge", message);
                DEFAULT_MAX_AGE
            }
        },
    }
}

/// A utilisation signal's `range`: finite ends, `max` above `min`.
fn check_range(range: ValueRange, err: &mut impl FnMut(&str, String)) {
    if !range.min.is_finite() {
        err(
            "range.min",
            format!("must be a finite number, got {}", range.min),
        );
    }
    if !range.max.is_finite() {
        err(
            "range.max",
            format!("must be a finite number, got {}", range.max),
        );
    }
    if range.min.is_finite() && range.max.is_finite() && range.max <= range.min {
        err(
            "range.max",
            format!(
                "must be greater than range.min ({} <= {})",
                range.max, range.min
            ),
        );
    }
}

fn node_consolidation(
    at: &str,
    n: &NodeConsolidationSignal,
    spec: &DeletionCostPolicySpec,
    errors: &mut Vec<ValidationError>,
) -> NodeConsolidation {
    let max_pods = n.max_pods.unwrap_or(DEFAULT_MAX_PODS);
    if max_pods < 1 {
        errors.push(ValidationError::new(
            format!("{at}.maxPods"),
            "must be at least 1",
        ));
    }
    NodeConsolidation {
        max_pods,
        weight: weight_of(at, n.weight, spec.combine, errors),
        // set once every signal's range is known
        node_slots: 1,
    }
}

/// Gives a consolidation signal under `lexicographic` as many node slots as
/// int32 leaves beside the other signals (at most [`MAX_NODE_SLOTS`], at
/// least 1: a policy that does not fit even then fails the overflow check).
fn give_node_slots(combine: Combine, signals: &mut [ValidatedSignal]) {
    let consolidations = signals
        .iter()
        .filter(|s| matches!(s, ValidatedSignal::NodeConsolidation(_)))
        .count();
    // two consolidation signals are an error of their own (duplicates)
    if combine != Combine::Lexicographic || consolidations != 1 {
        return;
    }
    let others: i128 = signals
        .iter()
        .filter(|s| !matches!(s, ValidatedSignal::NodeConsolidation(_)))
        .map(|s| i128::from(s.value_count()))
        .product();
    for s in signals.iter_mut() {
        if let ValidatedSignal::NodeConsolidation(n) = s {
            let bands = i128::from(n.blocked_band()) + 1;
            let room = (i128::from(i32::MAX) + 1) / (others * bands).max(1);
            n.node_slots = room.clamp(1, i128::from(MAX_NODE_SLOTS)) as u32;
        }
    }
}

fn zone_balance(
    at: &str,
    z: &ZoneBalanceSignal,
    spec: &DeletionCostPolicySpec,
    errors: &mut Vec<ValidationError>,
) -> ZoneBalance {
    let topology_key = z
        .topology_key
        .clone()
        .unwrap_or_else(|| DEFAULT_TOPOLOGY_KEY.to_string());
    if topology_key.trim().is_empty() {
        errors.push(ValidationError::new(
            format!("{at}.topologyKey"),
            "must not be empty",
        ));
    }
    let max_per_zone = z.max_per_zone.unwrap_or(DEFAULT_MAX_PER_ZONE);
    if max_per_zone < 1 {
        errors.push(ValidationError::new(
            format!("{at}.maxPerZone"),
            "must be at least 1",
        ));
    }
    let max_skew = z.max_skew.unwrap_or(DEFAULT_MAX_SKEW);
    if max_skew < 1 {
        errors.push(ValidationError::new(
            format!("{at}.maxSkew"),
            "must be at least 1",
        ));
    }
    ZoneBalance {
        topology_key,
        max_per_zone,
        max_skew,
        weight: weight_of(at, z.weight, spec.combine, errors),
    }
}

/// What a signal reads, for duplicate detection: two signals that read the
/// same data order pods the same way and only distort the combination.
fn reads(signal: &ValidatedSignal) -> (&'static str, BTreeSet<String>) {
    let one = |s: &str| BTreeSet::from([s.to_string()]);
    match signal {
        ValidatedSignal::BillingClass(b) => (
            "node label",
            b.source
                .node_labels()
                .into_iter()
                .map(String::from)
                .collect(),
        ),
        ValidatedSignal::Utilization(u) => (
            "query",
            one(&format!(
                "{} by {}",
                u.query.split_whitespace().collect::<Vec<_>>().join(" "),
                u.pod_label
            )),
        ),
        ValidatedSignal::NodeConsolidation(_) => ("data", one("pods per node")),
        ValidatedSignal::ZoneBalance(z) => ("topology key", one(&z.topology_key)),
    }
}

fn check_duplicates(signals: &[(String, ValidatedSignal)], errors: &mut Vec<ValidationError>) {
    for (j, (at_j, sj)) in signals.iter().enumerate() {
        let (what, reads_j) = reads(sj);
        for (at_i, si) in &signals[..j] {
            if si.kind_name() != sj.kind_name() {
                continue;
            }
            let (_, reads_i) = reads(si);
            let shared: Vec<&str> = reads_i.intersection(&reads_j).map(String::as_str).collect();
            if !shared.is_empty() {
                errors.push(ValidationError::new(
                    format!("{at_j}.{}", sj.kind_name()),
                    format!(
                        "duplicates {at_i}: both read the same {what} ({}); keep one",
                        shared.join(", ")
                    ),
                ));
                break;
            }
        }
    }
}

/// Multipliers (lexicographic) or weights (sum), after checking the
/// combined value always fits in int32.
fn combination_factors(
    combine: Combine,
    signals: &[ValidatedSignal],
) -> Result<Vec<i64>, ValidationError> {
    let limit = i128::from(i32::MAX);
    match combine {
        Combine::Lexicographic => {
            // From the last signal back: the multiplier of a signal is the
            // number of combinations of all later signals.
            let mut multipliers = vec![0i64; signals.len()];
            let mut product: i128 = 1;
            for (i, s) in signals.iter().enumerate().rev() {
                // `product` fits in int32 here, so in i64 too.
                multipliers[i] = product as i64;
                product *= i128::from(s.value_count());
                if product - 1 > limit {
                    let sizes: Vec<String> = signals[i..]
                        .iter()
                        .enumerate()
                        .map(|(k, s)| {
                            format!(
                                "signals[{}] {} has {} values",
                                i + k,
                                s.kind_name(),
                                s.value_count()
                            )
                        })
                        .collect();
                    return Err(ValidationError::new(
                        "spec.signals",
                        format!(
                            "lexicographic combination overflows int32 at signals[{i}]: {} (product {}, at most {} fit); use fewer buckets, smaller cost ranges or lower maxPods/maxPerZone",
                            sizes.join(", "),
                            product,
                            limit + 1
                        ),
                    ));
                }
            }
            Ok(multipliers)
        }
        Combine::Sum => {
            let mut bound: i128 = 0;
            let mut terms = Vec::new();
            for (i, s) in signals.iter().enumerate() {
                let (min, max) = s.value_range();
                let term = i128::from(s.weight()).abs() * i128::from(min.abs().max(max.abs()));
                bound += term;
                terms.push(format!(
                    "signals[{i}] {}: |weight {}| * {} = {term}",
                    s.kind_name(),
                    s.weight(),
                    min.abs().max(max.abs())
                ));
            }
            if bound > limit {
                return Err(ValidationError::new(
                    "spec.signals",
                    format!(
                        "weighted sum can overflow int32: {} (total {bound}, at most {limit}); use smaller weights or costs",
                        terms.join(", ")
                    ),
                ));
            }
            Ok(signals.iter().map(|s| i64::from(s.weight())).collect())
        }
    }
}

#[cfg(test)]
mod tests;
