//! `docqa ingest-worker`: the child process in which `docqa serve` parses and chunks one upload
//! (see `ingest::sandbox`). It reads a request as JSON on standard input, limits its own memory,
//! and writes its reply as JSON on standard output. Hidden from the help: people never run it.

use std::io::Write;

use crate::ingest::sandbox::{WorkerRequest, limit_memory, work};

/// No arguments: the request comes on standard input.
#[derive(Debug, clap::Args)]
pub struct IngestWorkerArgs {}

/// Reads the request, sets the memory ceiling, does the work, writes the reply.
pub fn run(_args: IngestWorkerArgs) -> anyhow::Result<()> {
    let request: WorkerRequest = serde_json::from_reader(std::io::stdin().lock())?;
    limit_memory(request.memory_mib)?;
    let reply = work(&request);
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &reply)?;
    out.flush()?;
    Ok(())
}
