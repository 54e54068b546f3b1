//! [`IndexLayout`]: how many shards and replicas the indices fsrename creates get.
//!
//! Only the tree index takes the number of shards: the lock index stays on one shard (the items
//! of a bulk request are applied in order only within one shard, and the lock protocol's
//! release order relies on it), and the journal and jobs indices are small and rarely searched.
//! Every index takes the number of replicas. A layout applies when an index is created; an
//! existing index keeps its own.

use serde_json::{json, Value};

/// The most shards an index may have: Elasticsearch's own limit
/// (`index.number_of_shards` must be at most 1 024).
pub const MAX_SHARDS: u32 = 1_024;

/// The most replicas an index may have here. Elasticsearch sets no limit, but a replica needs
/// a node of its own (more than the nodes less one leave the index yellow), and no cluster
/// fsrename is meant for has more than this: a larger number is taken for a typing mistake.
pub const MAX_REPLICAS: u32 = 64;

/// Why a number of shards or replicas is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The number of shards is 0 or above [`MAX_SHARDS`].
    #[error("number of shards `{shards}` is out of range: it must be 1 to {MAX_SHARDS}")]
    Shards {
        /// The rejected number.
        shards: u32,
    },
    /// The number of replicas is above [`MAX_REPLICAS`].
    #[error("number of replicas `{replicas}` is out of range: it must be 0 to {MAX_REPLICAS}")]
    Replicas {
        /// The rejected number.
        replicas: u32,
    },
}

/// The shards and replicas of the indices fsrename creates; each one the server's default
/// unless set (the default layout).
///
/// ```
/// use fs_model::IndexLayout;
///
/// let layout = IndexLayout::default().with_shards(3)?.with_replicas(1)?;
/// assert_eq!((layout.shards(), layout.replicas()), (Some(3), Some(1)));
/// assert!(IndexLayout::default().with_shards(0).is_err());
/// # Ok::<(), fs_model::LayoutError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexLayout {
    shards: Option<u32>,
    replicas: Option<u32>,
}

impl IndexLayout {
    /// Returns this layout with `shards` shards for the tree index. Default: the server's
    /// default (1 on Elasticsearch 7 and later).
    ///
    /// # Errors
    /// [`LayoutError::Shards`] unless `shards` is 1 to [`MAX_SHARDS`].
    pub fn with_shards(self, shards: u32) -> Result<IndexLayout, LayoutError> {
        if !(1..=MAX_SHARDS).contains(&shards) {
            return Err(LayoutError::Shards { shards });
        }
        Ok(IndexLayout {
            shards: Some(shards),
            ..self
        })
    }

    /// Returns this layout with `replicas` replicas for every index. Default: the server's
    /// default (1 on Elasticsearch).
    ///
    /// # Errors
    /// [`LayoutError::Replicas`] if `replicas` is above [`MAX_REPLICAS`].
    pub fn with_replicas(self, replicas: u32) -> Result<IndexLayout, LayoutError> {
        if replicas > MAX_REPLICAS {
            return Err(LayoutError::Replicas { replicas });
        }
        Ok(IndexLayout {
            replicas: Some(replicas),
            ..self
        })
    }

    /// Returns the layout these optional numbers describe (`None`: the server's default).
    ///
    /// # Errors
    /// As [`IndexLayout::with_shards`] and [`IndexLayout::with_replicas`].
    pub fn of(shards: Option<u32>, replicas: Option<u32>) -> Result<IndexLayout, LayoutError> {
        let mut layout = IndexLayout::default();
        if let Some(shards) = shards {
            layout = layout.with_shards(shards)?;
        }
        if let Some(replicas) = replicas {
            layout = layout.with_replicas(replicas)?;
        }
        Ok(layout)
    }

    /// Returns the number of shards of the tree index, if set.
    pub fn shards(&self) -> Option<u32> {
        self.shards
    }

    /// Returns the number of replicas of every index, if set.
    pub fn replicas(&self) -> Option<u32> {
        self.replicas
    }

    /// Returns the index settings of the tree index: the shards and replicas that are set, and
    /// the segments sorted by `path`.
    ///
    /// Sorted segments are why a read in path order costs about what a plain read costs:
    /// `fsck`, `ls -R`, a client-side rename and the indexer read whole subtrees in path order,
    /// and a page of such a read on unsorted segments makes each shard sort every document
    /// the query matches. On segments sorted by the same field, Elasticsearch skips to the
    /// first document after the last page and stops once the page is full. Measured on 7.10,
    /// one shard, 1 000 000 documents: `fsck` 13.9–14.4 s unsorted, 8.3–9.1 s sorted;
    /// `mv --rewrite client` 64.8 s against 45.8 s; the first `index` 36.3 s against 37.0 s,
    /// the server-side `mv` 38.9 s against 43.0 s (`docs/scale.md`). An index sort is fixed
    /// when the index is created: a tree index made before keeps its unsorted segments, and
    /// works as before.
    pub(crate) fn tree_settings(&self) -> Value {
        let mut settings = self.settings(self.shards);
        settings["sort"] = json!({ "field": "path", "order": "asc" });
        settings
    }

    /// Returns the index settings of an index that stays on one shard (the lock, journal and
    /// jobs indices), with the replicas if set.
    pub(crate) fn one_shard_settings(&self) -> Value {
        self.settings(Some(1))
    }

    fn settings(&self, shards: Option<u32>) -> Value {
        let mut settings = json!({});
        if let Some(shards) = shards {
            settings["number_of_shards"] = json!(shards);
        }
        if let Some(replicas) = self.replicas {
            settings["number_of_replicas"] = json!(replicas);
        }
        settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_refused_number() {
        for shards in [0, MAX_SHARDS + 1, u32::MAX] {
            let e = IndexLayout::default().with_shards(shards).unwrap_err();
            assert_eq!(e, LayoutError::Shards { shards });
            assert!(e.to_string().contains(&format!("`{shards}`")), "{e}");
        }
        for shards in [1, 3, MAX_SHARDS] {
            assert_eq!(
                IndexLayout::default().with_shards(shards).unwrap().shards(),
                Some(shards)
            );
        }
        let e = IndexLayout::of(None, Some(MAX_REPLICAS + 1)).unwrap_err();
        assert!(e.to_string().contains("replicas `65`"), "{e}");
        let layout = IndexLayout::of(Some(2), Some(0)).unwrap();
        assert_eq!((layout.shards(), layout.replicas()), (Some(2), Some(0)));
        assert_eq!(IndexLayout::of(None, None).unwrap(), IndexLayout::default());
    }

    #[test]
    fn settings_carry_what_is_set() {
        let sorted = json!({ "field": "path", "order": "asc" });
        assert_eq!(
            IndexLayout::default().tree_settings(),
            json!({ "sort": sorted })
        );
        assert_eq!(
            IndexLayout::default().one_shard_settings(),
            json!({ "number_of_shards": 1 })
        );
        let layout = IndexLayout::of(Some(5), Some(2)).unwrap();
        assert_eq!(
            layout.tree_settings(),
            json!({ "number_of_shards": 5, "number_of_replicas": 2, "sort": sorted })
        );
        assert_eq!(
            layout.one_shard_settings(),
            json!({ "number_of_shards": 1, "number_of_replicas": 2 })
        );
    }
}
