//! The one retry policy: jittered exponential backoff, bounded by a number of attempts, a
//! deadline, or both.
//!
//! A [`RetryPolicy`] is a plain value (usually a `const`) that says how a loop sends again;
//! [`RetryPolicy::start`] begins one sequence of pauses, a [`Backoff`], whose deadline counts
//! from that moment. Every loop in the workspace that sends again after a failure takes its
//! pauses from here: the store client's resends of transient HTTP failures, a scan's fresh
//! starts, the lock client's waits, the rename job's resends of bulk items and journal writes,
//! recovery's sweeps.
//!
//! The jitter keeps clients that failed together from retrying in lock step. It is drawn from
//! [`fs_model::entropy`], so a simulation that seeds its thread replays the same pauses; a
//! test that wants one sequence fixed without seeding the thread gives it its own seed
//! ([`Backoff::seeded`]).
//!
//! Deadlines are measured on tokio's clock, so tests drive them with `tokio::time::pause()`.
//!
//! ```
//! use std::time::Duration;
//! use fs_store::{Jitter, RetryPolicy};
//!
//! /// 10, 20, 40, 80 ms (each between half and all of it), then give up.
//! const RESEND: RetryPolicy = RetryPolicy::new(Duration::from_millis(10), Duration::from_secs(1))
//!     .jitter(Jitter::Equal)
//!     .attempts(4);
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let mut tries = 0;
//! let answer: Result<u32, &str> = RESEND
//!     .retry(|| { tries += 1; async move { if tries < 3 { Err("busy") } else { Ok(7) } } },
//!            |e| *e == "busy")
//!     .await;
//! assert_eq!(answer, Ok(7));
//! # });
//! ```

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How much of each pause is left to chance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Uniform in `[0, ceiling]`: spreads retries the most (the lock client's waits, where
    /// many jobs refused together would otherwise come back together).
    Full,
    /// Uniform in `[ceiling / 2, ceiling]`: keeps at least half of the patience (resends
    /// whose count is bounded, where a short draw would give up too soon).
    Equal,
}

/// How a loop sends again: the n-th pause's ceiling is `first × 2ⁿ`, at most `max`, jittered;
/// the sequence ends after `attempts` pauses or when the next pause could end past the
/// deadline, whichever comes first.
///
/// Defaults of [`RetryPolicy::new`]: full jitter, no limit on attempts, no deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    first: Duration,
    max: Duration,
    jitter: Jitter,
    attempts: Option<u32>,
    deadline: Option<Duration>,
}

impl RetryPolicy {
    /// A policy whose first pause is at most `first` and no pause more than `max`; full
    /// jitter, no limit on attempts and no deadline.
    pub const fn new(first: Duration, max: Duration) -> RetryPolicy {
        RetryPolicy {
            first,
            max,
            jitter: Jitter::Full,
            attempts: None,
            deadline: None,
        }
    }

    /// Sets the jitter (default [`Jitter::Full`]).
    pub const fn jitter(mut self, jitter: Jitter) -> RetryPolicy {
        self.jitter = jitter;
        self
    }

    /// Allows at most `attempts` pauses, that is, `attempts` sends after the first (default:
    /// no limit).
    pub const fn attempts(mut self, attempts: u32) -> RetryPolicy {
        self.attempts = Some(attempts);
        self
    }

    /// Gives up once the longest the next pause could last would end past `deadline` after
    /// [`RetryPolicy::start`] (default: no deadline). The longest, not the one drawn: how many
    /// sends fit in a deadline does not depend on the draw.
    pub const fn deadline(mut self, deadline: Duration) -> RetryPolicy {
        self.deadline = Some(deadline);
        self
    }

    /// Returns the limit on attempts, if any.
    pub const fn max_attempts(&self) -> Option<u32> {
        self.attempts
    }

    /// Starts a sequence of pauses now, with jitter from [`fs_model::entropy`].
    pub fn start(&self) -> Backoff {
        Backoff {
            policy: *self,
            attempt: 0,
            deadline: self.deadline.map(|d| Instant::now() + d),
            seed: None,
        }
    }

    /// Runs `op` until it succeeds, fails with an error `transient` does not accept, or the
    /// policy runs out; returns its last answer.
    ///
    /// # Errors
    /// `op`'s last error.
    pub async fn retry<T, E, F, Fut>(
        &self,
        mut op: F,
        transient: impl Fn(&E) -> bool,
    ) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut backoff = self.start();
        loop {
            match op().await {
                Err(e) if transient(&e) && backoff.wait().await => {}
                answer => return answer,
            }
        }
    }
}

/// One sequence of pauses of a [`RetryPolicy`], begun by [`RetryPolicy::start`]: an
/// iterator of the pauses the policy allows, which ends when its attempts are used up or the
/// next pause could end past its deadline.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: RetryPolicy,
    /// Pauses handed out so far.
    attempt: u32,
    deadline: Option<Instant>,
    /// The state of this sequence's own generator, if it was given a seed.
    seed: Option<u64>,
}

impl Backoff {
    /// A full-jitter sequence from `base` up to `max` pauses, with no end: the lock client's
    /// waits, which end on their own deadline.
    pub fn new(base: Duration, max: Duration) -> Backoff {
        RetryPolicy::new(base, max).start()
    }

    /// Draws this sequence's jitter from its own generator seeded with `seed` instead of
    /// [`fs_model::entropy`]: the same seed gives the same pauses, whatever else draws.
    #[must_use]
    pub fn seeded(mut self, seed: u64) -> Backoff {
        self.seed = Some(seed);
        self
    }

    /// Returns how many pauses this sequence has handed out: the sends after the first.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Returns the next pause whatever the limits: for loops that keep their own deadline.
    pub fn next_pause(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        let ceiling_us = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
        let pause_us = match self.policy.jitter {
            Jitter::Full => self.draw(ceiling_us),
            Jitter::Equal => ceiling_us - ceiling_us / 2 + self.draw(ceiling_us / 2),
        };
        Duration::from_micros(pause_us)
    }

    /// Sleeps the next pause and returns true, or returns false at once if the policy has run
    /// out.
    pub async fn wait(&mut self) -> bool {
        match self.next() {
            Some(pause) => {
                tokio::time::sleep(pause).await;
                true
            }
            None => false,
        }
    }

    /// The longest the next pause may be.
    fn ceiling(&self) -> Duration {
        self.policy
            .first
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.policy.max)
    }

    /// A number uniform in `0..=max`.
    fn draw(&mut self, max: u64) -> u64 {
        match &mut self.seed {
            None => fs_model::entropy::up_to(max),
            Some(state) => {
                let x = splitmix64(state);
                // Modulo bias is irrelevant for a pause.
                max.checked_add(1).map_or(x, |n| x % n)
            }
        }
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    /// Returns the next pause, or `None` once the policy's attempts are used up or the pause
    /// could end past its deadline.
    fn next(&mut self) -> Option<Duration> {
        let ceiling = self.ceiling();
        if self.policy.attempts.is_some_and(|n| self.attempt >= n) {
            return None;
        }
        if self.deadline.is_some_and(|d| Instant::now() + ceiling > d) {
            return None;
        }
        Some(self.next_pause())
    }
}

/// One step of SplitMix64: a small generator, enough for the jitter of one seeded sequence.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn full_jitter_pauses_grow_and_stay_under_the_cap() {
        let mut backoff = Backoff::new(10 * MS, 200 * MS);
        for n in 0..30 {
            let ceiling = (10 * MS * (1 << n.min(20))).min(200 * MS);
            assert!(backoff.next_pause() <= ceiling, "attempt {n}");
        }
    }

    #[test]
    fn equal_jitter_keeps_at_least_half() {
        let policy = RetryPolicy::new(50 * MS, 2_000 * MS).jitter(Jitter::Equal);
        let mut backoff = policy.start();
        for n in 0..12u32 {
            let ceiling = (50 * MS * (1 << n)).min(2_000 * MS);
            let pause = backoff.next_pause();
            assert!(
                pause <= ceiling && pause >= ceiling / 2,
                "attempt {n}: {pause:?}"
            );
        }
    }

    #[test]
    fn attempts_are_counted_and_then_refused() {
        let mut backoff = RetryPolicy::new(MS, MS).attempts(3).start();
        assert!(backoff.next().is_some());
        assert!(backoff.next().is_some());
        assert!(backoff.next().is_some());
        assert_eq!(backoff.attempt(), 3);
        assert_eq!(backoff.next(), None);
    }

    #[test]
    fn a_seed_fixes_the_pauses() {
        let pauses = |seed| {
            let mut backoff = Backoff::new(10 * MS, 10_000 * MS).seeded(seed);
            (0..10).map(|_| backoff.next_pause()).collect::<Vec<_>>()
        };
        assert_eq!(pauses(3), pauses(3));
        assert_ne!(pauses(3), pauses(4));
    }

    #[test]
    fn a_seeded_thread_fixes_the_pauses_too() {
        let pauses = || {
            let _seeded = fs_model::entropy::seed_thread(11);
            let mut backoff = Backoff::new(10 * MS, 10_000 * MS);
            (0..10).map(|_| backoff.next_pause()).collect::<Vec<_>>()
        };
        assert_eq!(pauses(), pauses());
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_ends_the_sequence_before_a_pause_could_pass_it() {
        // Ceilings 100, 200, 400, 800 ms: 700 ms spent at most after three, and a fourth
        // could end at 1.5 s, past the deadline.
        let policy = RetryPolicy::new(100 * MS, 10_000 * MS)
            .jitter(Jitter::Equal)
            .deadline(1_000 * MS);
        let started = Instant::now();
        let mut backoff = policy.start();
        let mut waits = 0;
        while backoff.wait().await {
            waits += 1;
        }
        assert_eq!(waits, 3);
        let spent = started.elapsed();
        assert!(spent >= 350 * MS && spent <= 700 * MS, "{spent:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn retry_stops_at_success_at_a_lasting_error_or_when_out_of_attempts() {
        let policy = RetryPolicy::new(10 * MS, 80 * MS).attempts(4);
        let mut calls = 0;
        let out: Result<(), &str> = policy
            .retry(
                || {
                    calls += 1;
                    async { Err("transient") }
                },
                |e| *e == "transient",
            )
            .await;
        assert_eq!((out, calls), (Err("transient"), 5));

        let mut calls = 0;
        let out: Result<(), &str> = policy
            .retry(
                || {
                    calls += 1;
                    async { Err("lasting") }
                },
                |e| *e == "transient",
            )
            .await;
        assert_eq!((out, calls), (Err("lasting"), 1));
    }
}
