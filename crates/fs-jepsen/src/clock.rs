//! The history's clock: microseconds since the history began, from one monotonic instant, so
//! that every client's times compare (they all run in this process).

use std::time::Instant;

/// Microseconds since the history began.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    began: Instant,
}

impl Clock {
    /// Starts the clock now.
    pub fn start() -> Clock {
        Clock {
            began: Instant::now(),
        }
    }

    /// Microseconds since the start.
    pub fn now(&self) -> u64 {
        u64::try_from(self.began.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}
