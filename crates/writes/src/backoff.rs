//! How long a failed write waits before its next attempt (pure, seeded).

use std::time::Duration;

use super::writer::WriteError;

/// Retry timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffConfig {
    /// Delay before the first retry of a 5xx/timeout (doubles per attempt).
    pub base: Duration,
    /// Upper bound of any backoff delay.
    pub max: Duration,
    /// Wait after a 429 that names no delay.
    pub default_retry_after: Duration,
    /// Attempts of one value before it fails (429s, the server asking us to
    /// slow down, do not count): a refusal that persists becomes visible
    /// instead of being retried unseen, and the next round sends it again.
    pub max_attempts: u32,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            base: Duration::from_millis(500),
            max: Duration::from_secs(60),
            default_retry_after: super::writer::DEFAULT_RETRY_AFTER,
            max_attempts: 10,
        }
    }
}

/// Delay before retrying a write that failed with `err` on attempt number
/// `attempt` (1 = the first attempt failed). `unit` is a jitter draw in `[0, 1)`.
///
/// * 429: the server's delay (or the default) plus up to 10% more, so pods
///   throttled together do not return together; never less than asked.
/// * everything else: "equal jitter" exponential backoff, half fixed and
///   half random, `base * 2^(attempt-1)` capped at `max`.
pub fn retry_delay(cfg: &BackoffConfig, err: &WriteError, attempt: u32, unit: f64) -> Duration {
    let unit = unit.clamp(0.0, 1.0);
    match err {
        // never sent: it goes when the next term opens the gate
        WriteError::OutsideTerm => Duration::ZERO,
        WriteError::TooManyRequests { retry_after } => {
            let asked = retry_after.unwrap_or(cfg.default_retry_after);
            asked + asked.mul_f64(0.1 * unit)
        }
        _ => {
            let shift = attempt.saturating_sub(1).min(30);
            let exp = cfg.base.saturating_mul(1u32 << shift).min(cfg.max);
            let half = exp / 2;
            half + half.mul_f64(unit)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> WriteError {
        WriteError::Server {
            code: 503,
            message: String::new(),
        }
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let cfg = BackoffConfig {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
            default_retry_after: Duration::from_secs(1),
            ..BackoffConfig::default()
        };
        // Without jitter (unit 0) the delay is half the exponential step.
        let lows: Vec<_> = (1..=6)
            .map(|a| retry_delay(&cfg, &server(), a, 0.0).as_millis())
            .collect();
        assert_eq!(lows, vec![50, 100, 200, 400, 500, 500]);
        // Jitter never exceeds the step, nor the cap.
        assert!(retry_delay(&cfg, &server(), 40, 0.999_999) <= cfg.max);
        assert!(retry_delay(&cfg, &server(), 2, 0.999) < Duration::from_millis(200));
    }

    #[test]
    fn too_many_requests_waits_at_least_what_the_server_asked() {
        let cfg = BackoffConfig::default();
        let err = WriteError::TooManyRequests {
            retry_after: Some(Duration::from_secs(5)),
        };
        for unit in [0.0, 0.5, 0.99] {
            let d = retry_delay(&cfg, &err, 9, unit);
            assert!(d >= Duration::from_secs(5) && d <= Duration::from_millis(5500));
        }
        let none = WriteError::TooManyRequests { retry_after: None };
        assert!(retry_delay(&cfg, &none, 1, 0.0) >= cfg.default_retry_after);
    }

    #[test]
    fn jitter_rng_is_uniform_enough_and_reproducible() {
        // the patcher's jitter draws: fastrand, seeded from `jitter_seed`
        let mut a = fastrand::Rng::with_seed(7);
        let mut b = fastrand::Rng::with_seed(7);
        let xs: Vec<f64> = (0..1000).map(|_| a.f64()).collect();
        let ys: Vec<f64> = (0..1000).map(|_| b.f64()).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let below_half = xs.iter().filter(|x| **x < 0.5).count();
        assert!((400..600).contains(&below_half), "{below_half}");
    }
}
