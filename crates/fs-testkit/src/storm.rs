//! [`Storm`]: a proxy of a test's own whose network faults come on once the test's set-up is
//! done, and go off again for its checks.

use std::sync::Arc;

use fs_store::ElasticStore;

use crate::{start_es_proxy, EsProxy, EsProxyOptions, NetFaults};

/// A proxy in front of this binary's osmem-server, calm until [`Storm::storm`] turns on every
/// network fault at the rate it was made with. Cheap to clone: clones share the proxy.
#[derive(Clone)]
pub struct Storm {
    proxy: Arc<EsProxy>,
    faults: NetFaults,
}

impl std::fmt::Debug for Storm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storm")
            .field("url", &self.proxy.url())
            .field("faults", &self.faults)
            .finish()
    }
}

impl Storm {
    /// Starts a calm proxy whose storm strikes every fault at `rate`, from a seed that is
    /// printed ([`NetFaults::seed_from_env`]).
    pub fn start(rate: f64) -> Storm {
        Storm {
            proxy: Arc::new(start_es_proxy(EsProxyOptions::default())),
            faults: NetFaults::every(rate, NetFaults::seed_from_env()),
        }
    }

    /// Returns the proxy's address, for a process of the test to talk to.
    pub fn url(&self) -> &str {
        self.proxy.url()
    }

    /// Returns a client of the proxy.
    pub fn store(&self) -> ElasticStore {
        crate::elastic_store(self.proxy.url())
    }

    /// Turns the faults on.
    pub fn storm(&self) {
        self.proxy.set_faults(self.faults.clone());
    }

    /// Turns them off without a word: between the rounds of a test that storms each round.
    pub fn lull(&self) {
        self.proxy.set_faults(NetFaults::none(self.faults.seed));
    }

    /// Turns them off, and prints what struck, with the seed.
    pub fn calm(&self) {
        self.proxy.set_faults(NetFaults::none(self.faults.seed));
        println!(
            "network faults (seed {}): {:?}",
            self.faults.seed,
            self.proxy.stats()
        );
    }
}
