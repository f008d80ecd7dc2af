//! Leader election on a Lease, written so that at most one replica writes
//! at any instant:
//!
//! - every change to the Lease (taking it, renewing it, giving it back) is a
//!   `PUT` carrying the `resourceVersion` this replica read, so a change
//!   based on a stale read fails with 409 instead of overwriting another
//!   replica's term; a new Lease is created with `POST`, which fails for the
//!   second creator;
//! - a Lease held by another replica is taken only after it has not changed
//!   for its whole `leaseDurationSeconds`, timed on this replica's clock from
//!   when it first saw that version (no clock comparison between machines);
//! - the term's write gate ([`Gate::Until`]) closes at the renew deadline
//!   counted from when the last successful renewal was *sent*: shorter than
//!   the lease duration, so a leader that cannot renew (API server down,
//!   process paused) has stopped writing before anyone may take over;
//! - a follower campaigns at once when the Lease is released (a watch), and
//!   a graceful stop gives the Lease back.
//!
//! What a term means for the rest of the operator (the patcher, the leader
//! label) is `crate::engine::leadership`.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::config::{LeaseTimings, RunConfig};
use super::error::OperatorError;
use super::sync::Retried;
use crate::writes::Gate;

/// The running election; [`Election::stop`] releases the Lease.
pub struct Election {
    /// Cancels the campaign when dropped (by [`Election::stop`], or with
    /// the election).
    stop: DropGuard,
    task: JoinHandle<()>,
}

/// Which Lease, who this replica is, and the timing.
#[derive(Clone)]
struct Params {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: LeaseTimings,
}

/// Joins the election; the receiver carries this replica's write gate.
/// Fails when the Lease cannot be read (RBAC, API server down).
pub async fn start(
    client: &Client,
    config: &RunConfig,
) -> Result<(watch::Receiver<Gate>, Election), OperatorError> {
    config
        .lease_timings
        .check()
        .map_err(OperatorError::Config)?;
    let params = Params {
        api: Api::namespaced(client.clone(), &config.lease_namespace()),
        name: config.lease_name.clone(),
        identity: config.identity.clone(),
        timings: config.lease_timings,
    };
    // one read up front: a replica that cannot read its Lease says so at start
    params
        .api
        .get_opt(&params.name)
        .await
        .map_err(|e| OperatorError::Lease(format!("reading Lease {}: {e}", params.name)))?;
    let (gate_tx, gate_rx) = watch::channel(Gate::Closed);
    let stop = CancellationToken::new();
    let task = tokio::spawn(elect(params, gate_tx, stop.clone()));
    Ok((
        gate_rx,
        Election {
            stop: stop.drop_guard(),
            task,
        },
    ))
}

impl Election {
    /// Stops campaigning and gives the Lease back if held, within `within`.
    pub async fn stop(self, within: Duration) {
        let Election { stop, task } = self;
        drop(stop);
        match tokio::time::timeout(within, task).await {
            Ok(_) => tracing::info!("left the leader election (lease released if held)"),
            Err(_) => tracing::warn!("lease not released in time; it expires on its own"),
        }
    }
}

/// Whether the Lease has no holder (released, or never taken).
fn is_free(lease: &Lease) -> bool {
    holder(lease).is_none()
}

fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

/// The version of another replica's Lease this replica saw, and since when
/// (on its own clock): the term is over once it has not changed for the
/// lease's duration.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Observed {
    version: Option<String>,
    since: Instant,
}

/// What one attempt decided, computed from the Lease as read (pure).
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// Held by another replica whose term is still running.
    Follow,
    /// Create the Lease (none exists).
    Create(Lease),
    /// Replace the Lease read (its resourceVersion is the precondition).
    Replace(Lease),
}

/// Decides an attempt: `read` is the Lease as read now, `observed` what this
/// replica saw of it before (updated here).
fn decide(
    read: Option<&Lease>,
    observed: &mut Option<Observed>,
    identity: &str,
    timings: &LeaseTimings,
    now: Instant,
    wall: Timestamp,
) -> Step {
    let Some(lease) = read else {
        *observed = None;
        return Step::Create(Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some(identity.to_string()),
                lease_duration_seconds: Some(seconds(timings.duration)),
                acquire_time: Some(MicroTime(wall)),
                renew_time: Some(MicroTime(wall)),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        });
    };
    let version = lease.metadata.resource_version.clone();
    if observed.as_ref().map(|o| &o.version) != Some(&version) {
        *observed = Some(Observed {
            version,
            since: now,
        });
    }
    let spec = lease.spec.clone().unwrap_or_default();
    let current = holder(lease);
    if let (Some(other), Some(seen)) = (current, observed.as_ref()) {
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(timings.duration);
        if other != identity && now.saturating_duration_since(seen.since) < duration {
            return Step::Follow;
        }
    }
    let taking = current != Some(identity);
    let mut next = lease.clone();
    let spec = next.spec.get_or_insert_with(LeaseSpec::default);
    if taking {
        spec.acquire_time = Some(MicroTime(wall));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
    }
    spec.holder_identity = Some(identity.to_string());
    spec.lease_duration_seconds = Some(seconds(timings.duration));
    spec.renew_time = Some(MicroTime(wall));
    Step::Replace(next)
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX)
}

/// The outcome of one attempt.
enum Attempt {
    /// This replica holds the Lease; the server recorded the renewal.
    Leading(Box<Lease>),
    /// Another replica holds it, or another change won the race (409).
    Following,
}

async fn attempt(params: &Params, observed: &mut Option<Observed>) -> Result<Attempt, kube::Error> {
    let read = params.api.get_opt(&params.name).await?;
    let step = decide(
        read.as_ref(),
        observed,
        &params.identity,
        &params.timings,
        Instant::now(),
        Timestamp::now(),
    );
    let written = match step {
        Step::Follow => return Ok(Attempt::Following),
        Step::Create(mut lease) => {
            lease.metadata.name = Some(params.name.clone());
            params.api.create(&PostParams::default(), &lease).await
        }
        Step::Replace(lease) => {
            params
                .api
                .replace(&params.name, &PostParams::default(), &lease)
                .await
        }
    };
    match written {
        Ok(lease) => Ok(Attempt::Leading(Box::new(lease))),
        // another replica's change came first: it holds the Lease
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Following),
        Err(e) => Err(e),
    }
}

/// Gives the Lease back, if this replica still holds the version it wrote
/// last (the resourceVersion is the precondition: a Lease someone else took
/// meanwhile is left alone).
async fn release(params: &Params, mine: Lease) {
    let mut lease = mine;
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
    }
    match params
        .api
        .replace(&params.name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => tracing::info!("lease released"),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            tracing::info!("lease not released: it changed since this replica's last renewal")
        }
        Err(e) => tracing::warn!(error = %e, "lease not released; it expires on its own"),
    }
}

async fn elect(params: Params, gate: watch::Sender<Gate>, stop: CancellationToken) {
    let wc = watcher::Config::default()
        .fields(&format!("metadata.name={}", params.name))
        .list_semantic(watcher::ListSemantic::MostRecent);
    let mut lease_events = watcher(params.api.clone(), wc)
        .retried()
        .applied_objects()
        .boxed();
    let timings = params.timings;
    let mut observed: Option<Observed> = None;
    // the Lease as the server recorded this replica's last renewal
    let mut mine: Option<Lease> = None;
    let mut renewed_at: Option<Instant> = None;
    loop {
        let sent = Instant::now();
        // an attempt that hangs must not outlive the renew deadline
        let result = tokio::time::timeout(timings.retry_period, attempt(&params, &mut observed))
            .await
            .unwrap_or_else(|_| {
                Err(kube::Error::Service(
                    "the Lease request timed out".to_string().into(),
                ))
            });
        match result {
            Ok(Attempt::Leading(lease)) => {
                if mine.is_none() {
                    tracing::info!(identity = %params.identity, "took the lease");
                }
                mine = Some(*lease);
                renewed_at = Some(sent);
                gate.send_replace(Gate::Until(sent + timings.renew_deadline));
            }
            Ok(Attempt::Following) => {
                if mine.take().is_some() {
                    tracing::warn!("lost the lease to another replica");
                }
                renewed_at = None;
                gate.send_if_modified(|g| std::mem::replace(g, Gate::Closed) != Gate::Closed);
            }
            Err(e) => {
                // the gate closes by itself at the deadline; the term is
                // given up for good only once it has passed
                let expired =
                    renewed_at.is_some_and(|t| t + timings.renew_deadline <= Instant::now());
                tracing::warn!(error = %e, leading = mine.is_some(), "leader election: the Lease could not be read or renewed");
                if expired {
                    tracing::warn!("renew deadline passed: writes stopped, leadership given up");
                    mine = None;
                    renewed_at = None;
                    gate.send_replace(Gate::Closed);
                }
            }
        }
        let leading = mine.is_some();
        let wait = tokio::time::sleep(timings.retry_period);
        tokio::pin!(wait);
        loop {
            tokio::select! {
                _ = &mut wait => break,
                Some(event) = lease_events.next(), if !leading => {
                    if event.as_ref().is_ok_and(is_free) {
                        tracing::debug!("the lease was released: campaigning now");
                        observed = None;
                        break;
                    }
                }
                _ = stop.cancelled() => {
                    gate.send_replace(Gate::Closed);
                    if let Some(lease) = mine.take() {
                        release(&params, lease).await;
                    }
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, rv: &str) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "l", "resourceVersion": rv},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "leaseTransitions": 2}
        }))
        .unwrap_or_default()
    }

    fn timings() -> LeaseTimings {
        LeaseTimings::default()
    }

    #[test]
    fn a_lease_without_holder_is_free() {
        assert!(!is_free(&lease(Some("a"), "1")));
        assert!(is_free(&lease(None, "1")));
        assert!(is_free(&lease(Some(""), "1")));
        assert!(is_free(&Lease::default()));
    }

    #[test]
    fn another_holder_is_followed_until_its_version_is_unchanged_for_the_duration() {
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let mut seen = None;
        let held = lease(Some("b"), "7");
        let d = |s| t0 + Duration::from_secs(s);
        assert_eq!(
            decide(Some(&held), &mut seen, "a", &timings(), t0, wall),
            Step::Follow
        );
        assert_eq!(
            decide(Some(&held), &mut seen, "a", &timings(), d(14), wall),
            Step::Follow
        );
        // b renewed (a new version): the clock starts again
        let renewed = lease(Some("b"), "8");
        assert_eq!(
            decide(Some(&renewed), &mut seen, "a", &timings(), d(14), wall),
            Step::Follow
        );
        assert_eq!(
            decide(Some(&renewed), &mut seen, "a", &timings(), d(28), wall),
            Step::Follow
        );
        let Step::Replace(taken) = decide(Some(&renewed), &mut seen, "a", &timings(), d(29), wall)
        else {
            panic!("an expired term is taken");
        };
        // the precondition is the version read; a takeover counts a transition
        assert_eq!(taken.metadata.resource_version.as_deref(), Some("8"));
        let spec = taken.spec.unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(3));
        assert!(spec.acquire_time.is_some());
    }

    #[test]
    fn a_free_or_own_lease_is_written_with_its_version_and_a_missing_one_created() {
        let now = Instant::now();
        let wall = Timestamp::now();
        let mut seen = None;
        let Step::Replace(taken) = decide(
            Some(&lease(None, "3")),
            &mut seen,
            "a",
            &timings(),
            now,
            wall,
        ) else {
            panic!("a released lease is taken at once");
        };
        assert_eq!(taken.metadata.resource_version.as_deref(), Some("3"));
        let Step::Replace(renewed) = decide(
            Some(&lease(Some("a"), "4")),
            &mut seen,
            "a",
            &timings(),
            now,
            wall,
        ) else {
            panic!("the holder renews");
        };
        let spec = renewed.spec.unwrap_or_default();
        // a renewal is no transition
        assert_eq!(
            (
                spec.lease_transitions,
                renewed.metadata.resource_version.as_deref()
            ),
            (Some(2), Some("4"))
        );
        assert!(matches!(
            decide(None, &mut seen, "a", &timings(), now, wall),
            Step::Create(_)
        ));
    }

    #[test]
    fn timings_must_leave_room_between_the_deadline_and_the_expiry() {
        assert!(timings().check().is_ok());
        let bad = LeaseTimings {
            renew_deadline: Duration::from_secs(15),
            ..timings()
        };
        assert!(bad.check().unwrap_err().contains("--renew-deadline"));
        let bad = LeaseTimings {
            retry_period: Duration::from_secs(10),
            ..timings()
        };
        assert!(bad.check().unwrap_err().contains("--retry-period"));
    }
}
