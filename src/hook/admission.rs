//! The scale-in admission webhook, `POST /v1/admit-scale-in`: the API server
//! calls it when a Deployment or ReplicaSet (or its `scale` subresource) is
//! updated to fewer replicas, whoever does it (the HPA, KEDA, `kubectl
//! scale`, a GitOps sync). Before it answers it runs the workload's round
//! (the hook's: fresh signals, its patches ahead of background work) and
//! waits until the pod cache shows them, within a budget under the webhook's
//! timeout. It never mutates and never denies: it allows, with warnings
//! (the API server hands them to the client) when the costs could not be made fresh, and the
//! predicted victims in the answer's `auditAnnotations` and in an Event
//! (`ScaleInVictims`) on the workload.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use kube::runtime::events::{Event, EventType};
use tokio::time::{timeout_at, Instant};

use super::handler::HookState;
use crate::engine::{Engine, FreshBy, Managed, ManagingError, Submission, WorkloadRef};
use crate::policy::TargetKind;
use crate::writes::{PatchRequest, WriteOutcome};

/// Signals read this recently are not read again: the second call of one
/// scale-in (the Deployment, then the ReplicaSet its controller resizes)
/// and a hook call's own scale update cost no second query.
const SIGNALS_FRESH_FOR: Duration = Duration::from_secs(5);

/// How often the pod cache is polled while waiting for the patches.
const POLL: Duration = Duration::from_millis(20);

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

/// What the webhook did before it allowed, as counted in the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Not a scale-in (the API server's match conditions let it through).
    NotScaleIn,
    /// A dry run: nothing written.
    DryRun,
    /// This replica does not lead.
    Follower,
    /// No policy manages the workload.
    NoPolicy,
    /// The costs are in place and the cache shows them.
    Fresh,
    /// Signals could not be read: nothing written.
    SignalsUnavailable,
    /// The planner failed (finding the workload's policy or planning it):
    /// nothing written.
    PlannerFailed,
    /// Some writes failed, or were held.
    WritesFailed,
    /// The budget ran out first.
    BudgetExceeded,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::NotScaleIn => "not_scale_in",
            Outcome::DryRun => "dry_run",
            Outcome::Follower => "follower",
            Outcome::NoPolicy => "no_policy",
            Outcome::Fresh => "fresh",
            Outcome::SignalsUnavailable => "signals_unavailable",
            Outcome::PlannerFailed => "planner_failed",
            Outcome::WritesFailed => "writes_failed",
            Outcome::BudgetExceeded => "budget_exceeded",
        }
    }
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
    let scale = scale_in_of(&req);
    // the Deployment controller's ReplicaSet update follows a Deployment
    // update the webhook was called for already: one scale-in, not two
    let follow_up = req.user_info.username.as_deref() == Some(DEPLOYMENT_CONTROLLER);
    let (outcome, warnings, audit) = match &scale {
        None => (Outcome::NotScaleIn, Vec::new(), HashMap::new()),
        Some(_) if req.dry_run => (Outcome::DryRun, Vec::new(), HashMap::new()),
        Some(scale) => {
            let deadline = started + st.config.webhook_budget;
            let settle = st.config.settle_delay;
            make_fresh(&st.engine, scale, deadline, settle, !follow_up).await
        }
    };
    let took = started.elapsed();
    if let (Some(scale), Some(victims)) = (&scale, audit.get("victims")) {
        // the Deployment's own call already said it for the ReplicaSet its
        // controller resizes
        if !follow_up {
            let uid = req.object.as_ref().and_then(|o| o.metadata.uid.clone());
            let event = victims_event(scale, outcome, victims, &warnings);
            let (recorder, reference) = (st.engine.leadership().events(), workload_ref(scale, uid));
            // after the answer: the scale-in does not wait for it
            tokio::spawn(async move {
                if let Err(e) = recorder.publish(&event, &reference).await {
                    tracing::debug!(error = %e, "the scale-in Event was not written");
                }
            });
        }
    }
    st.engine
        .metrics()
        .scale_webhook_call(outcome.label(), took.as_secs_f64());
    if outcome != Outcome::NotScaleIn {
        tracing::info!(
            namespace = req.namespace.as_deref().unwrap_or(""),
            name = %req.name,
            resource = %req.resource.resource,
            sub_resource = req.sub_resource.as_deref().unwrap_or(""),
            outcome = outcome.label(),
            millis = took.as_millis() as u64,
            "scale-in admitted"
        );
    }
    if !warnings.is_empty() {
        resp.warnings = Some(warnings);
    }
    resp.audit_annotations = audit;
    resp.into_review()
}

/// The Deployment controller's user: its ReplicaSet updates follow a
/// Deployment update the webhook was called for already.
const DEPLOYMENT_CONTROLLER: &str = "system:serviceaccount:kube-system:deployment-controller";

/// The Event that tells the workload's readers which pods this scale-in is
/// predicted to delete and whether their costs were fresh.
fn victims_event(scale: &ScaleIn, outcome: Outcome, victims: &str, warnings: &[String]) -> Event {
    let fresh = outcome == Outcome::Fresh;
    let mut note = format!(
        "scale-in {} -> {}: predicted victims {}",
        scale.from,
        scale.to,
        if victims.is_empty() {
            "(none)"
        } else {
            victims
        }
    );
    if !fresh {
        note.push_str(&format!(" ({})", warnings.join("; ")));
    }
    Event {
        type_: if fresh {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: "ScaleInVictims".into(),
        // the API server refuses notes over 1 kB
        note: Some(note.chars().take(1000).collect()),
        action: "AdmitScaleIn".into(),
        secondary: None,
    }
}

/// The scaled workload, as an Event's `regarding`.
fn workload_ref(scale: &ScaleIn, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps/v1".into()),
        kind: Some(
            match scale.workload.kind {
                TargetKind::Deployment => "Deployment",
                TargetKind::ReplicaSet => "ReplicaSet",
            }
            .into(),
        ),
        name: Some(scale.workload.name.clone()),
        namespace: Some(scale.workload.namespace.clone()),
        uid,
        ..Default::default()
    }
}

/// The workload's round and the wait for its costs, within `deadline`.
async fn make_fresh(
    engine: &Engine,
    scale: &ScaleIn,
    deadline: Instant,
    settle_delay: Duration,
    counted: bool,
) -> (Outcome, Vec<String>, HashMap<String, String>) {
    let warn = |what: &str| {
        vec![format!(
            "deletion-cost: {what}; the pods deleted may not be the ones the policy intends"
        )]
    };
    if !engine.leadership().is_leader() {
        return (
            Outcome::Follower,
            warn("reached a replica that does not lead, costs not refreshed"),
            HashMap::new(),
        );
    }
    let managed = match engine.managing(&scale.workload).await {
        Ok(m) => m,
        Err(ManagingError::NotManaged(_)) => {
            return (Outcome::NoPolicy, Vec::new(), HashMap::new())
        }
        Err(e) => return (Outcome::PlannerFailed, warn(&e.to_string()), HashMap::new()),
    };
    let by = usize::try_from(scale.from - scale.to).unwrap_or(0);
    let over_budget = |what: &str| {
        (
            Outcome::BudgetExceeded,
            warn(&format!(
                "costs not fresh within the webhook's budget ({what})"
            )),
            HashMap::new(),
        )
    };
    let round = match timeout_at(deadline, engine.prescale(&managed, by, SIGNALS_FRESH_FOR)).await {
        Err(_) => return over_budget("planning"),
        Ok(Err(e)) => return (Outcome::PlannerFailed, warn(&e.to_string()), HashMap::new()),
        Ok(Ok(r)) => r,
    };
    if let Some(problem) = &round.signals {
        return (
            Outcome::SignalsUnavailable,
            warn(&format!(
                "signals unavailable ({}), costs not refreshed",
                problem.reason
            )),
            HashMap::new(),
        );
    }
    let (batch, mut expected) = match round.submission {
        Ok(Submission::Sent { batch, landed }) => (Some(batch), landed),
        Ok(Submission::NothingToSend { landed }) => (None, landed),
        Ok(Submission::Held(hold)) => {
            return (
                Outcome::WritesFailed,
                warn(&hold.to_string()),
                HashMap::new(),
            )
        }
        Err(e) => return (Outcome::WritesFailed, warn(&e.to_string()), HashMap::new()),
    };
    let (mut failed, mut wrote) = (0, false);
    if let Some(batch) = batch {
        let Ok(report) = timeout_at(deadline, batch.wait()).await else {
            return over_budget("writing");
        };
        for (pod, outcome) in &report.outcomes {
            match outcome {
                WriteOutcome::Applied => {
                    wrote = true;
                    expected.extend(round.requests.iter().filter(|r| r.pod == *pod).cloned())
                }
                WriteOutcome::Gone => {}
                _ => failed += 1,
            }
        }
    }
    if !cache_shows_all(engine, &expected, deadline).await {
        return over_budget("waiting for the pod cache");
    }
    // Costs written just now reach the ReplicaSet controller's informer a
    // moment after ours (a cost 0.6 s old was ignored in k/k #126138): the
    // hook's settle delay, within the budget. Costs already in place need none.
    if wrote {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(settle_delay.min(left)).await;
    }
    // nothing to write (the second call of a scale-in, the hook's own scale
    // update): the round planned over the costs as they stay
    let planned = round.requests.is_empty().then_some(round.victims);
    let audit = victims(engine, &managed, by, deadline, planned).await;
    if failed > 0 {
        return (
            Outcome::WritesFailed,
            warn(&format!("{failed} cost write(s) failed")),
            audit,
        );
    }
    if counted {
        engine.note_scale_in(&managed, FreshBy::Webhook);
    }
    (Outcome::Fresh, Vec::new(), audit)
}

/// Waits until the pod cache shows every value in `expected`.
async fn cache_shows_all(engine: &Engine, expected: &[PatchRequest], deadline: Instant) -> bool {
    timeout_at(deadline, async {
        while !expected.iter().all(|r| engine.cache_shows(r)) {
            tokio::time::sleep(POLL).await;
        }
    })
    .await
    .is_ok()
}

/// The victims the order check predicts, for the audit log (keys are
/// prefixed with the webhook's name by the API server): `planned` when the
/// round already planned over the costs in place, else a plan made now.
async fn victims(
    engine: &Engine,
    managed: &Managed,
    by: usize,
    deadline: Instant,
    planned: Option<Vec<(String, Vec<Arc<str>>)>>,
) -> HashMap<String, String> {
    let mut audit = HashMap::from([("policy".to_string(), managed.resolved.key())]);
    let planned = match planned {
        Some(p) => Some(p),
        None => match timeout_at(deadline, engine.check(managed, by)).await {
            Ok(Ok(plan)) => Some(
                plan.replica_sets
                    .into_iter()
                    .map(|r| (r.name, r.victims))
                    .collect(),
            ),
            _ => None,
        },
    };
    if let Some(planned) = planned {
        let names: Vec<String> = planned
            .iter()
            .filter(|(rs, _)| managed.replica_sets.contains(rs))
            .flat_map(|(rs, v)| v.iter().map(move |v| format!("{rs}/{v}")))
            .collect();
        audit.insert("victims".into(), names.join(","));
    }
    audit
}

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
