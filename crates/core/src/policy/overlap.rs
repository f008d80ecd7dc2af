//! Overlapping policies: when two policies of a namespace select the same
//! pod, the older one (by creationTimestamp, then the smaller name) keeps
//! it and the other leaves it alone. One rule for the operator's rounds,
//! the scale-in's choice of policy and the CLI's plans alike.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::DeletionCostPolicy;

/// The order overlapping policies win pods in: `Less` when `a` wins over
/// `b` (older creationTimestamp; none counts as older; then smaller name).
pub fn overlap_order(a: &DeletionCostPolicy, b: &DeletionCostPolicy) -> Ordering {
    let key = |p: &DeletionCostPolicy| {
        (
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            p.metadata.name.clone().unwrap_or_default(),
        )
    };
    key(a).cmp(&key(b))
}

/// Whether `a` wins a pod both it and `b` select.
pub fn wins_over(a: &DeletionCostPolicy, b: &DeletionCostPolicy) -> bool {
    overlap_order(a, b) == Ordering::Less
}

/// Why `a` wins over `b`, in words (for a warning).
pub fn why_wins(a: &DeletionCostPolicy, b: &DeletionCostPolicy) -> &'static str {
    let created = |p: &DeletionCostPolicy| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    match (created(a), created(b)) {
        (x, y) if x == y => "as old (the same creationTimestamp, or none), smaller name",
        (None, _) => "no creationTimestamp, which counts as older",
        _ => "older creationTimestamp",
    }
}

/// What one policy's overlaps with the others of its namespace come to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlaps<K> {
    /// The pods policies that win them take from this one.
    pub excluded: BTreeSet<String>,
    /// The policies that win pods from this one, with how many.
    pub lost_to: Vec<(K, usize)>,
    /// The policies this one wins pods from, with how many.
    pub won_from: Vec<(K, usize)>,
}

/// The overlaps of policy `me`, selecting `mine`, with `others` (each a
/// key, the policy and the pods it selects; `me` itself and other
/// namespaces' policies left out by the caller).
pub fn overlaps<'a, K>(
    me: &DeletionCostPolicy,
    mine: &BTreeSet<String>,
    others: impl IntoIterator<Item = (K, &'a DeletionCostPolicy, &'a BTreeSet<String>)>,
) -> Overlaps<K> {
    let mut out = Overlaps {
        excluded: BTreeSet::new(),
        lost_to: Vec::new(),
        won_from: Vec::new(),
    };
    for (key, other, theirs) in others {
        let shared: Vec<&String> = theirs.intersection(mine).collect();
        if shared.is_empty() {
            continue;
        }
        if wins_over(other, me) {
            out.lost_to.push((key, shared.len()));
            out.excluded.extend(shared.into_iter().cloned());
        } else {
            out.won_from.push((key, shared.len()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn policy(name: &str, created: Option<i64>) -> DeletionCostPolicy {
        let mut p: DeletionCostPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"targetRef": {"kind": "Deployment", "name": "web"},
                     "signals": [{"billingClass": {"nodeLabel": "l", "costs": {"spot": 0}}}]}
        }))
        .unwrap();
        p.metadata.creation_timestamp =
            created.map(|s| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap()));
        p
    }

    fn pods(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_older_policy_wins_then_the_smaller_name() {
        let (old, young) = (policy("b", Some(10)), policy("a", Some(20)));
        assert!(wins_over(&old, &young) && !wins_over(&young, &old));
        assert_eq!(why_wins(&old, &young), "older creationTimestamp");
        let (a, b) = (policy("a", Some(10)), policy("b", Some(10)));
        assert!(wins_over(&a, &b) && !wins_over(&b, &a));
        assert_eq!(
            why_wins(&a, &b),
            "as old (the same creationTimestamp, or none), smaller name"
        );
        // none counts as older
        let (none, dated) = (policy("z", None), policy("a", Some(1)));
        assert!(wins_over(&none, &dated));
        assert_eq!(
            why_wins(&none, &dated),
            "no creationTimestamp, which counts as older"
        );
        // a policy never wins over itself
        assert!(!wins_over(&a, &a));
    }

    #[test]
    fn overlaps_split_the_shared_pods_between_winners_and_losers() {
        let me = policy("me", Some(20));
        let (older, younger, apart) = (
            policy("older", Some(10)),
            policy("younger", Some(30)),
            policy("apart", Some(1)),
        );
        let (o, y, x) = (pods(&["p1", "p2"]), pods(&["p3"]), pods(&["p9"]));
        let got = overlaps(
            &me,
            &pods(&["p1", "p2", "p3", "p4"]),
            [
                ("older", &older, &o),
                ("younger", &younger, &y),
                ("apart", &apart, &x),
            ],
        );
        assert_eq!(got.excluded, pods(&["p1", "p2"]));
        assert_eq!(got.lost_to, [("older", 2)]);
        assert_eq!(got.won_from, [("younger", 1)]);
    }
}
