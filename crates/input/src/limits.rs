//! Kubernetes' own limits on names, label values and annotations: an object
//! past them is one no API server would serve, refused naming the item.

use serde_json::Value;

use super::{shortened, InputError, RawObject};

/// Kubernetes' limit on an object's name (a DNS subdomain), and on the
/// names that point at objects (`spec.nodeName`, an ownerReference's name).
pub const MAX_NAME_BYTES: usize = 253;
/// Kubernetes' limit on a namespace's name (a DNS label), a label's value
/// and a label key's name part.
pub const MAX_LABEL_BYTES: usize = 63;
/// Kubernetes' limit on an object's annotations, keys and values together
/// (`TotalAnnotationSizeLimitB`).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 << 10;

/// What in `metadata` (and a Pod's `spec.nodeName`) breaks a limit the API
/// server enforces on every object it stores, so no object it serves breaks
/// it: `(field, what is wrong)`, or `None`. Reading on would only spend
/// memory on what no cluster holds (a 50 MB name took 680 MB to plan).
pub fn metadata_over_limits(value: &Value) -> Option<(String, String)> {
    let over =
        |len: usize, max: usize| format!("{len} bytes long; Kubernetes allows at most {max}");
    let meta = value.get("metadata");
    let text = |v: Option<&Value>, key: &str| {
        v.and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .map(str::len)
    };
    for (field, len, max) in [
        ("metadata.name", text(meta, "name"), MAX_NAME_BYTES),
        (
            "metadata.namespace",
            text(meta, "namespace"),
            MAX_LABEL_BYTES,
        ),
        (
            "spec.nodeName",
            text(value.get("spec"), "nodeName"),
            MAX_NAME_BYTES,
        ),
    ] {
        if let Some(len) = len.filter(|&l| l > max) {
            return Some((field.to_string(), over(len, max)));
        }
    }
    if let Some(Value::Array(owners)) = meta.and_then(|m| m.get("ownerReferences")) {
        for (i, o) in owners.iter().enumerate() {
            if let Some(len) = text(Some(o), "name").filter(|&l| l > MAX_NAME_BYTES) {
                return Some((
                    format!("metadata.ownerReferences[{i}].name"),
                    over(len, MAX_NAME_BYTES),
                ));
            }
        }
    }
    if let Some(Value::Object(labels)) = meta.and_then(|m| m.get("labels")) {
        for (key, v) in labels {
            if let Some(problem) = label_over_limits(key, v.as_str().map_or(0, str::len)) {
                return Some((format!("metadata.labels[{:?}]", shortened(key)), problem));
            }
        }
    }
    if let Some(Value::Object(annotations)) = meta.and_then(|m| m.get("annotations")) {
        let total: usize = annotations
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if total > MAX_ANNOTATIONS_BYTES {
            return Some((
                "metadata.annotations".to_string(),
                format!(
                    "keys and values together are {total} bytes; Kubernetes allows at most \
                     {MAX_ANNOTATIONS_BYTES} (256 KiB)"
                ),
            ));
        }
    }
    None
}

/// What is wrong with a label of key `key` and a value `value_len` bytes
/// long, or `None`: a value of at most 63 bytes, a key whose name part
/// (after an optional `prefix/`) has at most 63 and whose prefix at most 253.
pub fn label_over_limits(key: &str, value_len: usize) -> Option<String> {
    let over = |what: &str, len: usize, max: usize| {
        format!("{what} is {len} bytes long; Kubernetes allows at most {max}")
    };
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    if value_len > MAX_LABEL_BYTES {
        Some(over("the value", value_len, MAX_LABEL_BYTES))
    } else if name.len() > MAX_LABEL_BYTES {
        Some(over("the key's name part", name.len(), MAX_LABEL_BYTES))
    } else if prefix.len() > MAX_NAME_BYTES {
        Some(over("the key's prefix", prefix.len(), MAX_NAME_BYTES))
    } else {
        None
    }
}

/// Whether a decoded object's metadata (and a Pod's `spec.nodeName`) keeps
/// within Kubernetes' limits on names and labels. The fast readers check
/// this (annotations they do not keep: an item longer than
/// [`MAX_ANNOTATIONS_BYTES`] goes to the general path), and leave an object
/// that does not to the general path, whose [`check_object_limits`] names
/// the field.
pub fn record_within_limits(pod: &crate::pod::PodRecord, node_name: Option<&str>) -> bool {
    let short = |s: Option<&str>, max: usize| s.is_none_or(|s| s.len() <= max);
    let meta = &pod.identity;
    short(meta.name.as_deref(), MAX_NAME_BYTES)
        && short(meta.namespace.as_deref(), MAX_LABEL_BYTES)
        && short(node_name, MAX_NAME_BYTES)
        && pod
            .owner_references()
            .into_iter()
            .flatten()
            .all(|o| o.name.len() <= MAX_NAME_BYTES)
        && pod
            .labels()
            .into_iter()
            .flatten()
            .all(|(k, v)| label_over_limits(k, v.len()).is_none())
}

/// [`metadata_over_limits`] as the error naming the item and the field.
pub fn check_object_limits(o: &RawObject) -> Result<(), InputError> {
    match metadata_over_limits(&o.value) {
        None => Ok(()),
        Some((field, problem)) => {
            let kind = if o.kind.is_empty() { "object" } else { &o.kind };
            Err(InputError::Shape {
                source_name: o.source_name.clone(),
                location: format!("{} ({kind} {:?})", o.location, shortened(&o.name())),
                message: format!(
                    "{field}: {problem}: the API server stores no such object; refused"
                ),
            })
        }
    }
}

/// A Pod must have `metadata.name`; an object with no kind and no name is
/// not taken for a Pod at all.
pub fn check_pod_name(o: &RawObject) -> Result<(), InputError> {
    if !o.name().is_empty() {
        return Ok(());
    }
    let message = if o.kind.is_empty() {
        let fields: Vec<&str> = o
            .value
            .as_object()
            .map(|m| m.keys().map(String::as_str).take(4).collect())
            .unwrap_or_default();
        let found = if fields.is_empty() {
            "an empty object".to_string()
        } else {
            format!("fields {}", fields.join(", "))
        };
        format!("not a Pod: no kind and no metadata.name (found {found})")
    } else {
        "Pod without metadata.name".to_string()
    };
    Err(InputError::Shape {
        source_name: o.source_name.clone(),
        location: o.location.clone(),
        message,
    })
}
