//! The patch queue: pure bookkeeping, no I/O and no clock of its own.
//!
//! One slot per pod holds the newest value wanted for it, so repeated
//! updates coalesce; a FIFO of pods per policy plus a round-robin over
//! policies shares the write budget fairly; a priority FIFO goes first;
//! failed writes wait in a retry schedule. Each slot owns the waiters of the
//! value it holds and answers them exactly once.

use std::collections::{BTreeMap, HashMap, VecDeque};

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::patch::{PatchRequest, PodRef, PolicyKey};
use super::writer::WriteError;

/// What became of one submitted value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The value is on the pod.
    Applied,
    /// The pod no longer exists (or was replaced by a namesake).
    Gone,
    /// The API server refused the write for good (e.g. 403, 422).
    Failed(WriteError),
    /// A newer value for the same pod replaced this one before it landed.
    Superseded,
    /// The patcher stopped (drain deadline) before the value landed.
    Abandoned,
    /// Its policy was deleted before the value was sent.
    Cancelled,
}

/// Sends the outcome of one value to whoever waits for it.
pub(crate) type Waiter = oneshot::Sender<WriteOutcome>;

/// A value waiting to be written.
#[derive(Debug)]
struct Pending {
    req: PatchRequest,
    /// Failed attempts so far (drives backoff).
    attempt: u32,
    priority: bool,
    waiters: Vec<Waiter>,
    /// Identifies this value's place in the FIFOs; a FIFO item whose ticket
    /// no longer matches the slot is stale and skipped.
    ticket: u64,
}

impl Pending {
    fn answer(self, outcome: &WriteOutcome) {
        for w in self.waiters {
            // A receiver that stopped listening is fine.
            let _ = w.send(outcome.clone());
        }
    }
}

#[derive(Debug)]
enum Slot {
    Queued(Pending),
    /// Waiting for its retry time (kept in `Queue::retries`).
    Retrying(Pending),
    InFlight {
        current: Pending,
        newer: Option<Pending>,
    },
}

/// One write to send now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// What to write.
    pub req: PatchRequest,
    /// Attempt number of this write (1 = first try).
    pub attempt: u32,
    /// Whether it came from a priority submission.
    pub priority: bool,
}

/// How a submission was absorbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// A new pod entered the queue.
    New,
    /// Replaced a value not yet written (coalesced).
    Coalesced,
    /// The pod has a write in flight; this value follows it.
    Queued,
}

/// The queue holds `capacity` pods already; nothing was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    /// The configured capacity.
    pub capacity: usize,
}

/// What [`Queue::candidate`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidate {
    /// A write could go now (subject to the global limiter).
    Ready,
    /// Work exists but every policy with work is held by its own limit.
    BlockedUntil(Instant),
    /// Nothing to write now.
    Idle,
}

/// A per-policy limiter's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Token taken.
    Yes,
    /// No token before this instant.
    NotUntil(Instant),
}

/// What happened to a finished write (for counters and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// Landed.
    Applied,
    /// Pod gone: done.
    Gone,
    /// Permanent failure: reported to waiters.
    Failed,
    /// Scheduled for another attempt at `due`.
    Retry {
        /// When the next attempt may go.
        due: Instant,
    },
    /// The write's slot was no longer in flight (should not happen).
    Unknown,
}

/// Counts by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Depth {
    /// Pods tracked in total (queued, in flight or waiting to retry).
    pub pods: usize,
    /// Pods waiting for a retry.
    pub retrying: usize,
}

/// What the queue knows of the last value wanted for one pod: pending
/// (queued, in flight or waiting to retry), landed a moment ago, or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteState {
    /// Queued, in flight or waiting to retry: the newest value wanted.
    Pending(PatchRequest),
    /// Landed at the instant given (kept for [`LANDED_MEMORY`]).
    Landed(PatchRequest, Instant),
    /// Refused for good, or out of attempts: the last error.
    Failed(PatchRequest, WriteError),
}

/// How long a landed value is remembered: long enough for the watch to show
/// it, so a round planned on a cache that has not caught up does not send it
/// again; past that, a value the cache still does not show is sent again.
pub const LANDED_MEMORY: std::time::Duration = std::time::Duration::from_secs(60);

/// The patch queue (see the module docs).
#[derive(Debug)]
pub struct Queue {
    capacity: usize,
    /// Attempts of one value before it fails (429s do not count).
    max_attempts: u32,
    /// Values that landed lately, by pod (see [`LANDED_MEMORY`]).
    landed: HashMap<PodRef, (PatchRequest, Instant)>,
    /// Values that failed for good, by pod, until a later value lands or
    /// the pod goes.
    failed: HashMap<PodRef, (PatchRequest, WriteError)>,
    last_prune: Option<Instant>,
    slots: HashMap<PodRef, Slot>,
    fifos: HashMap<PolicyKey, VecDeque<(PodRef, u64)>>,
    /// Policies with a (possibly stale) FIFO item, in round-robin order.
    rr: VecDeque<PolicyKey>,
    priority: VecDeque<(PodRef, u64)>,
    retries: BTreeMap<(Instant, u64), PodRef>,
    next_ticket: u64,
}

impl Queue {
    /// An empty queue holding at most `capacity` pods (at least 1).
    pub fn new(capacity: usize) -> Self {
        Queue {
            capacity: capacity.max(1),
            max_attempts: u32::MAX,
            landed: HashMap::new(),
            failed: HashMap::new(),
            last_prune: None,
            slots: HashMap::new(),
            fifos: HashMap::new(),
            rr: VecDeque::new(),
            priority: VecDeque::new(),
            retries: BTreeMap::new(),
            next_ticket: 0,
        }
    }

    /// Bounds the attempts of one value (at least 1; 429s do not count).
    pub fn set_max_attempts(&mut self, max_attempts: u32) {
        self.max_attempts = max_attempts.max(1);
    }

    /// Whether nothing is queued, in flight or waiting to retry.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// What is known of the value last wanted for `pod` (None: nothing
    /// pending, and nothing landed or failed lately).
    pub fn write_state(&self, pod: &PodRef, now: Instant) -> Option<WriteState> {
        if let Some(slot) = self.slots.get(pod) {
            let req = match slot {
                Slot::Queued(p) | Slot::Retrying(p) => &p.req,
                Slot::InFlight { current, newer } => &newer.as_ref().unwrap_or(current).req,
            };
            return Some(WriteState::Pending(req.clone()));
        }
        if let Some((req, at)) = self.landed.get(pod) {
            if now.saturating_duration_since(*at) < LANDED_MEMORY {
                return Some(WriteState::Landed(req.clone(), *at));
            }
        }
        self.failed
            .get(pod)
            .map(|(req, e)| WriteState::Failed(req.clone(), e.clone()))
    }

    /// The values of `policy` that failed for good and were not followed by
    /// one that landed, by pod.
    pub fn failed_for(&self, policy: &PolicyKey) -> Vec<(PatchRequest, WriteError)> {
        let mut out: Vec<(PatchRequest, WriteError)> = self
            .failed
            .values()
            .filter(|(req, _)| &req.policy == policy)
            .cloned()
            .collect();
        out.sort_by(|a, b| a.0.pod.cmp(&b.0.pod));
        out
    }

    /// Forgets the failures of `policy`'s pods that `keep` rejects.
    pub fn retain_failed(&mut self, policy: &PolicyKey, keep: impl Fn(&PodRef) -> bool) {
        self.failed
            .retain(|pod, (req, _)| &req.policy != policy || keep(pod));
    }

    /// Drops every value of `policy` not sent yet (its waiters hear
    /// `Cancelled`) and what is remembered of its failures. A write in
    /// flight cannot be called back: those pods are returned, and a newer
    /// value queued behind one is dropped too.
    pub fn cancel_policy(&mut self, policy: &PolicyKey) -> Vec<PodRef> {
        let in_flight = self.cancel_where(|req| &req.policy == policy);
        self.failed.retain(|_, (req, _)| &req.policy != policy);
        let mut pods: Vec<PodRef> = in_flight.into_iter().map(|r| r.pod).collect();
        pods.sort();
        pods
    }

    /// Drops the values of `pods` not sent yet (their waiters hear
    /// `Cancelled`), a newer value queued behind one in flight included;
    /// returns the values in flight, which cannot be called back. A
    /// scale-in does this before it decides what to write: nothing queued
    /// earlier lands after its own writes.
    pub fn cancel_pods(&mut self, pods: &std::collections::HashSet<PodRef>) -> Vec<PatchRequest> {
        self.cancel_where(|req| pods.contains(&req.pod))
    }

    /// Drops every value `cancel` accepts that is not sent yet; returns the
    /// accepted values in flight.
    fn cancel_where(&mut self, cancel: impl Fn(&PatchRequest) -> bool) -> Vec<PatchRequest> {
        let mut in_flight = Vec::new();
        let pods: Vec<PodRef> = self.slots.keys().cloned().collect();
        for pod in pods {
            let Some(slot) = self.slots.remove(&pod) else {
                continue;
            };
            match slot {
                Slot::Queued(p) | Slot::Retrying(p) if cancel(&p.req) => {
                    p.answer(&WriteOutcome::Cancelled);
                }
                Slot::InFlight { current, newer } => {
                    let newer = match newer {
                        Some(n) if cancel(&n.req) => {
                            n.answer(&WriteOutcome::Cancelled);
                            None
                        }
                        other => other,
                    };
                    if cancel(&current.req) {
                        in_flight.push(current.req.clone());
                    }
                    self.slots.insert(pod, Slot::InFlight { current, newer });
                }
                other => {
                    self.slots.insert(pod, other);
                }
            }
        }
        // stale FIFO items and retry entries are skipped where they are met
        self.retries
            .retain(|_, pod| matches!(self.slots.get(pod), Some(Slot::Retrying(_))));
        in_flight
    }

    /// Forgets landed values older than [`LANDED_MEMORY`] (at most every
    /// few seconds, so the cost stays small).
    fn prune_landed(&mut self, now: Instant) {
        let due = self
            .last_prune
            .is_none_or(|t| now.saturating_duration_since(t) >= LANDED_MEMORY / 6);
        if due {
            self.landed
                .retain(|_, (_, at)| now.saturating_duration_since(*at) < LANDED_MEMORY);
            self.last_prune = Some(now);
        }
    }

    /// Sizes for metrics.
    pub fn depth(&self) -> Depth {
        Depth {
            pods: self.slots.len(),
            retrying: self.retries.len(),
        }
    }

    /// How many of `pods` are not tracked yet (the room a batch needs).
    pub fn room_needed<'a>(&self, pods: impl IntoIterator<Item = &'a PodRef>) -> usize {
        let mut seen = std::collections::HashSet::new();
        pods.into_iter()
            .filter(|p| !self.slots.contains_key(*p) && seen.insert(*p))
            .count()
    }

    /// Most pods tracked at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Free room.
    pub fn room(&self) -> usize {
        self.capacity.saturating_sub(self.slots.len())
    }

    /// The newest value wanted for each pod of `policy` that has not landed.
    pub fn pending_for(&self, policy: &PolicyKey) -> Vec<PatchRequest> {
        let mut out: Vec<PatchRequest> = self
            .slots
            .values()
            .map(|slot| match slot {
                Slot::Queued(p) | Slot::Retrying(p) => &p.req,
                Slot::InFlight { current, newer } => &newer.as_ref().unwrap_or(current).req,
            })
            .filter(|req| &req.policy == policy)
            .cloned()
            .collect();
        out.sort_by(|a, b| a.pod.cmp(&b.pod));
        out
    }

    fn ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }

    fn enqueue(&mut self, key: &PodRef, policy: &PolicyKey, ticket: u64, priority: bool) {
        if priority {
            self.priority.push_back((key.clone(), ticket));
        }
        match self.fifos.get_mut(policy) {
            Some(fifo) => fifo.push_back((key.clone(), ticket)),
            None => {
                self.fifos
                    .insert(policy.clone(), VecDeque::from([(key.clone(), ticket)]));
                self.rr.push_back(policy.clone());
            }
        }
    }

    /// Add `req` (with an optional waiter). Repeated values for one pod
    /// coalesce to the newest; a replaced value's waiters hear `Superseded`
    /// (unless the new value is identical, then they wait for it).
    pub fn submit(
        &mut self,
        req: PatchRequest,
        priority: bool,
        waiter: Option<Waiter>,
    ) -> Result<Submitted, Full> {
        let key = req.pod.clone();
        let Some(slot) = self.slots.get_mut(&key) else {
            if self.slots.len() >= self.capacity {
                return Err(Full {
                    capacity: self.capacity,
                });
            }
            let ticket = self.ticket();
            let policy = req.policy.clone();
            let pending = Pending {
                req,
                attempt: 0,
                priority,
                waiters: waiter.into_iter().collect(),
                ticket,
            };
            self.slots.insert(key.clone(), Slot::Queued(pending));
            self.enqueue(&key, &policy, ticket, priority);
            return Ok(Submitted::New);
        };
        match slot {
            Slot::InFlight { newer: None, .. } => {
                let ticket = self.next_ticket + 1;
                self.next_ticket = ticket;
                if let Some(Slot::InFlight { newer, .. }) = self.slots.get_mut(&key) {
                    *newer = Some(Pending {
                        req,
                        attempt: 0,
                        priority,
                        waiters: waiter.into_iter().collect(),
                        ticket,
                    });
                }
                Ok(Submitted::Queued)
            }
            Slot::InFlight {
                newer: Some(pending),
                ..
            } => {
                replace(pending, req, priority, waiter);
                Ok(Submitted::Coalesced)
            }
            Slot::Retrying(pending) => {
                replace(pending, req, priority, waiter);
                Ok(Submitted::Coalesced)
            }
            Slot::Queued(pending) => {
                let moved = pending.req.policy != req.policy;
                let upgraded = priority && !pending.priority;
                replace(pending, req, priority, waiter);
                if moved || upgraded {
                    // Requeue under the new policy / in the priority FIFO;
                    // the old FIFO item turns stale.
                    let policy = pending.req.policy.clone();
                    let prio = pending.priority;
                    let ticket = self.next_ticket + 1;
                    self.next_ticket = ticket;
                    pending.ticket = ticket;
                    self.enqueue(&key, &policy, ticket, prio);
                }
                Ok(Submitted::Coalesced)
            }
        }
    }

    fn is_live(&self, item: &(PodRef, u64)) -> bool {
        matches!(self.slots.get(&item.0), Some(Slot::Queued(p)) if p.ticket == item.1)
    }

    /// Drop stale items at the fronts of the FIFOs and forget policies with
    /// nothing left.
    fn compact(&mut self) {
        while let Some(front) = self.priority.front() {
            if self.is_live(front) {
                break;
            }
            self.priority.pop_front();
        }
        let mut keep = VecDeque::with_capacity(self.rr.len());
        while let Some(policy) = self.rr.pop_front() {
            let mut fifo = self.fifos.remove(&policy).unwrap_or_default();
            while let Some(front) = fifo.front() {
                if self.is_live(front) {
                    break;
                }
                fifo.pop_front();
            }
            if !fifo.is_empty() {
                self.fifos.insert(policy.clone(), fifo);
                keep.push_back(policy);
            }
        }
        self.rr = keep;
    }

    /// Whether a write could go now. `held(policy)` is the policy limiter's
    /// known earliest next token (None: unknown or now).
    pub fn candidate(&mut self, held: impl Fn(&PolicyKey) -> Option<Instant>) -> Candidate {
        self.compact();
        if !self.priority.is_empty() {
            return Candidate::Ready;
        }
        let mut earliest: Option<Instant> = None;
        for policy in &self.rr {
            match held(policy) {
                None => return Candidate::Ready,
                Some(t) => earliest = Some(earliest.map_or(t, |e| e.min(t))),
            }
        }
        earliest.map_or(Candidate::Idle, Candidate::BlockedUntil)
    }

    /// Whether a priority write (a scale-in's) is queued: it goes before
    /// every other write.
    pub fn urgent_ready(&mut self) -> bool {
        self.compact();
        !self.priority.is_empty()
    }

    /// Take the next write: the priority FIFO first (bound only by the
    /// global limiter), then the policies in round-robin order, each
    /// admitted by its own limiter. `Err` carries the earliest instant a
    /// held policy frees up (None: nothing queued).
    pub fn pick(
        &mut self,
        mut admit: impl FnMut(&PolicyKey) -> Admit,
    ) -> Result<Job, Option<Instant>> {
        self.compact();
        while let Some((key, ticket)) = self.priority.pop_front() {
            if let Some(job) = self.start(key, ticket) {
                return Ok(job);
            }
        }
        let mut earliest: Option<Instant> = None;
        for _ in 0..self.rr.len() {
            let Some(policy) = self.rr.pop_front() else {
                break;
            };
            match admit(&policy) {
                Admit::Yes => {
                    let mut job = None;
                    while let Some((key, ticket)) =
                        self.fifos.get_mut(&policy).and_then(|f| f.pop_front())
                    {
                        job = self.start(key, ticket);
                        if job.is_some() {
                            break;
                        }
                    }
                    // Back of the line for this policy (compact drops it if empty).
                    self.rr.push_back(policy);
                    if let Some(job) = job {
                        return Ok(job);
                    }
                }
                Admit::NotUntil(t) => {
                    earliest = Some(earliest.map_or(t, |e| e.min(t)));
                    self.rr.push_back(policy);
                }
            }
        }
        Err(earliest)
    }

    /// Move a queued value in flight; None if the FIFO item is stale.
    fn start(&mut self, key: PodRef, ticket: u64) -> Option<Job> {
        if !self.is_live(&(key.clone(), ticket)) {
            return None;
        }
        let Some(Slot::Queued(pending)) = self.slots.remove(&key) else {
            return None;
        };
        let job = Job {
            req: pending.req.clone(),
            attempt: pending.attempt + 1,
            priority: pending.priority,
        };
        self.slots.insert(
            key,
            Slot::InFlight {
                current: pending,
                newer: None,
            },
        );
        Some(job)
    }

    /// Record how the in-flight write of `pod` ended. `retry_in` is the
    /// delay to use if the error is retryable.
    pub fn finish(
        &mut self,
        pod: &PodRef,
        result: &Result<(), WriteError>,
        now: Instant,
        retry_in: std::time::Duration,
    ) -> Finished {
        let Some(Slot::InFlight { current, newer }) = self.slots.remove(pod) else {
            return Finished::Unknown;
        };
        let out_of_attempts = |e: &WriteError| {
            !matches!(
                e,
                WriteError::TooManyRequests { .. } | WriteError::OutsideTerm
            ) && current.attempt.saturating_add(1) >= self.max_attempts
        };
        let (outcome, finished) = match result {
            Ok(()) => {
                self.prune_landed(now);
                self.failed.remove(pod);
                self.landed.insert(pod.clone(), (current.req.clone(), now));
                (WriteOutcome::Applied, Finished::Applied)
            }
            Err(WriteError::Gone) => {
                self.failed.remove(pod);
                self.landed.remove(pod);
                (WriteOutcome::Gone, Finished::Gone)
            }
            Err(e) if !e.is_retryable() || (newer.is_none() && out_of_attempts(e)) => {
                self.landed.remove(pod);
                self.failed
                    .insert(pod.clone(), (current.req.clone(), e.clone()));
                (WriteOutcome::Failed(e.clone()), Finished::Failed)
            }
            Err(_) => {
                let due = now + retry_in;
                // a write never sent, or one the server asked to slow down,
                // is no attempt against the bound
                let counts = !matches!(
                    result,
                    Err(WriteError::OutsideTerm | WriteError::TooManyRequests { .. })
                );
                let attempt = current.attempt + u32::from(counts);
                // The newest value takes the retry (and the backoff) over.
                let mut next = match newer {
                    Some(n) => {
                        current.answer(&WriteOutcome::Superseded);
                        n
                    }
                    None => current,
                };
                next.attempt = attempt;
                self.schedule_retry(pod.clone(), next, due);
                return Finished::Retry { due };
            }
        };
        current.answer(&outcome);
        if let Some(n) = newer {
            let (policy, ticket, prio) = (n.req.policy.clone(), n.ticket, n.priority);
            self.slots.insert(pod.clone(), Slot::Queued(n));
            self.enqueue(pod, &policy, ticket, prio);
        }
        finished
    }

    fn schedule_retry(&mut self, pod: PodRef, pending: Pending, due: Instant) {
        let seq = self.ticket();
        self.retries.insert((due, seq), pod.clone());
        self.slots.insert(pod, Slot::Retrying(pending));
    }

    /// When the next retry is due.
    pub fn next_retry(&self) -> Option<Instant> {
        self.retries.keys().next().map(|(due, _)| *due)
    }

    /// Move retries due at `now` back into their FIFOs (at the back).
    pub fn promote_due(&mut self, now: Instant) -> usize {
        let mut moved = 0;
        while let Some((&(due, seq), _)) = self.retries.iter().next() {
            if due > now {
                break;
            }
            let Some(pod) = self.retries.remove(&(due, seq)) else {
                break;
            };
            let Some(Slot::Retrying(mut pending)) = self.slots.remove(&pod) else {
                continue;
            };
            pending.ticket = self.ticket();
            let (policy, ticket, prio) =
                (pending.req.policy.clone(), pending.ticket, pending.priority);
            self.slots.insert(pod.clone(), Slot::Queued(pending));
            self.enqueue(&pod, &policy, ticket, prio);
            moved += 1;
        }
        moved
    }

    /// Give up on everything still queued or waiting to retry (in-flight
    /// writes too: their answer will not be read). Waiters hear `Abandoned`.
    pub fn abandon_all(&mut self) -> Vec<PodRef> {
        let mut pods: Vec<PodRef> = Vec::with_capacity(self.slots.len());
        for (pod, slot) in self.slots.drain() {
            match slot {
                Slot::Queued(p) | Slot::Retrying(p) => p.answer(&WriteOutcome::Abandoned),
                Slot::InFlight { current, newer } => {
                    current.answer(&WriteOutcome::Abandoned);
                    if let Some(n) = newer {
                        n.answer(&WriteOutcome::Abandoned);
                    }
                }
            }
            pods.push(pod);
        }
        self.fifos.clear();
        self.rr.clear();
        self.priority.clear();
        self.retries.clear();
        pods.sort();
        pods
    }
}

/// Replace a not-yet-written value with a newer one.
fn replace(pending: &mut Pending, req: PatchRequest, priority: bool, waiter: Option<Waiter>) {
    if pending.req != req {
        for w in pending.waiters.drain(..) {
            let _ = w.send(WriteOutcome::Superseded);
        }
        pending.req = req;
    }
    pending.priority |= priority;
    pending.waiters.extend(waiter);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn req(policy: &str, pod: &str, cost: i32) -> PatchRequest {
        PatchRequest::set(PodRef::new("ns", pod), policy, cost)
    }

    fn always(_: &PolicyKey) -> Admit {
        Admit::Yes
    }

    fn drain_all(q: &mut Queue) -> Vec<Job> {
        let mut out = Vec::new();
        while let Ok(job) = q.pick(always) {
            out.push(job);
        }
        out
    }

    #[test]
    fn repeated_updates_coalesce_to_newest() {
        let mut q = Queue::new(10);
        assert_eq!(q.submit(req("a", "p", 0), false, None), Ok(Submitted::New));
        for cost in 1..10 {
            assert_eq!(
                q.submit(req("a", "p", cost), false, None),
                Ok(Submitted::Coalesced)
            );
        }
        assert_eq!(q.depth().pods, 1);
        let jobs = drain_all(&mut q);
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].req.cost, Some(9));
        assert_eq!(jobs[0].attempt, 1);
    }

    #[test]
    fn replaced_value_tells_its_waiter_superseded_identical_value_keeps_it() {
        let mut q = Queue::new(10);
        let (tx1, mut rx1) = oneshot::channel();
        let (tx2, mut rx2) = oneshot::channel();
        let (tx3, mut rx3) = oneshot::channel();
        q.submit(req("a", "p", 1), false, Some(tx1)).unwrap();
        q.submit(req("a", "p", 2), false, Some(tx2)).unwrap();
        q.submit(req("a", "p", 2), false, Some(tx3)).unwrap();
        assert_eq!(rx1.try_recv(), Ok(WriteOutcome::Superseded));
        let job = q.pick(always).unwrap();
        let now = Instant::now();
        assert_eq!(
            q.finish(&job.req.pod, &Ok(()), now, Duration::ZERO),
            Finished::Applied
        );
        assert_eq!(rx2.try_recv(), Ok(WriteOutcome::Applied));
        assert_eq!(rx3.try_recv(), Ok(WriteOutcome::Applied));
        assert!(q.is_empty());
    }

    #[test]
    fn policies_take_turns() {
        let mut q = Queue::new(100);
        for i in 0..20 {
            q.submit(req("big", &format!("b{i}"), i), false, None)
                .unwrap();
        }
        for i in 0..3 {
            q.submit(req("small", &format!("s{i}"), i), false, None)
                .unwrap();
        }
        let order: Vec<String> = drain_all(&mut q)
            .into_iter()
            .map(|j| j.req.pod.name)
            .collect();
        assert_eq!(&order[..6], ["b0", "s0", "b1", "s1", "b2", "s2"]);
        assert_eq!(order.len(), 23);
    }

    #[test]
    fn held_policy_is_skipped_and_its_release_time_reported() {
        let mut q = Queue::new(10);
        q.submit(req("slow", "a", 1), false, None).unwrap();
        q.submit(req("fast", "b", 1), false, None).unwrap();
        let later = Instant::now() + Duration::from_secs(3);
        let slow = PolicyKey::new("ns", "slow");
        let admit = |p: &PolicyKey| {
            if *p == slow {
                Admit::NotUntil(later)
            } else {
                Admit::Yes
            }
        };
        assert_eq!(q.pick(admit).unwrap().req.pod.name, "b");
        assert_eq!(q.pick(admit), Err(Some(later)));
        let held = |p: &PolicyKey| (*p == slow).then_some(later);
        assert_eq!(q.candidate(held), Candidate::BlockedUntil(later));
        assert_eq!(q.candidate(|_| None), Candidate::Ready);
    }

    #[test]
    fn priority_goes_first_and_ignores_policy_limits() {
        let mut q = Queue::new(10);
        q.submit(req("a", "bg1", 1), false, None).unwrap();
        q.submit(req("a", "bg2", 1), false, None).unwrap();
        q.submit(req("a", "urgent", 1), true, None).unwrap();
        // An already queued background value can be promoted too.
        q.submit(req("a", "bg2", 5), true, None).unwrap();
        let never = |_: &PolicyKey| Admit::NotUntil(Instant::now() + Duration::from_secs(60));
        let first = q.pick(never).unwrap();
        let second = q.pick(never).unwrap();
        assert_eq!(first.req.pod.name, "urgent");
        assert!(first.priority);
        assert_eq!(
            (second.req.pod.name.as_str(), second.req.cost),
            ("bg2", Some(5))
        );
        // bg2 is not written twice: its background FIFO item is stale now.
        let rest: Vec<_> = drain_all(&mut q)
            .into_iter()
            .map(|j| j.req.pod.name)
            .collect();
        assert_eq!(rest, vec!["bg1"]);
    }

    #[test]
    fn retry_waits_for_its_time_and_newer_value_takes_it_over() {
        let mut q = Queue::new(10);
        let (tx, mut rx) = oneshot::channel();
        q.submit(req("a", "p", 1), false, Some(tx)).unwrap();
        let job = q.pick(always).unwrap();
        let now = Instant::now();
        let err = Err(WriteError::Timeout);
        let fin = q.finish(&job.req.pod, &err, now, Duration::from_secs(2));
        assert_eq!(
            fin,
            Finished::Retry {
                due: now + Duration::from_secs(2)
            }
        );
        assert_eq!(q.pick(always), Err(None));
        assert_eq!(q.promote_due(now + Duration::from_secs(1)), 0);
        // A newer value arrives while waiting: it replaces the failed one.
        assert_eq!(
            q.submit(req("a", "p", 7), false, None),
            Ok(Submitted::Coalesced)
        );
        assert_eq!(rx.try_recv(), Ok(WriteOutcome::Superseded));
        assert_eq!(q.promote_due(now + Duration::from_secs(2)), 1);
        let job = q.pick(always).unwrap();
        assert_eq!((job.req.cost, job.attempt), (Some(7), 2));
    }

    #[test]
    fn value_submitted_during_flight_follows_it() {
        let mut q = Queue::new(10);
        q.submit(req("a", "p", 1), false, None).unwrap();
        let job = q.pick(always).unwrap();
        assert_eq!(
            q.submit(req("a", "p", 2), false, None),
            Ok(Submitted::Queued)
        );
        assert_eq!(q.pick(always), Err(None));
        assert_eq!(q.pending_for(&PolicyKey::new("ns", "a"))[0].cost, Some(2));
        q.finish(&job.req.pod, &Ok(()), Instant::now(), Duration::ZERO);
        let job = q.pick(always).unwrap();
        assert_eq!((job.req.cost, job.attempt), (Some(2), 1));
    }

    #[test]
    fn gone_and_permanent_failures_end_the_entry() {
        let mut q = Queue::new(10);
        let (tx, mut rx) = oneshot::channel();
        q.submit(req("a", "gone", 1), false, None).unwrap();
        q.submit(req("a", "bad", 1), false, Some(tx)).unwrap();
        let now = Instant::now();
        let j1 = q.pick(always).unwrap();
        let j2 = q.pick(always).unwrap();
        assert_eq!(
            q.finish(&j1.req.pod, &Err(WriteError::Gone), now, Duration::ZERO),
            Finished::Gone
        );
        let refused = WriteError::Rejected {
            code: 403,
            message: "forbidden".into(),
        };
        assert_eq!(
            q.finish(&j2.req.pod, &Err(refused.clone()), now, Duration::ZERO),
            Finished::Failed
        );
        assert_eq!(rx.try_recv(), Ok(WriteOutcome::Failed(refused)));
        assert!(q.is_empty());
        assert_eq!(q.next_retry(), None);
    }

    #[test]
    fn full_queue_refuses_new_pods_but_still_coalesces() {
        let mut q = Queue::new(2);
        q.submit(req("a", "p1", 1), false, None).unwrap();
        q.submit(req("a", "p2", 1), false, None).unwrap();
        assert_eq!(
            q.submit(req("a", "p3", 1), false, None),
            Err(Full { capacity: 2 })
        );
        assert_eq!(
            q.submit(req("a", "p1", 5), false, None),
            Ok(Submitted::Coalesced)
        );
        assert_eq!(q.room(), 0);
        assert_eq!(
            q.room_needed([&PodRef::new("ns", "p1"), &PodRef::new("ns", "p9")]),
            1
        );
    }

    #[test]
    fn abandon_answers_every_waiter() {
        let mut q = Queue::new(10);
        let (tx1, mut rx1) = oneshot::channel();
        let (tx2, mut rx2) = oneshot::channel();
        q.submit(req("a", "p1", 1), false, Some(tx1)).unwrap();
        q.submit(req("a", "p2", 1), false, Some(tx2)).unwrap();
        let _in_flight = q.pick(always).unwrap();
        let pods = q.abandon_all();
        assert_eq!(pods.len(), 2);
        assert_eq!(rx1.try_recv(), Ok(WriteOutcome::Abandoned));
        assert_eq!(rx2.try_recv(), Ok(WriteOutcome::Abandoned));
        assert!(q.is_empty());
    }

    #[test]
    fn landed_values_are_remembered_for_a_while_and_failures_until_a_value_lands() {
        let mut q = Queue::new(10);
        q.set_max_attempts(2);
        let now = Instant::now();
        let pod = PodRef::new("ns", "p1");
        q.submit(req("a", "p1", 1), false, None).unwrap();
        assert!(matches!(
            q.write_state(&pod, now),
            Some(WriteState::Pending(_))
        ));
        let job = q.pick(always).unwrap();
        q.finish(&job.req.pod, &Ok(()), now, Duration::ZERO);
        assert!(matches!(
            q.write_state(&pod, now),
            Some(WriteState::Landed(_, _))
        ));
        assert_eq!(q.write_state(&pod, now + LANDED_MEMORY), None);

        // retryable errors fail once the attempts run out; 429 does not count
        let server = WriteError::Server {
            code: 503,
            message: "down".into(),
        };
        let busy = WriteError::TooManyRequests { retry_after: None };
        q.submit(req("a", "p2", 1), false, None).unwrap();
        let j = q.pick(always).unwrap();
        assert!(matches!(
            q.finish(&j.req.pod, &Err(busy), now, Duration::ZERO),
            Finished::Retry { .. }
        ));
        q.promote_due(now);
        let j = q.pick(always).unwrap();
        assert!(matches!(
            q.finish(&j.req.pod, &Err(server.clone()), now, Duration::ZERO),
            Finished::Retry { .. }
        ));
        q.promote_due(now);
        let j = q.pick(always).unwrap();
        assert_eq!(
            q.finish(&j.req.pod, &Err(server.clone()), now, Duration::ZERO),
            Finished::Failed
        );
        let p2 = PodRef::new("ns", "p2");
        assert_eq!(
            q.write_state(&p2, now),
            Some(WriteState::Failed(req("a", "p2", 1), server))
        );
        assert_eq!(q.failed_for(&PolicyKey::new("ns", "a")).len(), 1);
        // a pod the policy no longer wants is forgotten
        q.retain_failed(&PolicyKey::new("ns", "a"), |p| p.name != "p2");
        assert_eq!(q.write_state(&p2, now), None);
    }

    #[test]
    fn cancelling_a_policy_answers_its_waiters_and_keeps_in_flight_writes() {
        let mut q = Queue::new(10);
        let (tx, mut rx) = oneshot::channel();
        q.submit(req("old", "p1", 1), false, None).unwrap();
        let in_flight = q.pick(always).unwrap();
        q.submit(req("old", "p1", 2), false, None).unwrap();
        q.submit(req("old", "p2", 1), false, Some(tx)).unwrap();
        q.submit(req("new", "p3", 1), false, None).unwrap();
        let pods = q.cancel_policy(&PolicyKey::new("ns", "old"));
        assert_eq!(pods, vec![in_flight.req.pod.clone()]);
        assert_eq!(rx.try_recv(), Ok(WriteOutcome::Cancelled));
        // the write in flight finishes; nothing of the old policy follows it
        q.finish(&in_flight.req.pod, &Ok(()), Instant::now(), Duration::ZERO);
        let rest = drain_all(&mut q);
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].req.pod.name, "p3");
    }
}
