//! The scale-in admission webhook, `POST /v1/admit-scale-in`: the API server
//! calls it when a Deployment or ReplicaSet (or its `scale` subresource) is
//! updated to fewer replicas, whoever does it (the HPA, KEDA, `kubectl
//! scale`, a GitOps sync). Before it answers, the engine makes the scale-in
//! exact ([`crate::engine::Engine::scale_in`]: fresh signals, the fewest
//! cost writes that put the policy's pods first, the wait until the cache
//! shows them), within a budget under the webhook's timeout. It never
//! mutates and never denies: it allows, with a warning (the API server
//! hands it to the client) when the costs could not be made fresh, and the
//! predicted victims in the answer's `auditAnnotations` and in an Event
//! (`ScaleInVictims`) on the workload.

use std::collections::HashMap;

use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use tokio::time::Instant;

use super::handler::HookState;
use crate::engine::{FreshBy, ScaleInCall, WorkloadRef};
use crate::policy::TargetKind;

/// A replica count going down, as the webhook reads it from the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleIn {
    /// The workload.
    pub workload: WorkloadRef,
    /// Replicas before the update.
    pub from: i32,
    /// Replicas after it.
    pub to: i32,
}

/// The scale-in an admission request makes, if any: an UPDATE of an `apps`
/// Deployment or ReplicaSet (or its `scale` subresource) whose
/// `spec.replicas` goes down.
pub fn scale_in_of(req: &AdmissionRequest<DynamicObject>) -> Option<ScaleIn> {
    if req.operation != Operation::Update || req.resource.group != "apps" {
        return None;
    }
    let kind = match req.resource.resource.as_str() {
        "deployments" => TargetKind::Deployment,
        "replicasets" => TargetKind::ReplicaSet,
        _ => return None,
    };
    if !matches!(req.sub_resource.as_deref(), None | Some("") | Some("scale")) {
        return None;
    }
    let replicas = |o: &Option<DynamicObject>| {
        o.as_ref()?
            .data
            .get("spec")?
            .get("replicas")?
            .as_i64()
            .and_then(|r| i32::try_from(r).ok())
    };
    let (from, to) = (replicas(&req.old_object)?, replicas(&req.object)?);
    (to < from).then(|| ScaleIn {
        workload: WorkloadRef {
            namespace: req.namespace.clone().unwrap_or_default(),
            kind,
            name: req.name.clone(),
        },
        from,
        to,
    })
}

/// Answers one AdmissionReview (its JSON body): always an allowing answer
/// when the review can be read.
pub(crate) async fn admit(st: &HookState, body: &[u8]) -> AdmissionReview<DynamicObject> {
    let started = Instant::now();
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            return AdmissionResponse::invalid(format!("not an AdmissionReview: {e}")).into_review()
        }
    };
    let req: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => return AdmissionResponse::invalid(e.to_string()).into_review(),
    };
    let mut resp = AdmissionResponse::from(&req);
    let Some(scale) = scale_in_of(&req) else {
        // the API server's match conditions let only scale-ins through
        st.engine
            .metrics()
            .scale_webhook_call("not_scale_in", started.elapsed().as_secs_f64());
        return resp.into_review();
    };
    if req.dry_run {
        st.engine
            .metrics()
            .scale_webhook_call("dry_run", started.elapsed().as_secs_f64());
        return resp.into_review();
    }
    let call = ScaleInCall {
        workload: scale.workload.clone(),
        uid: req.object.as_ref().and_then(|o| o.metadata.uid.clone()),
        from: scale.from,
        to: scale.to,
        caller: FreshBy::Webhook,
        // the Deployment controller's ReplicaSet update follows a Deployment
        // update the webhook was called for already: one scale-in, not two
        follow_up: req.user_info.username.as_deref() == Some(DEPLOYMENT_CONTROLLER),
        deadline: started + st.config.webhook_budget,
        settle_cap: st.config.settle_delay,
    };
    let answer = st.engine.scale_in(&call).await;
    let took = started.elapsed();
    let warning = answer.outcome.warning();
    let mut audit = HashMap::new();
    if let Some(policy) = answer.policy() {
        audit.insert("policy".to_string(), policy);
        audit.insert("victims".to_string(), answer.victims_list());
    }
    st.engine
        .metrics()
        .scale_webhook_call(answer.label(), took.as_secs_f64());
    tracing::info!(
        namespace = req.namespace.as_deref().unwrap_or(""),
        name = %req.name,
        resource = %req.resource.resource,
        sub_resource = req.sub_resource.as_deref().unwrap_or(""),
        from = scale.from,
        to = scale.to,
        outcome = answer.label(),
        writes = answer.writes,
        landed = answer.landed,
        settle_millis = answer.settled.as_millis() as u64,
        victims = %answer.victims_list(),
        millis = took.as_millis() as u64,
        "scale-in admitted"
    );
    if let Some(w) = warning {
        resp.warnings = Some(vec![w]);
    }
    resp.audit_annotations = audit;
    resp.into_review()
}

/// The Deployment controller's user: its ReplicaSet updates follow a
/// Deployment update the webhook was called for already.
const DEPLOYMENT_CONTROLLER: &str = "system:serviceaccount:kube-system:deployment-controller";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(
        resource: &str,
        sub: Option<&str>,
        old: i64,
        new: i64,
    ) -> AdmissionRequest<DynamicObject> {
        let object = |n: i64| {
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": n}})
        };
        let mut r = json!({
            "uid": "u1",
            "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "resource": {"group": "apps", "version": "v1", "resource": resource},
            "name": "web", "namespace": "shop", "operation": "UPDATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"},
            "object": object(new), "oldObject": object(old), "dryRun": false,
        });
        if let Some(s) = sub {
            r["subResource"] = json!(s);
        }
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": r,
        }))
        .unwrap();
        review.try_into().unwrap()
    }

    #[test]
    fn a_lower_replica_count_of_a_deployment_or_replica_set_is_a_scale_in() {
        let got = scale_in_of(&request("deployments", Some("scale"), 5, 3)).unwrap();
        assert_eq!(
            got,
            ScaleIn {
                workload: WorkloadRef {
                    namespace: "shop".into(),
                    kind: TargetKind::Deployment,
                    name: "web".into()
                },
                from: 5,
                to: 3
            }
        );
        let rs = scale_in_of(&request("replicasets", None, 2, 0)).unwrap();
        assert_eq!(rs.workload.kind, TargetKind::ReplicaSet);
    }

    #[test]
    fn scale_outs_other_resources_and_other_subresources_are_not() {
        assert_eq!(
            scale_in_of(&request("deployments", Some("scale"), 3, 3)),
            None
        );
        assert_eq!(scale_in_of(&request("deployments", None, 3, 5)), None);
        assert_eq!(
            scale_in_of(&request("statefulsets", Some("scale"), 5, 3)),
            None
        );
        assert_eq!(
            scale_in_of(&request("deployments", Some("status"), 5, 3)),
            None
        );
    }
}
