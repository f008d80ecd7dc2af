//! A pod as `predict` keeps it: only what the comparator, the grouping by
//! owner and the checks of the input read, already reduced to the values
//! upstream computes from it. `kubectl get pods -o json` spends ~1.7 KB a
//! pod; this keeps ~0.2 KB.

use foldhash::{HashMap, HashMapExt};
use std::borrow::Cow;
use std::sync::Arc;

use super::cost::{parse_deletion_cost, ParsedCost};
use super::key::{
    address, go_time, is_pod_ready, max_container_restarts, phase_ordinal, pod_ready_time, GoTime,
    PodsOnNode, RankKey,
};
use crate::annotations::POD_DELETION_COST;
use crate::owner::controller_of;
use crate::pod::PodView;

/// A pod's controller ownerReference (`controller: true`): kind, name, UID.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ControllerRef {
    /// `kind`.
    pub kind: Box<str>,
    /// `name`.
    pub name: Box<str>,
    /// `uid`.
    pub uid: Box<str>,
}

/// A pod's UID with its first 8 bytes beside it: the sort orders pods by
/// that prefix first, and reading it from the record spares a cache miss
/// per pod on the string.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Uid {
    prefix: u64,
    text: Box<str>,
}

impl Uid {
    /// The first 8 bytes, big-endian and zero-padded: ordered like the
    /// strings whenever two prefixes differ.
    pub fn prefix(&self) -> u64 {
        self.prefix
    }
}

impl From<&str> for Uid {
    fn from(text: &str) -> Self {
        Self {
            prefix: uid_prefix(text),
            text: text.into(),
        }
    }
}

impl std::ops::Deref for Uid {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl std::fmt::Display for Uid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// What the comparator reads of one pod (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlimPod {
    /// `metadata.namespace` (empty when absent); pods read from one input
    /// share it.
    pub namespace: Arc<str>,
    /// `metadata.name` (empty when absent).
    pub name: Box<str>,
    /// `metadata.uid` (empty when absent).
    pub uid: Uid,
    /// `spec.nodeName` (empty: unassigned); pods on one node share it.
    pub node_name: Arc<str>,
    /// `status.phase` as written.
    pub phase: Option<Cow<'static, str>>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The controller ownerReference; pods of one owner share it.
    pub owner: Option<Arc<ControllerRef>>,
    /// The pod-deletion-cost annotation as written.
    pub cost_annotation: Option<Box<str>>,
    /// What upstream reads from it (0 when absent or invalid), and why a
    /// value was rejected.
    pub cost: ParsedCost,
    /// Upstream's `IsPodReady`.
    pub ready: bool,
    /// Upstream's `podReadyTime` (zero unless ready).
    pub ready_time: GoTime,
    /// `metadata.creationTimestamp`.
    pub created: GoTime,
    /// Upstream's `maxContainerRestarts`: regular containers.
    pub restarts: i64,
    /// The same for restartable init containers (sidecars).
    pub sidecar_restarts: i64,
}

/// A phase as a static string when it is one of the five Kubernetes writes.
pub fn phase_of(phase: &str) -> Cow<'static, str> {
    match phase {
        "Pending" => Cow::Borrowed("Pending"),
        "Running" => Cow::Borrowed("Running"),
        "Succeeded" => Cow::Borrowed("Succeeded"),
        "Failed" => Cow::Borrowed("Failed"),
        "Unknown" => Cow::Borrowed("Unknown"),
        other => Cow::Owned(other.to_string()),
    }
}

/// Upstream's cost for a pod with this annotation, or none.
pub fn cost_of(annotation: Option<&str>) -> ParsedCost {
    annotation.map(parse_deletion_cost).unwrap_or_default()
}

impl SlimPod {
    /// Reads the fields from a whole pod or a snapshot's [`PodRecord`]
    /// (the same functions the comparator's keys use on either).
    ///
    /// [`PodRecord`]: crate::pod::PodRecord
    pub fn from_pod(pod: &(impl PodView + ?Sized)) -> Self {
        let m = pod.meta();
        let ready = is_pod_ready(pod);
        let ready_time = pod_ready_time(pod, ready);
        let (restarts, sidecar_restarts) = max_container_restarts(pod);
        let cost_annotation = pod.annotation(POD_DELETION_COST);
        Self {
            namespace: m.namespace.unwrap_or_default().into(),
            name: m.name.unwrap_or_default().into(),
            uid: m.uid.unwrap_or_default().into(),
            node_name: pod.node_name().unwrap_or_default().into(),
            phase: pod.phase().map(phase_of),
            deleting: m.deletion_timestamp.is_some(),
            owner: controller_of(pod.owner_references()).map(|o| {
                Arc::new(ControllerRef {
                    kind: o.kind.as_str().into(),
                    name: o.name.as_str().into(),
                    uid: o.uid.as_str().into(),
                })
            }),
            cost_annotation: cost_annotation.map(Into::into),
            cost: cost_of(cost_annotation),
            ready,
            ready_time,
            created: go_time(m.creation_timestamp),
            restarts,
            sidecar_restarts,
        }
    }

    /// Upstream's `controller.IsPodActive`.
    pub fn is_active(&self) -> bool {
        self.inactive_reason().is_none()
    }

    /// Why the pod is left out as inactive (as [`super::inactive_reason`]).
    pub fn inactive_reason(&self) -> Option<&'static str> {
        if self.deleting {
            return Some("deletionTimestamp set");
        }
        match self.phase.as_deref() {
            Some("Succeeded") => Some("phase Succeeded"),
            Some("Failed") => Some("phase Failed"),
            _ => None,
        }
    }
}

impl<'a> RankKey<'a> {
    /// Extracts the key from a slim pod ([`SlimPod`]), borrowing
    /// its strings; the same key [`RankKey::from_pod`] gives for the whole pod.
    pub fn from_slim(pod: &'a SlimPod) -> Self {
        let phase = pod.phase.as_deref();
        Self {
            namespace: Cow::Borrowed(&pod.namespace),
            name: Cow::Borrowed(&pod.name),
            uid: Cow::Borrowed(&pod.uid),
            node_name: Cow::Borrowed(&pod.node_name),
            phase_ordinal: phase_ordinal(phase),
            phase: phase.map(Cow::Borrowed),
            ready: pod.ready,
            cost: pod.cost.clone(),
            rank: 0,
            ready_time: pod.ready_time,
            restarts: pod.restarts,
            sidecar_restarts: pod.sidecar_restarts,
            created: pod.created,
            ready_bucket: -1,
            created_bucket: -1,
        }
    }
}

impl<'a> PodsOnNode<'a> {
    /// Counts the active pods among slim `related` per node. Slim pods on
    /// one node usually share one `Arc`, so they are counted by its address
    /// first and each distinct address's name is hashed once.
    pub fn count_slim(related: impl IntoIterator<Item = &'a SlimPod>) -> Self {
        let mut by_address: HashMap<(usize, usize), (&'a str, i64)> = HashMap::new();
        for pod in related {
            if pod.is_active() {
                let name: &'a str = &pod.node_name;
                by_address.entry(address(name)).or_insert((name, 0)).1 += 1;
            }
        }
        let mut by_name: HashMap<&str, i64> = HashMap::with_capacity(by_address.len());
        for &(name, n) in by_address.values() {
            *by_name.entry(name).or_default() += n;
        }
        // one name may sit in several allocations: each gets the total
        let by_address = by_address
            .into_iter()
            .map(|(at, (name, n))| (at, by_name.get(name).copied().unwrap_or(n)))
            .collect();
        Self {
            by_name,
            by_address,
        }
    }
}

/// A UID's first 8 bytes as a big-endian number (zero-padded): what
/// packed records compare first (`SortRec::uid8`).
pub(super) fn uid_prefix(uid: &str) -> u64 {
    let mut b = [0u8; 8];
    match uid.as_bytes().first_chunk::<8>() {
        Some(first) => b = *first,
        None => b[..uid.len()].copy_from_slice(uid.as_bytes()),
    }
    u64::from_be_bytes(b)
}
