//! What kind of server answers, and which paging it supports.

use serde_json::Value;

use super::config::Paging;

/// The server's flavour and version, from `GET /`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerInfo {
    pub(crate) opensearch: bool,
    pub(crate) version: (u32, u32),
}

impl ServerInfo {
    pub(crate) fn from_root(body: &Value) -> ServerInfo {
        let version = &body["version"];
        let number = version["number"].as_str().unwrap_or("0.0");
        let mut parts = number
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|p| p.parse().ok());
        let major = parts.next().unwrap_or(0);
        let minor = parts.next().unwrap_or(0);
        ServerInfo {
            opensearch: version["distribution"].as_str() == Some("opensearch"),
            version: (major, minor),
        }
    }

    /// Returns the best paging this server supports.
    pub(crate) fn paging(&self) -> Paging {
        let v = self.version;
        if self.opensearch {
            if v >= (3, 3) {
                Paging::PitShardDoc
            } else if v >= (2, 4) {
                Paging::PitId
            } else {
                Paging::Scroll
            }
        } else if v >= (7, 12) {
            Paging::PitShardDoc
        } else {
            Paging::Scroll
        }
    }

    pub(crate) fn describe(&self) -> String {
        let name = if self.opensearch {
            "OpenSearch"
        } else {
            "Elasticsearch"
        };
        format!("{name} {}.{}", self.version.0, self.version.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(number: &str, distribution: Option<&str>) -> ServerInfo {
        let mut version = json!({ "number": number });
        if let Some(d) = distribution {
            version["distribution"] = json!(d);
        }
        ServerInfo::from_root(&json!({ "version": version }))
    }

    #[test]
    fn paging_by_version() {
        assert_eq!(info("7.9.3", None).paging(), Paging::Scroll);
        assert_eq!(info("7.17.0", None).paging(), Paging::PitShardDoc);
        assert_eq!(info("8.15.1", None).paging(), Paging::PitShardDoc);
        assert_eq!(info("2.11.0", Some("opensearch")).paging(), Paging::PitId);
        assert_eq!(
            info("3.8.0", Some("opensearch")).paging(),
            Paging::PitShardDoc
        );
        assert_eq!(info("1.3.0", Some("opensearch")).paging(), Paging::Scroll);
    }
}
