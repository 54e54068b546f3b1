//! The two protocols that write the lock documents, behind one trait: compare-and-set
//! ([`cas`]) and the book's stored scripts ([`scripted`]). [`LockProtocol`] names them;
//! [`LockProtocol::steps`] is the one place that picks the [`Protocol`] a client runs;
//! [`resolve`] decides `Auto` once per client (or per [`ProtocolMemo`]).

use std::fmt;

use async_trait::async_trait;
use fs_model::lock_scripts::LockScript;
use fs_store::{DocStore, StoreError, Version};
use serde_json::Value;

use crate::calls::Calls;
use crate::error::{LockError, Result};
use crate::outcome::{Attempt, FirstWrite, Released, Taken};
use crate::script_params::{Request, SCRIPTS};

mod cas;
mod scripted;

pub(crate) use cas::adopt::{adopt_round, AdoptRound};
pub(crate) use cas::create_missing;

/// How lock documents are written. Both produce the same documents, so clients using either
/// exclude each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockProtocol {
    /// Scripted where the store runs scripts (storing them succeeds), compare-and-set
    /// otherwise; decided once per client (or [`ProtocolMemo`]), and on a server, where
    /// deciding costs requests, only when it matters: until a lock document is found to
    /// exist, attempts create their documents, which both protocols do alike, and releases
    /// run by compare-and-set.
    #[default]
    Auto,
    /// Read, then write conditionally on the version read: works on every store.
    Cas,
    /// The book's painless scripts, stored on the server: one round trip per acquisition,
    /// with no read first. Needs a server that runs scripts.
    Scripted,
}

impl fmt::Display for LockProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockProtocol::Auto => "auto",
            LockProtocol::Cas => "cas",
            LockProtocol::Scripted => "scripted",
        })
    }
}

impl std::str::FromStr for LockProtocol {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<LockProtocol, String> {
        match s {
            "auto" => Ok(LockProtocol::Auto),
            "cas" => Ok(LockProtocol::Cas),
            "scripted" => Ok(LockProtocol::Scripted),
            other => Err(format!(
                "unknown lock protocol `{other}`: expected auto, cas or scripted"
            )),
        }
    }
}

/// The protocol as decided by the first client that needs it, shared by every client built
/// with it ([`LockClientBuilder::protocol_memo`](crate::LockClientBuilder::protocol_memo)):
/// deciding reads a stored script (and, the first time on a server, stores all five), and a
/// service or a benchmark that builds a client per job would otherwise do it for every job. Share one only between clients
/// of the same store that want the same protocol.
///
/// It also remembers whether any of those clients has found a lock document existing: until
/// one has, a compare-and-set attempt creates its documents without reading them first (a
/// quiet tree costs one request); after, it reads first (a busy tree, where the root's
/// document is nearly always there, would pay for a refused create every time).
#[derive(Debug, Clone, Default)]
pub struct ProtocolMemo {
    decided: std::sync::Arc<tokio::sync::OnceCell<LockProtocol>>,
    found_existing: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl ProtocolMemo {
    /// A memo that nothing has decided yet.
    pub fn new() -> ProtocolMemo {
        ProtocolMemo::default()
    }

    /// The protocol decided, if any client has decided it yet.
    pub fn decided(&self) -> Option<LockProtocol> {
        self.decided.get().copied()
    }

    /// Returns true once a client sharing this memo has found a lock document existing.
    pub(crate) fn found_existing(&self) -> bool {
        self.found_existing
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records that a lock document was found existing.
    pub(crate) fn note_existing(&self) {
        self.found_existing
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Returns the protocol decided, deciding it (see [`resolve`]) if nobody has yet.
    pub(crate) async fn decide(
        &self,
        wanted: LockProtocol,
        store: &dyn DocStore,
    ) -> Result<LockProtocol> {
        self.decided
            .get_or_try_init(|| resolve(wanted, store))
            .await
            .copied()
    }
}

/// Decides the protocol: `Auto` stores the scripts (unless the store has them already) and
/// picks scripted if the store took them.
async fn resolve(wanted: LockProtocol, store: &dyn DocStore) -> Result<LockProtocol> {
    let chosen = match wanted {
        LockProtocol::Cas => LockProtocol::Cas,
        LockProtocol::Scripted => {
            if !store_scripts(store).await? {
                return Err(LockError::Store {
                    context: "choosing the scripted lock protocol".to_owned(),
                    cause: fs_store::StoreError::Rejected {
                        context: store.describe(),
                        status: None,
                        message: "the store does not run stored scripts; use the cas protocol"
                            .to_owned(),
                    },
                });
            }
            LockProtocol::Scripted
        }
        LockProtocol::Auto => {
            if store_scripts(store).await? {
                LockProtocol::Scripted
            } else {
                LockProtocol::Cas
            }
        }
    };
    // Every job has a client of its own: say it once per process, then only when debugging.
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::debug!(protocol = %chosen, store = %store.describe(), "lock protocol chosen");
    } else {
        tracing::info!(protocol = %chosen, store = %store.describe(), "lock protocol chosen");
    }
    Ok(chosen)
}

/// Stores the lock scripts unless the store has them already; false if it runs no scripts.
async fn store_scripts(store: &dyn DocStore) -> Result<bool> {
    let Some(scripted) = store.scripted() else {
        return Ok(false);
    };
    // The scripts are stored in order, and their ids change with their sources: finding
    // the last one as this process would store it means an earlier process stored them
    // all, and saves a request per script.
    if let Some(last) = SCRIPTS.last() {
        let found = scripted
            .stored_script(last.id)
            .await
            .map_err(LockError::store(format!(
                "reading lock script `{}`",
                last.id
            )))?;
        if found.as_deref() == Some(last.painless) {
            return Ok(true);
        }
    }
    for LockScript { id, painless, .. } in SCRIPTS {
        let stored = scripted
            .put_script(id, painless)
            .await
            .map_err(LockError::store(format!("storing lock script `{id}`")))?;
        if !stored {
            return Ok(false);
        }
    }
    Ok(true)
}

impl LockProtocol {
    /// Returns the protocol that runs this choice: the one place where compare-and-set and
    /// scripts are told apart. `Auto` (not yet decided) runs compare-and-set, which works on
    /// every store.
    pub(crate) fn steps(self) -> &'static dyn Protocol {
        match self {
            LockProtocol::Scripted => &scripted::Scripted,
            LockProtocol::Auto | LockProtocol::Cas => &cas::Cas,
        }
    }
}

/// What a release gives back: the locks no guard holds any more, and the write that must land
/// before they go ([`FirstWrite`], a job's journal entry closed).
#[derive(Debug)]
pub(crate) struct Giveback {
    pub(crate) taken: Vec<Taken>,
    pub(crate) first: Option<FirstWrite>,
}

/// What a renewal did to one held lock.
#[derive(Debug)]
pub(crate) enum Renewal {
    /// Its lease now ends at the expiry asked for; with the version and source written where
    /// the protocol knows them (compare-and-set).
    Renewed {
        id: String,
        written: Option<(Version, Value)>,
    },
    /// It is no longer ours: gone, or taken over after its lease expired.
    Lost { id: String },
}

/// The steps of a lock protocol. Both write the same documents, so clients using either
/// exclude each other; they differ in how: compare-and-set reads, runs the scripts' Rust
/// twins and writes conditionally; scripted sends the stored scripts.
#[async_trait]
pub(crate) trait Protocol: Send + Sync {
    /// Makes one attempt at `req.items`, none of which the client holds yet. Never waits for
    /// a holder; gives back what it took unless every item is granted.
    async fn attempt(&self, calls: &mut Calls<'_>, req: &Request<'_>) -> Result<Attempt>;

    /// Registers the request as a waiter on the documents of `req.items` (fair waiting), or
    /// renews its registration (until `req.waiter_expires_at`). Returns the ids where it is
    /// registered.
    async fn join_queue(&self, calls: &mut Calls<'_>, req: &Request<'_>) -> Result<Vec<String>>;

    /// Removes the owner's waiter entries from `ids` (it gave up).
    async fn leave_queue(&self, calls: &mut Calls<'_>, ids: &[String]) -> Result<()>;

    /// Makes `back.first` (if any), then releases `back.taken` if it landed: in one request
    /// where the protocol and the store chain them, else one after the other. Keeps trying
    /// for about the owner's lease while the documents keep changing.
    async fn release(&self, calls: &mut Calls<'_>, back: Giveback) -> Result<Released>;

    /// Pushes the leases of `ids` to `until` (epoch milliseconds); says which were renewed
    /// and which are lost. A lock neither renewed nor lost (a race, a failed item) is renewed
    /// by the next round.
    async fn renew(
        &self,
        calls: &mut Calls<'_>,
        ids: &[String],
        until: i64,
    ) -> Result<Vec<Renewal>>;

    /// Returns true if this protocol makes a write and the release after it in one request
    /// and one transaction on `store`.
    fn chains_release(&self, store: &dyn DocStore) -> bool;
}

/// Makes `first` alone, if there is one: `Some(why)` if it did not land.
async fn write_first(
    calls: &mut Calls<'_>,
    first: Option<FirstWrite>,
) -> Result<Option<StoreError>> {
    match first {
        Some(first) => Ok(calls.write_first(first).await?.err()),
        None => Ok(None),
    }
}
