//! `fsrename serve`: rename jobs over HTTP.
//!
//! Clients submit renames (`POST /renames`); the service runs them under tree locks, a
//! bounded number at a time, and reports their progress (`GET /renames/{id}`). Jobs on
//! disjoint subtrees run side by side. On SIGINT/SIGTERM it stops accepting, lets running
//! jobs finish within a grace period, cancels the rest (they release their locks, or, past
//! their first rewrite, leave them with their journal entry for recovery), and exits.
//! Recovery (`fs_rename::Recovery`) runs at start and every `recover_every`.
//!
//! A live page (`page.rs`, at `/`) shows the tree, its locks and the jobs, fed by one event
//! stream (`events.rs`, `GET /events`) that every open page shares. A browser on another site
//! cannot post to the service (`middleware::same_origin`).
//!
//! `GET /openapi.json` (`openapi.rs`) describes every route: the router and the description
//! are built from the same handlers.
//!
//! Several instances may serve one store (behind a load balancer): they share the jobs
//! index (`records.rs`), so that any of them answers for any job, and each takes over the
//! jobs of an instance that died (`adopt.rs`).

mod adopt;
mod api;
mod audit;
mod bodies;
mod config;
mod error;
mod events;
mod grants;
mod guesses;
mod jobs;
mod liveness;
mod metrics;
mod middleware;
mod openapi;
mod page;
mod records;
mod recovered;
mod tokens;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::extract::DefaultBodyLimit;
use fs_rename::FsTree;
use fs_store::SharedStore;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use audit::AuditTo;
pub use config::ServeConfig;
pub use events::Story;
pub use grants::{Caller, Capability, Grant};
use jobs::Jobs;
pub use tokens::TokenSet;

/// A running service.
pub struct Server {
    addr: SocketAddr,
    instance: String,
    story: Story,
    done: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Server {
    /// Binds, prepares the indices and starts serving until `shutdown` resolves.
    ///
    /// # Errors
    /// An invalid configuration, a port in use, an unreachable store.
    pub async fn start(
        config: ServeConfig,
        store: SharedStore,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<Server> {
        config.validate()?;
        // Many jobs at once each take and give back their locks in a bulk request of a few
        // items, and write and close a journal entry: sent together (a group commit), the
        // server does a request's work once for all of them.
        let store: SharedStore = Arc::new(fs_store::GroupCommit::new(
            store,
            [
                fs_model::lock_index_name(&config.index),
                fs_model::journal_index_name(&config.index),
            ],
        ));
        // Before the first heartbeat: instances judge each other's by the server's clock.
        fs_locks::LeaseClock::sync(store.as_ref()).await;
        let tree = FsTree::new(Arc::clone(&store), config.index.clone()).with_layout(config.layout);
        tree.ensure_indices().await.with_context(|| {
            format!("preparing index `{}` in {}", config.index, store.describe())
        })?;
        if config.share_intentions {
            // Before any hold is taken: an older recoverer must stop at the marker rather
            // than clear a hold unfenced (`fs_rename::Journal::declare_protocol`).
            fs_rename::Journal::new(Arc::clone(&store), &config.index)
                .declare_protocol()
                .await
                .with_context(|| {
                    format!(
                        "marking `{}` in {} as kept by fsrename protocol {}",
                        config.index,
                        store.describe(),
                        fs_rename::PROTOCOL
                    )
                })?;
        }
        let recovery = fs_rename::Recovery::new(Arc::clone(&store), config.index.clone())
            .lease(config.lease)
            .wait(config.wait);
        recover_once(&recovery).await;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let addr = listener.local_addr()?;
        let keys = tokens::Keys::load(config.token_source())?;
        let audit = audit::Audit::open(config.audit.clone())?;
        let body_limit = config.body_limit;
        // Stopped between runs, never in the middle of one.
        let (stop_recovery, stopped) = tokio::sync::watch::channel(false);
        let recoverer = config
            .recover_every
            .map(|every| tokio::spawn(recover_every(recovery, every, stopped)));
        let instance = config.instance.clone();
        let jobs = Jobs::new(store, config);
        let layout = jobs.config().layout;
        jobs.records()
            .ensure_index(&layout)
            .await
            .with_context(|| {
                format!(
                    "preparing the jobs index of `{}` in {}",
                    jobs.config().index,
                    jobs.store().describe()
                )
            })?;
        // Stopped after the last job ended: the heartbeat covers every job to its end.
        let (stop_beating, beating) = tokio::sync::watch::channel(false);
        let heart = tokio::spawn(adopt::run(jobs.clone(), addr, beating));
        // The event streams end as shutdown begins: the graceful shutdown waits for every
        // connection to close.
        let (stop_feed, feed_stopped) = tokio::sync::watch::channel(false);
        let reloader = tokio::spawn(reload_on_hangup(
            keys.clone(),
            audit.clone(),
            feed_stopped.clone(),
        ));
        let feed = events::Feed::start(jobs.clone(), feed_stopped);
        let shutdown = async move {
            shutdown.await;
            stop_feed.send_replace(true);
        };
        let story = feed.story();
        let auth = middleware::Auth {
            keys,
            guesses: Arc::default(),
        };
        let app = guarded(
            api::routes(jobs.clone(), feed, audit.clone()),
            (auth, audit),
            body_limit,
            addr,
        );
        tracing::info!(%addr, instance = %jobs.instance(), "serving");
        let done = tokio::spawn(async move {
            // With each client's address: the token's guesses are counted by address.
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
                .context("serving")?;
            tracing::info!("no longer accepting requests; finishing the running jobs");
            stop_recovery.send_replace(true);
            if let Some(recoverer) = recoverer {
                let _ = recoverer.await;
            }
            jobs.shut_down().await;
            stop_beating.send_replace(true);
            let _ = heart.await;
            let _ = reloader.await;
            Ok(())
        });
        Ok(Server {
            addr,
            instance,
            story,
            done,
        })
    }

    /// Returns the address it listens on (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Returns this instance's name.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Returns the story the live page tells beside the locks (`fsrename demo --serve`).
    pub fn story(&self) -> &Story {
        &self.story
    }

    /// Waits until the service has shut down.
    ///
    /// # Errors
    /// If serving failed.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.done.await.context("the server task")?
    }
}

/// Runs recovery once; its failures are logged, not fatal: the next run tries again.
/// Runs recovery every `every` until `stopped` changes: between runs, never in the middle of one.
async fn recover_every(
    recovery: fs_rename::Recovery,
    every: std::time::Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => recover_once(&recovery).await,
            _ = stopped.changed() => return,
        }
    }
}

/// The routes behind the service's guards, outermost last: the request log, the loopback
/// `Host` check (only when listening on loopback), the same-origin check, the bearer token
/// (with `/session`, which trades it for a cookie) and the body limit. Adds `/session` and
/// `/openapi.json`, which describes them all, and answers a path no route serves (404) or a
/// method a route does not take (405) in JSON, as every other error.
fn guarded(
    routes: OpenApiRouter,
    (auth, audit): (middleware::Auth, audit::Audit),
    body_limit: usize,
    addr: SocketAddr,
) -> axum::Router {
    let description = openapi::Description::default();
    let session = OpenApiRouter::new()
        .routes(routes!(middleware::session))
        .with_state(auth.clone());
    let (router, api) = routes
        .merge(session)
        .merge(openapi::routes(description.clone()))
        .split_for_parts();
    description.publish(api);
    router
        // After every route: the 405s are set route by route.
        .method_not_allowed_fallback(error::wrong_method)
        .fallback(error::no_route)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            auth,
            middleware::authenticate,
        ))
        .layer(axum::middleware::from_fn(middleware::same_origin))
        .layer(axum::middleware::from_fn_with_state(
            addr.ip().is_loopback(),
            middleware::loopback_host,
        ))
        .layer(axum::middleware::from_fn_with_state(audit, audit::layer))
        .layer(axum::middleware::from_fn(middleware::request_log))
}

/// Reads the token file again and reopens the audit file on every SIGHUP, until `closing`
/// turns true. A token file refused leaves the tokens in force; the error is logged.
async fn reload_on_hangup(
    keys: tokens::Keys,
    audit: audit::Audit,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP: the token file is read at start only");
            return;
        };
        loop {
            tokio::select! {
                got = hangups.recv() => {
                    if got.is_none() {
                        return;
                    }
                }
                _ = closing.wait_for(|closing| *closing) => return,
            }
            match keys.reload() {
                Ok(n) => tracing::warn!(tokens = n, "SIGHUP: the token file read again"),
                Err(e) => tracing::error!(
                    error = %format!("{e:#}"),
                    "SIGHUP: the token file is refused; the tokens in force stay as they were"
                ),
            }
            if let Err(e) = audit.reopen() {
                tracing::error!(error = %format!("{e:#}"), "SIGHUP: the audit file cannot be reopened; lines go on to the old one");
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (keys, audit);
        let _ = closing.wait_for(|closing| *closing).await;
    }
}

/// One run of recovery; its outcome is logged, never fatal: the next run tries again.
async fn recover_once(recovery: &fs_rename::Recovery) {
    match recovery.run().await {
        Ok(report) if report.is_idle() => tracing::debug!("recovery: nothing to do"),
        Ok(report) => tracing::info!(%report, "recovery"),
        Err(e) => tracing::warn!(error = %e, "recovery failed; will retry"),
    }
}
