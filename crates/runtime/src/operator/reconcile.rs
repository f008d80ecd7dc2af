//! The reconcile of one policy: apply (plan a round, hand its patches to
//! the patcher, export its mismatches, write the status) behind the
//! finalizer, cleanup (remove the policy's costs before the finalizer goes),
//! and the error policy (exponential backoff per policy).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::{Api, Client, ResourceExt};

use super::error::OperatorError;
use super::status;
use super::sync::WatchHealth;
use crate::engine::{CleanupError, Engine};
use crate::plan::NamedPolicy;
use crate::policy::{DeletionCostPolicy, DeletionCostPolicyStatus};
use crate::writes::PolicyKey;

/// Finalizer that removes a policy's costs before the policy goes away.
pub const FINALIZER: &str = "deletioncost.dev/cleanup";

/// Shared by every reconcile.
pub struct Context {
    /// Every write it sends (finalizer, status) waits for a token of the
    /// operator-wide write budget.
    client: Client,
    /// The engine (caches, policies' state, leadership, patcher), shared
    /// with the hook and the policy pages.
    engine: Arc<Engine>,
    /// Events, through the same budget.
    recorder: Recorder,
    /// When each policy's status was last written (progress is written at
    /// a bounded cadence).
    cadence: status::Cadence,
    /// Which caches have synced (plans over half-listed pods would be wrong).
    health: Arc<WatchHealth>,
    /// Consecutive failed reconciles per policy (retry backoff).
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    /// What every reconcile shares; `qps` is the operator-wide write rate
    /// (the statuses' progress takes a part of it at most).
    pub fn new(
        client: Client,
        engine: Arc<Engine>,
        recorder: Recorder,
        health: Arc<WatchHealth>,
        qps: f64,
    ) -> Self {
        Context {
            client,
            engine,
            recorder,
            cadence: status::Cadence::new(qps),
            health,
            failures: Mutex::default(),
        }
    }

    /// Whether this replica holds the lease (and may write).
    fn is_leader(&self) -> bool {
        self.engine.leads()
    }

    /// Writes the status when it is due (not with `--dry-run`), with its
    /// Events; returns how soon a progress change held back is due.
    async fn write_status(
        &self,
        api: &Api<DeletionCostPolicy>,
        policy: &DeletionCostPolicy,
        prev: Option<&DeletionCostPolicyStatus>,
        new: DeletionCostPolicyStatus,
    ) -> Result<Option<Duration>, OperatorError> {
        let due = status::write(
            &self.recorder,
            self.engine.dry_run(),
            &self.cadence,
            api,
            policy,
            prev,
            new,
        )
        .await?;
        Ok(match due {
            status::Due::After(d) => Some(d),
            status::Due::Now | status::Due::Unchanged => None,
        })
    }
}

/// A condition's transition time: now.
fn now() -> Time {
    Time(Timestamp::now())
}

/// Reconciles one policy: plans and writes it (apply), or removes its costs
/// once it is being deleted (cleanup), behind the finalizer. Public so
/// that a test can run one reconcile against a mock API server and assert
/// the exact requests it sends (`tests/requests.rs`).
pub async fn reconcile(
    policy: Arc<DeletionCostPolicy>,
    ctx: Arc<Context>,
) -> Result<Action, OperatorError> {
    if !ctx.is_leader() {
        // followers keep warm caches and wait for the lease
        return Ok(Action::await_change());
    }
    if !ctx.health.is_ready() {
        // pod events seen before the policies were listed map to nothing:
        // plan only once every cache holds the whole cluster
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let key = policy_key(&policy);
    let result = if ctx.engine.dry_run() {
        apply_policy(policy, &ctx).await
    } else {
        let ns = policy.namespace().unwrap_or_default();
        let api: Api<DeletionCostPolicy> = Api::namespaced(ctx.client.clone(), &ns);
        finalizer(&api, FINALIZER, policy, |event| async {
            match event {
                FinalizerEvent::Apply(p) => apply_policy(p, &ctx).await,
                FinalizerEvent::Cleanup(p) => cleanup(p, &ctx).await,
            }
        })
        .await
        .map_err(|e| OperatorError::Finalizer(Box::new(e)))
    };
    if result.is_ok() {
        if let Ok(mut f) = ctx.failures.lock() {
            f.remove(&key);
        }
    }
    result
}

async fn apply_policy(
    policy: Arc<DeletionCostPolicy>,
    ctx: &Context,
) -> Result<Action, OperatorError> {
    let ns = policy.namespace().unwrap_or_default();
    let name = policy.name_any();
    let key = format!("{ns}/{name}");
    let api: Api<DeletionCostPolicy> = Api::namespaced(ctx.client.clone(), &ns);
    let prev_status = policy.status.clone();
    let resolved = match NamedPolicy::validate(&name, &ns, &policy.spec) {
        Ok(r) => r,
        Err(e) => return report_invalid(ctx, &api, &policy, &e).await,
    };

    // what an earlier process or leader counted goes on from the status
    let kept = prev_status
        .as_ref()
        .and_then(|s| s.scale_ins.as_ref())
        .map(status::scale_ins_from)
        .unwrap_or_default();
    ctx.engine.remember_scale_ins(&resolved, &kept);
    let round = ctx.engine.reconcile(&policy, &resolved).await?;
    let pkey = PolicyKey::new(&ns, &name);
    seed_priced_once(ctx, &api, &policy, &pkey).await;
    tracing::info!(
        policy = %key,
        pods = round.plan.pods.len(),
        patches = round.plan.patches.len(),
        releases = round.releases,
        sent = round.sent,
        pending = round.pending,
        failing = round.failing.as_ref().map_or(0, |f| f.count),
        held = round.held.as_ref().map(ToString::to_string),
        dry_run = ctx.engine.dry_run(),
        "planned"
    );
    let observed = status::Observed {
        signals: round.signals.clone(),
        conflicts: round.conflicts.clone(),
        pending_patches: round.pending,
        rejected: round.rejected,
        failing: round.failing.clone(),
        last_refresh: round.last_refresh.clone(),
        generation: policy.metadata.generation,
        scale_ins: round.scale_ins.clone(),
        refresh_interval: resolved.spec.refresh_interval,
        on_scale_in: resolved.spec.writes == crate::policy::Writes::OnScaleIn,
        priced: ctx.engine.priced_scale_ins(&pkey),
    };
    let planned = &round.plan;
    let st = status::build(prev_status.as_ref(), planned, &observed, &now());
    let held = ctx
        .write_status(&api, &policy, prev_status.as_ref(), st)
        .await?;
    ctx.engine.metrics().reconciled("ok");
    let again = next_round_in(&round, &resolved);
    // a progress change held back is written by the reconcile it is due at
    Ok(Action::requeue(held.map_or(again, |d| again.min(d))))
}

/// When the policy's next round is due after `round`.
fn next_round_in(round: &crate::engine::Reconciled, resolved: &NamedPolicy) -> Duration {
    // failed writes are sent again by the next round: soon, not at the refresh
    let again = if round.rejected > 0 {
        Duration::from_secs(5)
    } else if round.failing.is_some() {
        resolved.spec.refresh_interval.min(RESEND_FAILED_AFTER)
    } else {
        resolved.spec.refresh_interval
    };
    // values a scale-in's hold kept back are written when it ends, not at
    // the next refresh
    round.hold_ends_in.map_or(again, |d| again.min(d))
}

/// An invalid policy: counted, forgotten by the engine (it has no order to
/// report), and its status says why.
async fn report_invalid(
    ctx: &Context,
    api: &Api<DeletionCostPolicy>,
    policy: &DeletionCostPolicy,
    e: &crate::plan::ResolveError,
) -> Result<Action, OperatorError> {
    let (ns, name) = (policy.namespace().unwrap_or_default(), policy.name_any());
    tracing::warn!(policy = %format!("{ns}/{name}"), error = %e, "invalid policy");
    ctx.engine.metrics().reconciled("invalid");
    ctx.engine.invalid(&PolicyKey::new(&ns, &name)).await;
    let prev_status = policy.status.as_ref();
    let st = status::invalid(prev_status, &e.errors, policy.metadata.generation, &now());
    let held = ctx.write_status(api, policy, prev_status, st).await?;
    Ok(held.map_or_else(Action::await_change, Action::requeue))
}

/// Seeds the engine's priced totals of a policy from its status once per
/// process: read now when it can be, else as cached.
async fn seed_priced_once(
    ctx: &Context,
    api: &Api<DeletionCostPolicy>,
    policy: &DeletionCostPolicy,
    pkey: &PolicyKey,
) {
    if ctx.engine.priced_seeded(pkey) {
        return;
    }
    let status = match fresh_status(api, &policy.name_any()).await {
        Some(fresh) => fresh,
        None => policy.status.clone(),
    };
    ctx.engine.seed_priced(
        pkey,
        status.as_ref().and_then(|s| s.priced_scale_ins.as_ref()),
    );
}

/// The policy's status read now (a quorum list of the one name, which the
/// operator's role allows), not as the cache holds it: a new leader's cache
/// may lag the old leader's last status, whose priced totals it goes on
/// from. `None` (logged) when the read fails: the cache's then.
async fn fresh_status(
    api: &Api<DeletionCostPolicy>,
    name: &str,
) -> Option<Option<DeletionCostPolicyStatus>> {
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    match api.list(&params).await {
        Ok(list) => Some(list.items.into_iter().next().and_then(|p| p.status)),
        Err(e) => {
            tracing::warn!(policy = %name, error = %crate::error_chain(&e), "reading the policy's status failed: its priced totals are read from the cache");
            None
        }
    }
}

/// How soon a policy with failed writes is planned again (they are sent
/// again then).
const RESEND_FAILED_AFTER: Duration = Duration::from_secs(15);

/// How long a cleanup waits for its removals before it is tried again.
const CLEANUP_WAIT: Duration = Duration::from_secs(60);

/// Removes this policy's costs (through the limiter, under the policy's
/// lock: see [`crate::engine::Engine::cleanup`]) before the finalizer goes.
async fn cleanup(policy: Arc<DeletionCostPolicy>, ctx: &Context) -> Result<Action, OperatorError> {
    let key = PolicyKey::new(policy.namespace().unwrap_or_default(), policy.name_any());
    match ctx.engine.cleanup(&key, CLEANUP_WAIT).await {
        Ok(_) => {
            ctx.cadence.forget(&key.to_string());
            Ok(Action::await_change())
        }
        Err(CleanupError::Incomplete { policy, remaining }) => {
            Err(OperatorError::CleanupIncomplete { policy, remaining })
        }
        Err(CleanupError::Submit(e)) => Err(e.into()),
    }
}

/// A failed reconcile is retried with exponential backoff ([`retry_delay`]);
/// the error is logged with its sources and counted by kind.
pub(super) fn error_policy(
    policy: Arc<DeletionCostPolicy>,
    err: &OperatorError,
    ctx: Arc<Context>,
) -> Action {
    let key = policy_key(&policy);
    let failures = ctx
        .failures
        .lock()
        .map(|mut f| {
            let n = f.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        })
        .unwrap_or(1);
    let delay = retry_delay(failures);
    tracing::warn!(
        policy = %key,
        error = %crate::error_chain(err),
        kind = err.metric_label(),
        failures,
        retry_in_seconds = delay.as_secs(),
        "reconcile failed"
    );
    ctx.engine.metrics().reconciled(err.metric_label());
    Action::requeue(delay)
}

/// First retry of a failing reconcile.
const RETRY_FIRST: Duration = Duration::from_secs(5);
/// Longest wait between retries of a failing reconcile.
const RETRY_MAX: Duration = Duration::from_secs(300);

/// Exponential backoff for the n-th consecutive failure (n >= 1): the n-th
/// step of backon's doubling from [`RETRY_FIRST`], capped at [`RETRY_MAX`]
/// (whole seconds, so its `f32` arithmetic is exact).
fn retry_delay(failures: u32) -> Duration {
    // the cap is reached long before the 17th step
    let step = failures.saturating_sub(1).min(16) as usize;
    ExponentialBuilder::new()
        .with_min_delay(RETRY_FIRST)
        .with_max_delay(RETRY_MAX)
        .without_max_times()
        .build()
        .nth(step)
        .unwrap_or(RETRY_MAX)
}

fn policy_key(p: &DeletionCostPolicy) -> String {
    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_reconciles_back_off_exponentially_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=8).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, vec![5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX);
    }
}
