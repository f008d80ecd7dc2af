//! A pod as the planner and the comparator read it ([`PodRecord`]): identity,
//! labels, owners, times, our two annotations, node, phase, `Ready`
//! conditions and restart counts. Deserialised straight from the API's JSON,
//! it skips every other field without allocating it: a `Pod` from
//! k8s-openapi is 2.4 KB before its strings, this ~0.5 KB. The operator
//! caches pods in this shape, and `plan --snapshot` reads them into it.
//!
//! [`PodView`] is what the comparator reads of a pod, for a whole `Pod` and
//! a record alike.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

use crate::annotations::{POD_DELETION_COST, POLICY_ANNOTATION};

/// A pod trimmed to what the planner, the comparator and the writer read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodRecord {
    /// Identity, labels, owners, times and only our two annotations.
    pub metadata: ObjectMeta,
    /// Node and sidecar names.
    pub spec: Option<RecordSpec>,
    /// Phase, Ready conditions and restart counts.
    pub status: Option<RecordStatus>,
}

/// A pod on the wire. `apiVersion` and `kind`, when present, must be a
/// Pod's, as k8s-openapi's `Pod` checks them; `kind` says whether it was.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePod {
    #[serde(default, deserialize_with = "pod_api_version")]
    #[allow(dead_code)]
    api_version: (),
    #[serde(default, deserialize_with = "pod_kind")]
    kind: Option<()>,
    #[serde(default, deserialize_with = "slim_meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<RecordSpec>,
    #[serde(default)]
    status: Option<RecordStatus>,
}

impl<'de> Deserialize<'de> for PodRecord {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = WirePod::deserialize(d)?;
        Ok(PodRecord {
            metadata: w.metadata,
            spec: w.spec,
            status: w.status,
        })
    }
}

/// A List item decoded straight from its text when it is plainly a pod:
/// `kind: Pod`, a name, and every field read decodes. `None` otherwise, for
/// the general path (which names the item and field of an error). Both give
/// the same record.
pub fn decode_pod_item(raw: &str) -> Option<PodRecord> {
    let item: WirePod = serde_json::from_str(raw).ok()?;
    let named = item.metadata.name.as_deref().is_some_and(|n| !n.is_empty());
    (item.kind.is_some() && named).then_some(PodRecord {
        metadata: item.metadata,
        spec: item.spec,
        status: item.status,
    })
}

fn expect_str<'de, D: Deserializer<'de>>(d: D, expected: &'static str) -> Result<(), D::Error> {
    let found = String::deserialize(d)?;
    if found != expected {
        return Err(serde::de::Error::invalid_value(
            serde::de::Unexpected::Str(&found),
            &expected,
        ));
    }
    Ok(())
}

fn pod_api_version<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    expect_str(d, <Pod as k8s_openapi::Resource>::API_VERSION)
}

fn pod_kind<'de, D: Deserializer<'de>>(d: D) -> Result<Option<()>, D::Error> {
    expect_str(d, <Pod as k8s_openapi::Resource>::KIND).map(Some)
}

/// The parts of `spec` the comparator reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordSpec {
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// Names of the restartable (sidecar) init containers (rule 7).
    #[serde(default, deserialize_with = "sidecar_names")]
    pub init_containers: Option<Vec<String>>,
}

/// The parts of `status` the comparator reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordStatus {
    /// `status.phase`.
    pub phase: Option<String>,
    /// The `Ready` conditions, in order (the first one decides).
    #[serde(default, deserialize_with = "ready_conditions")]
    pub conditions: Option<Vec<ReadyCondition>>,
    /// Restart count per container.
    #[serde(default, deserialize_with = "exact")]
    pub container_statuses: Option<Vec<Restarts>>,
    /// Restart count per init container.
    #[serde(default, deserialize_with = "exact")]
    pub init_container_statuses: Option<Vec<Restarts>>,
}

/// A `Ready` condition.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadyCondition {
    /// `type` (kept to filter on it).
    #[serde(rename = "type")]
    pub type_: String,
    /// `"True"`, `"False"` or `"Unknown"`.
    pub status: String,
    /// When it last changed.
    pub last_transition_time: Option<Time>,
}

/// A container's name and restart count.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Restarts {
    /// Container name.
    pub name: String,
    /// `restartCount`.
    #[serde(default)]
    pub restart_count: i32,
}

/// `metadata` with only the fields read downstream; `managedFields` and the
/// rest are skipped while parsing.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "our_annotations")]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "exact")]
    owner_references: Option<Vec<OwnerReference>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
}

fn slim_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let w = WireMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: w.name,
        namespace: w.namespace,
        uid: w.uid,
        resource_version: w.resource_version,
        labels: w.labels,
        annotations: w.annotations,
        owner_references: w.owner_references,
        creation_timestamp: w.creation_timestamp,
        deletion_timestamp: w.deletion_timestamp,
        ..Default::default()
    })
}

/// Only the annotations this project reads; `None` without any of them (an
/// empty map still holds a 0.5 KB node).
fn ours(mut a: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    a.retain(|k, _| is_ours(k));
    (!a.is_empty()).then_some(a)
}

fn is_ours(key: &str) -> bool {
    key == POD_DELETION_COST || key == POLICY_ANNOTATION
}

/// `metadata.annotations` as [`ours`] keeps them: each other value is
/// checked and dropped as it is read (`last-applied-configuration` alone can
/// be kilobytes), never gathered into a map.
fn our_annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Ours;
    impl<'de> serde::de::Visitor<'de> for Ours {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                // every value is type-checked, as a map of strings is
                let value: String = map.next_value()?;
                if is_ours(&key) {
                    kept.insert(key, value);
                }
            }
            Ok((!kept.is_empty()).then_some(kept))
        }
    }
    d.deserialize_option(Ours)
}

fn sidecar_names<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct WireContainer {
        name: String,
        restart_policy: Option<String>,
    }
    let cs: Option<Vec<WireContainer>> = Option::deserialize(d)?;
    Ok(cs.map(|cs| {
        cs.into_iter()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"))
            .map(|c| c.name)
            .collect()
    }))
}

fn ready_conditions<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<ReadyCondition>>, D::Error> {
    let cs: Option<Vec<ReadyCondition>> = Option::deserialize(d)?;
    Ok(cs.map(|cs| {
        let mut ready: Vec<ReadyCondition> =
            cs.into_iter().filter(|c| c.type_ == "Ready").collect();
        ready.shrink_to_fit();
        ready
    }))
}

/// A list without spare room: parsed from text its length is not known
/// ahead, and a vector grown by pushing keeps room for 4 (a pod's one owner
/// reference would hold 0.4 KB).
fn exact<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Vec<T>>, D::Error> {
    let mut list: Option<Vec<T>> = Option::deserialize(d)?;
    if let Some(l) = list.as_mut() {
        l.shrink_to_fit();
    }
    Ok(list)
}

impl From<Pod> for PodRecord {
    /// The record the API's JSON of this pod deserialises to.
    fn from(pod: Pod) -> Self {
        let m = pod.metadata;
        let restarts = |cs: Option<Vec<ContainerStatus>>| {
            cs.map(|cs| {
                cs.into_iter()
                    .map(|c| Restarts {
                        name: c.name,
                        restart_count: c.restart_count,
                    })
                    .collect()
            })
        };
        PodRecord {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                labels: m.labels,
                annotations: m.annotations.and_then(ours),
                owner_references: m.owner_references,
                creation_timestamp: m.creation_timestamp,
                deletion_timestamp: m.deletion_timestamp,
                ..Default::default()
            },
            spec: pod.spec.map(|s| RecordSpec {
                node_name: s.node_name,
                init_containers: s.init_containers.map(|cs| {
                    cs.into_iter()
                        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
                        .map(|c| c.name)
                        .collect()
                }),
            }),
            status: pod.status.map(|s| RecordStatus {
                phase: s.phase,
                conditions: s.conditions.map(|cs| {
                    cs.into_iter()
                        .filter(|c| c.type_ == "Ready")
                        .map(|c| ReadyCondition {
                            type_: c.type_,
                            status: c.status,
                            last_transition_time: c.last_transition_time,
                        })
                        .collect()
                }),
                container_statuses: restarts(s.container_statuses),
                init_container_statuses: restarts(s.init_container_statuses),
            }),
        }
    }
}

impl From<&Pod> for PodRecord {
    fn from(pod: &Pod) -> Self {
        PodRecord::from(pod.clone())
    }
}

impl k8s_openapi::Resource for PodRecord {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for PodRecord {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What the comparator reads of a pod: a whole `Pod` or a [`PodRecord`].
pub trait PodView {
    /// `metadata`.
    fn meta(&self) -> &ObjectMeta;
    /// `spec.nodeName`.
    fn node_name(&self) -> Option<&str>;
    /// `status.phase`.
    fn phase(&self) -> Option<&str>;
    /// The first condition of type `Ready`: its status and transition time.
    fn ready_condition(&self) -> Option<(&str, Option<&Time>)>;
    /// Upstream's `maxContainerRestarts`: (max regular restartCount, max
    /// restartCount of restartable init containers), both from 0.
    fn max_restarts(&self) -> (i64, i64);
}

/// The [`PodView`] methods whose fields have the same names in a `Pod` and a
/// [`PodRecord`] (their types differ, so one generic body cannot serve both).
macro_rules! same_fields {
    () => {
        fn meta(&self) -> &ObjectMeta {
            &self.metadata
        }
        fn node_name(&self) -> Option<&str> {
            self.spec.as_ref()?.node_name.as_deref()
        }
        fn phase(&self) -> Option<&str> {
            self.status.as_ref()?.phase.as_deref()
        }
        fn ready_condition(&self) -> Option<(&str, Option<&Time>)> {
            let c = self
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready")?;
            Some((&c.status, c.last_transition_time.as_ref()))
        }
    };
}

impl PodView for Pod {
    same_fields!();
    fn max_restarts(&self) -> (i64, i64) {
        let Some(status) = self.status.as_ref() else {
            return (0, 0);
        };
        let sidecars: Vec<&str> = self
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .filter(|c| c.restart_policy.as_deref() == Some("Always"))
            .map(|c| c.name.as_str())
            .collect();
        restart_maxima(
            status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| c.restart_count),
            status
                .init_container_statuses
                .iter()
                .flatten()
                .filter(|c| sidecars.contains(&c.name.as_str()))
                .map(|c| c.restart_count),
        )
    }
}

impl PodView for PodRecord {
    same_fields!();
    fn max_restarts(&self) -> (i64, i64) {
        let Some(status) = self.status.as_ref() else {
            return (0, 0);
        };
        let sidecars: Vec<&str> = self
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .map(String::as_str)
            .collect();
        restart_maxima(
            status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| c.restart_count),
            status
                .init_container_statuses
                .iter()
                .flatten()
                .filter(|c| sidecars.contains(&c.name.as_str()))
                .map(|c| c.restart_count),
        )
    }
}

/// The largest of each list of restart counts, from 0.
fn restart_maxima(
    containers: impl Iterator<Item = i32>,
    sidecars: impl Iterator<Item = i32>,
) -> (i64, i64) {
    (
        containers.map(i64::from).fold(0, i64::max),
        sidecars.map(i64::from).fold(0, i64::max),
    )
}

/// A reference, and a shared record (the operator's cache, a snapshot's
/// pods), read as what they point to.
macro_rules! pod_view_through {
    ($($ptr:ty),*) => {$(
        impl<T: PodView + ?Sized> PodView for $ptr {
            fn meta(&self) -> &ObjectMeta {
                (**self).meta()
            }
            fn node_name(&self) -> Option<&str> {
                (**self).node_name()
            }
            fn phase(&self) -> Option<&str> {
                (**self).phase()
            }
            fn ready_condition(&self) -> Option<(&str, Option<&Time>)> {
                (**self).ready_condition()
            }
            fn max_restarts(&self) -> (i64, i64) {
                (**self).max_restarts()
            }
        }
    )*};
}

pod_view_through!(&T, std::sync::Arc<T>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comparator::RankKey;

    fn full_pod_json() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "42",
                "labels": {"app": "web"},
                "annotations": {
                    POD_DELETION_COST: "7",
                    POLICY_ANNOTATION: "web",
                    "kubectl.kubernetes.io/last-applied-configuration": "x".repeat(4000)
                },
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
                "creationTimestamp": "2026-11-20T00:00:00Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "r1", "controller": true}]
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "app", "image": "app:1", "env": [{"name": "A", "value": "b"}]}],
                "initContainers": [
                    {"name": "init", "image": "init:1"},
                    {"name": "proxy", "image": "proxy:1", "restartPolicy": "Always"}
                ]
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T00:01:00Z"}
                ],
                "containerStatuses": [{"name": "app", "image": "app:1", "imageID": "sha", "ready": true, "restartCount": 3}],
                "initContainerStatuses": [{"name": "proxy", "image": "p", "imageID": "s", "ready": true, "restartCount": 2}]
            }
        })
    }

    #[test]
    fn keeps_every_comparator_input() {
        let full: Pod = serde_json::from_value(full_pod_json()).unwrap();
        let record: PodRecord = serde_json::from_value(full_pod_json()).unwrap();
        assert_eq!(RankKey::from_pod(&full), RankKey::from_pod(&record));
        assert_eq!(PodRecord::from(&full), record);
        let a = record.metadata.annotations.as_ref().unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(record.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(record.metadata.labels, full.metadata.labels);
        assert_eq!(
            record.metadata.owner_references,
            full.metadata.owner_references
        );
        assert!(record.metadata.managed_fields.is_none());
        let spec = record.spec.as_ref().unwrap();
        assert_eq!(
            spec.init_containers.as_deref(),
            Some(&["proxy".to_string()][..])
        );
        let status = record.status.as_ref().unwrap();
        assert_eq!(status.conditions.as_ref().unwrap().len(), 1);
        assert_eq!(full.max_restarts(), (3, 2));
        assert_eq!(record.max_restarts(), (3, 2));
    }

    #[test]
    fn keeps_comparator_inputs_of_sparse_and_not_ready_pods() {
        for v in [
            serde_json::json!({"metadata": {"name": "bare"}}),
            serde_json::json!({"metadata": {"name": "p", "deletionTimestamp": "2026-11-20T00:00:00Z"},
                "spec": {"containers": []},
                "status": {"phase": "Pending", "conditions": [
                    {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-20T00:01:00Z"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T00:02:00Z"}]}}),
            serde_json::json!({"metadata": {"name": "q"},
                "status": {"phase": "Running", "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T00:02:00Z"},
                    {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-20T00:03:00Z"}],
                    "initContainerStatuses": [{"name": "init", "restartCount": 9}]},
                "spec": {"initContainers": [{"name": "init"}]}}),
            serde_json::json!({}),
        ] {
            let full: Pod = serde_json::from_value(v.clone()).unwrap();
            let record: PodRecord = serde_json::from_value(v).unwrap();
            assert_eq!(RankKey::from_pod(&full), RankKey::from_pod(&record));
            assert_eq!(PodRecord::from(&full), record);
            assert_eq!(
                crate::comparator::is_pod_active(&full),
                crate::comparator::is_pod_active(&record)
            );
        }
    }
}
