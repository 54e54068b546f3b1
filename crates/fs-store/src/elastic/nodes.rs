//! [`NodePool`]: the nodes of a cluster, given as a list of URLs, behind the official client's
//! connection-pool trait (`elasticsearch::http::transport::ConnectionPool`), so that one client
//! and one transport serve every node.
//!
//! Requests go round the nodes in turn. A node that refuses connections, drops them, or answers
//! 502, 503 or 504 is marked down by the request loop ([`NodePool::mark_down`]) and skipped
//! until its pause has run out (1 s, doubling while it stays down, at most 30 s); then it gets
//! requests again, and one that is answered clears its mark. When every node is down, the one
//! that comes back soonest is tried, so that a call still fails only at its retry deadline.
//!
//! A read ([`NodePool::reading`]) goes instead to the node that last carried out a write for
//! this process, while that node is up. A node cut off from the cluster keeps serving reads
//! from its own copies (`cluster.no_master_block: write`, the default) until it learns that it
//! is cut off, seconds later, and those copies miss every write made since: a rename's check
//! read through it missed a destination made just before (anomaly 11, `docs/reliability.md`).
//! Writes are refused there (503: no master), so a node that carried one out was in the
//! cluster then, and its view of which copies are current was the master's. With the locks a
//! job holds, nobody changes what it reads after they were granted; what it must see are the
//! writes acknowledged before, which every copy that node routes to has.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use elasticsearch::http::transport::{Connection, ConnectionPool};
use elasticsearch::http::Url;

/// The first pause of a node marked down; it doubles while the node stays down.
const FIRST_PAUSE: Duration = Duration::from_secs(1);
/// The longest pause.
const LONGEST_PAUSE: Duration = Duration::from_secs(30);

tokio::task_local! {
    /// Set while a read is being sent ([`NodePool::reading`]).
    static READING: ();
}

/// Says that no node has carried out a write yet.
const NO_WRITER: usize = usize::MAX;

/// The nodes of a cluster, taken in turn. Cheap to clone: clones share the nodes' state.
#[derive(Debug, Clone)]
pub(crate) struct NodePool {
    inner: Arc<Pool>,
}

#[derive(Debug)]
struct Pool {
    nodes: Vec<Node>,
    turn: AtomicUsize,
    /// Time zero of the `down_until` clocks.
    epoch: Instant,
    /// Whether any node has answered any request yet.
    answered: AtomicBool,
    /// Whether the wait for a first answer has been said ([`NodePool::first_waited`]).
    said_waiting: AtomicBool,
    /// The node that last carried out a write ([`NodePool::mark_wrote`]); [`NO_WRITER`]
    /// until one has.
    writer: AtomicUsize,
}

#[derive(Debug)]
struct Node {
    connection: Connection,
    /// `scheme://host:port`, to know a request's node from its URL.
    origin: String,
    /// Milliseconds since the pool's epoch until which the node is skipped; 0: up.
    down_until: AtomicU64,
    /// How many times in a row it was marked down.
    downs: AtomicU32,
}

impl NodePool {
    /// A pool of `first` and `rest`, in that order.
    pub(crate) fn new(first: Url, rest: Vec<Url>) -> NodePool {
        let nodes = std::iter::once(first)
            .chain(rest)
            .map(|url| Node {
                origin: url.origin().ascii_serialization(),
                connection: Connection::new(url),
                down_until: AtomicU64::new(0),
                downs: AtomicU32::new(0),
            })
            .collect();
        NodePool {
            inner: Arc::new(Pool {
                nodes,
                turn: AtomicUsize::new(0),
                epoch: Instant::now(),
                answered: AtomicBool::new(false),
                said_waiting: AtomicBool::new(false),
                writer: AtomicUsize::new(NO_WRITER),
            }),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn node_of(&self, url: &Url) -> Option<&Node> {
        self.position_of(url).map(|i| &self.inner.nodes[i])
    }

    fn position_of(&self, url: &Url) -> Option<usize> {
        let origin = url.origin().ascii_serialization();
        self.inner.nodes.iter().position(|n| n.origin == origin)
    }

    /// Sends the read `request` makes: its connection is the node that last carried out a
    /// write, while that one is up (see the module's notes), else the next in turn.
    pub(crate) async fn reading<F: std::future::Future>(request: F) -> F::Output {
        READING.scope((), request).await
    }

    /// Notes that the node of `url` carried out a write: it was in the cluster then.
    pub(crate) fn mark_wrote(&self, url: &Url) {
        if let Some(i) = self.position_of(url) {
            self.inner.writer.store(i, Ordering::Relaxed);
        }
    }

    /// The node that last carried out a write, if it is up.
    fn writer_if_up(&self, now: u64) -> Option<&Node> {
        let node = self
            .inner
            .nodes
            .get(self.inner.writer.load(Ordering::Relaxed))?;
        (node.down_until.load(Ordering::Relaxed) <= now).then_some(node)
    }

    /// Skips the node of `url` for a while: it refused or dropped a connection, or answered
    /// that it cannot serve.
    pub(crate) fn mark_down(&self, url: &Url) {
        let Some(node) = self.node_of(url) else {
            return;
        };
        // No longer the reads' node: once its pause runs out it may still be cut off, and it
        // is theirs again only when it carries out a write.
        if let Some(i) = self.position_of(url) {
            let _ = self.inner.writer.compare_exchange(
                i,
                NO_WRITER,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        let before = node.downs.fetch_add(1, Ordering::Relaxed);
        let pause = (FIRST_PAUSE * 2u32.pow(before.min(5))).min(LONGEST_PAUSE);
        let until = self.now_ms() + u64::try_from(pause.as_millis()).unwrap_or(u64::MAX);
        node.down_until.store(until, Ordering::Relaxed);
        // Said once a node goes down, and only where there is another node to go to: a single
        // server's failures are the request loop's to report.
        if before == 0 && self.inner.nodes.len() > 1 {
            tracing::warn!(node = %node.origin, ?pause, "node skipped: it did not serve a request");
        } else {
            tracing::debug!(node = %node.origin, ?pause, "node still skipped");
        }
    }

    /// Clears the mark of the node of `url`: it answered.
    pub(crate) fn mark_up(&self, url: &Url) {
        self.inner.answered.store(true, Ordering::Relaxed);
        if let Some(node) = self.node_of(url) {
            if node.downs.swap(0, Ordering::Relaxed) > 0 {
                node.down_until.store(0, Ordering::Relaxed);
                tracing::info!(node = %node.origin, "node serves requests again");
            }
        }
    }

    /// Whether any node has answered a request since the pool was made: until one has, a
    /// refused connection may be a server that is not there at all rather than a busy one.
    pub(crate) fn has_answered(&self) -> bool {
        self.inner.answered.load(Ordering::Relaxed)
    }

    /// Returns true the first time it is called: the wait for a first answer is said once.
    pub(crate) fn first_waited(&self) -> bool {
        !self.inner.said_waiting.swap(true, Ordering::Relaxed)
    }

    /// The nodes' URLs, for a message.
    pub(crate) fn origins(&self) -> String {
        self.inner
            .nodes
            .iter()
            .map(|n| n.origin.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// How many nodes are skipped now.
    #[cfg(test)]
    fn down(&self) -> usize {
        let now = self.now_ms();
        self.inner
            .nodes
            .iter()
            .filter(|n| n.down_until.load(Ordering::Relaxed) > now)
            .count()
    }
}

impl ConnectionPool for NodePool {
    fn next(&self) -> Connection {
        let nodes = &self.inner.nodes;
        let now = self.now_ms();
        if READING.try_with(|()| ()).is_ok() {
            if let Some(node) = self.writer_if_up(now) {
                return node.connection.clone();
            }
        }
        let start = self.inner.turn.fetch_add(1, Ordering::Relaxed);
        let up = (0..nodes.len())
            .map(|i| &nodes[(start + i) % nodes.len()])
            .find(|n| n.down_until.load(Ordering::Relaxed) <= now);
        // Every node down: the one that comes back soonest (the pool is never empty).
        let node = up.unwrap_or_else(|| {
            nodes.iter().fold(&nodes[0], |soonest, n| {
                if n.down_until.load(Ordering::Relaxed) < soonest.down_until.load(Ordering::Relaxed)
                {
                    n
                } else {
                    soonest
                }
            })
        });
        node.connection.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(port: u16) -> Url {
        Url::parse(&format!("http://127.0.0.1:{port}")).expect("url")
    }

    fn port_of(connection: &Connection) -> u16 {
        connection.url().port().expect("port")
    }

    #[test]
    fn requests_go_round_the_nodes_and_skip_one_that_is_down() {
        let pool = NodePool::new(url(1), vec![url(2), url(3)]);
        let ports: Vec<u16> = (0..6).map(|_| port_of(&pool.next())).collect();
        assert_eq!(ports, [1, 2, 3, 1, 2, 3]);

        pool.mark_down(&url(2).join("/idx/_bulk").expect("url"));
        assert_eq!(pool.down(), 1);
        let ports: Vec<u16> = (0..6).map(|_| port_of(&pool.next())).collect();
        assert!(!ports.contains(&2), "{ports:?}");
        assert!(ports.contains(&1) && ports.contains(&3), "{ports:?}");

        pool.mark_up(&url(2));
        assert_eq!(pool.down(), 0);
        let ports: Vec<u16> = (0..3).map(|_| port_of(&pool.next())).collect();
        assert!(ports.contains(&2), "{ports:?}");
    }

    #[tokio::test]
    async fn reads_go_to_the_node_that_last_carried_out_a_write_while_it_is_up() {
        let pool = NodePool::new(url(1), vec![url(2), url(3)]);
        let read = || async { port_of(&pool.next()) };
        // No write yet: reads go round like everything else.
        let ports = [
            NodePool::reading(read()).await,
            NodePool::reading(read()).await,
        ];
        assert_eq!(ports, [1, 2]);
        pool.mark_wrote(&url(3).join("/fs-lock/_bulk").expect("url"));
        for _ in 0..4 {
            assert_eq!(NodePool::reading(read()).await, 3);
        }
        // Writes (and whatever is not sent as a read) still go round.
        let ports: Vec<u16> = (0..3).map(|_| port_of(&pool.next())).collect();
        assert_eq!(ports, [3, 1, 2]);
        // Marked down, it is no longer the reads' node, even once it answers again, until
        // it carries out a write.
        pool.mark_down(&url(3));
        assert_ne!(NodePool::reading(read()).await, 3);
        pool.mark_up(&url(3));
        let mut reads = Vec::new();
        for _ in 0..3 {
            reads.push(NodePool::reading(read()).await);
        }
        assert!(reads.contains(&1) && reads.contains(&2), "{reads:?}");
        pool.mark_wrote(&url(3));
        assert_eq!(NodePool::reading(read()).await, 3);
    }

    #[test]
    fn with_every_node_down_the_one_back_soonest_is_tried() {
        let pool = NodePool::new(url(1), vec![url(2)]);
        pool.mark_down(&url(2));
        pool.mark_down(&url(1));
        pool.mark_down(&url(1));
        assert_eq!(pool.down(), 2);
        for _ in 0..4 {
            assert_eq!(port_of(&pool.next()), 2, "node 2 comes back first");
        }
        // A URL of no node changes nothing.
        pool.mark_down(&url(9));
        assert_eq!(pool.down(), 2);
    }
}
