//! The embedded store's clock: what the processes sharing a database file on one machine
//! judge leases by, whatever their wall clocks say.
//!
//! They share the machine's kernel, whose boot clock (`/proc/uptime`) no step of the wall
//! clock moves (NTP's, an operator's `date -s`, libfaketime's): the first process of a boot
//! records in the database the wall-clock time the machine booted at, by its own wall clock
//! (`meta`, keyed by the kernel's boot id), and every process then tells the time as that
//! base plus the boot clock. A wall clock stepped later, or a process started with its clock
//! set off, changes nothing; all agree to the boot clock's 10 ms. Where there is no such
//! clock (not Linux), the store says nothing and leases follow each process's wall clock.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::sql::sql_error;
use crate::error::Result;

/// The machine's boot: its id and how long ago it was, in milliseconds.
fn boot() -> Option<(String, i64)> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let seconds: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    // Whole milliseconds of a count of hundredths of a second: no loss.
    #[allow(clippy::cast_possible_truncation)]
    let ms = (seconds * 1000.0).round() as i64;
    Some((id.trim().to_owned(), ms))
}

/// The wall clock of this process, epoch milliseconds.
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The time by the boot clock and the base recorded in `conn`'s database (recording it if
/// this is the first process of the boot to ask); `None` where the machine has no boot clock.
pub(super) fn now_ms(conn: &mut Connection, location: &str) -> Result<Option<i64>> {
    let Some((boot_id, _)) = boot() else {
        return Ok(None);
    };
    let context = format!("reading the clock of {location}");
    let err = |e| sql_error(&context, e);
    let key = format!("boot_clock:{boot_id}");
    let recorded: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = ?1", [&key], |r| {
            r.get(0)
        })
        .optional()
        .map_err(err)?;
    let base = match recorded.and_then(|v| v.parse::<i64>().ok()) {
        Some(base) => base,
        None => {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(err)?;
            let Some((_, uptime)) = boot() else {
                return Ok(None);
            };
            let mine = wall_ms() - uptime;
            // Another process may have recorded its base since: the first one stays.
            tx.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES (?1, ?2)",
                rusqlite::params![key, mine.to_string()],
            )
            .map_err(err)?;
            let base: String = tx
                .query_row("SELECT value FROM meta WHERE key = ?1", [&key], |r| {
                    r.get(0)
                })
                .map_err(err)?;
            tx.commit().map_err(err)?;
            base.parse().unwrap_or(mine)
        }
    };
    Ok(boot().map(|(_, uptime)| base + uptime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn every_connection_of_a_database_reads_one_clock() {
        boot().expect("Linux has a boot clock");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("clock.db");
        let open = || {
            let conn = Connection::open(&path).expect("open");
            conn.execute_batch(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
            )
            .expect("schema");
            conn
        };
        let (mut a, mut b) = (open(), open());
        let first = now_ms(&mut a, "a").expect("read").expect("a boot clock");
        let second = now_ms(&mut b, "b").expect("read").expect("a boot clock");
        assert!((second - first).abs() < 1_000, "{first} then {second}");
        let wall = wall_ms();
        assert!(
            (first - wall).abs() < 5_000,
            "{first} against the wall clock's {wall}"
        );
    }
}
