//! The releases that dropped guards leave running in the background, counted, so that a
//! process about to end can wait for them: a Ctrl-C must not leave a lock behind for its
//! whole lease because the process ended before the release it started was sent.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use tokio::sync::Notify;

/// Releases under way in the background.
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Guards dropped after their job journaled itself: their locks are left for recovery.
static KEPT: AtomicUsize = AtomicUsize::new(0);
/// Told when [`PENDING`] falls to zero.
static SETTLED: LazyLock<Notify> = LazyLock::new(Notify::new);

/// Runs `release` on `runtime`, counted until it ends.
pub(crate) fn spawn(
    runtime: &tokio::runtime::Handle,
    release: impl Future<Output = ()> + Send + 'static,
) {
    PENDING.fetch_add(1, Ordering::SeqCst);
    runtime.spawn(async move {
        // Counted down even if the task is cancelled (its runtime shutting down).
        let _done = Done;
        release.await;
    });
}

/// Notes a guard dropped with its locks kept for recovery.
pub(crate) fn kept() {
    KEPT.fetch_add(1, Ordering::SeqCst);
}

struct Done;

impl Drop for Done {
    fn drop(&mut self) {
        if PENDING.fetch_sub(1, Ordering::SeqCst) == 1 {
            SETTLED.notify_waiters();
        }
    }
}

/// Waits, at most `within`, until every release that a dropped [`LockGuard`](crate::LockGuard)
/// started in the background has ended; returns false if some were still under way then.
/// For a process about to end (told to stop, say) after dropping work that held locks.
pub async fn settle_background_releases(within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let settled = SETTLED.notified();
        tokio::pin!(settled);
        // Registered before the count is read, so a release that ends in between still wakes it.
        settled.as_mut().enable();
        if PENDING.load(Ordering::SeqCst) == 0 {
            return true;
        }
        if tokio::time::timeout_at(deadline, settled).await.is_err() {
            return PENDING.load(Ordering::SeqCst) == 0;
        }
    }
}

/// How many guards this process dropped while keeping their locks for recovery (a job that
/// had journaled itself, stopped half-way): what `fsrename recover` will have to finish.
pub fn guards_kept_for_recovery() -> usize {
    KEPT.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_what_is_under_way_and_no_longer() {
        assert!(settle_background_releases(Duration::ZERO).await);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        spawn(&tokio::runtime::Handle::current(), async move {
            let _ = rx.await;
        });
        assert!(!settle_background_releases(Duration::from_millis(20)).await);
        let _ = tx.send(());
        assert!(settle_background_releases(Duration::from_secs(5)).await);
    }
}
