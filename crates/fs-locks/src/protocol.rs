//! Which protocol writes the lock documents: compare-and-set, or the book's scripts.

use std::fmt;

use fs_model::lock_scripts::{self, LockScript};
use fs_store::DocStore;

use crate::error::{LockError, Result};

/// How lock documents are written. Both produce the same documents, so clients using either
/// exclude each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockProtocol {
    /// Scripted where the store runs scripts (storing them succeeds), compare-and-set
    /// otherwise; decided once per client.
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
#[derive(Debug, Clone, Default)]
pub struct ProtocolMemo(pub(crate) std::sync::Arc<tokio::sync::OnceCell<LockProtocol>>);

impl ProtocolMemo {
    /// A memo that nothing has decided yet.
    pub fn new() -> ProtocolMemo {
        ProtocolMemo::default()
    }

    /// The protocol decided, if any client has decided it yet.
    pub fn decided(&self) -> Option<LockProtocol> {
        self.0.get().copied()
    }
}

/// The stored scripts. Their painless sources sit in [`fs_model::lock_scripts`], each beside
/// the same logic in Rust (which stores and test servers without painless run instead).
/// `Debug.explain` is how painless says the book's `assert false` (the update fails with
/// `painless_explain_error`, which the caller reads as a refusal, never as a race).
pub(crate) const SCRIPTS: [LockScript; 5] = lock_scripts::LOCK_SCRIPTS;

pub(crate) const ACQUIRE: &str = lock_scripts::ACQUIRE.id;
pub(crate) const RELEASE: &str = lock_scripts::RELEASE.id;
pub(crate) const RENEW: &str = lock_scripts::RENEW.id;
pub(crate) const WAIT: &str = lock_scripts::WAIT.id;
pub(crate) const UNWAIT: &str = lock_scripts::UNWAIT.id;

/// Decides the protocol: `Auto` stores the scripts (unless the store has them already) and
/// picks scripted if the store took them.
pub(crate) async fn resolve(wanted: LockProtocol, store: &dyn DocStore) -> Result<LockProtocol> {
    let store_scripts = || async {
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
    };
    let chosen = match wanted {
        LockProtocol::Cas => LockProtocol::Cas,
        LockProtocol::Scripted => {
            if !store_scripts().await? {
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
            if store_scripts().await? {
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
