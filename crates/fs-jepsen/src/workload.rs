//! The workload: the start tree made, C clients (command-line processes and jobs of the
//! service) making random calls while the nemesis strikes, every call recorded, then the end:
//! recovery, the tree read, leftovers looked for. What comes out is a [`Run`]: a history for
//! the checker, and what was left behind.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::join_all;

use crate::cli_client::Fsrename;
use crate::clock::Clock;
use crate::finish;
use crate::gauges::{self, Sample};
use crate::generate::{Generator, Menu, START_TREE};
use crate::history::{Call, FaultKind, History, Kind, Op, Outcome, Via};
use crate::nemesis::{Nemesis, Plan, Stage};
use crate::processes::Running;
use crate::service::Services;

/// What one history does.
#[derive(Debug, Clone)]
pub struct Workload {
    /// How to run `fsrename` on the store (an empty tree index).
    pub fsrename: Fsrename,
    /// Clients that run each call as a `fsrename` process.
    pub cli_clients: usize,
    /// Clients that make each call a job of the service.
    pub service_clients: usize,
    /// Service instances (`fsrename serve`), if there are service clients.
    pub services: usize,
    /// Calls made at least (the clients go on until the nemesis has made its faults too).
    pub calls: usize,
    /// The seed of the operations, the think times and the nemesis.
    pub seed: u64,
    /// The longest pause of a client between two calls.
    pub think: Duration,
    /// How long a client waits for a call before it takes its outcome as unknown.
    pub call_deadline: Duration,
    /// The longest a history runs (its clients stop then, faults made or not).
    pub limit: Duration,
    /// An Elasticsearch node to ask for by-query tasks and search contexts at the end.
    pub es: Option<String>,
    /// How long search contexts of killed clients may take to go: their keep-alive (1 min),
    /// and then the server's reaper, which runs every `search.keep_alive_interval` (1 min on
    /// Elasticsearch): up to two minutes.
    pub contexts_patience: Duration,
    /// How often the gauges (instances' memory, open contexts, the lock index) are read
    /// while the clients run; `None`: only at the start and the end.
    pub gauge_every: Option<Duration>,
}

/// A history and what its end found.
#[derive(Debug, Clone)]
pub struct Run {
    /// The history, for the checker.
    pub history: History,
    /// What was left behind that must not be (empty when all is well).
    pub leftovers: Vec<String>,
    /// The service instances' last log lines.
    pub service_log: String,
    /// How long the history took, end included.
    pub took: Duration,
    /// The gauges at the start, while the clients ran, and at the end.
    pub samples: Vec<Sample>,
}

impl Workload {
    /// Makes the start tree with `mkdir` and `touch`.
    async fn make_start(&self) -> Result<(), String> {
        for (path, kind) in START_TREE {
            let verb = if kind == Kind::Dir { "mkdir" } else { "touch" };
            let (code, _, err) = finish::run(&self.fsrename, &[verb, path]).await?;
            if code != 0 {
                return Err(format!("{verb} {path} exited {code}: {err}"));
            }
        }
        Ok(())
    }

    /// The gauges now, `since` the history's start.
    async fn gauges(
        &self,
        since: Instant,
        moment: &'static str,
        services: Option<&Services>,
    ) -> Sample {
        let global = &self.fsrename.global;
        let index = global
            .iter()
            .position(|a| a == "--index")
            .and_then(|i| global.get(i + 1))
            .map_or("fs", String::as_str);
        gauges::read(
            since.elapsed(),
            moment,
            services.map(Services::instances).unwrap_or_default(),
            self.es.as_deref(),
            index,
        )
        .await
    }

    /// Runs one history on `stage` with the nemesis' `plan`.
    ///
    /// # Errors
    /// What kept the history from being made or read (not what the checker finds).
    pub async fn run(&self, stage: Stage<'_>, plan: Plan) -> Result<Run, String> {
        let since = Instant::now();
        if plan
            .kinds
            .iter()
            .any(|k| matches!(k, FaultKind::ClockSkew | FaultKind::ClockJump))
        {
            let file = std::env::temp_dir().join(format!(
                "fsrename-jepsen-clock-{}-{}",
                std::process::id(),
                self.seed
            ));
            self.fsrename.clocks.enable(&file)?;
        }
        self.make_start().await?;
        let start = finish::read_tree(&self.fsrename).await?;
        let services = if self.service_clients > 0 && self.services > 0 {
            Some(Services::start(&self.fsrename, self.services).await?)
        } else {
            None
        };
        let mut samples = vec![self.gauges(since, "start", services.as_ref()).await];
        let clock = Clock::start();
        let generator = Generator::new(self.seed, &start);
        let running = Running::default();
        let calls = Mutex::new(Vec::<Call>::new());
        let made = AtomicUsize::new(0);
        let healed = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let min_faults = plan.min_faults;
        let nemesis = Nemesis {
            stage,
            plan,
            running: &running,
            services: services.as_ref(),
            clock,
            clocks: self.fsrename.clocks.clone(),
        };
        let go_on = || {
            since.elapsed() < self.limit
                && (made.load(Ordering::SeqCst) < self.calls
                    || healed.load(Ordering::SeqCst) < min_faults)
        };
        let record = |client: &str, via, op: Op, invoked, outcome: Outcome| {
            if outcome == Outcome::Ok {
                generator.acknowledged(&op);
            }
            let call = Call {
                client: client.to_owned(),
                via,
                op,
                invoked,
                completed: clock.now(),
                outcome,
            };
            if let Ok(mut calls) = calls.lock() {
                calls.push(call);
            }
        };
        let think = |generator: &Generator| {
            Duration::from_millis(
                generator.below(u64::try_from(self.think.as_millis()).unwrap_or(0) + 1),
            )
        };
        let cli = (0..self.cli_clients).map(|c| {
            let (generator, running, made) = (&generator, &running, &made);
            let (go_on, record) = (&go_on, &record);
            async move {
                let client = format!("cli-{c}");
                while go_on() {
                    made.fetch_add(1, Ordering::SeqCst);
                    let op = generator.next(Menu::All);
                    let invoked = clock.now();
                    let outcome = self
                        .fsrename
                        .call(&client, &op, running, self.call_deadline)
                        .await;
                    record(&client, Via::Cli, op, invoked, outcome);
                    tokio::time::sleep(think(generator)).await;
                }
            }
        });
        let svc = (0..self.service_clients).map(|c| {
            let (generator, services, made) = (&generator, services.as_ref(), &made);
            let (go_on, record) = (&go_on, &record);
            async move {
                let Some(services) = services else { return };
                let client = format!("svc-{c}");
                while go_on() {
                    made.fetch_add(1, Ordering::SeqCst);
                    let op = generator.next(Menu::Jobs);
                    let invoked = clock.now();
                    let outcome = services
                        .call(c % services.len(), &op, self.call_deadline)
                        .await;
                    record(&client, Via::Service, op, invoked, outcome);
                    tokio::time::sleep(think(generator)).await;
                }
            }
        });
        let clients = async {
            tokio::join!(join_all(cli), join_all(svc));
            stop.store(true, Ordering::SeqCst);
        };
        // Reads the gauges every `gauge_every` until the clients stop.
        let sampler = async {
            let mut taken = Vec::new();
            let Some(every) = self.gauge_every else {
                return taken;
            };
            let mut next = Instant::now() + every;
            while !stop.load(Ordering::SeqCst) {
                if Instant::now() >= next {
                    taken.push(self.gauges(since, "running", services.as_ref()).await);
                    next += every;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            taken
        };
        let ((), faults, taken) =
            tokio::join!(clients, nemesis.run(self.seed, &stop, &healed), sampler);
        samples.extend(taken);
        samples.push(self.gauges(since, "end", services.as_ref()).await);

        let service_log = services.as_ref().map(Services::log).unwrap_or_default();
        if let Some(services) = &services {
            services.stop().await;
        }
        let mut leftovers = Vec::new();
        if let Err(e) = finish::recover(&self.fsrename, Duration::from_secs(180)).await {
            leftovers.push(e);
        }
        samples.push(self.gauges(since, "recovered", None).await);
        let end = finish::read_tree(&self.fsrename).await?;
        leftovers.extend(
            finish::leftovers(&self.fsrename, self.es.as_deref(), self.contexts_patience).await?,
        );
        let mut calls = calls.into_inner().map_err(|e| e.to_string())?;
        calls.sort_by_key(|c| c.invoked);
        Ok(Run {
            history: History {
                start,
                calls,
                faults,
                end,
            },
            leftovers,
            service_log,
            took: since.elapsed(),
            samples,
        })
    }
}
