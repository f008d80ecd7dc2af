//! The order check: does upstream's predicted order delete pods in ascending
//! intended cost, and where not, why.

use foldhash::HashSet;

use crate::comparator::{Comparator, OrderedPods, Rule};

use super::{CostAction, CostOwner, PodPlan};

/// Outcome of the check for one ReplicaSet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Verdict {
    /// Upstream deletes in ascending intended cost.
    AsIntended,
    /// Some pod is deleted before a cheaper one.
    NotAsIntended,
    /// Upstream's order is not well defined among some pods (otherwise as intended).
    Ambiguous,
}

/// Why a pod is deleted before a pod with a lower intended cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum MismatchReason {
    /// The pod is not scheduled: upstream deletes unassigned pods first.
    Unassigned,
    /// Its phase is Pending or Unknown: upstream deletes those before Running.
    NotRunning,
    /// It is not Ready: upstream deletes those before Ready pods.
    NotReady,
    /// A patch computed for it has not landed yet.
    PendingPatch,
    /// Its policy writes costs only at scale-ins (`writes: OnScaleIn`), and
    /// none writes this pod's.
    OnScaleIn,
    /// It carries a cost this policy did not write and leaves alone.
    ForeignCost,
    /// It carries a cost Karpenter manages, which every policy leaves alone.
    KarpenterCost,
    /// Its signal is missing; it keeps its last cost.
    SignalMissing,
    /// The pod is owned by the ReplicaSet but not selected by the policy.
    NotManaged,
    /// `PodDeletionCost` is off: upstream ignores the annotation.
    FeatureGateOff,
    /// Upstream's comparator is not a strict weak order on these pods.
    Ambiguous,
}

impl MismatchReason {
    /// Human explanation.
    pub fn describe(self) -> &'static str {
        match self {
            MismatchReason::Unassigned => "not scheduled (upstream deletes unassigned pods first)",
            MismatchReason::NotRunning => {
                "Pending/Unknown (upstream deletes them before Running pods)"
            }
            MismatchReason::NotReady => "not Ready (upstream deletes them before Ready pods)",
            MismatchReason::PendingPatch => "its cost patch has not landed yet",
            MismatchReason::OnScaleIn => {
                "writes: OnScaleIn writes its cost only where a scale-in needs it"
            }
            MismatchReason::ForeignCost => "carries a cost this policy did not write",
            MismatchReason::KarpenterCost => {
                "carries Karpenter's cost (karpenter.sh/managed-deletion-cost), left alone"
            }
            MismatchReason::SignalMissing => "signal missing: kept its last cost",
            MismatchReason::NotManaged => "owned by the ReplicaSet but not selected by the policy",
            MismatchReason::FeatureGateOff => "PodDeletionCost feature gate is off",
            MismatchReason::Ambiguous => {
                "upstream order among these pods depends on informer order"
            }
        }
    }
}

/// One inversion: `pod` goes before `before` although its intended cost is higher.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mismatch {
    /// Pod deleted too early.
    pub pod: String,
    /// The cheaper pod it goes before.
    pub before: String,
    /// Why.
    pub reason: MismatchReason,
    /// The upstream rule that placed it.
    pub rule: Rule,
}

fn cost_reason(plan: Option<&PodPlan>) -> Option<MismatchReason> {
    let Some(p) = plan else {
        return Some(MismatchReason::NotManaged);
    };
    match (&p.action, &p.owner) {
        (CostAction::Patch(_), _) => Some(MismatchReason::PendingPatch),
        (CostAction::NotWritten(_), _) => Some(MismatchReason::OnScaleIn),
        (CostAction::KeepKarpenter, _) | (_, CostOwner::Karpenter) => {
            Some(MismatchReason::KarpenterCost)
        }
        (CostAction::KeepForeign, _) | (_, CostOwner::Foreign(_)) => {
            Some(MismatchReason::ForeignCost)
        }
        (CostAction::KeepLastValue(_), _) => Some(MismatchReason::SignalMissing),
        _ => None,
    }
}

/// Compares upstream's order (`ordered`) with the intended costs (given in
/// predicted order) and explains each adjacent inversion. `plans[i]` is the
/// plan of the pod of `ordered.keys[i]` (`None`: not managed by the policy).
pub fn check_order(
    cmp: &Comparator,
    ordered: &OrderedPods,
    intended: &[i32],
    plans: &[Option<&PodPlan>],
) -> (Verdict, Vec<Mismatch>) {
    let order = &ordered.ranking.order;
    // a set: looked up for every inversion, and an ambiguity can span every pod
    let ambiguous: HashSet<usize> = ordered
        .ranking
        .ambiguity
        .as_ref()
        .map(|a| a.pods.iter().copied().collect())
        .unwrap_or_default();
    let mut mismatches = Vec::new();
    for pos in 0..order.len().saturating_sub(1) {
        if intended[pos] <= intended[pos + 1] {
            continue;
        }
        let (a, b) = (&ordered.keys[order[pos]], &ordered.keys[order[pos + 1]]);
        let (_, rule) = cmp.decide(a, b);
        let reason = match rule {
            Rule::Unassigned => MismatchReason::Unassigned,
            Rule::Phase => MismatchReason::NotRunning,
            Rule::Readiness => MismatchReason::NotReady,
            _ if !cmp.gates.pod_deletion_cost => MismatchReason::FeatureGateOff,
            _ if ambiguous.contains(&order[pos]) && ambiguous.contains(&order[pos + 1]) => {
                MismatchReason::Ambiguous
            }
            _ => cost_reason(plans[order[pos]])
                .or_else(|| cost_reason(plans[order[pos + 1]]))
                .unwrap_or(MismatchReason::PendingPatch),
        };
        mismatches.push(Mismatch {
            pod: a.name.to_string(),
            before: b.name.to_string(),
            reason,
            rule,
        });
    }
    let verdict = if !mismatches.is_empty() {
        Verdict::NotAsIntended
    } else if ordered.ranking.ambiguity.is_some() {
        Verdict::Ambiguous
    } else {
        Verdict::AsIntended
    };
    (verdict, mismatches)
}
