//! A plan as a `writes: OnScaleIn` policy writes it: nothing in the
//! background, and at a scale-in only its minimal correction
//! ([`super::correction`]), as the operator sends it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;

use super::{CostAction, CostWrite, PodPlan, ReplicaSetCorrection, ScaleInTarget};

/// A scale-in by `by` of every ReplicaSet of the namespace, with nothing in
/// flight (a plan reads the pods as they are).
pub(super) fn target(replica_sets: &[&ReplicaSet], by: usize) -> ScaleInTarget {
    ScaleInTarget {
        replica_sets: replica_sets
            .iter()
            .filter_map(|r| r.metadata.name.clone())
            .collect::<BTreeSet<_>>(),
        by,
        in_flight: HashMap::new(),
    }
}

/// No background write: each patch the policy would send becomes the cost
/// it wants but does not write.
pub(super) fn nothing_in_the_background(plans: &mut [PodPlan], patches: &mut Vec<CostWrite>) {
    for p in plans {
        if let CostAction::Patch(c) = p.action {
            p.action = CostAction::NotWritten(c);
        }
    }
    patches.clear();
}

/// The corrections' writes as the plan's patches (by pod name, as the
/// background's are) and on their pods; a warning for each ReplicaSet no
/// write can make exact.
pub(super) fn written_at_the_scale_in(
    namespace: &str,
    corrections: &[ReplicaSetCorrection],
    plans: &mut [PodPlan],
    patches: &mut Vec<CostWrite>,
) -> Vec<String> {
    let at: HashMap<Arc<str>, usize> = plans
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.clone(), i))
        .collect();
    let namespace: Arc<str> = namespace.into();
    let mut warnings = Vec::new();
    for c in corrections {
        for w in &c.writes {
            // the correction writes only pods the policy may write: planned ones
            if let Some(&i) = at.get(&w.pod) {
                plans[i].action = CostAction::Patch(w.cost);
            }
            patches.push(CostWrite {
                namespace: namespace.clone(),
                pod: w.pod.clone(),
                uid: w.uid.clone(),
                cost: w.cost,
            });
        }
        if let Some(why) = c.correction.unreachable {
            warnings.push(format!(
                "writes: OnScaleIn: no writes make a scale-in of ReplicaSet {} by {} delete \
                 exactly the pods the policy wants ({why}); the patches are its best effort",
                c.replica_set, c.by
            ));
        }
    }
    patches.sort_by(|a, b| a.pod.cmp(&b.pod));
    warnings
}
