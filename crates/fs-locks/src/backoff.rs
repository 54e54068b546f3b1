//! Jittered exponential backoff between refused attempts.

use std::time::Duration;

/// Full-jitter exponential backoff: the n-th pause is uniform in `[0, min(max, base × 2ⁿ)]`.
/// The jitter keeps jobs that were refused together from retrying in lock step; it comes from
/// [`fs_model::entropy`], so a seeded simulation replays the same pauses.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    /// Starts a backoff sequence.
    pub fn new(base: Duration, max: Duration) -> Backoff {
        Backoff {
            base,
            max,
            attempt: 0,
        }
    }

    /// Returns the next pause.
    pub fn next_pause(&mut self) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let ceiling_us = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(fs_model::entropy::up_to(ceiling_us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_and_stay_under_the_cap() {
        let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(200));
        for n in 0..30 {
            let ceiling =
                Duration::from_millis(10 * (1 << n.min(20))).min(Duration::from_millis(200));
            assert!(backoff.next_pause() <= ceiling, "attempt {n}");
        }
    }
}
