//! Waiting for a condition: the one polling loop of the tests.

use std::future::Future;
use std::time::Duration;

/// First pause between two checks; it doubles up to [`LONGEST_PAUSE`], so a
/// condition that holds soon is seen soon and a long wait against a real
/// cluster does not flood it.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_millis(250);

/// Checks `check` until it holds or `limit` has passed: `true` when it held.
/// The first check is at once and the last one at the limit. Time is tokio's
/// (a paused clock advances through the pauses).
///
/// `check` is async; a plain condition is `|| async { cond }`, and one that
/// keeps what it saw returns `std::future::ready(..)` instead.
pub async fn wait_until<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    let mut pause = FIRST_PAUSE;
    loop {
        if check().await {
            return true;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return false;
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// Waits until `check` holds; panics naming `what` when it has not within
/// `limit`: `eventually(Duration::from_secs(30), "pods costed", || async {
/// converged(&fake, 4) }).await`.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    if !wait_until(limit, check).await {
        panic!("timed out after {limit:?} waiting: {what}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[tokio::test(start_paused = true)]
    async fn checks_at_once_then_until_the_limit() {
        let checks = Cell::new(0);
        let start = tokio::time::Instant::now();
        assert!(
            wait_until(Duration::from_secs(1), || async {
                checks.set(checks.get() + 1);
                true
            })
            .await
        );
        assert_eq!((checks.get(), start.elapsed()), (1, Duration::ZERO));

        let last = Cell::new(start);
        assert!(
            !wait_until(Duration::from_secs(5), || async {
                last.set(tokio::time::Instant::now());
                false
            })
            .await
        );
        // the last check is at the limit, not a pause before it
        assert_eq!(last.get() - start, Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn sees_a_condition_that_holds_later() {
        let start = tokio::time::Instant::now();
        let at = Duration::from_millis(700);
        eventually(Duration::from_secs(2), "700 ms passed", || async {
            start.elapsed() >= at
        })
        .await;
        assert!(start.elapsed() < at + LONGEST_PAUSE);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out after 1s waiting: the impossible")]
    async fn names_what_it_waited_for() {
        eventually(Duration::from_secs(1), "the impossible", || async { false }).await;
    }
}
