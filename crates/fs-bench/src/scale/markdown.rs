//! The scale section of `docs/benchmarks.md` (`--scale`), between its own markers, so that a
//! full run carries it over. A run measures some stores and sizes; the tables of the others,
//! measured by an earlier run, stay (each table says when and by what it was measured), so
//! that a ten-million-document run of one store need not be repeated to measure another.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

#[cfg(test)]
use super::PeerRun;
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
         another: a first `index`, `index` again with nothing changed, `fsck`, `ls -R`, `find \
         --name` of one name in every directory, the first pass of `index --watch` (to its \
         first report), `mv` (on Elasticsearch the default: the server rewrites, sliced), `mv \
         --rewrite client` back, `recover` after `kill -9` of a whole-tree `mv` at 40 % of its \
         time, `cp -r` of the tree (of its first group of a million on a tree of ten), `rm -r` \
         of a copy of the same, made by `cp -r` just before (on Elasticsearch the default: the \
         server deletes the files, sliced, then the client the directories). Peak RSS is the child's `VmHWM`, read every 20 ms; \
         requests are those the server's REST layer answered meanwhile (`_nodes/usage`). The peers are what a \
         user's own tool does with the same documents, with no lock, no check and no journal: \
         raw `_bulk` requests of 1 000 documents one after another (the same mapping and \
         shards); one plain read of every document (a scroll by `_doc` on Elasticsearch, the \
         store's scan of the index on the embedded store); the rename as one \
         `_update_by_query` with `slices=auto` (the median of there and back); the copy as \
         raw `_bulk` requests of the same copies, 5 000 a request, into the tree index; the \
         delete as one `_delete_by_query` with `slices=auto` of another copy made the same \
         way just before it (the same subtree, as far as the server can tell). Ratio: fsrename's time over the peer's.\n"
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
        let _ = writeln!(s, "Measured {stamp}: `{command}`.\n");
        let _ = writeln!(
            s,
            "| operation | documents | s | documents/s | peak RSS MiB | requests | peer | peer s | peer requests | ratio |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for row in rows
            .iter()
            .filter(|r| (r.store.as_str(), r.shards, r.docs) == (store, shards, docs))
        {
            let rss = row
                .peak_kb
                .map_or("–".to_owned(), |kb| format!("{:.1}", kb as f64 / 1024.0));
            let count = |n: Option<u64>| n.map_or("–".to_owned(), |n| n.to_string());
            let (peer, peer_s, peer_requests, ratio) = match row.peer {
                Some(p) => (
                    p.name.to_owned(),
                    format!("{:.1}", p.seconds),
                    count(p.requests),
                    format!("{:.2} ×", row.seconds / p.seconds.max(1e-9)),
                ),
                None => (
                    "–".to_owned(),
                    "–".to_owned(),
                    "–".to_owned(),
                    "–".to_owned(),
                ),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {:.0} | {rss} | {} | {peer} | {peer_s} | {peer_requests} | {ratio} |",
                row.step,
                row.handled,
                row.seconds,
                row.handled as f64 / row.seconds.max(1e-9),
                count(row.requests),
            );
        }
        let _ = writeln!(s);
    }
    let _ = write!(s, "{SCALE_END}");
    s
}

/// Puts `section` in place of the scale section of `dir/benchmarks.md` (or at its end), with
/// the tables of the section there before that `section` has not measured again.
///
/// # Errors
/// If the file cannot be read or written.
pub fn write_into(dir: &Path, section: &str) -> anyhow::Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let md = dir.join("benchmarks.md");
    let old = match std::fs::read_to_string(&md) {
        Ok(old) => old,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", md.display())),
    };
    let merged = match crate::report::section_span(&old, SCALE_START, SCALE_END) {
        Some((from, to)) => merge(section, &old[from..to]),
        None => section.to_owned(),
    };
    let doc = crate::report::splice(&old, (SCALE_START, SCALE_END), &merged);
    std::fs::write(&md, doc).with_context(|| format!("writing {}", md.display()))?;
    Ok(md)
}

/// `new` with the tables of `old` (an earlier section) whose store and size it lacks, every
/// table in order of store, then size.
fn merge(new: &str, old: &str) -> String {
    let (head, mut tables) = split(new);
    let (_, earlier) = split(old);
    for table in earlier {
        if !tables.iter().any(|t| t.0 == table.0) {
            tables.push(table);
        }
    }
    tables.sort_by(|a, b| a.0.cmp(&b.0));
    let mut s = head.to_owned();
    for (_, text) in tables {
        s.push_str(text);
    }
    s.push_str(SCALE_END);
    s
}

/// A table's key: the store's label and the documents, read from its `**store, N
/// documents**` heading.
type Key = (String, usize);

/// A section's text before its first table, and its tables (heading to the next heading or
/// the end marker), each with its key.
fn split(section: &str) -> (&str, Vec<(Key, &str)>) {
    let body = section.strip_suffix(SCALE_END).unwrap_or(section);
    let starts: Vec<usize> = body
        .match_indices("\n**")
        .map(|(i, _)| i + 1)
        .filter(|&i| key(&body[i..]).is_some())
        .collect();
    let head = &body[..starts.first().copied().unwrap_or(body.len())];
    let tables = starts
        .iter()
        .enumerate()
        .filter_map(|(n, &from)| {
            let to = starts.get(n + 1).copied().unwrap_or(body.len());
            key(&body[from..]).map(|k| (k, &body[from..to]))
        })
        .collect();
    (head, tables)
}

/// The key of a table whose heading starts `text`.
fn key(text: &str) -> Option<Key> {
    let heading = text.strip_prefix("**")?.split("**").next()?;
    let (store, docs) = heading.rsplit_once(", ")?;
    let docs = docs.strip_suffix(" documents")?.parse().ok()?;
    Some((store.to_owned(), docs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_holds_a_table_per_store_and_size() {
        let peer = |name, seconds, requests| {
            Some(PeerRun {
                name,
                seconds,
                requests,
            })
        };
        let row = |store: &str, step, requests, peer| Row {
            store: store.to_owned(),
            shards: None,
            docs: 1_000,
            handled: 1_000,
            step,
            seconds: 2.0,
            peak_kb: Some(20_480),
            requests,
            peer,
        };
        let rows = [
            row(
                "embedded",
                "index (first)",
                None,
                peer("raw _bulk", 1.0, None),
            ),
            row("embedded", "fsck", None, None),
            row(
                "Elasticsearch, 3 shard(s)",
                "fsck",
                Some(12),
                peer("one plain read", 4.0, Some(3)),
            ),
        ];
        let section = render(&rows, "fsrename-bench --scale", "today", "2 cores");
        assert!(section.starts_with(SCALE_START) && section.ends_with(SCALE_END));
        assert_eq!(section.matches("| operation |").count(), 2, "{section}");
        assert!(
            section.contains(
                "| index (first) | 1000 | 2.0 | 500 | 20.0 | – | raw _bulk | 1.0 | – | 2.00 × |"
            ),
            "{section}"
        );
        assert!(
            section.contains(
                "| fsck | 1000 | 2.0 | 500 | 20.0 | 12 | one plain read | 4.0 | 3 | 0.50 × |"
            ),
            "{section}"
        );
    }

    #[test]
    fn a_run_keeps_the_tables_it_did_not_measure_again() {
        let row = |store: &str, docs, seconds| Row {
            store: store.to_owned(),
            shards: None,
            docs,
            handled: docs,
            step: "fsck",
            seconds,
            peak_kb: None,
            requests: None,
            peer: None,
        };
        let earlier = render(
            &[
                row("embedded", 10_000_000, 9.0),
                row("embedded", 1_000, 1.0),
            ],
            "bench --scale --scale-sizes 1000,10000000",
            "yesterday",
            "2 cores",
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(
            dir.path().join("benchmarks.md"),
            format!("# B\n\n{earlier}\n"),
        )
        .expect("the old file");
        let now = render(
            &[
                row("embedded", 1_000, 2.0),
                row("Elasticsearch, 3 shard(s)", 1_000, 3.0),
            ],
            "bench --scale --scale-sizes 1000",
            "today",
            "2 cores",
        );
        let md = write_into(dir.path(), &now).expect("written");
        let text = std::fs::read_to_string(md).expect("read back");
        let section = &text[text.find(SCALE_START).expect("start")..];
        assert_eq!(section.matches("| operation |").count(), 3, "{section}");
        assert!(
            section.contains("| fsck | 10000000 | 9.0 |"),
            "the 10 M table kept: {section}"
        );
        assert!(
            section.contains("| fsck | 1000 | 2.0 |"),
            "the 1 000 table new: {section}"
        );
        assert!(
            !section.contains("| fsck | 1000 | 1.0 |"),
            "the old 1 000 table gone: {section}"
        );
        let order: Vec<usize> = [
            "**Elasticsearch, 3 shard(s), 1000",
            "**embedded, 1000 ",
            "**embedded, 10000000",
        ]
        .iter()
        .map(|h| section.find(h).expect(h))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{section}");
        assert!(section.contains("Measured yesterday: `bench --scale --scale-sizes 1000,10000000`"));
        assert!(text.starts_with("# B\n\n") && text.trim_end().ends_with(SCALE_END));
    }
}
