//! The price stage of a scale-in (`run --prices`), after its answer: the
//! pods it deleted, observed in the pod cache, then priced over the
//! snapshot its round planned on (`priced.rs` keeps the totals).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use super::call::{PriceOutcome, ScaleInAnswer, ScaleInCall};
use super::priced::{by_replica_set, observe_window, ChoiceFreed, PricedScaleIn, OBSERVE_POLL};
use super::ExactScaleIn;
use crate::comparator::is_pod_active;
use crate::engine::key_of;
use crate::engine::round::PricingInput;
use crate::plan::savings::{scale_in_savings, Savings};

impl ExactScaleIn {
    /// The price stage, after the answer: the pods the scale-in deleted,
    /// observed, then priced. Priced over the pods seen going: within a tie
    /// the controller may pick others than the ones predicted.
    pub(super) async fn price(&self, answer: &ScaleInAnswer, input: PricingInput) -> PriceOutcome {
        match self.observe_deletions(answer).await {
            None => PriceOutcome::NothingDeleted,
            Some(gone) => match self.price_gone(answer, gone, input).await {
                Some(p) => PriceOutcome::Priced(p),
                None => PriceOutcome::Failed,
            },
        }
    }

    /// The pods a scale-in deleted: those of the workload's active pods at
    /// its round that the pod cache shows gone or terminating within
    /// [`observe_window`] of its answer, as many as it removes replicas (the
    /// predicted victims first when more went). `None` when none went.
    async fn observe_deletions(&self, answer: &ScaleInAnswer) -> Option<Vec<Arc<str>>> {
        let call = &self.call;
        let managed = answer.managed.as_ref()?;
        let by = usize::try_from(call.from.saturating_sub(call.to)).unwrap_or(0);
        let ns = &managed.workload.namespace;
        let gone = || -> Vec<&String> {
            managed
                .pods
                .iter()
                .filter(|pod| {
                    !self
                        .engine
                        .caches
                        .pod(ns, pod)
                        .is_some_and(|p| is_pod_active(&*p))
                })
                .collect()
        };
        let until = tokio::time::Instant::now() + observe_window(by);
        let mut seen = gone();
        while seen.len() < by && tokio::time::Instant::now() < until {
            tokio::time::sleep(OBSERVE_POLL).await;
            seen = gone();
        }
        if seen.is_empty() {
            tracing::info!(
                workload = %call.workload,
                from = call.from,
                to = call.to,
                "no pod of the scale-in went within {}s: not priced",
                observe_window(by).as_secs()
            );
            return None;
        }
        let predicted: Vec<&str> = answer
            .victims
            .iter()
            .flat_map(|(_, v)| v.iter().map(|p| &**p))
            .collect();
        seen.sort_by_key(|p| (!predicted.contains(&p.as_str()), p.as_str()));
        Some(
            seen.into_iter()
                .take(by)
                .map(|p| Arc::from(p.as_str()))
                .collect(),
        )
    }

    /// Prices a finished scale-in, the pods it deleted (`gone`), over the
    /// snapshot its round planned on (on the blocking pool), then counts
    /// it: metrics, the totals, the freed nodes watched, and a status
    /// update asked for.
    async fn price_gone(
        &self,
        answer: &ScaleInAnswer,
        gone: Vec<Arc<str>>,
        input: PricingInput,
    ) -> Option<Arc<PricedScaleIn>> {
        let call = &self.call;
        let pricing = self.engine.pricing.as_ref()?;
        let managed = answer.managed.as_ref()?;
        let resolved = managed.resolved.clone();
        let prices = pricing.prices.get();
        let call_ = call.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let victims = by_replica_set(&input.snapshot, &resolved.namespace, &gone);
            let (savings, warnings) =
                scale_in_savings(&resolved, &input.snapshot, &victims, &prices, &input.opts);
            let uids: BTreeMap<&str, Option<String>> = input
                .snapshot
                .nodes
                .iter()
                .filter_map(|n| Some((n.metadata.name.as_deref()?, n.metadata.uid.clone())))
                .collect();
            let uid_of = |name: &str| uids.get(name).cloned().flatten();
            (
                PricedScaleIn::new(&call_, &savings, uid_of, Timestamp::now()),
                warnings,
            )
        })
        .await;
        let (priced, warnings) = match joined {
            Ok(done) => done,
            Err(e) => {
                tracing::error!(workload = %call.workload, error = %e, "pricing the scale-in failed");
                return None;
            }
        };
        let key = key_of(&managed.resolved);
        for w in warnings {
            tracing::info!(policy = %key, workload = %call.workload, "{w}");
        }
        self.engine
            .record_priced(&key, &priced, pricing.removal_window);
        Some(Arc::new(priced))
    }
}

impl PricedScaleIn {
    /// The priced scale-in of `call` from its savings; `uid_of` gives a
    /// node's UID in the snapshot it was priced over.
    fn new(
        call: &ScaleInCall,
        savings: &Savings,
        uid_of: impl Fn(&str) -> Option<String>,
        at: Timestamp,
    ) -> Self {
        PricedScaleIn {
            at: Timestamp::from_second(at.as_second()).unwrap_or(at),
            workload: call.workload.to_string(),
            by: call.caller,
            from: call.from,
            to: call.to,
            currency: savings.currency.clone(),
            with_policy: ChoiceFreed::of(&savings.policy, &uid_of),
            by_default: ChoiceFreed::of(&savings.upstream, &uid_of),
        }
    }
}
