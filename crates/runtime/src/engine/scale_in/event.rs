//! The `ScaleInVictims` Event: one per scale-in the engine made exact for
//! the webhook or the hook, on the workload, naming the pods predicted to go, whether
//! their costs were fresh, and (with `--prices`) what the scale-in freed
//! with the policy and what the default order would have freed. Written
//! after the answer, through the write budget, always as a new Event (not
//! as one more of an earlier scale-in's, whose note would stay); the calls
//! that share a scale-in's answer write none (their first call did).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};

use super::priced::observe_window;
use super::ExactScaleIn;
use crate::engine::{FreshBy, PriceOutcome, ScaleInAnswer, ScaleInCall, WorkloadRef};
use crate::policy::TargetKind;

/// How long the Event waits for the scale-in's price beyond the time its
/// pods are looked for going ([`observe_window`]: moments, as a rule, half
/// a minute for hundreds of pods); it is then priced on the blocking pool
/// (milliseconds).
const PRICE_MARGIN: Duration = Duration::from_secs(15);

/// Pods a scale-in from `from` to `to` replicas deletes.
fn removed(from: i32, to: i32) -> usize {
    usize::try_from(from.saturating_sub(to)).unwrap_or(0)
}

/// The API server refuses notes over 1 kB.
const NOTE_MAX: usize = 1000;

/// A scale-in of `workload` from `from` to `to` replicas, as its Event
/// tells it.
#[derive(Debug, Clone)]
pub(in crate::engine) struct Scaled {
    /// The workload.
    pub workload: WorkloadRef,
    /// Its UID, when the caller knows it.
    pub uid: Option<String>,
    /// Replicas before.
    pub from: i32,
    /// Replicas after.
    pub to: i32,
    /// The Event's action: `AdmitScaleIn` (the webhook), `Prescale` (the hook).
    pub action: &'static str,
}

impl Scaled {
    /// The scale-in `call` asked for.
    pub(in crate::engine) fn of(call: &ScaleInCall) -> Self {
        Scaled {
            workload: call.workload.clone(),
            uid: call.uid.clone(),
            from: call.from,
            to: call.to,
            action: match call.caller {
                FreshBy::Hook => "Prescale",
                FreshBy::Webhook => "AdmitScaleIn",
            },
        }
    }
}

impl ExactScaleIn {
    /// Publishes the scale-in's `ScaleInVictims` Event in the background,
    /// once it is priced when a price is coming; nothing for a call that
    /// shares the scale-in's answer, a workload no policy manages, or a hook
    /// call that removes no replica.
    pub(super) fn report(&self, answer: Arc<ScaleInAnswer>) {
        let scaled = Scaled::of(&self.call);
        if answer.shared || answer.policy().is_none() || scaled.to >= scaled.from {
            return;
        }
        // each scale-in its own Event: never folded into an earlier one's count
        let recorder = self.engine.leadership.one_event();
        tokio::spawn(async move {
            let wait = observe_window(removed(scaled.from, scaled.to)) + PRICE_MARGIN;
            let priced = answer.priced.wait(wait).await;
            if answer.priced.expected() && priced.is_none() {
                tracing::warn!(workload = %scaled.workload, "the scale-in was not priced in time: its Event says so");
            }
            let event = victims_event(&scaled, &answer, priced.as_ref());
            if let Err(e) = recorder.publish(&event, &workload_ref(&scaled)).await {
                tracing::debug!(error = %e, "the scale-in Event was not written");
            }
        });
    }
}

/// The Event that tells the workload's readers which pods this scale-in is
/// predicted to delete, whether their costs were fresh, and what it freed.
/// The price comes before the victims: a long list is what the 1 kB cap
/// cuts.
pub(in crate::engine) fn victims_event(
    scaled: &Scaled,
    answer: &ScaleInAnswer,
    priced: Option<&PriceOutcome>,
) -> Event {
    let warning = answer.outcome.warning();
    let victims = answer.victims_list();
    let mut note = format!(
        "scale-in {} -> {} ({} cost write(s))",
        scaled.from, scaled.to, answer.writes
    );
    match priced {
        Some(PriceOutcome::Priced(p)) => note.push_str(&format!(": {}", p.summary())),
        Some(PriceOutcome::NothingDeleted) => note.push_str(&format!(
            ": not priced, no pod went within {}s",
            observe_window(removed(scaled.from, scaled.to)).as_secs()
        )),
        Some(PriceOutcome::Failed) => note.push_str(": not priced, pricing failed"),
        None if answer.priced.expected() => note.push_str(": not priced in time"),
        None => {}
    }
    note.push_str(&format!(
        "; predicted victims {}",
        if victims.is_empty() {
            "(none)"
        } else {
            &victims
        }
    ));
    let marked = answer.marked_victims();
    if !marked.is_empty() {
        note.push_str(&format!(
            "; first because marked for scale-down: {}",
            marked.join(",")
        ));
    }
    if let Some(w) = &warning {
        note.push_str(&format!(" ({w})"));
    }
    Event {
        type_: if warning.is_none() {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: "ScaleInVictims".into(),
        note: Some(note.chars().take(NOTE_MAX).collect()),
        action: scaled.action.into(),
        secondary: None,
    }
}

/// The scaled workload, as an Event's `regarding`.
fn workload_ref(scaled: &Scaled) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps/v1".into()),
        kind: Some(
            match scaled.workload.kind {
                TargetKind::Deployment => "Deployment",
                TargetKind::ReplicaSet => "ReplicaSet",
            }
            .into(),
        ),
        name: Some(scaled.workload.name.clone()),
        namespace: Some(scaled.workload.namespace.clone()),
        uid: scaled.uid.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Priced, PricedScaleIn, ScaleInOutcome};
    use crate::plan::prices::Money;

    fn answer(victims: Vec<&str>) -> ScaleInAnswer {
        ScaleInAnswer {
            outcome: ScaleInOutcome::Fresh,
            shared: false,
            managed: None,
            victims: vec![(
                "web-rs".into(),
                victims.into_iter().map(Into::into).collect(),
            )],
            corrections: Vec::new(),
            plan: None,
            writes: 2,
            landed: 2,
            gone: 0,
            failed: Vec::new(),
            observed_after: None,
            settled: Duration::ZERO,
            priced: Priced::default(),
        }
    }

    fn scaled() -> Scaled {
        Scaled {
            workload: WorkloadRef {
                namespace: "shop".into(),
                kind: TargetKind::Deployment,
                name: "web".into(),
            },
            uid: Some("dep-uid".into()),
            from: 4,
            to: 2,
            action: "AdmitScaleIn",
        }
    }

    #[test]
    fn the_event_gives_the_price_before_the_victims() {
        let priced = PricedScaleIn {
            at: "2026-11-25T10:00:00Z".parse().unwrap(),
            workload: "Deployment shop/web".into(),
            by: FreshBy::Webhook,
            from: 4,
            to: 2,
            currency: Some("USD".into()),
            with_policy: crate::engine::scale_in::priced::ChoiceFreed {
                victims: 2,
                nodes: vec![crate::engine::scale_in::priced::FreedRef {
                    name: "spot-1".into(),
                    uid: None,
                    hourly: Money::parse_amount("0.04"),
                }],
                hourly: Money::parse_amount("0.04").unwrap(),
            },
            by_default: crate::engine::scale_in::priced::ChoiceFreed {
                victims: 2,
                nodes: vec![],
                hourly: Money::ZERO,
            },
        };
        let long: Vec<String> = (0..200).map(|i| format!("web-{i:04}")).collect();
        let a = answer(long.iter().map(String::as_str).collect());
        let e = victims_event(
            &scaled(),
            &a,
            Some(&PriceOutcome::Priced(std::sync::Arc::new(priced))),
        );
        let note = e.note.unwrap();
        assert!(
            note.starts_with(
                "scale-in 4 -> 2 (2 cost write(s)): with the policy 2 victim(s) free 1 node(s) (spot-1), 0.04 USD/h; \
                 by the default order 2 victim(s) would free 0 node(s), 0.00 USD/h; predicted victims web-rs/web-0000,"
            ),
            "{note}"
        );
        assert_eq!(
            note.chars().count(),
            NOTE_MAX,
            "a long list is cut, the price is not"
        );
        assert_eq!(e.reason, "ScaleInVictims");
        assert_eq!(e.action, "AdmitScaleIn");
        assert_eq!(e.type_, EventType::Normal);
        // nothing went: said, not priced
        let none = victims_event(
            &scaled(),
            &answer(vec!["web-0"]),
            Some(&PriceOutcome::NothingDeleted),
        );
        assert_eq!(
            none.note.unwrap(),
            "scale-in 4 -> 2 (2 cost write(s)): not priced, no pod went within 15s; predicted victims web-rs/web-0"
        );
        // without prices: the victims alone
        let plain = victims_event(&scaled(), &answer(vec!["web-0"]), None);
        assert_eq!(
            plain.note.unwrap(),
            "scale-in 4 -> 2 (2 cost write(s)); predicted victims web-rs/web-0"
        );
        let r = workload_ref(&scaled());
        assert_eq!(
            (r.kind.as_deref(), r.uid.as_deref()),
            (Some("Deployment"), Some("dep-uid"))
        );
    }
}
