//! Marked pods ([`crate::marker`]) go before every unmarked pod of the
//! policy, whatever the signals say, and among themselves in the policy's
//! order.
//!
//! A marked pod's cost is the cost the policy would write for it, moved
//! down by one fixed shift: the width of the range the policy writes
//! (`combine`'s range, or `0..=maxCost` when costs are ranks) plus however
//! far an unmarked pod's cost the policy keeps (a foreign value, Karpenter's,
//! a last value) lies below that range. Every marked cost then lies below
//! every unmarked one and the policy's order among marked pods is kept, and
//! a marked pod's cost depends on its own signals and that floor only, so
//! marking one pod writes that pod alone. The shift works on whole costs,
//! so it leaves `nodeConsolidation`'s node bands alone: marked pods simply
//! come before the first band.
//!
//! What the marker does not do: move a cost the policy may not write (a
//! marked pod with a foreign cost under `respectForeignCosts`, or
//! Karpenter's), or put a Ready pod before one the controller deletes first
//! anyway (unscheduled, Pending, not Ready: [`FirstAnyway`]); such a pod
//! carries no marked cost, so its marker costs no write.

use std::sync::Arc;

use super::{write_action, CostAction, CostWrite, NamedPolicy, PodPlan};
use crate::marker::FirstAnyway;

/// A pod's scale-down marker, as the plan read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Marked {
    /// The label that marks it.
    pub label: &'static str,
    /// Why the controller deletes the pod first anyway, when it does: its
    /// cost then stays the policy's own, and the marker costs no write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_anyway: Option<FirstAnyway>,
}

impl Marked {
    /// Whether the marker moves the pod's cost.
    pub fn costed(&self) -> bool {
        self.first_anyway.is_none()
    }
}

impl std::fmt::Display for Marked {
    /// `marked (LABEL)`, and why the marker needs no cost when it does not.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.first_anyway {
            None => write!(f, "marked ({})", self.label),
            Some(why) => write!(
                f,
                "marked ({}); {why}: deleted first anyway, no cost needed",
                self.label
            ),
        }
    }
}

/// The inclusive range of the costs `policy` writes for unmarked pods.
pub fn written_range(policy: &NamedPolicy) -> (i64, i64) {
    match policy.spec.ranked_max_cost() {
        Some(max) => (0, i64::from(max)),
        None => policy.spec.combined_range(),
    }
}

/// Whether the plan moves `p`'s cost for its marker.
fn honoured(p: &PodPlan) -> bool {
    p.marked.is_some_and(|m| m.costed())
}

/// Moves the marked pods' costs below every unmarked pod's (see the module
/// docs) and rebuilds `patches` in plan order when any moved. Warns about
/// marked pods whose cost the policy may not write, and when an unmarked
/// pod sits at int32's least value, so nothing can go below it.
pub(super) fn mark_costs(
    policy: &NamedPolicy,
    plans: &mut [PodPlan],
    patches: &mut Vec<CostWrite>,
    warnings: &mut Vec<String>,
) {
    if !plans.iter().any(honoured) {
        return;
    }
    let (lo, hi) = written_range(policy);
    let floor = plans
        .iter()
        .filter(|p| !honoured(p))
        .map(|p| i64::from(p.intended()))
        .min()
        .map_or(lo, |l| l.min(lo));
    if floor <= i64::from(i32::MIN) {
        warnings.push(format!(
            "an unmarked pod's cost is int32's least value ({}): marked pods cannot go below it",
            i32::MIN
        ));
    }
    let shift = hi - floor + 1;
    let mut unmovable = Vec::new();
    let mut buf = String::new();
    for p in plans.iter_mut().filter(|p| honoured(p)) {
        if matches!(
            p.action,
            CostAction::KeepForeign | CostAction::KeepKarpenter
        ) {
            unmovable.push(p.name.to_string());
            continue;
        }
        // a pod whose signal is missing still goes first: at the lowest marked cost
        let own = p.desired.map_or(lo, i64::from);
        let cost = (own - shift).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        p.desired = Some(cost);
        p.action = write_action(&p.owner, p.current_raw.as_deref(), cost, &mut buf);
    }
    if !unmovable.is_empty() {
        warnings.push(format!(
            "marked pod(s) keep a cost this policy did not write, which the marker does not \
             move: {} (respectForeignCosts or Karpenter's)",
            crate::text::capped_list(&unmovable, crate::text::LISTED)
        ));
    }
    let namespace: Arc<str> = policy.namespace.as_str().into();
    patches.clear();
    patches.extend(plans.iter().filter_map(|p| match p.action {
        CostAction::Patch(cost) => Some(CostWrite {
            namespace: namespace.clone(),
            pod: p.name.clone(),
            uid: p.uid.clone(),
            cost,
        }),
        _ => None,
    }));
}
