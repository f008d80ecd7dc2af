//! What one write is: the request the planner hands over and the pure
//! function that turns it into a metadata-only JSON merge patch.

use std::fmt;

use serde_json::{json, Map, Value};

use crate::annotations::{POD_DELETION_COST, POLICY_ANNOTATION};

/// The pod a patch writes, by namespace and name (the unit the queue
/// coalesces on).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
}

impl PodRef {
    /// A reference from namespace and name.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        PodRef {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A policy, as `namespace/policy-name`: the unit of per-policy rate limits
/// and of fair sharing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyKey {
    /// The policy's namespace.
    pub namespace: String,
    /// The policy's name.
    pub name: String,
}

impl PolicyKey {
    /// A key from namespace and policy name.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        PolicyKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for PolicyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One desired state of one pod's cost annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchRequest {
    /// The pod to patch.
    pub pod: PodRef,
    /// The pod's UID when known: sent as a precondition so a cost meant for
    /// a deleted pod never lands on a new pod that reuses its name.
    pub uid: Option<String>,
    /// The policy this write belongs to (rate limit and fair share).
    pub policy: PolicyKey,
    /// The cost to set; `None` removes the cost and ownership annotations.
    pub cost: Option<i32>,
}

impl PatchRequest {
    /// A request to set `cost` on a pod of `policy` (same namespace as the pod).
    pub fn set(pod: PodRef, policy_name: impl Into<String>, cost: i32) -> Self {
        let policy = PolicyKey::new(pod.namespace.clone(), policy_name);
        PatchRequest {
            pod,
            uid: None,
            policy,
            cost: Some(cost),
        }
    }

    /// A request to remove this operator's annotations from a pod of `policy`.
    pub fn remove(pod: PodRef, policy_name: impl Into<String>) -> Self {
        let policy = PolicyKey::new(pod.namespace.clone(), policy_name);
        PatchRequest {
            pod,
            uid: None,
            policy,
            cost: None,
        }
    }

    /// The same request with a UID precondition.
    pub fn with_uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = Some(uid.into());
        self
    }

    /// The merge patch body for this request (see [`patch_body`]).
    pub fn body(&self) -> Value {
        patch_body(self)
    }
}

/// The metadata-only JSON merge patch for `req`.
///
/// Setting writes the cost as a decimal string (annotations are strings and
/// upstream parses them as base-10 int32) plus the ownership annotation;
/// removal sets both to `null`, which deletes them in a merge patch. A known
/// UID goes in `metadata.uid`: when the pod was replaced the merged UID
/// differs from the live one and the API server refuses the patch (422,
/// `metadata.uid` immutable).
pub fn patch_body(req: &PatchRequest) -> Value {
    let mut annotations = Map::new();
    match req.cost {
        Some(cost) => {
            annotations.insert(POD_DELETION_COST.to_owned(), json!(cost.to_string()));
            annotations.insert(POLICY_ANNOTATION.to_owned(), json!(req.policy.name));
        }
        None => {
            annotations.insert(POD_DELETION_COST.to_owned(), Value::Null);
            annotations.insert(POLICY_ANNOTATION.to_owned(), Value::Null);
        }
    }
    let mut metadata = Map::new();
    metadata.insert("annotations".to_owned(), Value::Object(annotations));
    if let Some(uid) = &req.uid {
        metadata.insert("uid".to_owned(), json!(uid));
    }
    json!({ "metadata": Value::Object(metadata) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use deletion_cost_core::comparator::parse_deletion_cost;

    #[test]
    fn set_writes_cost_string_and_owner() {
        let req = PatchRequest::set(PodRef::new("shop", "web-1"), "web", -42);
        let body = patch_body(&req);
        assert_eq!(
            body,
            json!({"metadata": {"annotations": {
                "controller.kubernetes.io/pod-deletion-cost": "-42",
                "deletioncost.dev/policy": "web",
            }}})
        );
        assert_eq!(req.policy, PolicyKey::new("shop", "web"));
    }

    #[test]
    fn written_cost_parses_back_as_upstream_parses_it() {
        for cost in [i32::MIN, -1, 0, 1, 500, i32::MAX] {
            let body = patch_body(&PatchRequest::set(PodRef::new("a", "p"), "pol", cost));
            let raw = body["metadata"]["annotations"][POD_DELETION_COST]
                .as_str()
                .unwrap();
            let parsed = parse_deletion_cost(raw);
            assert_eq!(parsed.value, cost);
            assert_eq!(parsed.problem, None);
        }
    }

    #[test]
    fn remove_nulls_both_annotations() {
        let req = PatchRequest::remove(PodRef::new("shop", "web-1"), "web");
        let body = patch_body(&req);
        let annotations = body["metadata"]["annotations"].as_object().unwrap();
        assert_eq!(annotations.len(), 2);
        assert!(annotations[POD_DELETION_COST].is_null());
        assert!(annotations[POLICY_ANNOTATION].is_null());
    }

    #[test]
    fn uid_is_sent_as_precondition_and_only_metadata_is_touched() {
        let req = PatchRequest::set(PodRef::new("shop", "web-1"), "web", 7).with_uid("u-1");
        let body = patch_body(&req);
        assert_eq!(body["metadata"]["uid"], json!("u-1"));
        let top: Vec<_> = body.as_object().unwrap().keys().collect();
        assert_eq!(top, vec!["metadata"]);
        let meta: Vec<_> = body["metadata"].as_object().unwrap().keys().collect();
        assert_eq!(meta, vec!["annotations", "uid"]);
    }
}
