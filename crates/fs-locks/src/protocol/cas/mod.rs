//! The compare-and-set protocol: read, run the stored scripts' Rust twins
//! ([`fs_model::lock_scripts`]) on what was read, write the result conditionally on the
//! version read. Needs no server-side script and runs on every store.
//!
//! One attempt at a set of lock items (`attempt.rs`):
//!
//! 1. One `mget` reads the items, skipped when every item is an exclusive lock: those are
//!    plain creates, as in the book, and a conflict is read afterwards.
//! 2. Each document read is put through the acquire script's Rust twin
//!    ([`fs_model::lock_scripts::ACQUIRE`]), the same logic Elasticsearch runs in painless:
//!    refused (an incompatible holder, or an older waiter), already ours, or a new document.
//!    If any item is refused, nothing is written but our waiter entries on the documents that
//!    refused (fair waiting), and the attempt is refused.
//! 3. One `bulk` writes everything, in plan order: creates for missing documents, and for
//!    existing ones an `index` conditional on the version read.
//! 4. Items whose write conflicted (someone else wrote the document since we read it) are read
//!    again and retried at once, a bounded number of rounds; the first refusal undoes what the
//!    attempt took, so a caller never waits while holding a lock.
//!
//! A document that already holds our process id is adopted rather than written again: that is
//! the book's reentrant `process_id` check, and it also makes a retry safe when an earlier
//! write landed but its answer was lost.
//!
//! A client whose protocol is not decided yet ([`LockProtocol::Auto`](crate::LockProtocol))
//! starts an attempt with [`create_missing`] instead: one `bulk` of creates, the same documents
//! the scripted upsert writes, so it decides nothing; the documents that exist go to the
//! protocol once it is decided (`crate::acquire`). So does a compare-and-set client on a
//! server until its process has found a lock document existing: on a quiet tree the `mget`
//! would read nothing.
//!
//! The adoption of a dead owner's lock set ([`adopt`]) always runs here, whatever the
//! client's protocol: no stored script takes over someone else's lock.

use async_trait::async_trait;
use fs_store::DocStore;

use super::{write_first, Giveback, Protocol, Renewal};
use crate::calls::Calls;
use crate::error::Result;
use crate::outcome::{Attempt, Released};
use crate::script_params::Request;

pub(crate) mod adopt;
mod attempt;

pub(crate) use attempt::create_missing;
mod release;
mod renew;
mod wait;
mod written;

/// The compare-and-set protocol.
pub(crate) struct Cas;

#[async_trait]
impl Protocol for Cas {
    async fn attempt(&self, calls: &mut Calls<'_>, req: &Request<'_>) -> Result<Attempt> {
        attempt::read_decide_write(calls, req).await
    }

    async fn join_queue(&self, calls: &mut Calls<'_>, req: &Request<'_>) -> Result<Vec<String>> {
        wait::register_waiter(calls, req).await
    }

    async fn leave_queue(&self, calls: &mut Calls<'_>, ids: &[String]) -> Result<()> {
        wait::unregister_waiter(calls, ids).await
    }

    async fn release(&self, calls: &mut Calls<'_>, back: Giveback) -> Result<Released> {
        if let Some(why) = write_first(calls, back.first).await? {
            return Ok(Released::first_failed(why));
        }
        let (owner, patience) = (calls.owner, calls.lease);
        release::release(calls, back.taken, owner, patience).await
    }

    async fn renew(
        &self,
        calls: &mut Calls<'_>,
        ids: &[String],
        until: i64,
    ) -> Result<Vec<Renewal>> {
        renew::renew(calls, ids, until).await
    }

    fn chains_release(&self, _store: &dyn DocStore) -> bool {
        false
    }
}
