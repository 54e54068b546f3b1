//! The nemesis: faults at random moments, one at a time, each healed before the next, each
//! logged with its times. What it can do depends on the stage: a real cluster (nodes killed,
//! paused, partitioned; the flood-stage block), the Elasticsearch-behaviour proxy (network
//! storms with failover replays), or nothing but the clients' own processes; on every stage,
//! the clients' clocks ([`crate::clock_faults`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fs_testkit::{EsProxy, NetFaults, RealCluster};
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};

use crate::clock::Clock;
use crate::clock_faults::ClockFaults;
use crate::history::{Fault, FaultKind};
use crate::processes::{signal, Running, Sig};
use crate::service::Services;

/// Where the store runs, and so which faults can be had.
#[derive(Debug, Clone, Copy)]
pub enum Stage<'a> {
    /// A real cluster, its tree index (for the flood-stage block).
    Cluster(&'a RealCluster, &'a str),
    /// The proxy in front of osmem.
    Proxy(&'a EsProxy),
    /// The embedded store: the clients' processes only.
    Local,
}

/// How many faults, of which kinds, how far apart.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The kinds, each used in turn (shuffled per history), so that a history of as many
    /// faults as kinds has every one.
    pub kinds: Vec<FaultKind>,
    /// The history goes on until this many faults have been healed.
    pub min_faults: usize,
    /// The quiet time between two faults: from, to.
    pub gap: (Duration, Duration),
    /// How long the longer faults last (a node paused or partitioned, or down): from, to.
    pub outage: (Duration, Duration),
    /// How long a partition lasts: from, to (a node is told out only once its peers' checks
    /// of it have timed out: some 30 s on Elasticsearch's defaults).
    pub partition: (Duration, Duration),
    /// The clients' lease: a paused client is held past it.
    pub lease: Duration,
}

/// The nemesis of one history.
pub struct Nemesis<'a> {
    /// Where it strikes.
    pub stage: Stage<'a>,
    /// What it does.
    pub plan: Plan,
    /// The clients' running processes.
    pub running: &'a Running,
    /// The service instances, if any.
    pub services: Option<&'a Services>,
    /// The history's clock.
    pub clock: Clock,
    /// The clients' clocks, for clock faults.
    pub clocks: ClockFaults,
}

impl Nemesis<'_> {
    /// Causes faults until `stop` is set (and at least `plan.min_faults` were healed; the
    /// workload keeps its clients going until then), healing each before the next; `healed`
    /// is set to the number healed so far after each.
    pub async fn run(
        &self,
        seed: u64,
        stop: &AtomicBool,
        healed: &std::sync::atomic::AtomicUsize,
    ) -> Vec<Fault> {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x6e65_6d65);
        let mut kinds = self.plan.kinds.clone();
        kinds.shuffle(&mut rng);
        let mut faults = Vec::new();
        let mut i = 0;
        while !stop.load(Ordering::SeqCst) && !kinds.is_empty() {
            let gap = between(&mut rng, self.plan.gap);
            tokio::time::sleep(gap).await;
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let kind = kinds[i % kinds.len()];
            if let Some(fault) = self.strike(kind, &mut rng).await {
                eprintln!(
                    "nemesis: {:?} {} {:.1}s–{:.1}s",
                    fault.kind,
                    fault.target,
                    fault.began as f64 / 1e6,
                    fault.healed as f64 / 1e6
                );
                faults.push(fault);
                i += 1;
                healed.store(faults.len(), Ordering::SeqCst);
            }
        }
        faults
    }

    /// One fault of `kind`, healed; None if there was nothing to strike (no client running).
    async fn strike(&self, kind: FaultKind, rng: &mut StdRng) -> Option<Fault> {
        let outage = between(rng, self.plan.outage);
        let began;
        let target;
        match (kind, self.stage) {
            (FaultKind::NodeKill, Stage::Cluster(cluster, _)) => {
                let node = cluster.nodes.choose(rng)?.clone();
                began = self.clock.now();
                blocking(cluster, &node, RealCluster::kill).await;
                tokio::time::sleep(outage.min(Duration::from_secs(10))).await;
                blocking(cluster, &node, RealCluster::start).await;
                target = node;
            }
            (FaultKind::NodePause, Stage::Cluster(cluster, _)) => {
                let node = cluster.nodes.choose(rng)?.clone();
                began = self.clock.now();
                blocking(cluster, &node, RealCluster::pause).await;
                tokio::time::sleep(outage).await;
                blocking(cluster, &node, RealCluster::resume).await;
                target = node;
            }
            (FaultKind::Partition, Stage::Cluster(cluster, _)) => {
                let node = cluster.nodes.choose(rng)?.clone();
                began = self.clock.now();
                blocking(cluster, &node, RealCluster::partition).await;
                tokio::time::sleep(between(rng, self.plan.partition)).await;
                blocking(cluster, &node, RealCluster::heal).await;
                target = node;
            }
            (FaultKind::FloodStage, Stage::Cluster(cluster, index)) => {
                began = self.clock.now();
                flood_stage(cluster, &format!("{index}*"), true).await;
                tokio::time::sleep(outage.min(Duration::from_secs(8))).await;
                flood_stage(cluster, &format!("{index}*"), false).await;
                target = format!("{index}*");
            }
            (FaultKind::NetStorm, Stage::Proxy(proxy)) => {
                began = self.clock.now();
                proxy.set_faults(NetFaults {
                    refuse: 0.03,
                    cut_before: 0.03,
                    cut_after: 0.03,
                    too_many: 0.03,
                    unavailable: 0.03,
                    bulk_items_too_many: 0.03,
                    failover_replay: 0.05,
                    lagging_reads: 1,
                    // Searches and counts of an index of several shards answered without
                    // one: a shard failed, or one with no copy (`failed` 0, anomaly 10).
                    partial_shards: 0.03,
                    unassigned_shards: 0.03,
                    ..NetFaults::none(rng.random())
                });
                tokio::time::sleep(outage).await;
                proxy.set_faults(NetFaults::none(0));
                target = "the proxy".into();
            }
            (FaultKind::ClientKill, _) => {
                let services = self.services.filter(|s| !s.is_empty());
                if let (Some(services), true) = (services, rng.random_bool(0.3)) {
                    let slot = rng.random_range(0..services.len());
                    began = self.clock.now();
                    target = services.kill(slot).await?;
                    tokio::time::sleep(Duration::from_millis(rng.random_range(500..3000))).await;
                    if let Err(e) = services.restart(slot).await {
                        eprintln!("nemesis: service slot {slot} did not start again: {e}");
                    }
                } else {
                    let (client, pid) = self.running_client(rng).await?;
                    began = self.clock.now();
                    signal(pid, Sig::Kill);
                    target = client;
                }
            }
            (FaultKind::ClockSkew, _) if self.clocks.enabled() => {
                let offset = self.clock_offset(rng);
                began = self.clock.now();
                self.clocks.skew(offset);
                // An instance of the service too, sometimes: started again, skewed, and
                // again at the heal (a kill each time, as `ClientKill`'s).
                let services = self.services.filter(|s| !s.is_empty());
                let restarted = match (services, rng.random_bool(0.5)) {
                    (Some(services), true) => {
                        let slot = rng.random_range(0..services.len());
                        match services.restart(slot).await {
                            Ok(()) => Some((services, slot)),
                            Err(e) => {
                                eprintln!("nemesis: service slot {slot} did not start skewed: {e}");
                                None
                            }
                        }
                    }
                    _ => None,
                };
                tokio::time::sleep(outage).await;
                self.clocks.unskew();
                if let Some((services, slot)) = restarted {
                    if let Err(e) = services.restart(slot).await {
                        eprintln!("nemesis: service slot {slot} did not start again: {e}");
                    }
                }
                target = format!(
                    "processes started{} at {:+.1} s",
                    if restarted.is_some() {
                        ", a service instance among them,"
                    } else {
                        ""
                    },
                    offset as f64 / 1000.0
                );
            }
            (FaultKind::ClockJump, _) if self.clocks.enabled() => {
                let offset = self.clock_offset(rng);
                began = self.clock.now();
                if let Err(e) = self.clocks.jump(offset) {
                    eprintln!("nemesis: {e}");
                    return None;
                }
                tokio::time::sleep(outage).await;
                if let Err(e) = self.clocks.jump(0) {
                    eprintln!("nemesis: {e}");
                }
                target = format!(
                    "every process's clock stepped {:+.1} s",
                    offset as f64 / 1000.0
                );
            }
            (FaultKind::ClientPause, _) => {
                let (client, pid) = self.running_client(rng).await?;
                began = self.clock.now();
                signal(pid, Sig::Stop);
                tokio::time::sleep(self.plan.lease + Duration::from_millis(1500)).await;
                signal(pid, Sig::Cont);
                target = client;
            }
            // A kind this stage cannot have.
            _ => return None,
        }
        if let Stage::Cluster(cluster, _) = self.stage {
            if matches!(
                kind,
                FaultKind::NodeKill | FaultKind::NodePause | FaultKind::Partition
            ) {
                // The next fault strikes a whole cluster: never two nodes out at once.
                cluster.wait_green(Duration::from_secs(300)).await;
            }
        }
        Some(Fault {
            kind,
            target,
            began,
            healed: self.clock.now(),
        })
    }

    /// A clock offset for a skew or a jump, ahead or behind: beyond `max_clock_skew` (a tenth
    /// of the lease) always, beyond the lease itself in two draws of three.
    fn clock_offset(&self, rng: &mut StdRng) -> i64 {
        let lease = i64::try_from(self.plan.lease.as_millis()).unwrap_or(i64::MAX / 4);
        let ms = if rng.random_bool(1.0 / 3.0) {
            rng.random_range(lease / 5..=lease)
        } else {
            rng.random_range(lease + lease / 5..=lease * 3)
        };
        if rng.random_bool(0.5) {
            ms
        } else {
            -ms
        }
    }

    /// A client in the middle of a call, waiting up to 5 s for one.
    async fn running_client(&self, rng: &mut StdRng) -> Option<(String, u32)> {
        for _ in 0..100 {
            if let Some(found) = self.running.pick(rng) {
                return Some(found);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

fn between(rng: &mut StdRng, (from, to): (Duration, Duration)) -> Duration {
    if to <= from {
        return from;
    }
    let ms = rng.random_range(from.as_millis()..=to.as_millis());
    Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// Runs a blocking node command off the runtime.
async fn blocking(cluster: &RealCluster, node: &str, command: fn(&RealCluster, &str)) {
    let (cluster, node) = (cluster.clone(), node.to_owned());
    if let Err(e) = tokio::task::spawn_blocking(move || command(&cluster, &node)).await {
        eprintln!("nemesis: a node command failed: {e}");
    }
}

/// Sets or clears the block that the flood-stage disk watermark puts on an index
/// (`index.blocks.read_only_allow_delete`): writes other than deletes get 429
/// `cluster_block_exception`.
async fn flood_stage(cluster: &RealCluster, index: &str, on: bool) {
    let value = if on {
        serde_json::json!(true)
    } else {
        serde_json::Value::Null
    };
    let body = serde_json::json!({ "index.blocks.read_only_allow_delete": value });
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build();
    let Ok(http) = http else { return };
    for _ in 0..30 {
        for node in &cluster.nodes {
            if let Ok(answer) = http
                .put(format!("{node}/{index}/_settings"))
                .json(&body)
                .send()
                .await
            {
                if answer.status().is_success() {
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("nemesis: could not set the flood-stage block of {index} to {on}");
}
