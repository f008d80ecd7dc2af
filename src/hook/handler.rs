//! The prescale flow: authenticate, validate, authorise, then refresh, patch
//! (urgent), wait until the pod cache shows the values, re-check the order,
//! and with `scale: true` scale and watch what the controller deletes.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
use super::compare::compare_victims;
use super::error::HookError;
use super::HookConfig;
use crate::engine::{Engine, FreshBy, Managed, ManagingError, Submission};
use crate::writes::WriteOutcome;

/// How often the pod cache is polled while waiting for patches or deletions.
const POLL: Duration = Duration::from_millis(20);

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
    if !st.engine.leadership().is_leader() {
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

    let managed = engine
        .managing(&req.workload_ref())
        .await
        .map_err(|e| match e {
            ManagingError::NotManaged(e) => HookError::NotFound(e.to_string()),
            other => HookError::Internal(other.to_string()),
        })?;

    // fresh signals, the workload's patches ahead of background work; the
    // policy's state stays locked from planning to submitting, so a
    // reconcile of the same policy cannot interleave
    let round = timeout_at(
        deadline,
        engine.prescale(&managed, scale_down_by, Duration::ZERO),
    )
    .await
    .map_err(|_| timeout(req, "querying signals and planning"))?
    .map_err(|e| HookError::Internal(e.to_string()))?;
    let requests = round.requests;
    let mut patches = PatchSummary {
        planned: requests.len(),
        observed: true,
        ..Default::default()
    };
    let mut warnings = round.warnings;
    if engine.dry_run() {
        patches.held = Some(
            "the operator runs with --dry-run: nothing was written; victims are predicted on the pods as they are"
                .into(),
        );
    } else if let Some(problem) = &round.signals {
        patches.held = Some(format!(
            "signals unavailable ({}): {}; no cost was written",
            problem.reason, problem.message
        ));
    }
    let started = Instant::now();
    // values that landed a moment ago count as applied: the cache must show them too
    let (batch, mut expected) = match round.submission {
        Ok(Submission::Sent { batch, landed }) => (Some(batch), landed),
        Ok(Submission::NothingToSend { landed }) => (None, landed),
        Ok(Submission::Held(hold)) => {
            if !requests.is_empty() && patches.held.is_none() {
                patches.held = Some(hold.to_string());
            }
            patches.observed = requests.is_empty();
            (None, Vec::new())
        }
        Err(e) => {
            return Err(HookError::Internal(format!(
                "the patcher refused the workload's patches: {e}"
            )))
        }
    };
    patches.applied += expected.len();
    let sent = batch.is_some();
    if let Some(batch) = batch {
        let report = timeout_at(deadline, batch.wait())
            .await
            .map_err(|_| timeout(req, "waiting for the patches to land"))?;
        for (pod, outcome) in &report.outcomes {
            match outcome {
                WriteOutcome::Applied => {
                    patches.applied += 1;
                    if let Some(r) = requests.iter().find(|r| r.pod == *pod) {
                        expected.push(r.clone());
                    }
                }
                WriteOutcome::Gone => patches.gone += 1,
                other => patches.failed.push(FailedPatch {
                    pod: pod.name.clone(),
                    error: format!("{other:?}"),
                }),
            }
        }
    }
    if patches.held.is_none() && (sent || !expected.is_empty()) {
        // read-your-writes: the order check must see what was written
        let waited = timeout_at(deadline, async {
            while !expected.iter().all(|r| engine.cache_shows(r)) {
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        if waited.is_err() {
            return Err(timeout(
                req,
                &format!(
                    "waiting for the pod cache to show {} patched values",
                    expected.len()
                ),
            ));
        }
        let took = started.elapsed().as_secs_f64();
        engine.metrics().hook_patch_observed.observe(took);
        patches.observed_after_seconds = Some(took);
    }
    if patches.held.is_none() && patches.failed.is_empty() {
        engine.note_scale_in(&managed, FreshBy::Hook);
    }

    // the order check on the pods as the cache now shows them
    let checked = timeout_at(deadline, engine.check(&managed, scale_down_by))
        .await
        .map_err(|_| timeout(req, "re-planning"))?
        .map_err(|e| HookError::Internal(e.to_string()))?;
    let replica_sets: Vec<ReplicaSetAnswer> = checked
        .replica_sets
        .iter()
        .filter(|r| managed.replica_sets.contains(&r.name))
        .map(|r| ReplicaSetAnswer {
            name: r.name.clone(),
            victims: r
                .victims
                .iter()
                .enumerate()
                .map(|(i, pod)| Victim {
                    pod: pod.to_string(),
                    replica_set: r.name.clone(),
                    cost: r.live_costs.get(i).copied().unwrap_or(0),
                    intended_cost: r.intended_costs.get(i).copied().unwrap_or(0),
                })
                .collect(),
            verdict: r.verdict,
            mismatches: r.mismatches.clone(),
            tie_at_cut: r.tie_at_cut,
        })
        .collect();
    if replica_sets.len() > 1 {
        warnings.push(format!(
            "{} ReplicaSets of {} have pods (a rollout?): the controller splits the scale-in between them; victims are shown per ReplicaSet for the whole amount",
            replica_sets.len(),
            req.target()
        ));
    }
    let victims: Vec<Victim> = replica_sets
        .iter()
        .flat_map(|r| r.victims.iter().cloned())
        .collect();
    let verdict = overall_verdict(replica_sets.iter().map(|r| r.verdict));

    let scale = if req.scale {
        Some(
            scale_in(
                st,
                req,
                deadline,
                &patches,
                &victims,
                &managed,
                scale_down_by,
            )
            .await?,
        )
    } else {
        None
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

/// `scale: true`: settle, set the scale subresource, watch the deletions.
async fn scale_in(
    st: &HookState,
    req: &PrescaleRequest,
    deadline: Instant,
    patches: &PatchSummary,
    victims: &[Victim],
    managed: &Managed,
    scale_down_by: usize,
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
    // let every informer (the ReplicaSet controller's too) catch up
    if Instant::now() + st.config.settle_delay >= deadline {
        return Err(timeout(req, "the settle delay before scaling"));
    }
    tokio::time::sleep(st.config.settle_delay).await;

    let before = engine.active_pods(managed);
    let set = timeout_at(deadline, async {
        // one retry on a conflict (someone else touched the scale meanwhile)
        let mut last = None;
        for _ in 0..2 {
            let mut scale = get_scale(&st.client, req).await?;
            scale.spec.get_or_insert_with(Default::default).replicas = Some(req.replicas);
            match replace_scale(&st.client, req, &scale).await {
                Ok(s) => return Ok(s),
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
    })
    .await
    .map_err(|_| timeout(req, "setting the scale subresource"))?;
    set?;
    tracing::info!(workload = %req.target(), replicas = req.replicas, "scaled");

    // From here on the scale is set: running out of time answers what was
    // seen so far (a 504 would make callers retry a scale that happened).
    let predicted: Vec<String> = victims.iter().map(|v| v.pod.clone()).collect();
    let mut comparison = compare_victims(
        &predicted,
        &before,
        &engine.active_pods(managed),
        scale_down_by,
    );
    while !comparison.complete && Instant::now() + POLL < deadline {
        tokio::time::sleep(POLL).await;
        comparison = compare_victims(
            &predicted,
            &before,
            &engine.active_pods(managed),
            scale_down_by,
        );
    }
    Ok(ScaleAnswer {
        performed: true,
        skipped: None,
        replicas: req.replicas,
        comparison: Some(comparison),
    })
}
