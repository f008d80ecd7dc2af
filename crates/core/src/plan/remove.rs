//! `scale-in --remove`: whether a scale-in by the number of pods named can
//! delete exactly those pods, and the fewest cost writes that make it so.
//! Pure: the pods of the ReplicaSet scaled in, who may write which cost,
//! the names; the answer is exact or a refusal that says why.
//!
//! The ReplicaSet controller deletes unscheduled, then Pending/Unknown,
//! then not-Ready pods before any other whatever their cost: a pod of such
//! a class that is not named, ahead of a named one, makes the removal
//! inexact. So does another pod marked for scale-down (it competes with the
//! named pods under a policy), a cost nobody may change sitting where the
//! named pods must go below it, and the `PodDeletionCost` gate off. Past
//! those, the minimal correction ([`super::correction`]) writes the named
//! pods below every other pod's cost.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::correction::{correct, PodCosts, Unreachable};
use crate::comparator::{assign_ranks, Comparator, RankKey};
use crate::marker::{first_anyway, FirstAnyway};
use crate::pod::PodRecord;

/// One active pod of the ReplicaSet scaled in, as a removal reads it.
#[derive(Debug, Clone, Copy)]
pub struct RemovalPod<'a> {
    /// The pod.
    pub pod: &'a PodRecord,
    /// Whether the writer (the policy that manages the pod, or the caller
    /// without one) may write its cost.
    pub writable: bool,
    /// Whether a scale-down marker puts it first (under a policy).
    pub marked: bool,
}

/// Why no scale-in can delete exactly the pods named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Names that are no active pod of the workload.
    #[error("{} {} no active pod of {workload}", list(.pods), if .pods.len() == 1 { "is" } else { "are" })]
    NotInWorkload {
        /// The names.
        pods: Vec<String>,
        /// The workload, as `deployment/web`.
        workload: String,
    },
    /// Pods not named that the controller deletes first whatever their cost.
    #[error("the controller removes {} first whatever {} cost", reasons(.pods), if .pods.len() == 1 { "its" } else { "their" })]
    FirstAnyway {
        /// Each pod and why.
        pods: Vec<(String, FirstAnyway)>,
    },
    /// Pods not named that carry a scale-down marker.
    #[error("{} {} marked for scale-down too (name {} or remove the marker)", list(.pods), if .pods.len() == 1 { "is" } else { "are" }, if .pods.len() == 1 { "it" } else { "them" })]
    AlsoMarked {
        /// The pods.
        pods: Vec<String>,
    },
    /// Costs the writer may not change, where only a change would do.
    #[error("a cost in the way that {writer} may not change: {}", costs(.pods))]
    CostInTheWay {
        /// Each pod and its cost.
        pods: Vec<(String, i32)>,
        /// Who writes: `policy shop/web`, or `this command` without one.
        writer: String,
    },
    /// `PodDeletionCost` is off.
    #[error("the PodDeletionCost feature gate is off: the controller ignores costs")]
    GateOff,
    /// Anything else the correction could not make exact.
    #[error("no cost write makes the controller delete exactly those pods (it would delete {})", list(.would_delete))]
    NotExact {
        /// What it would delete.
        would_delete: Vec<String>,
    },
}

fn list(pods: &[String]) -> String {
    pods.join(", ")
}

fn reasons(pods: &[(String, FirstAnyway)]) -> String {
    pods.iter()
        .map(|(p, why)| format!("{p} ({why})"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn costs(pods: &[(String, i32)]) -> String {
    pods.iter()
        .map(|(p, c)| format!("{p} (cost {c})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A removal that is exact once its writes landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// The costs to write (pod, cost), named pods first; none when the
    /// costs as they stand already put the named pods first.
    pub writes: Vec<(Arc<str>, i32)>,
    /// The pods the controller deletes once they landed: the named ones.
    pub after: Vec<String>,
}

/// The classes of the controller's first three rules, in its order.
fn class(k: &RankKey) -> (bool, u8, bool) {
    (!k.node_name.is_empty(), k.phase_ordinal, k.ready)
}

/// Whether a scale-in by `named.len()` of the ReplicaSet whose active pods
/// are `pods` (colocation ranks over `related`) can delete exactly `named`,
/// and the writes that make it so; `writer` names who writes, for a
/// refusal.
pub fn exact_removal(
    cmp: &Comparator,
    pods: &[RemovalPod],
    related: &[&PodRecord],
    named: &BTreeSet<String>,
    workload: &str,
    writer: &str,
) -> Result<Removal, Refusal> {
    let name = |p: &RemovalPod| p.pod.identity.name.clone().unwrap_or_default();
    let known: BTreeSet<String> = pods.iter().map(name).collect();
    let missing: Vec<String> = named.difference(&known).cloned().collect();
    if !missing.is_empty() {
        return Err(Refusal::NotInWorkload {
            pods: missing,
            workload: workload.to_string(),
        });
    }
    let mut keys: Vec<RankKey> = pods
        .iter()
        .map(|p| RankKey::from_pod(p.pod).with_now(cmp.now))
        .collect();
    assign_ranks(&mut keys, related.iter().copied());
    let is_named: Vec<bool> = pods.iter().map(|p| named.contains(&name(p))).collect();
    let latest = (0..pods.len())
        .filter(|&i| is_named[i])
        .map(|i| class(&keys[i]))
        .max();
    let ahead: Vec<(String, FirstAnyway)> = (0..pods.len())
        .filter(|&i| !is_named[i] && latest.is_some_and(|l| class(&keys[i]) < l))
        .filter_map(|i| Some((name(&pods[i]), first_anyway(pods[i].pod)?)))
        .collect();
    if !ahead.is_empty() {
        return Err(Refusal::FirstAnyway { pods: ahead });
    }
    let marked: Vec<String> = (0..pods.len())
        .filter(|&i| !is_named[i] && pods[i].marked && first_anyway(pods[i].pod).is_none())
        .map(|i| name(&pods[i]))
        .collect();
    if !marked.is_empty() {
        return Err(Refusal::AlsoMarked { pods: marked });
    }
    let floor = (0..pods.len())
        .filter(|&i| !is_named[i])
        .map(|i| keys[i].cost.value)
        .min();
    let costs: Vec<PodCosts> = (0..pods.len())
        .map(|i| {
            let live = keys[i].cost.value;
            PodCosts {
                intended: match floor {
                    Some(f) if is_named[i] => live.min(f.saturating_sub(1)),
                    _ => live,
                },
                writable: pods[i].writable,
                in_flight: None,
            }
        })
        .collect();
    let c = correct(cmp, &keys, &costs, named.len());
    let refusal = match c.unreachable {
        Some(Unreachable::FeatureGateOff) => Some(Refusal::GateOff),
        Some(Unreachable::Unwritable) => Some(in_the_way(pods, &keys, &is_named, writer)),
        None => None,
    };
    if let Some(r) = refusal {
        return Err(r);
    }
    let after: BTreeSet<String> = c.after.iter().map(|&i| name(&pods[i])).collect();
    if &after != named && !cmp.gates.pod_deletion_cost {
        return Err(Refusal::GateOff);
    }
    if &after != named && floor == Some(i32::MIN) {
        // nothing goes below a kept int32 least value: the named pods tie with it
        return Err(in_the_way(pods, &keys, &is_named, writer));
    }
    if &after != named {
        return Err(Refusal::NotExact {
            would_delete: after.into_iter().collect(),
        });
    }
    Ok(Removal {
        writes: c
            .writes
            .iter()
            .map(|w| (Arc::from(name(&pods[w.pod])), w.cost))
            .collect(),
        after: c.after.iter().map(|&i| name(&pods[i])).collect(),
    })
}

/// The costs nobody may change that keep the named pods from going first:
/// named pods whose cost the writer may not lower, else pods it may not
/// raise that sit at int32's least value (nothing goes below them).
fn in_the_way(pods: &[RemovalPod], keys: &[RankKey], is_named: &[bool], writer: &str) -> Refusal {
    let cost = |i: usize| keys[i].cost.value;
    let name = |i: usize| pods[i].pod.identity.name.clone().unwrap_or_default();
    let stuck: Vec<(String, i32)> = (0..pods.len())
        .filter(|&i| is_named[i] && !pods[i].writable)
        .map(|i| (name(i), cost(i)))
        .collect();
    let pods = if stuck.is_empty() {
        (0..pods.len())
            .filter(|&i| !pods[i].writable && cost(i) == i32::MIN)
            .map(|i| (name(i), cost(i)))
            .collect()
    } else {
        stuck
    };
    Refusal::CostInTheWay {
        pods,
        writer: writer.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comparator::FeatureGates;
    use crate::marker::FirstAnyway;

    const NOW: i128 = 1_795_000_000_000_000_000;

    /// A pod of `web-rs` on `node` (empty: unscheduled), Running and Ready
    /// unless said, created `age` seconds before NOW, with a cost if given.
    fn pod(name: &str, node: &str, ready: bool, cost: Option<&str>) -> PodRecord {
        let mut annotations = serde_json::Map::new();
        if let Some(c) = cost {
            annotations.insert(crate::annotations::POD_DELETION_COST.into(), c.into());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"),
                "creationTimestamp": "2026-11-01T00:00:00Z", "annotations": annotations,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs",
                    "uid": "rs", "controller": true}]},
            "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": [{"type": "Ready",
                "status": if ready { "True" } else { "False" },
                "lastTransitionTime": "2026-11-01T00:00:00Z"}]}
        }))
        .unwrap()
    }

    fn cmp() -> Comparator {
        Comparator {
            gates: FeatureGates::default(),
            now: Some(NOW),
        }
    }

    fn named(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// The removal of `names` from `records`, every cost writable unless
    /// `fixed` names the pod, `marked` marked.
    fn removal(
        records: &[PodRecord],
        names: &[&str],
        fixed: &[&str],
        marked: &[&str],
    ) -> Result<Removal, Refusal> {
        let pods: Vec<RemovalPod> = records
            .iter()
            .map(|p| {
                let n = p.identity.name.as_deref().unwrap_or_default();
                RemovalPod {
                    pod: p,
                    writable: !fixed.contains(&n),
                    marked: marked.contains(&n),
                }
            })
            .collect();
        let related: Vec<&PodRecord> = records.iter().collect();
        exact_removal(
            &cmp(),
            &pods,
            &related,
            &named(names),
            "deployment/web",
            "this command",
        )
    }

    fn five() -> Vec<PodRecord> {
        vec![
            pod("a", "n1", true, None),
            pod("b", "n1", true, Some("10")),
            pod("c", "n2", true, Some("-5")),
            pod("d", "n2", true, None),
            pod("e", "n3", true, None),
        ]
    }

    #[test]
    fn the_named_pods_are_written_below_every_other() {
        let r = removal(&five(), &["a", "e"], &["b", "c", "d"], &[]).unwrap();
        assert_eq!(
            r.writes,
            vec![(Arc::from("a"), -6), (Arc::from("e"), -6)],
            "one below the lowest kept cost, named pods only"
        );
        assert_eq!(
            named(&r.after.iter().map(String::as_str).collect::<Vec<_>>()),
            named(&["a", "e"])
        );
    }

    #[test]
    fn costs_that_already_put_the_named_pods_first_need_no_write() {
        let r = removal(&five(), &["c"], &["a", "b", "d", "e"], &[]).unwrap();
        assert!(r.writes.is_empty(), "{:?}", r.writes);
        assert_eq!(r.after, ["c"]);
    }

    #[test]
    fn a_name_outside_the_workload_is_refused() {
        let e = removal(&five(), &["a", "zz"], &[], &[]).unwrap_err();
        assert_eq!(e.to_string(), "zz is no active pod of deployment/web");
    }

    #[test]
    fn pods_the_controller_removes_first_anyway_are_named_with_why() {
        let mut pods = five();
        pods.push(pod("sick", "n3", false, None));
        pods.push(pod("pending", "", true, None));
        let e = removal(&pods, &["a"], &[], &[]).unwrap_err();
        assert_eq!(
            e,
            Refusal::FirstAnyway {
                pods: vec![
                    ("sick".into(), FirstAnyway::NotReady),
                    ("pending".into(), FirstAnyway::Unscheduled)
                ]
            }
        );
        assert_eq!(
            e.to_string(),
            "the controller removes sick (not Ready), pending (not scheduled) first whatever their cost"
        );
        // naming them is fine: they go first anyway
        assert!(removal(&pods, &["sick", "pending"], &[], &[]).is_ok());
    }

    #[test]
    fn another_marked_pod_is_refused() {
        let e = removal(&five(), &["a"], &[], &["d"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "d is marked for scale-down too (name it or remove the marker)"
        );
        // a marked pod named is no competitor
        assert!(removal(&five(), &["a", "d"], &[], &["d"]).is_ok());
    }

    #[test]
    fn a_cost_nobody_may_change_in_the_way_is_refused() {
        // a is named but its foreign 50 may not be lowered, and c's -5 may
        // not be raised above it
        let mut pods = five();
        pods[0] = pod("a", "n1", true, Some("50"));
        let e = removal(&pods, &["a"], &["a", "c"], &[]).unwrap_err();
        assert_eq!(
            e,
            Refusal::CostInTheWay {
                pods: vec![("a".into(), 50)],
                writer: "this command".into()
            }
        );
        assert!(
            e.to_string()
                .starts_with("a cost in the way that this command may not change: a (cost 50)"),
            "{e}"
        );
        // a kept pod at int32's least value: nothing goes below it
        let mut pods = five();
        pods[2] = pod("c", "n2", true, Some("-2147483648"));
        let e = removal(&pods, &["a"], &["b", "c", "d", "e"], &[]).unwrap_err();
        assert!(
            matches!(e, Refusal::CostInTheWay { ref pods, .. } if pods == &[("c".to_string(), i32::MIN)]),
            "{e}"
        );
    }

    #[test]
    fn with_the_gate_off_costs_decide_nothing() {
        let pods = five();
        let p: Vec<RemovalPod> = pods
            .iter()
            .map(|p| RemovalPod {
                pod: p,
                writable: true,
                marked: false,
            })
            .collect();
        let related: Vec<&PodRecord> = pods.iter().collect();
        let off = Comparator {
            gates: FeatureGates {
                pod_deletion_cost: false,
                ..FeatureGates::default()
            },
            now: Some(NOW),
        };
        let r = exact_removal(&off, &p, &related, &named(&["e"]), "deployment/web", "x");
        // e is not the controller's own first choice: without costs it cannot be made so
        assert!(
            matches!(r, Err(Refusal::GateOff)) || r.as_ref().is_ok_and(|r| r.writes.is_empty()),
            "{r:?}"
        );
    }
}
