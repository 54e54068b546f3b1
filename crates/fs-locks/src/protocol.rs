//! Which protocol writes the lock documents: compare-and-set, or the book's scripts.

use std::fmt;

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

/// The stored scripts, by id. Painless; `Debug.explain` is how painless says the book's
/// `assert false` (the update fails, and the caller reads the failure as a refusal).
pub(crate) const SCRIPTS: [(&str, &str); 5] = [
    (SHARED_ACQUIRE, SHARED_ACQUIRE_SOURCE),
    (EXCLUSIVE_ACQUIRE, EXCLUSIVE_ACQUIRE_SOURCE),
    (SHARED_RELEASE, SHARED_RELEASE_SOURCE),
    (EXCLUSIVE_RELEASE, EXCLUSIVE_RELEASE_SOURCE),
    (RENEW, RENEW_SOURCE),
];

pub(crate) const SHARED_ACQUIRE: &str = "fsrename-shared-acquire";
pub(crate) const EXCLUSIVE_ACQUIRE: &str = "fsrename-exclusive-acquire";
pub(crate) const SHARED_RELEASE: &str = "fsrename-shared-release";
pub(crate) const EXCLUSIVE_RELEASE: &str = "fsrename-exclusive-release";
pub(crate) const RENEW: &str = "fsrename-renew";

/// The book's shared-lock script (refuse an exclusive lock, else `lock_count++`), plus one
/// holder entry per process so that applying it twice counts once. The upsert document is the
/// first holder's share.
const SHARED_ACQUIRE_SOURCE: &str = "\
if (ctx._source.lock_type != 'shared') {
  if (ctx._source.process_id == params.process_id) { ctx.op = 'noop'; return; }
  Debug.explain('fsrename: refused by an exclusive lock');
}
if (ctx._source.holders == null) { ctx._source.holders = new HashMap(); }
if (ctx._source.holders.containsKey(params.process_id)) { ctx.op = 'noop'; return; }
ctx._source.holders.put(params.process_id, params.entry);
ctx._source.lock_count = (ctx._source.lock_count == null ? 0 : ctx._source.lock_count) + 1;
if (ctx._source.path == null) { ctx._source.path = params.path; }
def expires = params.entry.get('expires_at');
if (ctx._source.expires_at == null || ctx._source.expires_at < expires) { ctx._source.expires_at = expires; }";

/// The book's document-lock script: refuse unless ours, and change nothing (reentrant).
const EXCLUSIVE_ACQUIRE_SOURCE: &str = "\
if (ctx._source.process_id != params.process_id) { Debug.explain('fsrename: refused'); }
ctx.op = 'noop';";

/// The book's shared release (`if (--ctx._source.lock_count == 0) { ctx.op = 'delete' }`),
/// removing only this process's entry, and never below the entries still listed.
const SHARED_RELEASE_SOURCE: &str = "\
def holders = ctx._source.holders;
if (holders == null || !holders.containsKey(params.process_id)) { ctx.op = 'noop'; return; }
holders.remove(params.process_id);
int count = (ctx._source.lock_count == null ? 1 : ctx._source.lock_count) - 1;
if (count < holders.size()) { count = holders.size(); }
if (count <= 0) { ctx.op = 'delete'; return; }
ctx._source.lock_count = count;
long latest = 0;
for (def h : holders.values()) { def e = h.get('expires_at'); if (e != null && e > latest) { latest = e; } }
if (latest > 0) { ctx._source.expires_at = latest; } else { ctx._source.remove('expires_at'); }";

/// Deletes an exclusive lock if it is still this process's.
const EXCLUSIVE_RELEASE_SOURCE: &str = "\
if (ctx._source.process_id == params.process_id) { ctx.op = 'delete'; } else { ctx.op = 'noop'; }";

/// Pushes this process's expiry forward; refuses if the lock is no longer its.
const RENEW_SOURCE: &str = "\
if (ctx._source.lock_type == 'shared') {
  def holders = ctx._source.holders;
  if (holders == null || !holders.containsKey(params.process_id)) { Debug.explain('fsrename: lost'); }
  holders.get(params.process_id).put('expires_at', params.expires_at);
  if (ctx._source.expires_at == null || ctx._source.expires_at < params.expires_at) { ctx._source.expires_at = params.expires_at; }
} else if (ctx._source.process_id == params.process_id) {
  ctx._source.expires_at = params.expires_at;
} else {
  Debug.explain('fsrename: lost');
}";

/// Decides the protocol: `Auto` stores the scripts and picks scripted if the store took them.
pub(crate) async fn resolve(wanted: LockProtocol, store: &dyn DocStore) -> Result<LockProtocol> {
    let store_scripts = || async {
        let Some(scripted) = store.scripted() else {
            return Ok(false);
        };
        for (id, source) in SCRIPTS {
            let stored = scripted
                .put_script(id, source)
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
