//! Jittered exponential backoff between refused attempts: the workspace's one retry policy,
//! [`fs_store::Backoff`], under the name this crate's users know.
//!
//! [`Backoff::new`] gives full jitter (the n-th pause uniform in `[0, min(max, base × 2ⁿ)]`),
//! which keeps jobs that were refused together from retrying in lock step; the jitter comes
//! from [`fs_model::entropy`], so a seeded simulation replays the same pauses.

pub use fs_store::Backoff;
