//! Keeps the scale-in webhook's `caBundle` equal to the hook's CA when the
//! hook issues its own certificate (with the cert-manager component, its CA
//! injector does this). Without it the API server cannot verify the hook
//! and, with `failurePolicy: Ignore`, every scale-in goes through with stale
//! costs and nothing but the API server's log says why.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio_util::sync::CancellationToken;

/// How often the configuration is checked: it may be installed after the
/// operator starts, or its caBundle reset by a re-apply of the manifests.
const CHECK_EVERY: Duration = Duration::from_secs(30);

/// The name the `scale-webhook` component gives the configuration for an
/// operator installed in `namespace`.
pub fn config_name(namespace: &str) -> String {
    format!("deletion-cost-scale-in.{namespace}")
}

/// Sets `ca` as the caBundle of every webhook of `config` that calls the
/// hook's Service (`service` in `namespace`); whether anything changed.
pub fn set_ca_bundle(
    config: &mut ValidatingWebhookConfiguration,
    service: &str,
    namespace: &str,
    ca: &str,
) -> bool {
    let mut changed = false;
    for webhook in config.webhooks.iter_mut().flatten() {
        let ours = webhook
            .client_config
            .service
            .as_ref()
            .is_some_and(|s| s.name == service && s.namespace == namespace);
        let current = webhook.client_config.ca_bundle.as_ref().map(|b| &b.0[..]);
        if ours && current != Some(ca.as_bytes()) {
            webhook.client_config.ca_bundle = Some(ByteString(ca.as_bytes().to_vec()));
            changed = true;
        }
    }
    changed
}

/// What one check did.
#[derive(Debug, PartialEq, Eq)]
enum Checked {
    /// No such configuration: the component is not installed.
    Absent,
    /// Its caBundle already is the CA.
    Current,
    /// Its caBundle was set.
    Updated,
}

async fn check(
    api: &Api<ValidatingWebhookConfiguration>,
    name: &str,
    service: &str,
    namespace: &str,
    ca: &str,
) -> Result<Checked, kube::Error> {
    let Some(mut config) = api.get_opt(name).await? else {
        return Ok(Checked::Absent);
    };
    if !set_ca_bundle(&mut config, service, namespace, ca) {
        return Ok(Checked::Current);
    }
    // resourceVersion kept: a concurrent change wins, the next check retries
    api.replace(name, &PostParams::default(), &config).await?;
    Ok(Checked::Updated)
}

/// Checks the webhook configuration every `CHECK_EVERY` until `shutdown`
/// (with `--scale-webhook-ca`, which the scale-webhook component sets along
/// with the permission). A missing configuration is waited for; a missing
/// permission is said once, as an error.
pub async fn keep_current(
    client: Client,
    service: String,
    namespace: String,
    ca: String,
    shutdown: CancellationToken,
) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
    let name = config_name(&namespace);
    let mut said_forbidden = false;
    loop {
        match check(&api, &name, &service, &namespace, &ca).await {
            Ok(Checked::Updated) => tracing::info!(
                webhook = %name,
                "scale-in webhook's caBundle set to the hook's CA"
            ),
            Ok(Checked::Absent | Checked::Current) => {}
            Err(kube::Error::Api(s)) if s.code == 403 => {
                if !said_forbidden {
                    tracing::error!(webhook = %name, "--scale-webhook-ca: not allowed to get and update the scale-in webhook's configuration (the scale-webhook component's ClusterRole grants it); the API server cannot verify the hook until then");
                    said_forbidden = true;
                }
            }
            Err(e) => tracing::warn!(
                webhook = %name,
                error = %crate::error_chain(&e),
                "could not check the scale-in webhook's caBundle; trying again"
            ),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config() -> ValidatingWebhookConfiguration {
        serde_json::from_value(json!({
            "metadata": {"name": "deletion-cost-scale-in.ops"},
            "webhooks": [
                {"name": "a", "sideEffects": "NoneOnDryRun", "admissionReviewVersions": ["v1"],
                 "clientConfig": {"service": {"name": "deletion-cost-hook", "namespace": "ops"}}},
                {"name": "b", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                 "clientConfig": {"service": {"name": "other", "namespace": "ops"}, "caBundle": "b3RoZXI="}}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn only_the_hooks_webhooks_get_the_ca_and_only_once() {
        let mut c = config();
        assert!(set_ca_bundle(&mut c, "deletion-cost-hook", "ops", "PEM"));
        let hooks = c.webhooks.as_ref().unwrap();
        assert_eq!(
            hooks[0].client_config.ca_bundle.as_ref().map(|b| &b.0[..]),
            Some(&b"PEM"[..])
        );
        assert_eq!(
            hooks[1].client_config.ca_bundle.as_ref().map(|b| &b.0[..]),
            Some(&b"other"[..])
        );
        assert!(!set_ca_bundle(&mut c, "deletion-cost-hook", "ops", "PEM"));
        assert!(!set_ca_bundle(
            &mut c,
            "deletion-cost-hook",
            "elsewhere",
            "NEW"
        ));
    }
}
