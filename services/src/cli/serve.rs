//! `docqa serve`: the HTTP service (see the `server` module).

use crate::config::ServeConfig;

/// Runs the server on actix's runtime until SIGINT or SIGTERM.
pub fn run(config: ServeConfig) -> anyhow::Result<()> {
    actix_web::rt::System::new().block_on(crate::server::run(config))
}
