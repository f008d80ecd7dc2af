//! What `scale-in --remove` does, decided over the objects read: the
//! ReplicaSet that scales in, whether a policy manages it, and the labels or
//! costs that make exactly the named pods the next to go. Pure: a snapshot
//! in, a [`Decision`] or a refusal out; nothing here talks to the cluster.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::super::plan::FilePolicy;
use super::super::CliError;
use crate::annotations::KARPENTER_MANAGED_COST;
use crate::comparator::{
    assign_ranks, inactive_reason, rank_pods, victims_in_syncs, Comparator, RankKey, BURST_REPLICAS,
};
use crate::marker::{marker_of, PREFER_FOR_SCALE_DOWN};
use crate::owner::{self, controller_of};
use crate::plan::remove::{exact_removal, RemovalPod};
use crate::plan::workload::{select, Query, Target, TargetKind};
use crate::plan::{self, CostAction, PlanOptions, Snapshot};
use crate::pod::{PodRecord, PodView};

/// How the named pods are made the next to go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// A policy manages the workload: the named pods get its scale-down
    /// marker, and the operator's scale-in webhook writes what the marker
    /// asks for when the scale-in comes.
    Marker {
        /// The policy, `namespace/name`.
        policy: String,
        /// The label set.
        label: &'static str,
        /// The named pods that do not carry a marker yet.
        to_mark: Vec<String>,
        /// Whether the policy writes costs in the background (`writes:
        /// Continuous`): the operator then writes the marked pods' costs
        /// within moments, which shows it at work before the scale.
        continuous: bool,
    },
    /// No policy: costs written on the named pods.
    Costs {
        /// Each write: pod, cost, and the cost annotation it replaces.
        writes: Vec<CostWrite>,
    },
}

/// One cost written without a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostWrite {
    /// The pod.
    pub pod: String,
    /// The cost written.
    pub cost: i32,
    /// The annotation's value before, to put back when the pod stays.
    pub before: Option<String>,
}

/// What the command will do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The workload named, as `deployment/web`.
    pub workload: Target,
    /// Its namespace.
    pub namespace: String,
    /// The ReplicaSet whose pods go.
    pub replica_set: String,
    /// That ReplicaSet's pod selector (its `matchLabels`).
    pub pod_labels: BTreeMap<String, String>,
    /// The ReplicaSet's active pods now.
    pub active: Vec<String>,
    /// Replicas now, and after.
    pub from: i32,
    /// Replicas after.
    pub to: i32,
    /// The pods named, sorted.
    pub named: Vec<String>,
    /// Labels or costs.
    pub via: Via,
}

impl Decision {
    /// The policy, when one manages the workload.
    pub fn policy(&self) -> Option<&str> {
        match &self.via {
            Via::Marker { policy, .. } => Some(policy),
            Via::Costs { .. } => None,
        }
    }
}

/// The pods a scale-in by `k` deletes from `active` (a ReplicaSet's active
/// pods) with the costs they carry now, colocation counted over `related`,
/// sync by sync as the controller deletes them.
pub fn first_to_go<P: PodView>(
    cmp: &Comparator,
    active: &[&P],
    related: &[&P],
    k: usize,
) -> BTreeSet<String> {
    let mut keys: Vec<RankKey> = active
        .iter()
        .map(|p| RankKey::from_pod(*p).with_now(cmp.now))
        .collect();
    assign_ranks(&mut keys, related.iter().copied());
    let first = rank_pods(cmp, &keys);
    victims_in_syncs(cmp, &keys, &first, k, BURST_REPLICAS)
        .victims
        .iter()
        .map(|&i| keys[i].name.to_string())
        .collect()
}

/// The refusal line: exit 2, nothing written.
fn refuse(named: &[String], workload: &Target, why: impl std::fmt::Display) -> CliError {
    CliError::bad_input(format!(
        "cannot remove exactly {} from {workload}: {why}",
        named.join(", ")
    ))
}

/// Decides how a scale-in of `workload` in `ns` by the number of `named`
/// pods deletes exactly them, over `snapshot` (pods, nodes, ReplicaSets,
/// Deployments of the namespace) and the namespace's `policies`.
pub fn decide(
    snapshot: &Snapshot,
    policies: &[FilePolicy],
    workload: &Target,
    ns: &str,
    named: &BTreeSet<String>,
    cmp: &Comparator,
) -> Result<Decision, CliError> {
    let names: Vec<String> = named.iter().cloned().collect();
    let (rs_name, pod_labels, from) =
        scaled_replica_set(snapshot, workload, ns).map_err(|why| refuse(&names, workload, why))?;
    let families = select(
        snapshot,
        &Query {
            namespace: Some(ns),
            target: Some(workload),
            selector: None,
        },
    )
    .map_err(CliError::bad_input)?;
    let related: Vec<&PodRecord> = families
        .iter()
        .flat_map(|f| f.related.iter().copied())
        .collect();
    let of_rs = |p: &&PodRecord| {
        controller_of(p.owner_references())
            .is_some_and(|o| o.kind == "ReplicaSet" && o.name == rs_name)
    };
    let active: Vec<&PodRecord> = related
        .iter()
        .copied()
        .filter(of_rs)
        .filter(|p| inactive_reason(*p).is_none())
        .collect();
    if i64::try_from(active.len()).ok() != Some(i64::from(from)) {
        return Err(refuse(
            &names,
            workload,
            format!(
                "replicaset/{rs_name} is changing size ({} active pods for {from} replicas): \
                 try again once it has settled",
                active.len()
            ),
        ));
    }
    let k = i32::try_from(named.len()).unwrap_or(i32::MAX);
    if k > from {
        return Err(refuse(
            &names,
            workload,
            format!("it has {from} replica(s)"),
        ));
    }
    let winner = active.first().and_then(|p| {
        super::super::explain::winning_policy(
            policies,
            ns,
            p.identity.name.as_deref().unwrap_or_default(),
            snapshot,
        )
    });
    let (pods, writer, policy_key) = match winner {
        Some(f) => {
            let opts = PlanOptions {
                gates: cmp.gates,
                now: cmp.now,
                scale_down_by: None,
                assume_patches_applied: false,
                chunks: Default::default(),
            };
            let p = plan::plan(
                &f.named,
                snapshot,
                &Default::default(),
                &Default::default(),
                &opts,
            );
            let by_name: BTreeMap<&str, &plan::PodPlan> =
                p.pods.iter().map(|pp| (&*pp.name, pp)).collect();
            let pods: Vec<RemovalPod> = active
                .iter()
                .map(|pod| {
                    let name = pod.identity.name.as_deref().unwrap_or_default();
                    let pp = by_name.get(name);
                    // the marker moves only a cost the policy may write
                    let movable = pp.is_some_and(|pp| {
                        !matches!(
                            pp.action,
                            CostAction::KeepForeign | CostAction::KeepKarpenter
                        )
                    });
                    RemovalPod {
                        pod,
                        writable: named.contains(name) && movable,
                        marked: marker_of(pod.labels()).is_some(),
                    }
                })
                .collect();
            let continuous = f.named.spec.writes == crate::policy::Writes::Continuous;
            (
                pods,
                format!("policy {}", f.named.key()),
                Some((f.named.key(), continuous)),
            )
        }
        None => {
            let pods: Vec<RemovalPod> = active
                .iter()
                .map(|pod| {
                    let name = pod.identity.name.as_deref().unwrap_or_default();
                    RemovalPod {
                        pod,
                        // Karpenter would write its own cost over ours
                        writable: named.contains(name)
                            && pod.annotation(KARPENTER_MANAGED_COST).is_none(),
                        // without a policy nothing honours a marker
                        marked: false,
                    }
                })
                .collect();
            (pods, "this command".to_string(), None)
        }
    };
    let removal = exact_removal(cmp, &pods, &related, named, &workload.to_string(), &writer)
        .map_err(|why| refuse(&names, workload, why))?;
    let via = match policy_key {
        Some((policy, continuous)) => Via::Marker {
            policy,
            continuous,
            label: PREFER_FOR_SCALE_DOWN,
            to_mark: pods
                .iter()
                .filter(|p| !p.marked)
                .filter_map(|p| p.pod.identity.name.clone())
                .filter(|n| named.contains(n))
                .collect(),
        },
        None => Via::Costs {
            writes: removal
                .writes
                .iter()
                .map(|(pod, cost)| CostWrite {
                    pod: pod.to_string(),
                    cost: *cost,
                    before: active
                        .iter()
                        .find(|p| p.identity.name.as_deref() == Some(pod))
                        .and_then(|p| {
                            p.annotation(crate::annotations::POD_DELETION_COST)
                                .map(str::to_string)
                        }),
                })
                .collect(),
        },
    };
    Ok(Decision {
        workload: workload.clone(),
        namespace: ns.to_string(),
        replica_set: rs_name,
        pod_labels,
        active: active
            .iter()
            .filter_map(|p| p.identity.name.clone())
            .collect(),
        from,
        to: from - k,
        named: names,
        via,
    })
}

/// The ReplicaSet a scale-in of `workload` deletes from, its pod labels and
/// the workload's replicas; why not, when no single one does.
fn scaled_replica_set(
    snapshot: &Snapshot,
    workload: &Target,
    ns: &str,
) -> Result<(String, BTreeMap<String, String>, i32), String> {
    let in_ns = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.namespace.as_deref() == Some(ns)
    };
    let rs_of = |rs: &k8s_openapi::api::apps::v1::ReplicaSet| {
        let labels = match &rs.spec.selector {
            LabelSelector {
                match_labels: Some(l),
                ..
            } => l.clone(),
            _ => BTreeMap::new(),
        };
        (
            rs.metadata.name.clone().unwrap_or_default(),
            labels,
            rs.spec.replicas.unwrap_or(1),
        )
    };
    match workload.kind {
        TargetKind::Deployment => {
            let d = snapshot
                .deployments
                .iter()
                .find(|d| in_ns(&d.metadata) && d.metadata.name.as_deref() == Some(&workload.name))
                .ok_or_else(|| format!("no {workload} in namespace {ns}"))?;
            let replicas = d.spec.replicas.unwrap_or(1);
            let sized: Vec<_> = owner::replica_sets_of(ns, &workload.name, &snapshot.replica_sets)
                .map(rs_of)
                .filter(|(_, _, r)| *r > 0)
                .collect();
            match sized.as_slice() {
                [(name, labels, r)] if *r == replicas => {
                    Ok((name.clone(), labels.clone(), replicas))
                }
                [(name, _, r)] => Err(format!(
                    "replicaset/{name} has {r} replica(s) where the deployment asks for \
                     {replicas}: try again once it has settled"
                )),
                [] => Err(format!("{workload} has no replicas to remove")),
                many => Err(format!(
                    "it is rolling out ({} ReplicaSets hold replicas: {}), and the deployment \
                     controller splits a scale-in among them; try again once the rollout is done",
                    many.len(),
                    many.iter()
                        .map(|(n, _, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
        TargetKind::ReplicaSet => {
            let rs = snapshot
                .replica_sets
                .iter()
                .find(|rs| {
                    in_ns(&rs.metadata) && rs.metadata.name.as_deref() == Some(&workload.name)
                })
                .ok_or_else(|| format!("no {workload} in namespace {ns}"))?;
            if let Some(d) = owner::deployment_of(rs) {
                return Err(format!(
                    "deployment/{d} controls it and would scale it back: name the deployment"
                ));
            }
            Ok(rs_of(rs))
        }
        TargetKind::Pod => Err("expected deployment/NAME or replicaset/NAME".into()),
    }
}
