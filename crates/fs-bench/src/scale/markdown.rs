//! The scale section of `docs/benchmarks.md` (`--scale`), between its own markers, so that a
//! full run carries it over.

use std::fmt::Write as _;
use std::path::Path;

use super::Row;
use crate::report::{SCALE_END, SCALE_START};

/// The section: one table per store and size, each operation with its time, peak RSS, and
/// its peer's time and the ratio where it has one.
pub fn render(rows: &[Row], command: &str, stamp: &str, machine: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{SCALE_START}");
    let _ = writeln!(s, "## 8. Scale (`--scale`)\n");
    let _ = writeln!(
        s,
        "`{command}`, {stamp}; {machine}.\n\nEach operation is the release `fsrename` binary \
         run as a child process on a tree of directories of 1 000 empty files, one after \
         another: a first `index`, `index` again with nothing changed, `fsck`, `ls -R`, `mv` \
         (on Elasticsearch the default: the server rewrites, sliced), `mv --rewrite client` \
         back, `rm -r`. Peak RSS is the child's `VmHWM`, read every 20 ms. The peers are what a \
         user's own tool does with the same documents, with no lock, no check and no journal: \
         raw `_bulk` requests of 1 000 documents one after another (the same mapping and \
         shards); one plain read of every document (a scroll by `_doc` on Elasticsearch, the \
         store's scan of the index on the embedded store); the rename as one \
         `_update_by_query` with `slices=auto` (the median of there and back). \
         Ratio: fsrename's time over the peer's.\n"
    );
    let mut groups: Vec<(&str, Option<u32>, usize)> = Vec::new();
    for row in rows {
        let key = (row.store.as_str(), row.shards, row.docs);
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (store, shards, docs) in groups {
        let _ = writeln!(s, "**{store}, {docs} documents**\n");
        let _ = writeln!(
            s,
            "| operation | s | documents/s | peak RSS MiB | peer | peer s | ratio |\n| --- | --- | --- | --- | --- | --- | --- |"
        );
        for row in rows
            .iter()
            .filter(|r| (r.store.as_str(), r.shards, r.docs) == (store, shards, docs))
        {
            let rss = row
                .peak_kb
                .map_or("–".to_owned(), |kb| format!("{:.1}", kb as f64 / 1024.0));
            let (peer, peer_s, ratio) = match row.peer {
                Some((name, secs)) => (
                    name.to_owned(),
                    format!("{secs:.1}"),
                    format!("{:.2} ×", row.seconds / secs.max(1e-9)),
                ),
                None => ("–".to_owned(), "–".to_owned(), "–".to_owned()),
            };
            let _ = writeln!(
                s,
                "| {} | {:.1} | {:.0} | {rss} | {peer} | {peer_s} | {ratio} |",
                row.step,
                row.seconds,
                row.docs as f64 / row.seconds.max(1e-9)
            );
        }
        let _ = writeln!(s);
    }
    let _ = write!(s, "{SCALE_END}");
    s
}

/// Puts `section` in place of the scale section of `dir/benchmarks.md` (or at its end).
///
/// # Errors
/// If the file cannot be read or written.
pub fn write_into(dir: &Path, section: &str) -> anyhow::Result<std::path::PathBuf> {
    crate::report::write_section(dir, (SCALE_START, SCALE_END), section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_holds_a_table_per_store_and_size() {
        let row = |store: &str, step, peer| Row {
            store: store.to_owned(),
            shards: None,
            docs: 1_000,
            step,
            seconds: 2.0,
            peak_kb: Some(20_480),
            peer,
        };
        let rows = [
            row("embedded", "index (first)", Some(("raw _bulk", 1.0))),
            row("embedded", "fsck", None),
            row(
                "Elasticsearch, 3 shard(s)",
                "fsck",
                Some(("one plain read", 4.0)),
            ),
        ];
        let section = render(&rows, "fsrename-bench --scale", "today", "2 cores");
        assert!(section.starts_with(SCALE_START) && section.ends_with(SCALE_END));
        assert_eq!(section.matches("| operation |").count(), 2, "{section}");
        assert!(
            section.contains("| index (first) | 2.0 | 500 | 20.0 | raw _bulk | 1.0 | 2.00 × |"),
            "{section}"
        );
        assert!(
            section.contains("| fsck | 2.0 | 500 | 20.0 | one plain read | 4.0 | 0.50 × |"),
            "{section}"
        );
    }
}
