//! Cache sync and watch health: which caches have their first list, and the
//! last API error each watch met, so a replica that cannot become ready says
//! what it waits for (for example RBAC denying the policy list). A cache the
//! operator can do without (the nodes, which a namespace-scoped install
//! without its ClusterRole may not read) counts as synced once its list has
//! been refused for [`REFUSED_GRACE`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{Lookup, Store};
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;

/// How often a replica that is not ready says what it waits for.
pub const WAITING_LOG_EVERY: Duration = Duration::from_secs(15);

/// What a watch stream yields.
pub(super) type WatchResult<K> = Result<watcher::Event<K>, watcher::Error>;

/// How long a cache the operator can do without must be refused (403)
/// before the operator goes on without it: longer than the moments after an
/// install when the operator runs before its RBAC has reached the API
/// server's authorizer.
pub const REFUSED_GRACE: Duration = Duration::from_secs(30);

/// How often a cache the operator goes on without is listed again: its list
/// stays refused until someone grants the ClusterRole, and kube warns of
/// each refusal, so every few seconds filled the log (10 warnings a minute).
pub const GONE_WITHOUT_RETRY: Duration = REFUSED_GRACE;

/// Told, for each cache the operator may go without, whether it now does.
type GoneWithoutReport = Box<dyn Fn(&'static str, bool) + Send + Sync>;

/// The caches the operator needs before it plans, by name.
#[derive(Default)]
pub struct WatchHealth {
    caches: Mutex<BTreeMap<&'static str, CacheState>>,
    ready: AtomicBool,
    report: OnceLock<GoneWithoutReport>,
}

impl std::fmt::Debug for WatchHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHealth")
            .field("caches", &self.caches)
            .field("ready", &self.ready)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default, Clone)]
struct CacheState {
    synced: bool,
    last_error: Option<String>,
    /// What is lost when the operator goes on without this cache, refused;
    /// `None`: it never does.
    optional: Option<&'static str>,
    /// Since when every list or watch of it has been refused (403).
    refused_since: Option<Instant>,
    /// Counted as synced while refused: the operator goes on without it.
    gone_without: bool,
}

impl WatchHealth {
    /// Health for the named caches, none synced yet.
    pub fn new(names: &[&'static str]) -> Arc<Self> {
        let caches = names.iter().map(|n| (*n, CacheState::default())).collect();
        Arc::new(WatchHealth {
            caches: Mutex::new(caches),
            ready: AtomicBool::new(false),
            report: OnceLock::new(),
        })
    }

    /// Lets the operator go on without `cache` once it has been refused for
    /// [`REFUSED_GRACE`] (see the module doc); `lost` says what that costs,
    /// in the warning then logged.
    pub fn may_go_without(&self, cache: &'static str, lost: &'static str) {
        if let Ok(mut caches) = self.caches.lock() {
            caches.entry(cache).or_default().optional = Some(lost);
        }
    }

    /// Calls `report(cache, gone)` now for each cache the operator may go
    /// without, and again whenever it starts or stops going without one
    /// (the metrics' gauge). Only the first report set is kept.
    pub fn report_gone_without(&self, report: impl Fn(&'static str, bool) + Send + Sync + 'static) {
        let Ok(caches) = self.caches.lock() else {
            return;
        };
        for (name, state) in caches.iter().filter(|(_, s)| s.optional.is_some()) {
            report(name, state.gone_without);
        }
        let _ = self.report.set(Box::new(report));
    }

    /// The caches the operator goes on without, refused.
    pub fn gone_without(&self) -> Vec<&'static str> {
        self.caches
            .lock()
            .map(|c| {
                c.iter()
                    .filter(|(_, s)| s.gone_without)
                    .map(|(n, _)| *n)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn reported(&self, cache: &'static str, gone: bool) {
        if let Some(report) = self.report.get() {
            report(cache, gone);
        }
    }

    /// Notes a watch event of `cache`: an error is kept until the next success.
    pub fn observe<K>(&self, cache: &'static str, event: &WatchResult<K>) {
        self.observe_at(cache, event, Instant::now());
    }

    fn observe_at<K>(&self, cache: &'static str, event: &WatchResult<K>, now: Instant) {
        // `Init` starts each list attempt, before its request: no success
        if matches!(event, Ok(watcher::Event::Init)) {
            return;
        }
        let Ok(mut caches) = self.caches.lock() else {
            return;
        };
        let entry = caches.entry(cache).or_default();
        match event {
            Err(e) => {
                entry.last_error = Some(crate::error_chain(e));
                if !is_refused(e) {
                    entry.refused_since = None;
                    return;
                }
                let since = *entry.refused_since.get_or_insert(now);
                let refused_for = now.saturating_duration_since(since);
                if let (Some(lost), false) = (entry.optional, entry.synced) {
                    if refused_for < REFUSED_GRACE {
                        return;
                    }
                    entry.synced = true;
                    entry.gone_without = true;
                    tracing::warn!(
                        cache,
                        refused_for_seconds = refused_for.as_secs(),
                        error = entry.last_error.as_deref().unwrap_or_default(),
                        lost,
                        "going on without this cache until its list is allowed"
                    );
                    if caches.values().all(|c| c.synced) {
                        self.ready.store(true, Ordering::Relaxed);
                    }
                    self.reported(cache, true);
                }
            }
            Ok(_) => {
                entry.last_error = None;
                entry.refused_since = None;
                if std::mem::take(&mut entry.gone_without) {
                    tracing::info!(cache, "the cache is allowed again");
                    self.reported(cache, false);
                }
            }
        }
    }

    /// Whether the operator goes on without `cache`.
    pub fn is_gone_without(&self, cache: &str) -> bool {
        self.caches
            .lock()
            .is_ok_and(|c| c.get(cache).is_some_and(|s| s.gone_without))
    }

    /// `backoff` for `cache`'s watch, waiting at least
    /// [`GONE_WITHOUT_RETRY`] while the operator goes on without it.
    pub fn patient<B: Backoff>(self: Arc<Self>, cache: &'static str, backoff: B) -> impl Backoff {
        Patient {
            backoff,
            health: self,
            cache,
        }
    }

    /// [`observe`](Self::observe) as a closure for a watch stream's `inspect`.
    pub fn observer<K>(
        self: &Arc<Self>,
        cache: &'static str,
    ) -> impl FnMut(&WatchResult<K>) + Send + 'static {
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

/// See [`WatchHealth::patient`].
struct Patient<B> {
    backoff: B,
    health: Arc<WatchHealth>,
    cache: &'static str,
}

impl<B: Backoff> Iterator for Patient<B> {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.backoff.next()?;
        Some(if self.health.is_gone_without(self.cache) {
            delay.max(GONE_WITHOUT_RETRY)
        } else {
            delay
        })
    }
}

impl<B: Backoff> Backoff for Patient<B> {
    fn reset(&mut self) {
        self.backoff.reset();
    }
}

/// Whether the API server refused the request (403 Forbidden).
fn is_refused(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
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

/// How a watch stream is retried after an error: with [`watch_backoff`],
/// after leaving out kube's `Init` event. `Init` starts every list attempt
/// before its request, and `.backoff()` resets on any `Ok`: it kept a list
/// refused for good retried every half second instead of backing off.
pub(super) trait Retried<K>: Stream<Item = WatchResult<K>> + Sized {
    fn retried(self) -> impl Stream<Item = WatchResult<K>> {
        self.without_init().backoff(watch_backoff())
    }

    /// [`retried`](Retried::retried), but only every
    /// [`GONE_WITHOUT_RETRY`] while the operator goes on without
    /// `cache` (see [`WatchHealth::patient`]).
    fn retried_patiently(
        self,
        health: Arc<WatchHealth>,
        cache: &'static str,
    ) -> impl Stream<Item = WatchResult<K>> {
        self.without_init()
            .backoff(health.patient(cache, watch_backoff()))
    }

    /// Leaves out `Init`, which comes before every list attempt's request.
    fn without_init(self) -> impl Stream<Item = WatchResult<K>> {
        self.filter(|e| std::future::ready(!matches!(e, Ok(watcher::Event::Init))))
    }
}

impl<K, S: Stream<Item = WatchResult<K>>> Retried<K> for S {}

/// Retry timing of the watches: exponential from 0.5 s, capped at 5 s (kube's
/// default grows to 30 s: after an API server restart the operator then saw
/// a policy's new spec about a minute late), reset after a minute without
/// errors.
fn watch_backoff() -> ResetTimerBackoff<watcher::ExponentialBackoff> {
    ResetTimerBackoff::new(
        watcher::ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(500))
                .with_max_delay(Duration::from_secs(5))
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        ),
        Duration::from_secs(60),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_kept_until_the_next_success_and_ready_needs_every_cache() {
        let h = WatchHealth::new(&["pods", "policies"]);
        let err: WatchResult<()> = Err(watcher::Error::NoResourceVersion);
        h.observe("policies", &err);
        let waiting = h.waiting_for();
        assert_eq!(waiting.len(), 2);
        assert!(waiting[1].1.as_deref().is_some_and(|e| !e.is_empty()));
        h.mark_synced("pods");
        assert!(!h.is_ready());
        h.observe("policies", &Ok(watcher::Event::<()>::InitDone));
        assert_eq!(h.waiting_for(), vec![("policies", None)]);
        h.mark_synced("policies");
        assert!(h.is_ready());
        assert!(h.waiting_for().is_empty());
    }

    fn refused(code: u16) -> WatchResult<()> {
        let status = kube::core::Status::failure("nodes is forbidden", "Forbidden").with_code(code);
        Err(watcher::Error::InitialListFailed(kube::Error::Api(
            status.boxed(),
        )))
    }

    #[test]
    fn a_cache_the_operator_can_do_without_counts_as_synced_after_the_grace() {
        let h = WatchHealth::new(&["pods", "nodes"]);
        h.may_go_without("nodes", "no node labels");
        let reports = Arc::new(Mutex::new(Vec::new()));
        let seen = reports.clone();
        h.report_gone_without(move |cache, gone| seen.lock().unwrap().push((cache, gone)));
        h.mark_synced("pods");
        let t0 = Instant::now();
        h.observe_at("nodes", &refused(403), t0);
        h.observe_at("nodes", &refused(403), t0 + REFUSED_GRACE / 2);
        assert!(!h.is_ready(), "ready inside the grace");
        // another error starts the count again
        h.observe_at("nodes", &refused(500), t0 + REFUSED_GRACE / 2);
        h.observe_at("nodes", &refused(403), t0 + REFUSED_GRACE);
        assert!(!h.is_ready(), "a 500 did not restart the grace");
        // each list attempt starts with `Init`: no success, the grace runs on
        h.observe_at(
            "nodes",
            &Ok(watcher::Event::<()>::Init),
            t0 + REFUSED_GRACE * 3 / 2,
        );
        assert_eq!(*reports.lock().unwrap(), [("nodes", false)]);
        assert!(h.gone_without().is_empty());
        h.observe_at("nodes", &refused(403), t0 + REFUSED_GRACE * 2);
        assert!(h.is_ready());
        assert!(h.waiting_for().is_empty());
        assert_eq!(h.gone_without(), ["nodes"]);
        // refused on: reported once, not per retry
        h.observe_at("nodes", &refused(403), t0 + REFUSED_GRACE * 5 / 2);
        assert_eq!(
            *reports.lock().unwrap(),
            [("nodes", false), ("nodes", true)]
        );
        // allowed again: the error is gone, readiness stays
        h.observe_at(
            "nodes",
            &Ok(watcher::Event::<()>::InitDone),
            t0 + REFUSED_GRACE * 3,
        );
        assert!(h.is_ready());
        assert!(h.gone_without().is_empty());
        assert_eq!(
            *reports.lock().unwrap(),
            [("nodes", false), ("nodes", true), ("nodes", false)]
        );
    }

    /// A backoff of one fixed delay.
    struct Every(Duration);

    impl Iterator for Every {
        type Item = Duration;
        fn next(&mut self) -> Option<Duration> {
            Some(self.0)
        }
    }

    impl Backoff for Every {
        fn reset(&mut self) {}
    }

    #[test]
    fn a_cache_gone_without_is_retried_patiently_until_allowed() {
        let h = WatchHealth::new(&["pods", "nodes"]);
        h.may_go_without("nodes", "no node labels");
        h.mark_synced("pods");
        let short = Duration::from_secs(5);
        let mut nodes = h.clone().patient("nodes", Every(short));
        let mut pods = h.clone().patient("pods", Every(short));
        let t0 = Instant::now();
        h.observe_at("nodes", &refused(403), t0);
        assert_eq!(nodes.next(), Some(short), "inside the grace");
        h.observe_at("nodes", &refused(403), t0 + REFUSED_GRACE);
        assert!(h.is_gone_without("nodes"));
        assert_eq!(nodes.next(), Some(GONE_WITHOUT_RETRY));
        assert_eq!(pods.next(), Some(short), "only the cache gone without");
        h.observe_at(
            "nodes",
            &Ok(watcher::Event::<()>::InitDone),
            t0 + REFUSED_GRACE * 2,
        );
        assert_eq!(nodes.next(), Some(short), "allowed again");
    }

    #[test]
    fn a_cache_the_operator_needs_waits_however_long_it_is_refused() {
        let h = WatchHealth::new(&["pods", "policies"]);
        h.mark_synced("pods");
        let t0 = Instant::now();
        for k in 0..10 {
            h.observe_at("policies", &refused(403), t0 + REFUSED_GRACE * k);
        }
        assert!(!h.is_ready());
        let waiting = h.waiting_for();
        assert_eq!(waiting.len(), 1);
        assert!(
            waiting[0]
                .1
                .as_deref()
                .is_some_and(|e| e.contains("forbidden")),
            "{waiting:?}"
        );
    }
}
