//! [`SharedIntentions`]: the intention locks of one process, held once and lent to its jobs.
//!
//! Every tree lock takes an intention lock on each ancestor of its targets, so all the jobs
//! under one directory write that directory's lock document, twice each. A process that runs
//! many jobs (the service) can instead hold each busy ancestor's intention lock once, as one
//! holder entry of its own (a *hold*), and lend it to its jobs, which then take only their
//! targets: what distributed lock managers do with the locks a node caches for its users
//! (`docs/locking.md`, "Intention locks shared by a process").
//!
//! - **Lending never waits.** A hold that is missing is taken in one attempt that respects the
//!   queue with the borrowing request's age; a hold that is being given back, or anything
//!   refused, makes the lender say no, and the job takes its ancestors itself as it would
//!   without a lender. So no request waits holding a borrowed lock, and wait-die holds.
//! - **Given back at once to a conflicting waiter.** A probe reads the held documents every
//!   `min(renew_every, 1 s)`; a hold with a live waiter whose mode conflicts stops lending,
//!   and the last of its running jobs to finish releases it.
//! - **Given back when idle a short while.** A hold nobody borrows any more stays for
//!   [`SharedIntentions::linger`] ([`DEFAULT_LINGER`]), lent again at no cost to a job that
//!   comes meanwhile, and is released after it; at once if a conflicting request is waiting
//!   (the probe), and by [`SharedIntentions::release_idle`] when the process stops.
//! - **Leases.** Holds are renewed as any lock; a borrower's lease includes its holds'.
//! - **Jobs stopped half-way.** A hold lent to a job that abandoned its locks (they protect a
//!   half-done change) stops lending, is renewed while its other borrowers run, and is then
//!   left to expire, never released; the process never takes that document again. Recovery
//!   clears an expired hold only once no job that borrowed it may still act (`fs-rename`'s
//!   sweep: the borrowers are named after the hold, see [`crate::lender`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Mutex;

use crate::builder::LockClientBuilder;
use crate::client::LockClient;
use crate::lender::{new_hold_id, Lender};
use crate::lock_doc::Observed;
use crate::plan::LockItem;

/// The longest time between two looks at the held documents' waiters.
const PROBE_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// How long a hold that no job borrows stays held by default: long enough that a process
/// whose jobs come one after another (a client that submits its next job once the last is
/// done) does not release and take the shared ancestor's document again between them, short
/// beside the probe's period and a lease, so that nobody waits on an idle hold for long.
pub const DEFAULT_LINGER: Duration = Duration::from_millis(250);

/// The intention locks of one process, lent to the lock clients built with
/// [`SharedIntentions::lend_to`]. Cheap to clone; clones are the same holds.
#[derive(Debug, Clone)]
pub struct SharedIntentions {
    pool: Arc<Pool>,
}

#[derive(Debug)]
struct Pool {
    /// The process's own client: its holder entries are the holds.
    client: LockClient,
    /// A tokio mutex: held across taking and releasing holds, so that a hold being released
    /// is not lent meanwhile.
    holds: Mutex<Holds>,
    probing: AtomicBool,
    /// How long a hold nobody borrows stays before it is released, in milliseconds.
    linger_ms: AtomicU64,
}

#[derive(Debug, Default)]
struct Holds {
    held: BTreeMap<String, Hold>,
    /// Documents where a hold was left to expire for recovery: the process never holds them
    /// again (taking its own entry again would renew, then release, what protects a job that
    /// stopped half-way).
    left: BTreeSet<String>,
    /// Numbers the idle spells, so that a release scheduled for one spell leaves a hold that
    /// was borrowed and given back again since to its own.
    spells: u64,
}

#[derive(Debug)]
struct Hold {
    item: LockItem,
    borrowers: u32,
    /// False once a conflicting waiter was seen, or a borrower stopped half-way.
    lending: bool,
    /// A borrower stopped half-way: left to expire once the others are done.
    orphaned: bool,
    /// Nobody borrows it since the spell numbered so: released once it has lasted the linger.
    idle: Option<u64>,
}

impl SharedIntentions {
    /// Returns a lender whose holds are taken by a client built from `builder` (store, lock
    /// index, lease, protocol, holder label), under a hold id of its own (its process id is
    /// replaced, its journal id dropped: a hold protects no one job).
    pub fn new(builder: LockClientBuilder) -> SharedIntentions {
        let client = builder.process_id(new_hold_id()).without_job().build();
        SharedIntentions {
            pool: Arc::new(Pool {
                client,
                holds: Mutex::new(Holds::default()),
                probing: AtomicBool::new(false),
                linger_ms: AtomicU64::new(millis(DEFAULT_LINGER)),
            }),
        }
    }

    /// Sets how long a hold that no job borrows any more stays held before it is released
    /// ([`DEFAULT_LINGER`]), for these holds and their clones; zero releases it as the last
    /// borrower gives it back.
    #[must_use]
    pub fn linger(self, linger: Duration) -> SharedIntentions {
        self.pool.linger_ms.store(millis(linger), Ordering::Relaxed);
        self
    }

    /// Releases the holds that no job borrows now (they would otherwise linger, or, if the
    /// process stops, expire with their lease): what a process does when it stops, once its
    /// jobs are done.
    pub async fn release_idle(&self) {
        let pool = &self.pool;
        let mut holds = pool.holds.lock().await;
        let idle: Vec<String> = holds
            .held
            .iter()
            .filter(|(_, h)| h.borrowers == 0)
            .map(|(id, _)| id.clone())
            .collect();
        pool.release(&mut holds, &idle).await;
    }

    /// Makes the clients built by `builder` borrow their ancestors' intention locks from these
    /// holds (their process ids are replaced by ones that name the hold).
    pub fn lend_to(&self, builder: LockClientBuilder) -> LockClientBuilder {
        builder.lender(Arc::new(self.clone()))
    }

    /// Returns the holds' process id, which the borrowers' ids name.
    pub fn hold_id(&self) -> &str {
        &self.pool.client.owner().process_id
    }

    /// Returns the documents held now, with how many jobs borrow each.
    pub async fn holds(&self) -> Vec<(String, u32)> {
        let holds = self.pool.holds.lock().await;
        holds
            .held
            .iter()
            .map(|(id, h)| (id.clone(), h.borrowers))
            .collect()
    }

    /// Returns the client that holds the holds (its lease, its lost locks).
    pub fn client(&self) -> &LockClient {
        &self.pool.client
    }

    fn start_probe(&self) {
        if self.pool.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let every = self.pool.client.renew_every().min(PROBE_AT_MOST_EVERY);
        tokio::spawn(probe_loop(Arc::downgrade(&self.pool), every));
    }
}

#[async_trait]
impl Lender for SharedIntentions {
    fn hold_id(&self) -> &str {
        SharedIntentions::hold_id(self)
    }

    async fn borrow(&self, items: &[LockItem], since: i64) -> Option<Vec<LockItem>> {
        let pool = &self.pool;
        let mut holds = pool.holds.lock().await;
        if items.iter().any(|i| holds.left.contains(&i.id)) {
            return None;
        }
        let mut missing = Vec::new();
        let mut present = Vec::new();
        for item in items {
            match holds.held.get(&item.id) {
                Some(h) if h.lending && h.item.mode.covers(item.mode) => {
                    present.push(item.id.clone())
                }
                Some(_) => return None,
                None => missing.push(item.clone()),
            }
        }
        // A hold whose renewal failed lends no more: its borrowers would stop at once.
        let margin = pool.client.max_clock_skew_ms();
        if !present.is_empty()
            && pool.client.held().await.held_until(&present) <= pool.client.now_ms() + margin
        {
            return None;
        }
        if !missing.is_empty() {
            let mut waiting_on = BTreeSet::new();
            let tried = pool
                .client
                .attempt(&missing, since, false, true, &mut waiting_on)
                .await;
            if !matches!(tried.outcome, Ok(None)) {
                return None;
            }
            for item in missing {
                let hold = Hold {
                    item: item.clone(),
                    borrowers: 0,
                    lending: true,
                    orphaned: false,
                    idle: None,
                };
                holds.held.insert(item.id, hold);
            }
            self.start_probe();
        }
        let mut lent = Vec::with_capacity(items.len());
        for item in items {
            if let Some(h) = holds.held.get_mut(&item.id) {
                h.borrowers += 1;
                h.idle = None;
                lent.push(h.item.clone());
            }
        }
        Some(lent)
    }

    async fn give_back(&self, ids: &[String]) {
        let pool = &self.pool;
        let mut holds = pool.holds.lock().await;
        let (idle, forget) = holds.return_borrowed(ids, false);
        if !forget.is_empty() {
            pool.client.forget(&forget).await;
        }
        if idle.is_empty() {
            return;
        }
        // A hold given up to a waiter goes at once; the others linger, in case another job
        // comes.
        let (now, later): (Vec<String>, Vec<String>) = idle.into_iter().partition(|id| {
            pool.linger().is_zero() || holds.held.get(id).is_some_and(|h| !h.lending)
        });
        pool.release(&mut holds, &now).await;
        if later.is_empty() {
            return;
        }
        holds.spells += 1;
        let spell = holds.spells;
        for id in &later {
            if let Some(h) = holds.held.get_mut(id) {
                h.idle = Some(spell);
            }
        }
        tokio::spawn(release_after_linger(
            Arc::downgrade(&self.pool),
            later,
            spell,
        ));
    }

    async fn orphan(&self, ids: &[String]) {
        let pool = &self.pool;
        let mut holds = pool.holds.lock().await;
        // An orphaned hold is never released: only `forget` can name it.
        let (_, forget) = holds.return_borrowed(ids, true);
        if !forget.is_empty() {
            tracing::info!(locks = ?forget, "a shared intention lock of a job stopped half-way is left to expire for recovery");
            pool.client.forget(&forget).await;
        }
    }

    async fn held_until(&self, ids: &[String]) -> i64 {
        self.pool.client.held().await.held_until(ids)
    }
}

impl Holds {
    /// Counts one borrower less on each of `ids` (one that stopped half-way if `orphan`);
    /// returns the holds nobody borrows any more: idle (still held, to release now or after
    /// the linger), and left to expire (forgotten here).
    fn return_borrowed(&mut self, ids: &[String], orphan: bool) -> (Vec<String>, Vec<String>) {
        let (mut idle, mut forget) = (Vec::new(), Vec::new());
        for id in ids {
            let Some(h) = self.held.get_mut(id) else {
                continue;
            };
            h.borrowers = h.borrowers.saturating_sub(1);
            if orphan {
                h.orphaned = true;
                h.lending = false;
            }
            if h.borrowers > 0 {
                continue;
            }
            if h.orphaned {
                self.left.insert(id.clone());
                forget.push(id.clone());
                self.held.remove(id);
            } else {
                idle.push(id.clone());
            }
        }
        (idle, forget)
    }
}

/// Releases those of `ids` still idle since `spell` once the pool's linger is over.
async fn release_after_linger(pool: Weak<Pool>, ids: Vec<String>, spell: u64) {
    let Some(linger) = pool.upgrade().map(|p| p.linger()) else {
        return;
    };
    tokio::time::sleep(linger).await;
    let Some(pool) = pool.upgrade() else {
        return;
    };
    let mut holds = pool.holds.lock().await;
    let still: Vec<String> = ids
        .into_iter()
        .filter(|id| {
            holds
                .held
                .get(id)
                .is_some_and(|h| h.borrowers == 0 && h.idle == Some(spell))
        })
        .collect();
    pool.release(&mut holds, &still).await;
}

/// Looks at the held documents' waiters every `every`, until the pool is dropped.
async fn probe_loop(pool: Weak<Pool>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        pool.probe().await;
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Pool {
    fn linger(&self) -> Duration {
        Duration::from_millis(self.linger_ms.load(Ordering::Relaxed))
    }

    /// Releases the holds `ids` (nobody borrows them), under the holds' lock, so that none is
    /// lent while it goes.
    async fn release(&self, holds: &mut Holds, ids: &[String]) {
        if ids.is_empty() {
            return;
        }
        for id in ids {
            holds.held.remove(id);
        }
        if let Err(e) = self.client.release_ids(ids).await {
            tracing::warn!(error = %e, "could not release a shared intention lock; its lease will expire it");
        }
    }

    /// Reads the documents of the holds still lending; a hold with a live waiter whose mode
    /// conflicts with it stops lending (its last borrower releases it). Reads too the
    /// documents where a hold was left to expire: once recovery has cleared it, the process
    /// may hold that document again.
    async fn probe(&self) {
        let (ids, left): (Vec<String>, Vec<String>) = {
            let holds = self.holds.lock().await;
            let lending = holds.held.iter().filter(|(_, h)| h.lending);
            let ids = lending.map(|(id, _)| id.clone());
            (ids.collect(), holds.left.iter().cloned().collect())
        };
        if ids.is_empty() && left.is_empty() {
            return;
        }
        let ids: Vec<String> = ids.into_iter().chain(left.iter().cloned()).collect();
        let mut calls = self.client.calls();
        let docs = match calls.mget(&ids).await {
            Ok(docs) => docs,
            Err(e) => {
                tracing::debug!(error = %e, "could not read the shared intention locks' waiters");
                return;
            }
        };
        let now = self.client.now_ms();
        let own = &self.client.owner().process_id;
        let mut holds = self.holds.lock().await;
        // Of those read (one left since is not among them): gone, or no longer ours.
        holds.left.retain(|id| {
            !left.contains(id)
                || docs
                    .get(id)
                    .is_some_and(|doc| Observed::from_source(&doc.source).is_held_by(own))
        });
        for (id, doc) in docs {
            let Some(hold) = holds.held.get_mut(&id) else {
                continue;
            };
            let observed = Observed::from_source(&doc.source);
            let conflicting = observed
                .waiters()
                .values()
                .any(|w| w.expires_at > now && !w.mode.compatible(hold.item.mode));
            if conflicting && hold.lending {
                tracing::debug!(lock = %hold.item.label(), borrowers = hold.borrowers, "a conflicting request waits: the shared intention lock lends no more");
                hold.lending = false;
            }
        }
        // An idle hold that lends no more has nothing to wait for.
        let drained: Vec<String> = holds
            .held
            .iter()
            .filter(|(_, h)| h.borrowers == 0 && !h.lending)
            .map(|(id, _)| id.clone())
            .collect();
        self.release(&mut holds, &drained).await;
    }
}
