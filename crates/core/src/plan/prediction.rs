//! Prediction: the pods of each ReplicaSet keyed for the comparator, with the
//! colocation ranks upstream gives them, then ordered and checked against
//! the costs the policy intends: the order upstream will scale each
//! ReplicaSet down in.

use std::sync::Arc;

// Seeded hashing, several times faster than std's SipHash on short keys such
// as UIDs and ReplicaSet names; maps here are only looked up, never iterated,
// so their order cannot leak into a plan.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube_core::Selector;
use rayon::prelude::*;

use super::selection::{NsPod, Selection};
use crate::owner::controller_of;

use super::correction::{PodCosts, ReplicaSetCorrection, ScaleInTarget};
use super::{check, map_in_order, CostAction, PlanOptions, PodPlan, ReplicaSetPlan};
use crate::comparator::{
    rank_pods, victims_in_syncs, Comparator, GoTime, OrderedPods, ParsedCost, RankKey,
    BURST_REPLICAS,
};
use crate::policy::selector::selects;
use crate::policy::{LabelSelector, LabelSelectorRequirement};

/// Converts an apps/v1 selector to ours, to check it as upstream does.
fn from_apps_v1(
    s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> LabelSelector {
    LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: s
            .match_expressions
            .iter()
            .flatten()
            .map(|r| LabelSelectorRequirement {
                key: r.key.clone(),
                operator: r.operator.clone(),
                values: r.values.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

/// Upstream's related pods for the ReplicaSets controlled by `owner`: every
/// pod in the namespace selected by one of them (deduplicated by UID). The
/// same for every ReplicaSet of that controller, so callers compute it once.
fn related_pods<'p, 'a>(
    owner: &OwnerReference,
    replica_sets: &[&ReplicaSet],
    ns_pods: &'p [NsPod<'a>],
    parallel: bool,
) -> Vec<&'p NsPod<'a>> {
    let selectors = sibling_selectors(owner, replica_sets);
    // each pod's labels read once for all siblings
    let selected = |p: &&NsPod| {
        let labels = p.pod.labels();
        selectors.iter().any(|s| selects(s, labels))
    };
    let matching: Vec<&NsPod> = if parallel {
        ns_pods.par_iter().filter(selected).collect()
    } else {
        ns_pods.iter().filter(selected).collect()
    };
    let mut seen: HashSet<&str> = HashSet::with_capacity(matching.len());
    for p in &matching {
        if !seen.insert(p.pod.identity.uid.as_deref().unwrap_or("")) {
            // Two pods share a UID (possible in a file): which one counts
            // depends on upstream's sibling-by-sibling order.
            return related_pods_by_sibling(&selectors, ns_pods);
        }
    }
    matching
}

/// Selectors of the ReplicaSets controlled by `owner`, in snapshot order;
/// upstream skips a sibling whose selector does not parse.
fn sibling_selectors(owner: &OwnerReference, replica_sets: &[&ReplicaSet]) -> Vec<Selector> {
    replica_sets
        .iter()
        .filter(|r| {
            controller_of(r.metadata.owner_references.as_ref()).is_some_and(|o| o.uid == owner.uid)
        })
        .map(|r| from_apps_v1(&r.spec.selector))
        .filter(|sel| sel.check().is_ok())
        .map(|sel| sel.to_selector())
        .collect()
}

/// Related pods exactly as upstream lists them: sibling by sibling, each
/// UID kept the first time it is seen.
fn related_pods_by_sibling<'p, 'a>(
    selectors: &[Selector],
    ns_pods: &'p [NsPod<'a>],
) -> Vec<&'p NsPod<'a>> {
    let mut seen: HashSet<&str> = HashSet::with_capacity(ns_pods.len());
    let mut out = Vec::new();
    for sel in selectors {
        for p in ns_pods {
            if selects(sel, p.pod.labels())
                && seen.insert(p.pod.identity.uid.as_deref().unwrap_or(""))
            {
                out.push(p);
            }
        }
    }
    out
}

/// One ReplicaSet's pods keyed for the comparator, before their costs are
/// final: everything the order needs that does not depend on the plans, so
/// it can be built while the pods are being costed.
pub(super) struct KeyedReplicaSet<'a> {
    /// ReplicaSet name (`None`: selected pods without one).
    name: Option<&'a str>,
    /// Its controlling Deployment.
    deployment: Option<String>,
    /// Keys of the active pods it owns, with their colocation ranks; each
    /// key's cost is the live one.
    keys: Vec<RankKey<'a>>,
    /// For each key, the index of its pod among the selected pods.
    selected: Vec<Option<u32>>,
    /// Related pods behind the colocation ranks.
    related_pods: usize,
}

/// Active pods per node slot among `pods`: the input of the colocation
/// rank (upstream counts by `spec.nodeName`, the empty name included, which
/// is what a slot stands for).
fn pods_on_node<'p, 'a: 'p>(
    slots: usize,
    pods: impl IntoIterator<Item = &'p NsPod<'a>>,
) -> Vec<i64> {
    let mut on_node = vec![0; slots];
    for p in pods.into_iter().filter(|p| p.active) {
        on_node[p.node as usize] += 1;
    }
    on_node
}

/// Groups the selected pods (`by_name`: their rows in `selection`, in plan
/// order) by ReplicaSet and keys every active pod each one owns, with the
/// colocation ranks upstream gives them. Returns the groups in name order
/// and the warnings they raise.
pub(super) fn key_replica_sets<'a>(
    by_name: &[u32],
    selection: &Selection<'a>,
    ns_rs: &[&'a ReplicaSet],
    now: GoTime,
    parallel: bool,
) -> (Vec<KeyedReplicaSet<'a>>, Vec<String>) {
    let ns_pods = &selection.pods;
    let slots = selection.nodes.names.len();
    let mut warnings = Vec::new();
    let (plan_index, groups) = replica_set_groups(by_name, ns_pods, &selection.replica_sets);
    // related pods, and their count per node, depend only on the controller:
    // computed once per controller, not once per ReplicaSet
    let mut related_by_owner: HashMap<&str, (usize, Vec<i64>)> = HashMap::new();
    let mut out = Vec::with_capacity(groups.len());
    // one warning, however many (a short line at any snapshot size)
    let mut missing_rs = Vec::new();
    for (rs_name, owned) in groups {
        let rs = rs_name.and_then(|n| ns_rs.iter().find(|r| r.metadata.name.as_deref() == Some(n)));
        let own_counts;
        let (related_count, on_node): (usize, Option<&[i64]>) = match rs {
            Some(rs) => match controller_of(rs.metadata.owner_references.as_ref()) {
                Some(owner) => {
                    let (n, counts) =
                        related_by_owner
                            .entry(owner.uid.as_str())
                            .or_insert_with(|| {
                                let related = related_pods(owner, ns_rs, ns_pods, parallel);
                                (related.len(), pods_on_node(slots, related))
                            });
                    (*n, Some(counts))
                }
                None => (0, None),
            },
            None => match rs_name {
                Some(n) => {
                    missing_rs.push(n);
                    own_counts = pods_on_node(slots, owned.iter().map(|&i| &ns_pods[i as usize]));
                    (owned.len(), Some(&own_counts))
                }
                None => (0, None),
            },
        };
        let deployment = rs
            .and_then(|r| controller_of(r.metadata.owner_references.as_ref()))
            .filter(|o| o.kind == "Deployment")
            .map(|o| o.name.clone());
        let keys: Vec<RankKey> = map_in_order(parallel, &owned, |_, &i| {
            let p = &ns_pods[i as usize];
            let mut key = RankKey::from_pod(p.pod).with_now(now);
            key.rank = on_node.map_or(0, |c| c[p.node as usize]);
            key
        });
        let selected = owned
            .iter()
            .map(|&i| Some(plan_index[i as usize]).filter(|&j| j != NOT_SELECTED))
            .collect();
        out.push(KeyedReplicaSet {
            name: rs_name,
            deployment,
            keys,
            selected,
            related_pods: related_count,
        });
    }
    warnings.extend(missing_replica_sets_warning(&missing_rs));
    (out, warnings)
}

/// Marks a pod of the namespace that is not among the selected ones.
const NOT_SELECTED: u32 = u32::MAX;

/// A ReplicaSet's name (none: the selected pods without one) and the
/// namespace's active pods it owns.
type PodGroup<'a> = (Option<&'a str>, Vec<u32>);

/// The pods to key, by ReplicaSet: each namespace pod's index in plan order
/// (or [`NOT_SELECTED`]), and one group per ReplicaSet with a selected pod
/// (its name and the namespace's active pods it owns), by name, the
/// selected pods without a ReplicaSet first.
fn replica_set_groups<'a>(
    by_name: &[u32],
    ns_pods: &[NsPod],
    replica_sets: &[&'a str],
) -> (Vec<u32>, Vec<PodGroup<'a>>) {
    let mut plan_index = vec![NOT_SELECTED; ns_pods.len()];
    // upstream orders every active pod a ReplicaSet owns, selected or not:
    // one group per ReplicaSet with a selected pod, filled in one pass over
    // the namespace in the namespace's order
    let mut owned_by: Vec<Option<Vec<u32>>> = vec![None; replica_sets.len()];
    let mut without_rs = Vec::new();
    for (i, &p) in by_name.iter().enumerate() {
        plan_index[p as usize] = i as u32;
        match ns_pods[p as usize].replica_set {
            Some(r) => owned_by[r as usize] = Some(Vec::new()),
            None => without_rs.push(p),
        }
    }
    for (i, p) in ns_pods.iter().enumerate().filter(|(_, p)| p.active) {
        if let Some(Some(owned)) = p.replica_set.map(|r| &mut owned_by[r as usize]) {
            owned.push(i as u32);
        }
    }
    // by name, the selected pods without a ReplicaSet first
    let mut groups: Vec<PodGroup> = owned_by
        .into_iter()
        .zip(replica_sets)
        .filter_map(|(owned, name)| Some((Some(*name), owned?)))
        .collect();
    if !without_rs.is_empty() {
        groups.push((None, without_rs));
    }
    groups.sort_by_key(|(name, _)| *name);
    (plan_index, groups)
}

/// One warning for the ReplicaSets the snapshot lacks, however many (a
/// short line at any snapshot size).
fn missing_replica_sets_warning(missing_rs: &[&str]) -> Option<String> {
    match missing_rs {
        [] => None,
        [n] => Some(format!(
            "ReplicaSet {n} is not in the snapshot: colocation ranks use its own pods"
        )),
        many => Some(format!(
            "{} ReplicaSets are not in the snapshot ({}): colocation ranks use each one's own pods",
            many.len(),
            crate::text::capped_list(many, crate::text::LISTED)
        )),
    }
}

/// Orders each keyed ReplicaSet with the comparator and checks the result;
/// with a scale-in, corrects the ReplicaSets it scales, and with
/// `corrected` orders them as they are once the correction landed.
/// `plans[i]` is the plan of the i-th selected pod.
pub(super) fn check_replica_sets(
    keyed: Vec<KeyedReplicaSet>,
    plans: &[PodPlan],
    opts: &PlanOptions,
    scale_in: Option<&ScaleInTarget>,
    corrected: bool,
) -> (Vec<ReplicaSetPlan>, Vec<ReplicaSetCorrection>) {
    let cmp = Comparator {
        gates: opts.gates,
        now: opts.now,
    };
    let mut corrections = Vec::new();
    let mut out = Vec::with_capacity(keyed.len());
    for KeyedReplicaSet {
        name: rs_name,
        deployment,
        mut keys,
        selected,
        related_pods,
    } in keyed
    {
        let owned_plans: Vec<Option<&PodPlan>> = selected
            .iter()
            .map(|i| i.map(|i| &plans[i as usize]))
            .collect();
        if let Some(target) =
            scale_in.filter(|t| rs_name.is_some_and(|n| t.replica_sets.contains(n)))
        {
            let c = correct_replica_set(
                rs_name.unwrap_or_default(),
                &cmp,
                &keys,
                &owned_plans,
                target,
            );
            if corrected {
                // the correction's indices are the keys'
                for w in &c.correction.writes {
                    keys[w.pod].cost = ParsedCost {
                        value: w.cost,
                        problem: None,
                    };
                }
            }
            corrections.push(c);
        }
        if opts.assume_patches_applied {
            apply_patches(&mut keys, &owned_plans);
        }
        out.push(replica_set_plan(
            &cmp,
            opts,
            rs_name,
            deployment,
            keys,
            &owned_plans,
            related_pods,
        ));
    }
    (out, corrections)
}

/// Sets each key's cost to the one its plan patches. The cost annotation is
/// the only thing a patch changes that the comparator reads, so this equals
/// keying a patched copy of each pod without cloning it.
fn apply_patches(keys: &mut [RankKey], owned_plans: &[Option<&PodPlan>]) {
    for (k, plan) in keys.iter_mut().zip(owned_plans) {
        if let Some(CostAction::Patch(c)) = plan.map(|x| &x.action) {
            // what upstream parses from the decimal we write (tested)
            k.cost = ParsedCost {
                value: *c,
                problem: None,
            };
        }
    }
}

/// Orders one ReplicaSet's pods (`keys`, costs as the plan leaves them)
/// with the comparator and checks the order against the plan's intent.
fn replica_set_plan(
    cmp: &Comparator,
    opts: &PlanOptions,
    rs_name: Option<&str>,
    deployment: Option<String>,
    keys: Vec<RankKey>,
    owned_plans: &[Option<&PodPlan>],
    related_pods: usize,
) -> ReplicaSetPlan {
    let ranking = rank_pods(cmp, &keys);
    let ordered = OrderedPods { keys, ranking };
    let order = &ordered.ranking.order;
    // a managed pod's name is its plan's, shared
    let key_names: Vec<Arc<str>> = ordered
        .keys
        .iter()
        .zip(owned_plans)
        .map(|(k, plan)| plan.map_or_else(|| Arc::from(&*k.name), |p| p.name.clone()))
        .collect();
    let name = |i: usize| key_names[i].clone();
    let names: Vec<Arc<str>> = order.iter().map(|&i| name(i)).collect();
    let live_costs: Vec<i32> = ordered.in_order().map(|k| k.cost.value).collect();
    let intended_costs: Vec<i32> = order
        .iter()
        .map(|&i| owned_plans[i].map_or(ordered.keys[i].cost.value, PodPlan::intended))
        .collect();
    // as the controller deletes them: in syncs of at most 500
    let syncs = opts
        .scale_down_by
        .map(|n| victims_in_syncs(cmp, &ordered.keys, &ordered.ranking, n, BURST_REPLICAS));
    let victims: Vec<Arc<str>> = syncs
        .as_ref()
        .map(|s| s.victims.iter().map(|&i| name(i)).collect())
        .unwrap_or_default();
    let tie_at_cut = syncs.as_ref().is_some_and(|s| s.tie_at_cut);
    let (verdict, mismatches) = check::check_order(cmp, &ordered, &intended_costs, owned_plans);
    let ambiguous = ordered
        .ranking
        .ambiguity
        .as_ref()
        .map(|a| a.pods.iter().map(|&i| name(i)).collect())
        .unwrap_or_default();
    ReplicaSetPlan {
        name: rs_name.unwrap_or("(none)").to_string(),
        deployment,
        predicted: names,
        intended_costs,
        live_costs,
        victims,
        verdict,
        mismatches,
        ambiguous,
        tie_at_cut,
        ties: ordered.ranking.ties(),
        related_pods,
    }
}

/// The minimal correction of one ReplicaSet (`keys` with live costs) for
/// a scale-in: what the policy intends for each pod, and whether it may
/// write it.
fn correct_replica_set(
    name: &str,
    cmp: &Comparator,
    keys: &[RankKey],
    plans: &[Option<&PodPlan>],
    target: &ScaleInTarget,
) -> ReplicaSetCorrection {
    let pods: Vec<PodCosts> = keys
        .iter()
        .zip(plans)
        .map(|(k, plan)| PodCosts {
            intended: plan.map_or(k.cost.value, |p| p.intended()),
            // a foreign or Karpenter's value the policy leaves alone, or a
            // pod it does not manage
            writable: plan.is_some_and(|p| {
                !matches!(
                    p.action,
                    CostAction::KeepForeign | CostAction::KeepKarpenter
                )
            }),
            in_flight: target.in_flight.get(&*k.name).copied(),
        })
        .collect();
    let names: Vec<Arc<str>> = keys
        .iter()
        .zip(plans)
        .map(|(k, p)| p.map_or_else(|| Arc::from(&*k.name), |p| p.name.clone()))
        .collect();
    let uids: Vec<Arc<str>> = keys
        .iter()
        .zip(plans)
        .map(|(k, p)| p.map_or_else(|| Arc::from(&*k.uid), |p| p.uid.clone()))
        .collect();
    ReplicaSetCorrection::new(name, cmp, keys, &pods, names, &uids, target.by)
}
