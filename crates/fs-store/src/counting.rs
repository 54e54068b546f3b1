//! [`CountingStore`]: a store wrapper that counts round trips.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::error::Result;
use crate::layer::{Call, StoreLayer};
use crate::store::{DocStore, SharedStore};

/// Wraps a store and counts every call made through it: one call, one round trip. Storing
/// and reading scripts is not counted: it is set-up, done once per store handle and cached
/// there. A refreshed bulk request and a chained one are one round trip each, as on the
/// stores that offer them.
///
/// Wrap the shared store once per job to learn what that job cost; the count is shared by
/// clones of the returned handle. It offers every capability of the store it wraps.
#[derive(Debug, Clone)]
pub struct CountingStore {
    inner: SharedStore,
    calls: Arc<AtomicU64>,
}

impl CountingStore {
    /// Wraps `inner` with a counter starting at zero.
    pub fn new(inner: SharedStore) -> CountingStore {
        CountingStore {
            inner,
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Returns the number of calls made so far.
    pub fn round_trips(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl StoreLayer for CountingStore {
    fn inner(&self) -> &dyn DocStore {
        &*self.inner
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        call: Call,
        next: BoxFuture<'a, Result<T>>,
    ) -> BoxFuture<'a, Result<T>> {
        if !call.sets_up_scripts() {
            self.calls.fetch_add(1, Ordering::Relaxed);
        }
        next
    }
}
