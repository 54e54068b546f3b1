//! Background renewal of a client's leases, by the protocol in use.

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;

use super::{Inner, LockClient};
use crate::clock::lease_end;
use crate::error::Result;

/// Renews the client's locks every `every` until the client is dropped.
pub(super) async fn renew_loop(
    weak: Weak<Inner>,
    mut stop_rx: watch::Receiver<()>,
    every: Duration,
) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Biased, as in `pause_unless_cancelled`: a fixed order keeps seeded replays exact.
        tokio::select! {
            biased;
            _ = ticker.tick() => {}
            // Errors once the client, which owns the sender, is gone.
            changed = stop_rx.changed() => if changed.is_err() { return },
        }
        // A strong handle for this round only: the client lives on while it renews.
        let Some(inner) = weak.upgrade() else { return };
        let client = LockClient { inner };
        client.renewals().last_attempt = Some(tokio::time::Instant::now());
        match renew(&client).await {
            Ok(_) => client.renewals().last_success = Some(tokio::time::Instant::now()),
            Err(e) => {
                tracing::warn!(error = %e, process_id = %client.owner().process_id, "lease renewal failed; will retry")
            }
        }
    }
}

/// Pushes every held lock's expiry to now + lease, by the protocol in use; marks and reports
/// those found lost. Returns the round trips it took.
pub(super) async fn renew(client: &LockClient) -> Result<u32> {
    let mut held = client.held().await;
    if held.is_empty() {
        return Ok(0);
    }
    let now = client.now_ms();
    let expires_at = lease_end(now, client.lease());
    let mut calls = client.calls();
    let steps = client.steps().await?;
    let ids = held.renewable();
    let renewals = steps.renew(&mut calls, &ids, expires_at).await?;
    let labels: Vec<String> = renewals
        .into_iter()
        .filter_map(|renewal| held.renewed(renewal, expires_at))
        .collect();
    drop(held);
    client.report_lost(&labels);
    Ok(calls.round_trips)
}
