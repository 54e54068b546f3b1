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
//! A read ([`NodePool::reading`]) goes instead to one node at a time: after a write of this
//! process, to a node shown to have a cluster state as new as the master's (`verified.rs`:
//! [`NodePool::verification_needed`], [`NodePool::candidates`], [`NodePool::set_reader`]),
//! until the next write; where reads are not checked, to the node of the last write. A node
//! cut off from the cluster keeps serving reads from its own copies until it learns that it
//! is cut off, seconds later, and those copies miss every write made since: a rename's check
//! read through it missed a destination made just before (anomaly 11, `docs/reliability.md`).
//! Being the node of the last write is not proof of being in the cluster: until it learns,
//! such a node still carries out writes, forwarding them over connections it opened before
//! the cut (anomaly 12), and on OpenSearch it does even after (`cluster.no_master_block`
//! is `metadata_write` there). With the locks a job holds, nobody changes what it reads after
//! they were granted; what it must see are the writes acknowledged before, which every copy
//! a node shown current routes to has.

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
    /// The node a request must go to ([`NodePool::pinned`]).
    static PINNED: usize;
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
    /// How many writes this process has seen carried out.
    writes: AtomicU64,
    /// The node shown current ([`NodePool::set_reader`]); [`NO_WRITER`] until one is.
    reader: AtomicUsize,
    /// `writes` when the reader was shown current: 0 before it ever was.
    verified: AtomicU64,
    /// Whether reads are checked at all: a single node, or a server that will not say its
    /// cluster state's version, is not.
    checking: AtomicBool,
    /// One check at a time: the reads that wait for one take its result.
    verifying: tokio::sync::Mutex<()>,
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
                writes: AtomicU64::new(0),
                reader: AtomicUsize::new(NO_WRITER),
                verified: AtomicU64::new(0),
                checking: AtomicBool::new(true),
                verifying: tokio::sync::Mutex::new(()),
            }),
        }
        .checked_if_a_cluster()
    }

    /// A single node is never cut off from itself: its reads are not checked.
    fn checked_if_a_cluster(self) -> NodePool {
        if self.inner.nodes.len() < 2 {
            self.inner.checking.store(false, Ordering::Relaxed);
        }
        self
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

    /// Sends the request `request` makes to node `node` (a position in the pool), whatever
    /// its state: the checks of `verified.rs`.
    pub(crate) async fn pinned<F: std::future::Future>(node: usize, request: F) -> F::Output {
        PINNED.scope(node, request).await
    }

    /// Notes that the node of `url` carried out a write: it was in the cluster then, or
    /// believed so; the reads after it wait for a node shown current.
    pub(crate) fn mark_wrote(&self, url: &Url) {
        if let Some(i) = self.position_of(url) {
            self.inner.writer.store(i, Ordering::Relaxed);
            self.inner.writes.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The node that last carried out a write, if it is up.
    fn writer_if_up(&self, now: u64) -> Option<&Node> {
        self.up(self.inner.writer.load(Ordering::Relaxed), now)
    }

    /// Node `i`, if there is one and it is up.
    fn up(&self, i: usize, now: u64) -> Option<&Node> {
        let node = self.inner.nodes.get(i)?;
        (node.down_until.load(Ordering::Relaxed) <= now).then_some(node)
    }

    /// If reads must wait for a node to be shown current: the count of writes it must be
    /// shown current after. None while the reader shown current after the last write is up,
    /// or where reads are not checked.
    pub(crate) fn verification_needed(&self) -> Option<u64> {
        let inner = &self.inner;
        if !inner.checking.load(Ordering::Relaxed) {
            return None;
        }
        let writes = inner.writes.load(Ordering::SeqCst);
        let shown = inner.verified.load(Ordering::SeqCst);
        let reader_up = self
            .up(inner.reader.load(Ordering::SeqCst), self.now_ms())
            .is_some();
        // Before any write, there is nothing of this process's to see; others' writes are
        // seen through locks, which are writes.
        (writes > 0 && (shown < writes || !reader_up)).then_some(writes)
    }

    /// Waits for the check under way, if any: the caller checks again after it.
    pub(crate) async fn one_check_at_a_time(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.inner.verifying.lock().await
    }

    /// The nodes to try to show current, best first: the last writer, then the others that
    /// are up, in turn; every node if none is up.
    pub(crate) fn candidates(&self) -> Vec<usize> {
        let now = self.now_ms();
        let n = self.inner.nodes.len();
        let writer = self.inner.writer.load(Ordering::Relaxed);
        let start = self.inner.turn.fetch_add(1, Ordering::Relaxed);
        let mut order: Vec<usize> = (0..n).map(|i| (start + i) % n).collect();
        order.sort_by_key(|&i| i != writer);
        let up: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| self.up(i, now).is_some())
            .collect();
        if up.is_empty() {
            order
        } else {
            up
        }
    }

    /// Node `node` was shown current after `writes` writes: reads go to it.
    pub(crate) fn set_reader(&self, node: usize, writes: u64) {
        self.inner.reader.store(node, Ordering::SeqCst);
        self.inner.verified.fetch_max(writes, Ordering::SeqCst);
    }

    /// Reads are no longer checked (the server will not say its cluster state's version).
    pub(crate) fn stop_checking(&self) {
        self.inner.checking.store(false, Ordering::Relaxed);
    }

    /// The origin of node `node`, for a message.
    pub(crate) fn origin(&self, node: usize) -> &str {
        self.inner
            .nodes
            .get(node)
            .map_or("(no such node)", |n| n.origin.as_str())
    }

    /// Skips node `node` for a while (see [`NodePool::mark_down`]).
    pub(crate) fn mark_node_down(&self, node: usize) {
        if let Some(n) = self.inner.nodes.get(node) {
            let url = n.connection.url();
            self.mark_down(&url);
        }
    }

    /// Skips the node of `url` for a while: it refused or dropped a connection, or answered
    /// that it cannot serve.
    pub(crate) fn mark_down(&self, url: &Url) {
        let Some(i) = self.position_of(url) else {
            return;
        };
        let node = &self.inner.nodes[i];
        // No longer the reads' node: once its pause runs out it may still be cut off, and it
        // is theirs again only when it carries out a write, or is shown current.
        for role in [&self.inner.writer, &self.inner.reader] {
            let _ = role.compare_exchange(i, NO_WRITER, Ordering::SeqCst, Ordering::SeqCst);
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
        if let Ok(Some(node)) = PINNED.try_with(|&i| nodes.get(i)) {
            return node.connection.clone();
        }
        if READING.try_with(|()| ()).is_ok() {
            // The node shown current, else (reads not checked) the last writer.
            let reader = if self.inner.checking.load(Ordering::Relaxed) {
                self.up(self.inner.reader.load(Ordering::SeqCst), now)
            } else {
                None
            };
            if let Some(node) = reader.or_else(|| self.writer_if_up(now)) {
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

    #[tokio::test]
    async fn after_a_write_reads_wait_for_a_node_shown_current_and_then_go_to_it() {
        let pool = NodePool::new(url(1), vec![url(2), url(3)]);
        let read = || async { port_of(&pool.next()) };
        // Nothing written yet: nothing to check.
        assert_eq!(pool.verification_needed(), None);
        pool.mark_wrote(&url(3));
        assert_eq!(pool.verification_needed(), Some(1));
        // The last writer is tried first.
        assert_eq!(pool.candidates()[0], 2);
        // Node 1 (port 2) shown current: the reads go there, not to the writer.
        pool.set_reader(1, 1);
        assert_eq!(pool.verification_needed(), None);
        for _ in 0..3 {
            assert_eq!(NodePool::reading(read()).await, 2);
        }
        // A request pinned to a node goes there, reading or not.
        assert_eq!(NodePool::pinned(2, read()).await, 3);
        assert_eq!(NodePool::reading(NodePool::pinned(0, read())).await, 1);
        // Another write: the next read waits for a check again.
        pool.mark_wrote(&url(1));
        assert_eq!(pool.verification_needed(), Some(2));
        pool.set_reader(1, 2);
        assert_eq!(pool.verification_needed(), None);
        // The reader marked down: checked again, and it is not a candidate while down.
        pool.mark_node_down(1);
        assert_eq!(pool.verification_needed(), Some(2));
        assert!(!pool.candidates().contains(&1));
        // Reads not checked (the server will not say): never needed.
        pool.stop_checking();
        assert_eq!(pool.verification_needed(), None);
        // A single node is never checked.
        let single = NodePool::new(url(1), Vec::new());
        single.mark_wrote(&url(1));
        assert_eq!(single.verification_needed(), None);
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
