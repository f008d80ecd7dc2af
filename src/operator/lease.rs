//! Leader election on a Lease with kube-lease-manager, plus two things the
//! library does not do: a follower notices a released Lease at once (the
//! library sleeps until the holder's term would expire), and a graceful stop
//! gives the Lease back so the next replica takes over without waiting.
//! What a term means for the rest of the operator (the patcher, the leader
//! label) is [`super::leadership`].

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::config::RunConfig;
use super::error::OperatorError;

/// Seconds a leader's term lasts without renewal.
pub const LEASE_DURATION_SECONDS: u64 = 15;
/// Seconds before expiry the leader renews.
pub const LEASE_GRACE_SECONDS: u64 = 5;

/// The running election; [`Election::stop`] releases the Lease.
pub struct Election {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

#[derive(Clone)]
struct Params {
    client: Client,
    namespace: String,
    name: String,
    identity: String,
}

impl Params {
    async fn manager(&self) -> Result<LeaseManager, OperatorError> {
        LeaseManagerBuilder::new(self.client.clone(), &self.name)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            .with_duration(LEASE_DURATION_SECONDS)
            .with_grace(LEASE_GRACE_SECONDS)
            .build()
            .await
            .map_err(|e| OperatorError::Lease(e.to_string()))
    }
}

/// Joins the election; the receiver says whether this replica leads. Fails
/// when the Lease cannot be read or created (RBAC, API server down).
pub async fn start(
    client: &Client,
    config: &RunConfig,
) -> Result<(watch::Receiver<bool>, Election), OperatorError> {
    let params = Params {
        client: client.clone(),
        namespace: config.lease_namespace(),
        name: config.lease_name.clone(),
        identity: config.identity.clone(),
    };
    let first = params.manager().await?;
    let (leader_tx, leader_rx) = watch::channel(false);
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(elect(params, first, leader_tx, stop_rx));
    Ok((leader_rx, Election { stop, task }))
}

impl Election {
    /// Stops campaigning and gives the Lease back if held, within `within`.
    pub async fn stop(self, within: Duration) {
        let _ = self.stop.send(true);
        match tokio::time::timeout(within, self.task).await {
            Ok(_) => tracing::info!("left the leader election (lease released if held)"),
            Err(_) => tracing::warn!("lease not released in time; it expires on its own"),
        }
    }
}

/// Whether the Lease has no holder (released, or never taken).
fn is_free(lease: &Lease) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .is_none_or(str::is_empty)
}

async fn elect(
    params: Params,
    first: LeaseManager,
    leader: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let leases: Api<Lease> = Api::namespaced(params.client.clone(), &params.namespace);
    let wc = watcher::Config::default().fields(&format!("metadata.name={}", params.name));
    let mut lease_events = watcher(leases, wc)
        .default_backoff()
        .applied_objects()
        .boxed();
    let mut next = Some(first);
    loop {
        let manager = match next.take() {
            Some(m) => m,
            None => match params.manager().await {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: retrying in 1s");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        _ = stop.changed() => return,
                    }
                }
            },
        };
        let (mut term, manager_task) = manager.watch().await;
        let restart = loop {
            let leading = *term.borrow_and_update();
            leader.send_if_modified(|v| std::mem::replace(v, leading) != leading);
            tokio::select! {
                changed = term.changed() => if changed.is_err() {
                    // the manager gave up (API errors): start a new one
                    break true;
                },
                Some(event) = lease_events.next(), if !leading => {
                    if event.as_ref().is_ok_and(is_free) {
                        tracing::debug!("the lease was released: campaigning now");
                        break true;
                    }
                }
                _ = stop.changed() => break false,
            }
        };
        // Closing the channel makes the manager release the Lease if it
        // holds it, then end.
        drop(term);
        match manager_task.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "leader election ended with an error"),
            Err(e) => tracing::warn!(error = %e, "leader election task failed"),
        }
        if !restart {
            leader.send_replace(false);
            return;
        }
        leader.send_replace(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_without_holder_is_free() {
        let held: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}
        }))
        .unwrap_or_default();
        let released: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "l"}, "spec": {"holderIdentity": null}
        }))
        .unwrap_or_default();
        let empty: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "l"}, "spec": {"holderIdentity": ""}
        }))
        .unwrap_or_default();
        assert!(!is_free(&held));
        assert!(is_free(&released));
        assert!(is_free(&empty));
        assert!(is_free(&Lease::default()));
    }
}
