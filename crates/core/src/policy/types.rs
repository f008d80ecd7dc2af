//! The `DeletionCostPolicy` custom resource (`deletioncost.dev/v1alpha1`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the schema accepts as a duration: whole numbers with `ms`, `s`, `m`
/// or `h`, e.g. `30s`, `5m`, `1h30m` (see [`crate::policy::validate::parse_duration`]).
pub const DURATION_PATTERN: &str = "^([0-9]+(ms|s|m|h))+$";

/// Most signals a policy may list. Bounds the CEL cost estimate of the
/// per-signal rules at admission; real policies use two or three.
pub const MAX_SIGNALS: usize = 16;

/// Which pods a policy manages and how their deletion cost is computed.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(
    crates(kube_core = "::kube_core"),
    doc = "A DeletionCostPolicy sets controller.kubernetes.io/pod-deletion-cost on the pods it selects, from node billing class, utilisation, node consolidation and zone balance.",
    group = "deletioncost.dev",
    version = "v1alpha1",
    kind = "DeletionCostPolicy",
    plural = "deletioncostpolicies",
    shortname = "dcp",
    namespaced,
    status = "DeletionCostPolicyStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Managed","type":"integer","jsonPath":".status.managedPods"}"#,
    printcolumn = r#"{"name":"Order","type":"string","jsonPath":".status.conditions[?(@.type==\"OrderAsIntended\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("has(self.selector) != has(self.targetRef)").message("exactly one of selector and targetRef must be set"))]
#[serde(rename_all = "camelCase")]
#[schemars(transform = kubernetes_formats)]
pub struct DeletionCostPolicySpec {
    /// Pods in the policy's namespace with these labels. Exactly one of
    /// `selector` and `targetRef` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)").message("selector must not be empty (it would select every pod in the namespace)"))]
    pub selector: Option<LabelSelector>,
    /// A Deployment or ReplicaSet in the policy's namespace whose pods are managed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_ref: Option<TargetRef>,
    /// Signals, most important first (for `lexicographic`).
    #[schemars(length(min = 1, max = MAX_SIGNALS))]
    pub signals: Vec<Signal>,
    /// How signal values combine into one cost.
    #[serde(default)]
    pub combine: Combine,
    /// Keep the written costs within `0..=maxCost`, in the policy's order.
    /// When the combined costs can leave that range, each pod is written the
    /// rank of its cost among the policy's pods instead (0 for the lowest,
    /// equal costs equal ranks), scaled down to fit when they want more than
    /// `maxCost + 1` distinct costs. Karpenter adds `cost / 2^27` to a pod's
    /// eviction cost: a small range keeps the policy out of its consolidation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_cost: Option<i32>,
    /// How often signals are re-read, as a duration (`30s`, `5m`, `1h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub refresh_interval: Option<String>,
    /// This policy's share of the operator-wide write limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// What to do for a pod whose signal value is missing or unusable.
    #[serde(default)]
    pub on_signal_missing: OnSignalMissing,
    /// Never overwrite a cost this policy did not write (default true).
    #[serde(default = "default_true")]
    pub respect_foreign_costs: bool,
    /// When costs are written: `Continuous` (default) keeps every pod's
    /// cost current in the background; `OnScaleIn` writes only what a
    /// scale-in needs, when the scale-in webhook or the pre-scale-down hook
    /// sees it (API writes follow scale-ins, not signal changes).
    #[serde(default, skip_serializing_if = "Writes::is_continuous")]
    pub writes: Writes,
}

fn default_true() -> bool {
    true
}

/// Rewrites the schema's numeric formats into the ones Kubernetes knows:
/// `int32` and `int64` for integers, `float` and `double` for numbers. The
/// API server warns about any other (`unrecognized format "uint32"`) at
/// every apply of the CRD, and ignores it when validating; schemars names
/// Rust's unsigned and small types `uint32`, `uint8`, `int16`... Such a
/// field loses the format and keeps its range as `minimum`/`maximum`
/// (`u32`: 0 to 4294967295), which the API server does enforce.
fn kubernetes_formats(schema: &mut schemars::Schema) {
    schemars::transform::transform_subschemas(&mut kubernetes_formats, schema);
    let Some(node) = schema.as_object_mut() else {
        return;
    };
    // an `Option`'s type is `["integer", "null"]` until kube makes it `nullable`
    let ty = match node.get("type") {
        Some(serde_json::Value::String(t)) => Some(t.as_str()),
        Some(serde_json::Value::Array(types)) => types
            .iter()
            .filter_map(|t| t.as_str())
            .find(|t| *t != "null"),
        _ => None,
    };
    let known: &[&str] = match ty {
        Some("integer") => &["int32", "int64"],
        Some("number") => &["float", "double"],
        _ => return,
    };
    let Some(format) = node.get("format").and_then(|f| f.as_str()) else {
        return;
    };
    if known.contains(&format) {
        return;
    }
    // u8, u16, i8 and i16 come with both bounds; u32 with its minimum only
    let maximum = match format {
        "uint32" => Some(u32::MAX),
        _ => None,
    };
    node.remove("format");
    if let Some(max) = maximum {
        node.entry("maximum").or_insert(max.into());
    }
}

/// A label selector (the `matchLabels`/`matchExpressions` of Kubernetes).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must all be present with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements, all of which must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One set-based selector requirement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    #[schemars(extend("enum" = ["In", "NotIn", "Exists", "DoesNotExist"]))]
    pub operator: String,
    /// Values for `In`/`NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A workload in the policy's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    /// `Deployment` or `ReplicaSet`.
    pub kind: TargetKind,
    /// Its name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// Kinds a `targetRef` may name.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum TargetKind {
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 ReplicaSet.
    ReplicaSet,
}

/// One signal. Exactly one field is set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(validation = Rule::new("(has(self.billingClass) ? 1 : 0) + (has(self.utilization) ? 1 : 0) + (has(self.nodeConsolidation) ? 1 : 0) + (has(self.zoneBalance) ? 1 : 0) == 1").message("each signal sets exactly one of billingClass, utilization, nodeConsolidation, zoneBalance"))]
#[serde(rename_all = "camelCase")]
pub struct Signal {
    /// Cost by the node's billing class (spot, on-demand, pay-as-you-go...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billing_class: Option<BillingClassSignal>,
    /// Cost by utilisation from Prometheus: less utilised pods go first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization: Option<UtilizationSignal>,
    /// Pods on nodes holding fewer pods go first, so nodes empty out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_consolidation: Option<NodeConsolidationSignal>,
    /// Pods in the zone holding most replicas go first, keeping zones even.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_balance: Option<ZoneBalanceSignal>,
}

/// Well-known node labels that carry the billing class.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BillingPreset {
    /// Try every preset below, in this order.
    Auto,
    /// `karpenter.sh/capacity-type`: `spot` / `on-demand`.
    Karpenter,
    /// `eks.amazonaws.com/capacityType`: `SPOT` / `ON_DEMAND`.
    Eks,
    /// `cloud.google.com/gke-spot`: `"true"` means spot.
    GkeSpot,
    /// `cloud.google.com/gke-preemptible`: `"true"` means spot.
    GkePreemptible,
    /// `kubernetes.azure.com/scalesetpriority`: `spot` / `regular`.
    Azure,
}

/// Billing-class signal.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(validation = Rule::new("!(has(self.nodeLabel) && has(self.preset))").message("set nodeLabel or preset, not both"))]
#[serde(rename_all = "camelCase")]
pub struct BillingClassSignal {
    /// A custom node label whose value is the class, used as written.
    /// When unset, `preset` decides (default `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub node_label: Option<String>,
    /// Which well-known labels to read when `nodeLabel` is unset. Presets
    /// normalise classes to `spot` and `on-demand`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<BillingPreset>,
    /// Class -> cost; lower is deleted first.
    pub costs: BTreeMap<String, i32>,
    /// Cost for a node with no class or a class not in `costs`.
    #[serde(default)]
    pub default: i32,
    /// Keep at most this many of the workload's pods on a class; pods over
    /// the budget are deleted first.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub budgets: BTreeMap<String, u32>,
    /// Multiplier under `combine: sum` (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// A Prometheus instant query.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusQuery {
    /// PromQL; `$namespace` and `$selector` are replaced before it is sent.
    #[schemars(length(min = 1))]
    pub query: String,
    /// Result label that holds the pod name (default `pod`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub pod_label: Option<String>,
    /// Samples older than this are treated as missing (default `10m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub max_age: Option<String>,
}

/// The value range a utilisation maps onto buckets.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(validation = Rule::new("self.max > self.min").message("range.max must be greater than range.min"))]
pub struct ValueRange {
    /// Values at or below go to bucket 0.
    pub min: f64,
    /// Values at or above go to the last bucket.
    pub max: f64,
}

/// Utilisation signal.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct UtilizationSignal {
    /// One query per refresh for all the policy's pods.
    pub prometheus: PrometheusQuery,
    /// Range quantised into `buckets`.
    pub range: ValueRange,
    /// Number of buckets (default 10); small drifts inside a bucket change nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub buckets: Option<u32>,
    /// A value must move this fraction of a bucket past a boundary before the
    /// bucket changes (default 0.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    #[x_kube(validation = Rule::new("self >= 0.0 && self < 1.0").message("hysteresis must be at least 0 and below 1"))]
    pub hysteresis: Option<f64>,
    /// Value used under `onSignalMissing: useDefault`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<f64>,
    /// Multiplier under `combine: sum` (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// Node-consolidation signal.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeConsolidationSignal {
    /// Counts above this are treated as this (default 110, kubelet's max pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_pods: Option<u32>,
    /// Multiplier under `combine: sum` (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// Zone-balance signal.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZoneBalanceSignal {
    /// Node label holding the zone (default `topology.kubernetes.io/zone`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub topology_key: Option<String>,
    /// Replica counts per zone above this are treated as this (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_per_zone: Option<u32>,
    /// Replicas the zones may differ by before zone balance decides
    /// (default 1: strict round-robin). Within that, the next signal picks:
    /// with `nodeConsolidation` after it, whole nodes go, and zone balance
    /// counts whole nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_skew: Option<u32>,
    /// Multiplier under `combine: sum` (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// How signal values combine.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Combine {
    /// Earlier signals dominate; later ones only break ties.
    #[default]
    Lexicographic,
    /// Weighted sum, clamped to int32.
    Sum,
}

/// Per-policy write limit.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, KubeSchema)]
#[x_kube(crates(kube_core = "::kube_core"))]
pub struct RateLimit {
    /// Sustained patches per second.
    #[x_kube(validation = Rule::new("self > 0.0").message("rateLimit.qps must be greater than 0"))]
    pub qps: f64,
    /// Patches allowed at once.
    #[schemars(range(min = 1))]
    pub burst: u32,
}

/// When a policy's costs are written.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Writes {
    /// Every pod's cost is kept current in the background, and a scale-in
    /// corrects what it needs on top.
    #[default]
    Continuous,
    /// Nothing in the background: only the costs a scale-in needs, when the
    /// scale-in webhook or the pre-scale-down hook sees it.
    OnScaleIn,
}

impl Writes {
    /// Whether this is the default.
    pub fn is_continuous(&self) -> bool {
        *self == Writes::Continuous
    }
}

/// Behaviour for a pod whose signal value is missing, NaN, stale or duplicated.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OnSignalMissing {
    /// Leave the pod's current cost as it is (no patch).
    #[default]
    KeepLastValue,
    /// Compute the cost without that signal (it contributes its lowest value).
    Skip,
    /// Use the signal's `default`.
    UseDefault,
}

/// Observed state, written by the operator.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = kubernetes_formats)]
pub struct DeletionCostPolicyStatus {
    /// `Ready`, `OrderAsIntended`, `SignalsAvailable`, `Conflict`, `ScaleInsFresh`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods carrying a cost this policy wrote.
    #[serde(default)]
    pub managed_pods: u32,
    /// Selected pods whose cost Karpenter manages
    /// (`karpenter.sh/managed-deletion-cost`): left alone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub karpenter_pods: u32,
    /// Patches computed but not yet observed.
    #[serde(default)]
    pub pending_patches: u32,
    /// When signals were last read (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refresh: Option<String>,
    /// First pods each ReplicaSet would delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub victims: Vec<ReplicaSetVictims>,
    /// First differences between intended and predicted order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mismatches: Vec<MismatchStatus>,
    /// Scale-ins of the policy's workloads made fresh, and by whom: kept
    /// here so a restart or a new leader goes on counting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_ins: Option<ScaleInsStatus>,
    /// Scale-ins priced as they happened (`run --prices`): what the pods
    /// the policy sent freed against what the default order's would have,
    /// and whether the autoscaler then removed those nodes. Running totals,
    /// kept here so a restart or a new leader goes on from them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priced_scale_ins: Option<PricedScaleIns>,
}

/// Scale-ins made fresh, as the status keeps them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleInsStatus {
    /// Made fresh by the pre-scale-down hook.
    #[serde(default)]
    pub by_hook: u32,
    /// Made fresh by the scale-in webhook.
    #[serde(default)]
    pub by_webhook: u32,
    /// The last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<LastScaleIn>,
}

/// The last scale-in made fresh.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastScaleIn {
    /// When (RFC 3339).
    pub at: String,
    /// `hook` or `webhook`.
    pub by: String,
    /// The workload, as `Deployment shop/web`.
    pub workload: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// Running totals of the scale-ins priced as they happened. Amounts are
/// decimal strings in the prices' currency (per hour: the sum of the hourly
/// prices of the nodes each scale-in freed), kept to a millionth.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PricedScaleIns {
    /// Scale-ins priced (by the scale-in webhook or the pre-scale-down hook).
    #[serde(default)]
    pub priced: u64,
    /// The prices' currency, when they name one (never converted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// What the pods each scale-in deleted freed (the policy's order).
    #[serde(default)]
    pub with_policy: FreedTotals,
    /// What the pods the default order would have deleted (without the
    /// policy's costs) would have freed, over the same pods and nodes.
    #[serde(default)]
    pub by_default: FreedTotals,
    /// Nodes freed with the policy whose Node object went away within the
    /// removal window: the autoscaler removed them.
    #[serde(default)]
    pub removed: NodeTotals,
    /// Nodes freed with the policy still there when their window ended.
    #[serde(default)]
    pub not_removed: NodeTotals,
    /// Nodes freed with the policy, watched until their window ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaiting_removal: Vec<AwaitingRemoval>,
    /// The last scale-in priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<LastPricedScaleIn>,
}

/// What one choice of victims freed, summed over scale-ins.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FreedTotals {
    /// Pods deleted.
    #[serde(default)]
    pub victims: u64,
    /// Nodes left without a pod that keeps them (and no annotation that
    /// keeps them from an autoscaler).
    #[serde(default)]
    pub nodes: u64,
    /// Of those, nodes the prices do not cover (left out of `hourly`).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub unpriced_nodes: u64,
    /// The freed nodes' hourly prices, summed.
    #[serde(default = "zero_amount")]
    pub hourly: String,
}

impl Default for FreedTotals {
    fn default() -> Self {
        FreedTotals {
            victims: 0,
            nodes: 0,
            unpriced_nodes: 0,
            hourly: zero_amount(),
        }
    }
}

/// Freed nodes and their hourly prices, summed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTotals {
    /// Nodes.
    #[serde(default)]
    pub nodes: u64,
    /// Their hourly prices, summed (unpriced nodes count 0).
    #[serde(default = "zero_amount")]
    pub hourly: String,
}

impl Default for NodeTotals {
    fn default() -> Self {
        NodeTotals {
            nodes: 0,
            hourly: zero_amount(),
        }
    }
}

fn zero_amount() -> String {
    "0.00".into()
}

/// A node a scale-in freed, watched until `until`: removed if its Node
/// object goes away (or is replaced: another UID) by then.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwaitingRemoval {
    /// Node name.
    pub node: String,
    /// Its UID when it was freed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Its hourly price (absent: unpriced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hourly: Option<String>,
    /// When it was freed (RFC 3339).
    pub freed_at: String,
    /// The end of its removal window (RFC 3339).
    pub until: String,
}

/// The last scale-in priced.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastPricedScaleIn {
    /// When it was priced (RFC 3339).
    pub at: String,
    /// The workload, as `Deployment NAMESPACE/NAME`.
    pub workload: String,
    /// Who called: `webhook` or `hook`.
    pub by: String,
    /// Replicas before.
    pub from: i32,
    /// Replicas after.
    pub to: i32,
    /// What its victims freed.
    pub with_policy: LastChoice,
    /// What the default order's would have.
    pub by_default: LastChoice,
}

/// What one choice of one scale-in freed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastChoice {
    /// Pods deleted.
    pub victims: u32,
    /// The nodes freed (the first few named).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freed_nodes: Vec<String>,
    /// How many nodes were freed.
    #[serde(default)]
    pub nodes: u32,
    /// Their hourly prices, summed.
    pub hourly: String,
}

/// The schema of `status.conditions`: `metav1.Condition`'s, as the API
/// server's own types declare it. Every condition the operator reads must
/// carry `lastTransitionTime` (the type requires it), so the schema requires
/// it too. (k8s-openapi ships this schema behind its `schemars` feature,
/// which this crate does not enable.)
fn conditions_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {
            "description": "Condition contains details for one aspect of the current state of this API Resource.",
            "type": "object",
            "properties": {
                "lastTransitionTime": {
                    "description": "lastTransitionTime is the last time the condition transitioned from one status to another. This should be when the underlying condition changed.  If that is not known, then using the time when the API field changed is acceptable.",
                    "type": "string",
                    "format": "date-time",
                },
                "message": {
                    "description": "message is a human readable message indicating details about the transition. This may be an empty string.",
                    "type": "string",
                },
                "observedGeneration": {
                    "description": "observedGeneration represents the .metadata.generation that the condition was set based upon. For instance, if .metadata.generation is currently 12, but the .status.conditions[x].observedGeneration is 9, the condition is out of date with respect to the current state of the instance.",
                    "type": "integer",
                    "format": "int64",
                },
                "reason": {
                    "description": "reason contains a programmatic identifier indicating the reason for the condition's last transition. Producers of specific condition types may define expected values and meanings for this field, and whether the values are considered a guaranteed API. The value should be a CamelCase string. This field may not be empty.",
                    "type": "string",
                },
                "status": {
                    "description": "status of the condition, one of True, False, Unknown.",
                    "type": "string",
                },
                "type": {
                    "description": "type of condition in CamelCase or in foo.example.com/CamelCase.",
                    "type": "string",
                },
            },
            "required": ["lastTransitionTime", "message", "reason", "status", "type"],
        },
    })
}

/// Predicted first victims of one ReplicaSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSetVictims {
    /// ReplicaSet name.
    pub replica_set: String,
    /// Pod names, first deleted first.
    pub pods: Vec<String>,
    /// Listed pods upstream ranks equal to a neighbour: among them it keeps
    /// its informer's list order, so the order shown is one of several.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ties: Vec<VictimTie>,
}

/// Pods upstream's comparator ranks equal, at least one of them listed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VictimTie {
    /// The tied pods in the order shown (the first few of a long run).
    pub pods: Vec<String>,
    /// The list ends inside the tie: upstream may delete an unlisted pod of
    /// it instead of a listed one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_cut: bool,
    /// What the tie means, in words.
    pub message: String,
}

/// One pod whose predicted place differs from the intended one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MismatchStatus {
    /// Pod name.
    pub pod: String,
    /// Why (`PendingPatch`, `NotReady`, `ForeignCost`, ...).
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rewritten(schema: serde_json::Value) -> serde_json::Value {
        let mut schema = schemars::Schema::try_from(schema).unwrap();
        kubernetes_formats(&mut schema);
        schema.to_value()
    }

    #[test]
    fn unsigned_formats_become_ranges_at_any_depth() {
        let got = rewritten(json!({
            "type": "object",
            "properties": {
                "burst": {"type": "integer", "format": "uint32", "minimum": 1},
                "budgets": {"type": "object",
                            "additionalProperties": {"type": "integer", "format": "uint32", "minimum": 0}},
                "list": {"type": "array", "items": {"type": "integer", "format": "uint16", "minimum": 0, "maximum": 65535}},
                "buckets": {"type": ["integer", "null"], "format": "uint32", "minimum": 1},
                "cost": {"type": "integer", "format": "int32"},
                "generation": {"type": "integer", "format": "int64"},
                "qps": {"type": "number", "format": "double"},
                "when": {"type": "string", "format": "date-time"},
            }
        }));
        let p = &got["properties"];
        assert_eq!(
            p["burst"],
            json!({"type": "integer", "minimum": 1, "maximum": 4294967295u32})
        );
        assert_eq!(
            p["budgets"]["additionalProperties"],
            json!({"type": "integer", "minimum": 0, "maximum": 4294967295u32})
        );
        assert_eq!(
            p["list"]["items"],
            json!({"type": "integer", "minimum": 0, "maximum": 65535})
        );
        assert_eq!(
            p["buckets"],
            json!({"type": ["integer", "null"], "minimum": 1, "maximum": 4294967295u32})
        );
        // what Kubernetes knows is kept
        assert_eq!(p["cost"]["format"], "int32");
        assert_eq!(p["generation"]["format"], "int64");
        assert_eq!(p["qps"]["format"], "double");
        assert_eq!(p["when"]["format"], "date-time");
    }

    #[test]
    fn a_stated_maximum_is_kept() {
        let got =
            rewritten(json!({"type": "integer", "format": "uint32", "minimum": 0, "maximum": 10}));
        assert_eq!(got, json!({"type": "integer", "minimum": 0, "maximum": 10}));
    }
}
