//! Every scale-in priced as it happens (`run --prices`), and whether the
//! autoscaler then removed what it freed.
//!
//! A scale-in the webhook or the hook made is priced once, after its answer,
//! by the computation `plan --prices` runs ([`scale_in_savings`]) over the
//! snapshot its round planned on: the pods it deletes against those the
//! default order (without the policy's costs) would delete from the same
//! ReplicaSets, the nodes each leaves free and their hourly prices. The
//! nodes the policy's pods freed are then watched: a Node object gone (or
//! replaced: another UID) within `--node-removal-window` counts as removed,
//! one still there at the end as not removed. A freed node is a hope; a
//! removed one is what the autoscaler did.
//!
//! [`scale_in_savings`]: crate::plan::savings::scale_in_savings
//!
//! The running totals are the policy's status (`status.pricedScaleIns`), so a
//! restart or a new leader goes on from them: each term reads them once per
//! policy (`Engine::seed_priced`) and adds what it prices to them; what
//! it priced before that read is added to what it read. The pure part
//! ([`Totals`], [`PricedScaleIn`]) folds scale-ins and removals into totals;
//! `Ledger` keeps them per policy.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::engine::{Engine, FreshBy};
use crate::metrics::ChoiceLabel;
use crate::owner::controller_of_kind;
use crate::plan::prices::{Money, Prices};
use crate::plan::savings::Choice;
use crate::plan::Snapshot;
use crate::policy::{
    AwaitingRemoval, FreedTotals, LastChoice, LastPricedScaleIn, NodeTotals, PricedScaleIns,
};
use crate::writes::PolicyKey;

/// Nodes watched per policy at most (kept in its status): past it the
/// oldest is given up and counted as not removed (never claimed).
pub const MAX_AWAITING: usize = 100;

/// Freed nodes named per choice in an Event and in `status.pricedScaleIns.last`.
pub const NODES_NAMED: usize = 5;

/// How often the watched nodes are looked up in the node cache.
const REMOVAL_POLL: Duration = Duration::from_secs(2);

/// How long after its answer a scale-in's pods are looked for going: the
/// controller deletes them within moments of the new replica count (a hook
/// caller scales after the hook's answer).
pub const OBSERVE_FOR: Duration = Duration::from_secs(15);

/// Added to [`OBSERVE_FOR`] per pod deleted: kube-controller-manager's
/// client sends 20 writes a second by default (`--kube-api-qps`), so a
/// scale-in by 680 takes it half a minute, over two syncs.
pub(in crate::engine) const OBSERVE_PER_POD: Duration = Duration::from_millis(50);

/// How long the pods of a scale-in by `by` are looked for going.
pub(in crate::engine) fn observe_window(by: usize) -> Duration {
    OBSERVE_FOR + OBSERVE_PER_POD.saturating_mul(u32::try_from(by).unwrap_or(u32::MAX))
}

/// How often the pod cache is read meanwhile.
pub(super) const OBSERVE_POLL: Duration = Duration::from_millis(50);

/// What prices the scale-ins (`--prices`) and how long a freed node is
/// watched (`--node-removal-window`).
#[derive(Debug, Clone)]
pub struct Pricing {
    /// The prices (the `plan --prices` format), replaced when the file
    /// changes.
    pub prices: SharedPrices,
    /// How long after a scale-in frees a node its removal counts.
    pub removal_window: Duration,
}

/// The prices in use, shared with whatever reloads them: each scale-in is
/// priced with those current when it is priced.
#[derive(Debug, Clone)]
pub struct SharedPrices(Arc<RwLock<Arc<Prices>>>);

impl SharedPrices {
    /// Shares `prices`.
    pub fn new(prices: Prices) -> Self {
        SharedPrices(Arc::new(RwLock::new(Arc::new(prices))))
    }

    /// The prices now.
    pub fn get(&self) -> Arc<Prices> {
        match self.0.read() {
            Ok(p) => p.clone(),
            // a writer panicked mid-swap: the value is still a whole Arc
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces them.
    pub fn set(&self, prices: Prices) {
        let mut slot = match self.0.write() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        };
        *slot = Arc::new(prices);
    }
}

/// A node one choice of victims freed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreedRef {
    /// Node name.
    pub name: String,
    /// Its UID in the snapshot (a node replaced under the same name is a
    /// removal).
    pub uid: Option<String>,
    /// Its hourly price (`None`: unpriced).
    pub hourly: Option<Money>,
}

/// What one choice of one scale-in freed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChoiceFreed {
    /// Pods deleted.
    pub victims: usize,
    /// Nodes freed, by name.
    pub nodes: Vec<FreedRef>,
    /// Their hourly prices, summed.
    pub hourly: Money,
}

impl ChoiceFreed {
    pub(super) fn of(c: &Choice, uid_of: &impl Fn(&str) -> Option<String>) -> Self {
        ChoiceFreed {
            victims: c.victims.len(),
            nodes: c
                .freed_nodes
                .iter()
                .map(|n| FreedRef {
                    name: n.name.clone(),
                    uid: uid_of(&n.name),
                    hourly: n.hourly,
                })
                .collect(),
            hourly: c.hourly,
        }
    }

    fn unpriced(&self) -> usize {
        self.nodes.iter().filter(|n| n.hourly.is_none()).count()
    }

    /// `spot-1, spot-2 and 3 more`.
    fn names(&self) -> String {
        let names: Vec<&str> = self
            .nodes
            .iter()
            .take(NODES_NAMED)
            .map(|n| n.name.as_str())
            .collect();
        match self.nodes.len().saturating_sub(NODES_NAMED) {
            0 => names.join(", "),
            more => format!("{} and {more} more", names.join(", ")),
        }
    }

    fn last(&self) -> LastChoice {
        LastChoice {
            victims: u32::try_from(self.victims).unwrap_or(u32::MAX),
            freed_nodes: self
                .nodes
                .iter()
                .take(NODES_NAMED)
                .map(|n| n.name.clone())
                .collect(),
            nodes: u32::try_from(self.nodes.len()).unwrap_or(u32::MAX),
            hourly: self.hourly.to_string(),
        }
    }
}

/// One scale-in, priced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PricedScaleIn {
    /// When it was priced.
    pub at: Timestamp,
    /// The workload, as `Deployment NAMESPACE/NAME`.
    pub workload: String,
    /// Who called.
    pub by: FreshBy,
    /// Replicas before.
    pub from: i32,
    /// Replicas after.
    pub to: i32,
    /// The prices' currency.
    pub currency: Option<String>,
    /// What the pods it deletes free.
    pub with_policy: ChoiceFreed,
    /// What the pods the default order would delete would free.
    pub by_default: ChoiceFreed,
}

impl PricedScaleIn {
    /// What the `ScaleInVictims` Event says of it: `with the policy 2
    /// victim(s) free 1 node(s) (spot-1), 0.04 USD/h; by the default order 2
    /// victim(s) would free 0 node(s), 0.00 USD/h`.
    pub fn summary(&self) -> String {
        let unit = match &self.currency {
            Some(c) => format!(" {c}/h"),
            None => "/h".to_string(),
        };
        let part = |c: &ChoiceFreed, verb: &str| {
            let names = if c.nodes.is_empty() {
                String::new()
            } else {
                format!(" ({})", c.names())
            };
            let unpriced = match c.unpriced() {
                0 => String::new(),
                n => format!(" ({n} unpriced)"),
            };
            format!(
                "{} victim(s) {verb} {} node(s){names}, {}{unit}{unpriced}",
                c.victims,
                c.nodes.len(),
                c.hourly
            )
        };
        format!(
            "with the policy {}; by the default order {}",
            part(&self.with_policy, "free"),
            part(&self.by_default, "would free")
        )
    }
}

/// What one choice freed, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreedSum {
    /// Pods deleted.
    pub victims: u64,
    /// Nodes freed.
    pub nodes: u64,
    /// Of those, unpriced.
    pub unpriced: u64,
    /// Their hourly prices.
    pub hourly: Money,
}

impl FreedSum {
    fn add(&mut self, c: &ChoiceFreed) {
        self.victims = self.victims.saturating_add(c.victims as u64);
        self.nodes = self.nodes.saturating_add(c.nodes.len() as u64);
        self.unpriced = self.unpriced.saturating_add(c.unpriced() as u64);
        self.hourly = self.hourly + c.hourly;
    }

    fn merge(&mut self, o: &FreedSum) {
        self.victims = self.victims.saturating_add(o.victims);
        self.nodes = self.nodes.saturating_add(o.nodes);
        self.unpriced = self.unpriced.saturating_add(o.unpriced);
        self.hourly = self.hourly + o.hourly;
    }
}

/// Nodes and their hourly prices, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSum {
    /// Nodes.
    pub nodes: u64,
    /// Their hourly prices (unpriced ones count 0).
    pub hourly: Money,
}

impl NodeSum {
    fn add(&mut self, hourly: Option<Money>) {
        self.nodes = self.nodes.saturating_add(1);
        self.hourly = self.hourly + hourly.unwrap_or(Money::ZERO);
    }

    fn merge(&mut self, o: &NodeSum) {
        self.nodes = self.nodes.saturating_add(o.nodes);
        self.hourly = self.hourly + o.hourly;
    }
}

/// A freed node being watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Awaiting {
    /// Node name.
    pub node: String,
    /// Its UID when freed.
    pub uid: Option<String>,
    /// Its hourly price.
    pub hourly: Option<Money>,
    /// When it was freed.
    pub freed_at: Timestamp,
    /// The end of its window.
    pub until: Timestamp,
}

/// What became of a watched node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The node.
    pub node: String,
    /// Its Node object went away within the window.
    pub removed: bool,
    /// Its hourly price.
    pub hourly: Option<Money>,
}

/// A watched node's fate at `now`, given the UID of the node of that name
/// in the cache (`None`: no such node): `Some(false)` once its window has
/// ended (checked first: a node found gone only later is not claimed),
/// `Some(true)` when it is gone or replaced, `None` while it is there.
pub fn fate(a: &Awaiting, now: Timestamp, current: Option<Option<&str>>) -> Option<bool> {
    if now >= a.until {
        return Some(false);
    }
    match current {
        None => Some(true),
        Some(uid) => (a.uid.is_some() && uid.is_some() && a.uid.as_deref() != uid).then_some(true),
    }
}

/// A policy's priced scale-ins, summed (the status's `pricedScaleIns`, with
/// amounts kept exact).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Scale-ins priced.
    pub priced: u64,
    /// The prices' currency.
    pub currency: Option<String>,
    /// What the policy's victims freed.
    pub with_policy: FreedSum,
    /// What the default order's would have.
    pub by_default: FreedSum,
    /// Freed nodes removed within their window.
    pub removed: NodeSum,
    /// Freed nodes still there at the end of their window.
    pub not_removed: NodeSum,
    /// Freed nodes watched, oldest first.
    pub awaiting: Vec<Awaiting>,
    /// The last scale-in, as the status shows it.
    pub last: Option<LastPricedScaleIn>,
}

impl Totals {
    /// Adds a scale-in; the nodes it freed with the policy are watched for
    /// `window`. Returns the watched nodes given up to stay within
    /// [`MAX_AWAITING`] (counted as not removed).
    pub fn add(&mut self, s: &PricedScaleIn, window: Duration) -> Vec<Awaiting> {
        self.priced = self.priced.saturating_add(1);
        self.currency = s.currency.clone().or(self.currency.take());
        self.with_policy.add(&s.with_policy);
        self.by_default.add(&s.by_default);
        let until =
            s.at.checked_add(SignedDuration::try_from(window).unwrap_or(SignedDuration::MAX))
                .unwrap_or(Timestamp::MAX);
        self.awaiting
            .extend(s.with_policy.nodes.iter().map(|n| Awaiting {
                node: n.name.clone(),
                uid: n.uid.clone(),
                hourly: n.hourly,
                freed_at: s.at,
                until,
            }));
        self.last = Some(LastPricedScaleIn {
            at: s.at.to_string(),
            workload: s.workload.clone(),
            by: s.by.label().to_string(),
            from: s.from,
            to: s.to,
            with_policy: s.with_policy.last(),
            by_default: s.by_default.last(),
        });
        self.cap()
    }

    /// Gives up the oldest watched nodes past [`MAX_AWAITING`].
    fn cap(&mut self) -> Vec<Awaiting> {
        self.awaiting.sort_by_key(|a| a.until);
        let over = self.awaiting.len().saturating_sub(MAX_AWAITING);
        let dropped: Vec<Awaiting> = self.awaiting.drain(..over).collect();
        for a in &dropped {
            self.not_removed.add(a.hourly);
        }
        dropped
    }

    /// Settles the watched nodes at `now` ([`fate`]); `current` gives the
    /// UID of the cached node of a name (`None`: none).
    pub fn settle<'a>(
        &mut self,
        now: Timestamp,
        current: impl Fn(&str) -> Option<Option<&'a str>>,
    ) -> Vec<Settled> {
        let mut settled = Vec::new();
        self.awaiting
            .retain(|a| match fate(a, now, current(&a.node)) {
                None => true,
                Some(removed) => {
                    settled.push(Settled {
                        node: a.node.clone(),
                        removed,
                        hourly: a.hourly,
                    });
                    false
                }
            });
        for s in &settled {
            if s.removed {
                self.removed.add(s.hourly);
            } else {
                self.not_removed.add(s.hourly);
            }
        }
        settled
    }

    /// Adds `delta` (what this term priced before it read the status) to
    /// these totals (the status's). Returns the watched nodes given up.
    pub fn merge(&mut self, delta: Totals) -> Vec<Awaiting> {
        self.priced = self.priced.saturating_add(delta.priced);
        self.currency = delta.currency.or(self.currency.take());
        self.with_policy.merge(&delta.with_policy);
        self.by_default.merge(&delta.by_default);
        self.removed.merge(&delta.removed);
        self.not_removed.merge(&delta.not_removed);
        self.awaiting.extend(delta.awaiting);
        self.last = delta.last.or(self.last.take());
        self.cap()
    }

    /// As the status holds them.
    pub fn to_status(&self) -> PricedScaleIns {
        let freed = |f: &FreedSum| FreedTotals {
            victims: f.victims,
            nodes: f.nodes,
            unpriced_nodes: f.unpriced,
            hourly: f.hourly.to_string(),
        };
        let nodes = |n: &NodeSum| NodeTotals {
            nodes: n.nodes,
            hourly: n.hourly.to_string(),
        };
        PricedScaleIns {
            priced: self.priced,
            currency: self.currency.clone(),
            with_policy: freed(&self.with_policy),
            by_default: freed(&self.by_default),
            removed: nodes(&self.removed),
            not_removed: nodes(&self.not_removed),
            awaiting_removal: self
                .awaiting
                .iter()
                .map(|a| AwaitingRemoval {
                    node: a.node.clone(),
                    uid: a.uid.clone(),
                    hourly: a.hourly.map(|h| h.to_string()),
                    freed_at: a.freed_at.to_string(),
                    until: a.until.to_string(),
                })
                .collect(),
            last: self.last.clone(),
        }
    }

    /// Read back from a status. A field that does not read (an amount or a
    /// time edited by hand) counts as zero, or a watched node as given up,
    /// and is named in the warnings returned.
    pub fn from_status(s: &PricedScaleIns) -> (Totals, Vec<String>) {
        let mut warnings = Vec::new();
        let w = &mut warnings;
        let freed = |f: &FreedTotals, name: &str, w: &mut Vec<String>| FreedSum {
            victims: f.victims,
            nodes: f.nodes,
            unpriced: f.unpriced_nodes,
            hourly: amount(&format!("{name}.hourly"), &f.hourly, w),
        };
        let nodes = |n: &NodeTotals, name: &str, w: &mut Vec<String>| NodeSum {
            nodes: n.nodes,
            hourly: amount(&format!("{name}.hourly"), &n.hourly, w),
        };
        let with_policy = freed(&s.with_policy, "withPolicy", w);
        let by_default = freed(&s.by_default, "byDefault", w);
        let removed = nodes(&s.removed, "removed", w);
        let mut not_removed = nodes(&s.not_removed, "notRemoved", w);
        let mut awaiting = Vec::new();
        for (i, a) in s.awaiting_removal.iter().enumerate() {
            let hourly = a
                .hourly
                .as_deref()
                .map(|h| amount(&format!("awaitingRemoval[{i}].hourly"), h, w));
            match (
                a.freed_at.parse::<Timestamp>(),
                a.until.parse::<Timestamp>(),
            ) {
                (Ok(freed_at), Ok(until)) => awaiting.push(Awaiting {
                    node: a.node.clone(),
                    uid: a.uid.clone(),
                    hourly,
                    freed_at,
                    until,
                }),
                _ => {
                    w.push(format!(
                        "status.pricedScaleIns.awaitingRemoval[{i}]: freedAt or until is not a time; node {} counted as not removed",
                        a.node
                    ));
                    not_removed.add(hourly);
                }
            }
        }
        awaiting.sort_by_key(|a| a.until);
        let totals = Totals {
            priced: s.priced,
            currency: s.currency.clone(),
            with_policy,
            by_default,
            removed,
            not_removed,
            awaiting,
            last: s.last.clone(),
        };
        (totals, warnings)
    }
}

/// A status amount, or zero with a warning naming the field.
fn amount(field: &str, text: &str, warnings: &mut Vec<String>) -> Money {
    Money::parse_amount(text).unwrap_or_else(|| {
        warnings.push(format!(
            "status.pricedScaleIns.{field}: {text:?} is not an amount; counted as 0"
        ));
        Money::ZERO
    })
}

/// A policy's totals, and whether this term read its status yet.
#[derive(Debug, Default)]
struct Entry {
    seeded: bool,
    totals: Totals,
}

/// Every policy's totals in this leadership term.
#[derive(Debug, Default)]
pub(in crate::engine) struct Ledger {
    by_policy: Mutex<HashMap<PolicyKey, Entry>>,
}

impl Ledger {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<PolicyKey, Entry>) -> R) -> Option<R> {
        self.by_policy.lock().ok().map(|mut m| f(&mut m))
    }

    /// Adds a priced scale-in of `key`'s; returns the nodes given up and
    /// how many are watched now.
    fn record(
        &self,
        key: &PolicyKey,
        s: &PricedScaleIn,
        window: Duration,
    ) -> (Vec<Awaiting>, usize) {
        self.with(|m| {
            let e = m.entry(key.clone()).or_default();
            let dropped = e.totals.add(s, window);
            (dropped, e.totals.awaiting.len())
        })
        .unwrap_or_default()
    }

    fn seeded(&self, key: &PolicyKey) -> bool {
        self.with(|m| m.get(key).is_some_and(|e| e.seeded))
            .unwrap_or(false)
    }

    /// Reads the status's totals under what this term priced so far.
    fn seed(&self, key: &PolicyKey, status: Option<&PricedScaleIns>) -> Vec<String> {
        self.with(|m| {
            let e = m.entry(key.clone()).or_default();
            if e.seeded {
                return Vec::new();
            }
            let (mut base, mut warnings) = status.map(Totals::from_status).unwrap_or_default();
            let dropped = base.merge(std::mem::take(&mut e.totals));
            warnings.extend(dropped.iter().map(|a| {
                format!(
                    "node {}: more than {MAX_AWAITING} freed nodes watched; counted as not removed",
                    a.node
                )
            }));
            e.totals = base;
            e.seeded = true;
            warnings
        })
        .unwrap_or_default()
    }

    /// The totals as the status shows them, once seeded and when any.
    fn view(&self, key: &PolicyKey) -> Option<PricedScaleIns> {
        self.with(|m| {
            m.get(key)
                .filter(|e| e.seeded && e.totals != Totals::default())
                .map(|e| e.totals.to_status())
        })
        .flatten()
    }

    /// Settles every policy's watched nodes; what settled, per policy, and
    /// how many stay watched.
    fn settle<'a>(
        &self,
        now: Timestamp,
        current: impl Fn(&str) -> Option<Option<&'a str>>,
    ) -> Vec<(PolicyKey, Vec<Settled>, usize)> {
        self.with(|m| {
            m.iter_mut()
                .filter_map(|(key, e)| {
                    let settled = e.totals.settle(now, &current);
                    (!settled.is_empty()).then(|| (key.clone(), settled, e.totals.awaiting.len()))
                })
                .collect()
        })
        .unwrap_or_default()
    }

    /// The names of every watched node.
    fn watched(&self) -> Vec<String> {
        self.with(|m| {
            m.values()
                .flat_map(|e| e.totals.awaiting.iter().map(|a| a.node.clone()))
                .collect()
        })
        .unwrap_or_default()
    }

    /// Forgets everything: a new term reads the statuses again.
    fn clear(&self) {
        self.with(|m| m.clear());
    }

    fn forget(&self, key: &PolicyKey) {
        self.with(|m| m.remove(key));
    }
}

/// `pods` of namespace `ns` grouped by the ReplicaSet that controls each
/// in `snapshot` (in `pods`' order; one without one under "").
pub(super) fn by_replica_set(
    snapshot: &Snapshot,
    ns: &str,
    pods: &[Arc<str>],
) -> Vec<(String, Vec<Arc<str>>)> {
    let owner: HashMap<&str, &str> = snapshot
        .pods
        .iter()
        .filter(|p| p.identity.namespace.as_deref() == Some(ns))
        .filter_map(|p| {
            let rs = controller_of_kind(p.owner_references(), "ReplicaSet")?;
            Some((p.identity.name.as_deref()?, rs.name.as_str()))
        })
        .collect();
    let mut out: Vec<(String, Vec<Arc<str>>)> = Vec::new();
    for pod in pods {
        let rs = owner.get(&**pod).copied().unwrap_or_default();
        match out.iter_mut().find(|(name, _)| name == rs) {
            Some((_, v)) => v.push(pod.clone()),
            None => out.push((rs.to_string(), vec![pod.clone()])),
        }
    }
    out
}

impl Engine {
    /// Whether this term has read `key`'s priced totals from its status.
    pub(crate) fn priced_seeded(&self, key: &PolicyKey) -> bool {
        self.pricing.is_none() || self.priced.seeded(key)
    }

    /// Reads `key`'s priced totals from its status (read fresh by the
    /// caller), under what this term priced before; once per term.
    pub(crate) fn seed_priced(&self, key: &PolicyKey, status: Option<&PricedScaleIns>) {
        if self.pricing.is_none() {
            return;
        }
        for w in self.priced.seed(key, status) {
            tracing::warn!(policy = %key, "{w}");
        }
        self.export_awaiting(key);
    }

    /// `key`'s priced totals as its status should show them: `None` without
    /// prices, before this term read its status, or when nothing was ever
    /// priced.
    pub(crate) fn priced_scale_ins(&self, key: &PolicyKey) -> Option<PricedScaleIns> {
        self.pricing.as_ref()?;
        self.priced.view(key)
    }

    pub(super) fn record_priced(&self, key: &PolicyKey, s: &PricedScaleIn, window: Duration) {
        let policy = key.to_string();
        self.metrics.scale_in_priced(&policy);
        for (choice, c) in [
            (ChoiceLabel::POLICY, &s.with_policy),
            (ChoiceLabel::DEFAULT, &s.by_default),
        ] {
            self.metrics.scale_in_freed(
                &policy,
                choice,
                c.victims,
                c.nodes.len(),
                c.hourly.as_f64(),
            );
        }
        let (dropped, watched) = self.priced.record(key, s, window);
        for a in &dropped {
            tracing::warn!(policy = %key, node = %a.node, "more than {MAX_AWAITING} freed nodes watched: the oldest counted as not removed");
            self.metrics
                .freed_node_settled(&policy, false, a.hourly.unwrap_or_default().as_f64());
        }
        self.metrics.freed_nodes_awaiting(&policy, watched);
        tracing::info!(
            policy = %key,
            workload = %s.workload,
            by = s.by.label(),
            victims = s.with_policy.victims,
            nodes_freed = s.with_policy.nodes.len(),
            hourly_freed = %s.with_policy.hourly,
            default_nodes_freed = s.by_default.nodes.len(),
            default_hourly_freed = %s.by_default.hourly,
            "scale-in priced: {}",
            s.summary()
        );
        self.status_due.note(key.clone());
    }

    /// Sets the watched-nodes gauge of `key`.
    fn export_awaiting(&self, key: &PolicyKey) {
        let watched = self
            .priced
            .view(key)
            .map_or(0, |s| s.awaiting_removal.len());
        self.metrics.freed_nodes_awaiting(&key.to_string(), watched);
    }

    /// Watches the freed nodes until `stop`: every `REMOVAL_POLL` the
    /// leader looks each up in the node cache and counts the ones gone as
    /// removed, those past their window as not; a change of leadership
    /// forgets every total (the next term reads the statuses again).
    pub async fn follow_removals(self: Arc<Self>, stop: impl Future<Output = ()> + Send) {
        if self.pricing.is_none() {
            return;
        }
        let mut changes = Box::pin(self.leadership.changes());
        let mut tick = tokio::time::interval(REMOVAL_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop = std::pin::pin!(stop);
        // without an election there is one term: the changes end at once
        let mut terms_end = false;
        loop {
            tokio::select! {
                _ = &mut stop => return,
                change = changes.next(), if !terms_end => match change {
                    Some(()) => {
                        self.priced.clear();
                        self.metrics.freed_nodes_awaiting_clear();
                    }
                    None => terms_end = true,
                },
                _ = tick.tick() => self.check_removals(),
            }
        }
    }

    /// One look at the watched nodes (see [`Engine::follow_removals`]).
    fn check_removals(&self) {
        if !self.leads() {
            return;
        }
        let names = self.priced.watched();
        if names.is_empty() {
            return;
        }
        let nodes: HashMap<String, Option<String>> = names
            .into_iter()
            .filter_map(|n| {
                let uid = self.caches.node(&n)?.metadata.uid.clone();
                Some((n, uid))
            })
            .collect();
        let current = |name: &str| nodes.get(name).map(|uid| uid.as_deref());
        for (key, settled, watched) in self.priced.settle(Timestamp::now(), current) {
            let policy = key.to_string();
            for s in &settled {
                tracing::info!(
                    policy = %key,
                    node = %s.node,
                    removed = s.removed,
                    hourly = %s.hourly.unwrap_or_default(),
                    "{}",
                    if s.removed {
                        "a node a scale-in freed was removed"
                    } else {
                        "a node a scale-in freed was not removed within the window"
                    }
                );
                self.metrics.freed_node_settled(
                    &policy,
                    s.removed,
                    s.hourly.unwrap_or_default().as_f64(),
                );
            }
            self.metrics.freed_nodes_awaiting(&policy, watched);
            self.status_due.note(key);
        }
    }

    /// Forgets a deleted policy's totals.
    pub(in crate::engine) fn forget_priced(&self, key: &PolicyKey) {
        self.priced.forget(key);
        self.metrics.forget_priced(&key.to_string());
    }
}

#[cfg(test)]
mod tests;
