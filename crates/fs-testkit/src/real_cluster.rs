//! A real Elasticsearch cluster for the node-loss tests, which only a real one can run (the
//! proxy's nodes share one osmem): its nodes' URLs (`FSRENAME_TEST_ES_CLUSTER`, comma
//! separated, loopback), and the commands that kill a node and start it again
//! (`FSRENAME_TEST_ES_KILL`, `FSRENAME_TEST_ES_START`, each run by `sh -c` with the node's
//! URL as its one argument, `$1`; the start command of a node that runs must do nothing),
//! and, for the tests that pause a node, the commands that pause it and let it go on
//! (`FSRENAME_TEST_ES_PAUSE`, `FSRENAME_TEST_ES_RESUME`: SIGSTOP and SIGCONT of its JVM).
//! `docs/elasticsearch.md` says how to run them.

use std::time::{Duration, Instant};

use serde_json::Value;

/// The variable naming the cluster's nodes.
pub const CLUSTER_VAR: &str = "FSRENAME_TEST_ES_CLUSTER";
/// The variable holding the command that kills a node (`$1`: its URL).
pub const KILL_VAR: &str = "FSRENAME_TEST_ES_KILL";
/// The variable holding the command that starts a node again (`$1`: its URL).
pub const START_VAR: &str = "FSRENAME_TEST_ES_START";
/// The variable holding the command that pauses a node (`$1`: its URL), for the tests that
/// pause one.
pub const PAUSE_VAR: &str = "FSRENAME_TEST_ES_PAUSE";
/// The variable holding the command that lets a paused node go on (`$1`: its URL).
pub const RESUME_VAR: &str = "FSRENAME_TEST_ES_RESUME";
/// The variable holding the command that cuts a node from the others (`$1`: its URL), for
/// the tests that partition one.
pub const PARTITION_VAR: &str = "FSRENAME_TEST_ES_PARTITION";
/// The variable holding the command that heals a node's partition (`$1`: its URL).
pub const HEAL_VAR: &str = "FSRENAME_TEST_ES_HEAL";

/// A real cluster, as the environment describes it.
#[derive(Debug, Clone)]
pub struct RealCluster {
    /// The nodes' URLs, as given.
    pub nodes: Vec<String>,
    kill: String,
    start: String,
    pause: Option<String>,
    resume: Option<String>,
    partition: Option<String>,
    heal: Option<String>,
    http: reqwest::Client,
}

impl RealCluster {
    /// Reads the cluster from the environment.
    ///
    /// # Panics
    /// If a variable is missing: such a test was asked for explicitly, and should say why it
    /// cannot run rather than pass.
    pub fn from_env() -> RealCluster {
        let optional = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let var = |name: &str| {
            optional(name).unwrap_or_else(|| {
                panic!("{name} is not set: a real cluster's node-loss test needs {CLUSTER_VAR}, {KILL_VAR} and {START_VAR} (docs/elasticsearch.md)")
            })
        };
        let nodes: Vec<String> = var(CLUSTER_VAR)
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_owned())
            .filter(|u| !u.is_empty())
            .collect();
        assert!(
            nodes.len() >= 3,
            "{CLUSTER_VAR}: three nodes at least, for one to die"
        );
        RealCluster {
            nodes,
            kill: var(KILL_VAR),
            start: var(START_VAR),
            pause: optional(PAUSE_VAR),
            resume: optional(RESUME_VAR),
            partition: optional(PARTITION_VAR),
            heal: optional(HEAL_VAR),
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("an HTTP client"),
        }
    }

    /// GETs `path` from the first node that answers; its JSON.
    pub async fn get(&self, path: &str) -> Value {
        for node in &self.nodes {
            if let Ok(response) = self.http.get(format!("{node}{path}")).send().await {
                if let Ok(body) = response.json::<Value>().await {
                    return body;
                }
            }
        }
        panic!("no node of {:?} answered GET {path}", self.nodes)
    }

    /// PUTs the JSON `body` to `path` on the first node that answers; its JSON answer.
    pub async fn put(&self, path: &str, body: &Value) -> Value {
        for node in &self.nodes {
            let sent = self
                .http
                .put(format!("{node}{path}"))
                .json(body)
                .send()
                .await;
            if let Ok(response) = sent {
                if let Ok(answer) = response.json::<Value>().await {
                    return answer;
                }
            }
        }
        panic!("no node of {:?} answered PUT {path}", self.nodes)
    }

    /// The URL of the node named `name` (from `_nodes/http`), if it is one of ours.
    async fn url_of(&self, name: &str) -> Option<String> {
        let nodes = self.get("/_nodes/http").await;
        let address = nodes["nodes"]
            .as_object()?
            .values()
            .find(|n| n["name"] == name)?["http"]["publish_address"]
            .as_str()?
            .to_owned();
        let port = address.rsplit(':').next()?;
        self.nodes
            .iter()
            .find(|u| u.ends_with(&format!(":{port}")))
            .cloned()
    }

    /// The URL of the node holding the primary of `index`'s first shard.
    pub async fn primary_of(&self, index: &str) -> String {
        let shards = self.get(&format!("/_cat/shards/{index}?format=json")).await;
        let name = shards
            .as_array()
            .and_then(|s| {
                s.iter()
                    .find(|s| s["prirep"] == "p" && s["state"] == "STARTED")
            })
            .and_then(|s| s["node"].as_str())
            .unwrap_or_else(|| panic!("no started primary of {index}: {shards}"))
            .to_owned();
        self.url_of(&name)
            .await
            .unwrap_or_else(|| panic!("node {name} is not one of {:?}", self.nodes))
    }

    /// The URL of the elected master.
    pub async fn master(&self) -> String {
        let master = self.get("/_cat/master?format=json").await;
        let name = master[0]["node"].as_str().expect("a master").to_owned();
        self.url_of(&name)
            .await
            .unwrap_or_else(|| panic!("master {name} is not one of {:?}", self.nodes))
    }

    fn run(&self, command: &str, url: &str) {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .arg("sh")
            .arg(url)
            .status()
            .expect("run the node command");
        assert!(status.success(), "`{command}` {url}: {status}");
    }

    /// Kills the node at `url` (blocking: call it from `spawn_blocking`).
    pub fn kill(&self, url: &str) {
        self.run(&self.kill, url);
    }

    /// Starts the node at `url` again (blocking); a node that runs already stays as it is.
    pub fn start(&self, url: &str) {
        self.run(&self.start, url);
    }

    /// Pauses the node at `url` (blocking).
    ///
    /// # Panics
    /// If `FSRENAME_TEST_ES_PAUSE` or `FSRENAME_TEST_ES_RESUME` is not set: a test that pauses
    /// a node must be able to let it go on.
    pub fn pause(&self, url: &str) {
        let (pause, _) = self.pause_commands();
        self.run(pause, url);
    }

    /// Lets the paused node at `url` go on (blocking).
    pub fn resume(&self, url: &str) {
        let (_, resume) = self.pause_commands();
        self.run(resume, url);
    }

    /// Checks that the commands which pause a node and let it go on are set, so that a test
    /// that pauses nodes fails before its set-up rather than at its first pause.
    ///
    /// # Panics
    /// As [`RealCluster::pause`].
    pub fn require_pause(&self) {
        self.pause_commands();
    }

    fn pause_commands(&self) -> (&str, &str) {
        match (&self.pause, &self.resume) {
            (Some(pause), Some(resume)) => (pause, resume),
            _ => panic!("a test that pauses a node needs {PAUSE_VAR} and {RESUME_VAR} (docs/elasticsearch.md)"),
        }
    }

    /// Cuts the node at `url` from the others (blocking).
    ///
    /// # Panics
    /// If `FSRENAME_TEST_ES_PARTITION` or `FSRENAME_TEST_ES_HEAL` is not set.
    pub fn partition(&self, url: &str) {
        let (partition, _) = self.partition_commands();
        self.run(partition, url);
    }

    /// Heals the partition of the node at `url` (blocking).
    pub fn heal(&self, url: &str) {
        let (_, heal) = self.partition_commands();
        self.run(heal, url);
    }

    /// Whether the commands that partition a node are set.
    pub fn can_partition(&self) -> bool {
        self.partition.is_some() && self.heal.is_some()
    }

    fn partition_commands(&self) -> (&str, &str) {
        match (&self.partition, &self.heal) {
            (Some(partition), Some(heal)) => (partition, heal),
            _ => panic!("a test that partitions a node needs {PARTITION_VAR} and {HEAL_VAR} (docs/elasticsearch.md)"),
        }
    }

    /// Waits until the cluster has all its nodes and is green, and every node serves the
    /// master's cluster state (or a later one), up to `patience`.
    ///
    /// Green is the master's view. A node cut off by a partition that has just healed can
    /// still hold its own, older state for seconds (until its leader check fails and it joins
    /// again): meanwhile it answers searches it coordinates from its local copies, which the
    /// master has marked stale, so reads through it are stale. A history's end checked
    /// through such a node saw locks, an open journal entry and a half-done rename that were
    /// long gone (seed 1409 at b7ee00e). So the wait also asks each node for the state it
    /// serves (`local=true`) until all name the master and have applied its state.
    pub async fn wait_green(&self, patience: Duration) {
        let since = Instant::now();
        let path = format!(
            "/_cluster/health?wait_for_status=green&wait_for_nodes={}&timeout=5s",
            self.nodes.len()
        );
        loop {
            let health = self.get(&path).await;
            let green = health["status"] == "green" && health["timed_out"] == false;
            if green && self.states_agree().await {
                return;
            }
            assert!(
                since.elapsed() < patience,
                "the cluster is not green, or its nodes serve different states, after \
                 {patience:?}: {health}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether every node answers with the master the master names and has applied at least
    /// the cluster state the master had when asked (`version`): a node that missed the
    /// master's last states (cut off) serves an older one.
    async fn states_agree(&self) -> bool {
        let metrics = "/_cluster/state/master_node,version";
        let master = self.get(metrics).await;
        let (Some(name), Some(version)) =
            (master["master_node"].as_str(), master["version"].as_u64())
        else {
            return false;
        };
        for node in &self.nodes {
            let url = format!("{node}{metrics}?local=true");
            let Ok(response) = self.http.get(url).send().await else {
                return false;
            };
            let Ok(state) = response.json::<Value>().await else {
                return false;
            };
            let behind = state["version"].as_u64().is_none_or(|v| v < version);
            if state["master_node"].as_str() != Some(name) || behind {
                return false;
            }
        }
        true
    }
}
