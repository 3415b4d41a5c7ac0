//! Command-line parsing: the top-level [`Cli`] and its subcommands, each in its own file.
//!
//! To add a subcommand, add a file with an `Args` struct and a `run` function, and one variant to
//! [`Command`].

mod models;

use clap::{Parser, Subcommand};

/// docqa: question answering over long documents.
#[derive(Debug, Parser)]
#[command(name = "docqa", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Manage the local models (fetch, convert).
    Models(models::ModelsArgs),
}

impl Cli {
    /// Runs the chosen subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Models(args) => models::run(args),
        }
    }
}
