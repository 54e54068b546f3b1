//! How fast a client may guess the token: each client address may send [`BURST`] wrong tokens
//! at once, then one more every [`EVERY`]. A client over its budget gets 429 before its token is
//! even compared, right or wrong: otherwise the answer would still tell it which guess was
//! right. A constant-time compare keeps the timing from telling how much of a guess was
//! right; this keeps the guessing itself slow (a 16-character random token takes, at one
//! guess a second, longer than the universe has existed).
//!
//! Clients are told apart by address (an IPv6 one by its /64, which one host commonly holds
//! whole): behind a proxy they share one budget, which only slows them while someone guesses. A client that sends no token at all guesses nothing and is not
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
    /// Counts a guess from `client` before its token is compared (so that concurrent
    /// requests cannot all pass on one budget), or `Err(wait)` if it has used its budget: it
    /// may try again after `wait`. A right token gives the guess back ([`Guesses::right`]).
    pub fn guess(&self, client: IpAddr) -> Result<(), Duration> {
        self.guess_at(client, Instant::now())
    }

    /// Gives back the guess of a client whose token was right.
    pub fn right(&self, client: IpAddr) {
        let now = Instant::now();
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(spent) = clients.get_mut(&key(client)) {
            *spent = Spent {
                count: (spent.now(now) - 1.0).max(0.0),
                at: now,
            };
        }
    }

    fn guess_at(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let client = key(client);
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let spent = clients.get(&client).map_or(0.0, |s| s.now(now));
        let over = spent - (f64::from(BURST) - 1.0);
        if over > 0.0 {
            return Err(EVERY.mul_f64(over));
        }
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
        clients.insert(
            client,
            Spent {
                count: spent + 1.0,
                at: now,
            },
        );
        Ok(())
    }
}

/// The client a budget belongs to: its address, or for IPv6 its /64 (one host commonly
/// holds a whole /64, and would otherwise have 2^64 budgets).
fn key(client: IpAddr) -> IpAddr {
    match client {
        IpAddr::V4(_) => client,
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
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
            assert_eq!(guesses.guess_at(one, start), Ok(()));
        }
        let wait = guesses.guess_at(one, start).expect_err("over budget");
        assert!(wait > Duration::ZERO && wait <= EVERY, "{wait:?}");
        // Another address has its own budget.
        assert_eq!(guesses.guess_at(other, start), Ok(()));
        // A second later, one more guess; not two.
        let later = start + EVERY;
        assert_eq!(guesses.guess_at(one, later), Ok(()));
        assert!(guesses.guess_at(one, later).is_err());
        // After a quiet while, the whole burst again.
        let much_later = later + EVERY * BURST;
        assert_eq!(guesses.guess_at(one, much_later), Ok(()));
    }

    #[test]
    fn a_right_token_gives_its_guess_back() {
        let guesses = Guesses::default();
        let client: IpAddr = "10.0.0.1".parse().expect("ip");
        for _ in 0..BURST * 3 {
            assert_eq!(guesses.guess(client), Ok(()));
            guesses.right(client);
        }
    }

    #[test]
    fn an_ipv6_host_has_one_budget_for_its_64() {
        let guesses = Guesses::default();
        let start = Instant::now();
        for n in 0..BURST {
            let address: IpAddr = format!("2001:db8::{n:x}").parse().expect("ip");
            assert_eq!(guesses.guess_at(address, start), Ok(()));
        }
        let next: IpAddr = "2001:db8::ffff:1".parse().expect("ip");
        assert!(guesses.guess_at(next, start).is_err());
        let elsewhere: IpAddr = "2001:db8:0:1::1".parse().expect("ip");
        assert_eq!(guesses.guess_at(elsewhere, start), Ok(()));
    }

    #[test]
    fn a_flood_of_addresses_is_forgotten() {
        let guesses = Guesses::default();
        let start = Instant::now();
        for n in 0..(3 * REMEMBERED as u32) {
            let _ = guesses.guess_at(IpAddr::from(n.to_be_bytes()), start);
        }
        let kept = guesses.clients.lock().expect("table").len();
        assert!(kept <= 2 * REMEMBERED, "{kept}");
    }
}
