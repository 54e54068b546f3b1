//! How fast a client may guess the token: each client address may send [`BURST`] wrong tokens
//! at once, then one more every [`EVERY`]. A client over its budget gets 429 before its token is
//! even compared, right or wrong: otherwise the answer would still tell it which guess was
//! right. A constant-time compare keeps the timing from telling how much of a guess was
//! right; this keeps the guessing itself slow (a 16-character random token takes, at one
//! guess a second, longer than the universe has existed).
//!
//! Clients are told apart by address: behind a proxy they share one budget, which only slows
//! them while someone guesses. A client that sends no token at all guesses nothing and is not
//! counted.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong tokens a client may send at once.
pub const BURST: u32 = 10;

/// One more wrong token is allowed after each of these.
pub const EVERY: Duration = Duration::from_secs(1);

/// Past twice this many addresses, those whose budget is whole again are forgotten, and if
/// more than this many are left, all but the newest half of this: a flood of addresses
/// cannot grow the table without end.
const REMEMBERED: usize = 10_000;

/// The wrong tokens each client address sent lately. Shared by every request.
#[derive(Debug, Default)]
pub struct Guesses {
    clients: Mutex<HashMap<IpAddr, Spent>>,
}

/// A client's spent budget: `count` wrong tokens as of `at`, one forgiven each [`EVERY`].
#[derive(Debug, Clone, Copy)]
struct Spent {
    count: f64,
    at: Instant,
}

impl Spent {
    fn now(self, now: Instant) -> f64 {
        let forgiven = now.saturating_duration_since(self.at).as_secs_f64() / EVERY.as_secs_f64();
        (self.count - forgiven).max(0.0)
    }
}

impl Guesses {
    /// `Err(wait)` if `client` has used its budget: it may try again after `wait`.
    pub fn check(&self, client: IpAddr) -> Result<(), Duration> {
        self.check_at(client, Instant::now())
    }

    /// Counts a wrong token from `client`.
    pub fn wrong(&self, client: IpAddr) {
        self.wrong_at(client, Instant::now());
    }

    fn check_at(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let spent = clients.get(&client).map_or(0.0, |s| s.now(now));
        let over = spent - (f64::from(BURST) - 1.0);
        if over > 0.0 {
            Err(EVERY.mul_f64(over))
        } else {
            Ok(())
        }
    }

    fn wrong_at(&self, client: IpAddr, now: Instant) {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if clients.len() >= 2 * REMEMBERED && !clients.contains_key(&client) {
            // Once in a while (every few thousand new addresses), not at every guess.
            clients.retain(|_, s| s.now(now) > 0.0);
            if clients.len() > REMEMBERED {
                let mut by_age: Vec<(Instant, IpAddr)> =
                    clients.iter().map(|(ip, s)| (s.at, *ip)).collect();
                by_age.sort_unstable();
                let oldest = by_age.len() - REMEMBERED / 2;
                for (_, ip) in &by_age[..oldest] {
                    clients.remove(ip);
                }
            }
        }
        let spent = clients.get(&client).map_or(0.0, |s| s.now(now));
        clients.insert(
            client,
            Spent {
                count: spent + 1.0,
                at: now,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_may_guess_a_burst_then_one_a_second() {
        let guesses = Guesses::default();
        let (one, other): (IpAddr, IpAddr) = (
            "10.0.0.1".parse().expect("ip"),
            "10.0.0.2".parse().expect("ip"),
        );
        let start = Instant::now();
        for _ in 0..BURST {
            assert_eq!(guesses.check_at(one, start), Ok(()));
            guesses.wrong_at(one, start);
        }
        let wait = guesses.check_at(one, start).expect_err("over budget");
        assert!(wait > Duration::ZERO && wait <= EVERY, "{wait:?}");
        // Another address has its own budget.
        assert_eq!(guesses.check_at(other, start), Ok(()));
        // A second later, one more guess; not two.
        let later = start + EVERY;
        assert_eq!(guesses.check_at(one, later), Ok(()));
        guesses.wrong_at(one, later);
        assert!(guesses.check_at(one, later).is_err());
        // After a quiet while, the whole burst again.
        let much_later = later + EVERY * BURST;
        assert_eq!(guesses.check_at(one, much_later), Ok(()));
    }

    #[test]
    fn a_flood_of_addresses_is_forgotten() {
        let guesses = Guesses::default();
        let start = Instant::now();
        for n in 0..(3 * REMEMBERED as u32) {
            guesses.wrong_at(IpAddr::from(n.to_be_bytes()), start);
        }
        let kept = guesses.clients.lock().expect("table").len();
        assert!(kept <= 2 * REMEMBERED, "{kept}");
    }
}
