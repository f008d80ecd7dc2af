//! Calls per source: each caller's address has its own budget of calls to
//! the hook's listeners (the pre-scale-down hook and the scale-in webhook),
//! so that no one source can make the leader run round after round. The
//! budget is `--hook-source-qps` with a burst of `--hook-source-burst`.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::writes::Rate;

/// One budget per source address.
pub(crate) struct PerSource {
    limiter: DefaultKeyedRateLimiter<IpAddr>,
    clock: DefaultClock,
}

impl PerSource {
    /// `rate` for each source.
    pub(crate) fn new(rate: Rate) -> Self {
        let burst = NonZeroU32::new(rate.burst()).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(Duration::from_secs_f64(1.0 / rate.qps()))
            .unwrap_or_else(|| Quota::per_second(burst))
            .allow_burst(burst);
        let limiter = RateLimiter::keyed(quota);
        let clock = limiter.clock().clone();
        PerSource { limiter, clock }
    }

    /// Takes one call from `source`'s budget, or says how long until it has
    /// one again.
    pub(crate) fn check(&self, source: IpAddr) -> Result<(), Duration> {
        self.limiter
            .check_key(&source)
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Forgets the sources whose budget is full again: the memory stays
    /// bounded by the sources of the last moments, however many called.
    pub(crate) fn forget_idle(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }

    /// Sources remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.limiter.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(qps: f64, burst: u32) -> PerSource {
        PerSource::new(Rate::new("test", qps, burst).unwrap())
    }

    #[test]
    fn each_source_has_its_own_burst() {
        let limits = rate(0.001, 3);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "::1".parse().unwrap());
        for _ in 0..3 {
            assert!(limits.check(a).is_ok());
        }
        let wait = limits.check(a).unwrap_err();
        // one call every 1000 s: the next is most of that away
        assert!(wait > Duration::from_secs(900), "{wait:?}");
        assert!(limits.check(b).is_ok(), "another source is not held");
        assert_eq!(limits.len(), 2);
    }

    #[test]
    fn a_source_still_over_its_budget_is_remembered() {
        let limits = rate(0.001, 1);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(limits.check(a).is_ok());
        limits.forget_idle();
        assert!(
            limits.check(a).is_err(),
            "forgetting it would reset its budget"
        );
    }
}
