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

/// Every policy's [`ScaleIns`].
#[derive(Debug, Default)]
pub(super) struct ScaleInLog {
    by_policy: Mutex<HashMap<PolicyKey, ScaleIns>>,
}

impl ScaleInLog {
    /// Notes a scale-in of `workload` made fresh by `by`.
    pub fn note(&self, key: &PolicyKey, by: FreshBy, workload: String) {
        if let Ok(mut m) = self.by_policy.lock() {
            let s = m.entry(key.clone()).or_default();
            match by {
                FreshBy::Hook => s.by_hook = s.by_hook.saturating_add(1),
                FreshBy::Webhook => s.by_webhook = s.by_webhook.saturating_add(1),
            }
            let at = Timestamp::from_second(Timestamp::now().as_second())
                .unwrap_or_else(|_| Timestamp::now());
            s.last = Some((at.to_string(), by, workload));
        }
    }

    /// The policy's scale-ins so far.
    pub fn of(&self, key: &PolicyKey) -> ScaleIns {
        self.by_policy
            .lock()
            .ok()
            .and_then(|m| m.get(key).cloned())
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
}
