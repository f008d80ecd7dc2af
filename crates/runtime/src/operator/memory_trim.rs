//! Giving freed heap memory back to the OS.
//!
//! A reconcile round allocates a namespace snapshot and a plan and frees them
//! again; the write queue grows and drains. glibc keeps what was freed in its
//! arenas, so without help the operator's RSS stays near its busiest moment
//! long after the work is done. Two things bring it down to what is live:
//! fixed (not self-raising) mmap and trim thresholds, set once at start, and a
//! `malloc_trim` after busy periods, which also releases free pages in the
//! middle of the heap. On other allocators both are no-ops.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Size from which glibc serves an allocation with its own mapping, and the
/// free space at the top of the heap it keeps before returning it: 128 KiB,
/// glibc's own starting value, held fixed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const FIXED_THRESHOLD: libc::c_int = 128 * 1024;

/// Sets the allocator's thresholds for a long-running process, or a command
/// that reads a large input. Call once, before the caches fill.
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's tuning parameters; any value is
    // accepted or refused (returns 0) without touching allocated memory.
    unsafe {
        // glibc raises both thresholds each time it frees a block large
        // enough to have had its own mapping, after which freed memory stays
        // in the process; setting them turns that off.
        if libc::mallopt(libc::M_MMAP_THRESHOLD, FIXED_THRESHOLD) == 0
            || libc::mallopt(libc::M_TRIM_THRESHOLD, FIXED_THRESHOLD) == 0
        {
            tracing::warn!("the allocator refused its thresholds; freed memory may stay resident");
        }
    }
}

/// Returns the heap's free pages to the OS. It walks every free chunk (1–3 ms
/// with 100k pods cached), so it runs after busy periods, not after every
/// round. Returns whether any memory went back.
pub fn release() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim walks glibc's own free lists under its locks and
    // only releases pages no allocation uses.
    unsafe {
        libc::malloc_trim(0) == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// How often the release task looks for the end of a busy period.
const HEAP_RELEASE_EVERY: Duration = Duration::from_secs(1);

/// Gives freed heap back to the OS once a busy period (planning rounds, or
/// writes going out while the queue drains) is over, so RSS follows what is
/// live instead of the busiest moment. Not during one: the next round would
/// only fault the same pages back in.
/// `churn` says whether rounds allocated since it was last asked;
/// `writes` counts the writes sent so far.
pub async fn release_after_busy_periods(
    churn: impl Fn() -> bool,
    writes: impl Fn() -> u64,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(HEAP_RELEASE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut last_writes, mut pending) = (0, false);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let writes = writes();
        let busy = churn() | (writes != last_writes);
        last_writes = writes;
        if busy {
            pending = true;
        } else if pending {
            pending = false;
            let started = std::time::Instant::now();
            let released = release();
            tracing::debug!(
                released,
                took_us = started.elapsed().as_micros() as u64,
                "returned free heap to the OS"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn release_returns_free_pages_from_the_middle_of_the_heap() {
        configure();
        // 16 KiB blocks under the mmap threshold live in the heap; freeing
        // every other one leaves whole free pages between live blocks, which
        // no trimming of the heap's top can reach
        let mut blocks: Vec<Option<Vec<u8>>> =
            (0..512).map(|i| Some(vec![i as u8; 16 * 1024])).collect();
        for b in blocks.iter_mut().step_by(2) {
            *b = None;
        }
        assert!(release(), "malloc_trim found nothing to give back");
        let live = blocks.iter().flatten().count();
        assert_eq!(live, 256);
        assert!(blocks
            .iter()
            .flatten()
            .all(|b| b.iter().all(|&x| x == b[0])));
    }
}
