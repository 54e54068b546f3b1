//! [`Lender`]: where a lock client borrows the intention locks on its ancestors instead of
//! taking them itself, and how the holders involved are named.
//!
//! A process that runs many jobs under one directory keeps one intention lock of its own on
//! each busy ancestor (a *hold*) and lends it to its jobs ([`crate::SharedIntentions`]): the
//! ancestor's document is written once per process instead of twice per job. The names say
//! who borrowed from whom, so that recovery, which finds an expired hold, can find the jobs
//! that may still rely on it (`docs/locking.md`, "Intention locks shared by a process"):
//!
//! - a hold's holder is `hold:<uuid>` ([`is_hold`]);
//! - a job that borrows from it is `<uuid>@hold:<uuid>` ([`borrowed_from`]), in every lock
//!   document it writes itself.

use async_trait::async_trait;

use crate::plan::LockItem;

/// What marks a hold's process id.
const HOLD_PREFIX: &str = "hold:";

/// Returns a new hold's process id.
pub fn new_hold_id() -> String {
    format!("{HOLD_PREFIX}{}", fs_model::entropy::uuid())
}

/// Returns true if `process_id` is a hold's: an intention lock a process lends to its jobs.
pub fn is_hold(process_id: &str) -> bool {
    process_id.starts_with(HOLD_PREFIX)
}

/// Returns a new process id for a job that borrows from the hold `hold`.
pub fn borrower_id(hold: &str) -> String {
    format!("{}@{hold}", fs_model::entropy::uuid())
}

/// Returns the hold that the holder `process_id` borrows from, if it is a borrower.
pub fn borrowed_from(process_id: &str) -> Option<&str> {
    let (_, hold) = process_id.split_once('@')?;
    is_hold(hold).then_some(hold)
}

/// Lends intention locks to the jobs of one process (implemented by
/// [`crate::SharedIntentions`]). Borrowing never waits on a lock: a lender that cannot lend
/// at once says no, and the job takes its ancestors itself.
#[async_trait]
pub(crate) trait Lender: Send + Sync + std::fmt::Debug {
    /// The hold's process id, which borrowers' ids name.
    fn hold_id(&self) -> &str;

    /// Lends `items` (intention locks) to a request that started at `since` (epoch ms), all
    /// or none; `None` if it cannot lend them at once (the request then takes them itself).
    async fn borrow(&self, items: &[LockItem], since: i64) -> Option<Vec<LockItem>>;

    /// Gives back what a job borrowed and no longer needs.
    async fn give_back(&self, ids: &[String]);

    /// Gives back what a job borrowed and stopped half-way under: the lender keeps it for as
    /// long as its other borrowers need it, then leaves it to expire for recovery.
    async fn orphan(&self, ids: &[String]);

    /// Until when (epoch ms, by the lender's clock) the holds `ids` are certainly held; 0 if
    /// any is lost.
    async fn held_until(&self, ids: &[String]) -> i64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowers_name_their_hold() {
        let hold = new_hold_id();
        assert!(is_hold(&hold));
        let job = borrower_id(&hold);
        assert!(!is_hold(&job));
        assert_eq!(borrowed_from(&job), Some(hold.as_str()));
        assert_eq!(borrowed_from("6f1c-uuid"), None);
        assert_eq!(borrowed_from("a@b"), None, "only a hold is lent from");
    }
}
