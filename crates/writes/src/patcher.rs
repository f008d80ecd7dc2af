//! The patcher: a handle callers submit to, and one worker task that sends
//! writes under the rate limits and records their results in the queue.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{oneshot, watch, Notify};
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;

use super::backoff::{retry_delay, BackoffConfig};
use super::gate::WriteGate;
use super::kind::{BudgetError, WriteKind};
use super::limits::{Limiter, Rate};
use super::patch::{PatchRequest, PodRef, PolicyKey};
use super::queue::{
    Admit, Candidate, Depth, Finished, Job, Queue, Submitted, WriteOutcome, WriteState,
};
use super::stats::{Count, PatcherStats, StatsSnapshot};
use super::writer::{PodWriter, WriteError};

/// How the patcher runs.
#[derive(Debug, Clone)]
pub struct PatcherConfig {
    /// Operator-wide write rate (`--qps`, `--burst`).
    pub rate: Rate,
    /// A second budget that only the pod writes of a scale-in
    /// ([`Priority::Urgent`]) draw on, before the operator-wide one
    /// (`--scale-in-allowance`): a scale-in that must rewrite hundreds of
    /// costs (under `writes: OnScaleIn`) lands them in a second or two,
    /// while background work, status writes and Events stay within `rate`.
    /// `None`: every write within `rate`.
    pub scale_in_allowance: Option<Rate>,
    /// Most pods tracked at once; beyond it submissions are refused.
    pub queue_capacity: usize,
    /// Most writes awaiting an answer at once.
    pub max_in_flight: usize,
    /// Most writes awaiting an answer at once while a scale-in's writes
    /// wait (they may fill the slots above `max_in_flight`): hundreds of a
    /// large scale-in's costs land within its budget.
    pub max_in_flight_urgent: usize,
    /// Give up on one write attempt after this long (then retry).
    pub write_timeout: Duration,
    /// Retry timing.
    pub backoff: BackoffConfig,
    /// Seed for retry jitter (None: a random one). Tests fix it.
    pub jitter_seed: Option<u64>,
    /// Whether a write may start now: checked right before each one.
    pub gate: WriteGate,
    /// The counters, shared across patchers (one per leadership term) so
    /// the exported totals never go back.
    pub stats: Arc<PatcherStats>,
}

impl PatcherConfig {
    /// Defaults around an operator-wide `rate`.
    pub fn new(rate: Rate) -> Self {
        PatcherConfig {
            rate,
            scale_in_allowance: None,
            queue_capacity: 100_000,
            max_in_flight: 16,
            max_in_flight_urgent: 64,
            write_timeout: Duration::from_secs(10),
            backoff: BackoffConfig::default(),
            jitter_seed: None,
            gate: WriteGate::open(),
            stats: Arc::default(),
        }
    }
}

/// Whether a batch goes ahead of background work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Regular reconcile work: fair share per policy, under its own limit;
    /// takes turns with the other writes (status, Events: [`Patcher::permit`]).
    Background,
    /// Pre-scale-down work: ahead of every other write (background pod
    /// writes, status, Events) and not held by the policy's own limit;
    /// from the scale-in allowance while it lasts, then inside the
    /// operator-wide limit.
    Urgent,
}

/// Why a submission was refused. Nothing of a refused submission is queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// Backpressure: the queue tracks `capacity` pods already.
    #[error("patch queue full (capacity {capacity} pods): {needed} new pod(s) starting with {pod} do not fit; resubmit later")]
    QueueFull {
        /// The configured capacity.
        capacity: usize,
        /// How many untracked pods the submission carried.
        needed: usize,
        /// The first untracked pod refused.
        pod: PodRef,
    },
    /// The patcher is draining or stopped.
    #[error("patcher is shutting down: pod {pod} not queued")]
    ShuttingDown {
        /// The first pod refused.
        pod: PodRef,
    },
}

/// Waits for the outcomes of one submitted batch.
#[derive(Debug)]
pub struct Batch {
    items: Vec<(PodRef, oneshot::Receiver<WriteOutcome>)>,
}

impl Batch {
    /// Number of requests in the batch.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the batch was empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Wait until every request of the batch has an outcome. Wrap in
    /// `tokio::time::timeout` to bound the wait.
    pub async fn wait(self) -> BatchReport {
        let mut outcomes = Vec::with_capacity(self.items.len());
        for (pod, rx) in self.items {
            // A dropped sender means the worker stopped without answering.
            let outcome = rx.await.unwrap_or(WriteOutcome::Abandoned);
            outcomes.push((pod, outcome));
        }
        BatchReport { outcomes }
    }
}

/// The outcomes of a batch, in submission order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReport {
    /// One outcome per submitted request.
    pub outcomes: Vec<(PodRef, WriteOutcome)>,
}

impl BatchReport {
    /// Whether every value landed or its pod is gone.
    pub fn all_done(&self) -> bool {
        self.outcomes
            .iter()
            .all(|(_, o)| matches!(o, WriteOutcome::Applied | WriteOutcome::Gone))
    }
}

/// What a drain achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainReport {
    /// Pods whose value had not landed at the deadline.
    pub abandoned: Vec<PodRef>,
}

impl DrainReport {
    /// Whether everything landed before the deadline.
    pub fn completed(&self) -> bool {
        self.abandoned.is_empty()
    }
}

struct PolicyLimit {
    limiter: Limiter,
    /// Earliest next token, learnt from the last refusal.
    held_until: Option<Instant>,
}

struct State {
    queue: Queue,
    global: Limiter,
    /// The scale-in allowance ([`PatcherConfig::scale_in_allowance`]).
    scale_in: Option<Limiter>,
    policies: HashMap<PolicyKey, PolicyLimit>,
    accepting: bool,
    drain_deadline: Option<Instant>,
    /// After a 429 no write goes before this.
    paused_until: Option<Instant>,
    /// Since when ready work has been held back by a rate limit.
    blocked_since: Option<Instant>,
    /// Writes other than pod patches (status, Events, the finalizer)
    /// waiting for a token of the operator-wide limit, first come first
    /// served; a dropped receiver is a waiter that gave up.
    permits: VecDeque<oneshot::Sender<()>>,
    /// Whether the next token that both a background pod write and a
    /// waiting permit want goes to the permit (they take turns).
    permit_turn: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Notify,
    stats: Arc<PatcherStats>,
    /// Pause after a 429 on a permitted write that names no delay.
    default_retry_after: Duration,
    done: watch::Sender<Option<DrainReport>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent between statements; a panic elsewhere
        // must not stop every later write.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Stops the worker when the last handle goes away.
struct Handle(Arc<Shared>);

impl Drop for Handle {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.accepting = false;
        let now = Instant::now();
        st.drain_deadline = Some(st.drain_deadline.map_or(now, |d| d.min(now)));
        drop(st);
        self.0.wake.notify_one();
    }
}

/// The rate-limited patcher (cheap to clone; all clones share one queue).
#[derive(Clone)]
pub struct Patcher {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Patcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Patcher")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Patcher {
    /// Start the worker on the current tokio runtime.
    pub fn start<W: PodWriter>(writer: W, config: PatcherConfig) -> Patcher {
        let (done, _) = watch::channel(None);
        let mut queue = Queue::new(config.queue_capacity);
        queue.set_max_attempts(config.backoff.max_attempts);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue,
                global: Limiter::new(config.rate),
                scale_in: config.scale_in_allowance.map(Limiter::new),
                policies: HashMap::new(),
                accepting: true,
                drain_deadline: None,
                paused_until: None,
                blocked_since: None,
                permits: VecDeque::new(),
                permit_turn: false,
            }),
            wake: Notify::new(),
            stats: Arc::clone(&config.stats),
            default_retry_after: config.backoff.default_retry_after,
            done,
        });
        tokio::spawn(run(Arc::clone(&shared), Arc::new(writer), config));
        Patcher {
            handle: Arc::new(Handle(shared)),
        }
    }

    fn shared(&self) -> &Shared {
        &self.handle.0
    }

    /// Set (or with `None` remove) a policy's own write limit. Keeping the
    /// same rate keeps the limiter's state.
    pub fn set_policy_rate(&self, policy: &PolicyKey, rate: Option<Rate>) {
        let mut st = self.shared().lock();
        match rate {
            None => {
                st.policies.remove(policy);
            }
            Some(rate) => {
                if st.policies.get(policy).map(|p| p.limiter.rate()) != Some(rate) {
                    st.policies.insert(
                        policy.clone(),
                        PolicyLimit {
                            limiter: Limiter::new(rate),
                            held_until: None,
                        },
                    );
                }
            }
        }
        drop(st);
        self.shared().wake.notify_one();
    }

    /// Queue several writes and get a [`Batch`] to wait for their outcomes
    /// (or drop it: nobody has to wait). A newer value for a pod replaces an
    /// older one not yet written. All or nothing: refused whole when the new
    /// pods do not fit.
    pub fn submit_batch(
        &self,
        reqs: Vec<PatchRequest>,
        priority: Priority,
    ) -> Result<Batch, SubmitError> {
        self.enqueue(reqs, priority)
    }

    fn enqueue(&self, reqs: Vec<PatchRequest>, priority: Priority) -> Result<Batch, SubmitError> {
        let shared = self.shared();
        let mut st = shared.lock();
        let Some(first) = reqs.first() else {
            return Ok(Batch { items: Vec::new() });
        };
        if !st.accepting {
            return Err(SubmitError::ShuttingDown {
                pod: first.pod.clone(),
            });
        }
        let needed = st.queue.room_needed(reqs.iter().map(|r| &r.pod));
        if needed > st.queue.room() {
            shared.stats.add(Count::Rejected, reqs.len() as u64);
            let pod = reqs
                .iter()
                .map(|r| &r.pod)
                .find(|p| st.queue.room_needed([*p]) == 1)
                .unwrap_or(&first.pod)
                .clone();
            tracing::warn!(
                namespace = %pod.namespace, pod = %pod.name, needed,
                "patch queue full, submission refused"
            );
            return Err(SubmitError::QueueFull {
                capacity: st.queue.capacity(),
                needed,
                pod,
            });
        }
        let urgent = priority == Priority::Urgent;
        let mut items = Vec::new();
        for req in reqs {
            let pod = req.pod.clone();
            let (tx, rx) = oneshot::channel();
            items.push((pod, rx));
            match st.queue.submit(req, urgent, Some(tx)) {
                Ok(Submitted::Coalesced) => shared.stats.add(Count::Coalesced, 1),
                Ok(_) => {}
                // Not reachable: room was checked above under the same lock.
                Err(_) => {}
            }
        }
        let depth = st.queue.depth();
        drop(st);
        shared.stats.set_queue_gauges(depth.pods, depth.retrying);
        shared.wake.notify_one();
        Ok(Batch { items })
    }

    /// Asks for a token of the operator-wide limit for one write that is not
    /// a pod patch (a status, an Event, the finalizer). The future resolves
    /// when the write's turn comes: after the urgent pod writes, in turns
    /// with background pod writes, only while the write gate is open, never
    /// during a 429's pause. It holds no handle on the patcher, so a term
    /// that ends (or a drain that runs out) refuses it instead of keeping
    /// the patcher alive; dropping it gives the place up.
    pub fn permit(
        &self,
        kind: WriteKind,
    ) -> Result<impl Future<Output = Result<Permit, BudgetError>> + Send + 'static, BudgetError>
    {
        let shared = Arc::clone(&self.handle.0);
        let (tx, rx) = oneshot::channel();
        {
            let mut st = shared.lock();
            if !st.accepting {
                return Err(BudgetError::TermEnded { kind: kind.label() });
            }
            st.permits.push_back(tx);
            shared.stats.set_permits_waiting(st.permits.len());
        }
        shared.wake.notify_one();
        Ok(async move {
            match rx.await {
                Ok(()) => Ok(Permit { kind, shared }),
                Err(_) => Err(BudgetError::TermEnded { kind: kind.label() }),
            }
        })
    }

    /// The newest value wanted for each pod of `policy` that has not landed
    /// yet (queued, in flight or waiting to retry), by pod.
    pub fn pending_for(&self, policy: &PolicyKey) -> Vec<PatchRequest> {
        self.shared().lock().queue.pending_for(policy)
    }

    /// What is known of the last value wanted for each of `pods`, in order
    /// (see [`WriteState`]).
    pub fn write_states<'a>(
        &self,
        pods: impl IntoIterator<Item = &'a PodRef>,
    ) -> Vec<Option<WriteState>> {
        let now = Instant::now();
        let st = self.shared().lock();
        pods.into_iter()
            .map(|p| st.queue.write_state(p, now))
            .collect()
    }

    /// The values of `policy` that failed for good and were not followed by
    /// one that landed, with their errors.
    pub fn failed_for(&self, policy: &PolicyKey) -> Vec<(PatchRequest, WriteError)> {
        self.shared().lock().queue.failed_for(policy)
    }

    /// Forgets the failures of `policy`'s pods that `keep` rejects (pods
    /// that went away, or that the policy no longer wants to write).
    pub fn retain_failed(&self, policy: &PolicyKey, keep: impl Fn(&PodRef) -> bool) {
        self.shared().lock().queue.retain_failed(policy, keep);
    }

    /// Drops every value of `policy` not sent yet (the policy was deleted);
    /// returns the pods with one of its writes in flight.
    pub fn cancel_policy(&self, policy: &PolicyKey) -> Vec<PodRef> {
        let shared = self.shared();
        let mut st = shared.lock();
        let in_flight = st.queue.cancel_policy(policy);
        st.policies.remove(policy);
        let depth = st.queue.depth();
        drop(st);
        shared.stats.set_queue_gauges(depth.pods, depth.retrying);
        in_flight
    }

    /// Drops the values of `pods` not sent yet (see [`Queue::cancel_pods`]);
    /// returns the values in flight.
    pub fn cancel_pods(&self, pods: &std::collections::HashSet<PodRef>) -> Vec<PatchRequest> {
        let shared = self.shared();
        let mut st = shared.lock();
        let in_flight = st.queue.cancel_pods(pods);
        let depth = st.queue.depth();
        drop(st);
        shared.stats.set_queue_gauges(depth.pods, depth.retrying);
        in_flight
    }

    /// Whether nothing is queued, in flight or waiting to retry. For tests
    /// and benches: the operator asks [`Patcher::pending_for`] per policy.
    #[doc(hidden)]
    pub fn is_idle(&self) -> bool {
        self.shared().lock().queue.is_empty()
    }

    /// The counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared().stats.snapshot()
    }

    /// Stop accepting work and keep writing until the queue is empty or
    /// `within` has passed; what has not landed by then is abandoned (and
    /// its waiters told so). Idempotent: a second call returns the same report.
    pub async fn drain(&self, within: Duration) -> DrainReport {
        let shared = self.shared();
        let mut rx = shared.done.subscribe();
        {
            let mut st = shared.lock();
            st.accepting = false;
            let deadline = Instant::now() + within;
            st.drain_deadline = Some(st.drain_deadline.map_or(deadline, |d| d.min(deadline)));
        }
        shared.wake.notify_one();
        let report = rx.wait_for(Option::is_some).await.map(|r| r.clone());
        // Err: the worker is gone without a report; nothing more will be written.
        report.ok().flatten().unwrap_or(DrainReport {
            abandoned: Vec::new(),
        })
    }
}

/// Leave to send one write that is not a pod patch, granted out of the
/// operator-wide limit ([`Patcher::permit`]). Say what became of the write
/// with [`Permit::finish`].
pub struct Permit {
    kind: WriteKind,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit").field("kind", &self.kind).finish()
    }
}

impl Permit {
    /// What the write changes.
    pub fn kind(&self) -> WriteKind {
        self.kind
    }

    /// Records what became of the write: counted by kind and outcome, and a
    /// 429 holds every write (pods too) for the server's delay, as a 429 on
    /// a pod write does.
    pub fn finish(self, result: &Result<(), WriteError>) {
        let outcome = match result {
            Ok(()) => "ok",
            Err(e) => e.label(),
        };
        self.shared.stats.add_write(self.kind, outcome);
        if let Err(WriteError::TooManyRequests { retry_after }) = result {
            let until = Instant::now() + retry_after.unwrap_or(self.shared.default_retry_after);
            let mut st = self.shared.lock();
            st.paused_until = Some(st.paused_until.map_or(until, |p| p.max(until)));
            drop(st);
            self.shared.wake.notify_one();
        }
        if let Err(e) = result {
            // the writer reports it in its own terms (the reconcile's error)
            tracing::debug!(kind = self.kind.label(), error = %e, "write failed");
        }
    }
}

fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Who gets the next token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// An urgent pod write (a scale-in's).
    Urgent,
    /// A background pod write.
    Pod,
    /// The first waiting permit (a status, an Event, the finalizer).
    Permit,
}

/// Free in-flight slots: background pod writes use the first, a scale-in's
/// writes the second (which counts the same writes against a higher cap).
#[derive(Debug, Clone, Copy)]
struct Room {
    background: usize,
    urgent: usize,
}

impl Room {
    fn take(&mut self) {
        self.background = self.background.saturating_sub(1);
        self.urgent = self.urgent.saturating_sub(1);
    }
}

/// Send what the limits allow now: urgent pod writes first, then waiting
/// permits and background pod writes in turns. Returns the pod jobs to
/// start (permits are granted here) and when to look again.
fn dispatch(
    st: &mut State,
    now: Instant,
    mut room: Room,
    stats: &PatcherStats,
    gate: &WriteGate,
) -> (Vec<Job>, Option<Instant>) {
    let mut jobs = Vec::new();
    let mut wake = None;
    st.queue.promote_due(now);
    // outside a term nothing goes; the gate's change wakes the worker
    if !gate.get().allows(now) {
        return (jobs, None);
    }
    loop {
        if let Some(until) = st.paused_until {
            if now < until {
                wake = earlier(wake, Some(until));
                break;
            }
            st.paused_until = None;
        }
        // waiters that gave up lose their place
        st.permits.retain(|tx| !tx.is_closed());
        let Some(next) = next_writer(st, now, room, &mut wake) else {
            break;
        };
        // a scale-in's write takes the allowance's token while there is
        // one; every other write, and a scale-in's past the allowance,
        // the operator-wide limit's
        let allowed = next == Next::Urgent
            && st
                .scale_in
                .as_ref()
                .is_some_and(|l| l.try_acquire().is_ok());
        if allowed {
            stats.add_scale_in_allowance();
        } else if let Err(t) = st.global.try_acquire() {
            if next != Next::Permit {
                st.blocked_since.get_or_insert(now);
            }
            wake = earlier(wake, Some(t));
            break;
        }
        if next == Next::Permit {
            if let Some(tx) = st.permits.pop_front() {
                // a waiter gone since the check wastes the token: fewer
                // writes, never more
                let _ = tx.send(());
            }
            st.permit_turn = false;
            continue;
        }
        match pick_pod(st, now) {
            Ok(job) => {
                if let Some(since) = st.blocked_since.take() {
                    stats.add_wait(now - since);
                }
                jobs.push(job);
                room.take();
                st.permit_turn = true;
            }
            Err(t) => {
                // Every policy with work was at its own limit: the global
                // token goes unused, which errs on the side of fewer writes.
                st.blocked_since.get_or_insert(now);
                wake = earlier(wake, t);
                break;
            }
        }
    }
    stats.set_permits_waiting(st.permits.len());
    (jobs, earlier(wake, st.queue.next_retry()))
}

/// Who gets the next token: an urgent pod write, else a waiting permit on
/// its turn (or when no pod write is ready), else a ready pod write. `None`
/// when nothing may go now; `wake` then says when to look again.
fn next_writer(
    st: &mut State,
    now: Instant,
    room: Room,
    wake: &mut Option<Instant>,
) -> Option<Next> {
    let pods = if room.urgent > 0 {
        let policies = &st.policies;
        let held = |p: &PolicyKey| {
            policies
                .get(p)
                .and_then(|l| l.held_until)
                .filter(|t| *t > now)
        };
        Some(st.queue.candidate(held))
    } else {
        // every in-flight slot taken: pods wait for one, permits need none
        None
    };
    let urgent = pods == Some(Candidate::Ready) && st.queue.urgent_ready();
    // past `max_in_flight` only a scale-in's writes go
    let pods = pods.filter(|_| room.background > 0);
    let permit_waits = !st.permits.is_empty();
    let next = if urgent {
        Next::Urgent
    } else if permit_waits && (st.permit_turn || pods != Some(Candidate::Ready)) {
        Next::Permit
    } else {
        match pods {
            Some(Candidate::Ready) => Next::Pod,
            Some(Candidate::BlockedUntil(t)) => {
                st.blocked_since.get_or_insert(now);
                *wake = earlier(*wake, Some(t));
                return None;
            }
            Some(Candidate::Idle) => {
                st.blocked_since = None;
                return None;
            }
            None => return None,
        }
    };
    Some(next)
}

/// Picks the next pod write its policy's own limit admits (taking one of
/// its tokens); `Err` says when a held policy frees up.
fn pick_pod(st: &mut State, now: Instant) -> Result<Job, Option<Instant>> {
    let policies = &mut st.policies;
    let admit = |p: &PolicyKey| match policies.get_mut(p) {
        None => Admit::Yes,
        Some(limit) => match limit.held_until.filter(|t| *t > now) {
            Some(t) => Admit::NotUntil(t),
            None => match limit.limiter.try_acquire() {
                Ok(()) => {
                    limit.held_until = None;
                    Admit::Yes
                }
                Err(t) => {
                    limit.held_until = Some(t);
                    Admit::NotUntil(t)
                }
            },
        },
    };
    st.queue.pick(admit)
}

type Done = (PodRef, Result<(), WriteError>);

async fn run<W: PodWriter>(shared: Arc<Shared>, writer: Arc<W>, cfg: PatcherConfig) {
    let mut gate = cfg.gate.clone();
    let mut inflight: JoinSet<Done> = JoinSet::new();
    let mut jobs: HashMap<tokio::task::Id, Job> = HashMap::new();
    let mut rng = cfg
        .jitter_seed
        .map(fastrand::Rng::with_seed)
        .unwrap_or_default(); // a random seed
    let max_in_flight = cfg.max_in_flight.max(1);
    let max_urgent = cfg.max_in_flight_urgent.max(max_in_flight);
    loop {
        let now = Instant::now();
        while let Some(res) = inflight.try_join_next_with_id() {
            on_done(&shared, &cfg, &mut rng, &mut jobs, res, now);
        }
        let room = Room {
            background: max_in_flight.saturating_sub(inflight.len()),
            urgent: max_urgent.saturating_sub(inflight.len()),
        };
        let (ready, wake, depth) = match next_step(&shared, &gate, now, room) {
            Ok(step) => step,
            Err(abandoned) => {
                inflight.abort_all();
                finish_drain(&shared, abandoned);
                return;
            }
        };
        for job in ready {
            start_write(job, &writer, &cfg, &gate, &mut inflight, &mut jobs);
        }
        shared
            .stats
            .set_gauges(depth.pods, depth.retrying, inflight.len());
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = gate.changed() => {
                if !gate.allows_now() {
                    // the term ended: writes already sent cannot be called
                    // back, but those not answered yet are dropped, which
                    // cancels them on the server if they are still waiting
                    abort_in_flight(&shared, &cfg, &mut rng, &mut jobs, &mut inflight);
                }
            }
            Some(res) = inflight.join_next_with_id(), if !inflight.is_empty() => {
                on_done(&shared, &cfg, &mut rng, &mut jobs, res, Instant::now());
            }
            _ = sleep_until_opt(wake) => {}
        }
    }
}

/// One look at the state under its lock: the jobs to start, when to look
/// again and the queue's depth; or, once the drain is over, the pods
/// abandoned (nothing more is accepted or granted).
fn next_step(
    shared: &Shared,
    gate: &WriteGate,
    now: Instant,
    room: Room,
) -> Result<(Vec<Job>, Option<Instant>, Depth), Vec<PodRef>> {
    let mut st = shared.lock();
    match st.drain_deadline {
        Some(deadline) if (st.queue.is_empty() && st.permits.is_empty()) || now >= deadline => {
            st.accepting = false;
            // permits still waiting are refused (their senders dropped)
            st.permits.clear();
            Err(st.queue.abandon_all())
        }
        _ => {
            let (ready, wake) = dispatch(&mut st, now, room, &shared.stats, gate);
            Ok((ready, earlier(wake, st.drain_deadline), st.queue.depth()))
        }
    }
}

/// Spawns the write of one job picked, under the write timeout; the task
/// is tracked in `inflight` and the job kept in `jobs` by its task's id.
fn start_write<W: PodWriter>(
    job: Job,
    writer: &Arc<W>,
    cfg: &PatcherConfig,
    gate: &WriteGate,
    inflight: &mut JoinSet<Done>,
    jobs: &mut HashMap<tokio::task::Id, Job>,
) {
    tracing::debug!(
        namespace = %job.req.pod.namespace, pod = %job.req.pod.name,
        policy = %job.req.policy, cost = ?job.req.cost, attempt = job.attempt,
        priority = job.priority, "patching pod deletion cost"
    );
    let writer = Arc::clone(writer);
    let timeout = cfg.write_timeout;
    let req = job.req.clone();
    let gate = gate.clone();
    let handle = inflight.spawn(async move {
        // checked again right before the call: the term may have
        // ended since the job was picked
        if !gate.allows_now() {
            return (req.pod, Err(WriteError::OutsideTerm));
        }
        let body = req.body();
        let call = writer.patch(&req.pod.namespace, &req.pod.name, &body);
        let result = match tokio::time::timeout(timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(WriteError::Timeout),
        };
        (req.pod, result)
    });
    jobs.insert(handle.id(), job);
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The term ended with writes in flight: they are aborted and go back to
/// the queue as retries (due at once, sent when a term opens the gate again).
fn abort_in_flight(
    shared: &Shared,
    cfg: &PatcherConfig,
    rng: &mut fastrand::Rng,
    jobs: &mut HashMap<tokio::task::Id, Job>,
    inflight: &mut JoinSet<Done>,
) {
    if inflight.is_empty() {
        return;
    }
    inflight.abort_all();
    let now = Instant::now();
    let ids: Vec<tokio::task::Id> = jobs.keys().copied().collect();
    tracing::warn!(
        writes = ids.len(),
        "the leadership term ended with writes in flight: they were cancelled"
    );
    for id in ids {
        if let Some(job) = jobs.get(&id) {
            let pod = job.req.pod.clone();
            let res = Ok((id, (pod, Err(WriteError::OutsideTerm))));
            on_done(shared, cfg, rng, jobs, res, now);
        }
    }
    // the aborted tasks' own results are not read
    while inflight.try_join_next().is_some() {}
}

/// How many abandoned pods a drain names in its log line.
const ABANDONED_NAMED: usize = 5;

fn finish_drain(shared: &Shared, abandoned: Vec<PodRef>) {
    if abandoned.is_empty() {
        tracing::info!("patch queue drained");
    } else {
        shared.stats.add(Count::Abandoned, abandoned.len() as u64);
        // one line, not one a pod: a stop with many writes queued must not
        // flood the log while the next leader waits
        let named: Vec<String> = abandoned
            .iter()
            .take(ABANDONED_NAMED)
            .map(ToString::to_string)
            .collect();
        tracing::warn!(
            abandoned = abandoned.len(),
            first = %named.join(", "),
            "writes abandoned at the drain deadline (the next leader recomputes them)"
        );
    }
    shared.stats.set_gauges(0, 0, 0);
    shared.stats.set_permits_waiting(0);
    shared.done.send_replace(Some(DrainReport { abandoned }));
}

fn on_done(
    shared: &Shared,
    cfg: &PatcherConfig,
    rng: &mut fastrand::Rng,
    jobs: &mut HashMap<tokio::task::Id, Job>,
    res: Result<(tokio::task::Id, Done), JoinError>,
    now: Instant,
) {
    let (id, result) = match res {
        Ok((id, (_, result))) => (id, result),
        Err(e) => {
            let message = format!("write task failed: {e}");
            (e.id(), Err(WriteError::Transport { message }))
        }
    };
    let Some(job) = jobs.remove(&id) else {
        return;
    };
    let pod = &job.req.pod;
    let delay = match &result {
        Err(e) => retry_delay(&cfg.backoff, e, job.attempt, rng.f64()),
        Ok(()) => Duration::ZERO,
    };
    match &result {
        Ok(()) => shared.stats.add_write(WriteKind::Pods, "ok"),
        // never sent (or cancelled as the term ended): no write
        Err(WriteError::OutsideTerm) => {}
        Err(e) => shared.stats.add_write(WriteKind::Pods, e.label()),
    }
    if let Err(e) = &result {
        shared.stats.add_error(e.label());
    }
    let mut st = shared.lock();
    let finished = st.queue.finish(pod, &result, now, delay);
    if let Err(WriteError::TooManyRequests { retry_after }) = &result {
        // The API server is overloaded: hold every write, not only this one.
        let until = now + retry_after.unwrap_or(cfg.backoff.default_retry_after);
        st.paused_until = Some(st.paused_until.map_or(until, |p| p.max(until)));
    }
    drop(st);
    let (ns, name, policy, cost, attempt) = (
        &pod.namespace,
        &pod.name,
        &job.req.policy,
        job.req.cost,
        job.attempt,
    );
    match (finished, &result) {
        (Finished::Applied, _) => {
            shared.stats.add(Count::Applied, 1);
            tracing::debug!(namespace = %ns, pod = %name, policy = %policy, cost = ?cost, attempt, "pod deletion cost applied");
        }
        (Finished::Gone, _) => {
            shared.stats.add(Count::Gone, 1);
            tracing::debug!(namespace = %ns, pod = %name, policy = %policy, cost = ?cost, attempt, "pod gone, write dropped");
        }
        (Finished::Failed, Err(e)) => {
            shared.stats.add(Count::Failed, 1);
            tracing::error!(namespace = %ns, pod = %name, policy = %policy, cost = ?cost, attempt, error = %e, "write refused, not retried");
        }
        (Finished::Retry { .. }, Err(WriteError::OutsideTerm)) => {
            tracing::debug!(namespace = %ns, pod = %name, policy = %policy, "write held: outside the leadership term");
        }
        (Finished::Retry { .. }, Err(e)) => {
            shared.stats.add(Count::Retried, 1);
            tracing::warn!(namespace = %ns, pod = %name, policy = %policy, cost = ?cost, attempt, error = %e, retry_in_ms = delay.as_millis() as u64, "write failed, will retry");
        }
        _ => {}
    }
}
