//! [`LockEvent`]: what happens to an acquisition, for progress reports and timelines.

use std::sync::Arc;

use crate::error::Blocker;
use crate::outcome::Grant;

/// Something that happened to an acquisition, for progress reports and timelines.
#[derive(Debug, Clone, PartialEq)]
pub enum LockEvent {
    /// An attempt was refused; the client backs off and tries again.
    Refused {
        /// What was being locked.
        wanted: String,
        /// The lock in the way.
        blocker: Blocker,
        /// Attempts so far.
        attempts: u32,
    },
    /// The locks were granted.
    Granted {
        /// What was locked.
        wanted: String,
        /// What it cost.
        grant: Grant,
    },
}

/// A callback told of every [`LockEvent`]. It runs on the acquiring task: keep it quick.
pub type EventSink = Arc<dyn Fn(LockEvent) + Send + Sync>;
