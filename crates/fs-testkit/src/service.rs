//! [`rename_ended`]: waiting for a rename job of `fsrename serve` to end, as its tests do.

use std::time::{Duration, Instant};

use serde_json::Value;

/// Polls `GET {base}/renames/{id}` every 10 ms until the job is `done` or `failed`, and
/// returns it as the service showed it then.
///
/// # Panics
/// If the job has not ended by `deadline` (naming it and showing it), or if the service does
/// not answer in JSON: the test that waits needs the job.
pub async fn rename_ended(
    http: &reqwest::Client,
    base: &str,
    id: &str,
    deadline: Instant,
) -> Value {
    loop {
        let job: Value = http
            .get(format!("{base}/renames/{id}"))
            .send()
            .await
            .expect("GET /renames/ID")
            .json()
            .await
            .expect("a job in JSON");
        if job["state"] == "done" || job["state"] == "failed" {
            return job;
        }
        assert!(Instant::now() < deadline, "{id} never ended: {job}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
