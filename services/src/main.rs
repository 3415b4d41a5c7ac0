//! The `docqa` command line (one subcommand per file under [`cli`]) and the service behind
//! `docqa serve`: [`server`] wires [`db`], [`indexes`] (kept in step with other replicas by [`follower`]),
//! [`ingest`], [`qa`] and the HTTP [`api`].

mod adapter;
mod affinity;
mod api;
mod cli;
mod config;
mod db;
mod device;
mod embedder;
mod eval;
mod follower;
mod indexes;
mod ingest;
mod kv_tiers;
mod metrics;
mod qa;
mod server;
mod state;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    // SAFETY: no other thread has started yet.
    #[cfg(feature = "cuda")]
    unsafe {
        docqa_engine::parallel::nccl::keep_nvlink_multicast_off()
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,docqa_service=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    cli::Cli::parse().run()
}
