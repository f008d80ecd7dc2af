//! Scale-down markers read from the API server ahead of the pod watch
//! ([`FresherMarks`]), and the scale-in's read of them
//! ([`ExactScaleIn::read_marks_now`]).
//!
//! "Mark, then scale": an autoscaler labels the pods it wants gone
//! ([`crate::marker`]) and scales in at once. The pod watch delivers a
//! label a few milliseconds after it is written, and the scale request can
//! arrive within them; planned on the watch's pods, the scale-in would not
//! see the marker. So a scale-in lists the namespace's marked pods (one
//! metadata-only list per marker label, a consistent read, the server
//! filtering by label) and plans on their labels where those are newer than
//! the cache's, and on a marker gone where the list no longer shows one the
//! cache still does. Each read serves until the watch shows the pod as new.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, ObjectList, PartialObjectMeta};
use kube::Api;
use tokio::time::{timeout_at, Instant};

use super::ExactScaleIn;
use crate::engine::Managed;
use crate::marker::{marker_of, MARKER_LABELS};
use crate::pod::{PodRecord, SharedMeta};

/// How long a read here serves when the watch never shows the pod as new
/// (the pod deleted, the watch down): a scale-in reads again anyway.
const KEPT_FOR: Duration = Duration::from_secs(60);

/// The longest a scale-in spends reading markers (a quarter of what is
/// left of its budget at most); past it the markers come from the watch.
const READ_BUDGET: Duration = Duration::from_millis(500);

/// A pod's labels as read, at its resource version.
#[derive(Clone)]
struct Read {
    labels: BTreeMap<String, String>,
    resource_version: u64,
    at: Instant,
}

/// Pods' labels read from the API server that may be newer than the pod
/// watch's, by namespace and name.
#[derive(Default)]
pub struct FresherMarks {
    by_pod: Mutex<HashMap<(String, String), Read>>,
}

impl FresherMarks {
    /// Keeps `labels` for pod `ns/name`, current at `resource_version`.
    fn keep(&self, ns: &str, name: &str, labels: BTreeMap<String, String>, resource_version: u64) {
        if let Ok(mut by_pod) = self.by_pod.lock() {
            by_pod.insert(
                (ns.to_string(), name.to_string()),
                Read {
                    labels,
                    resource_version,
                    at: Instant::now(),
                },
            );
        }
    }

    /// `watched` with the labels read here in place of a record's where
    /// the read is newer; forgets the reads the watch has caught up with.
    pub fn over(&self, mut watched: Vec<Arc<PodRecord>>) -> Vec<Arc<PodRecord>> {
        let Ok(mut by_pod) = self.by_pod.lock() else {
            return watched;
        };
        if by_pod.is_empty() {
            return watched;
        }
        let now = Instant::now();
        by_pod.retain(|_, r| now.saturating_duration_since(r.at) < KEPT_FOR);
        for record in &mut watched {
            let id = &record.identity;
            let (Some(ns), Some(name)) = (id.namespace.as_deref(), id.name.as_deref()) else {
                continue;
            };
            let key = (ns.to_string(), name.to_string());
            let Some(read) = by_pod.get(&key) else {
                continue;
            };
            if revision(record) < Some(read.resource_version) {
                let mut fresher = (**record).clone();
                fresher.shared = SharedMeta::shared(
                    Some(read.labels.clone()),
                    record.owner_references().cloned(),
                );
                *record = Arc::new(fresher);
            } else {
                by_pod.remove(&key);
            }
        }
        watched
    }
}

/// A record's resource version as a number (etcd's revision).
fn revision(record: &PodRecord) -> Option<u64> {
    record
        .identity
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
}

/// The labels of `record` with the marker `read` says it carries now: the
/// read pod's labels when the list shows it, else the record's without
/// any marker. `None` when the record already agrees.
fn labels_now(
    record: &PodRecord,
    read: Option<&PartialObjectMeta<Pod>>,
) -> Option<BTreeMap<String, String>> {
    let cached = marker_of(record.labels());
    match read {
        Some(pod) => {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            (marker_of(Some(&labels)) != cached).then_some(labels)
        }
        None => cached.map(|_| {
            let mut labels = record.labels().cloned().unwrap_or_default();
            labels.retain(|k, _| !MARKER_LABELS.contains(&k.as_str()));
            labels
        }),
    }
}

impl ExactScaleIn {
    /// Reads which of `managed`'s pods carry a scale-down marker now, so the
    /// scale-in plans on markers set (or removed) moments before it (see
    /// the module docs). On an error or past its budget the markers come
    /// from the watch.
    pub(super) async fn read_marks_now(&self, managed: &Managed) {
        let deadline = self.call.deadline;
        let ns = managed.workload.namespace.as_str();
        let started = Instant::now();
        let left = deadline.saturating_duration_since(started);
        let until = started + READ_BUDGET.min(left / 4);
        let api: Api<Pod> = Api::namespaced(self.engine.leadership.writes(), ns);
        let params = MARKER_LABELS.map(|key| ListParams::default().labels(key));
        let lists = futures::future::try_join_all(params.iter().map(|p| api.list_metadata(p)));
        let lists: Vec<ObjectList<PartialObjectMeta<Pod>>> = match timeout_at(until, lists).await {
            Ok(Ok(lists)) => lists,
            Ok(Err(e)) => {
                tracing::warn!(workload = %managed.workload, error = %crate::error_chain(&e), "reading the scale-in's markers failed: they come from the pod watch (a marker set moments ago may not count)");
                return;
            }
            Err(_) => {
                tracing::warn!(workload = %managed.workload, "reading the scale-in's markers took longer than its share of the budget: they come from the pod watch (a marker set moments ago may not count)");
                return;
            }
        };
        // a pod the lists do not show was unmarked as of the oldest list
        let listed_at = lists
            .iter()
            .filter_map(|l| l.metadata.resource_version.as_deref()?.parse::<u64>().ok())
            .min();
        let read: HashMap<&str, &PartialObjectMeta<Pod>> = lists
            .iter()
            .flat_map(|l| &l.items)
            .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
            .collect();
        let mut fresher = 0usize;
        for name in &managed.pods {
            let Some(record) = self.engine.caches.pod(ns, name) else {
                continue;
            };
            let pod = read.get(name.as_str()).copied();
            let Some(labels) = labels_now(&record, pod) else {
                continue;
            };
            let version = match pod {
                Some(p) => p
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse().ok()),
                None => listed_at,
            };
            if let Some(version) = version.filter(|v| revision(&record) < Some(*v)) {
                self.engine
                    .caches
                    .fresher_marks()
                    .keep(ns, name, labels, version);
                fresher += 1;
            }
        }
        tracing::debug!(
            workload = %managed.workload,
            marked = read.len(),
            ahead_of_the_watch = fresher,
            millis = started.elapsed().as_millis() as u64,
            "read the scale-in's markers"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::marker::PREFER_FOR_SCALE_DOWN;

    fn record(name: &str, rv: &str, marked: bool) -> Arc<PodRecord> {
        let mut labels = serde_json::json!({"app": "web"});
        if marked {
            labels[PREFER_FOR_SCALE_DOWN] = "true".into();
        }
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "shop", "resourceVersion": rv,
                    "labels": labels}
            }))
            .unwrap(),
        )
    }

    fn marked(records: &[Arc<PodRecord>]) -> Vec<(String, bool)> {
        records
            .iter()
            .map(|r| (r.name_any(), marker_of(r.labels()).is_some()))
            .collect()
    }

    fn read(name: &str, rv: &str, marked: bool) -> PartialObjectMeta<Pod> {
        let mut labels = serde_json::json!({"app": "web"});
        if marked {
            labels[PREFER_FOR_SCALE_DOWN] = "true".into();
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": name, "namespace": "shop", "resourceVersion": rv,
                "labels": labels}
        }))
        .unwrap()
    }

    #[test]
    fn labels_now_says_what_changed_and_only_that() {
        let unmarked = record("a", "10", false);
        let now = labels_now(&unmarked, Some(&read("a", "12", true))).unwrap();
        assert_eq!(
            now.get(PREFER_FOR_SCALE_DOWN).map(String::as_str),
            Some("true")
        );
        assert_eq!(now.get("app").map(String::as_str), Some("web"));
        // the list agrees with the cache: nothing to keep
        assert_eq!(labels_now(&unmarked, None), None);
        let was_marked = record("b", "10", true);
        assert_eq!(labels_now(&was_marked, Some(&read("b", "12", true))), None);
        // a marked pod the list no longer shows: unmarked, other labels kept
        let gone = labels_now(&was_marked, None).unwrap();
        assert_eq!(marker_of(Some(&gone)), None);
        assert_eq!(gone.get("app").map(String::as_str), Some("web"));
    }

    #[tokio::test]
    async fn a_read_serves_until_the_watch_shows_the_pod_as_new() {
        let fresher = FresherMarks::default();
        let labels = |m: bool| {
            let mut l = BTreeMap::from([("app".to_string(), "web".to_string())]);
            if m {
                l.insert(PREFER_FOR_SCALE_DOWN.into(), "true".into());
            }
            l
        };
        fresher.keep("shop", "a", labels(true), 12);
        fresher.keep("shop", "b", labels(false), 12);
        let watched = vec![record("a", "10", false), record("b", "11", true)];
        let over = fresher.over(watched);
        assert_eq!(
            marked(&over),
            [("a".to_string(), true), ("b".to_string(), false)]
        );
        // the rest of the record is the watch's
        assert_eq!(over[0].identity.resource_version.as_deref(), Some("10"));
        // the watch caught up (with a later change even): the reads go
        let caught_up = vec![record("a", "13", false), record("b", "12", true)];
        assert_eq!(
            marked(&fresher.over(caught_up)),
            [("a".to_string(), false), ("b".to_string(), true)]
        );
        assert!(fresher.by_pod.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_the_watch_never_shows_is_forgotten_after_a_while() {
        let fresher = FresherMarks::default();
        fresher.keep("shop", "a", BTreeMap::new(), 20);
        tokio::time::advance(KEPT_FOR).await;
        let over = fresher.over(vec![record("a", "10", true)]);
        assert_eq!(marked(&over), [("a".to_string(), true)]);
    }
}
