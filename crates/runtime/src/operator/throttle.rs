//! A trailing-edge throttle for reconcile triggers. kube-runtime's debounce
//! restarts its quiet period at every trigger, so the pod events of the
//! operator's own writes (one every 1/qps seconds) kept a policy from being
//! reconciled for a whole batch. Here the first trigger of an object opens a
//! window; the triggers that follow within it are absorbed, and the object
//! is triggered once when the window ends: at most one reconcile a window,
//! never more than one window late.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Throttles `input` per key (`key` None: passed on at once). The newest
/// item of a key is the one passed on at the end of its window. The input is
/// driven by a task of its own, which ends when the output is dropped.
pub fn throttle<T, K, S>(
    input: S,
    window: Duration,
    key: impl Fn(&T) -> Option<K> + Send + 'static,
) -> impl Stream<Item = T> + Send + 'static
where
    S: Stream<Item = T> + Send + 'static,
    T: Send + 'static,
    K: Eq + Hash + Clone + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut input = Box::pin(input);
        let mut waiting: HashMap<K, (Instant, T)> = HashMap::new();
        let mut open = true;
        while open || !waiting.is_empty() {
            let next_due = waiting.values().map(|(due, _)| *due).min();
            tokio::select! {
                // a window that ends as a trigger arrives passes what it holds first
                biased;
                _ = sleep_until(next_due, open) => {
                    let now = Instant::now();
                    let ready: Vec<K> = waiting
                        .iter()
                        .filter(|(_, (due, _))| *due <= now || !open)
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in ready {
                        if let Some((_, item)) = waiting.remove(&k) {
                            if tx.send(item).is_err() {
                                return;
                            }
                        }
                    }
                }
                item = input.next(), if open => match item {
                    None => open = false,
                    Some(item) => match key(&item) {
                        None => {
                            if tx.send(item).is_err() {
                                return;
                            }
                        }
                        Some(k) => match waiting.get_mut(&k) {
                            Some((_, newest)) => *newest = item,
                            None => {
                                waiting.insert(k, (Instant::now() + window, item));
                            }
                        },
                    },
                },
                _ = tx.closed() => return,
            }
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
}

/// Sleeps until `due` (at once when the input has ended: what waits is
/// passed on; forever when nothing waits).
async fn sleep_until(due: Option<Instant>, open: bool) {
    match due {
        Some(_) if !open => {}
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Triggers every 100 ms for 3 s with a 1 s window: a debounce would run
    /// nothing until they stop; the throttle passes one a window, the newest.
    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_of_triggers_passes_one_a_window() {
        let start = Instant::now();
        let input = futures::stream::unfold(0u32, |n| async move {
            if n == 35 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((("policy-a", n), n + 1))
        });
        let out: Vec<(Duration, u32)> = throttle(input, Duration::from_secs(1), |(k, _)| Some(*k))
            .map(|(_, n)| (start.elapsed(), n))
            .take(3)
            .collect()
            .await;
        let times: Vec<u64> = out.iter().map(|(t, _)| t.as_millis() as u64).collect();
        // windows open at the 1st, 11th and 21st trigger; each passes its newest
        assert_eq!(times, vec![1100, 2100, 3100], "{out:?}");
        assert_eq!(
            out.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
            vec![9, 19, 29]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keys_have_their_own_windows_and_keyless_items_pass_at_once() {
        let input = futures::stream::iter(vec![Some("a"), Some("b"), None, Some("a")]);
        let start = Instant::now();
        let out: Vec<(Option<&str>, u128)> =
            throttle(input, Duration::from_secs(1), |k: &Option<&str>| *k)
                .map(|k| (k, start.elapsed().as_millis()))
                .collect()
                .await;
        // the input ended: what waited is passed on at once
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(out[0], (None, 0));
        let mut keys: Vec<Option<&str>> = out[1..].iter().map(|(k, _)| *k).collect();
        keys.sort();
        assert_eq!(keys, vec![Some("a"), Some("b")]);
    }
}
