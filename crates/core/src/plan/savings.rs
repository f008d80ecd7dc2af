//! What a scale-down is worth: the nodes its victims would leave without a
//! pod that keeps them, the capacity that frees per billing class, and what
//! those nodes cost an hour and a month, for the policy's victims and for
//! the ones upstream picks without the policy's costs. Pure: plain data in,
//! a plain struct out ([`Savings`]), rendered by the CLI.
//!
//! The model: a node is freed when every pod the snapshot has on it is a
//! victim, is not active (terminating or finished), or belongs to a
//! DaemonSet (DaemonSet pods do not keep a node; the autoscaler drains them
//! with it), and nothing keeps an autoscaler from removing it (the rule
//! consolidation follows, [`super::blockers`]: the node's own annotations,
//! and the pods that stay on it). Only nodes hosting a victim count.
//! Whether the node is really removed is the autoscaler's call;
//! PodDisruptionBudgets and other constraints are not modelled.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::pod::PodRecord;

use super::blockers::{node_blockers, pod_blocker, BlockedNode, Blocker};
use super::prices::{Money, PriceFrom, Prices};
use crate::owner::controller_of;

use super::{
    namespace_replica_sets, node_of, plan, NamedPolicy, Plan, PlanOptions, PreviousValues,
    ReplicaSetPlan, Snapshot,
};
use crate::comparator::is_pod_active;
use crate::policy::validate::{BillingSource, DEFAULT_PRESET};
use crate::policy::ValidatedSignal;
use crate::signals::billing::class_of;
use crate::signals::SignalSamples;

/// Hours in the month the monthly figures use (365 × 24 / 12).
pub const HOURS_PER_MONTH: u32 = 730;

/// The node label naming its instance type, which `instanceTypes` prices.
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";

/// A node as the savings read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts<'a> {
    /// `metadata.name`.
    pub name: &'a str,
    /// Its billing class, read as the policy's billingClass signal reads it.
    pub billing_class: Option<String>,
    /// `node.kubernetes.io/instance-type`.
    pub instance_type: Option<&'a str>,
    /// `status.allocatable.cpu`, in millicores.
    pub cpu_millicores: Option<u64>,
    /// `status.allocatable.memory`, in bytes.
    pub memory_bytes: Option<u64>,
    /// Its annotations that keep an autoscaler from removing it.
    pub blockers: Vec<Blocker>,
}

/// A pod as the savings read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts<'a> {
    /// `metadata.namespace`.
    pub namespace: &'a str,
    /// `metadata.name`.
    pub name: &'a str,
    /// `spec.nodeName`, empty when unassigned.
    pub node: &'a str,
    /// Neither terminating nor finished.
    pub active: bool,
    /// Controlled by a DaemonSet.
    pub daemon_set: bool,
    /// What keeps its node from an autoscaler while it stays there.
    pub blocker: Option<Blocker>,
}

impl PodFacts<'_> {
    /// Whether the pod keeps its node from being removed, unless deleted.
    fn keeps_node(&self) -> bool {
        self.active && !self.daemon_set
    }
}

/// The pods one choice deletes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Victims<'a> {
    /// Namespace and name of each victim, in the order deleted.
    pub pods: Vec<(&'a str, &'a str)>,
    /// Some cut falls inside a tie: upstream may pick other equals.
    pub tie_at_cut: bool,
}

/// What a scale-down is worth, the policy's choice against upstream's.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Savings {
    /// Where the prices were read from.
    pub prices_file: String,
    /// The prices' currency, when the file names one.
    pub currency: Option<String>,
    /// Hours in a month for `monthly` (730).
    pub hours_per_month: u32,
    /// The victims the policy's costs lead to.
    pub policy: Choice,
    /// The victims upstream picks without the policy's costs (costs others
    /// wrote kept).
    pub upstream: Choice,
    /// The policy minus upstream.
    pub difference: Difference,
}

/// The nodes one choice of victims frees, and their price.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Choice {
    /// The victims' names, in the order deleted.
    pub victims: Vec<String>,
    /// Some ReplicaSet's cut falls inside a tie: upstream may pick other
    /// pods it ranks equal, so other nodes may be freed.
    pub tie_at_cut: bool,
    /// Nodes left with no active pod but DaemonSet pods, that an
    /// autoscaler may remove, by name.
    pub freed_nodes: Vec<FreedNode>,
    /// Nodes the victims would leave so but no autoscaler may remove, and
    /// why (not freed), by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_removable: Vec<BlockedNode>,
    /// The freed nodes per billing class (classes by name, none last).
    pub by_billing_class: Vec<ClassTotal>,
    /// Hourly price of the priced freed nodes.
    pub hourly: Money,
    /// `hourly` over a month.
    pub monthly: Money,
    /// Freed nodes the prices do not cover (left out of `hourly`).
    pub unpriced_nodes: Vec<String>,
}

/// A node the victims would leave empty.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FreedNode {
    /// Node name.
    pub name: String,
    /// Its billing class (`None`: no class label, or not in the snapshot).
    pub billing_class: Option<String>,
    /// Its instance type label.
    pub instance_type: Option<String>,
    /// Allocatable CPU, in millicores.
    pub allocatable_cpu_millicores: Option<u64>,
    /// Allocatable memory, in bytes.
    pub allocatable_memory_bytes: Option<u64>,
    /// Hourly price (`None`: unpriced).
    pub hourly: Option<Money>,
    /// Which table of the prices file gave it.
    pub price_from: Option<PriceFrom>,
}

/// The freed nodes of one billing class.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassTotal {
    /// The class (`None`: nodes without one).
    pub billing_class: Option<String>,
    /// Freed nodes of the class.
    pub nodes: usize,
    /// Their allocatable CPU in millicores, summed over the nodes that
    /// report it (`None`: none does).
    pub allocatable_cpu_millicores: Option<u64>,
    /// Their allocatable memory in bytes, the same way.
    pub allocatable_memory_bytes: Option<u64>,
    /// Nodes that report no allocatable CPU or memory.
    pub nodes_without_allocatable: usize,
    /// Hourly price of its priced nodes.
    pub hourly: Money,
    /// `hourly` over a month.
    pub monthly: Money,
    /// Nodes of the class without a price.
    pub unpriced_nodes: usize,
}

/// The policy's choice minus upstream's.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    /// Freed nodes, policy minus upstream.
    pub nodes: i64,
    /// Hourly price of the freed nodes, policy minus upstream (positive:
    /// the policy frees more).
    pub hourly: Money,
    /// The same over a month.
    pub monthly: Money,
    /// Every freed node of both choices is priced.
    pub complete: bool,
}

/// The savings of two choices of victims over the same pods and nodes.
pub fn compute(
    nodes: &[NodeFacts],
    pods: &[PodFacts],
    prices: &Prices,
    policy: &Victims,
    upstream: &Victims,
) -> Savings {
    let by_name: BTreeMap<&str, &NodeFacts> = nodes.iter().map(|n| (n.name, n)).collect();
    let policy = choice(&by_name, pods, prices, policy);
    let upstream = choice(&by_name, pods, prices, upstream);
    let difference = Difference {
        nodes: policy.freed_nodes.len() as i64 - upstream.freed_nodes.len() as i64,
        hourly: policy.hourly - upstream.hourly,
        monthly: policy.monthly - upstream.monthly,
        complete: policy.unpriced_nodes.is_empty() && upstream.unpriced_nodes.is_empty(),
    };
    Savings {
        prices_file: prices.source.clone(),
        currency: prices.currency.clone(),
        hours_per_month: HOURS_PER_MONTH,
        policy,
        upstream,
        difference,
    }
}

/// The nodes `victims` free, priced.
fn choice(
    nodes: &BTreeMap<&str, &NodeFacts>,
    pods: &[PodFacts],
    prices: &Prices,
    victims: &Victims,
) -> Choice {
    let deleted: BTreeSet<(&str, &str)> = victims.pods.iter().copied().collect();
    let is_victim = |p: &PodFacts| deleted.contains(&(p.namespace, p.name));
    let hosting: BTreeSet<&str> = pods
        .iter()
        .filter(|p| !p.node.is_empty() && is_victim(p))
        .map(|p| p.node)
        .collect();
    let kept: BTreeSet<&str> = pods
        .iter()
        .filter(|p| hosting.contains(p.node) && p.keeps_node() && !is_victim(p))
        .map(|p| p.node)
        .collect();
    let emptied: BTreeSet<&str> = hosting.difference(&kept).copied().collect();
    let blocked = blocked_nodes(nodes, pods, &emptied, is_victim);
    let freed_nodes: Vec<FreedNode> = emptied
        .iter()
        .filter(|name| !blocked.contains_key(*name))
        .map(|&name| freed_node(nodes, prices, name))
        .collect();
    let by_billing_class = by_billing_class(&freed_nodes);
    let hourly: Money = freed_nodes.iter().filter_map(|n| n.hourly).sum();
    Choice {
        victims: victims.pods.iter().map(|(_, n)| n.to_string()).collect(),
        tie_at_cut: victims.tie_at_cut,
        not_removable: blocked.into_values().collect(),
        unpriced_nodes: freed_nodes
            .iter()
            .filter(|n| n.hourly.is_none())
            .map(|n| n.name.clone())
            .collect(),
        freed_nodes,
        by_billing_class,
        hourly,
        monthly: hourly.times(HOURS_PER_MONTH),
    }
}

/// What keeps each `emptied` node that an autoscaler may not remove: its
/// own annotations, then the pods staying on it (those not `is_victim`).
fn blocked_nodes<'n>(
    nodes: &BTreeMap<&str, &NodeFacts>,
    pods: &[PodFacts<'n>],
    emptied: &BTreeSet<&'n str>,
    is_victim: impl Fn(&PodFacts) -> bool,
) -> BTreeMap<&'n str, BlockedNode> {
    let mut blocked: BTreeMap<&str, BlockedNode> = BTreeMap::new();
    for &name in emptied {
        for b in nodes.get(name).into_iter().flat_map(|n| n.blockers.iter()) {
            blocked
                .entry(name)
                .or_insert_with(|| BlockedNode::new(name))
                .push(b.clone());
        }
    }
    for p in pods {
        if let (Some(b), true) = (&p.blocker, emptied.contains(p.node) && !is_victim(p)) {
            blocked
                .entry(p.node)
                .or_insert_with(|| BlockedNode::new(p.node))
                .push(b.clone());
        }
    }
    blocked
}

/// Node `name`, freed, with what it offers and its price (none when the
/// snapshot or the prices lack it).
fn freed_node(nodes: &BTreeMap<&str, &NodeFacts>, prices: &Prices, name: &str) -> FreedNode {
    let node = nodes.get(name);
    let billing_class = node.and_then(|n| n.billing_class.clone());
    let instance_type = node.and_then(|n| n.instance_type);
    let price = prices.price_of(instance_type, billing_class.as_deref());
    FreedNode {
        name: name.to_string(),
        billing_class,
        instance_type: instance_type.map(str::to_string),
        allocatable_cpu_millicores: node.and_then(|n| n.cpu_millicores),
        allocatable_memory_bytes: node.and_then(|n| n.memory_bytes),
        hourly: price.map(|(m, _)| m),
        price_from: price.map(|(_, from)| from),
    }
}

/// The freed nodes' totals per billing class, by class name, the nodes
/// without a class last.
fn by_billing_class(freed_nodes: &[FreedNode]) -> Vec<ClassTotal> {
    let mut classes: BTreeMap<(bool, Option<&str>), ClassTotal> = BTreeMap::new();
    for n in freed_nodes {
        let class = n.billing_class.as_deref();
        let t = classes
            .entry((class.is_none(), class))
            .or_insert_with(|| ClassTotal {
                billing_class: class.map(str::to_string),
                nodes: 0,
                allocatable_cpu_millicores: None,
                allocatable_memory_bytes: None,
                nodes_without_allocatable: 0,
                hourly: Money::ZERO,
                monthly: Money::ZERO,
                unpriced_nodes: 0,
            });
        t.nodes += 1;
        let add = |sum: &mut Option<u64>, v: Option<u64>| {
            if let Some(v) = v {
                *sum = Some(sum.unwrap_or(0).saturating_add(v));
            }
        };
        add(
            &mut t.allocatable_cpu_millicores,
            n.allocatable_cpu_millicores,
        );
        add(&mut t.allocatable_memory_bytes, n.allocatable_memory_bytes);
        if n.allocatable_cpu_millicores.is_none() || n.allocatable_memory_bytes.is_none() {
            t.nodes_without_allocatable += 1;
        }
        match n.hourly {
            Some(h) => t.hourly = t.hourly + h,
            None => t.unpriced_nodes += 1,
        }
    }
    classes
        .into_values()
        .map(|mut t| {
            t.monthly = t.hourly.times(HOURS_PER_MONTH);
            t
        })
        .collect()
}

/// What `plan`'s scale-down is worth against upstream's own choice over
/// the same snapshot; also returns warnings (unpriced nodes, allocatable
/// values that are not quantities).
pub fn plan_savings(
    policy: &NamedPolicy,
    snapshot: &Snapshot,
    plan: &Plan,
    prices: &Prices,
    opts: &PlanOptions,
) -> (Savings, Vec<String>) {
    let upstream = upstream_default(policy, snapshot, opts);
    let ns = policy.namespace.as_str();
    savings_over(
        policy,
        snapshot,
        prices,
        &victims_of(ns, &plan.replica_sets),
        &victims_of(ns, &upstream),
    )
}

/// What a live scale-in is worth: `victims` (the pods it deletes, per
/// ReplicaSet of the policy's namespace) against the pods upstream's
/// default order deletes from the same ReplicaSets (`opts.scale_down_by`
/// from each, as the scale-in's correction counts them), over the snapshot
/// of that moment. The same computation as [`plan_savings`], with the
/// victims given instead of read from a plan.
pub fn scale_in_savings(
    policy: &NamedPolicy,
    snapshot: &Snapshot,
    victims: &[(String, Vec<Arc<str>>)],
    prices: &Prices,
    opts: &PlanOptions,
) -> (Savings, Vec<String>) {
    let upstream: Vec<ReplicaSetPlan> = upstream_default(policy, snapshot, opts)
        .into_iter()
        .filter(|r| victims.iter().any(|(rs, _)| *rs == r.name))
        .collect();
    let ns = policy.namespace.as_str();
    let ours = Victims {
        pods: victims
            .iter()
            .flat_map(|(_, v)| v.iter().map(|p| (ns, &**p)))
            .collect(),
        tie_at_cut: false,
    };
    savings_over(policy, snapshot, prices, &ours, &victims_of(ns, &upstream))
}

/// The savings of two choices of victims over `snapshot`, and warnings
/// (unpriced nodes, allocatable values that are not quantities).
fn savings_over(
    policy: &NamedPolicy,
    snapshot: &Snapshot,
    prices: &Prices,
    ours: &Victims,
    upstream: &Victims,
) -> (Savings, Vec<String>) {
    let (nodes, mut warnings) = node_facts(&billing_source(policy), &snapshot.nodes);
    let pods: Vec<PodFacts> = snapshot.pods.iter().map(|p| pod_facts(p)).collect();
    let savings = compute(&nodes, &pods, prices, ours, upstream);
    let unpriced: BTreeSet<&str> = [&savings.policy, &savings.upstream]
        .into_iter()
        .flat_map(|c| c.unpriced_nodes.iter().map(String::as_str))
        .collect();
    if !unpriced.is_empty() {
        warnings.push(format!(
            "{}: no price for freed node(s) {} (neither their instance type nor their billing class is listed); left out of the sums",
            prices.source,
            unpriced.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    (savings, warnings)
}

/// The victims of a plan's ReplicaSets, all in namespace `ns`.
fn victims_of<'a>(ns: &'a str, replica_sets: &'a [ReplicaSetPlan]) -> Victims<'a> {
    Victims {
        pods: replica_sets
            .iter()
            .flat_map(|r| r.victims.iter().map(|v| (ns, &**v)))
            .collect(),
        tie_at_cut: replica_sets.iter().any(|r| r.tie_at_cut),
    }
}

/// Upstream's order and victims per ReplicaSet without the policy: its own
/// costs taken off the pods (costs others wrote stay) and none of its
/// patches applied, ordered by the same comparator.
pub fn upstream_default(
    policy: &NamedPolicy,
    snapshot: &Snapshot,
    opts: &PlanOptions,
) -> Vec<ReplicaSetPlan> {
    let ns = policy.namespace.as_str();
    // only the namespace is ordered: its pods and ReplicaSets are all it needs
    let pods = snapshot
        .pods
        .iter()
        .filter(|p| p.identity.namespace.as_deref().unwrap_or("") == ns)
        .map(|p| {
            let ours = p.ours.policy.as_ref() == Some(&policy.name);
            if !ours {
                return p.clone();
            }
            let mut p = (**p).clone();
            p.ours.deletion_cost = None;
            Arc::new(p)
        })
        .collect();
    let without = Snapshot {
        pods,
        nodes: snapshot.nodes.clone(),
        replica_sets: namespace_replica_sets(policy, snapshot)
            .into_iter()
            .cloned()
            .collect(),
        deployments: Vec::new(),
        ignored: Vec::new(),
    };
    let opts = PlanOptions {
        assume_patches_applied: false,
        ..*opts
    };
    plan(
        policy,
        &without,
        &SignalSamples::default(),
        &PreviousValues::new(),
        &opts,
    )
    .replica_sets
}

/// Where the policy reads a node's billing class: its first billingClass
/// signal, else the default preset.
fn billing_source(policy: &NamedPolicy) -> BillingSource {
    policy
        .spec
        .signals
        .iter()
        .find_map(|s| match s {
            ValidatedSignal::BillingClass(b) => Some(b.source.clone()),
            _ => None,
        })
        .unwrap_or(BillingSource::Preset(DEFAULT_PRESET))
}

fn pod_facts(p: &PodRecord) -> PodFacts<'_> {
    PodFacts {
        namespace: p.identity.namespace.as_deref().unwrap_or(""),
        name: p.identity.name.as_deref().unwrap_or(""),
        node: node_of(p),
        active: is_pod_active(p),
        daemon_set: controller_of(p.owner_references()).is_some_and(|o| o.kind == "DaemonSet"),
        blocker: pod_blocker(p),
    }
}

/// The nodes' facts, and a warning per allocatable value that is not a
/// quantity (left out, as if absent).
fn node_facts<'a>(
    source: &BillingSource,
    nodes: &'a [Arc<Node>],
) -> (Vec<NodeFacts<'a>>, Vec<String>) {
    let mut warnings = Vec::new();
    let facts = nodes
        .iter()
        .filter_map(|n| {
            let name = n.metadata.name.as_deref()?;
            let labels = n.metadata.labels.as_ref();
            let allocatable = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
            let mut read = |resource: &str, unit: f64| {
                let raw = &allocatable?.get(resource)?.0;
                let value = quantity(raw).map(|q| whole(q * unit));
                if value.is_none() {
                    warnings.push(format!(
                        "node {name}: status.allocatable.{resource} {raw:?} is not a quantity; left out of the freed capacity"
                    ));
                }
                value
            };
            Some(NodeFacts {
                name,
                billing_class: class_of(source, labels),
                instance_type: labels
                    .and_then(|l| l.get(INSTANCE_TYPE_LABEL))
                    .map(String::as_str),
                cpu_millicores: read("cpu", 1000.0),
                memory_bytes: read("memory", 1.0),
                blockers: node_blockers(n),
            })
        })
        .collect();
    (facts, warnings)
}

/// `v` as a whole number, rounded up as Kubernetes rounds quantities, but
/// not past float noise (`1.93` cores is 1930 millicores, not 1931).
fn whole(v: f64) -> u64 {
    let r = v.round();
    if (v - r).abs() < 1e-6 {
        r as u64
    } else {
        v.ceil() as u64
    }
}

/// A Kubernetes quantity (`2`, `1930m`, `7934440Ki`, `1.5Gi`, `1e3`) as a
/// number; `None` when it is not one, or negative.
pub fn quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    if !number.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e => {
            let exp = e.strip_prefix(['e', 'E'])?;
            10f64.powi(exp.parse::<i32>().ok()?)
        }
    };
    let v = n * scale;
    (v.is_finite() && v >= 0.0).then_some(v)
}

// ---- formatting shared by the table and the page ----

/// The nodes a choice frees, with their billing class: `spot-b1 (spot)`.
pub fn freed_list(c: &Choice) -> String {
    if c.freed_nodes.is_empty() {
        return "none".into();
    }
    c.freed_nodes
        .iter()
        .map(|n| {
            let class = n.billing_class.as_deref().unwrap_or("no class");
            match n.hourly {
                Some(_) => format!("{} ({class})", n.name),
                None => format!("{} ({class}, unpriced)", n.name),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// An amount with its sign: `+0.12`, `-0.40`, `0.00`.
pub fn signed(m: Money) -> String {
    if m > Money::ZERO {
        format!("+{m}")
    } else {
        m.to_string()
    }
}

/// Millicores as cores: `2`, `1.93`, `0.25`.
pub fn cores(millis: u64) -> String {
    trim_decimals(format!("{}.{:03}", millis / 1000, millis % 1000))
}

/// Bytes in Gi (Mi below 1 Gi), two decimals at most: `7.57Gi`, `512Mi`.
pub fn memory(bytes: u64) -> String {
    let (unit, size) = if bytes >= 1 << 30 {
        ("Gi", (1u64 << 30) as f64)
    } else {
        ("Mi", (1u64 << 20) as f64)
    };
    format!(
        "{}{unit}",
        trim_decimals(format!("{:.2}", bytes as f64 / size))
    )
}

fn trim_decimals(s: String) -> String {
    if !s.contains('.') {
        return s;
    }
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests;
