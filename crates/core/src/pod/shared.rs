//! What the pods of one ReplicaSet have alike, stored once ([`SharedMeta`]).
//!
//! Every pod of a ReplicaSet carries the same labels and the same owner
//! reference; held per pod they were most of a cached record (a label map's
//! node alone is 0.5 KB). Records hold an `Arc` to one shared value
//! instead. The table of shared values holds them weakly, so a value goes
//! when its last record does. Hand-written rather than an interning crate:
//! k8s-openapi's `OwnerReference` is not `Hash`, which such crates need.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// A pod's labels and owner references.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SharedMeta {
    /// `metadata.labels`.
    pub labels: Option<BTreeMap<String, String>>,
    /// `metadata.ownerReferences`.
    pub owner_references: Option<Vec<OwnerReference>>,
}

impl SharedMeta {
    /// The one shared value equal to these labels and owners (made when
    /// no record holds it yet).
    pub fn shared(
        labels: Option<BTreeMap<String, String>>,
        owner_references: Option<Vec<OwnerReference>>,
    ) -> Arc<SharedMeta> {
        let value = SharedMeta {
            labels,
            owner_references,
        };
        let Ok(mut table) = table().lock() else {
            // a panic elsewhere while holding the table: share nothing
            return Arc::new(value);
        };
        table.get_or_insert(value)
    }

    fn key(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.labels.hash(&mut h);
        for r in self.owner_references.iter().flatten() {
            (&r.api_version, &r.kind, &r.name, &r.uid).hash(&mut h);
            (r.controller, r.block_owner_deletion).hash(&mut h);
        }
        self.owner_references.is_some().hash(&mut h);
        h.finish()
    }
}

/// Shared values by hash; a bucket holds the (rare) values whose hashes
/// collide.
#[derive(Default)]
struct Table {
    buckets: HashMap<u64, Vec<Weak<SharedMeta>>>,
    /// Values added since dead entries were last dropped.
    added: usize,
}

impl Table {
    fn get_or_insert(&mut self, value: SharedMeta) -> Arc<SharedMeta> {
        let bucket = self.buckets.entry(value.key()).or_default();
        bucket.retain(|w| w.strong_count() > 0);
        if let Some(live) = bucket
            .iter()
            .filter_map(Weak::upgrade)
            .find(|v| **v == value)
        {
            return live;
        }
        let value = Arc::new(value);
        bucket.push(Arc::downgrade(&value));
        self.added += 1;
        // drop dead entries once as many values were added as the table
        // holds: amortised, and the table stays within twice the live ones
        if self.added > self.buckets.len().max(1024) {
            self.buckets.retain(|_, b| {
                b.retain(|w| w.strong_count() > 0);
                !b.is_empty()
            });
            self.added = 0;
        }
        value
    }
}

fn table() -> &'static Mutex<Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    TABLE.get_or_init(Mutex::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(app: &str) -> Option<BTreeMap<String, String>> {
        Some(BTreeMap::from([("app".to_string(), app.to_string())]))
    }

    fn owner(name: &str) -> Option<Vec<OwnerReference>> {
        Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: name.into(),
            uid: format!("{name}-uid"),
            controller: Some(true),
            ..Default::default()
        }])
    }

    #[test]
    fn equal_values_are_stored_once() {
        let a = SharedMeta::shared(labels("web"), owner("web-1"));
        let b = SharedMeta::shared(labels("web"), owner("web-1"));
        assert!(Arc::ptr_eq(&a, &b));
        let c = SharedMeta::shared(labels("web"), owner("web-2"));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.owner_references.as_ref().unwrap()[0].name, "web-2");
        let d = SharedMeta::shared(labels("web"), None);
        let e = SharedMeta::shared(labels("web"), Some(Vec::new()));
        assert!(!Arc::ptr_eq(&d, &e), "no owners and an empty list differ");
    }

    #[test]
    fn a_value_goes_with_its_last_holder() {
        let a = SharedMeta::shared(labels("gone-soon"), None);
        let weak = Arc::downgrade(&a);
        drop(a);
        assert!(weak.upgrade().is_none());
        let b = SharedMeta::shared(labels("gone-soon"), None);
        assert_eq!(b.labels, labels("gone-soon"));
    }

    #[test]
    fn dead_entries_are_dropped_as_values_are_added() {
        for i in 0..5_000 {
            drop(SharedMeta::shared(labels(&format!("temp-{i}")), None));
        }
        let held = table().lock().unwrap().buckets.len();
        assert!(held < 5_000, "the table kept {held} dead entries");
    }
}
