//! The store conformance suite over every store wrapper (`CountingStore`, `GroupCommit`
//! grouping every index, and fs-testkit's
//! `LatencyStore`, `FaultyStore` with a plan that injects nothing, and `ScriptingStore`), each
//! on the embedded store and on osmem-server over HTTP: a wrapper must keep every behaviour
//! and every capability of the store it wraps.

use std::sync::Arc;
use std::time::Duration;

use fs_store::{CountingStore, GroupCommit, SharedStore};
use fs_testkit::{Backend, FaultPlan, FaultyStore, LatencyStore, ScriptingStore};

fn counting(inner: SharedStore) -> SharedStore {
    Arc::new(CountingStore::new(inner))
}

fn grouped(inner: SharedStore) -> SharedStore {
    Arc::new(GroupCommit::every_index(inner))
}

fn latency(inner: SharedStore) -> SharedStore {
    Arc::new(LatencyStore::new(inner, Duration::from_millis(1)))
}

fn faulty(inner: SharedStore) -> SharedStore {
    Arc::new(FaultyStore::new(inner, FaultPlan::default(), 1))
}

fn scripting(inner: SharedStore) -> SharedStore {
    Arc::new(ScriptingStore::new(inner))
}

/// One module per wrapper and backend, each the whole suite.
macro_rules! wrapped {
    ($($name:ident: $wrap:ident over $backend:ident;)+) => {
        $(
            mod $name {
                use super::*;

                async fn store() -> SharedStore {
                    $wrap(Backend::$backend.store())
                }

                fs_store::conformance_suite!(store, near_real_time);
            }
        )+
    };
}

wrapped! {
    counting_embedded: counting over Embedded;
    counting_osmem: counting over Osmem;
    grouped_embedded: grouped over Embedded;
    grouped_osmem: grouped over Osmem;
    latency_embedded: latency over Embedded;
    latency_osmem: latency over Osmem;
    faulty_embedded: faulty over Embedded;
    faulty_osmem: faulty over Osmem;
    scripting_embedded: scripting over Embedded;
    scripting_osmem: scripting over Osmem;
}

/// Each wrapper offers what the store it wraps offers (the scripting store its own scripts
/// besides).
#[test]
fn wrappers_offer_the_capabilities_of_the_store_they_wrap() {
    for backend in [Backend::Embedded, Backend::Osmem] {
        let bare = backend.store();
        let expected = bare.capabilities().names();
        for wrap in [counting, grouped, latency, faulty, scripting] {
            let wrapped = wrap(Arc::clone(&bare));
            assert_eq!(
                wrapped.capabilities().names(),
                expected,
                "{}",
                wrapped.describe()
            );
            assert_eq!(wrapped.chains_bulk(), bare.chains_bulk());
        }
    }
}
