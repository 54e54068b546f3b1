//! `fsrename serve`: hands the options to the service and waits for it to stop.

use std::future::Future;

use crate::cli::{Cli, Verb};
use crate::output::to_stderr;
use crate::serve::{AuditTo, ServeConfig, Server};
use crate::EXIT_INTERRUPTED;

pub async fn run(
    cli: &Cli,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<u8> {
    let Verb::Serve {
        listen,
        max_jobs,
        queue,
        history,
        body_limit,
        grace,
        wait,
        strategy,
        recover_every,
        instance,
        // The default: passing it changes nothing.
        share_intentions: _,
        no_share_intentions,
        tokens,
        audit,
    } = &cli.verb
    else {
        anyhow::bail!("not the serve verb");
    };
    let mut config = ServeConfig::new(cli.index.clone());
    config.listen = *listen;
    config.token = ServeConfig::token_from_env();
    config.max_jobs = *max_jobs;
    config.queue = *queue;
    config.history = *history;
    config.body_limit = *body_limit;
    config.grace = *grace;
    config.wait = *wait;
    config.strategy = *strategy;
    config.recover_every = (!recover_every.is_zero()).then_some(*recover_every);
    config.lease = cli.lease;
    if let Some(name) = instance {
        config.instance.clone_from(name);
    }
    config.protocol = cli.lock_protocol;
    config.share_intentions = !*no_share_intentions;
    config.tokens.clone_from(tokens);
    config.audit = match audit {
        Some(file) => AuditTo::File(file.clone()),
        None => AuditTo::Stderr,
    };
    config.rewrite = cli.rewrite;
    config.layout = cli.layout()?;
    config.validate()?;
    let store = cli.store.open_for_service(&cli.store_options())?;
    let server = Server::start(config, store, shutdown).await?;
    // On standard error, which may be closed or lose its reader: the service goes on serving.
    to_stderr(format_args!(
        "fsrename: serving on http://{} (store {}, instance {})",
        server.addr(),
        cli.store,
        server.instance()
    ));
    server.wait().await?;
    to_stderr("fsrename: stopped");
    // The service ends only when told to (Ctrl-C, SIGTERM): 130, as every verb so stopped
    // (a systemd unit says `SuccessExitStatus=130`).
    Ok(EXIT_INTERRUPTED)
}
