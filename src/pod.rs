//! A pod as the planner and the comparator read it ([`PodRecord`]): identity,
//! labels, owners, times, our two annotations (and the autoscalers' as
//! flags), node, phase, `Ready` conditions and restart counts. Deserialised straight from the API's JSON,
//! it skips every other field without allocating it: a `Pod` from
//! k8s-openapi is 2.4 KB before its strings, this ~0.5 KB. Labels and owner
//! references, alike for every pod of a ReplicaSet, are stored once and
//! shared ([`SharedMeta`]). The operator caches pods in this shape, and
//! `plan --snapshot` reads them into it.
//!
//! [`PodView`] is what the comparator reads of a pod, for a whole `Pod` and
//! a record alike.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use serde::{Deserialize, Deserializer};

use crate::annotations::{
    CA_SAFE_TO_EVICT, KARPENTER_DO_NOT_DISRUPT, KARPENTER_MANAGED_COST, POD_DELETION_COST,
    POLICY_ANNOTATION,
};

mod shared;
pub use shared::SharedMeta;

/// A pod trimmed to what the planner, the comparator and the writer read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodRecord {
    /// `metadata`'s identity and times. Labels, owners and annotations are
    /// the fields below.
    pub identity: PodIdentity,
    /// Labels and owner references, shared with every record that has the
    /// same ones.
    pub shared: Arc<SharedMeta>,
    /// Our two annotations, and the autoscalers' as flags.
    pub ours: OurAnnotations,
    /// The node.
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
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    spec: Option<WireSpec>,
    #[serde(default)]
    status: Option<WireStatus>,
}

impl WirePod {
    fn into_record(self) -> PodRecord {
        let m = self.metadata;
        PodRecord {
            identity: PodIdentity {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                creation_timestamp: m.creation_timestamp,
                deletion_timestamp: m.deletion_timestamp,
            },
            shared: SharedMeta::shared(m.labels, m.owner_references),
            ours: m.annotations,
            spec: self.spec.as_ref().map(|s| RecordSpec {
                node_name: s.node_name.clone(),
            }),
            status: self.status.map(|s| s.into_record(self.spec.as_ref())),
        }
    }
}

impl PodRecord {
    /// `metadata.name`, empty when absent (as kube's `name_any`, for a record
    /// has no `generateName`).
    pub fn name_any(&self) -> String {
        self.identity.name.clone().unwrap_or_default()
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> Option<String> {
        self.identity.namespace.clone()
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<String> {
        self.identity.uid.clone()
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<String> {
        self.identity.resource_version.clone()
    }

    /// `metadata.labels`.
    pub fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.shared.labels.as_ref()
    }

    /// `metadata.ownerReferences`.
    pub fn owner_references(&self) -> Option<&Vec<OwnerReference>> {
        self.shared.owner_references.as_ref()
    }

    /// Our two annotations.
    pub fn annotations(&self) -> &OurAnnotations {
        &self.ours
    }
}

impl<'de> Deserialize<'de> for PodRecord {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(WirePod::deserialize(d)?.into_record())
    }
}

/// A List item decoded straight from its text when it is plainly a pod:
/// `kind: Pod`, a name, and every field read decodes. `None` otherwise, for
/// the general path (which names the item and field of an error). Both give
/// the same record.
pub fn decode_pod_item(raw: &str) -> Option<PodRecord> {
    let item: WirePod = serde_json::from_str(raw).ok()?;
    let named = item.metadata.name.as_deref().is_some_and(|n| !n.is_empty());
    (item.kind.is_some() && named).then(|| item.into_record())
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
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordSpec {
    /// `spec.nodeName`.
    pub node_name: Option<String>,
}

/// The parts of `status` the comparator reads, reduced to what it compares:
/// lists of conditions and container statuses were most of a record's
/// allocations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordStatus {
    /// `status.phase`.
    pub phase: Option<String>,
    /// The first condition of type `Ready` (the one upstream reads).
    pub ready: Option<ReadyCondition>,
    /// Upstream's `maxContainerRestarts`: the most restarts of a container,
    /// and of a restartable init (sidecar) container.
    pub max_restarts: (i32, i32),
}

/// A `Ready` condition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadyCondition {
    /// `"True"`, `"False"` or `"Unknown"`.
    pub status: String,
    /// When it last changed.
    pub last_transition_time: Option<Time>,
}

/// `spec` on the wire: the node, and the sidecars' names (rule 7 counts
/// their restarts).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpec {
    node_name: Option<String>,
    #[serde(default, deserialize_with = "sidecar_names")]
    init_containers: Option<Vec<String>>,
}

/// `status` on the wire, each field read checked as the API's types are.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus {
    phase: Option<String>,
    conditions: Option<Vec<WireCondition>>,
    container_statuses: Option<Vec<WireRestarts>>,
    init_container_statuses: Option<Vec<WireRestarts>>,
}

impl WireStatus {
    /// What the comparator reads of it; `spec` names the sidecars.
    fn into_record(self, spec: Option<&WireSpec>) -> RecordStatus {
        let sidecars: &[String] = spec
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or_default();
        let (most, sidecar_most) = restart_maxima(
            self.container_statuses
                .iter()
                .flatten()
                .map(|c| c.restart_count),
            self.init_container_statuses
                .iter()
                .flatten()
                .filter(|c| sidecars.contains(&c.name))
                .map(|c| c.restart_count),
        );
        RecordStatus {
            phase: self.phase,
            ready: self
                .conditions
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "Ready")
                .map(|c| ReadyCondition {
                    status: c.status,
                    last_transition_time: c.last_transition_time,
                }),
            max_restarts: (narrow(most), narrow(sidecar_most)),
        }
    }
}

/// A condition on the wire.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    last_transition_time: Option<Time>,
}

/// A container's name and restart count on the wire.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireRestarts {
    name: String,
    #[serde(default)]
    restart_count: i32,
}

/// `metadata` with only the fields read downstream; `managedFields` and the
/// rest are skipped while parsing.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "our_annotations")]
    annotations: OurAnnotations,
    #[serde(default, deserialize_with = "exact")]
    owner_references: Option<Vec<OwnerReference>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
}

/// A pod's values of the two annotations this project writes, and the
/// autoscalers' annotations it reads as flags (a map of a few keys would
/// hold a 0.5 KB node per pod).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OurAnnotations {
    /// `controller.kubernetes.io/pod-deletion-cost`.
    pub deletion_cost: Option<String>,
    /// The policy that wrote the cost.
    pub policy: Option<String>,
    /// What the autoscalers' annotations say about the pod.
    pub autoscaler: AutoscalerMarks,
}

/// The autoscalers' pod annotations this project reads, each as the one
/// fact it needs: three flags, not the values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AutoscalerMarks {
    /// `karpenter.sh/do-not-disrupt: "true"`.
    pub do_not_disrupt: bool,
    /// `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`.
    pub not_safe_to_evict: bool,
    /// `karpenter.sh/managed-deletion-cost` (any value): the cost is
    /// Karpenter's.
    pub karpenter_cost: bool,
}

impl AutoscalerMarks {
    /// Notes the annotation `key` with `value`, if it is one of these.
    fn read(&mut self, key: &str, value: &str) {
        match key {
            KARPENTER_DO_NOT_DISRUPT => self.do_not_disrupt = value == "true",
            CA_SAFE_TO_EVICT => self.not_safe_to_evict = value == "false",
            KARPENTER_MANAGED_COST => self.karpenter_cost = true,
            _ => {}
        }
    }
}

impl OurAnnotations {
    /// Only the annotations this project reads, of a whole map.
    pub fn of(annotations: Option<&BTreeMap<String, String>>) -> Self {
        let mut kept = OurAnnotations::default();
        for (k, v) in annotations.into_iter().flatten() {
            kept.read(k, v);
        }
        kept
    }

    /// Keeps `key`'s value if this project reads it: ours as they are, the
    /// autoscalers' as flags.
    fn read(&mut self, key: &str, value: &str) {
        match self.slot_mut(key) {
            Some(v) => *v = Some(value.to_string()),
            None => self.autoscaler.read(key, value),
        }
    }

    /// The value of `key`, when it is one of ours and set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.slot(key).and_then(|v| v.as_deref())
    }

    fn slot(&self, key: &str) -> Option<&Option<String>> {
        match key {
            POD_DELETION_COST => Some(&self.deletion_cost),
            POLICY_ANNOTATION => Some(&self.policy),
            _ => None,
        }
    }

    fn slot_mut(&mut self, key: &str) -> Option<&mut Option<String>> {
        match key {
            POD_DELETION_COST => Some(&mut self.deletion_cost),
            POLICY_ANNOTATION => Some(&mut self.policy),
            _ => None,
        }
    }
}

/// `metadata.annotations` as [`OurAnnotations`] keeps them: each other
/// value is checked, noted if it is an autoscaler's, and dropped as it is
/// read (`last-applied-configuration` alone can be kilobytes), never
/// gathered into a map.
fn our_annotations<'de, D: Deserializer<'de>>(d: D) -> Result<OurAnnotations, D::Error> {
    struct Ours;
    impl<'de> serde::de::Visitor<'de> for Ours {
        type Value = OurAnnotations;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(OurAnnotations::default())
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(OurAnnotations::default())
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut kept = OurAnnotations::default();
            while let Some(key) = map.next_key::<String>()? {
                // every value is type-checked, as a map of strings is
                let value: String = map.next_value()?;
                match kept.slot_mut(&key) {
                    Some(slot) => *slot = Some(value),
                    None => kept.autoscaler.read(&key, &value),
                }
            }
            Ok(kept)
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
        let max_restarts = pod.max_restarts();
        let m = pod.metadata;
        PodRecord {
            ours: OurAnnotations::of(m.annotations.as_ref()),
            shared: SharedMeta::shared(m.labels, m.owner_references),
            identity: PodIdentity {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                creation_timestamp: m.creation_timestamp,
                deletion_timestamp: m.deletion_timestamp,
            },
            spec: pod.spec.map(|s| RecordSpec {
                node_name: s.node_name,
            }),
            status: pod.status.map(|s| RecordStatus {
                phase: s.phase,
                ready: s
                    .conditions
                    .into_iter()
                    .flatten()
                    .find(|c| c.type_ == "Ready")
                    .map(|c| ReadyCondition {
                        status: c.status,
                        last_transition_time: c.last_transition_time,
                    }),
                max_restarts: (narrow(max_restarts.0), narrow(max_restarts.1)),
            }),
        }
    }
}

impl From<&Pod> for PodRecord {
    fn from(pod: &Pod) -> Self {
        PodRecord::from(pod.clone())
    }
}

/// `metadata`'s fields a record keeps besides labels, owners and
/// annotations. Not kube's `ObjectMeta`, whose 17 fields took 360 bytes of
/// every cached pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodIdentity {
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.creationTimestamp`.
    pub creation_timestamp: Option<Time>,
    /// `metadata.deletionTimestamp`.
    pub deletion_timestamp: Option<Time>,
}

/// The `metadata` fields [`PodView::meta`] reads, borrowed.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetaView<'a> {
    /// `metadata.name`.
    pub name: Option<&'a str>,
    /// `metadata.namespace`.
    pub namespace: Option<&'a str>,
    /// `metadata.uid`.
    pub uid: Option<&'a str>,
    /// `metadata.creationTimestamp`.
    pub creation_timestamp: Option<&'a Time>,
    /// `metadata.deletionTimestamp`.
    pub deletion_timestamp: Option<&'a Time>,
}

/// What the comparator reads of a pod: a whole `Pod` or a [`PodRecord`].
pub trait PodView {
    /// `metadata`'s name, namespace, uid and times.
    fn meta(&self) -> MetaView<'_>;
    /// `metadata.labels`.
    fn labels(&self) -> Option<&BTreeMap<String, String>>;
    /// `metadata.ownerReferences`.
    fn owner_references(&self) -> Option<&Vec<OwnerReference>>;
    /// The annotation `key` (a record keeps only this project's two).
    fn annotation(&self, key: &str) -> Option<&str>;
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
    ($meta:ident) => {
        fn meta(&self) -> MetaView<'_> {
            let m = &self.$meta;
            MetaView {
                name: m.name.as_deref(),
                namespace: m.namespace.as_deref(),
                uid: m.uid.as_deref(),
                creation_timestamp: m.creation_timestamp.as_ref(),
                deletion_timestamp: m.deletion_timestamp.as_ref(),
            }
        }
        fn node_name(&self) -> Option<&str> {
            self.spec.as_ref()?.node_name.as_deref()
        }
        fn phase(&self) -> Option<&str> {
            self.status.as_ref()?.phase.as_deref()
        }
    };
}

impl PodView for Pod {
    same_fields!(metadata);
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
    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.metadata.labels.as_ref()
    }
    fn owner_references(&self) -> Option<&Vec<OwnerReference>> {
        self.metadata.owner_references.as_ref()
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }
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
    same_fields!(identity);
    fn ready_condition(&self) -> Option<(&str, Option<&Time>)> {
        let c = self.status.as_ref()?.ready.as_ref()?;
        Some((&c.status, c.last_transition_time.as_ref()))
    }
    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        PodRecord::labels(self)
    }
    fn owner_references(&self) -> Option<&Vec<OwnerReference>> {
        PodRecord::owner_references(self)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.ours.get(key)
    }
    fn max_restarts(&self) -> (i64, i64) {
        self.status.as_ref().map_or((0, 0), |s| {
            (s.max_restarts.0.into(), s.max_restarts.1.into())
        })
    }
}

/// A maximum of `i32` restart counts, back from `i64`.
fn narrow(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
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
            fn meta(&self) -> MetaView<'_> {
                (**self).meta()
            }
            fn labels(&self) -> Option<&BTreeMap<String, String>> {
                (**self).labels()
            }
            fn owner_references(&self) -> Option<&Vec<OwnerReference>> {
                (**self).owner_references()
            }
            fn annotation(&self, key: &str) -> Option<&str> {
                (**self).annotation(key)
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
        assert_eq!(record.ours.deletion_cost.as_deref(), Some("7"));
        assert_eq!(record.ours.policy.as_deref(), Some("web"));
        assert_eq!(record.identity.resource_version.as_deref(), Some("42"));
        assert_eq!(record.labels(), full.metadata.labels.as_ref());
        assert_eq!(
            record.owner_references(),
            full.metadata.owner_references.as_ref()
        );
        let status = record.status.as_ref().unwrap();
        assert_eq!(status.ready.as_ref().unwrap().status, "True");
        assert_eq!(full.max_restarts(), (3, 2));
        assert_eq!(record.max_restarts(), (3, 2));
    }

    #[test]
    fn keeps_the_autoscalers_annotations_as_flags() {
        let with = |annotations: serde_json::Value| {
            let v = serde_json::json!({"metadata": {"name": "p", "annotations": annotations}});
            let full: Pod = serde_json::from_value(v.clone()).unwrap();
            let record: PodRecord = serde_json::from_value(v).unwrap();
            assert_eq!(PodRecord::from(&full), record, "both paths keep the same");
            record.ours
        };
        let ours = with(serde_json::json!({
            KARPENTER_DO_NOT_DISRUPT: "true",
            CA_SAFE_TO_EVICT: "false",
            KARPENTER_MANAGED_COST: "true",
            POD_DELETION_COST: "-1000",
        }));
        assert_eq!(
            ours.autoscaler,
            AutoscalerMarks {
                do_not_disrupt: true,
                not_safe_to_evict: true,
                karpenter_cost: true,
            }
        );
        assert_eq!(ours.deletion_cost.as_deref(), Some("-1000"));
        // only the values the autoscalers act on count
        let ours = with(serde_json::json!({
            KARPENTER_DO_NOT_DISRUPT: "false",
            CA_SAFE_TO_EVICT: "true",
        }));
        assert_eq!(ours.autoscaler, AutoscalerMarks::default());
        // Karpenter reads its marker's presence, whatever the value
        assert!(
            with(serde_json::json!({KARPENTER_MANAGED_COST: ""}))
                .autoscaler
                .karpenter_cost
        );
        assert_eq!(with(serde_json::json!({})), OurAnnotations::default());
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
