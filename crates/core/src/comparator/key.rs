//! Per-pod comparison keys, computed once so the sort does no parsing or
//! allocation per comparison.

use std::borrow::Cow;

use foldhash::{HashMap, HashMapExt};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::cost::{deletion_cost_of, ParsedCost};
use super::gomath::{go_sub_nanos, log_bucket};
use crate::annotations::POD_DELETION_COST;
use crate::pod::PodView;

/// Nanoseconds since the Unix epoch of Go's zero `time.Time` (0001-01-01T00:00:00Z).
pub const GO_ZERO_TIME_NANOS: i128 = -62_135_596_800 * 1_000_000_000;

/// A timestamp as upstream sees it: `None` is Go's zero time (`IsZero()`).
pub type GoTime = Option<i128>;

/// Converts an optional API timestamp to nanoseconds, mapping both "absent"
/// and an explicit 0001-01-01T00:00:00Z to the zero time.
pub fn go_time(t: Option<&Time>) -> GoTime {
    let ns = t?.0.as_nanosecond();
    (ns != GO_ZERO_TIME_NANOS).then_some(ns)
}

/// Upstream's `podPhaseToOrdinal`: Pending 0, Unknown 1, Running 2, anything else 0.
pub fn phase_ordinal(phase: Option<&str>) -> u8 {
    match phase {
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    }
}

/// Upstream's `controller.IsPodActive`.
pub fn is_pod_active(pod: &(impl PodView + ?Sized)) -> bool {
    !matches!(pod.phase(), Some("Succeeded") | Some("Failed"))
        && pod.meta().deletion_timestamp.is_none()
}

/// Why a pod was left out as inactive.
pub fn inactive_reason(pod: &(impl PodView + ?Sized)) -> Option<&'static str> {
    if pod.meta().deletion_timestamp.is_some() {
        return Some("deletionTimestamp set");
    }
    match pod.phase() {
        Some("Succeeded") => Some("phase Succeeded"),
        Some("Failed") => Some("phase Failed"),
        _ => None,
    }
}

/// Upstream's `podutil.IsPodReady`: the first condition of type `Ready` decides,
/// and only the exact status "True" counts.
pub fn is_pod_ready(pod: &(impl PodView + ?Sized)) -> bool {
    pod.ready_condition()
        .is_some_and(|(status, _)| status == "True")
}

/// Upstream's `podReadyTime`: for a ready pod, the lastTransitionTime of the
/// first `Ready`=`True` condition (the first `Ready` one, since it decides
/// readiness); zero otherwise.
pub fn pod_ready_time(pod: &(impl PodView + ?Sized), ready: bool) -> GoTime {
    if !ready {
        return None;
    }
    pod.ready_condition().and_then(|(_, t)| go_time(t))
}

/// Upstream's `maxContainerRestarts`: (max regular restartCount, max restartCount
/// of restartable init containers), both starting from 0.
pub fn max_container_restarts(pod: &(impl PodView + ?Sized)) -> (i64, i64) {
    pod.max_restarts()
}

/// Everything the comparator reads from one pod. Its strings borrow from the
/// pod it was read from (keys are built for every pod of a ReplicaSet, and
/// copying five strings each was most of their cost); tests and callers
/// without a pod own them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankKey<'a> {
    /// `metadata.namespace` (empty when absent).
    pub namespace: Cow<'a, str>,
    /// `metadata.name` (empty when absent).
    pub name: Cow<'a, str>,
    /// `metadata.uid`; Go compares it bytewise, as Rust does.
    pub uid: Cow<'a, str>,
    /// `spec.nodeName`; empty means unassigned.
    pub node_name: Cow<'a, str>,
    /// `status.phase` as written.
    pub phase: Option<Cow<'a, str>>,
    /// Ordinal of the phase (rule 2).
    pub phase_ordinal: u8,
    /// Rule 3.
    pub ready: bool,
    /// Rule 4 input, with why the raw value was rejected if it was.
    pub cost: ParsedCost,
    /// Rule 5: active related pods on the same node (set by [`assign_ranks`]).
    pub rank: i64,
    /// Rule 6 input (`None` = zero time).
    pub ready_time: GoTime,
    /// Rule 7 inputs.
    pub restarts: i64,
    /// Rule 7, second part (sidecar containers).
    pub sidecar_restarts: i64,
    /// Rule 8 input (`None` = zero time).
    pub created: GoTime,
    /// log2 bucket of `now - ready_time` (set by [`RankKey::with_now`]).
    pub ready_bucket: i64,
    /// log2 bucket of `now - created`.
    pub created_bucket: i64,
}

fn borrowed(s: Option<&str>) -> Cow<'_, str> {
    Cow::Borrowed(s.unwrap_or_default())
}

impl<'a> RankKey<'a> {
    /// Extracts the key from a pod, borrowing its strings. Ranks start at 0
    /// and buckets are unset.
    pub fn from_pod<P: PodView + ?Sized>(pod: &'a P) -> Self {
        let ready = is_pod_ready(pod);
        let (restarts, sidecar_restarts) = pod.max_restarts();
        let phase = pod.phase();
        let m = pod.meta();
        Self {
            namespace: borrowed(m.namespace),
            name: borrowed(m.name),
            uid: borrowed(m.uid),
            node_name: Cow::Borrowed(pod.node_name().unwrap_or_default()),
            phase_ordinal: phase_ordinal(phase),
            phase: phase.map(Cow::Borrowed),
            ready,
            cost: deletion_cost_of(pod.annotation(POD_DELETION_COST)),
            rank: 0,
            ready_time: pod_ready_time(pod, ready),
            restarts,
            sidecar_restarts,
            created: go_time(m.creation_timestamp),
            ready_bucket: -1,
            created_bucket: -1,
        }
    }

    /// Fills the log2 buckets relative to `now` (`None` = Go's zero time).
    pub fn with_now(mut self, now: GoTime) -> Self {
        self.ready_bucket = bucket(now, self.ready_time);
        self.created_bucket = bucket(now, self.created);
        self
    }

    /// The same key owning its strings (kept past the pod it was read from).
    pub fn into_owned(self) -> RankKey<'static> {
        let own = |c: Cow<'_, str>| Cow::Owned(c.into_owned());
        RankKey {
            namespace: own(self.namespace),
            name: own(self.name),
            uid: own(self.uid),
            node_name: own(self.node_name),
            phase: self.phase.map(own),
            phase_ordinal: self.phase_ordinal,
            ready: self.ready,
            cost: self.cost,
            rank: self.rank,
            ready_time: self.ready_time,
            restarts: self.restarts,
            sidecar_restarts: self.sidecar_restarts,
            created: self.created,
            ready_bucket: self.ready_bucket,
            created_bucket: self.created_bucket,
        }
    }
}

/// The log2 bucket of `now - t` (-1 when either is Go's zero time).
pub fn bucket(now: GoTime, t: GoTime) -> i64 {
    match (now, t) {
        (Some(n), Some(t)) => log_bucket(go_sub_nanos(n, t)),
        _ => -1,
    }
}

/// A string's address and length.
pub(super) fn address(s: &str) -> (usize, usize) {
    (s.as_ptr() as usize, s.len())
}

/// Active related pods per `spec.nodeName` (the empty node name is an
/// ordinary key): the input of the colocation rank, the same for every
/// ReplicaSet that shares the related pods.
#[derive(Debug, Clone, Default)]
pub struct PodsOnNode<'a> {
    pub(super) by_name: HashMap<&'a str, i64>,
    /// The same counts by the address and length of the related pods' node
    /// names: slim pods on one node share one `Arc`, and a live allocation's
    /// address names it while `'a` lasts.
    pub(super) by_address: HashMap<(usize, usize), i64>,
}

impl<'a> PodsOnNode<'a> {
    /// Counts the active pods among `related` per node.
    pub fn count<P: PodView + 'a>(related: impl IntoIterator<Item = &'a P>) -> Self {
        let related = related.into_iter();
        let mut on_node: HashMap<&str, i64> = HashMap::with_capacity(related.size_hint().0 / 8);
        for pod in related {
            if is_pod_active(pod) {
                *on_node.entry(pod.node_name().unwrap_or("")).or_default() += 1;
            }
        }
        Self {
            by_name: on_node,
            by_address: HashMap::new(),
        }
    }

    /// The count on a node.
    pub fn rank(&self, node: &str) -> i64 {
        if let Some(&n) = self.by_address.get(&address(node)) {
            return n;
        }
        self.by_name.get(node).copied().unwrap_or(0)
    }

    /// Sets each key's rank to the count on its node.
    pub fn assign(&self, keys: &mut [RankKey]) {
        for k in keys.iter_mut() {
            k.rank = self.rank(&k.node_name);
        }
    }
}

/// Upstream's `getPodsRankedByRelatedPodsOnSameNode`: each pod's rank is the
/// number of active related pods whose `spec.nodeName` equals its own (the
/// empty node name is an ordinary key).
pub fn assign_ranks<'a, P: PodView + 'a>(
    keys: &mut [RankKey],
    related: impl IntoIterator<Item = &'a P>,
) {
    PodsOnNode::count(related).assign(keys);
}
