//! [`LockClientBuilder`]: how a [`LockClient`] is configured, every option with its default.

use std::sync::Arc;
use std::time::Duration;

use fs_store::SharedStore;
use tokio::sync::watch;

use crate::client::{LockClient, Settings};
use crate::events::EventSink;
use crate::lender::{borrower_id, Lender};
use crate::lock_doc::Owner;
use crate::orphans::Orphans;
use crate::os_process::OsProcess;
use crate::protocol::{LockProtocol, ProtocolMemo};

/// Builds a [`LockClient`].
#[derive(Clone)]
pub struct LockClientBuilder {
    store: SharedStore,
    lock_index: String,
    holder: String,
    process_id: Option<String>,
    job: Option<String>,
    lease: Duration,
    renew_every: Option<Duration>,
    wait: Duration,
    backoff_base: Duration,
    backoff_max: Duration,
    on_event: Option<EventSink>,
    protocol: LockProtocol,
    memo: Option<ProtocolMemo>,
    cancel: Option<watch::Receiver<bool>>,
    max_clock_skew: Option<Duration>,
    os_process: Option<Option<OsProcess>>,
    orphans: Option<Arc<dyn Orphans>>,
    lender: Option<Arc<dyn Lender>>,
}

impl std::fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("lock_index", &self.lock_index)
            .field("holder", &self.holder)
            .field("lease", &self.lease)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl LockClientBuilder {
    /// Sets how lock documents are written. Default: [`LockProtocol::Auto`] (scripted where
    /// the store runs scripts, compare-and-set otherwise).
    pub fn protocol(mut self, protocol: LockProtocol) -> LockClientBuilder {
        self.protocol = protocol;
        self
    }

    /// Shares the decision of the protocol with the other clients built with `memo`: the first
    /// one to need it decides (and stores the scripts), the others take its answer. Default:
    /// each client decides on its own.
    pub fn protocol_memo(mut self, memo: ProtocolMemo) -> LockClientBuilder {
        self.memo = Some(memo);
        self
    }

    /// Stops acquisitions when `cancel` turns true: a waiting acquisition fails with
    /// [`LockError::Cancelled`](crate::LockError::Cancelled) at once, holding nothing. Default: never cancelled.
    pub fn cancel(mut self, cancel: watch::Receiver<bool>) -> LockClientBuilder {
        self.cancel = Some(cancel);
        self
    }

    /// Calls `sink` with every [`LockEvent`](crate::LockEvent) of this client's acquisitions. Default: none.
    pub fn on_event(mut self, sink: EventSink) -> LockClientBuilder {
        self.on_event = Some(sink);
        self
    }

    /// Sets the readable label written into lock documents. Default: `fsrename`.
    pub fn holder(mut self, holder: impl Into<String>) -> LockClientBuilder {
        self.holder = holder.into();
        self
    }

    /// Sets the process id. Default: a fresh random UUID, which is what keeps two clients
    /// apart; set it only to act as an owner whose id you know (tests, recovery).
    pub fn process_id(mut self, process_id: impl Into<String>) -> LockClientBuilder {
        self.process_id = Some(process_id.into());
        self
    }

    /// Names the rename journal entry these locks protect; every lock document this client
    /// writes records it as `job`. A recovery that finds the locks expired fences that entry
    /// before clearing them, so a holder that was only paused cannot journal its rename
    /// afterwards. Default: none (locks that protect no journaled rename).
    pub fn job(mut self, job: impl Into<String>) -> LockClientBuilder {
        self.job = Some(job.into());
        self
    }

    /// Sets how long a lock lives without renewal. Default: 30 s.
    pub fn lease(mut self, lease: Duration) -> LockClientBuilder {
        self.lease = lease;
        self
    }

    /// Sets how often held locks are renewed. Default: a third of the lease.
    pub fn renew_every(mut self, every: Duration) -> LockClientBuilder {
        self.renew_every = Some(every);
        self
    }

    /// Sets how long an acquisition keeps retrying before it fails with
    /// [`LockError::Timeout`](crate::LockError::Timeout); zero makes a single attempt. Default: 30 s.
    pub fn wait(mut self, wait: Duration) -> LockClientBuilder {
        self.wait = wait;
        self
    }

    /// Sets the backoff between refused attempts: full jitter, doubling from `base` up to
    /// `max`. Default: 5 ms to 500 ms.
    pub fn backoff(mut self, base: Duration, max: Duration) -> LockClientBuilder {
        self.backoff_base = base;
        self.backoff_max = max;
        self
    }

    /// Sets the largest difference assumed between this machine's clock and a recoverer's.
    /// A recoverer treats a lock as expired when its own clock passes the recorded expiry, so
    /// a holder counts its locks as lost this much before that ([`LockClient::lease_left`]).
    /// Default: a tenth of the lease, at most 2 s.
    pub fn max_clock_skew(mut self, skew: Duration) -> LockClientBuilder {
        self.max_clock_skew = Some(skew);
        self
    }

    /// Sets the operating-system process written into this client's lock documents: `None`
    /// records none, so that only the lease ends its locks (as for a holder on another
    /// machine). Default: this process ([`OsProcess::current`]).
    pub fn os_process(mut self, process: Option<OsProcess>) -> LockClientBuilder {
        self.os_process = Some(process);
        self
    }

    /// Gives acquisitions something to do about a lock whose holders' leases have all ended
    /// (a job that died): [`Orphans::settle`], asked once per refusing document per
    /// acquisition, with nothing held. Default: none; such a lock is waited for, and only
    /// recovery clears it.
    pub fn orphans(mut self, orphans: Arc<dyn Orphans>) -> LockClientBuilder {
        self.orphans = Some(orphans);
        self
    }

    /// Makes the client borrow the intention locks of its tree locks from `lender`, as a
    /// holder named after the lender's hold (see [`crate::SharedIntentions`]).
    pub(crate) fn lender(mut self, lender: Arc<dyn Lender>) -> LockClientBuilder {
        self.process_id = Some(borrower_id(lender.hold_id()));
        self.lender = Some(lender);
        self
    }

    /// Drops the journal id: a process's shared intention locks protect no one job.
    pub(crate) fn without_job(mut self) -> LockClientBuilder {
        self.job = None;
        self
    }

    /// Returns the client.
    pub fn build(self) -> LockClient {
        let max_clock_skew = self
            .max_clock_skew
            .unwrap_or((self.lease / 10).min(Duration::from_secs(2)));
        let renew_every = self
            .renew_every
            .unwrap_or(self.lease / 3)
            .max(Duration::from_millis(1));
        LockClient::new(Settings {
            store: self.store,
            lock_index: self.lock_index,
            owner: Owner {
                process_id: self.process_id.unwrap_or_else(fs_model::entropy::uuid),
                holder: self.holder,
                job: self.job,
                os_process: self.os_process.unwrap_or_else(OsProcess::current),
            },
            lease: self.lease,
            renew_every,
            max_clock_skew,
            wait: self.wait,
            backoff_base: self.backoff_base,
            backoff_max: self.backoff_max,
            on_event: self.on_event,
            protocol_wanted: self.protocol,
            memo: self.memo.unwrap_or_default(),
            cancel: self.cancel,
            orphans: self.orphans,
            lender: self.lender,
        })
    }
}

impl LockClient {
    /// Starts building a client for the lock index `lock_index` (see
    /// [`fs_model::lock_index_name`]).
    pub fn builder(store: SharedStore, lock_index: impl Into<String>) -> LockClientBuilder {
        LockClientBuilder {
            store,
            lock_index: lock_index.into(),
            holder: "fsrename".to_owned(),
            process_id: None,
            job: None,
            lease: Duration::from_secs(30),
            renew_every: None,
            wait: Duration::from_secs(30),
            backoff_base: Duration::from_millis(5),
            backoff_max: Duration::from_millis(500),
            on_event: None,
            protocol: LockProtocol::Auto,
            memo: None,
            cancel: None,
            max_clock_skew: None,
            os_process: None,
            orphans: None,
            lender: None,
        }
    }
}
