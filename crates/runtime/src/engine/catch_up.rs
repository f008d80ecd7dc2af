//! A term's consistent read before its first write. A replica that takes
//! the Lease plans on the pod cache its watch keeps, which may not show yet
//! the last values the old leader wrote: planned on that, the new term's
//! first rounds would write some of them again. So before the term's writer
//! starts, the new leader lists the pods from the API server with a quorum
//! read (no resourceVersion: what etcd holds now) and waits until its cache
//! is at least as new for every pod listed, within [`WAIT_AT_MOST`] in all.
//! Only the namespaces that hold a policy are listed: pods elsewhere are
//! never written.
//!
//! [`caught_up`] is the pure judgement of one pod; [`CatchUp::run`] is the
//! shell that lists, pages and waits.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PartialObjectMeta};
use kube::{Api, Client};
use tokio::time::Instant;

use super::caches::Caches;
use crate::pod::{OurAnnotations, PodRecord};

/// Longest wait for the cache before the term writes anyway (its watch is
/// broken, say): the values it then rewrites are the cost of writing at all.
pub const WAIT_AT_MOST: Duration = Duration::from_secs(10);

/// Pods per page of the quorum list (continued pages read the same snapshot).
const PAGE: u32 = 500;

/// How often the cache is looked at again while it lags.
const POLL: Duration = Duration::from_millis(50);

/// First and longest pause between attempts to list.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// What the quorum list says of one pod: what the cache must show at least.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: Option<String>,
    /// resourceVersion as listed.
    pub resource_version: Option<String>,
    /// Our two annotations as listed.
    pub ours: OurAnnotations,
}

impl Listed {
    fn of(meta: &PartialObjectMeta<Pod>) -> Option<Listed> {
        let m = &meta.metadata;
        Some(Listed {
            namespace: m.namespace.clone()?,
            name: m.name.clone()?,
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            ours: OurAnnotations::of(m.annotations.as_ref()),
        })
    }
}

/// Whether the cache's record of a pod is at least as new as the quorum
/// list's, for what a round reads and writes of it:
/// - not cached: no round plans it, so none writes it (the watch adds it);
/// - another pod of that name cached (an older UID): not yet;
/// - the same resourceVersion, or the annotations this project reads the
///   same (our two, the autoscalers' marks): yes;
/// - else the newer resourceVersion, when both are numbers (etcd
///   revisions, as Kubernetes compares them); a version that is not a number
///   is not compared: not yet.
pub fn caught_up(listed: &Listed, cached: Option<&PodRecord>) -> bool {
    let Some(cached) = cached else {
        return true;
    };
    let id = &cached.identity;
    if id.uid != listed.uid {
        return false;
    }
    if id.resource_version == listed.resource_version || cached.ours == listed.ours {
        return true;
    }
    let revision = |v: &Option<String>| v.as_deref().and_then(|v| v.parse::<u64>().ok());
    match (
        revision(&id.resource_version),
        revision(&listed.resource_version),
    ) {
        (Some(seen), Some(wanted)) => seen >= wanted,
        _ => false,
    }
}

/// What a catch-up found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaughtUp {
    /// Pods the quorum list returned (none when it failed).
    pub listed: usize,
    /// Pods the cache still showed older when the wait ended (0: caught up).
    pub lagging: usize,
    /// Why the list failed, when it did.
    pub list_error: Option<String>,
}

/// The consistent read a new term does before its writer starts.
#[derive(Clone)]
pub struct CatchUp {
    client: Client,
    caches: Caches,
}

impl CatchUp {
    /// Lists pods with `client`, in the namespaces of the policies `caches`
    /// holds, and compares them with its pod cache.
    pub fn new(client: Client, caches: Caches) -> Self {
        CatchUp { client, caches }
    }

    /// The namespaces whose pods a round may write: those holding a policy
    /// (within the one the pod cache watches, for a namespace-scoped install).
    fn namespaces(&self) -> BTreeSet<String> {
        self.caches
            .policies()
            .iter()
            .filter_map(|p| p.metadata.namespace.clone())
            .filter(|ns| self.caches.pods_of().is_none_or(|only| only == ns))
            .collect()
    }

    /// Lists the pods of the policies' namespaces with a quorum read,
    /// keeping those the cache does not show as new yet.
    async fn lagging(&self) -> Result<(usize, Vec<Listed>), kube::Error> {
        let (mut listed, mut behind) = (0, Vec::new());
        for ns in self.namespaces() {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            let mut params = ListParams::default().limit(PAGE);
            loop {
                let page = api.list_metadata(&params).await?;
                for meta in &page.items {
                    let Some(pod) = Listed::of(meta) else {
                        continue;
                    };
                    listed += 1;
                    if !caught_up(&pod, self.caches.pod(&pod.namespace, &pod.name).as_deref()) {
                        behind.push(pod);
                    }
                }
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => break,
                }
            }
        }
        Ok((listed, behind))
    }

    /// Lists the pods (retrying until [`WAIT_AT_MOST`] is spent), then waits
    /// until the cache shows each at least as new as listed, or the time is
    /// spent: a list that is not done by then is given up. Never fails: the
    /// term writes anyway, and says what it found.
    pub async fn run(&self) -> CaughtUp {
        let started = Instant::now();
        let deadline = started + WAIT_AT_MOST;
        let mut pause = RETRY_FIRST;
        let (listed, mut behind) = loop {
            let give_up = |message: String| {
                tracing::warn!(error = %message, "the new term's quorum list of pods failed: writing on the cache as it is");
                CaughtUp {
                    listed: 0,
                    lagging: 0,
                    list_error: Some(message),
                }
            };
            let Ok(found) = tokio::time::timeout_at(deadline, self.lagging()).await else {
                return give_up(format!("not done within {} s", WAIT_AT_MOST.as_secs()));
            };
            match found {
                Ok(found) => break found,
                Err(e) if Instant::now() + pause >= deadline => {
                    return give_up(crate::error_chain(&e));
                }
                Err(e) => {
                    tracing::debug!(error = %crate::error_chain(&e), "the new term's quorum list of pods failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
        };
        let found_behind = behind.len();
        while !behind.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
            behind.retain(|p| !caught_up(p, self.caches.pod(&p.namespace, &p.name).as_deref()));
        }
        let took_ms = started.elapsed().as_millis() as u64;
        if behind.is_empty() {
            tracing::info!(
                listed,
                behind = found_behind,
                took_ms,
                "new term: the pod cache is as new as a quorum read"
            );
        } else {
            tracing::warn!(
                listed,
                lagging = behind.len(),
                took_ms,
                first = %format!("{}/{}", behind[0].namespace, behind[0].name),
                "new term: the pod cache still lags a quorum read; writing anyway (some values may be written again)"
            );
        }
        CaughtUp {
            listed,
            lagging: behind.len(),
            list_error: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::PodIdentity;

    fn listed(uid: &str, rv: &str, cost: Option<&str>) -> Listed {
        Listed {
            namespace: "shop".into(),
            name: "web-0".into(),
            uid: Some(uid.into()),
            resource_version: Some(rv.into()),
            ours: OurAnnotations {
                deletion_cost: cost.map(String::from),
                policy: cost.map(|_| "web".to_string()),
                ..Default::default()
            },
        }
    }

    fn cached(uid: &str, rv: &str, cost: Option<&str>) -> PodRecord {
        let mut pod = PodRecord {
            identity: PodIdentity {
                name: Some("web-0".into()),
                namespace: Some("shop".into()),
                uid: Some(uid.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        pod.ours.deletion_cost = cost.map(String::from);
        pod.ours.policy = cost.map(|_| "web".to_string());
        pod
    }

    fn caches_with_policies_in(namespaces: &[&str], pods_of: Option<&str>) -> Caches {
        use kube::runtime::{reflector, watcher};
        let (pods, _) = reflector::store::<crate::engine::caches::CachedPod>();
        let (nodes, _) = reflector::store();
        let (replica_sets, _) = reflector::store();
        let (policies, mut writer) = reflector::store::<crate::policy::DeletionCostPolicy>();
        for (i, ns) in namespaces.iter().enumerate() {
            let policy: crate::policy::DeletionCostPolicy =
                serde_json::from_value(serde_json::json!({
                "apiVersion": "deletioncost.dev/v1alpha1", "kind": "DeletionCostPolicy",
                "metadata": {"name": format!("p{i}"), "namespace": ns},
                "spec": {"selector": {"matchLabels": {"app": "web"}},
                         "signals": [{"billingClass": {"costs": {"spot": 0}}}]}}))
                .unwrap();
            writer.apply_watcher_event(&watcher::Event::Apply(policy));
        }
        Caches::new(
            pods,
            nodes,
            replica_sets,
            policies,
            pods_of.map(str::to_string),
        )
    }

    #[tokio::test]
    async fn only_the_namespaces_holding_a_policy_are_listed() {
        // a client that is never used: the namespaces come from the caches
        crate::prometheus::install_crypto_provider();
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let client_free = |caches: Caches| CatchUp::new(client.clone(), caches).namespaces();
        let all = client_free(caches_with_policies_in(&["shop", "shop", "ops"], None));
        assert_eq!(all, BTreeSet::from(["ops".to_string(), "shop".to_string()]));
        let scoped = client_free(caches_with_policies_in(&["shop", "ops"], Some("shop")));
        assert_eq!(scoped, BTreeSet::from(["shop".to_string()]));
        assert!(client_free(caches_with_policies_in(&[], None)).is_empty());
    }

    #[test]
    fn a_pod_not_cached_is_planned_by_no_round() {
        assert!(caught_up(&listed("u1", "10", Some("5")), None));
    }

    #[test]
    fn the_old_leaders_write_not_yet_seen_is_lagging() {
        // the list shows the cost the old leader wrote; the cache, the pod before it
        let l = listed("u1", "12", Some("5"));
        assert!(!caught_up(&l, Some(&cached("u1", "10", None))));
        // the watch delivered it
        assert!(caught_up(&l, Some(&cached("u1", "12", Some("5")))));
    }

    #[test]
    fn newer_in_the_cache_counts_as_caught_up() {
        let l = listed("u1", "12", Some("5"));
        // changed again since the list (someone else's value)
        assert!(caught_up(&l, Some(&cached("u1", "15", Some("7")))));
        // a status change the cache has not seen, with our values already shown
        assert!(caught_up(&l, Some(&cached("u1", "11", Some("5")))));
    }

    #[test]
    fn an_older_pod_of_that_name_is_lagging() {
        let l = listed("u2", "20", None);
        assert!(!caught_up(&l, Some(&cached("u1", "30", Some("5")))));
    }

    #[test]
    fn versions_that_are_not_numbers_are_not_compared() {
        let l = listed("u1", "b", Some("5"));
        assert!(!caught_up(&l, Some(&cached("u1", "a", None))));
        assert!(caught_up(&l, Some(&cached("u1", "b", None))));
    }
}
