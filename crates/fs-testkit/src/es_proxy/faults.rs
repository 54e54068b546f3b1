//! The proxy's network faults: a seeded schedule of what can go wrong between a client and a
//! cluster, drawn per request (and per connection, per bulk item) in order of arrival.
//!
//! The one that matters most is [`NetFaults::cut_after`]: the request is carried out by the
//! server behind, and the connection is cut before the whole answer has come back. The client
//! cannot know whether its write landed; sending it again blindly meets its own first write as
//! a conflict. [`NetFaults::cut_before`] looks the same to the client (a connection cut with no
//! answer) but nothing was carried out. The rest are answers a busy or failing node gives
//! without carrying anything out (429, 503), a slow answer, and a connection refused at accept.
//!
//! A seed and the rates make the schedule: the same seed gives the same faults in the same
//! order of arrival, so a failing run is re-run with `FSRENAME_TEST_FAULT_SEED=<seed>`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::Response;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Counters, Proxy};

/// The variable that replays a fault schedule: its seed.
pub const FAULT_SEED_VAR: &str = "FSRENAME_TEST_FAULT_SEED";

/// What share of requests (of connections, of bulk items) each fault strikes, from a seed.
/// Every rate is between 0 and 1; the request-level ones together at most 1.
#[derive(Debug, Clone, PartialEq)]
pub struct NetFaults {
    /// The seed of the schedule.
    pub seed: u64,
    /// New connections closed at once, before a request is read.
    pub refuse: f64,
    /// Requests cut before they reach the server behind: nothing carried out, no answer.
    pub cut_before: f64,
    /// Requests carried out by the server behind, then cut before the whole answer is sent.
    pub cut_after: f64,
    /// Requests answered 429 (`es_rejected_execution_exception`) without being carried out.
    pub too_many: f64,
    /// Requests answered 503 without being carried out.
    pub unavailable: f64,
    /// Requests held up to [`NetFaults::max_delay`] before they are carried out.
    pub delay: f64,
    /// The longest delay.
    pub max_delay: Duration,
    /// Items of a bulk request answered 429 on their own, not carried out (the other items
    /// are): a busy node's write queue.
    pub bulk_items_too_many: f64,
    /// Bulk requests carried out twice, the first answer dropped: what a coordinating node does
    /// when the primary it sent a shard's items to dies after applying (and replicating) them
    /// but before answering. It sends them again to the promoted replica, and since
    /// Elasticsearch 7.0 every conditional item the first run applied comes back as a version
    /// conflict, on a connection that never broke: nothing at the HTTP level says the
    /// request was ambiguous.
    pub failover_replay: f64,
    /// After a replayed bulk request, how many reads by id (`GET _doc`, `_mget`) of each of its
    /// documents are answered as the document was before the request: a copy that has not
    /// applied the write yet (a realtime read is served by any copy of the shard).
    pub lagging_reads: u32,
    /// Continuations of a scroll or a point in time answered 404 `search_context_missing`,
    /// their context gone: it lived on a node that died.
    pub lost_contexts: f64,
    /// Searches and counts of an index of several shards answered 200 without one shard's
    /// part: `_shards.failed` 1, some hits (or some of the count) missing, as when the node
    /// holding a shard's only live copy is lost between the query and the answer
    /// ([`partial`](super::partial)).
    pub partial_shards: f64,
    /// Searches and counts of an index of several shards answered 200 without one shard's
    /// part as when that shard has no active copy (the node holding its only one died, its
    /// other copy marked stale): `_shards.successful` one short of `total`, `failed` 0 and no
    /// `failures`, because Elasticsearch does not count a shard with no copy as failed. A real
    /// cluster answered so in the failover of anomaly 10 (`docs/reliability.md`).
    pub unassigned_shards: f64,
}

impl NetFaults {
    /// No fault at all, from `seed`.
    pub fn none(seed: u64) -> NetFaults {
        NetFaults {
            seed,
            refuse: 0.0,
            cut_before: 0.0,
            cut_after: 0.0,
            too_many: 0.0,
            unavailable: 0.0,
            delay: 0.0,
            max_delay: Duration::from_millis(20),
            bulk_items_too_many: 0.0,
            failover_replay: 0.0,
            lagging_reads: 0,
            lost_contexts: 0.0,
            partial_shards: 0.0,
            unassigned_shards: 0.0,
        }
    }

    /// What the failover of a node looks like to a client that keeps its connection: `rate` of
    /// bulk requests replayed on a promoted replica ([`NetFaults::failover_replay`]), each of
    /// their documents read once more as it was before ([`NetFaults::lagging_reads`]), and
    /// `rate` of paged searches' contexts lost ([`NetFaults::lost_contexts`]); from `seed`.
    pub fn failover(rate: f64, seed: u64) -> NetFaults {
        NetFaults {
            failover_replay: rate,
            lagging_reads: 1,
            lost_contexts: rate,
            ..NetFaults::none(seed)
        }
    }

    /// Every fault at `rate`, from `seed`.
    pub fn every(rate: f64, seed: u64) -> NetFaults {
        NetFaults {
            refuse: rate,
            cut_before: rate,
            cut_after: rate,
            too_many: rate,
            unavailable: rate,
            delay: rate,
            bulk_items_too_many: rate,
            ..NetFaults::none(seed)
        }
    }

    /// The seed to use: `FSRENAME_TEST_FAULT_SEED` if set (a replay), else a fresh one. It is
    /// printed either way, so that a failure can be replayed.
    ///
    /// # Panics
    /// If the variable is set but is not a number: the replay asked for cannot be made.
    pub fn seed_from_env() -> u64 {
        let seed = match std::env::var(FAULT_SEED_VAR) {
            Ok(text) => text
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("{FAULT_SEED_VAR}=`{text}` is not a number: {e}")),
            Err(_) => rand::rng().random(),
        };
        eprintln!("network faults: seed {seed} (replay with {FAULT_SEED_VAR}={seed})");
        seed
    }
}

/// What the schedule does to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    CutBefore,
    CutAfter,
    TooMany,
    Unavailable,
    Delay(Duration),
}

/// The running schedule: the faults and the random numbers drawn from their seed.
pub(crate) struct Schedule {
    state: Mutex<(NetFaults, StdRng)>,
}

impl Schedule {
    pub(crate) fn new(faults: NetFaults) -> Schedule {
        let rng = StdRng::seed_from_u64(faults.seed);
        Schedule {
            state: Mutex::new((faults, rng)),
        }
    }

    /// Replaces the faults, and starts their schedule from their seed.
    pub(crate) fn set(&self, faults: NetFaults) {
        *self.lock() = (faults.clone(), StdRng::seed_from_u64(faults.seed));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (NetFaults, StdRng)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fault of the next request, if any.
    pub(crate) fn next_request(&self) -> Option<Fault> {
        let mut state = self.lock();
        let (faults, rng) = &mut *state;
        let draw: f64 = rng.random();
        let mut bound = 0.0;
        for (rate, fault) in [
            (faults.cut_before, Fault::CutBefore),
            (faults.cut_after, Fault::CutAfter),
            (faults.too_many, Fault::TooMany),
            (faults.unavailable, Fault::Unavailable),
            (faults.delay, Fault::Delay(Duration::ZERO)),
        ] {
            bound += rate;
            if draw < bound {
                return Some(match fault {
                    Fault::Delay(_) => {
                        let most = u64::try_from(faults.max_delay.as_micros()).unwrap_or(u64::MAX);
                        Fault::Delay(Duration::from_micros(rng.random_range(0..=most)))
                    }
                    fault => fault,
                });
            }
        }
        None
    }

    /// Whether the next connection is refused.
    pub(crate) fn refuse_connection(&self) -> bool {
        let mut state = self.lock();
        let (faults, rng) = &mut *state;
        faults.refuse > 0.0 && rng.random::<f64>() < faults.refuse
    }

    /// Whether the next bulk request is replayed as after a failover, and how many lagging
    /// reads each of its documents then gets.
    pub(crate) fn replay(&self) -> Option<u32> {
        let mut state = self.lock();
        let (faults, rng) = &mut *state;
        (faults.failover_replay > 0.0 && rng.random::<f64>() < faults.failover_replay)
            .then_some(faults.lagging_reads)
    }

    /// Whether the next continuation of a paged search finds its context gone.
    pub(crate) fn lose_context(&self) -> bool {
        let mut state = self.lock();
        let (faults, rng) = &mut *state;
        faults.lost_contexts > 0.0 && rng.random::<f64>() < faults.lost_contexts
    }

    /// Whether searches and counts may leave a shard out at all.
    pub(crate) fn partial_enabled(&self) -> bool {
        let faults = &self.lock().0;
        faults.partial_shards > 0.0 || faults.unassigned_shards > 0.0
    }

    /// Whether the next search or count of several shards leaves one out, and how.
    pub(crate) fn fail_shard(&self) -> Option<super::partial::Missing> {
        let mut state = self.lock();
        let (faults, rng) = &mut *state;
        if faults.partial_shards > 0.0 && rng.random::<f64>() < faults.partial_shards {
            return Some(super::partial::Missing::Failed);
        }
        (faults.unassigned_shards > 0.0 && rng.random::<f64>() < faults.unassigned_shards)
            .then_some(super::partial::Missing::NoCopy)
    }

    /// Whether the next bulk item is rejected with 429.
    pub(crate) fn reject_item(&self) -> bool {
        let mut state = self.lock();
        let (faults, rng) = &mut *state;
        faults.bulk_items_too_many > 0.0 && rng.random::<f64>() < faults.bulk_items_too_many
    }
}

/// The proxy's listener: closes the connections the schedule refuses as soon as they are
/// accepted, before a byte is read.
pub(crate) struct Refusing {
    pub(crate) listener: tokio::net::TcpListener,
    pub(crate) proxy: Arc<Proxy>,
}

impl axum::serve::Listener for Refusing {
    type Io = tokio::net::TcpStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = axum::serve::Listener::accept(&mut self.listener).await;
            if !self.proxy.faults.refuse_connection() {
                return (stream, addr);
            }
            Counters::add(&self.proxy.counters.refused, 1);
            // A reset rather than an orderly close, as a node that is going away sends.
            let _ = stream.set_zero_linger();
            drop(stream);
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// An answer cut short: `status`, then `part` of the body, then the connection is broken (the
/// body stream fails, so the server closes the connection without finishing the answer).
pub(crate) fn cut(status: StatusCode, part: Bytes) -> Response {
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(part),
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "connection cut by the proxy's fault schedule",
        )),
    ];
    let mut response = Response::new(Body::from_stream(futures::stream::iter(chunks)));
    *response.status_mut() = status;
    response
}

/// `response` cut in the middle of its body: the client gets its status and half an answer.
pub(crate) async fn cut_answer(response: Response) -> Response {
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    cut(status, body.slice(..body.len() / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(schedule: &Schedule, n: usize) -> Vec<Option<Fault>> {
        (0..n).map(|_| schedule.next_request()).collect()
    }

    #[test]
    fn a_seed_gives_the_same_schedule_again() {
        let faults = NetFaults::every(0.05, 42);
        let (a, b) = (Schedule::new(faults.clone()), Schedule::new(faults.clone()));
        assert_eq!(draws(&a, 2_000), draws(&b, 2_000));
        // Set again, the schedule starts over from its seed.
        a.set(faults.clone());
        assert_eq!(
            draws(&a, 2_000),
            draws(&Schedule::new(faults.clone()), 2_000)
        );
        let other = Schedule::new(NetFaults::every(0.05, 43));
        assert_ne!(draws(&other, 2_000), draws(&Schedule::new(faults), 2_000));
    }

    #[test]
    fn each_fault_strikes_at_about_its_rate() {
        let schedule = Schedule::new(NetFaults::every(0.05, 7));
        let all = draws(&schedule, 20_000);
        for kind in [
            Fault::CutBefore,
            Fault::CutAfter,
            Fault::TooMany,
            Fault::Unavailable,
        ] {
            let n = all.iter().filter(|f| **f == Some(kind)).count();
            assert!((700..1_300).contains(&n), "{kind:?}: {n} of 20 000");
        }
        let delays = all
            .iter()
            .filter(|f| matches!(f, Some(Fault::Delay(_))))
            .count();
        assert!((700..1_300).contains(&delays), "delays: {delays} of 20 000");
        assert!(all
            .iter()
            .all(|f| !matches!(f, Some(Fault::Delay(d)) if *d > Duration::from_millis(20))));
        let none = Schedule::new(NetFaults::none(7));
        assert!(draws(&none, 1_000).iter().all(Option::is_none));
        assert!(!(0..1_000).any(|_| none.refuse_connection() || none.reject_item()));
    }
}
