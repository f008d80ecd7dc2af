//! The typed decode of one plain Pod item straight into a [`SlimPod`],
//! borrowing from the item's raw text. It answers only for what is surely a
//! named Pod (kind `Pod` or none, apiVersion `v1` or none, no `items`, no
//! version fields) whose read fields have the types `Pod` requires; anything
//! else (`None`) goes to the general path, which gives the exact answer or
//! error.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;

use crate::annotations::POD_DELETION_COST;
use crate::comparator::key::go_time;
use crate::comparator::slim::{cost_of, phase_of, ControllerRef, SlimPod};
use crate::{MAX_LABEL_BYTES, MAX_NAME_BYTES};

mod scan;

/// A string that borrows from the text when it has no escapes.
#[derive(Debug, Default)]
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

fn text<'b>(s: &'b Option<Str<'_>>) -> &'b str {
    s.as_ref().map_or("", |s| &s.0)
}

/// A struct read only from a JSON object: `Pod`'s fields refuse arrays,
/// which serde's derived structs would take field by field.
struct M<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for M<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = M<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<M<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(M)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct FastPod<'a> {
    #[serde(borrow)]
    kind: Option<Str<'a>>,
    #[serde(rename = "apiVersion", borrow)]
    api_version: Option<Str<'a>>,
    #[serde(borrow)]
    metadata: Option<M<Meta<'a>>>,
    #[serde(borrow)]
    spec: Option<M<Spec<'a>>>,
    #[serde(borrow)]
    status: Option<M<Status<'a>>>,
    // present: a List or a version object, for the general path
    items: Option<IgnoredAny>,
    #[serde(rename = "serverVersion")]
    server_version: Option<IgnoredAny>,
    #[serde(rename = "clientVersion")]
    client_version: Option<IgnoredAny>,
    #[serde(rename = "gitVersion")]
    git_version: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(borrow)]
    name: Option<Str<'a>>,
    #[serde(borrow)]
    namespace: Option<Str<'a>>,
    #[serde(borrow)]
    uid: Option<Str<'a>>,
    #[serde(rename = "creationTimestamp")]
    creation_timestamp: Option<Time>,
    #[serde(rename = "deletionTimestamp")]
    deletion_timestamp: Option<Time>,
    #[serde(borrow)]
    annotations: Option<Annotations<'a>>,
    #[serde(rename = "ownerReferences", borrow)]
    owner_references: Option<Vec<M<Owner<'a>>>>,
    #[serde(rename = "labels")]
    _labels: Option<Labels>,
}

/// Labels are not kept; each must be a string within Kubernetes' limits
/// (else the general path names the one that is not).
struct Labels;

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Labels;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Labels, A::Error> {
                while let Some((k, v)) = map.next_entry::<Str<'de>, Str<'de>>()? {
                    if crate::label_over_limits(&k.0, v.0.len()).is_some() {
                        return Err(serde::de::Error::custom("a label over Kubernetes' limits"));
                    }
                }
                Ok(Labels)
            }
        }
        d.deserialize_map(V)
    }
}

/// Only the deletion cost is kept; every value must still be a string.
struct Annotations<'a>(Option<Str<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for Annotations<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Annotations<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Annotations<'de>, A::Error> {
                let mut cost = None;
                let mut total = 0usize;
                while let Some((k, v)) = map.next_entry::<Str<'de>, Str<'de>>()? {
                    total += k.0.len() + v.0.len();
                    if total > crate::MAX_ANNOTATIONS_BYTES {
                        return Err(serde::de::Error::custom(
                            "annotations over Kubernetes' limit",
                        ));
                    }
                    if k.0 == POD_DELETION_COST {
                        // a repeated key: the last counts, as in a map
                        cost = Some(v);
                    }
                }
                Ok(Annotations(cost))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize)]
struct Owner<'a> {
    #[serde(rename = "apiVersion", borrow)]
    _api_version: Option<Str<'a>>,
    #[serde(borrow)]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    name: Option<Str<'a>>,
    #[serde(borrow)]
    uid: Option<Str<'a>>,
    controller: Option<bool>,
    #[serde(rename = "blockOwnerDeletion")]
    _block_owner_deletion: Option<bool>,
}

#[derive(Deserialize)]
struct Spec<'a> {
    #[serde(rename = "nodeName", borrow)]
    node_name: Option<Str<'a>>,
    #[serde(rename = "initContainers", borrow)]
    init_containers: Option<Vec<M<InitContainer<'a>>>>,
}

#[derive(Deserialize)]
struct InitContainer<'a> {
    #[serde(borrow)]
    name: Option<Str<'a>>,
    #[serde(rename = "restartPolicy", borrow)]
    restart_policy: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct Status<'a> {
    #[serde(borrow)]
    phase: Option<Str<'a>>,
    #[serde(borrow)]
    conditions: Option<Vec<M<Condition<'a>>>>,
    #[serde(rename = "containerStatuses", borrow)]
    container_statuses: Option<Vec<M<ContainerStatus<'a>>>>,
    #[serde(rename = "initContainerStatuses", borrow)]
    init_container_statuses: Option<Vec<M<ContainerStatus<'a>>>>,
}

#[derive(Deserialize)]
struct Condition<'a> {
    #[serde(rename = "type", borrow)]
    type_: Option<Str<'a>>,
    #[serde(borrow)]
    status: Option<Str<'a>>,
    #[serde(rename = "lastTransitionTime")]
    last_transition_time: Option<Time>,
    #[serde(rename = "lastProbeTime")]
    _last_probe_time: Option<Time>,
}

#[derive(Deserialize)]
struct ContainerStatus<'a> {
    #[serde(borrow)]
    name: Option<Str<'a>>,
    #[serde(rename = "restartCount")]
    restart_count: Option<i32>,
    #[serde(rename = "ready")]
    _ready: Option<bool>,
}

/// Strings that repeat across pods, shared: node names, namespaces and
/// owners.
#[derive(Default)]
pub(super) struct Shared {
    nodes: foldhash::HashMap<Box<str>, Arc<str>>,
    namespaces: foldhash::HashMap<Box<str>, Arc<str>>,
    owners: foldhash::HashSet<Arc<ControllerRef>>,
}

/// `text`, shared with the texts of `table`.
fn shared(table: &mut foldhash::HashMap<Box<str>, Arc<str>>, text: &str) -> Arc<str> {
    match table.get(text) {
        Some(n) => n.clone(),
        None => {
            let n: Arc<str> = text.into();
            table.insert(text.into(), n.clone());
            n
        }
    }
}

/// One item as a [`SlimPod`], or `None` for the general path (see the
/// module doc).
pub(super) fn decode(raw: &str, shared: &mut Shared) -> Option<SlimPod> {
    if !raw.starts_with('{') {
        return None;
    }
    let fields = match scan::scan(raw) {
        Ok((fields, len)) if len == raw.len() => fields,
        _ => serde_json::from_str::<M<FastPod>>(raw).ok()?.0.fields(),
    };
    slim(fields, shared)
}

/// Why [`decode_prefix`] has no value.
pub(super) enum Miss {
    /// The text ends inside the value.
    Cut,
    /// Not sure: anything else.
    Unsure,
}

/// [`decode`] on the value at the start of `text` (an object), which goes
/// on past it: the pod (`None`: a value for the general path) and the
/// value's length.
pub(super) fn decode_prefix(
    text: &str,
    shared: &mut Shared,
) -> Result<(Option<SlimPod>, usize), Miss> {
    if !text.starts_with('{') {
        return Err(Miss::Unsure);
    }
    match scan::scan(text) {
        Ok((fields, len)) => return Ok((slim(fields, shared), len)),
        Err(scan::Fail::Cut) => return Err(Miss::Cut),
        Err(scan::Fail::Unsure) => {}
    }
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<M<FastPod>>();
    match values.next() {
        Some(Ok(M(p))) => Ok((slim(p.fields(), shared), values.byte_offset())),
        Some(Err(e)) if e.is_eof() => Err(Miss::Cut),
        _ => Err(Miss::Unsure),
    }
}

/// What the fast path reads of one pod item, from either decoder: the
/// serde types above (via [`FastPod::fields`]) or the hand-written scan.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Fields<'a> {
    pub kind: Option<Cow<'a, str>>,
    pub api_version: Option<Cow<'a, str>>,
    /// `items` or a version field: a List or a version, not a pod.
    pub other: bool,
    pub metadata: Option<MetaFields<'a>>,
    pub spec: Option<SpecFields<'a>>,
    pub status: Option<StatusFields<'a>>,
}

/// [`Fields`]' `metadata`.
#[derive(Debug, Default, PartialEq)]
pub(super) struct MetaFields<'a> {
    pub name: Option<Cow<'a, str>>,
    pub namespace: Option<Cow<'a, str>>,
    pub uid: Option<Cow<'a, str>>,
    pub created: Option<Time>,
    pub deleting: bool,
    /// The deletion cost annotation (the last, if repeated).
    pub cost: Option<Cow<'a, str>>,
    /// The first ownerReference with `controller: true`: kind, name, UID.
    pub controller: Option<[Cow<'a, str>; 3]>,
    /// Some ownerReference's name is past Kubernetes' limit.
    pub long_owner_name: bool,
}

/// [`Fields`]' `spec`.
#[derive(Debug, Default, PartialEq)]
pub(super) struct SpecFields<'a> {
    pub node_name: Option<Cow<'a, str>>,
    /// The names of the init containers with `restartPolicy: Always`.
    pub sidecars: Vec<Cow<'a, str>>,
}

/// A condition's status and lastTransitionTime.
pub(super) type ReadyCondition<'a> = (Option<Cow<'a, str>>, Option<Time>);

/// [`Fields`]' `status`.
#[derive(Debug, Default, PartialEq)]
pub(super) struct StatusFields<'a> {
    pub phase: Option<Cow<'a, str>>,
    /// The first `Ready` condition.
    pub ready: Option<ReadyCondition<'a>>,
    /// The most restarts of a container.
    pub restarts: i64,
    /// Each init container's name and restarts.
    pub init_restarts: Vec<(Cow<'a, str>, i64)>,
}

fn cow<'a>(s: Option<Str<'a>>) -> Option<Cow<'a, str>> {
    s.map(|s| s.0)
}

fn restarts(c: &ContainerStatus<'_>) -> i64 {
    i64::from(c.restart_count.unwrap_or_default())
}

impl<'a> FastPod<'a> {
    /// What the fast path reads of it.
    fn fields(self) -> Fields<'a> {
        let metadata = self.metadata.map(|M(m)| {
            let owners = m.owner_references.into_iter().flatten().map(|M(o)| o);
            let mut meta = MetaFields {
                name: cow(m.name),
                namespace: cow(m.namespace),
                uid: cow(m.uid),
                created: m.creation_timestamp,
                deleting: m.deletion_timestamp.is_some(),
                cost: m.annotations.and_then(|a| cow(a.0)),
                ..MetaFields::default()
            };
            for o in owners {
                meta.long_owner_name |= text(&o.name).len() > MAX_NAME_BYTES;
                if meta.controller.is_none() && o.controller == Some(true) {
                    meta.controller =
                        Some([o.kind, o.name, o.uid].map(|s| s.unwrap_or_default().0));
                }
            }
            meta
        });
        let spec = self.spec.map(|M(s)| SpecFields {
            node_name: cow(s.node_name),
            sidecars: s
                .init_containers
                .into_iter()
                .flatten()
                .map(|M(c)| c)
                .filter(|c| c.restart_policy.as_ref().is_some_and(|r| r.0 == "Always"))
                .map(|c| c.name.unwrap_or_default().0)
                .collect(),
        });
        let status = self.status.map(|M(s)| StatusFields {
            phase: cow(s.phase),
            // upstream's IsPodReady: the first Ready condition decides
            ready: s
                .conditions
                .into_iter()
                .flatten()
                .map(|M(c)| c)
                .find(|c| text(&c.type_) == "Ready")
                .map(|c| (cow(c.status), c.last_transition_time)),
            restarts: s
                .container_statuses
                .iter()
                .flatten()
                .map(|M(c)| restarts(c))
                .fold(0, i64::max),
            init_restarts: s
                .init_container_statuses
                .into_iter()
                .flatten()
                .map(|M(c)| (restarts(&c), c.name.unwrap_or_default().0))
                .map(|(r, name)| (name, r))
                .collect(),
        });
        Fields {
            kind: cow(self.kind),
            api_version: cow(self.api_version),
            other: self.items.is_some()
                || self.server_version.is_some()
                || self.client_version.is_some()
                || self.git_version.is_some(),
            metadata,
            spec,
            status,
        }
    }
}

/// The [`SlimPod`] of a plain, named pod within Kubernetes' limits, or
/// `None` for the general path.
pub(super) fn slim(p: Fields<'_>, shared_texts: &mut Shared) -> Option<SlimPod> {
    let plain = p.kind.as_deref().is_none_or(|k| k == "Pod")
        && p.api_version.as_deref().is_none_or(|v| v == "v1")
        && !p.other;
    let m = p.metadata?;
    let name = m.name.as_deref().unwrap_or_default();
    if !plain || name.is_empty() {
        return None;
    }
    // past Kubernetes' limits on names: the general path names the field
    let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
    let node = node.unwrap_or_default();
    let namespace = m.namespace.as_deref().unwrap_or_default();
    if name.len() > MAX_NAME_BYTES
        || namespace.len() > MAX_LABEL_BYTES
        || node.len() > MAX_NAME_BYTES
        || m.long_owner_name
    {
        return None;
    }
    let status = p.status.as_ref();
    let ready_condition = status.and_then(|s| s.ready.as_ref());
    let ready = ready_condition.is_some_and(|(s, _)| s.as_deref() == Some("True"));
    let ready_time = ready_condition
        .filter(|_| ready)
        .and_then(|(_, t)| go_time(t.as_ref()));
    let restarts = status.map_or(0, |s| s.restarts);
    let sidecars = p.spec.as_ref().map_or(&[][..], |s| &s.sidecars[..]);
    let sidecar_restarts = status.map_or(0, |s| {
        s.init_restarts
            .iter()
            .filter(|(name, _)| sidecars.contains(name))
            .map(|&(_, r)| r)
            .fold(0, i64::max)
    });
    let node_name = shared(&mut shared_texts.nodes, node);
    let owners = &mut shared_texts.owners;
    let owner = m.controller.map(|[kind, name, uid]| {
        let r = ControllerRef {
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
        };
        match owners.get(&r) {
            Some(shared) => shared.clone(),
            None => {
                let shared = Arc::new(r);
                owners.insert(shared.clone());
                shared
            }
        }
    });
    Some(SlimPod {
        namespace: shared(&mut shared_texts.namespaces, namespace),
        name: name.into(),
        uid: m.uid.as_deref().unwrap_or_default().into(),
        node_name,
        phase: status.and_then(|s| s.phase.as_deref()).map(phase_of),
        deleting: m.deleting,
        owner,
        cost: cost_of(m.cost.as_deref()),
        cost_annotation: m.cost.as_deref().map(Into::into),
        ready,
        ready_time,
        created: go_time(m.created.as_ref()),
        restarts,
        sidecar_restarts,
    })
}
