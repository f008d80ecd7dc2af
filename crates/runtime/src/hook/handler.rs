//! The prescale flow: authenticate, validate, authorise, then refresh, patch
//! (urgent), wait until the pod cache shows the values, re-check the order,
//! and with `scale: true` scale and watch what the controller deletes.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::Semaphore;
use tokio::time::{timeout_at, Instant};

use super::api::{
    overall_verdict, parse_request, FailedPatch, Limits, PatchSummary, PrescaleRequest,
    PrescaleResponse, ReplicaSetAnswer, ScaleAnswer, Victim, WorkloadKind,
};
use super::auth;
use super::error::HookError;
use super::HookConfig;
use crate::engine::{Engine, FreshBy, Hold, Managed, ScaleInAnswer, ScaleInCall, ScaleInOutcome};
use crate::plan::Verdict;

/// Shared by every hook request.
pub(crate) struct HookState {
    /// The engine whose rounds the hook runs (shared with the reconcile).
    pub(crate) engine: Arc<Engine>,
    /// The API server (reviews, the Lease, the scale).
    client: Client,
    pub(crate) config: HookConfig,
    in_flight: Mutex<HashSet<String>>,
    slots: Arc<Semaphore>,
}

impl HookState {
    pub(crate) fn new(engine: Arc<Engine>, client: Client, config: HookConfig) -> Self {
        let slots = Arc::new(Semaphore::new(config.max_concurrent.max(1)));
        HookState {
            engine,
            client,
            config,
            in_flight: Mutex::new(HashSet::new()),
            slots,
        }
    }
}

/// Marks a workload as having a prescale in flight until dropped.
struct Claim<'a> {
    set: &'a Mutex<HashSet<String>>,
    key: String,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if let Ok(mut s) = self.set.lock() {
            s.remove(&self.key);
        }
    }
}

fn claim<'a>(st: &'a HookState, req: &PrescaleRequest) -> Result<Claim<'a>, HookError> {
    let key = req.target();
    let mut set = st
        .in_flight
        .lock()
        .map_err(|_| HookError::Internal("in-flight set poisoned".into()))?;
    if !set.insert(key.clone()) {
        return Err(HookError::Conflict(format!(
            "another prescale for {key} is in flight; retry when it has answered"
        )));
    }
    Ok(Claim {
        set: &st.in_flight,
        key,
    })
}

/// Reads the body, at most `limit` bytes, within `deadline`.
async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    deadline: Instant,
    seconds: u64,
) -> Result<Bytes, HookError> {
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(HookError::TooLarge { limit });
    }
    let read = Limited::new(body, limit).collect();
    match timeout_at(deadline, read).await {
        Err(_) => Err(HookError::SlowClient { seconds }),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(HookError::TooLarge { limit }),
        Ok(Err(e)) => Err(HookError::BadRequest(format!(
            "reading the request body: {e}"
        ))),
    }
}

/// The whole request: every failure is a [`HookError`].
pub(crate) async fn handle(
    st: &HookState,
    headers: &HeaderMap,
    body: Body,
) -> Result<PrescaleResponse, HookError> {
    let read_deadline = Instant::now() + st.config.read_timeout;
    let token = auth::bearer_token(headers)?;
    let bytes = read_body(
        headers,
        body,
        st.config.max_body_bytes,
        read_deadline,
        st.config.read_timeout.as_secs(),
    )
    .await?;
    let user = auth::authenticate(&st.client, token, &st.config.token_audiences).await?;
    let limits = Limits {
        default_timeout: st.config.default_timeout,
        max_timeout: st.config.max_timeout,
    };
    let req = parse_request(&bytes, &limits).map_err(HookError::BadRequest)?;
    auth::authorize(&st.client, &user, &req).await?;
    if !st.engine.leads() {
        return Err(HookError::NotLeader {
            leader: lease_holder(st).await,
        });
    }
    let _claim = claim(st, &req)?;
    let _permit = st
        .slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| HookError::Busy {
            limit: st.config.max_concurrent,
        })?;
    tracing::info!(
        workload = %req.target(),
        user = user.username.as_deref().unwrap_or("?"),
        replicas = req.replicas,
        scale = req.scale,
        "prescale"
    );
    let deadline = Instant::now() + req.timeout;
    prescale(st, &req, deadline).await
}

/// The lease holder's identity, when readable.
async fn lease_holder(st: &HookState) -> Option<String> {
    let lease = st.engine.leadership().lease();
    let api: Api<Lease> = Api::namespaced(st.client.clone(), &lease.namespace);
    match api.get_opt(&lease.name).await {
        Ok(lease) => lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()),
        Err(e) => {
            tracing::warn!(error = %auth::api_error(&e), "reading the leader lease");
            None
        }
    }
}

fn timeout(req: &PrescaleRequest, phase: &str) -> HookError {
    HookError::Timeout {
        seconds: req.timeout.as_secs(),
        phase: phase.into(),
    }
}

async fn get_scale(client: &Client, req: &PrescaleRequest) -> Result<Scale, HookError> {
    let (ns, name) = (&req.namespace, &req.workload.name);
    let got = match req.workload.kind {
        WorkloadKind::Deployment => {
            Api::<Deployment>::namespaced(client.clone(), ns)
                .get_scale(name)
                .await
        }
        WorkloadKind::ReplicaSet => {
            Api::<ReplicaSet>::namespaced(client.clone(), ns)
                .get_scale(name)
                .await
        }
    };
    got.map_err(|e| match e {
        kube::Error::Api(s) if s.code == 404 => {
            HookError::NotFound(format!("{} does not exist", req.target()))
        }
        other => HookError::Internal(format!(
            "reading the scale of {}: {}",
            req.target(),
            auth::api_error(&other)
        )),
    })
}

async fn replace_scale(
    client: &Client,
    req: &PrescaleRequest,
    scale: &Scale,
) -> Result<Scale, kube::Error> {
    let (ns, name, pp) = (&req.namespace, &req.workload.name, PostParams::default());
    match req.workload.kind {
        WorkloadKind::Deployment => {
            Api::<Deployment>::namespaced(client.clone(), ns)
                .replace_scale(name, &pp, scale)
                .await
        }
        WorkloadKind::ReplicaSet => {
            Api::<ReplicaSet>::namespaced(client.clone(), ns)
                .replace_scale(name, &pp, scale)
                .await
        }
    }
}

async fn prescale(
    st: &HookState,
    req: &PrescaleRequest,
    deadline: Instant,
) -> Result<PrescaleResponse, HookError> {
    let engine = &st.engine;
    let scale = timeout_at(deadline, get_scale(&st.client, req))
        .await
        .map_err(|_| timeout(req, "reading the workload's scale"))??;
    let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    if req.replicas > current {
        return Err(HookError::BadRequest(format!(
            "`replicas`: {} is above the current {current} of {}: not a scale-in",
            req.replicas,
            req.target()
        )));
    }
    let scale_down_by = usize::try_from(current - req.replicas).unwrap_or(0);

    // the engine makes the scale-in exact: fresh signals, the fewest writes
    // that put the policy's pods first, ahead of every other write, the wait
    // until the cache shows them and the settle
    let call = ScaleInCall {
        workload: req.workload_ref(),
        uid: scale.metadata.uid.clone(),
        from: current,
        to: req.replicas,
        caller: FreshBy::Hook,
        follow_up: false,
        deadline,
        settle_cap: st.config.settle_delay,
    };
    let answer = engine.scale_in(&call).await;
    let (managed, plan) = managed_and_plan(st, req, &answer).await?;
    let patches = patch_summary(&answer);
    if let Some(took) = answer.observed_after {
        engine
            .metrics()
            .hook_patch_observed
            .observe(took.as_secs_f64());
    }
    let replica_sets = replica_set_answers(&answer, &plan);
    let warnings = warnings(req, &answer, &plan, replica_sets.len());
    let victims: Vec<Victim> = replica_sets
        .iter()
        .flat_map(|r| r.victims.iter().cloned())
        .collect();
    let verdict = overall_verdict(replica_sets.iter().map(|r| r.verdict));

    let scale = match req.scale {
        true => {
            let moment = ScaleMoment {
                deadline,
                managed: &managed,
                scale_down_by,
            };
            Some(scale_in(st, req, &moment, &patches, &victims).await?)
        }
        false => None,
    };
    Ok(PrescaleResponse {
        namespace: req.namespace.clone(),
        workload: req.workload.clone(),
        policy: managed.resolved.key(),
        current_replicas: current,
        target_replicas: req.replicas,
        scale_down_by,
        dry_run: engine.dry_run(),
        patches,
        victims,
        verdict,
        replica_sets,
        scale,
        warnings,
    })
}

/// The workload's policy and plan from the engine's answer, or the error
/// the caller gets when the scale-in ended without them.
async fn managed_and_plan(
    st: &HookState,
    req: &PrescaleRequest,
    answer: &ScaleInAnswer,
) -> Result<(Managed, Arc<crate::plan::Plan>), HookError> {
    match (&answer.outcome, &answer.managed, &answer.plan) {
        (ScaleInOutcome::NoPolicy(e), _, _) => Err(HookError::NotFound(e.clone())),
        (ScaleInOutcome::NotLeader, _, _) | (ScaleInOutcome::Held(Hold::NotLeader), _, _) => {
            Err(HookError::NotLeader {
                leader: lease_holder(st).await,
            })
        }
        (ScaleInOutcome::PlannerFailed(e), _, _) => Err(HookError::Internal(e.clone())),
        (
            ScaleInOutcome::OverBudget {
                phase,
                missing,
                writes,
            },
            _,
            _,
        ) => Err(timeout(
            req,
            &format!("{phase}; {missing} of {writes} cost write(s) had not shown in the pod cache"),
        )),
        (_, Some(m), Some(p)) => Ok((m.clone(), p.clone())),
        (other, _, _) => Err(HookError::Internal(format!(
            "the scale-in ended without a plan ({})",
            other.label()
        ))),
    }
}

/// The plan's warnings, the outcome's, and one for a workload whose
/// scale-in the controller splits between `replica_sets` ReplicaSets.
fn warnings(
    req: &PrescaleRequest,
    answer: &ScaleInAnswer,
    plan: &crate::plan::Plan,
    replica_sets: usize,
) -> Vec<String> {
    let mut warnings = plan.warnings.clone();
    warnings.extend(answer.outcome.warning());
    if replica_sets > 1 {
        warnings.push(format!(
            "{} ReplicaSets of {} have pods (a rollout?): the controller splits the scale-in between them; victims are shown per ReplicaSet for the whole amount",
            replica_sets,
            req.target()
        ));
    }
    warnings
}

/// What became of the scale-in's writes.
fn patch_summary(answer: &ScaleInAnswer) -> PatchSummary {
    let held = match &answer.outcome {
        ScaleInOutcome::Held(Hold::DryRun) => Some(
            "the operator runs with --dry-run: nothing was written; victims are predicted on the pods as they are"
                .to_string(),
        ),
        ScaleInOutcome::Held(hold) => Some(hold.to_string()),
        _ => None,
    };
    let planned: usize = answer.corrections.iter().map(|c| c.writes.len()).sum();
    PatchSummary {
        planned,
        applied: answer.landed,
        gone: answer.gone,
        failed: answer
            .failed
            .iter()
            .map(|(pod, error)| FailedPatch {
                pod: pod.clone(),
                error: error.clone(),
            })
            .collect(),
        observed: held.is_none() || planned == 0,
        observed_after_seconds: answer.observed_after.map(|d| d.as_secs_f64()),
        held,
    }
}

/// Per ReplicaSet of the workload: the pods that go, with the cost the
/// controller reads once the writes landed and the one the policy intends,
/// and whether they are the policy's. The verdict speaks of the victims:
/// the rest of the order follows in the background.
fn replica_set_answers(answer: &ScaleInAnswer, plan: &crate::plan::Plan) -> Vec<ReplicaSetAnswer> {
    answer
        .corrections
        .iter()
        .map(|c| {
            let victims: Vec<Arc<str>> = answer
                .victims
                .iter()
                .find(|(rs, _)| *rs == c.replica_set)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let checked = plan.replica_sets.iter().find(|r| r.name == c.replica_set);
            let exact = answer.outcome == ScaleInOutcome::Fresh;
            let (verdict, mismatches) = match checked {
                _ if exact => (Verdict::AsIntended, Vec::new()),
                Some(r) => (
                    r.verdict,
                    r.mismatches
                        .iter()
                        .filter(|m| victims.iter().any(|v| **v == *m.pod))
                        .cloned()
                        .collect(),
                ),
                None => (Verdict::NotAsIntended, Vec::new()),
            };
            ReplicaSetAnswer {
                name: c.replica_set.clone(),
                victims: victims
                    .iter()
                    .map(|pod| {
                        let (cost, intended_cost) = c.costs_of(pod).unwrap_or((0, 0));
                        Victim {
                            pod: pod.to_string(),
                            replica_set: c.replica_set.clone(),
                            cost,
                            intended_cost,
                            marked: answer.marked_as(pod).map(str::to_string),
                        }
                    })
                    .collect(),
                verdict,
                mismatches,
                // a fresh correction may leave the cut in a tie the policy
                // accepts either way: the controller's list order picks then
                tie_at_cut: match exact {
                    true => c.tie_at_cut(),
                    false => checked.is_some_and(|r| r.tie_at_cut),
                },
            }
        })
        .collect()
}

/// Where a `scale: true` call stands once its costs landed.
struct ScaleMoment<'a> {
    /// When the answer is due.
    deadline: Instant,
    /// The workload and its policy.
    managed: &'a Managed,
    /// How many pods go.
    scale_down_by: usize,
}

/// `scale: true`: set the scale subresource, watch the deletions.
async fn scale_in(
    st: &HookState,
    req: &PrescaleRequest,
    moment: &ScaleMoment<'_>,
    patches: &PatchSummary,
    victims: &[Victim],
) -> Result<ScaleAnswer, HookError> {
    let engine = &st.engine;
    let skipped = |why: String| ScaleAnswer {
        performed: false,
        skipped: Some(why),
        replicas: req.replicas,
        comparison: None,
    };
    if let Some(held) = &patches.held {
        return Ok(skipped(format!("not scaled: {held}")));
    }
    if !patches.failed.is_empty() || !patches.observed {
        return Ok(skipped(format!(
            "not scaled: {} cost patch(es) did not land, the order would not be the intended one",
            patches.failed.len()
        )));
    }
    // the engine waited for the cache and settled already
    let before = engine.active_pods(moment.managed);
    timeout_at(moment.deadline, set_scale(&st.client, req))
        .await
        .map_err(|_| timeout(req, "setting the scale subresource"))??;
    tracing::info!(workload = %req.target(), replicas = req.replicas, "scaled");

    // From here on the scale is set: running out of time answers what was
    // seen so far (a 504 would make callers retry a scale that happened).
    let predicted: Vec<String> = victims.iter().map(|v| v.pod.clone()).collect();
    let comparison = engine
        .watch_deletions(
            moment.managed,
            &before,
            &predicted,
            moment.scale_down_by,
            moment.deadline,
        )
        .await;
    Ok(ScaleAnswer {
        performed: true,
        skipped: None,
        replicas: req.replicas,
        comparison: Some(comparison),
    })
}

/// Sets the workload's scale to the requested replicas, with one retry on a
/// conflict (someone else touched the scale meanwhile).
async fn set_scale(client: &Client, req: &PrescaleRequest) -> Result<(), HookError> {
    let mut last = None;
    for _ in 0..2 {
        let mut scale = get_scale(client, req).await?;
        scale.spec.get_or_insert_with(Default::default).replicas = Some(req.replicas);
        match replace_scale(client, req, &scale).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => last = Some(s.message.clone()),
            Err(e) => {
                return Err(HookError::Internal(format!(
                    "setting the scale of {}: {}",
                    req.target(),
                    auth::api_error(&e)
                )))
            }
        }
    }
    Err(HookError::Conflict(format!(
        "the scale of {} kept changing: {}",
        req.target(),
        last.unwrap_or_default()
    )))
}
