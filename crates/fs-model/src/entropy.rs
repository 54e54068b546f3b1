//! Where fsrename's randomness comes from: ids (process ids, journal ids, document ids) and
//! backoff jitter.
//!
//! By default everything is drawn from the operating system, as `uuid` and `rand` would.
//! A thread may instead ask for a seeded generator with [`seed_thread`]: every draw made on
//! that thread then follows the seed. The deterministic simulation tests run each seed on a
//! single-threaded runtime under a seeded thread, so a failing seed replays exactly: the same
//! owners, the same journal ids, the same pauses, in the same order.
//!
//! A thread-local and not a generator passed through every builder: randomness is drawn deep
//! inside the lock client, the rename job and the store clients, and a simulation must
//! capture all of it, including draws made by code it does not configure (a recoverer's lock
//! client, a retry's jitter).
//!
//! ```
//! let a = {
//!     let _seeded = fs_model::entropy::seed_thread(7);
//!     (fs_model::entropy::uuid(), fs_model::entropy::below(1_000))
//! };
//! let b = {
//!     let _seeded = fs_model::entropy::seed_thread(7);
//!     (fs_model::entropy::uuid(), fs_model::entropy::below(1_000))
//! };
//! assert_eq!(a, b);
//! assert_ne!(fs_model::entropy::uuid(), fs_model::entropy::uuid());
//! ```

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

thread_local! {
    /// This thread's seeded generator, if it asked for one.
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// Makes every draw on this thread follow `seed` until the returned guard is dropped.
///
/// Only for single-threaded replays (simulations, tests): draws made on other threads, such
/// as tokio's blocking pool, still come from the operating system.
#[must_use = "the thread is seeded only while the guard lives"]
pub fn seed_thread(seed: u64) -> SeededThread {
    let previous = SEEDED.with(|s| s.replace(Some(StdRng::seed_from_u64(seed))));
    SeededThread { previous }
}

/// Keeps the current thread seeded; dropping it restores what the thread had before.
#[derive(Debug)]
pub struct SeededThread {
    previous: Option<StdRng>,
}

impl Drop for SeededThread {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SEEDED.with(|s| *s.borrow_mut() = previous);
    }
}

/// Returns true if this thread draws from a seeded generator.
pub fn is_seeded() -> bool {
    SEEDED.with(|s| s.borrow().is_some())
}

/// Fills `bytes` from this thread's generator.
fn fill(bytes: &mut [u8]) {
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some(rng) => rng.fill_bytes(bytes),
        None => rand::rng().fill_bytes(bytes),
    });
}

/// Returns a random (version 4) UUID as text: a fresh process id, journal id or document id.
pub fn uuid() -> String {
    let mut bytes = [0u8; 16];
    fill(&mut bytes);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// Returns a number uniformly drawn from `0..=max`.
pub fn up_to(max: u64) -> u64 {
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some(rng) => rng.random_range(0..=max),
        None => rand::rng().random_range(0..=max),
    })
}

/// Returns a number uniformly drawn from `0..n`, or 0 if `n` is 0.
pub fn below(n: u64) -> u64 {
    n.checked_sub(1).map_or(0, up_to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeded_thread_repeats_itself_and_the_guard_restores_the_os_source() {
        let draw = || (uuid(), up_to(1 << 40), below(10));
        let first = {
            let _seeded = seed_thread(42);
            assert!(is_seeded());
            (draw(), draw())
        };
        assert!(!is_seeded());
        let second = {
            let _seeded = seed_thread(42);
            (draw(), draw())
        };
        assert_eq!(first, second);
        assert_ne!(first.0, first.1, "draws within one seed differ");
        let other = {
            let _seeded = seed_thread(43);
            draw()
        };
        assert_ne!(first.0, other);
    }

    #[test]
    fn nested_seeds_restore_the_outer_one() {
        let _outer = seed_thread(1);
        let a = up_to(u64::MAX);
        {
            let _inner = seed_thread(2);
            let _ = up_to(u64::MAX);
        }
        let b = up_to(u64::MAX);
        let replay = {
            let _again = seed_thread(1);
            (up_to(u64::MAX), up_to(u64::MAX))
        };
        assert_eq!((a, b), replay);
    }

    #[test]
    fn uuids_are_version_4() {
        let _seeded = seed_thread(9);
        let id = uuid::Uuid::parse_str(&uuid()).expect("a uuid");
        assert_eq!(id.get_version_num(), 4);
        assert_eq!(below(0), 0);
        assert!(below(3) < 3);
    }
}
