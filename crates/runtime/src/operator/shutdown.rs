//! One deadline for the whole shutdown: every stage after SIGTERM (stopping
//! the controller, draining writes, releasing the lease, closing listeners)
//! shares `--shutdown-grace`, so the process ends in time in every state,
//! including before the caches have synced.

use std::future::Future;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::watch;
use tokio::time::Instant;

/// When shutdown was asked for, shared by every stage that must end by then.
#[derive(Clone)]
pub struct Shutdown {
    asked: watch::Receiver<Option<Instant>>,
    grace: Duration,
}

impl Shutdown {
    /// Watches `signal`; the grace period starts when it resolves.
    pub fn spawn(signal: impl Future<Output = ()> + Send + 'static, grace: Duration) -> Self {
        let (tx, asked) = watch::channel(None);
        let grace_seconds = grace.as_secs();
        tokio::spawn(async move {
            signal.await;
            // said before any stage can see it, so the line is never lost to
            // a process that ends at once
            tracing::info!(grace_seconds, "shutdown asked: stopping");
            let _ = tx.send(Some(Instant::now()));
            // keep the sender while anyone listens: a dropped sender would
            // read as "never asked"
            tx.closed().await;
        });
        Shutdown { asked, grace }
    }

    /// Resolves once shutdown was asked for.
    pub fn asked(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let mut rx = self.asked.clone();
        async move {
            let _ = rx.wait_for(Option::is_some).await;
        }
    }

    /// Resolves at the moment everything must have ended: the signal plus
    /// the grace period, less `reserve` kept for the stages after this one.
    pub fn deadline(&self, reserve: Duration) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.asked.clone();
        let budget = self.grace.saturating_sub(reserve);
        async move {
            let asked = rx.wait_for(Option::is_some).await.ok().and_then(|at| *at);
            match asked {
                Some(at) => tokio::time::sleep_until(at + budget).await,
                None => std::future::pending().await,
            }
        }
    }

    /// Time left until the final deadline (the whole grace while nothing
    /// was asked, so a stage that runs on its own is still bounded).
    pub fn remaining(&self) -> Duration {
        match *self.asked.borrow() {
            Some(at) => (at + self.grace).saturating_duration_since(Instant::now()),
            None => self.grace,
        }
    }
}

/// What the last stages (lease release, closing the listeners) keep of the
/// grace period: a quarter of it, at most two seconds.
pub fn reserve(grace: Duration) -> Duration {
    (grace / 4).min(Duration::from_secs(2))
}

/// Resolves at the first SIGTERM or SIGINT (Ctrl-C).
pub async fn signal() {
    let ctrl_c = tokio::signal::ctrl_c().map(|_| ());
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => ctrl_c.await,
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn deadline_is_the_signal_plus_the_grace_less_the_reserve() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let s = Shutdown::spawn(
            async move {
                let _ = rx.await;
            },
            Duration::from_secs(10),
        );
        let start = Instant::now();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(s.remaining(), Duration::from_secs(10), "not asked yet");
        let _ = tx.send(());
        s.asked().await;
        s.deadline(Duration::from_secs(2)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(3 + 8));
        assert_eq!(s.remaining(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_signal_nothing_fires() {
        let s = Shutdown::spawn(std::future::pending(), Duration::from_secs(1));
        let fired =
            tokio::time::timeout(Duration::from_secs(3600), s.deadline(Duration::ZERO)).await;
        assert!(fired.is_err());
    }

    #[test]
    fn reserve_is_a_quarter_capped_at_two_seconds() {
        assert_eq!(reserve(Duration::from_secs(20)), Duration::from_secs(2));
        assert_eq!(reserve(Duration::from_secs(4)), Duration::from_secs(1));
        assert_eq!(reserve(Duration::ZERO), Duration::ZERO);
    }
}
