//! Cache sync and watch health: which caches have their first list, and the
//! last API error each watch met, so a replica that cannot become ready says
//! what it waits for (for example RBAC denying the policy list).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::reflector::{Lookup, Store};
use kube::runtime::watcher;

/// How often a replica that is not ready says what it waits for.
pub const WAITING_LOG_EVERY: Duration = Duration::from_secs(15);

/// The caches the operator needs before it plans, by name.
#[derive(Debug, Default)]
pub struct WatchHealth {
    caches: Mutex<BTreeMap<&'static str, CacheState>>,
    ready: AtomicBool,
}

#[derive(Debug, Default, Clone)]
struct CacheState {
    synced: bool,
    last_error: Option<String>,
}

impl WatchHealth {
    /// Health for the named caches, none synced yet.
    pub fn new(names: &[&'static str]) -> Arc<Self> {
        let caches = names.iter().map(|n| (*n, CacheState::default())).collect();
        Arc::new(WatchHealth {
            caches: Mutex::new(caches),
            ready: AtomicBool::new(false),
        })
    }

    /// Notes a watch event of `cache`: an error is kept until the next success.
    pub fn observe<T>(&self, cache: &'static str, event: &Result<T, watcher::Error>) {
        if let Ok(mut caches) = self.caches.lock() {
            let entry = caches.entry(cache).or_default();
            match event {
                Err(e) => entry.last_error = Some(crate::error_chain(e)),
                Ok(_) => entry.last_error = None,
            }
        }
    }

    /// [`observe`](Self::observe) as a closure for a watch stream's `inspect`.
    pub fn observer<T>(
        self: &Arc<Self>,
        cache: &'static str,
    ) -> impl FnMut(&Result<T, watcher::Error>) + Send + 'static {
        let health = self.clone();
        move |event| health.observe(cache, event)
    }

    /// Whether every cache has its first list.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    fn mark_synced(&self, cache: &'static str) {
        if let Ok(mut caches) = self.caches.lock() {
            caches.entry(cache).or_default().synced = true;
            if caches.values().all(|c| c.synced) {
                self.ready.store(true, Ordering::Relaxed);
            }
        }
    }

    /// The caches not synced yet, each with its last API error.
    pub fn waiting_for(&self) -> Vec<(&'static str, Option<String>)> {
        self.caches
            .lock()
            .map(|c| {
                c.iter()
                    .filter(|(_, s)| !s.synced)
                    .map(|(n, s)| (*n, s.last_error.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Marks `cache` synced once `store` has its first list.
    pub fn track<K>(self: &Arc<Self>, cache: &'static str, store: Store<K>)
    where
        K: Lookup + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let health = self.clone();
        tokio::spawn(async move {
            if store_ready(&store).await {
                tracing::debug!(cache, "cache synced");
                health.mark_synced(cache);
                if health.is_ready() {
                    tracing::info!("caches synced");
                }
            }
        });
    }

    /// Logs what the replica waits for until every cache has synced.
    pub async fn report_until_ready(self: Arc<Self>) {
        let mut tick = tokio::time::interval(WAITING_LOG_EVERY);
        tick.tick().await;
        loop {
            tick.tick().await;
            if self.is_ready() {
                return;
            }
            for (cache, error) in self.waiting_for() {
                match error {
                    Some(error) => tracing::warn!(
                        cache,
                        last_error = %error,
                        "not ready: waiting for the first list of this cache"
                    ),
                    None => {
                        tracing::warn!(cache, "not ready: waiting for the first list of this cache")
                    }
                }
            }
        }
    }
}

/// Waits until a store has its first list. kube's readiness signal is a
/// oneshot receiver shared by every waiter and keeps only the last waker:
/// when the Controller also waits on the policy store, an earlier waiter is
/// never woken and readiness hung forever (seen in the hook tests). Polling
/// again every 200 ms re-registers the waker.
pub async fn store_ready<K>(store: &Store<K>) -> bool
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        if let Ok(r) =
            tokio::time::timeout(Duration::from_millis(200), store.wait_until_ready()).await
        {
            return r.is_ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_kept_until_the_next_success_and_ready_needs_every_cache() {
        let h = WatchHealth::new(&["pods", "policies"]);
        let err: Result<(), watcher::Error> = Err(watcher::Error::NoResourceVersion);
        h.observe("policies", &err);
        let waiting = h.waiting_for();
        assert_eq!(waiting.len(), 2);
        assert!(waiting[1].1.as_deref().is_some_and(|e| !e.is_empty()));
        h.mark_synced("pods");
        assert!(!h.is_ready());
        h.observe("policies", &Ok::<(), watcher::Error>(()));
        assert_eq!(h.waiting_for(), vec![("policies", None)]);
        h.mark_synced("policies");
        assert!(h.is_ready());
        assert!(h.waiting_for().is_empty());
    }
}
