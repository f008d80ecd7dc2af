//! The Kubernetes version an input carries (what `kubectl version -o json`
//! prints, added to a snapshot): the comparator's gates follow it.

use crate::comparator::KubeVersion;
use serde_json::Value;

use super::{item_label, InputError, RawObject};

/// The Kubernetes version an input carries: what `kubectl version -o
/// json|yaml` prints (its `serverVersion`), or the API server's own answer
/// (`kubectl get --raw /version`), as one more document, array item or file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    /// `major.minor`.
    pub version: KubeVersion,
    /// `gitVersion` as written (`v1.36.2`), or `major.minor` without one.
    pub git_version: String,
    /// Where it was read: `snapshot.yaml: document 1`.
    pub at: String,
}

/// Keys of the objects [`server_version`] reads: `kubectl version` output
/// (`clientVersion`, `serverVersion`) or a `/version` body (`gitVersion`).
pub(super) const VERSION_KEYS: [&str; 3] = ["serverVersion", "clientVersion", "gitVersion"];

/// Whether `o` is a version rather than a Kubernetes object: no `kind`, and
/// one of `serverVersion`, `clientVersion`, `gitVersion` at its top.
pub fn is_version_object(o: &RawObject) -> bool {
    o.kind.is_empty()
        && o.value
            .as_object()
            .is_some_and(|m| VERSION_KEYS.iter().any(|k| m.contains_key(*k)))
}

/// Reads one version object (see [`is_version_object`]).
pub(super) fn version_of(o: &RawObject) -> Result<ServerVersion, InputError> {
    let shape = |message: String| InputError::Shape {
        source_name: o.source_name.clone(),
        location: o.location.clone(),
        message,
    };
    let (body, field) = match o.value.get("serverVersion") {
        Some(v) => (v, "serverVersion"),
        None if o.value.get("gitVersion").is_some() => (&o.value, "the version"),
        None => {
            return Err(shape(
                "`kubectl version` output without serverVersion (could kubectl reach the \
                 API server?); give the server's version, or pass --kubernetes-version"
                    .into(),
            ))
        }
    };
    let text = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or_default();
    let (major, minor, git) = (text("major"), text("minor"), text("gitVersion"));
    let version = KubeVersion::from_server(major, minor, git).map_err(|_| {
        shape(format!(
            "{field} is not a Kubernetes version: expected gitVersion such as \"v1.36.2\", or \
             major and minor strings (found {})",
            serde_json::to_string(body).unwrap_or_default()
        ))
    })?;
    Ok(ServerVersion {
        version,
        git_version: if git.is_empty() {
            version.to_string()
        } else {
            git.to_string()
        },
        at: item_label(&o.source_name, &o.location),
    })
}

/// The version carried by `objects`, if any (see [`is_version_object`]).
/// Several are fine when they name the same `major.minor`; two that differ
/// are an error naming both.
pub fn server_version(objects: &[RawObject]) -> Result<Option<ServerVersion>, InputError> {
    let mut found: Option<ServerVersion> = None;
    for o in objects.iter().filter(|o| is_version_object(o)) {
        found = merge_versions(found, Some(version_of(o)?))?;
    }
    Ok(found)
}

/// Takes a version object into what an input carries so far: merged into
/// `version`, or, on a malformed or differing one, the first error kept in
/// `error` (later version objects are then passed over).
pub(crate) fn note_version(
    o: &RawObject,
    version: &mut Option<ServerVersion>,
    error: &mut Option<InputError>,
) {
    if error.is_some() {
        return;
    }
    match version_of(o).and_then(|v| merge_versions(version.take(), Some(v))) {
        Ok(v) => *version = v,
        Err(e) => *error = Some(e),
    }
}

/// One version out of two inputs' (`None` for neither); two that differ in
/// `major.minor` are an error naming both.
pub fn merge_versions(
    a: Option<ServerVersion>,
    b: Option<ServerVersion>,
) -> Result<Option<ServerVersion>, InputError> {
    match (a, b) {
        (Some(a), Some(b)) if a.version != b.version => Err(InputError::Versions {
            first: format!("{} ({})", a.at, a.git_version),
            second: format!("{} ({})", b.at, b.git_version),
        }),
        (Some(a), _) => Ok(Some(a)),
        (None, b) => Ok(b),
    }
}
