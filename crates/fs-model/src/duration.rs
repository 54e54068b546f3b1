//! Durations and counts as people read them, for messages.

/// A duration as a person reads it: `250 ms`, `1.5 s`, `30 s`, `2 min 5 s`.
pub fn short_duration(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=9_999 if ms % 1_000 != 0 => format!("{:.1} s", d.as_secs_f64()),
        1_000..=59_999 => format!("{} s", d.as_secs()),
        _ => match d.as_secs() % 60 {
            0 => format!("{} min", d.as_secs() / 60),
            s => format!("{} min {s} s", d.as_secs() / 60),
        },
    }
}

/// `count` and its noun, singular for one: `1 document`, `2 documents`. `one` is the
/// singular, `many` the plural.
pub fn plural(count: impl Into<u64>, one: &str, many: &str) -> String {
    match count.into() {
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{plural, short_duration};

    #[test]
    fn one_is_singular() {
        assert_eq!(plural(1u32, "attempt", "attempts"), "1 attempt");
        assert_eq!(plural(0u64, "document", "documents"), "0 documents");
        assert_eq!(plural(2u64, "directory", "directories"), "2 directories");
    }

    #[test]
    fn durations_read_as_a_person_says_them() {
        let ms = Duration::from_millis;
        assert_eq!(short_duration(ms(8)), "8 ms");
        assert_eq!(short_duration(ms(1_500)), "1.5 s");
        assert_eq!(short_duration(ms(30_000)), "30 s");
        assert_eq!(short_duration(ms(125_000)), "2 min 5 s");
        assert_eq!(short_duration(ms(120_000)), "2 min");
    }
}
