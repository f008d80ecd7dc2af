//! Rate limits: governor's GCRA limiter driven by tokio's clock.
//!
//! governor's default clock (quanta) runs on real time. Driving it from
//! `tokio::time::Instant` changes nothing in production (tokio's instant is
//! the monotonic clock there) and lets tests pause and advance time, so
//! limiter behaviour is checked deterministically and in no real time.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::time::Instant;

/// A governor clock reading tokio's (pausable) clock, as nanoseconds since
/// the clock was made.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base: Instant,
}

impl TokioClock {
    /// A clock whose zero is now.
    pub fn new() -> Self {
        TokioClock {
            base: Instant::now(),
        }
    }

    /// The tokio instant of a governor reading.
    pub fn to_instant(&self, at: Nanos) -> Instant {
        self.base + Duration::from(at)
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        // u64 nanoseconds cover ~584 years of uptime.
        let elapsed = self.base.elapsed().as_nanos();
        Nanos::from(u64::try_from(elapsed).unwrap_or(u64::MAX))
    }
}

/// A rate that is not usable as a limit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LimitError {
    /// qps must be a positive, finite number no larger than one per nanosecond.
    #[error("{what}: qps must be a positive number (got {qps})")]
    BadQps {
        /// Which limit (e.g. `--qps` or `policy shop/web rateLimit`).
        what: String,
        /// The value given.
        qps: f64,
    },
    /// burst must be at least 1.
    #[error("{what}: burst must be at least 1 (got {burst})")]
    BadBurst {
        /// Which limit.
        what: String,
        /// The value given.
        burst: u32,
    },
}

/// A sustained rate and a burst, validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    qps: f64,
    burst: NonZeroU32,
}

impl Rate {
    /// Validate `qps` and `burst`; `what` names the setting in errors.
    pub fn new(what: &str, qps: f64, burst: u32) -> Result<Self, LimitError> {
        if !(qps.is_finite() && qps > 0.0 && qps <= 1e9) {
            return Err(LimitError::BadQps {
                what: what.to_owned(),
                qps,
            });
        }
        let burst = NonZeroU32::new(burst).ok_or_else(|| LimitError::BadBurst {
            what: what.to_owned(),
            burst,
        })?;
        Ok(Rate { qps, burst })
    }

    /// Sustained writes per second.
    pub fn qps(&self) -> f64 {
        self.qps
    }

    /// Writes allowed at once.
    pub fn burst(&self) -> u32 {
        self.burst.get()
    }

    fn quota(&self) -> Quota {
        let period = Duration::from_secs_f64(1.0 / self.qps).max(Duration::from_nanos(1));
        // with_period is None only for a zero period, excluded just above.
        Quota::with_period(period)
            .unwrap_or_else(|| Quota::per_second(self.burst))
            .allow_burst(self.burst)
    }
}

/// Writes a scale-in's correction may send beyond `--qps`/`--burst` when
/// `--scale-in-allowance` is unset: one sync's worth of the ReplicaSet
/// controller's own deletions (500 pods).
pub const DEFAULT_SCALE_IN_ALLOWANCE: u32 = 500;

/// How long the scale-in allowance takes to fill up again once spent: at
/// most one allowance's worth of extra writes in any such period, less
/// than one a second on average.
pub const SCALE_IN_REFILL: Duration = Duration::from_secs(600);

/// The scale-in allowance of `writes` writes: all of them at once, refilled
/// over [`SCALE_IN_REFILL`]; `None` for 0 (every write within `--qps`).
pub fn scale_in_allowance(writes: u32) -> Option<Rate> {
    let burst = NonZeroU32::new(writes)?;
    Some(Rate {
        qps: f64::from(writes) / SCALE_IN_REFILL.as_secs_f64(),
        burst,
    })
}

/// The operator-wide write limits a leader's writes run under.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WriteLimits {
    /// `--qps`.
    pub qps: f64,
    /// `--burst`.
    pub burst: u32,
    /// `--scale-in-allowance` (0: none).
    pub scale_in_allowance: u32,
}

impl WriteLimits {
    /// The operator-wide rate, checked.
    pub fn rate(&self) -> Result<Rate, LimitError> {
        Rate::new("--qps/--burst", self.qps, self.burst)
    }

    /// The scale-in allowance, if any ([`scale_in_allowance`]).
    pub fn scale_in(&self) -> Option<Rate> {
        scale_in_allowance(self.scale_in_allowance)
    }
}

type Gcra = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Nanos>>;

/// One GCRA limiter (governor) on the tokio clock.
#[derive(Debug)]
pub struct Limiter {
    rate: Rate,
    clock: TokioClock,
    gcra: Gcra,
}

impl Limiter {
    /// A limiter allowing `rate`, full at creation.
    pub fn new(rate: Rate) -> Self {
        let clock = TokioClock::new();
        Limiter {
            rate,
            clock,
            gcra: RateLimiter::direct_with_clock(rate.quota(), clock),
        }
    }

    /// The configured rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Take one token now, or learn the earliest instant one is available.
    pub fn try_acquire(&self) -> Result<(), Instant> {
        self.gcra
            .check()
            .map_err(|not_until| self.clock.to_instant(not_until.earliest_possible()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_unusable_rates() {
        assert!(Rate::new("--qps", 0.0, 1).is_err());
        assert!(Rate::new("--qps", -1.0, 1).is_err());
        assert!(Rate::new("--qps", f64::NAN, 1).is_err());
        assert!(Rate::new("--qps", f64::INFINITY, 1).is_err());
        let err = Rate::new("--burst", 5.0, 0).unwrap_err();
        assert_eq!(err.to_string(), "--burst: burst must be at least 1 (got 0)");
        assert!(Rate::new("x", 0.5, 1).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn burst_then_one_token_per_period_on_paused_clock() {
        let limiter = Limiter::new(Rate::new("t", 10.0, 3).unwrap());
        let start = Instant::now();
        for _ in 0..3 {
            assert!(limiter.try_acquire().is_ok());
        }
        let next = limiter.try_acquire().unwrap_err();
        assert_eq!(next - start, Duration::from_millis(100));
        tokio::time::sleep_until(next).await;
        assert!(limiter.try_acquire().is_ok());
        let next = limiter.try_acquire().unwrap_err();
        assert_eq!(next - start, Duration::from_millis(200));
    }
}
