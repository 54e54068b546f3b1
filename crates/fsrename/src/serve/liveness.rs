//! [`Liveness`]: how often an instance says it is alive, and when the others take it for
//! dead (`adopt.rs`). Also how long an instance keeps trying to store what its jobs must have
//! stored (`jobs.rs`): past `dead_after`, its jobs may be adopted anyway.

use std::time::Duration;

/// How often an instance says it is alive, and when it is taken for dead.
#[derive(Debug, Clone, Copy)]
pub struct Liveness {
    /// Between two heartbeats (and two looks for jobs to take over).
    pub beat: Duration,
    /// A heartbeat older than this is an instance that died.
    pub dead_after: Duration,
}

impl Liveness {
    /// A heartbeat every third of `lease` (at least every 10 s, at most every 50 ms); dead
    /// after two leases.
    pub fn for_lease(lease: Duration) -> Liveness {
        Liveness {
            beat: (lease / 3).clamp(Duration::from_millis(50), Duration::from_secs(10)),
            dead_after: lease * 2,
        }
    }
}
