//! The caches a plan reads: the watched pods, nodes, ReplicaSets and
//! policies ([`Caches`]), each trimmed to what the planner uses.
//!
//! Pods are cached as [`PodRecord`]s, the planner's own shape: only what the
//! planner, the comparator and the writer read, deserialised straight from
//! the API's JSON. Fields it does not name (container specs, managedFields,
//! foreign annotations' values aside) are skipped by the parser and never
//! allocated, which keeps a 10,000-pod cache and its initial list small. Nodes and ReplicaSets are
//! trimmed after parsing ([`super::trim::trim_node`], [`super::trim::trim_replica_set`]); a node keeps
//! its labels and the two annotations that say whether an autoscaler may
//! remove it.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{Lookup, ObjectRef, Store};
use kube::runtime::watcher;
use serde::{Deserialize, Deserializer};

use super::policy_index::{PolicyIndex, ValidPolicy};
use super::scale_in::fresh_marks::FresherMarks;
use super::scale_in::fresh_nodes::FresherNodes;
use crate::plan::Snapshot;
use crate::pod::PodRecord;
use crate::policy::DeletionCostPolicy;

/// The caches a plan reads. Cheap to clone (the stores are shared), so
/// planning can take them to the blocking pool.
#[derive(Clone)]
pub struct Caches {
    pods: Store<CachedPod>,
    nodes: Store<Node>,
    replica_sets: Store<ReplicaSet>,
    policies: Store<DeletionCostPolicy>,
    /// The one namespace whose pods are watched (a namespace-scoped
    /// install), or none when every namespace's are.
    pods_of: Option<String>,
    /// The policies validated, kept by the policy watch's events.
    policy_index: Arc<PolicyIndex>,
    /// Nodes scale-ins read ahead of the node watch.
    fresher_nodes: Arc<FresherNodes>,
    /// Pods' scale-down markers scale-ins read ahead of the pod watch.
    fresher_marks: Arc<FresherMarks>,
}

impl Caches {
    /// Handles on the reflectors' stores; `pods_of`: the one namespace
    /// whose pods the pod store holds, if it holds only one.
    pub fn new(
        pods: Store<CachedPod>,
        nodes: Store<Node>,
        replica_sets: Store<ReplicaSet>,
        policies: Store<DeletionCostPolicy>,
        pods_of: Option<String>,
    ) -> Self {
        Caches {
            pods,
            nodes,
            replica_sets,
            policies,
            pods_of,
            policy_index: Arc::default(),
            fresher_nodes: Arc::default(),
            fresher_marks: Arc::default(),
        }
    }

    /// The same caches with the policy watch's `index` (see
    /// [`PolicyIndex::observe`]).
    pub fn with_policy_index(self, index: Arc<PolicyIndex>) -> Self {
        Caches {
            policy_index: index,
            ..self
        }
    }

    /// The valid policies of `ns` that are not being deleted, each
    /// validated once per spec.
    pub fn valid_policies(&self, ns: &str) -> Vec<ValidPolicy> {
        self.policy_index.valid_in(ns, self.policies.state())
    }

    /// The one namespace whose pods are cached, when the install is
    /// namespace-scoped: a node's occupancy then counts only its pods.
    pub fn pods_of(&self) -> Option<&str> {
        self.pods_of.as_deref()
    }

    /// A snapshot for a round of a policy in `ns`: every cached pod (shared,
    /// not copied: a node's occupancy counts every namespace's pods, as
    /// `plan` over a cluster-wide snapshot does; with the markers a
    /// scale-in read ahead of the watch), every node, and the namespace's
    /// ReplicaSets.
    pub fn snapshot(&self, ns: &str) -> Snapshot {
        let in_ns = |m: &kube::api::ObjectMeta| m.namespace.as_deref() == Some(ns);
        Snapshot {
            pods: self.fresher_marks.over(self.pods()),
            nodes: self.fresher_nodes.over(self.nodes.state()),
            replica_sets: self
                .replica_sets
                .state()
                .iter()
                .filter(|r| in_ns(&r.metadata))
                .map(|r| (**r).clone())
                .collect(),
            deployments: Vec::new(),
            ignored: Vec::new(),
        }
    }

    /// Every cached pod.
    pub fn pods(&self) -> Vec<Arc<PodRecord>> {
        self.pods.state().iter().map(|c| c.0.clone()).collect()
    }

    /// One cached pod.
    pub fn pod(&self, ns: &str, name: &str) -> Option<Arc<PodRecord>> {
        self.pods
            .get(&ObjectRef::new(name).within(ns))
            .map(|c| c.0.clone())
    }

    /// One cached node (or the one a scale-in read, when newer).
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.fresher_nodes
            .one(name, self.nodes.get(&ObjectRef::new(name)))
    }

    /// Keeps a node read from the API server: snapshots and [`Caches::node`]
    /// show it until the node watch shows it as new.
    pub fn keep_fresher_node(&self, node: Node) {
        self.fresher_nodes.keep(node);
    }

    /// The markers scale-ins read ahead of the pod watch.
    pub(super) fn fresher_marks(&self) -> &FresherMarks {
        &self.fresher_marks
    }

    /// One cached ReplicaSet.
    pub fn replica_set(&self, ns: &str, name: &str) -> Option<Arc<ReplicaSet>> {
        self.replica_sets.get(&ObjectRef::new(name).within(ns))
    }

    /// Every cached policy.
    pub fn policies(&self) -> Vec<Arc<DeletionCostPolicy>> {
        self.policies.state()
    }

    /// One cached policy.
    pub fn policy(&self, ns: &str, name: &str) -> Option<Arc<DeletionCostPolicy>> {
        self.policies.get(&ObjectRef::new(name).within(ns))
    }
}

/// A pod as the store keeps it: its record, shared with every snapshot.
/// (The record is the core's type and the store's key trait kube's: this
/// crate can name one for the other only through a type of its own.)
#[derive(Clone, Debug)]
pub struct CachedPod(pub Arc<PodRecord>);

/// A record names its pod for kube's stores and object references.
impl Lookup for CachedPod {
    type DynamicType = ();
    fn kind(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT.into()
    }
    fn name(&self) -> Option<Cow<'_, str>> {
        self.0.identity.name.as_deref().map(Cow::Borrowed)
    }
    fn namespace(&self) -> Option<Cow<'_, str>> {
        self.0.identity.namespace.as_deref().map(Cow::Borrowed)
    }
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        self.0
            .identity
            .resource_version
            .as_deref()
            .map(Cow::Borrowed)
    }
    fn uid(&self) -> Option<Cow<'_, str>> {
        self.0.identity.uid.as_deref().map(Cow::Borrowed)
    }
}

/// A pod as the pod watch decodes it: the record, and the `ObjectMeta` the
/// watch reads (the resource version it resumes from). Turned into the
/// record before the cache stores it (`WatchedPod::into_record`).
#[derive(Clone, Debug)]
pub struct WatchedPod {
    meta: ObjectMeta,
    record: PodRecord,
}

impl WatchedPod {
    /// The record, for the cache.
    fn into_record(self) -> CachedPod {
        CachedPod(Arc::new(self.record))
    }
}

impl<'de> Deserialize<'de> for WatchedPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let record = PodRecord::deserialize(d)?;
        let id = &record.identity;
        let meta = ObjectMeta {
            name: id.name.clone(),
            namespace: id.namespace.clone(),
            uid: id.uid.clone(),
            resource_version: id.resource_version.clone(),
            ..Default::default()
        };
        Ok(WatchedPod { meta, record })
    }
}

impl k8s_openapi::Resource for WatchedPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for WatchedPod {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.meta
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// A pod watch's event with the pod as the cache holds it.
pub fn record_event(e: watcher::Event<WatchedPod>) -> watcher::Event<CachedPod> {
    use watcher::Event;
    match e {
        Event::Apply(p) => Event::Apply(p.into_record()),
        Event::Delete(p) => Event::Delete(p.into_record()),
        Event::Init => Event::Init,
        Event::InitApply(p) => Event::InitApply(p.into_record()),
        Event::InitDone => Event::InitDone,
    }
}
