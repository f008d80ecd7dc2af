//! What a scale-in call is and what it answers: the types every stage of
//! the scale-in and its callers (the hook, the webhook) share.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::priced::PricedScaleIn;
use crate::engine::round::Hold;
use crate::engine::{FreshBy, Managed, WorkloadRef};
use crate::plan::correction::Unreachable;
use crate::plan::{Plan, ReplicaSetCorrection};

/// One call that scales a workload in.
#[derive(Debug, Clone)]
pub struct ScaleInCall {
    /// The workload.
    pub workload: WorkloadRef,
    /// Its UID, when the caller knows it (the scale-in's Event names it).
    pub uid: Option<String>,
    /// Replicas before.
    pub from: i32,
    /// Replicas after.
    pub to: i32,
    /// Who asks.
    pub caller: FreshBy,
    /// The Deployment controller resizing a ReplicaSet: the second call of
    /// a Deployment's scale-in when one was just seen.
    pub follow_up: bool,
    /// When the answer is due.
    pub deadline: Instant,
    /// The longest settle after the cache shows the writes.
    pub settle_cap: Duration,
}

/// What a scale-in call achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleInOutcome {
    /// Signals were read now and the writes the scale-in needed (none when
    /// the costs already put the right pods first) landed and are in the
    /// cache: the pods named go.
    Fresh,
    /// This replica does not lead.
    NotLeader,
    /// No policy manages the workload.
    NoPolicy(String),
    /// Nothing written, and why (dry run, signals unavailable, writer
    /// starting).
    Held(Hold),
    /// Finding the workload's policy or planning it failed.
    PlannerFailed(String),
    /// Some writes were refused.
    WritesFailed {
        /// How many.
        failed: usize,
    },
    /// The deadline came first.
    OverBudget {
        /// What it was doing.
        phase: &'static str,
        /// Writes that had not landed (or not shown in the cache).
        missing: usize,
        /// Writes the scale-in needed (0 before it knew).
        writes: usize,
    },
    /// No writes can make exactly the policy's pods go (foreign costs,
    /// the feature gate): the best effort landed.
    Unreachable(Unreachable),
}

impl ScaleInOutcome {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            ScaleInOutcome::Fresh => "fresh",
            ScaleInOutcome::NotLeader => "follower",
            ScaleInOutcome::NoPolicy(_) => "no_policy",
            ScaleInOutcome::Held(Hold::DryRun) => "dry_run",
            ScaleInOutcome::Held(Hold::SignalsUnavailable(_)) => "signals_unavailable",
            ScaleInOutcome::Held(Hold::NotLeader) => "follower",
            ScaleInOutcome::Held(Hold::WriterStarting) => "writer_starting",
            ScaleInOutcome::PlannerFailed(_) => "planner_failed",
            ScaleInOutcome::WritesFailed { .. } => "writes_failed",
            ScaleInOutcome::OverBudget { .. } => "budget_exceeded",
            ScaleInOutcome::Unreachable(_) => "unreachable",
        }
    }

    /// Why the pods deleted may not be the ones the policy wants, if so.
    pub fn warning(&self) -> Option<String> {
        let why = match self {
            ScaleInOutcome::Fresh | ScaleInOutcome::NoPolicy(_) => {
                return None
            }
            ScaleInOutcome::NotLeader => {
                "reached a replica that does not lead, costs not refreshed".to_string()
            }
            ScaleInOutcome::Held(hold) => hold.to_string(),
            ScaleInOutcome::PlannerFailed(e) => e.clone(),
            ScaleInOutcome::WritesFailed { failed } => format!("{failed} cost write(s) failed"),
            ScaleInOutcome::OverBudget {
                phase,
                missing,
                writes,
            } => format!(
                "costs not fresh within the budget ({phase}; {} of {writes} write(s) in place, {missing} missing); the pods named are predicted from the costs as they stand",
                writes.saturating_sub(*missing)
            ),
            ScaleInOutcome::Unreachable(u) => format!("no cost write can make it exact: {u}"),
        };
        Some(format!(
            "deletion-cost: {why}; the pods deleted may not be the ones the policy intends"
        ))
    }
}

/// What became of a scale-in's pricing.
#[derive(Debug, Clone)]
pub enum PriceOutcome {
    /// Priced over the pods seen going.
    Priced(Arc<PricedScaleIn>),
    /// No pod of the workload went within `priced::observe_window`
    /// (the scale-in did not happen, or a hook caller did not scale): not
    /// priced.
    NothingDeleted,
    /// Pricing failed (logged).
    Failed,
}

/// What a scale-in freed, known once its pods are seen going and it is
/// priced (after its answer).
#[derive(Debug, Clone, Default)]
pub struct Priced(pub(super) Option<watch::Receiver<Option<PriceOutcome>>>);

impl Priced {
    /// Waits up to `within` for the outcome; `None` when the scale-in is
    /// not priced at all (no `--prices`, no plan) or not by then.
    pub async fn wait(&self, within: Duration) -> Option<PriceOutcome> {
        let mut rx = self.0.clone()?;
        let got = tokio::time::timeout(within, rx.wait_for(Option::is_some)).await;
        match got {
            Ok(Ok(p)) => (*p).clone(),
            _ => None,
        }
    }

    /// Whether a price is coming.
    pub fn expected(&self) -> bool {
        self.0.is_some()
    }
}

/// A scale-in call's answer. Calls of one scale-in share it (`shared`).
#[derive(Debug, Clone)]
pub struct ScaleInAnswer {
    /// What happened.
    pub outcome: ScaleInOutcome,
    /// The answer is the scale-in's first call's, shared with this call.
    pub shared: bool,
    /// The workload, its policy, ReplicaSets and pods (when one manages it).
    pub managed: Option<Managed>,
    /// The pods predicted to go, per ReplicaSet of the workload: the
    /// policy's once its writes landed, else those the costs as they stand
    /// pick.
    pub victims: Vec<(String, Vec<Arc<str>>)>,
    /// The correction of each ReplicaSet.
    pub corrections: Vec<ReplicaSetCorrection>,
    /// The policy's plan over the pods as they were (fresh signals).
    pub plan: Option<Arc<Plan>>,
    /// Writes sent.
    pub writes: usize,
    /// Writes that landed.
    pub landed: usize,
    /// Writes whose pod was gone.
    pub gone: usize,
    /// Writes refused: pod and error.
    pub failed: Vec<(String, String)>,
    /// From sending the writes to the cache showing them.
    pub observed_after: Option<Duration>,
    /// The settle waited after that.
    pub settled: Duration,
    /// What it freed, priced after the answer (`--prices`).
    pub priced: Priced,
}

impl ScaleInAnswer {
    pub(super) fn bare(outcome: ScaleInOutcome) -> Self {
        ScaleInAnswer {
            outcome,
            shared: false,
            managed: None,
            victims: Vec::new(),
            corrections: Vec::new(),
            plan: None,
            writes: 0,
            landed: 0,
            gone: 0,
            failed: Vec::new(),
            observed_after: None,
            settled: Duration::ZERO,
            priced: Priced::default(),
        }
    }

    /// The metric label: `shared` for a call that shares the first's
    /// answer (but `no_policy` stays `no_policy`), else the outcome's.
    pub fn label(&self) -> &'static str {
        match self.outcome {
            // nothing to share: no policy means no scale-in work
            ScaleInOutcome::NoPolicy(_) => self.outcome.label(),
            _ if self.shared => "shared",
            _ => self.outcome.label(),
        }
    }

    /// The policy, as `namespace/name`.
    pub fn policy(&self) -> Option<String> {
        self.managed.as_ref().map(|m| m.resolved.key())
    }

    /// The marker label that put `pod` first in this scale-in's plan, when
    /// one did.
    pub fn marked_as(&self, pod: &str) -> Option<&'static str> {
        let plan = self.plan.as_ref()?;
        let p = plan.pods.iter().find(|p| &*p.name == pod)?;
        p.marked.filter(|m| m.costed()).map(|m| m.label)
    }

    /// The victims whose marker put them first, by name.
    pub fn marked_victims(&self) -> Vec<&str> {
        self.victims
            .iter()
            .flat_map(|(_, v)| v.iter())
            .map(|p| &**p)
            .filter(|p| self.marked_as(p).is_some())
            .collect()
    }

    /// The victims as `replicaset/pod`, comma-separated.
    pub fn victims_list(&self) -> String {
        self.victims
            .iter()
            .flat_map(|(rs, v)| v.iter().map(move |p| format!("{rs}/{p}")))
            .collect::<Vec<_>>()
            .join(",")
    }
}
