//! Durations in JSON as whole milliseconds: every report fsrename prints or serves names such a
//! field `*_ms` and holds an integer (`"elapsed_ms": 1234`), never serde's own
//! `{"secs", "nanos"}`, which is for programs, not for people reading a report.
//!
//! Use as `#[serde(with = "fs_model::millis")]` with `#[schemars(with = "u64")]`, or the
//! [`serialize`]/[`deserialize`] halves alone. Rounded to the nearest millisecond, so that
//! the mean of many short durations is not biased down.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Returns `d` in whole milliseconds, rounded to the nearest.
pub fn of(d: Duration) -> u64 {
    let ms = d.as_nanos().saturating_add(500_000) / 1_000_000;
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// Writes `d` as whole milliseconds.
///
/// # Errors
/// Those of the serializer.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(of(*d))
}

/// Reads milliseconds: a whole number, or one with a fraction (what versions before the JSON
/// contract wrote, and what a jobs index may still hold).
///
/// # Errors
/// A value that is not a number of at least zero.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let ms = f64::deserialize(d)?;
    Duration::try_from_secs_f64(ms / 1e3)
        .map_err(|_| serde::de::Error::custom(format!("{ms} is not a number of milliseconds")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct T {
        #[serde(rename = "took_ms", with = "super")]
        took: Duration,
    }

    #[test]
    fn durations_are_whole_milliseconds_both_ways() {
        let t = T {
            took: Duration::from_micros(1_499_600),
        };
        assert_eq!(
            serde_json::to_string(&t).expect("json"),
            r#"{"took_ms":1500}"#
        );
        let back: T = serde_json::from_str(r#"{"took_ms":1500}"#).expect("whole");
        assert_eq!(back.took, Duration::from_millis(1_500));
        // What earlier versions wrote: a fraction.
        let back: T = serde_json::from_str(r#"{"took_ms":2.25}"#).expect("fraction");
        assert_eq!(back.took, Duration::from_micros(2_250));
        assert!(serde_json::from_str::<T>(r#"{"took_ms":-1}"#).is_err());
        assert_eq!(of(Duration::from_micros(400)), 0);
        assert_eq!(of(Duration::from_micros(500)), 1);
    }
}
