//! The cached policies, validated once per spec ([`PolicyIndex`]): rounds
//! read a namespace's other policies for overlaps, and every scale-in looks
//! for the policy managing its workload; before, each of them validated every
//! policy of the namespace again. The policy watch's events keep the index
//! (a new spec is validated as it arrives, a deleted policy leaves, and so
//! does one a relist no longer shows); a policy the index has not seen in
//! its current spec yet is validated when read.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kube::runtime::watcher;
use kube::ResourceExt;

use crate::plan::NamedPolicy;
use crate::policy::DeletionCostPolicy;

/// A cached policy whose spec is valid, with its validated form.
#[derive(Debug, Clone)]
pub struct ValidPolicy {
    /// The policy as cached.
    pub policy: Arc<DeletionCostPolicy>,
    /// Its spec, validated.
    pub resolved: Arc<NamedPolicy>,
}

/// Which spec of a policy an entry validated: its UID and generation (the
/// API server bumps the generation on every spec change, not on status
/// writes), or its resourceVersion when it has no generation.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SpecVersion {
    uid: Option<String>,
    generation: Option<i64>,
    resource_version: Option<String>,
}

impl SpecVersion {
    fn of(policy: &DeletionCostPolicy) -> Self {
        let meta = &policy.metadata;
        SpecVersion {
            uid: meta.uid.clone(),
            generation: meta.generation,
            resource_version: match meta.generation {
                Some(_) => None,
                None => meta.resource_version.clone(),
            },
        }
    }
}

/// One policy's validation: its validated spec, or none when it is invalid.
struct Entry {
    version: SpecVersion,
    resolved: Option<Arc<NamedPolicy>>,
}

/// The cached policies' validations, by namespace and name. Cheap to share.
#[derive(Default)]
pub struct PolicyIndex {
    by_key: Mutex<HashMap<(String, String), Entry>>,
    /// The names a relist of the watch has shown so far: at its end, the
    /// others (deleted while the watch was down) leave.
    relisted: Mutex<HashSet<(String, String)>>,
}

impl PolicyIndex {
    /// Keeps the index as the policy watch sees the policies change.
    pub fn observe(&self, event: &watcher::Event<DeletionCostPolicy>) {
        match event {
            watcher::Event::Apply(p) => {
                self.resolved(p);
            }
            watcher::Event::InitApply(p) => {
                self.resolved(p);
                if let Ok(mut relisted) = self.relisted.lock() {
                    relisted.insert(key_of(p));
                }
            }
            watcher::Event::Delete(p) => {
                if let Ok(mut by_key) = self.by_key.lock() {
                    by_key.remove(&key_of(p));
                }
            }
            watcher::Event::Init => {
                if let Ok(mut relisted) = self.relisted.lock() {
                    relisted.clear();
                }
            }
            watcher::Event::InitDone => {
                let Ok(mut relisted) = self.relisted.lock() else {
                    return;
                };
                let listed = std::mem::take(&mut *relisted);
                if let Ok(mut by_key) = self.by_key.lock() {
                    by_key.retain(|key, _| listed.contains(key));
                }
            }
        }
    }

    /// `policy` validated: from the index when it holds this spec, else
    /// validated now and kept. None when the spec is invalid.
    pub fn resolved(&self, policy: &DeletionCostPolicy) -> Option<Arc<NamedPolicy>> {
        let version = SpecVersion::of(policy);
        let key = key_of(policy);
        if let Ok(by_key) = self.by_key.lock() {
            if let Some(entry) = by_key.get(&key).filter(|e| e.version == version) {
                return entry.resolved.clone();
            }
        }
        // validated outside the lock: a spec's validation compiles selectors
        let resolved = NamedPolicy::validate(&key.1, &key.0, &policy.spec)
            .ok()
            .map(Arc::new);
        if let Ok(mut by_key) = self.by_key.lock() {
            by_key.insert(
                key,
                Entry {
                    version,
                    resolved: resolved.clone(),
                },
            );
        }
        resolved
    }

    /// The valid ones among `policies` in `namespace` that are not being
    /// deleted.
    pub fn valid_in(
        &self,
        namespace: &str,
        policies: Vec<Arc<DeletionCostPolicy>>,
    ) -> Vec<ValidPolicy> {
        policies
            .into_iter()
            .filter(|p| p.namespace().as_deref() == Some(namespace))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|policy| {
                let resolved = self.resolved(&policy)?;
                Some(ValidPolicy { policy, resolved })
            })
            .collect()
    }

    /// How many policies the index holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_key.lock().map(|m| m.len()).unwrap_or(0)
    }
}

fn key_of(policy: &DeletionCostPolicy) -> (String, String) {
    (policy.namespace().unwrap_or_default(), policy.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::DeletionCostPolicySpec;

    fn policy(name: &str, generation: i64, spec: serde_json::Value) -> DeletionCostPolicy {
        let spec: DeletionCostPolicySpec = serde_json::from_value(spec).unwrap();
        let mut p = DeletionCostPolicy::new(name, spec);
        p.metadata.namespace = Some("shop".into());
        p.metadata.uid = Some(format!("{name}-uid"));
        p.metadata.generation = Some(generation);
        p
    }

    fn valid() -> serde_json::Value {
        serde_json::json!({"selector": {"matchLabels": {"app": "web"}},
                           "signals": [{"billingClass": {"costs": {"spot": 0}}}]})
    }

    fn invalid() -> serde_json::Value {
        serde_json::json!({"selector": {"matchLabels": {"app": "web"}}, "signals": []})
    }

    #[test]
    fn a_spec_is_validated_once_and_again_when_it_changes() {
        let index = PolicyIndex::default();
        let first = policy("a", 1, valid());
        let got = index.resolved(&first).expect("valid");
        assert!(
            Arc::ptr_eq(&got, &index.resolved(&first).expect("valid")),
            "the same spec is read from the index"
        );
        // a status write changes the resourceVersion, not the generation
        let mut status_written = first.clone();
        status_written.metadata.resource_version = Some("99".into());
        assert!(Arc::ptr_eq(&got, &index.resolved(&status_written).unwrap()));
        // a new spec (generation 2) is validated again
        let changed = policy("a", 2, invalid());
        assert!(
            index.resolved(&changed).is_none(),
            "the new spec is invalid"
        );
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn watch_events_fill_and_empty_the_index() {
        let index = PolicyIndex::default();
        let a = policy("a", 1, valid());
        index.observe(&watcher::Event::InitApply(a.clone()));
        index.observe(&watcher::Event::Apply(policy("b", 1, invalid())));
        assert_eq!(index.len(), 2);
        index.observe(&watcher::Event::Delete(a.clone()));
        assert_eq!(index.len(), 1);
        // a relist that no longer shows b (deleted while the watch was
        // down): b leaves at its end
        index.observe(&watcher::Event::Init);
        index.observe(&watcher::Event::InitApply(a.clone()));
        assert_eq!(index.len(), 2, "a is back, b stays until the relist ends");
        index.observe(&watcher::Event::InitDone);
        assert_eq!(index.len(), 1, "b was not relisted");
        index.observe(&watcher::Event::Delete(a.clone()));
        index.observe(&watcher::Event::Apply(policy("b", 1, invalid())));
        assert_eq!(index.len(), 1);
        let all = vec![Arc::new(a), Arc::new(policy("b", 1, invalid()))];
        let valid = index.valid_in("shop", all.clone());
        assert_eq!(valid.len(), 1, "b is invalid");
        assert_eq!(valid[0].resolved.name, "a");
        assert!(index.valid_in("other", all).is_empty());
    }
}
