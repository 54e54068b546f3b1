//! Where a scale run goes (`Place`: an embedded database file, or indices on a server), and
//! the peers of fsrename's operations there: what a user's own tool does with the same
//! documents, with no lock, no check and no journal.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use fs_model::{FsPath, IndexLayout};
use fs_rename::FsTree;
use fs_store::{Scan, Scope, SharedStore};

use super::tree::Shape;
use crate::peer::Peer;

/// The store of one run, and the tree index fsrename's commands use there.
pub struct Place {
    store: Store,
    /// The tree index of the commands (their locks and journal beside it).
    index: String,
    /// The index the raw bulk peer writes, beside it.
    peer_index: String,
    shards: Option<u32>,
}

enum Store {
    Embedded { file: PathBuf },
    Es { url: String },
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label())
    }
}

impl Place {
    /// Whether the store is an Elasticsearch server: the peers that need a server run there
    /// only.
    pub fn is_server(&self) -> bool {
        matches!(self.store, Store::Es { .. })
    }

    /// `embedded` (a database file in `dir`) or `es=URL`, for a tree of `docs` documents.
    ///
    /// # Errors
    /// If `store` is neither.
    pub fn new(store: &str, dir: &Path, docs: usize, shards: Option<u32>) -> anyhow::Result<Place> {
        let store = match store {
            "embedded" => Store::Embedded {
                file: dir.join(format!("scale-{docs}.db")),
            },
            other => match other.strip_prefix("es=") {
                Some(url) => Store::Es {
                    url: url.trim_end_matches('/').to_owned(),
                },
                None => anyhow::bail!("--scale runs on `embedded` or `es=URL`, not `{other}`"),
            },
        };
        let index = format!("scale-{docs}-s{}", shards.unwrap_or(1));
        Ok(Place {
            store,
            peer_index: format!("{index}-peer"),
            index,
            shards,
        })
    }

    /// How the report names it.
    pub fn label(&self) -> String {
        match (&self.store, self.shards) {
            (Store::Embedded { .. }, _) => "embedded".to_owned(),
            (Store::Es { .. }, Some(n)) => format!("Elasticsearch, {n} shard(s)"),
            (Store::Es { .. }, None) => "Elasticsearch".to_owned(),
        }
    }

    /// The store options of a command.
    pub fn args(&self) -> Vec<String> {
        let store = match &self.store {
            Store::Embedded { file } => format!("file:{}", file.display()),
            Store::Es { url } => url.clone(),
        };
        let mut args = vec![
            "--store".to_owned(),
            store,
            "--index".to_owned(),
            self.index.clone(),
        ];
        if let Some(n) = self.shards {
            args.extend([
                "--shards".to_owned(),
                n.to_string(),
                "--replicas".to_owned(),
                "0".to_owned(),
            ]);
        }
        args
    }

    /// Removes what earlier runs left: the database file, or the indices.
    ///
    /// # Errors
    /// If they cannot be removed.
    pub async fn clean(&self) -> anyhow::Result<()> {
        match &self.store {
            Store::Embedded { file } => {
                remove_database(file)?;
                remove_database(&peer_file(file))
            }
            Store::Es { url } => {
                let mut names = Vec::new();
                for index in [&self.index, &self.peer_index] {
                    names.extend([
                        index.clone(),
                        format!("{index}-lock"),
                        fs_model::journal_index_name(index),
                        fs_model::jobs_index_name(index),
                    ]);
                }
                Peer::new(url).delete_indices(&names.join(",")).await
            }
        }
    }

    /// A client of the store where the raw bulk peer writes: on the embedded store a file of
    /// its own, removed once it is measured. In the commands' file it would have to be
    /// deleted document by document, one transaction of the whole tree (at ten million
    /// documents a write-ahead log of 4.4 GB that had not finished after 15 minutes).
    fn peer_client(&self) -> anyhow::Result<SharedStore> {
        Ok(match &self.store {
            Store::Embedded { file } => Arc::new(fs_store::SqliteStore::open(peer_file(file))?),
            Store::Es { .. } => self.client()?,
        })
    }

    /// A client of the store, for the peers.
    fn client(&self) -> anyhow::Result<SharedStore> {
        Ok(match &self.store {
            Store::Embedded { file } => Arc::new(fs_store::SqliteStore::open(file)?),
            Store::Es { url } => {
                let config = fs_store::ElasticConfig::new(url)?.with_env()?;
                Arc::new(fs_store::ElasticStore::connect(config)?)
            }
        })
    }
}

/// The same documents as a first index writes, written by bulk requests of 1 000 documents
/// into an index of their own (the same mapping and shards), one after another, as a
/// user's own loader would: no walk, no lock. Returns the seconds it took.
///
/// # Errors
/// Store failures.
pub async fn raw_bulk(place: &Place, shape: &Shape) -> anyhow::Result<f64> {
    let layout = IndexLayout::of(place.shards, place.shards.map(|_| 0))?;
    let tree = FsTree::new(place.peer_client()?, place.peer_index.clone()).with_layout(layout);
    tree.ensure_indices().await?;
    let root = FsPath::parse("/t")?;
    let started = Instant::now();
    tree.insert_all(vec![fs_model::FsDoc::dir(root.clone(), 0)])
        .await?;
    for d in 0..shape.dirs {
        tree.insert_all(shape.dir_docs(&root, d)?).await?;
    }
    tree.refresh().await?;
    let seconds = started.elapsed().as_secs_f64();
    if let Store::Embedded { file } = &place.store {
        drop(tree);
        remove_database(&peer_file(file))?;
    }
    Ok(seconds)
}

/// The copy of the part `cp -r` takes (`/t`, or `/t/g00` on a grouped tree: [`Shape::part`])
/// as `/c`, written by raw bulk requests of 5 000 documents into the tree index itself
/// (Elasticsearch only), one after another, as a user's own copy would write them (ids of
/// its own, no lock, no claim); returns the seconds it took.
///
/// # Errors
/// Store failures.
pub async fn raw_bulk_copy(place: &Place, shape: &Shape) -> anyhow::Result<Option<f64>> {
    let Store::Es { url } = &place.store else {
        return Ok(None);
    };
    let t = FsPath::parse("/t")?;
    let (from, c) = (part_path(&t, shape)?, FsPath::parse("/c")?);
    // Made as they are sent, a directory at a time: ten million sources held at once would
    // measure the bench's memory, not the server. A grouped part's first directory brings
    // the group (the part's root) with it.
    let root = match shape.part() {
        None => vec![Ok(vec![fs_model::FsDoc::dir(t.clone(), 0)])],
        Some(_) => Vec::new(),
    };
    let dirs = shape.part_dirs().map(|d| shape.dir_docs(&t, d));
    let docs = root
        .into_iter()
        .chain(dirs)
        .flat_map(|dir| match dir {
            Ok(docs) => docs.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        })
        .enumerate()
        .map(|(i, doc)| {
            let copy = doc?.renamed(&from, &c)?;
            Ok((format!("peer-copy-{i}"), serde_json::to_value(copy)?))
        });
    let started = Instant::now();
    Peer::new(url).bulk_index(&place.index, docs, 5_000).await?;
    Ok(Some(started.elapsed().as_secs_f64()))
}

/// The part of the tree at `root` that `cp -r` and `rm -r` take: `root` itself, or its first
/// group.
pub fn part_path(root: &FsPath, shape: &Shape) -> anyhow::Result<FsPath> {
    Ok(match shape.part() {
        Some(group) => root.join(&group)?,
        None => root.clone(),
    })
}

/// The requests the server has answered so far (`Peer::rest_requests`; `None` on the
/// embedded store, which has no requests).
///
/// # Errors
/// If the server does not answer.
pub async fn requests(place: &Place) -> anyhow::Result<Option<u64>> {
    match &place.store {
        Store::Es { url } => Ok(Some(Peer::new(url).rest_requests().await?)),
        Store::Embedded { .. } => Ok(None),
    }
}

/// The delete of `/c` as one `_delete_by_query` with `slices=auto` (Elasticsearch only);
/// returns the seconds it took and how many it deleted.
///
/// # Errors
/// If the server refuses it.
pub async fn delete_by_query(place: &Place, path: &str) -> anyhow::Result<Option<(f64, u64)>> {
    let Store::Es { url } = &place.store else {
        return Ok(None);
    };
    let started = Instant::now();
    let deleted = Peer::new(url)
        .delete_by_query(&place.index, &FsPath::parse(path)?)
        .await?;
    Ok(Some((started.elapsed().as_secs_f64(), deleted)))
}

/// The embedded database file of the raw bulk peer, beside the commands' `file`.
fn peer_file(file: &Path) -> PathBuf {
    file.with_extension("peer.db")
}

/// Removes an embedded database file with its write-ahead log and shared memory, if there.
fn remove_database(file: &Path) -> anyhow::Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let path = PathBuf::from(format!("{}{suffix}", file.display()));
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", path.display()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// One read of every document of the tree index, in no particular order: a scroll by
/// `_doc` on Elasticsearch, the store's scan of the whole index on the embedded store.
/// Returns the seconds it took.
///
/// # Errors
/// Store failures.
pub async fn plain_read(place: &Place) -> anyhow::Result<f64> {
    let started = Instant::now();
    match &place.store {
        Store::Es { url } => {
            Peer::new(url).read_all(&place.index, 1_000).await?;
        }
        Store::Embedded { .. } => {
            let mut scan = Scan::new(place.client()?, &place.index, Scope::All, 1_000);
            while scan.next_page().await?.is_some() {}
            scan.close().await;
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

/// The rename of `/t` to `/t2` and back as one `_update_by_query` each with `slices=auto`
/// (Elasticsearch only); returns the seconds of one, the median of the two.
///
/// # Errors
/// If the server refuses it.
pub async fn update_by_query(place: &Place) -> anyhow::Result<Option<f64>> {
    let Store::Es { url } = &place.store else {
        return Ok(None);
    };
    let peer = Peer::new(url);
    let (t, t2) = (FsPath::parse("/t")?, FsPath::parse("/t2")?);
    let started = Instant::now();
    peer.rename(&place.index, &t, &t2).await?;
    let there = started.elapsed().as_secs_f64();
    let started = Instant::now();
    peer.rename(&place.index, &t2, &t).await?;
    let back = started.elapsed().as_secs_f64();
    Ok(Some((there + back) / 2.0))
}
