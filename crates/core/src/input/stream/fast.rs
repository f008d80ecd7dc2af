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
use crate::input::{MAX_LABEL_BYTES, MAX_NAME_BYTES};

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
                    if crate::input::label_over_limits(&k.0, v.0.len()).is_some() {
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
                    if total > crate::input::MAX_ANNOTATIONS_BYTES {
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

/// Strings that repeat across pods, shared: node names and owners.
pub(super) type Shared = (
    foldhash::HashMap<Box<str>, Arc<str>>,
    foldhash::HashSet<Arc<ControllerRef>>,
);

/// One item as a [`SlimPod`], or `None` for the general path (see the
/// module doc).
pub(super) fn decode(raw: &str, shared: &mut Shared) -> Option<SlimPod> {
    if !raw.starts_with('{') {
        return None;
    }
    let M(p): M<FastPod> = serde_json::from_str(raw).ok()?;
    slim(p, shared)
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
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<M<FastPod>>();
    match values.next() {
        Some(Ok(M(p))) => Ok((slim(p, shared), values.byte_offset())),
        Some(Err(e)) if e.is_eof() => Err(Miss::Cut),
        _ => Err(Miss::Unsure),
    }
}

fn slim(p: FastPod<'_>, (nodes, owners): &mut Shared) -> Option<SlimPod> {
    let plain = p.kind.as_ref().is_none_or(|k| k.0 == "Pod")
        && p.api_version.as_ref().is_none_or(|v| v.0 == "v1")
        && p.items.is_none()
        && p.server_version.is_none()
        && p.client_version.is_none()
        && p.git_version.is_none();
    let M(m) = p.metadata?;
    let name = text(&m.name);
    if !plain || name.is_empty() {
        return None;
    }
    // past Kubernetes' limits on names: the general path names the field
    let node = p.spec.as_ref().map_or("", |M(s)| text(&s.node_name));
    let owner_names = m
        .owner_references
        .iter()
        .flatten()
        .map(|M(o)| text(&o.name));
    if name.len() > MAX_NAME_BYTES
        || text(&m.namespace).len() > MAX_LABEL_BYTES
        || node.len() > MAX_NAME_BYTES
        || owner_names.into_iter().any(|n| n.len() > MAX_NAME_BYTES)
    {
        return None;
    }
    let status = p.status.map(|M(s)| s);
    let spec = p.spec.map(|M(s)| s);
    let conditions = status.as_ref().and_then(|s| s.conditions.as_deref());
    // upstream's IsPodReady: the first Ready condition decides
    let ready = conditions
        .and_then(|cs| cs.iter().map(|M(c)| c).find(|c| text(&c.type_) == "Ready"))
        .is_some_and(|c| text(&c.status) == "True");
    let ready_time = if ready {
        conditions
            .and_then(|cs| {
                cs.iter()
                    .map(|M(c)| c)
                    .find(|c| text(&c.type_) == "Ready" && text(&c.status) == "True")
            })
            .and_then(|c| go_time(c.last_transition_time.as_ref()))
    } else {
        None
    };
    let max_restarts = |list: Option<&[M<ContainerStatus>]>, only: Option<&[&str]>| {
        list.into_iter()
            .flatten()
            .map(|M(c)| c)
            .filter(|c| only.is_none_or(|names| names.contains(&text(&c.name))))
            .map(|c| i64::from(c.restart_count.unwrap_or_default()))
            .fold(0, i64::max)
    };
    let restarts = max_restarts(
        status
            .as_ref()
            .and_then(|s| s.container_statuses.as_deref()),
        None,
    );
    let sidecars: Vec<&str> = spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .map(|M(c)| c)
        .filter(|c| c.restart_policy.as_ref().is_some_and(|r| r.0 == "Always"))
        .map(|c| text(&c.name))
        .collect();
    let sidecar_restarts = if status.is_some() {
        max_restarts(
            status
                .as_ref()
                .and_then(|s| s.init_container_statuses.as_deref()),
            Some(&sidecars),
        )
    } else {
        0
    };
    let node = spec.as_ref().map_or("", |s| text(&s.node_name));
    let node_name = match nodes.get(node) {
        Some(n) => n.clone(),
        None => {
            let n: Arc<str> = node.into();
            nodes.insert(node.into(), n.clone());
            n
        }
    };
    let owner = m
        .owner_references
        .iter()
        .flatten()
        .map(|M(o)| o)
        .find(|o| o.controller == Some(true))
        .map(|o| {
            let r = ControllerRef {
                kind: text(&o.kind).into(),
                name: text(&o.name).into(),
                uid: text(&o.uid).into(),
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
    let cost_annotation = m.annotations.and_then(|a| a.0).map(|c| c.0);
    Some(SlimPod {
        namespace: text(&m.namespace).into(),
        name: name.into(),
        uid: text(&m.uid).into(),
        node_name,
        phase: status
            .as_ref()
            .and_then(|s| s.phase.as_ref())
            .map(|p| phase_of(&p.0)),
        deleting: m.deletion_timestamp.is_some(),
        owner,
        cost: cost_of(cost_annotation.as_deref()),
        cost_annotation: cost_annotation.map(|c| c.as_ref().into()),
        ready,
        ready_time,
        created: go_time(m.creation_timestamp.as_ref()),
        restarts,
        sidecar_restarts,
    })
}
