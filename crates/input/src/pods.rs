//! Pods from objects or text: the typed fast path for a plain `PodList`, the
//! general path with its checks, and the slim pods `predict` keeps.

use super::{
    check_object_limits, check_pod_name, check_unique_pods, is_version_object, item_label,
    parse_objects, server_version, InputError, RawObject, ServerVersion,
};
use crate::comparator::slim::SlimPod;

/// Decodes every object as a Pod. Objects of another kind, objects with
/// neither a kind nor a name (`{}`, `{"foo": 1}`), Pods without a name, and
/// two items that are the same pod (by namespace and name, or by UID) are
/// errors naming the item(s).
pub fn pods_from(
    objects: &[RawObject],
) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, InputError> {
    let pods = objects
        .iter()
        .map(|o| {
            if !o.kind.is_empty() && o.kind != "Pod" {
                return Err(InputError::Shape {
                    source_name: o.source_name.clone(),
                    location: o.location.clone(),
                    message: format!("expected a Pod, found kind {:?}", o.kind),
                });
            }
            check_pod_name(o)?;
            check_object_limits(o)?;
            o.decode("Pod")
        })
        .collect::<Result<Vec<_>, _>>()?;
    check_unique_pods(
        objects
            .iter()
            .zip(&pods)
            .map(|(o, p)| (item_label(&o.source_name, &o.location), p)),
    )?;
    Ok(pods)
}

/// Parses pods from JSON or YAML as [`parse_objects`] + [`pods_from`] do,
/// with the same answers. A JSON List or array of pods (what `kubectl get pods
/// -o json` prints) is first decoded straight into typed pods, without the
/// intermediate `serde_json::Value` tree: several times faster on large lists.
/// The typed decode accepts exactly what the general path accepts (same `Pod`
/// type, which checks `kind` and `apiVersion`); on any failure the general
/// path runs, so errors still name the item and field.
///
/// An input without any pod (empty, blank, an empty List) is an error:
/// `kubectl ... | deletion-cost predict` must not hide a failed `kubectl`.
///
/// For tests and benches: the reference the slim readers are compared with
/// (`parse_pods_slim_matches_parse_pods`), and the comparator bench's
/// `parse_pods` row; the CLI reads with [`parse_pods_slim_versioned`].
#[doc(hidden)]
pub fn parse_pods(
    source_name: &str,
    text: &str,
) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, InputError> {
    checked_pods(source_name, text, typed_pod_list(text), |p| p).map(|(pods, _)| pods)
}

/// The pods of a typed fast-path parse when every one has a name (checked
/// for duplicates), else of the general path (whose errors say whether an
/// item is a Pod at all), each passed through `keep`; none is an error.
/// The general path also returns the version the input carries, if any.
pub(super) fn checked_pods<T>(
    source_name: &str,
    text: &str,
    typed: Option<(Vec<k8s_openapi::api::core::v1::Pod>, impl std::fmt::Display)>,
    keep: impl Fn(k8s_openapi::api::core::v1::Pod) -> T,
) -> Result<(Vec<T>, Option<ServerVersion>), InputError> {
    let (pods, version) = match typed {
        Some((pods, prefix))
            if pods
                .iter()
                .all(|p| p.metadata.name.as_deref().is_some_and(|n| !n.is_empty())) =>
        {
            check_unique_pods(
                pods.iter()
                    .enumerate()
                    .map(|(i, p)| (item_label(source_name, &format!("{prefix}[{i}]")), p)),
            )?;
            (pods.into_iter().map(keep).collect(), None)
        }
        _ => {
            let mut objects = parse_objects(source_name, text)?;
            let version = server_version(&objects)?;
            objects.retain(|o| !is_version_object(o));
            let pods: Vec<T> = pods_from(&objects)?.into_iter().map(keep).collect();
            (pods, version)
        }
    };
    if pods.is_empty() {
        return Err(no_pods(source_name, text));
    }
    Ok((pods, version))
}

/// [`parse_pods`] for `predict`, which keeps of each pod only what the
/// comparator reads, as a [`SlimPod`]: a List of 100,000 pods then takes a
/// fraction of the memory. Each item is still decoded as a whole `Pod` (the
/// same checks, the same errors) and made slim at once, so only one whole
/// pod is held at a time on the typed path.
#[cfg(test)]
pub(crate) fn parse_pods_slim(source_name: &str, text: &str) -> Result<Vec<SlimPod>, InputError> {
    parse_pods_slim_versioned(source_name, text).map(|(pods, _)| pods)
}

/// `parse_pods_slim`, with the Kubernetes version the input carries (see
/// [`ServerVersion`]): `predict` reads its gates from it. `predict` streams
/// its input (`input::stream`); this reads what it hands back whole.
pub fn parse_pods_slim_versioned(
    source_name: &str,
    text: &str,
) -> Result<(Vec<SlimPod>, Option<ServerVersion>), InputError> {
    if let Some((pods, prefix)) = typed_slim_pod_list(text) {
        if pods.iter().all(|p| !p.name.is_empty()) {
            super::stream::check_unique(source_name, &pods, |i| format!("{prefix}[{i}]"))?;
            if pods.is_empty() {
                return Err(no_pods(source_name, text));
            }
            return Ok((pods, None));
        }
    }
    // the general path, whose errors name the item and field; each whole
    // pod made slim as it is taken
    let none: Option<(Vec<k8s_openapi::api::core::v1::Pod>, &str)> = None;
    checked_pods(source_name, text, none, |p| SlimPod::from_pod(&p))
}

/// A JSON array of pods decoded one at a time, each made slim at once.
pub(super) struct SlimPods(Vec<SlimPod>);

impl<'de> serde::Deserialize<'de> for SlimPods {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = SlimPods;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of pods")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<SlimPods, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(pod) = seq.next_element::<k8s_openapi::api::core::v1::Pod>()? {
                    out.push(SlimPod::from_pod(&pod));
                }
                Ok(SlimPods(out))
            }
        }
        d.deserialize_seq(Visit)
    }
}

/// [`typed_pod_list`], making each pod slim as it is decoded.
pub(super) fn typed_slim_pod_list(text: &str) -> Option<(Vec<SlimPod>, &'static str)> {
    #[derive(serde::Deserialize)]
    struct Items {
        kind: Option<String>,
        items: Option<SlimPods>,
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        return serde_json::from_str::<SlimPods>(text)
            .ok()
            .map(|p| (p.0, ""));
    }
    if !trimmed.starts_with('{') {
        return None;
    }
    let list: Items = serde_json::from_str(text).ok()?;
    let kind = list.kind.unwrap_or_default();
    let is_list = kind.ends_with("List") || (kind.is_empty() && list.items.is_some());
    if is_list {
        list.items.map(|p| (p.0, "items"))
    } else {
        None
    }
}

/// [`InputError::NoPods`]'s detail for a List or an array without items.
pub const EMPTY_LIST: &str = "the list is empty";

/// The error for an input without pods, saying what it held.
pub(super) fn no_pods(source_name: &str, text: &str) -> InputError {
    let detail = if text.trim().is_empty() {
        "the input is empty"
    } else if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || l.trim() == "---")
    {
        "the input holds only comments"
    } else if text.trim_start().starts_with(['[', '{']) || super::stream::is_one_block_mapping(text)
    {
        EMPTY_LIST
    } else {
        "the input holds no object"
    };
    InputError::NoPods {
        source_name: source_name.to_string(),
        detail: detail.to_string(),
    }
}

/// The typed decode of a JSON List or array of pods, with the location
/// prefix of its items (`items` or empty).
pub(super) fn typed_pod_list(
    text: &str,
) -> Option<(Vec<k8s_openapi::api::core::v1::Pod>, &'static str)> {
    use k8s_openapi::api::core::v1::Pod;
    #[derive(serde::Deserialize)]
    struct Items {
        kind: Option<String>,
        items: Option<Vec<Pod>>,
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        return serde_json::from_str::<Vec<Pod>>(text).ok().map(|p| (p, ""));
    }
    if !trimmed.starts_with('{') {
        return None;
    }
    let list: Items = serde_json::from_str(text).ok()?;
    // the same test `flatten` applies to decide that an object is a list
    let kind = list.kind.unwrap_or_default();
    let is_list = kind.ends_with("List") || (kind.is_empty() && list.items.is_some());
    if is_list {
        list.items.map(|p| (p, "items"))
    } else {
        None
    }
}
