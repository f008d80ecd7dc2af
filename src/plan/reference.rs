//! The planner as first written, kept verbatim as the reference the
//! optimised planner in `super` must match field for field (it clones every
//! pod for the comparator's view and rescans the namespace per ReplicaSet).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::{
    check, default_value, Action, CostOwner, Patch, Plan, PlanOptions, PodPlan, PreviousValues,
    ReplicaSetPlan, ResolvedPolicy, SignalValue, Snapshot, POLICY_ANNOTATION,
};
use crate::comparator::{self, is_pod_active, parse_deletion_cost, Comparator, POD_DELETION_COST};
use crate::policy::validate::{BillingSource, Target};
use crate::policy::{
    BillingPreset, LabelSelector, LabelSelectorRequirement, OnSignalMissing, TargetKind,
    ValidatedSignal,
};
use crate::signals::billing::billing_class;
use crate::signals::utilization::quantize;
use crate::signals::{Sample, SignalSamples};

fn controller_of(refs: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    refs?.iter().find(|r| r.controller == Some(true))
}

fn pod_rs(pod: &Pod) -> Option<&OwnerReference> {
    controller_of(pod.metadata.owner_references.as_ref()).filter(|r| r.kind == "ReplicaSet")
}

/// Converts an apps/v1 selector to ours for matching.
fn to_selector(s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector) -> LabelSelector {
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

/// Which pods of the namespace the policy selects (active or not).
fn selected<'a>(
    policy: &ResolvedPolicy,
    ns_pods: &[&'a Pod],
    replica_sets: &[&ReplicaSet],
) -> Vec<&'a Pod> {
    match &policy.spec.target {
        Target::Selector(sel) => ns_pods
            .iter()
            .copied()
            .filter(|p| sel.matches(p.metadata.labels.as_ref()))
            .collect(),
        Target::Workload(t) if t.kind == TargetKind::ReplicaSet => ns_pods
            .iter()
            .copied()
            .filter(|p| pod_rs(p).is_some_and(|r| r.name == t.name))
            .collect(),
        Target::Workload(t) => {
            let name = &t.name;
            let rs_names: BTreeSet<&str> = replica_sets
                .iter()
                .filter(|rs| {
                    controller_of(rs.metadata.owner_references.as_ref())
                        .is_some_and(|o| o.kind == "Deployment" && &o.name == name)
                })
                .filter_map(|rs| rs.metadata.name.as_deref())
                .collect();
            ns_pods
                .iter()
                .copied()
                .filter(|p| pod_rs(p).is_some_and(|r| rs_names.contains(&*r.name)))
                .collect()
        }
    }
}

/// Upstream's related pods for a ReplicaSet: every pod in the namespace
/// selected by a ReplicaSet sharing its controller (deduplicated by UID);
/// none when the ReplicaSet has no controller.
fn related_pods<'a>(
    rs: &ReplicaSet,
    replica_sets: &[&ReplicaSet],
    ns_pods: &[&'a Pod],
) -> Vec<&'a Pod> {
    let Some(owner) = controller_of(rs.metadata.owner_references.as_ref()) else {
        return Vec::new();
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for sibling in replica_sets.iter().filter(|r| {
        controller_of(r.metadata.owner_references.as_ref()).is_some_and(|o| o.uid == owner.uid)
    }) {
        let sel = to_selector(&sibling.spec.selector);
        // upstream skips a sibling whose selector does not parse
        if sel.check().is_err() {
            continue;
        }
        for p in ns_pods {
            if sel.matches(p.metadata.labels.as_ref()) {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                if seen.insert(uid) {
                    out.push(*p);
                }
            }
        }
    }
    out
}

fn creation_ns(p: &Pod) -> i128 {
    p.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_nanosecond())
        .unwrap_or(i128::MIN)
}

/// Plans one policy, leaving out pods another policy has won (`excluded`):
/// they are neither costed nor patched, but still ordered with their ReplicaSet.
pub(super) fn plan_excluding(
    policy: &ResolvedPolicy,
    snapshot: &Snapshot,
    samples: &SignalSamples,
    previous: &PreviousValues,
    opts: &PlanOptions,
    excluded: &BTreeSet<String>,
) -> Plan {
    let ns = policy.namespace.as_str();
    let mut warnings = Vec::new();
    let ns_pods: Vec<&Pod> = snapshot
        .pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref().unwrap_or("") == ns)
        .collect();
    let ns_rs: Vec<&ReplicaSet> = snapshot
        .replica_sets
        .iter()
        .filter(|r| r.metadata.namespace.as_deref().unwrap_or("") == ns)
        .collect();
    let nodes: HashMap<&str, &Node> = snapshot
        .nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref().map(|name| (name, n)))
        .collect();
    let node_name = |p: &Pod| -> String {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };

    let all_selected: Vec<&Pod> = selected(policy, &ns_pods, &ns_rs)
        .into_iter()
        .filter(|p| !excluded.contains(p.metadata.name.as_deref().unwrap_or("")))
        .collect();
    let inactive: Vec<String> = all_selected
        .iter()
        .filter(|p| !is_pod_active(p))
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let mut pods: Vec<&Pod> = all_selected
        .into_iter()
        .filter(|p| is_pod_active(p))
        .collect();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));

    let missing_nodes: BTreeSet<String> = pods
        .iter()
        .map(|p| node_name(p))
        .filter(|n| !n.is_empty() && !nodes.contains_key(n.as_str()))
        .collect();
    if !missing_nodes.is_empty() {
        warnings.push(format!(
            "nodes not in the snapshot (their labels read as empty): {}",
            missing_nodes.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }

    // Signal inputs that depend on the whole set of pods.
    let pods_per_node: HashMap<String, i64> = {
        let mut m = HashMap::new();
        for p in snapshot.pods.iter().filter(|p| is_pod_active(p)) {
            let n = node_name(p);
            if !n.is_empty() {
                *m.entry(n).or_insert(0) += 1;
            }
        }
        m
    };
    let node_label = |p: &Pod, key: &str| -> Option<String> {
        nodes
            .get(node_name(p).as_str())
            .and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(key).cloned())
    };
    let signal_values: Vec<Vec<(Option<i64>, String)>> = policy
        .spec
        .signals
        .iter()
        .enumerate()
        .map(|(idx, spec)| {
            evaluate_signal(
                idx,
                spec,
                &pods,
                &nodes,
                &pods_per_node,
                samples,
                previous,
                &node_label,
            )
        })
        .collect();

    // the reference remembers every signal's value; only utilisation's are read
    let mut values: BTreeMap<String, BTreeMap<usize, i64>> = BTreeMap::new();
    let mut plans = Vec::with_capacity(pods.len());
    let mut patches = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let annotations = pod.metadata.annotations.as_ref();
        let current_raw = annotations.and_then(|a| a.get(POD_DELETION_COST)).cloned();
        let current = parse_deletion_cost(current_raw.as_deref().unwrap_or("0")).value;
        let writer = annotations.and_then(|a| a.get(POLICY_ANNOTATION)).cloned();
        let owner = match (&current_raw, writer) {
            (None, _) => CostOwner::None,
            (Some(_), Some(w)) if w == policy.name => CostOwner::Ours,
            (Some(_), w) => CostOwner::Foreign(w),
        };
        let mut breakdown = Vec::new();
        let mut combined = Vec::new();
        let mut missing: Option<String> = None;
        for (idx, spec) in policy.spec.signals.iter().enumerate() {
            let (v, detail) = &signal_values[idx][i];
            let no_value = v.is_none();
            let v = match v {
                Some(v) => Some(*v),
                None => match policy.spec.on_signal_missing {
                    OnSignalMissing::KeepLastValue => {
                        missing.get_or_insert_with(|| format!("{}: {detail}", spec.kind_name()));
                        None
                    }
                    OnSignalMissing::Skip => Some(spec.value_range().0),
                    OnSignalMissing::UseDefault => Some(default_value(spec)),
                },
            };
            if let Some(v) = v {
                values.entry(name.clone()).or_default().insert(idx, v);
                combined.push(v);
            }
            breakdown.push(SignalValue {
                signal: spec.kind_name(),
                value: v,
                detail: detail.as_str().into(),
                missing: no_value,
            });
        }
        let desired = missing.is_none().then(|| policy.spec.combine(&combined));
        let action = match (&owner, desired) {
            (CostOwner::Foreign(_), _) if policy.spec.respect_foreign_costs => Action::KeepForeign,
            (_, None) => Action::KeepLastValue(missing.clone().unwrap_or_default()),
            (CostOwner::Ours, Some(d))
                if current_raw.as_deref() == Some(d.to_string().as_str()) =>
            {
                Action::Unchanged
            }
            (_, Some(d)) => Action::Patch(d),
        };
        if let Action::Patch(cost) = action {
            patches.push(Patch {
                namespace: ns.into(),
                pod: name.as_str().into(),
                uid: pod.metadata.uid.as_deref().unwrap_or_default().into(),
                cost,
            });
        }
        plans.push(PodPlan {
            name: name.into(),
            uid: pod.metadata.uid.as_deref().unwrap_or_default().into(),
            node: node_name(pod).into(),
            replica_set: pod_rs(pod).map(|r| r.name.as_str().into()),
            signals: breakdown,
            current_raw: current_raw.map(Arc::from),
            current,
            owner,
            desired: if matches!(action, Action::KeepForeign) {
                None
            } else {
                desired
            },
            action,
        });
    }

    // maxCost, when the combined costs can leave 0..=maxCost: each wanted
    // cost becomes its rank among the distinct wanted costs, scaled into range
    if let Some(max) = policy.spec.max_cost {
        let (lo, hi) = policy.spec.combined_range();
        if lo < 0 || hi > i64::from(max) {
            let distinct: BTreeSet<i32> = plans.iter().filter_map(|p| p.desired).collect();
            let top = distinct.len() as i64 - 1;
            let written: BTreeMap<i32, i32> = distinct
                .iter()
                .enumerate()
                .map(|(rank, &c)| {
                    let rank = rank as i64;
                    let w = if top <= i64::from(max) {
                        rank
                    } else {
                        rank * i64::from(max) / top
                    };
                    (c, w as i32)
                })
                .collect();
            if top > i64::from(max) {
                warnings.push(format!(
                    "spec.maxCost {max}: the pods want {} different costs, more than the {} values of \
                     0..={max}: neighbouring costs share a value (order kept, some ties added; raise \
                     maxCost to keep every difference)",
                    distinct.len(),
                    i64::from(max) + 1
                ));
            }
            patches.clear();
            for p in &mut plans {
                let Some(d) = p.desired else { continue };
                let w = written[&d];
                p.desired = Some(w);
                p.action = if p.owner == CostOwner::Ours
                    && p.current_raw.as_deref() == Some(w.to_string().as_str())
                {
                    Action::Unchanged
                } else {
                    Action::Patch(w)
                };
                if let Action::Patch(cost) = p.action {
                    patches.push(Patch {
                        namespace: ns.into(),
                        pod: p.name.clone(),
                        uid: p.uid.clone(),
                        cost,
                    });
                }
            }
        }
    }

    let replica_sets = check_replica_sets(&plans, &pods, &ns_pods, &ns_rs, opts, &mut warnings);
    Plan {
        policy: format!("{ns}/{}", policy.name),
        pods: plans,
        patches,
        replica_sets,
        values: values
            .into_iter()
            .flat_map(|(pod, m)| {
                m.into_iter()
                    .filter(|(idx, _)| {
                        matches!(policy.spec.signals[*idx], ValidatedSignal::Utilization(_))
                    })
                    .map(move |(idx, v)| (pod.clone(), idx, v))
            })
            .collect(),
        inactive,
        warnings,
        savings: None,
    }
}

/// Values of one signal for every pod, with a readable detail.
#[allow(clippy::too_many_arguments)]
fn evaluate_signal(
    idx: usize,
    spec: &ValidatedSignal,
    pods: &[&Pod],
    nodes: &HashMap<&str, &Node>,
    pods_per_node: &HashMap<String, i64>,
    samples: &SignalSamples,
    previous: &PreviousValues,
    node_label: &dyn Fn(&Pod, &str) -> Option<String>,
) -> Vec<(Option<i64>, String)> {
    let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    let node_of = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    match spec {
        ValidatedSignal::BillingClass(b) => {
            let (label, preset) = match &b.source {
                BillingSource::NodeLabel(l) => (Some(l.as_str()), BillingPreset::Auto),
                BillingSource::Preset(p) => (None, *p),
            };
            let classes: Vec<Option<String>> = pods
                .iter()
                .map(|p| {
                    let labels = nodes
                        .get(node_of(p).as_str())
                        .and_then(|n| n.metadata.labels.as_ref());
                    billing_class(labels, label, preset)
                })
                .collect();
            // over a class budget: the newest pods beyond it go first
            let mut over: BTreeSet<usize> = BTreeSet::new();
            for (class, budget) in &b.budgets {
                let mut on: Vec<usize> = (0..pods.len())
                    .filter(|&i| classes[i].as_deref() == Some(class.as_str()))
                    .collect();
                let excess = on.len().saturating_sub(*budget as usize);
                on.sort_by(|&a, &b| {
                    creation_ns(pods[b])
                        .cmp(&creation_ns(pods[a]))
                        .then_with(|| pods[b].metadata.name.cmp(&pods[a].metadata.name))
                });
                over.extend(on.into_iter().take(excess));
            }
            let lo = b.over_budget_value().unwrap_or(spec.value_range().0);
            (0..pods.len())
                .map(|i| {
                    let class = classes[i].as_deref();
                    let base = b.cost_of(class);
                    let shown = class.unwrap_or("(none)");
                    if over.contains(&i) {
                        (Some(lo), format!("{shown} (over budget)"))
                    } else {
                        (Some(i64::from(base)), shown.to_string())
                    }
                })
                .collect()
        }
        ValidatedSignal::Utilization(u) => {
            let by_pod = samples.utilization.get(&idx).map(|s| &s.by_pod);
            pods.iter()
                .map(|p| {
                    let n = name(p);
                    let prev = previous.get(&n, idx).and_then(|v| u32::try_from(v).ok());
                    let q = |v: f64| {
                        i64::from(quantize(
                            v,
                            u.range.min,
                            u.range.max,
                            u.buckets,
                            prev,
                            u.hysteresis,
                        ))
                    };
                    match by_pod.and_then(|m| m.get(&n)) {
                        Some(Sample::Value(v)) => (Some(q(*v)), format!("{v:.3}")),
                        Some(Sample::Unusable(problem)) => (None, problem.to_string()),
                        None => (None, "no sample".to_string()),
                    }
                })
                .collect()
        }
        ValidatedSignal::NodeConsolidation(c) => pods
            .iter()
            .map(|p| {
                let count = pods_per_node.get(&node_of(p)).copied().unwrap_or(0);
                (
                    Some(count.min(i64::from(c.max_pods))),
                    format!("{count} pods on node"),
                )
            })
            .collect(),
        ValidatedSignal::ZoneBalance(z) => {
            let zones: Vec<String> = pods
                .iter()
                .map(|p| node_label(p, &z.topology_key).unwrap_or_default())
                .collect();
            let mut per_zone: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
            for (i, z) in zones.iter().enumerate() {
                per_zone.entry(z.as_str()).or_default().push(i);
            }
            let fullest = per_zone.values().map(Vec::len).max().unwrap_or(0) as i64;
            let mut out = vec![(None, String::new()); pods.len()];
            for (zone, members) in &per_zone {
                // i-th pod of a zone with c pods sits at i + (fullest - c): zones
                // lose pods round-robin from the fullest down
                let c = members.len() as i64;
                for (pos, &i) in members.iter().enumerate() {
                    let v = (pos as i64 + fullest - c).min(i64::from(z.max_per_zone));
                    let z = if zone.is_empty() { "(none)" } else { zone };
                    out[i] = (Some(v), format!("{z} ({c} pods)"));
                }
            }
            out
        }
    }
}

/// Orders each ReplicaSet's pods with the comparator and checks the result.
fn check_replica_sets(
    plans: &[PodPlan],
    pods: &[&Pod],
    ns_pods: &[&Pod],
    ns_rs: &[&ReplicaSet],
    opts: &PlanOptions,
    warnings: &mut Vec<String>,
) -> Vec<ReplicaSetPlan> {
    let cmp = Comparator {
        gates: opts.gates,
        now: opts.now,
    };
    // what upstream will read: the snapshot, with our patches if assumed landed
    let patched: HashMap<&str, i32> = plans
        .iter()
        .filter_map(|p| match p.action {
            Action::Patch(c) if opts.assume_patches_applied => Some((&*p.name, c)),
            _ => None,
        })
        .collect();
    let view = |p: &Pod| -> Pod {
        let mut p = p.clone();
        if let Some(c) = p.metadata.name.as_deref().and_then(|n| patched.get(n)) {
            p.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(POD_DELETION_COST.to_string(), c.to_string());
        }
        p
    };
    let plan_by_name: HashMap<&str, &PodPlan> = plans.iter().map(|p| (&*p.name, p)).collect();
    let mut groups: BTreeMap<Option<String>, Vec<&Pod>> = BTreeMap::new();
    for p in pods {
        groups
            .entry(pod_rs(p).map(|r| r.name.clone()))
            .or_default()
            .push(p);
    }
    let mut out = Vec::new();
    for (rs_name, members) in groups {
        let rs = rs_name
            .as_deref()
            .and_then(|n| ns_rs.iter().find(|r| r.metadata.name.as_deref() == Some(n)));
        // upstream orders every active pod the ReplicaSet owns, selected or not
        let owned: Vec<Pod> = match &rs_name {
            Some(n) => ns_pods
                .iter()
                .filter(|p| is_pod_active(p) && pod_rs(p).is_some_and(|r| &r.name == n))
                .map(|p| view(p))
                .collect(),
            None => members.iter().map(|p| view(p)).collect(),
        };
        let related: Vec<Pod> = match rs {
            Some(rs) => related_pods(rs, ns_rs, ns_pods)
                .into_iter()
                .map(view)
                .collect(),
            None => {
                if let Some(n) = &rs_name {
                    warnings.push(format!(
                        "ReplicaSet {n} is not in the snapshot: colocation ranks use its own pods"
                    ));
                    owned.clone()
                } else {
                    Vec::new()
                }
            }
        };
        let deployment = rs
            .and_then(|r| controller_of(r.metadata.owner_references.as_ref()))
            .filter(|o| o.kind == "Deployment")
            .map(|o| o.name.clone());
        let ordered = comparator::order_pods(&cmp, owned.iter(), related.iter());
        let names: Vec<Arc<str>> = ordered.in_order().map(|k| (&*k.name).into()).collect();
        let live_costs: Vec<i32> = ordered.in_order().map(|k| k.cost.value).collect();
        let intended_costs: Vec<i32> = ordered
            .in_order()
            .map(|k| {
                plan_by_name
                    .get(&*k.name)
                    .map(|p| p.intended())
                    .unwrap_or(k.cost.value)
            })
            .collect();
        let victims: Vec<Arc<str>> = opts
            .scale_down_by
            .map(|n| {
                ordered
                    .victims(n)
                    .into_iter()
                    .map(|i| (&*ordered.keys[i].name).into())
                    .collect()
            })
            .unwrap_or_default();
        let tie_at_cut = opts
            .scale_down_by
            .is_some_and(|n| ordered.ranking.tie_at_cut(n));
        let key_plans: Vec<Option<&PodPlan>> = ordered
            .keys
            .iter()
            .map(|k| plan_by_name.get(&*k.name).copied())
            .collect();
        let (verdict, mismatches) = check::check_order(&cmp, &ordered, &intended_costs, &key_plans);
        let ambiguous = ordered
            .ranking
            .ambiguity
            .as_ref()
            .map(|a| {
                a.pods
                    .iter()
                    .map(|&i| (&*ordered.keys[i].name).into())
                    .collect()
            })
            .unwrap_or_default();
        out.push(ReplicaSetPlan {
            name: rs_name.unwrap_or_else(|| "(none)".into()),
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
            related_pods: related.len(),
        });
    }
    out
}
