//! The patcher against a fake API: every write is recorded with the time of
//! tokio's paused clock, so rate limits, retries and deadlines are checked
//! by counting requests per window of virtual time, deterministically and
//! in no real time.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deletion_cost::annotations::{POD_DELETION_COST, POLICY_ANNOTATION};
use deletion_cost::writes::patcher::Priority;
use deletion_cost::writes::stats::ERROR_REASONS;
use deletion_cost::writes::{
    budgeted_client, scale_in_allowance, BackoffConfig, BudgetError, Gate, PatchRequest, Patcher,
    PatcherConfig, PodRef, PodWriter, PolicyKey, Rate, SubmitError, WriteError, WriteGate,
    WriteKind, WriteOutcome, WriteState,
};
use serde_json::Value;
use tokio::time::Instant;

/// What the fake answers one call with.
#[derive(Clone, Debug)]
enum Answer {
    Done(Result<(), WriteError>),
    /// Never answers (the patcher's timeout must fire).
    Hang,
}

#[derive(Debug, Clone)]
struct Call {
    at: Duration,
    pod: String,
    namespace: String,
    body: Value,
}

impl Call {
    fn cost(&self) -> Option<String> {
        self.body["metadata"]["annotations"][POD_DELETION_COST]
            .as_str()
            .map(str::to_owned)
    }
}

struct FakeState {
    start: Instant,
    calls: Vec<Call>,
    /// Per pod name: answers for its next calls; then `Ok`.
    script: HashMap<String, VecDeque<Answer>>,
    /// Answer used for pods whose script is empty.
    fallback: Answer,
    latency: Duration,
}

#[derive(Clone)]
struct FakeApi(Arc<Mutex<FakeState>>);

impl FakeApi {
    fn new() -> Self {
        FakeApi(Arc::new(Mutex::new(FakeState {
            start: Instant::now(),
            calls: Vec::new(),
            script: HashMap::new(),
            fallback: Answer::Done(Ok(())),
            latency: Duration::ZERO,
        })))
    }

    fn script(&self, pod: &str, answers: Vec<Answer>) {
        self.0
            .lock()
            .unwrap()
            .script
            .insert(pod.to_owned(), answers.into());
    }

    fn set_fallback(&self, answer: Answer) {
        self.0.lock().unwrap().fallback = answer;
    }

    fn set_latency(&self, latency: Duration) {
        self.0.lock().unwrap().latency = latency;
    }

    fn calls(&self) -> Vec<Call> {
        self.0.lock().unwrap().calls.clone()
    }

    fn calls_for(&self, pod: &str) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.pod == pod).collect()
    }

    /// Records a write that is not a pod patch (a status, an Event) as it
    /// is sent, in the same log as the pod writes.
    fn record(&self, name: &str) {
        let mut st = self.0.lock().unwrap();
        let at = Instant::now() - st.start;
        st.calls.push(Call {
            at,
            pod: name.to_owned(),
            namespace: String::new(),
            body: Value::Null,
        });
    }
}

/// Starts `n` writes of `kind` named `{prefix}{i}`: each waits for its
/// permit, is recorded as sent, and ends with `answer`. Resolves to their
/// permits' refusals, if any.
fn other_writes(
    patcher: &Patcher,
    api: &FakeApi,
    kind: WriteKind,
    prefix: &str,
    n: usize,
    answer: Result<(), WriteError>,
) -> tokio::task::JoinSet<Result<(), BudgetError>> {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let wait = patcher.permit(kind);
        let (api, name, answer) = (api.clone(), format!("{prefix}{i}"), answer.clone());
        set.spawn(async move {
            let permit = wait?.await?;
            api.record(&name);
            permit.finish(&answer);
            Ok(())
        });
    }
    set
}

impl PodWriter for FakeApi {
    async fn patch(&self, namespace: &str, name: &str, body: &Value) -> Result<(), WriteError> {
        let (answer, latency) = {
            let mut st = self.0.lock().unwrap();
            let at = Instant::now() - st.start;
            st.calls.push(Call {
                at,
                pod: name.to_owned(),
                namespace: namespace.to_owned(),
                body: body.clone(),
            });
            let answer = st
                .script
                .get_mut(name)
                .and_then(VecDeque::pop_front)
                .unwrap_or_else(|| st.fallback.clone());
            (answer, st.latency)
        };
        tokio::time::sleep(latency).await;
        match answer {
            Answer::Done(r) => r,
            Answer::Hang => {
                tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
                Ok(())
            }
        }
    }
}

fn config(qps: f64, burst: u32) -> PatcherConfig {
    let mut cfg = PatcherConfig::new(Rate::new("--qps", qps, burst).unwrap());
    cfg.jitter_seed = Some(42);
    cfg.backoff = BackoffConfig {
        base: Duration::from_millis(100),
        max: Duration::from_secs(2),
        default_retry_after: Duration::from_secs(1),
        ..BackoffConfig::default()
    };
    cfg
}

fn set(ns: &str, policy: &str, pod: &str, cost: i32) -> PatchRequest {
    PatchRequest::set(PodRef::new(ns, pod), policy, cost)
}

/// One background write that nobody waits for (its batch is dropped).
fn submit(patcher: &Patcher, req: PatchRequest) -> Result<(), SubmitError> {
    patcher
        .submit_batch(vec![req], Priority::Background)
        .map(drop)
}

/// Largest number of calls in any window `[t_i, t_i + len)` that starts at
/// a call at or after `from`.
fn max_in_window(times: &[Duration], len: Duration, from: Duration) -> usize {
    let mut sorted = times.to_vec();
    sorted.sort();
    let mut best = 0;
    for (i, start) in sorted.iter().enumerate() {
        if *start < from {
            continue;
        }
        let n = sorted[i..]
            .iter()
            .take_while(|t| **t < *start + len)
            .count();
        best = best.max(n);
    }
    best
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn thousand_pods_converge_without_exceeding_qps() {
    let api = FakeApi::new();
    let (qps, burst) = (50, 10);
    let patcher = Patcher::start(api.clone(), config(qps as f64, burst));
    let reqs: Vec<_> = (0..1000)
        .map(|i| set(&format!("ns{}", i % 4), "web", &format!("pod-{i}"), i))
        .collect();
    let batch = patcher.submit_batch(reqs, Priority::Background).unwrap();
    let report = batch.wait().await;
    assert!(report.all_done());

    let calls = api.calls();
    assert_eq!(calls.len(), 1000, "one write per pod, none repeated");
    let mut pods: Vec<_> = calls.iter().map(|c| c.pod.clone()).collect();
    pods.sort();
    pods.dedup();
    assert_eq!(pods.len(), 1000);
    for c in &calls {
        let i: i32 = c.pod.trim_start_matches("pod-").parse().unwrap();
        assert_eq!(c.cost(), Some(i.to_string()));
        assert_eq!(c.namespace, format!("ns{}", i % 4));
        assert_eq!(c.body["metadata"]["annotations"][POLICY_ANNOTATION], "web");
    }

    let times: Vec<Duration> = calls.iter().map(|c| c.at).collect();
    // Any 1-second window: at most qps, plus the burst in the first second.
    assert!(max_in_window(&times, SECOND, Duration::ZERO) <= (qps + burst) as usize);
    assert!(max_in_window(&times, SECOND, SECOND) <= qps as usize);
    // Fixed windows tell the same.
    let mut per_second: HashMap<u64, usize> = HashMap::new();
    for t in &times {
        *per_second.entry(t.as_secs()).or_default() += 1;
    }
    for (sec, n) in per_second {
        let limit = if sec == 0 { qps + burst } else { qps } as usize;
        assert!(n <= limit, "second {sec}: {n} writes > {limit}");
    }
    let stats = patcher.stats();
    assert_eq!(stats.applied, 1000);
    assert_eq!(stats.queue_depth, 0);
    assert!(stats.rate_limit_wait > Duration::ZERO);
    assert!(patcher.is_idle());
}

#[tokio::test(start_paused = true)]
async fn ten_updates_of_one_pod_make_one_write_of_the_newest() {
    let api = FakeApi::new();
    let patcher = Patcher::start(api.clone(), config(10.0, 1));
    for cost in 0..9 {
        submit(&patcher, set("shop", "web", "web-1", cost)).unwrap();
    }
    let batch = patcher
        .submit_batch(vec![set("shop", "web", "web-1", 9)], Priority::Background)
        .unwrap();
    assert_eq!(batch.wait().await.outcomes[0].1, WriteOutcome::Applied);
    let calls = api.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].cost().as_deref(), Some("9"));
    assert_eq!(patcher.stats().coalesced, 9);
}

#[tokio::test(start_paused = true)]
async fn updates_during_a_write_end_in_one_more_write_of_the_newest() {
    let api = FakeApi::new();
    api.set_latency(Duration::from_millis(200));
    let patcher = Patcher::start(api.clone(), config(10.0, 1));
    submit(&patcher, set("shop", "web", "web-1", 0)).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(api.calls().len(), 1, "first write in flight");
    for cost in 1..10 {
        submit(&patcher, set("shop", "web", "web-1", cost)).unwrap();
    }
    let report = patcher.drain(Duration::from_secs(60)).await;
    assert!(report.completed());
    let costs: Vec<_> = api.calls().iter().filter_map(Call::cost).collect();
    assert_eq!(costs, vec!["0", "9"]);
}

#[tokio::test(start_paused = true)]
async fn busy_policy_does_not_starve_a_small_one() {
    let api = FakeApi::new();
    let patcher = Patcher::start(api.clone(), config(10.0, 1));
    let big: Vec<_> = (0..1000)
        .map(|i| set("batch", "crunch", &format!("big-{i}"), i))
        .collect();
    for r in big {
        submit(&patcher, r).unwrap();
    }
    let small: Vec<_> = (0..5)
        .map(|i| set("shop", "web", &format!("small-{i}"), i))
        .collect();
    let batch = patcher.submit_batch(small, Priority::Background).unwrap();
    assert!(batch.wait().await.all_done());
    let calls = api.calls();
    let positions: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.pod.starts_with("small-"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(positions.len(), 5);
    // Turns alternate: the 5 small writes are among the first 10 writes.
    assert!(
        positions.iter().all(|p| *p < 10),
        "small policy writes at {positions:?}"
    );
    drop(patcher);
}

#[tokio::test(start_paused = true)]
async fn too_many_requests_waits_retry_after_and_holds_other_writes() {
    let api = FakeApi::new();
    let retry_after = Duration::from_secs(5);
    api.script(
        "p",
        vec![Answer::Done(Err(WriteError::TooManyRequests {
            retry_after: Some(retry_after),
        }))],
    );
    let patcher = Patcher::start(api.clone(), config(100.0, 10));
    let first = patcher
        .submit_batch(vec![set("shop", "web", "p", 1)], Priority::Background)
        .unwrap();
    tokio::time::sleep(SECOND).await;
    let second = patcher
        .submit_batch(vec![set("shop", "web", "q", 2)], Priority::Background)
        .unwrap();
    assert_eq!(first.wait().await.outcomes[0].1, WriteOutcome::Applied);
    assert_eq!(second.wait().await.outcomes[0].1, WriteOutcome::Applied);
    let p = api.calls_for("p");
    assert_eq!(p.len(), 2);
    assert!(
        p[1].at - p[0].at >= retry_after,
        "retried after {:?}",
        p[1].at - p[0].at
    );
    let q = api.calls_for("q");
    assert_eq!(q.len(), 1);
    assert!(
        q[0].at >= p[0].at + retry_after,
        "other pods wait out the 429 too"
    );
    assert_eq!(patcher.stats().retried, 1);
}

#[tokio::test(start_paused = true)]
async fn server_errors_are_retried_with_growing_backoff_until_success() {
    let api = FakeApi::new();
    let e503 = || {
        Answer::Done(Err(WriteError::Server {
            code: 503,
            message: "unavailable".into(),
        }))
    };
    api.script("p", vec![e503(), e503(), e503(), e503(), e503()]);
    let cfg = config(100.0, 10);
    let backoff = cfg.backoff;
    let patcher = Patcher::start(api.clone(), cfg);
    let batch = patcher
        .submit_batch(vec![set("shop", "web", "p", 3)], Priority::Background)
        .unwrap();
    assert_eq!(batch.wait().await.outcomes[0].1, WriteOutcome::Applied);
    let calls = api.calls_for("p");
    assert_eq!(calls.len(), 6);
    for (k, pair) in calls.windows(2).enumerate() {
        let gap = pair[1].at - pair[0].at;
        let step = (backoff.base * (1 << k)).min(backoff.max);
        // Equal jitter: between half the step and the step (+ timer tick).
        assert!(gap >= step / 2, "gap {k}: {gap:?} < {:?}", step / 2);
        assert!(
            gap <= step + Duration::from_millis(2),
            "gap {k}: {gap:?} > {step:?}"
        );
    }
    let stats = patcher.stats();
    assert_eq!((stats.retried, stats.applied), (5, 1));
}

#[tokio::test(start_paused = true)]
async fn timeouts_are_retried() {
    let api = FakeApi::new();
    api.script("p", vec![Answer::Hang]);
    let mut cfg = config(100.0, 10);
    cfg.write_timeout = Duration::from_secs(2);
    let patcher = Patcher::start(api.clone(), cfg);
    let batch = patcher
        .submit_batch(vec![set("shop", "web", "p", 3)], Priority::Background)
        .unwrap();
    assert_eq!(batch.wait().await.outcomes[0].1, WriteOutcome::Applied);
    let calls = api.calls_for("p");
    assert_eq!(calls.len(), 2);
    assert!(calls[1].at - calls[0].at >= Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn missing_pod_counts_as_done_without_retry() {
    let api = FakeApi::new();
    api.set_fallback(Answer::Done(Err(WriteError::Gone)));
    let patcher = Patcher::start(api.clone(), config(100.0, 10));
    let batch = patcher
        .submit_batch(vec![set("shop", "web", "p", 3)], Priority::Background)
        .unwrap();
    let report = batch.wait().await;
    assert_eq!(report.outcomes[0].1, WriteOutcome::Gone);
    assert!(report.all_done());
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(api.calls().len(), 1);
    let stats = patcher.stats();
    assert_eq!((stats.gone, stats.retried, stats.queue_depth), (1, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn permanent_refusal_is_reported_and_not_retried() {
    let api = FakeApi::new();
    let forbidden = WriteError::Rejected {
        code: 403,
        message: "pods \"p\" is forbidden".into(),
    };
    api.set_fallback(Answer::Done(Err(forbidden.clone())));
    let patcher = Patcher::start(api.clone(), config(100.0, 10));
    let batch = patcher
        .submit_batch(vec![set("shop", "web", "p", 3)], Priority::Background)
        .unwrap();
    let report = batch.wait().await;
    assert_eq!(report.outcomes[0].1, WriteOutcome::Failed(forbidden));
    assert!(!report.all_done());
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(api.calls().len(), 1);
    assert_eq!(patcher.stats().failed, 1);
    assert!(patcher.is_idle());
}

#[tokio::test(start_paused = true)]
async fn drain_finishes_queued_work_before_the_deadline() {
    let api = FakeApi::new();
    let patcher = Patcher::start(api.clone(), config(10.0, 1));
    for i in 0..20 {
        submit(&patcher, set("shop", "web", &format!("p{i}"), i)).unwrap();
    }
    let report = patcher.drain(Duration::from_secs(30)).await;
    assert!(report.completed());
    assert_eq!(api.calls().len(), 20);
    let refused = submit(&patcher, set("shop", "web", "late", 1));
    assert!(matches!(refused, Err(SubmitError::ShuttingDown { .. })));
    // A second drain reports the same.
    assert!(patcher.drain(Duration::from_secs(1)).await.completed());
}

#[tokio::test(start_paused = true)]
async fn drain_deadline_abandons_the_rest_and_says_so() {
    let api = FakeApi::new();
    let e500 = Answer::Done(Err(WriteError::Server {
        code: 500,
        message: "boom".into(),
    }));
    api.script("stuck", vec![e500; 100]);
    let patcher = Patcher::start(api.clone(), config(10.0, 1));
    let reqs: Vec<_> = (0..100)
        .map(|i| set("shop", "web", &format!("p{i}"), i))
        .chain([set("shop", "web", "stuck", 1)])
        .collect();
    let batch = patcher.submit_batch(reqs, Priority::Background).unwrap();
    let start = Instant::now();
    let report = patcher.drain(Duration::from_secs(3)).await;
    assert!(Instant::now() - start <= Duration::from_secs(3));
    assert!(!report.completed());
    assert!(report.abandoned.contains(&PodRef::new("shop", "stuck")));
    let outcomes = batch.wait().await.outcomes;
    let applied = outcomes
        .iter()
        .filter(|(_, o)| *o == WriteOutcome::Applied)
        .count();
    let abandoned = outcomes
        .iter()
        .filter(|(_, o)| *o == WriteOutcome::Abandoned)
        .count();
    assert_eq!(applied + abandoned, 101, "every value accounted for");
    assert_eq!(abandoned, report.abandoned.len());
    // 3 s at 10 qps with burst 1: about 30 writes, never more than 31.
    assert!(api.calls().len() <= 31);
    assert_eq!(patcher.stats().abandoned, abandoned as u64);
}

#[tokio::test(start_paused = true)]
async fn policy_limit_below_global_limit_is_respected() {
    let api = FakeApi::new();
    let patcher = Patcher::start(api.clone(), config(100.0, 10));
    let slow = PolicyKey::new("shop", "slow");
    patcher.set_policy_rate(&slow, Some(Rate::new("slow rateLimit", 5.0, 2).unwrap()));
    let mut reqs: Vec<_> = (0..40)
        .map(|i| set("shop", "slow", &format!("slow-{i}"), i))
        .collect();
    reqs.extend((0..300).map(|i| set("other", "fast", &format!("fast-{i}"), i)));
    let batch = patcher.submit_batch(reqs, Priority::Background).unwrap();
    assert!(batch.wait().await.all_done());

    let calls = api.calls();
    let slow_times: Vec<_> = calls
        .iter()
        .filter(|c| c.pod.starts_with("slow-"))
        .map(|c| c.at)
        .collect();
    let fast_times: Vec<_> = calls
        .iter()
        .filter(|c| c.pod.starts_with("fast-"))
        .map(|c| c.at)
        .collect();
    let all: Vec<_> = calls.iter().map(|c| c.at).collect();
    assert_eq!((slow_times.len(), fast_times.len()), (40, 300));
    assert!(max_in_window(&slow_times, SECOND, Duration::ZERO) <= 5 + 2);
    assert!(max_in_window(&slow_times, SECOND, SECOND) <= 5);
    assert!(max_in_window(&all, SECOND, Duration::ZERO) <= 110);
    assert!(max_in_window(&all, SECOND, SECOND) <= 100);
    // The slow policy's limit does not hold the other policy back.
    let fast_done = fast_times.iter().max().unwrap();
    let slow_done = slow_times.iter().max().unwrap();
    assert!(fast_done < slow_done);
    assert!(*fast_done < Duration::from_secs(4));
}

#[tokio::test(start_paused = true)]
async fn urgent_batch_goes_ahead_of_background_work() {
    let api = FakeApi::new();
    let slow = PolicyKey::new("shop", "web");
    let patcher = Patcher::start(api.clone(), config(10.0, 1));
    // The policy's own limit would hold these; urgent work is only under the global one.
    patcher.set_policy_rate(&slow, Some(Rate::new("web rateLimit", 1.0, 1).unwrap()));
    for i in 0..200 {
        submit(&patcher, set("batch", "crunch", &format!("bg-{i}"), i)).unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = api.calls().len();
    let urgent: Vec<_> = (0..5)
        .map(|i| set("shop", "web", &format!("urgent-{i}"), i))
        .collect();
    let batch = patcher.submit_batch(urgent, Priority::Urgent).unwrap();
    assert!(batch.wait().await.all_done());
    let calls = api.calls();
    let positions: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.pod.starts_with("urgent-"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(positions, (before..before + 5).collect::<Vec<_>>());
    let times: Vec<_> = calls.iter().map(|c| c.at).collect();
    assert!(
        max_in_window(&times, SECOND, SECOND) <= 10,
        "still under the global limit"
    );
}

/// A scale-in's writes draw on the scale-in allowance first: 300 land in
/// the first second at --qps 5 --burst 10 with an allowance of 250, the
/// rest within the operator-wide limit, and the background work waiting
/// meanwhile never goes faster than that limit. The allowance refills
/// over ten minutes, not at once.
#[tokio::test(start_paused = true)]
async fn a_scale_in_draws_on_its_allowance_and_only_its_writes_do() {
    let api = FakeApi::new();
    let mut cfg = config(5.0, 10);
    cfg.scale_in_allowance = scale_in_allowance(250);
    let patcher = Patcher::start(api.clone(), cfg);
    for i in 0..50 {
        submit(&patcher, set("batch", "crunch", &format!("bg-{i}"), i)).unwrap();
    }
    let urgent: Vec<_> = (0..300)
        .map(|i| set("shop", "web", &format!("urgent-{i}"), i))
        .collect();
    let batch = patcher.submit_batch(urgent, Priority::Urgent).unwrap();
    assert!(batch.wait().await.all_done());
    let calls = api.calls();
    let urgent_at: Vec<_> = calls
        .iter()
        .filter(|c| c.pod.starts_with("urgent-"))
        .map(|c| c.at)
        .collect();
    // the allowance (250) and the burst (10) at once, the rest at 5/s
    assert!(max_in_window(&urgent_at, SECOND, Duration::ZERO) >= 250);
    let last = urgent_at.iter().max().copied().unwrap_or_default();
    assert!(last < Duration::from_secs(10), "{last:?}");
    // 250 at once, and the few tokens it refilled while the rest waited
    let spent = patcher.stats().scale_in_allowance;
    assert!((250..=255).contains(&spent), "{spent}");
    // background writes never beyond the operator-wide limit: none while
    // the scale-in's writes wait for tokens, 5/s (burst 10) after
    tokio::time::sleep(Duration::from_secs(20)).await;
    let background: Vec<_> = api
        .calls()
        .iter()
        .filter(|c| c.pod.starts_with("bg-"))
        .map(|c| c.at)
        .collect();
    assert_eq!(background.len(), 50);
    for w in [SECOND, Duration::from_secs(5)] {
        let most = max_in_window(&background, w, Duration::ZERO);
        assert!(
            most as f64 <= 10.0 + 5.0 * w.as_secs_f64(),
            "{most} in {w:?}"
        );
    }
    // spent: a second scale-in a minute later finds 25 tokens (250 over
    // ten minutes), then the operator-wide limit
    tokio::time::sleep(Duration::from_secs(40)).await;
    let again: Vec<_> = (0..40)
        .map(|i| set("shop", "web", &format!("again-{i}"), i))
        .collect();
    let batch = patcher.submit_batch(again, Priority::Urgent).unwrap();
    assert!(batch.wait().await.all_done());
    let after = patcher.stats().scale_in_allowance - spent;
    assert!((24..=26).contains(&after), "{after}");
}

/// A scale-in's writes may fill the in-flight slots above
/// `max_in_flight` (up to `max_in_flight_urgent`): on a slow API server its
/// costs land three times as fast, and background writes never pass
/// `max_in_flight` at once.
#[tokio::test(start_paused = true)]
async fn a_scale_in_may_have_more_writes_in_flight_than_background_work() {
    let api = FakeApi::new();
    api.set_latency(SECOND);
    let mut cfg = config(1000.0, 1000);
    cfg.max_in_flight = 4;
    cfg.max_in_flight_urgent = 12;
    let patcher = Patcher::start(api.clone(), cfg);
    let urgent: Vec<_> = (0..24)
        .map(|i| set("shop", "web", &format!("urgent-{i}"), i))
        .collect();
    let batch = patcher.submit_batch(urgent, Priority::Urgent).unwrap();
    for i in 0..12 {
        submit(&patcher, set("batch", "crunch", &format!("bg-{i}"), i)).unwrap();
    }
    assert!(batch.wait().await.all_done());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let calls = api.calls();
    let started = |prefix: &str| -> BTreeMap<Duration, usize> {
        let mut at = BTreeMap::new();
        for c in calls.iter().filter(|c| c.pod.starts_with(prefix)) {
            *at.entry(c.at).or_default() += 1;
        }
        at
    };
    // 24 urgent writes in two waves of 12, a second apart
    let urgent = started("urgent-");
    assert_eq!(
        urgent.values().copied().collect::<Vec<_>>(),
        [12, 12],
        "{urgent:?}"
    );
    // the background waits for them, then 4 at a time
    let background = started("bg-");
    assert!(
        background.keys().all(|t| *t >= 2 * SECOND),
        "{background:?}"
    );
    assert_eq!(
        background.values().copied().max(),
        Some(4),
        "{background:?}"
    );
    assert_eq!(background.values().sum::<usize>(), 12);
}

#[tokio::test(start_paused = true)]
async fn full_queue_pushes_back_instead_of_dropping() {
    let api = FakeApi::new();
    let mut cfg = config(1.0, 1);
    cfg.queue_capacity = 5;
    let patcher = Patcher::start(api.clone(), cfg);
    for i in 0..5 {
        submit(&patcher, set("shop", "web", &format!("p{i}"), i)).unwrap();
    }
    let err = submit(&patcher, set("shop", "web", "p5", 5)).unwrap_err();
    assert_eq!(
        err,
        SubmitError::QueueFull {
            capacity: 5,
            needed: 1,
            pod: PodRef::new("shop", "p5"),
        }
    );
    assert!(err.to_string().contains("shop/p5"));
    // Updating a pod already queued still works.
    submit(&patcher, set("shop", "web", "p0", 50)).unwrap();
    // A batch that does not fit is refused whole.
    let batch = vec![set("shop", "web", "p1", 9), set("shop", "web", "p6", 6)];
    assert!(patcher.submit_batch(batch, Priority::Urgent).is_err());
    assert_eq!(patcher.stats().rejected, 3);
    let report = patcher.drain(Duration::from_secs(60)).await;
    assert!(report.completed());
    let costs: HashMap<String, String> = api
        .calls()
        .into_iter()
        .map(|c| (c.pod.clone(), c.cost().unwrap()))
        .collect();
    assert_eq!(costs.len(), 5);
    assert_eq!(costs["p0"], "50");
    assert_eq!(costs["p1"], "1", "refused batch changed nothing");
}

#[tokio::test(start_paused = true)]
async fn removal_sends_nulls_and_pending_values_are_visible() {
    let api = FakeApi::new();
    let patcher = Patcher::start(api.clone(), config(1.0, 1));
    let web = PolicyKey::new("shop", "web");
    submit(
        &patcher,
        PatchRequest::remove(PodRef::new("shop", "a"), "web"),
    )
    .unwrap();
    submit(&patcher, set("shop", "web", "b", 4)).unwrap();
    let pending = patcher.pending_for(&web);
    assert_eq!(pending.len(), 2);
    assert_eq!(pending[0].cost, None);
    assert_eq!(pending[1].cost, Some(4));
    assert!(patcher.drain(Duration::from_secs(10)).await.completed());
    let a = api.calls_for("a");
    assert_eq!(a.len(), 1);
    assert!(a[0].body["metadata"]["annotations"][POD_DELETION_COST].is_null());
    assert!(a[0].body["metadata"]["annotations"][POLICY_ANNOTATION].is_null());
    assert!(patcher.pending_for(&web).is_empty());
}

/// The real writer against the fake API server, which answers a stale UID as
/// a real server does (422 on a merge patch): a pod deleted and recreated
/// under the same name while its write waits is gone, and its namesake keeps
/// no cost meant for the old pod.
#[tokio::test]
async fn a_pod_replaced_while_its_write_waits_is_gone_and_its_namesake_untouched() {
    use deletion_cost::writes::KubePodWriter;
    use deletion_cost_testkit::fake_api::FakeApi as ApiServer;
    use serde_json::json;

    let server = ApiServer::start().await;
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "app:1"}]}})
    };
    let uid = |v: &Value| v["metadata"]["uid"].as_str().unwrap().to_owned();
    let kept = uid(&server.apply_json(pod("web-0")).unwrap());
    let old = uid(&server.apply_json(pod("web-1")).unwrap());

    let mut kube = server.config();
    kube.default_retry = false;
    let client = deletion_cost_testkit::fake_api::client_for(kube);
    let patcher = Patcher::start(KubePodWriter::new(client), config(100.0, 10));
    let batch = patcher
        .submit_batch(
            vec![
                set("shop", "web", "web-0", 7).with_uid(kept),
                set("shop", "web", "web-1", 7).with_uid(old.clone()),
            ],
            Priority::Background,
        )
        .unwrap();
    // Single-threaded test runtime: nothing was sent yet. The ReplicaSet
    // controller replaces the pod now.
    server.delete_json("Pod", "shop", "web-1").unwrap();
    let new = uid(&server.apply_json(pod("web-1")).unwrap());
    assert_ne!(new, old);

    let report = tokio::time::timeout(Duration::from_secs(20), batch.wait())
        .await
        .unwrap();
    assert_eq!(
        report.outcomes,
        [
            (PodRef::new("shop", "web-0"), WriteOutcome::Applied),
            (PodRef::new("shop", "web-1"), WriteOutcome::Gone),
        ]
    );
    assert!(report.all_done());
    let stats = patcher.stats();
    assert_eq!(
        (stats.applied, stats.gone, stats.failed, stats.retried),
        (1, 1, 0, 0)
    );
    // the server refused the stale write (422, as a real one does)...
    let writes = server.writes_to("pods");
    let to_new: Vec<u16> = writes
        .iter()
        .filter(|w| w.name.as_deref() == Some("web-1"))
        .map(|w| w.status)
        .collect();
    assert_eq!(to_new, [422]);
    // ...so the namesake carries no cost and keeps its own UID
    let now = server.get_json("Pod", "shop", "web-1").unwrap();
    assert_eq!(uid(&now), new);
    assert!(now["metadata"]["annotations"][POD_DELETION_COST].is_null());
    assert!(now["metadata"]["annotations"][POLICY_ANNOTATION].is_null());
    let kept = server.get_json("Pod", "shop", "web-0").unwrap();
    assert_eq!(kept["metadata"]["annotations"][POD_DELETION_COST], "7");
}

/// A restarting API server answers 403 for a moment: the write is retried
/// and lands. One that keeps answering 403 fails after the retry bound,
/// with the error, and the patcher remembers it until a later value lands.
#[tokio::test(start_paused = true)]
async fn a_refusal_window_is_retried_and_a_lasting_one_fails_after_the_bound() {
    let api = FakeApi::new();
    let forbidden = || {
        Answer::Done(Err(WriteError::Unauthorized {
            code: 403,
            message: "pods \"p\" is forbidden".into(),
        }))
    };
    api.script("blip", vec![forbidden(), forbidden(), forbidden()]);
    api.script("stuck", (0..50).map(|_| forbidden()).collect());
    let cfg = config(100.0, 10);
    let max = cfg.backoff.max_attempts;
    let patcher = Patcher::start(api.clone(), cfg);
    let policy = PolicyKey::new("shop", "web");
    let batch = patcher
        .submit_batch(
            vec![
                set("shop", "web", "blip", 1),
                set("shop", "web", "stuck", 2),
            ],
            Priority::Background,
        )
        .unwrap();
    let report = batch.wait().await;
    assert_eq!(report.outcomes[0].1, WriteOutcome::Applied);
    assert!(
        matches!(
            report.outcomes[1].1,
            WriteOutcome::Failed(WriteError::Unauthorized { code: 403, .. })
        ),
        "{report:?}"
    );
    assert_eq!(api.calls_for("blip").len(), 4);
    assert_eq!(api.calls_for("stuck").len(), max as usize);
    // every refused attempt is counted by its reason
    let unauthorized = ERROR_REASONS
        .iter()
        .position(|r| *r == "unauthorized")
        .expect("a reason");
    assert_eq!(patcher.stats().errors[unauthorized], 3 + u64::from(max));
    let failed = patcher.failed_for(&policy);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0.pod.name, "stuck");
    let states =
        patcher.write_states([&PodRef::new("shop", "blip"), &PodRef::new("shop", "stuck")]);
    assert!(
        matches!(states[0], Some(WriteState::Landed(..))),
        "{states:?}"
    );
    assert!(
        matches!(states[1], Some(WriteState::Failed(..))),
        "{states:?}"
    );
    // sent again (the next round does), it lands and the failure is history
    api.script("stuck", Vec::new());
    let again = patcher
        .submit_batch(vec![set("shop", "web", "stuck", 2)], Priority::Background)
        .unwrap();
    assert_eq!(again.wait().await.outcomes[0].1, WriteOutcome::Applied);
    assert!(patcher.failed_for(&policy).is_empty());
}

/// Writes go only while the term's gate is open: a closed gate holds them
/// (nothing sent, nothing lost), an open one lets them go, and a gate that
/// closes mid-batch stops the rest at once.
#[tokio::test(start_paused = true)]
async fn writes_wait_for_the_term_and_stop_when_it_ends() {
    let api = FakeApi::new();
    let (gate_tx, gate_rx) = tokio::sync::watch::channel(Gate::Closed);
    let mut cfg = config(10.0, 1);
    cfg.gate = WriteGate::new(gate_rx);
    let patcher = Patcher::start(api.clone(), cfg);
    let reqs: Vec<PatchRequest> = (0..20)
        .map(|i| set("shop", "web", &format!("p{i:02}"), i))
        .collect();
    let batch = patcher.submit_batch(reqs, Priority::Background).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(api.calls().is_empty(), "written outside a term");
    // a term of 1 s: about 10 writes at 10/s, then nothing
    let opened = Instant::now();
    gate_tx.send_replace(Gate::Until(opened + Duration::from_secs(1)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let sent = api.calls();
    assert!(
        !sent.is_empty() && sent.len() <= 11,
        "{} writes",
        sent.len()
    );
    let last = sent.iter().map(|c| c.at).max().unwrap_or_default();
    assert!(
        last < opened - api.0.lock().unwrap().start + Duration::from_secs(1),
        "a write at {last:?}, after the term ended"
    );
    // the next term writes the rest; every value lands exactly once
    gate_tx.send_replace(Gate::Open);
    let report = batch.wait().await;
    assert!(report.all_done(), "{report:?}");
    let mut per_pod: HashMap<String, usize> = HashMap::new();
    for c in api.calls() {
        *per_pod.entry(c.pod).or_default() += 1;
    }
    assert_eq!(per_pod.len(), 20);
    assert!(per_pod.values().all(|n| *n == 1), "{per_pod:?}");
}

/// A deleted policy's values not sent yet are dropped at once (their
/// waiters hear `Cancelled`); another policy's work goes on.
#[tokio::test(start_paused = true)]
async fn cancelling_a_policy_drops_its_queued_values_only() {
    let api = FakeApi::new();
    let patcher = Patcher::start(api.clone(), config(1.0, 1));
    let gone = patcher
        .submit_batch(
            (0..10)
                .map(|i| set("shop", "old", &format!("a{i}"), i))
                .collect(),
            Priority::Background,
        )
        .unwrap();
    let kept = patcher
        .submit_batch(
            (0..3)
                .map(|i| set("shop", "new", &format!("b{i}"), i))
                .collect(),
            Priority::Background,
        )
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let in_flight = patcher.cancel_policy(&PolicyKey::new("shop", "old"));
    assert!(in_flight.len() <= 1, "{in_flight:?}");
    let report = gone.wait().await;
    let cancelled = report
        .outcomes
        .iter()
        .filter(|(_, o)| *o == WriteOutcome::Cancelled)
        .count();
    assert!(cancelled >= 8, "{report:?}");
    assert!(kept.wait().await.all_done());
    let old_writes = api
        .calls()
        .iter()
        .filter(|c| c.pod.starts_with('a'))
        .count();
    assert!(old_writes <= 2, "{old_writes} writes of the deleted policy");
    assert!(patcher
        .pending_for(&PolicyKey::new("shop", "old"))
        .is_empty());
}

/// Status writes and Events draw from the operator-wide limit with the pod
/// writes: together they never pass it, and while both wait they take
/// turns, so neither starves.
#[tokio::test(start_paused = true)]
async fn status_and_events_share_the_limit_with_pod_writes_and_take_turns() {
    let api = FakeApi::new();
    let (qps, burst) = (10, 1);
    let patcher = Patcher::start(api.clone(), config(qps as f64, burst));
    let pods: Vec<_> = (0..100)
        .map(|i| set("shop", "web", &format!("pod-{i}"), i))
        .collect();
    let batch = patcher.submit_batch(pods, Priority::Background).unwrap();
    let mut status = other_writes(&patcher, &api, WriteKind::Status, "status-", 30, Ok(()));
    let mut events = other_writes(&patcher, &api, WriteKind::Events, "event-", 10, Ok(()));
    assert!(batch.wait().await.all_done());
    while let Some(done) = status.join_next().await {
        assert_eq!(done.unwrap(), Ok(()));
    }
    while let Some(done) = events.join_next().await {
        assert_eq!(done.unwrap(), Ok(()));
    }
    let calls = api.calls();
    assert_eq!(calls.len(), 140);
    let times: Vec<Duration> = calls.iter().map(|c| c.at).collect();
    assert!(max_in_window(&times, SECOND, Duration::ZERO) <= (qps + burst) as usize);
    assert!(max_in_window(&times, SECOND, SECOND) <= qps as usize);
    assert!(
        max_in_window(&times, 10 * SECOND, Duration::ZERO) <= (10 * qps + burst) as usize,
        "every kind together within the limit"
    );
    // while both wait, every other write is a pod's
    let kinds: String = calls[..80]
        .iter()
        .map(|c| if c.pod.starts_with("pod-") { 'p' } else { 'o' })
        .collect();
    assert!(!kinds.contains("pp") && !kinds.contains("oo"), "{kinds}");
    // the other writes wait their turn in arrival order
    let order: Vec<&str> = calls
        .iter()
        .filter(|c| !c.pod.starts_with("pod-"))
        .map(|c| c.pod.as_str())
        .collect();
    let expected: Vec<String> = (0..30)
        .map(|i| format!("status-{i}"))
        .chain((0..10).map(|i| format!("event-{i}")))
        .collect();
    assert_eq!(order, expected);
    let stats = patcher.stats();
    assert_eq!(stats.writes_of(WriteKind::Pods), 100);
    assert_eq!(stats.writes_of(WriteKind::Status), 30);
    assert_eq!(stats.writes_of(WriteKind::Events), 10);
    assert_eq!(stats.permits_waiting, 0);
}

/// A scale-in's pod writes go before status writes and Events already
/// waiting, as before background pod writes.
#[tokio::test(start_paused = true)]
async fn urgent_pod_writes_go_ahead_of_status_and_events() {
    let api = FakeApi::new();
    let patcher = Patcher::start(api.clone(), config(10.0, 1));
    for i in 0..50 {
        submit(&patcher, set("batch", "crunch", &format!("bg-{i}"), i)).unwrap();
    }
    let mut others = other_writes(&patcher, &api, WriteKind::Status, "status-", 40, Ok(()));
    // between two tokens (one every 100 ms), so none is granted as it comes
    tokio::time::sleep(Duration::from_millis(2050)).await;
    let before = api.calls().len();
    let urgent: Vec<_> = (0..5)
        .map(|i| set("shop", "web", &format!("urgent-{i}"), i))
        .collect();
    let batch = patcher.submit_batch(urgent, Priority::Urgent).unwrap();
    assert!(batch.wait().await.all_done());
    let calls = api.calls();
    let positions: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.pod.starts_with("urgent-"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(positions, (before..before + 5).collect::<Vec<_>>());
    while let Some(done) = others.join_next().await {
        assert_eq!(done.unwrap(), Ok(()));
    }
}

/// No permit outside a term; one still waiting when the term ends is
/// refused (nothing sent), and so is one asked of a stopped patcher.
#[tokio::test(start_paused = true)]
async fn other_writes_wait_for_the_term_and_are_refused_when_it_ends() {
    let api = FakeApi::new();
    let (gate_tx, gate_rx) = tokio::sync::watch::channel(Gate::Closed);
    let mut cfg = config(10.0, 1);
    cfg.gate = WriteGate::new(gate_rx);
    let patcher = Patcher::start(api.clone(), cfg);
    let mut waiting = other_writes(&patcher, &api, WriteKind::Status, "status-", 3, Ok(()));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(api.calls().is_empty(), "written outside a term");
    assert_eq!(patcher.stats().permits_waiting, 3);
    gate_tx.send_replace(Gate::Open);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!api.calls().is_empty(), "the term's writes went");
    gate_tx.send_replace(Gate::Closed);
    let mut late = other_writes(&patcher, &api, WriteKind::Events, "event-", 2, Ok(()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = patcher.drain(Duration::ZERO).await;
    assert!(report.completed());
    while let Some(done) = late.join_next().await {
        assert_eq!(
            done.unwrap(),
            Err(BudgetError::TermEnded { kind: "events" })
        );
    }
    while let Some(done) = waiting.join_next().await {
        assert_eq!(done.unwrap(), Ok(()));
    }
    assert!(api.calls().iter().all(|c| c.pod.starts_with("status-")));
    assert!(matches!(
        patcher.permit(WriteKind::Status).map(drop),
        Err(BudgetError::TermEnded { kind: "status" })
    ));
}

/// A 429 on a status write holds every write for the server's delay, as
/// one on a pod write does.
#[tokio::test(start_paused = true)]
async fn too_many_requests_on_a_status_write_holds_the_pod_writes_too() {
    let api = FakeApi::new();
    let patcher = Patcher::start(api.clone(), config(100.0, 10));
    let busy = Err(WriteError::TooManyRequests {
        retry_after: Some(Duration::from_secs(5)),
    });
    let mut status = other_writes(&patcher, &api, WriteKind::Status, "status-", 1, busy);
    assert_eq!(status.join_next().await.unwrap().unwrap(), Ok(()));
    let refused_at = api.calls()[0].at;
    let batch = patcher
        .submit_batch(vec![set("shop", "web", "p", 1)], Priority::Background)
        .unwrap();
    assert!(batch.wait().await.all_done());
    let p = api.calls_for("p");
    assert!(
        p[0].at >= refused_at + Duration::from_secs(5),
        "a pod write at {:?}, the 429 at {refused_at:?}",
        p[0].at
    );
    let stats = patcher.stats();
    let busy_index = 2; // OUTCOMES: ok, gone, too_many_requests, ...
    assert_eq!(stats.writes[1][busy_index], 1);
}

/// The budgeted client: every write waits for a permit of the term's
/// patcher and is counted by kind and outcome; reads go straight through;
/// without a term a write is refused and nothing is sent.
#[tokio::test(start_paused = true)]
async fn the_budgeted_client_sends_every_write_within_the_limit() {
    use deletion_cost::policy::DeletionCostPolicy;
    use k8s_openapi::api::events::v1::Event;
    use kube::api::{Patch, PatchParams, PostParams};

    let sent: Arc<Mutex<Vec<(Duration, String, String)>>> = Arc::default();
    let start = Instant::now();
    let log = Arc::clone(&sent);
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let log = Arc::clone(&log);
        async move {
            log.lock().unwrap().push((
                Instant::now() - start,
                req.method().to_string(),
                req.uri().path().to_owned(),
            ));
            let (code, body) = if req.uri().path().ends_with("/status") {
                (
                    429,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1",
                    "status": "Failure", "code": 429, "reason": "TooManyRequests"}),
                )
            } else {
                (
                    200,
                    serde_json::json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                    "metadata": {"name": "e", "namespace": "shop"}, "eventTime": null}),
                )
            };
            http::Response::builder()
                .status(code)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::RETRY_AFTER, "2")
                .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
        }
    });
    let raw = kube::Client::new(service, "default");
    let patcher = Patcher::start(FakeApi::new(), config(2.0, 1));
    let term: Arc<Mutex<Option<Patcher>>> = Arc::new(Mutex::new(Some(patcher.clone())));
    let slot = Arc::clone(&term);
    let client = budgeted_client(raw, Arc::new(move || slot.lock().unwrap().clone()));

    let events: kube::Api<Event> = kube::Api::namespaced(client.clone(), "shop");
    for i in 0..4 {
        let mut e = Event::default();
        e.metadata.name = Some(format!("e{i}"));
        events.create(&PostParams::default(), &e).await.unwrap();
    }
    // a read goes at once, whatever the budget
    let _ = events.get("e0").await;
    let policies: kube::Api<DeletionCostPolicy> = kube::Api::namespaced(client.clone(), "shop");
    let status = serde_json::json!({"status": {}});
    let refused = policies
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 429),
        "{refused:?}"
    );
    let calls = sent.lock().unwrap().clone();
    let writes: Vec<Duration> = calls
        .iter()
        .filter(|(_, m, _)| m != "GET")
        .map(|(t, _, _)| *t)
        .collect();
    assert_eq!(writes.len(), 5);
    // 2 a second after a burst of 1: 0, 0.5, 1.0, 1.5, 2.0 s
    assert!(
        writes
            .windows(2)
            .all(|w| w[1] - w[0] >= Duration::from_millis(499)),
        "{writes:?}"
    );
    let get = calls.iter().find(|(_, m, _)| m == "GET").unwrap();
    assert_eq!(get.0, writes[3], "the read did not wait: {calls:?}");
    // the 429 holds the next write for its Retry-After (2 s)
    let again = Instant::now();
    events
        .create(&PostParams::default(), &Event::default())
        .await
        .unwrap();
    let last = sent.lock().unwrap().last().unwrap().0;
    assert!(
        last >= writes[4] + Duration::from_secs(2),
        "{last:?} vs {writes:?}"
    );
    assert!(Instant::now() - again >= Duration::from_millis(1500));
    let stats = patcher.stats();
    assert_eq!(stats.writes_of(WriteKind::Events), 5);
    assert_eq!(stats.writes[1][2], 1, "the status write's 429");

    // without a term: refused, nothing sent
    *term.lock().unwrap() = None;
    let before = sent.lock().unwrap().len();
    let refused = events
        .create(&PostParams::default(), &Event::default())
        .await;
    let text = refused.unwrap_err().to_string();
    assert!(text.contains("does not lead"), "{text}");
    assert_eq!(sent.lock().unwrap().len(), before);
}
