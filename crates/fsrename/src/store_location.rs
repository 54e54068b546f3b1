//! Where the store lives, as given on the command line.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use fs_store::{ElasticConfig, ElasticStore, SharedStore, SqliteStore};

/// A store location: `file:PATH` or a bare path, `mem`, or an `http(s)://` URL (or several,
/// separated by commas: the nodes of a cluster).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// An embedded database file.
    File(PathBuf),
    /// An in-memory embedded database.
    Memory,
    /// An Elasticsearch or OpenSearch server, or the nodes of a cluster (URLs separated by
    /// commas).
    Http(String),
}

impl FromStr for StoreLocation {
    type Err = String;

    fn from_str(s: &str) -> Result<StoreLocation, String> {
        if s.is_empty() {
            return Err("the store location is empty: give a file path, `mem` or a URL".to_owned());
        }
        if s == "mem" {
            return Ok(StoreLocation::Memory);
        }
        if s.starts_with("http://") || s.starts_with("https://") {
            return Ok(StoreLocation::Http(s.to_owned()));
        }
        match s.strip_prefix("file:") {
            Some("") => Err("`file:` needs a path after it".to_owned()),
            Some(path) => Ok(StoreLocation::File(PathBuf::from(path))),
            None => Ok(StoreLocation::File(PathBuf::from(s))),
        }
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::File(path) => write!(f, "file:{}", path.display()),
            StoreLocation::Memory => f.write_str("mem"),
            StoreLocation::Http(url) => f.write_str(&fs_store::redact_url(url)),
        }
    }
}

impl StoreLocation {
    /// Opens the store. For Elasticsearch, credentials and a CA come from the URL or the
    /// environment (`FSRENAME_ES_USER`/`FSRENAME_ES_PASSWORD`, `FSRENAME_ES_API_KEY`,
    /// `FSRENAME_ES_CA`), and `replicas` sets `number_of_replicas` of the indices it creates.
    ///
    /// # Errors
    /// Names the location when it cannot be opened.
    pub fn open(&self, replicas: Option<u32>) -> anyhow::Result<SharedStore> {
        match self {
            StoreLocation::File(path) => {
                let store = SqliteStore::open(path)
                    .map_err(|e| anyhow::anyhow!("cannot open store `{self}`: {e}"))?;
                Ok(Arc::new(store))
            }
            StoreLocation::Memory => Ok(Arc::new(SqliteStore::in_memory()?)),
            StoreLocation::Http(url) => {
                let mut config = ElasticConfig::new(url)?.with_env()?;
                if let Some(replicas) = replicas {
                    config = config.replicas(replicas);
                }
                Ok(Arc::new(ElasticStore::connect(config)?))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        assert_eq!("mem".parse(), Ok(StoreLocation::Memory));
        assert_eq!("file:a.db".parse(), Ok(StoreLocation::File("a.db".into())));
        assert_eq!("b.db".parse(), Ok(StoreLocation::File("b.db".into())));
        assert_eq!(
            "http://127.0.0.1:9200".parse(),
            Ok(StoreLocation::Http("http://127.0.0.1:9200".into()))
        );
        assert!("".parse::<StoreLocation>().is_err());
        let secret: StoreLocation = "https://u:pw@h:9200".parse().expect("url");
        assert_eq!(secret.to_string(), "https://<credentials>@h:9200");
        assert!("file:".parse::<StoreLocation>().is_err());
    }
}
