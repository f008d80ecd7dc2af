//! Which scale-ins of a policy's workloads had fresh costs, and who made
//! them fresh: the pre-scale-down hook or the scale-in webhook. The status
//! says it, so a user sees whether the HPA, KEDA, `kubectl scale` and GitOps
//! (which call nothing) are covered. Counted in memory since the operator
//! started; kept apart from the policies' round locks so noting one never
//! waits on a round.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::jiff::Timestamp;

use crate::writes::PolicyKey;

/// Who made a scale-in's costs fresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreshBy {
    /// The pre-scale-down hook (`POST /v1/prescale`), called by the scaler.
    Hook,
    /// The scale-in admission webhook, called by the API server.
    Webhook,
}

impl FreshBy {
    /// As a status or log field: `hook` or `webhook`.
    pub fn label(self) -> &'static str {
        match self {
            FreshBy::Hook => "hook",
            FreshBy::Webhook => "webhook",
        }
    }
}

impl std::fmt::Display for FreshBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FreshBy::Hook => "the pre-scale-down hook",
            FreshBy::Webhook => "the scale-in webhook",
        })
    }
}

impl FreshBy {
    /// `hook` or `webhook`, as the status keeps it.
    pub fn as_str(self) -> &'static str {
        match self {
            FreshBy::Hook => "hook",
            FreshBy::Webhook => "webhook",
        }
    }

    /// The inverse of [`FreshBy::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "hook" => Some(FreshBy::Hook),
            "webhook" => Some(FreshBy::Webhook),
            _ => None,
        }
    }
}

/// A policy's scale-ins with fresh costs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScaleIns {
    /// Made fresh by the hook.
    pub by_hook: u32,
    /// Made fresh by the webhook.
    pub by_webhook: u32,
    /// The last one: when (RFC 3339), by whom, which workload.
    pub last: Option<(String, FreshBy, String)>,
}

/// Every policy's [`ScaleIns`]: what its status kept when this process
/// first reconciled it, plus what this process counted since.
#[derive(Debug, Default)]
pub(super) struct ScaleInLog {
    by_policy: Mutex<HashMap<PolicyKey, Entry>>,
}

#[derive(Debug, Default)]
struct Entry {
    counts: ScaleIns,
    /// The status's counts were taken in.
    seeded: bool,
}

impl ScaleInLog {
    /// Notes a scale-in of `workload` made fresh by `by`.
    pub fn note(&self, key: &PolicyKey, by: FreshBy, workload: String) {
        if let Ok(mut m) = self.by_policy.lock() {
            let s = &mut m.entry(key.clone()).or_default().counts;
            match by {
                FreshBy::Hook => s.by_hook = s.by_hook.saturating_add(1),
                FreshBy::Webhook => s.by_webhook = s.by_webhook.saturating_add(1),
            }
            let at = Timestamp::from_second(Timestamp::now().as_second())
                .unwrap_or_else(|_| Timestamp::now());
            s.last = Some((at.to_string(), by, workload));
        }
    }

    /// Takes in what the policy's status kept (at every reconcile, `kept`
    /// empty when the status has none). The first time, this process's
    /// own counts go on top of it (a restart, a new leader: they were not
    /// in any status yet); after that the larger of each count is kept (a
    /// status written by another leader meanwhile, or one read before our
    /// own last write showed), and the later last scale-in.
    pub fn remember(&self, key: &PolicyKey, kept: &ScaleIns) {
        if let Ok(mut m) = self.by_policy.lock() {
            let e = m.entry(key.clone()).or_default();
            let s = &mut e.counts;
            if e.seeded {
                s.by_hook = s.by_hook.max(kept.by_hook);
                s.by_webhook = s.by_webhook.max(kept.by_webhook);
            } else {
                s.by_hook = s.by_hook.saturating_add(kept.by_hook);
                s.by_webhook = s.by_webhook.saturating_add(kept.by_webhook);
                e.seeded = true;
            }
            let later = match (&s.last, &kept.last) {
                (None, k) => k.clone(),
                (Some(a), Some(b)) if b.0 > a.0 => Some(b.clone()),
                (a, _) => a.clone(),
            };
            s.last = later;
        }
    }

    /// The policy's scale-ins so far.
    pub fn of(&self, key: &PolicyKey) -> ScaleIns {
        self.by_policy
            .lock()
            .ok()
            .and_then(|m| m.get(key).map(|e| e.counts.clone()))
            .unwrap_or_default()
    }

    /// Forgets a deleted policy.
    pub fn forget(&self, key: &PolicyKey) {
        if let Ok(mut m) = self.by_policy.lock() {
            m.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_caller_and_keeps_the_last() {
        let log = ScaleInLog::default();
        let key = PolicyKey::new("shop", "web");
        assert_eq!(log.of(&key), ScaleIns::default());
        log.note(&key, FreshBy::Hook, "Deployment shop/web".into());
        log.note(&key, FreshBy::Webhook, "ReplicaSet shop/web-abc".into());
        log.note(&key, FreshBy::Webhook, "Deployment shop/web".into());
        let s = log.of(&key);
        assert_eq!((s.by_hook, s.by_webhook), (1, 2));
        let (_, by, workload) = s.last.unwrap();
        assert_eq!(by, FreshBy::Webhook);
        assert_eq!(workload, "Deployment shop/web");
        log.forget(&key);
        assert_eq!(log.of(&key), ScaleIns::default());
    }

    #[test]
    fn what_the_status_kept_is_counted_on_from() {
        let log = ScaleInLog::default();
        let key = PolicyKey::new("shop", "web");
        log.note(&key, FreshBy::Hook, "Deployment shop/web".into());
        let kept = ScaleIns {
            by_hook: 0,
            by_webhook: 7,
            last: Some(("2026-01-01T00:00:00Z".into(), FreshBy::Webhook, "x".into())),
        };
        log.remember(&key, &kept);
        let s = log.of(&key);
        // the note came before this process read the status: on top of it
        assert_eq!((s.by_hook, s.by_webhook), (1, 7));
        // the hook's note of now is later than what the status kept
        assert_eq!(s.last.map(|l| l.1), Some(FreshBy::Hook));
        log.note(&key, FreshBy::Webhook, "Deployment shop/web".into());
        assert_eq!(log.of(&key).by_webhook, 8);
        // our own write read back, or a stale status: not added again
        log.remember(
            &key,
            &ScaleIns {
                by_hook: 1,
                by_webhook: 8,
                last: None,
            },
        );
        log.remember(&key, &kept);
        assert_eq!(log.of(&key).by_webhook, 8);
        // another leader counted more meanwhile: taken
        log.remember(
            &key,
            &ScaleIns {
                by_hook: 1,
                by_webhook: 11,
                last: None,
            },
        );
        assert_eq!(log.of(&key).by_webhook, 11);
    }
}
