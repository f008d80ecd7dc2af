//! The hook's wire format: the request (parsed and validated here, pure) and
//! the answer.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::plan::{Mismatch, Verdict};

/// Kind of workload the caller is about to scale in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum WorkloadKind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` ReplicaSet.
    ReplicaSet,
}

impl WorkloadKind {
    /// The plural resource name, as RBAC and SubjectAccessReviews spell it.
    pub fn resource(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "deployments",
            WorkloadKind::ReplicaSet => "replicasets",
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::ReplicaSet => "ReplicaSet",
        })
    }
}

/// A workload by kind and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Workload {
    /// Deployment or ReplicaSet.
    pub kind: WorkloadKind,
    /// Object name.
    pub name: String,
}

/// A validated `POST /v1/prescale` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrescaleRequest {
    /// Namespace of the workload.
    pub namespace: String,
    /// The workload about to scale in.
    pub workload: Workload,
    /// Target replica count.
    pub replicas: i32,
    /// Also set the scale subresource and report which pods were deleted.
    pub scale: bool,
    /// Time budget of the whole request.
    pub timeout: Duration,
}

impl PrescaleRequest {
    /// The workload, as the engine names one.
    pub fn workload_ref(&self) -> crate::engine::WorkloadRef {
        crate::engine::WorkloadRef {
            namespace: self.namespace.clone(),
            kind: match self.workload.kind {
                WorkloadKind::Deployment => crate::policy::TargetKind::Deployment,
                WorkloadKind::ReplicaSet => crate::policy::TargetKind::ReplicaSet,
            },
            name: self.workload.name.clone(),
        }
    }

    /// `Deployment shop/web`.
    pub fn target(&self) -> String {
        format!(
            "{} {}/{}",
            self.workload.kind, self.namespace, self.workload.name
        )
    }
}

/// Bounds on request fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Timeout when the request names none.
    pub default_timeout: Duration,
    /// Largest timeout a caller may ask for.
    pub max_timeout: Duration,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawRequest {
    namespace: String,
    workload: RawWorkload,
    replicas: i64,
    #[serde(default)]
    scale: bool,
    #[serde(default)]
    timeout_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    kind: String,
    name: String,
}

/// DNS-1123 label: what a namespace name must be.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// DNS-1123 subdomain: what Deployment and ReplicaSet names must be.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Parses and validates a request body. The error names the field.
pub fn parse_request(body: &[u8], limits: &Limits) -> Result<PrescaleRequest, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err("request body is empty; expected a JSON object with namespace, workload {kind, name} and replicas".into());
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let raw: RawRequest = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            format!("request body: {}", e.inner())
        } else {
            format!("request body at `{path}`: {}", e.inner())
        }
    })?;
    de.end()
        .map_err(|e| format!("request body: trailing data after the JSON object: {e}"))?;

    if !is_dns_label(&raw.namespace) {
        return Err(format!(
            "`namespace`: {:?} is not a valid namespace name (lowercase letters, digits and '-', at most 63)",
            raw.namespace
        ));
    }
    let kind = match raw.workload.kind.as_str() {
        "Deployment" => WorkloadKind::Deployment,
        "ReplicaSet" => WorkloadKind::ReplicaSet,
        other => {
            return Err(format!(
                "`workload.kind`: {other:?} is not supported; use \"Deployment\" or \"ReplicaSet\""
            ))
        }
    };
    if !is_dns_subdomain(&raw.workload.name) {
        return Err(format!(
            "`workload.name`: {:?} is not a valid object name",
            raw.workload.name
        ));
    }
    let replicas = i32::try_from(raw.replicas)
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| {
            format!(
                "`replicas`: {} is not a replica count (0 to {})",
                raw.replicas,
                i32::MAX
            )
        })?;
    let timeout = match raw.timeout_seconds {
        None => limits.default_timeout,
        Some(0) => return Err("`timeoutSeconds`: must be at least 1".into()),
        Some(s) if Duration::from_secs(s) > limits.max_timeout => {
            return Err(format!(
                "`timeoutSeconds`: {s} is above the limit of {}",
                limits.max_timeout.as_secs()
            ))
        }
        Some(s) => Duration::from_secs(s),
    };
    Ok(PrescaleRequest {
        namespace: raw.namespace,
        workload: Workload {
            kind,
            name: raw.workload.name,
        },
        replicas,
        scale: raw.scale,
        timeout,
    })
}

/// A pod the ReplicaSet controller is predicted to delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Victim {
    /// Pod name.
    pub pod: String,
    /// ReplicaSet it belongs to.
    pub replica_set: String,
    /// Cost the controller reads from the live pod.
    pub cost: i32,
    /// Cost the policy intends for it.
    pub intended_cost: i32,
    /// The marker label that put it first, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub marked: Option<String>,
}

/// The order check of one ReplicaSet of the workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSetAnswer {
    /// ReplicaSet name.
    pub name: String,
    /// Its predicted victims, first deleted first.
    pub victims: Vec<Victim>,
    /// Whether the controller's order is the intended one.
    pub verdict: Verdict,
    /// Where and why it differs.
    pub mismatches: Vec<Mismatch>,
    /// The victim cut falls between pods the controller treats as equal.
    pub tie_at_cut: bool,
}

/// What happened to the workload's patches.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchSummary {
    /// Patches the plan wanted (costs and releases).
    pub planned: usize,
    /// Patches that landed.
    pub applied: usize,
    /// Patches whose pod went away (nothing to do).
    pub gone: usize,
    /// Patches that did not land, with why.
    pub failed: Vec<FailedPatch>,
    /// Whether the pod cache showed every landed value before the order check.
    pub observed: bool,
    /// Seconds from submitting to seeing every value in the cache.
    pub observed_after_seconds: Option<f64>,
    /// Why nothing was written, when nothing was.
    pub held: Option<String>,
}

/// One patch that did not land.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailedPatch {
    /// Pod name.
    pub pod: String,
    /// Outcome reported by the patcher.
    pub error: String,
}

/// The `scale: true` part of an answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleAnswer {
    /// Whether the scale subresource was set.
    pub performed: bool,
    /// Why not, when it was not.
    pub skipped: Option<String>,
    /// Replicas the scale subresource was set to.
    pub replicas: i32,
    /// What the controller did compared with the prediction.
    pub comparison: Option<crate::engine::VictimComparison>,
}

/// The answer to a successful `POST /v1/prescale`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrescaleResponse {
    /// Namespace of the workload.
    pub namespace: String,
    /// The workload.
    pub workload: Workload,
    /// The policy managing it (namespace/name).
    pub policy: String,
    /// Replicas before (the scale subresource's `spec.replicas`).
    pub current_replicas: i32,
    /// Replicas asked for.
    pub target_replicas: i32,
    /// How many pods the scale-in removes.
    pub scale_down_by: usize,
    /// The operator runs with `--dry-run`: nothing was written.
    pub dry_run: bool,
    /// The workload's patches.
    pub patches: PatchSummary,
    /// Every predicted victim, ReplicaSet by ReplicaSet.
    pub victims: Vec<Victim>,
    /// The overall verdict (the worst of the ReplicaSets').
    pub verdict: Verdict,
    /// Per ReplicaSet order check.
    pub replica_sets: Vec<ReplicaSetAnswer>,
    /// With `scale: true`: what was set and what the controller deleted.
    pub scale: Option<ScaleAnswer>,
    /// Things the caller should know.
    pub warnings: Vec<String>,
}

/// The worst verdict of several (no ReplicaSet: as intended).
pub fn overall_verdict(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
    verdicts
        .into_iter()
        .fold(Verdict::AsIntended, |acc, v| match (acc, v) {
            (Verdict::NotAsIntended, _) | (_, Verdict::NotAsIntended) => Verdict::NotAsIntended,
            (Verdict::Ambiguous, _) | (_, Verdict::Ambiguous) => Verdict::Ambiguous,
            _ => Verdict::AsIntended,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        default_timeout: Duration::from_secs(30),
        max_timeout: Duration::from_secs(300),
    };

    fn parse(s: &str) -> Result<PrescaleRequest, String> {
        parse_request(s.as_bytes(), &LIMITS)
    }

    #[test]
    fn a_full_request_parses() {
        let r = parse(r#"{"namespace":"shop","workload":{"kind":"ReplicaSet","name":"web-7d9f"},"replicas":3,"scale":true,"timeoutSeconds":12}"#).unwrap();
        assert_eq!(r.namespace, "shop");
        assert_eq!(r.workload.kind, WorkloadKind::ReplicaSet);
        assert_eq!(r.workload.name, "web-7d9f");
        assert_eq!(r.replicas, 3);
        assert!(r.scale);
        assert_eq!(r.timeout, Duration::from_secs(12));
        assert_eq!(r.target(), "ReplicaSet shop/web-7d9f");
    }

    #[test]
    fn defaults_apply_to_optional_fields() {
        let r = parse(
            r#"{"namespace":"shop","workload":{"kind":"Deployment","name":"web"},"replicas":0}"#,
        )
        .unwrap();
        assert!(!r.scale);
        assert_eq!(r.timeout, LIMITS.default_timeout);
        assert_eq!(r.workload.kind.resource(), "deployments");
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("", "empty"),
            ("{", "request body"),
            ("[]", "request body"),
            (
                r#"{"namespace":"shop","workload":{"kind":"Deployment","name":"web"}}"#,
                "replicas",
            ),
            (
                r#"{"namespace":"shop","workload":{"kind":"Deployment","name":"web"},"replicas":2,"extra":1}"#,
                "extra",
            ),
            (
                r#"{"namespace":"shop","workload":{"kind":"Deployment","name":"web","apiVersion":"apps/v1"},"replicas":2}"#,
                "workload",
            ),
            (
                r#"{"namespace":"shop","workload":{"kind":"StatefulSet","name":"web"},"replicas":2}"#,
                "`workload.kind`",
            ),
            (
                r#"{"namespace":"Shop","workload":{"kind":"Deployment","name":"web"},"replicas":2}"#,
                "`namespace`",
            ),
            (
                r#"{"namespace":"shop","workload":{"kind":"Deployment","name":"we b"},"replicas":2}"#,
                "`workload.name`",
            ),
            (
                r#"{"namespace":"shop","workload":{"kind":"Deployment","name":"web"},"replicas":-1}"#,
                "`replicas`",
            ),
            (
                r#"{"namespace":"shop","workload":{"kind":"Deployment","name":"web"},"replicas":4294967296}"#,
                "`replicas`",
            ),
            (
                r#"{"namespace":"shop","workload":{"kind":"Deployment","name":"web"},"replicas":"3"}"#,
                "`replicas`",
            ),
            (
                r#"{"namespace":"shop","workload":{"kind":"Deployment","name":"web"},"replicas":3,"timeoutSeconds":0}"#,
                "`timeoutSeconds`",
            ),
            (
                r#"{"namespace":"shop","workload":{"kind":"Deployment","name":"web"},"replicas":3,"timeoutSeconds":301}"#,
                "`timeoutSeconds`",
            ),
            (
                r#"{"namespace":"shop","workload":{"kind":"Deployment","name":"web"},"replicas":3} {}"#,
                "trailing",
            ),
        ];
        for (body, needle) in cases {
            let err = parse(body).expect_err(body);
            assert!(err.contains(needle), "{body}: {err}");
        }
    }

    #[test]
    fn the_worst_verdict_wins() {
        use Verdict::*;
        assert_eq!(overall_verdict([]), AsIntended);
        assert_eq!(overall_verdict([AsIntended, Ambiguous]), Ambiguous);
        assert_eq!(
            overall_verdict([Ambiguous, NotAsIntended, AsIntended]),
            NotAsIntended
        );
    }
}
