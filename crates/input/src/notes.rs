//! What the commands say about their input besides errors: duplicate pods,
//! missing UIDs, invalid costs; lists capped to their first entries.

use crate::pod::PodView;

use super::{capped_list, InputError, LISTED};

/// `pods.json: items[3]`.
pub fn item_label(source_name: &str, location: &str) -> String {
    format!("{source_name}: {location}")
}

/// `shop/web-a`, or `web-a` without a namespace.
pub(super) fn qualified(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

/// Fails on the first pod that repeats an earlier one: the same namespace
/// and name, or the same (non-empty) UID. Upstream never sees one pod twice,
/// and a repeated pod would count twice in colocation ranks. Items are
/// `(label, pod)` with labels such as `pods.json: items[3]`.
pub fn check_unique_pods<'a, P: PodView + 'a>(
    items: impl IntoIterator<Item = (String, &'a P)>,
) -> Result<(), InputError> {
    use std::collections::HashMap;
    let mut names: HashMap<(&str, &str), String> = HashMap::new();
    let mut uids: HashMap<&str, String> = HashMap::new();
    for (label, pod) in items {
        let m = pod.meta();
        let ns = m.namespace.unwrap_or_default();
        let name = m.name.unwrap_or_default();
        let who = format!("{label} (Pod {})", qualified(ns, name));
        if let Some(first) = names.get(&(ns, name)) {
            return Err(InputError::Duplicate {
                first: first.clone(),
                second: who,
                what: format!("name {}", qualified(ns, name)),
            });
        }
        if let Some(uid) = m.uid.filter(|u| !u.is_empty()) {
            if let Some(first) = uids.get(uid) {
                return Err(InputError::Duplicate {
                    first: first.clone(),
                    second: who,
                    what: format!("uid {uid}"),
                });
            }
            uids.insert(uid, who.clone());
        }
        names.insert((ns, name), who);
    }
    Ok(())
}

/// Names of the pods without `metadata.uid` (upstream breaks ties by UID, so
/// their order among equals is not upstream's), for a warning.
pub fn pods_without_uid(pods: &[impl PodView]) -> Vec<String> {
    pods.iter()
        .map(PodView::meta)
        .filter(|m| m.uid.unwrap_or_default().is_empty())
        .map(|m| qualified(m.namespace.unwrap_or_default(), m.name.unwrap_or_default()))
        .collect()
}

/// The warning for pods whose cost annotation Kubernetes reads as 0 (each
/// item names a pod and what is wrong with its value), or none.
pub fn invalid_costs_warning(invalid: &[String]) -> Option<String> {
    (!invalid.is_empty()).then(|| {
        format!(
            "{} pod(s) carry a {} annotation that is not a whole number from -2147483648 to \
             2147483647, which Kubernetes reads as 0 and orders so (rule 4): {}",
            invalid.len(),
            crate::annotations::POD_DELETION_COST,
            capped_list(invalid, LISTED)
        )
    })
}

/// The warning for pods without a UID, or `None` when every pod has one.
pub fn missing_uid_warning(source_name: &str, pods: &[impl PodView]) -> Option<String> {
    uid_warning(source_name, &pods_without_uid(pods))
}

/// The warning for the pods named in `missing` (see [`missing_uid_warning`]).
pub fn uid_warning(source_name: &str, missing: &[String]) -> Option<String> {
    if missing.is_empty() {
        return None;
    }
    const SHOWN: usize = 5;
    let more = missing.len().saturating_sub(SHOWN);
    Some(format!(
        "{source_name}: {} pod(s) without metadata.uid ({}{}): upstream breaks the last ties by UID, \
         so among equal pods the order shown may not be upstream's",
        missing.len(),
        missing[..missing.len().min(SHOWN)].join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    ))
}
