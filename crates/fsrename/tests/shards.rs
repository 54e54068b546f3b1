//! `--shards` and `--replicas`: numbers out of range refused by name; on a fresh store the
//! tree index made with the shards asked for (the lock and journal indices on one), an
//! existing one left as it is; the embedded store not minding them. On osmem behind the
//! Elasticsearch-behaviour proxy.

mod common;

use std::process::{Command, Output};

use common::text;

fn fsrename(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fsrename"))
        .args(args)
        .env_remove("FSRENAME_STORE")
        .env_remove("FSRENAME_ES_SHARDS")
        .env_remove("FSRENAME_ES_REPLICAS")
        .output()
        .expect("run fsrename")
}

#[test]
fn shards_and_replicas_out_of_range_are_refused_naming_the_value() {
    for (flag, value, range) in [
        ("--shards", "0", "1 to 1024"),
        ("--shards", "1025", "1 to 1024"),
        ("--shards", "many", "1 to 1024"),
        ("--replicas", "65", "0 to 64"),
    ] {
        let out = fsrename(&["--store", "mem", flag, value, "mkdir", "/a"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains(&format!("`{value}`")),
            "{flag} {value}: {stderr}"
        );
        assert!(stderr.contains(range), "{flag} {value}: {stderr}");
    }
}

#[test]
fn the_help_says_when_shards_and_replicas_apply() {
    let out = fsrename(&["--help"]);
    let help = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{help}");
    let store_options = help
        .split("Store options:")
        .nth(1)
        .unwrap_or_else(|| panic!("no store options in {help}"));
    for flag in ["--shards <N>", "--replicas <N>"] {
        assert!(store_options.contains(flag), "{flag}: {help}");
    }
    for said in [
        "when fsrename creates the indices",
        "an index that",
        "exists keeps",
        "embedded store",
        "ignores this",
        "one shard",
    ] {
        assert!(help.contains(said), "`{said}` in {help}");
    }
}

#[test]
fn the_embedded_store_ignores_shards_and_replicas() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("fs.db");
    let store = format!("file:{}", db.display());
    for args in [
        ["mkdir", "/a"].as_slice(),
        ["touch", "/a/f"].as_slice(),
        ["mv", "/a", "/b"].as_slice(),
    ] {
        let mut all = vec!["--store", &store, "--shards", "3", "--replicas", "2"];
        all.extend_from_slice(args);
        let out = fsrename(&all);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let out = fsrename(&["--store", &store, "ls", "-R", "/"]);
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        ["/b/", "/b/f"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_make_the_tree_index_of_a_fresh_store_only() {
    let url = fs_testkit::es_proxy().url().to_owned();
    let index = fs_testkit::unique_name("fs-shards");
    let run = |args: &[&str]| {
        let mut all = vec!["--store", url.as_str(), "--index", index.as_str()];
        all.extend_from_slice(args);
        fsrename(&all)
    };
    let out = run(&["--shards", "3", "--replicas", "0", "mkdir", "-p", "/a/b"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(fs_testkit::shards_of(&url, &index).await, 3);
    for beside in ["lock", "journal"] {
        let name = format!("{index}-{beside}");
        assert_eq!(fs_testkit::shards_of(&url, &name).await, 1, "{name}");
    }
    // Another number on an existing store changes nothing, and is no error.
    let out = run(&["--shards", "5", "touch", "/a/b/f"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(fs_testkit::shards_of(&url, &index).await, 3);
    let out = run(&["mv", "/a", "/c"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(&["ls", "-R", "/"]);
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        ["/c/", "/c/b/", "/c/b/f"]
    );
    let out = run(&["fsck"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}
