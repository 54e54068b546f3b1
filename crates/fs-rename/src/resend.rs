//! How patient the job and recovery are with what they send again: the pauses of every
//! resend loop in this crate, from the workspace's one retry policy
//! ([`fs_store::RetryPolicy`]), side by side so that they can be compared and tuned at once.
//!
//! Equal jitter (each pause at least half of its ceiling) keeps a bounded number of resends
//! about as patient as the unjittered pauses they replace, while clients that failed together
//! spread out.

use std::time::Duration;

use fs_store::{Jitter, RetryPolicy};

const MS: Duration = Duration::from_millis(1);

/// A journal write or claim whose answer was lost: four resends after 10, 20, 40, 80 ms.
pub(crate) const JOURNAL: RetryPolicy =
    RetryPolicy::new(MS.saturating_mul(10), MS.saturating_mul(80))
        .jitter(Jitter::Equal)
        .attempts(4);

/// Bulk items that failed transiently: six resends after 20 ms doubling to 640 ms.
pub(crate) const ITEMS: RetryPolicy =
    RetryPolicy::new(MS.saturating_mul(20), MS.saturating_mul(640))
        .jitter(Jitter::Equal)
        .attempts(6);

/// Recovery's clearing of one expired lock, read afresh each time: two more tries, after 20
/// and 40 ms; what is still left waits for the next run.
pub(crate) const SWEEP: RetryPolicy =
    RetryPolicy::new(MS.saturating_mul(20), MS.saturating_mul(40))
        .jitter(Jitter::Equal)
        .attempts(2);

/// A read-back that shows less than its conflict said (a copy that lags): eight reads again,
/// full jitter from 20 ms up to 1 s, a few seconds at most before the read is believed.
pub(crate) const STALE_READ: RetryPolicy =
    RetryPolicy::new(MS.saturating_mul(20), MS.saturating_mul(1_000)).attempts(8);
