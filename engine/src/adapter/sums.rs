//! `SHA256SUMS` of an adapter directory: the listing of its two files in `sha256sum` format, which
//! identifies the adapter (its SHA-256 is the adapter's digest) and, when the directory has the file,
//! is checked at load.

use std::collections::HashMap;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{AdapterProblem, CONFIG_FILE, SUMS_FILE, WEIGHTS_FILE};
use crate::error::{EngineError, Result};
use crate::fetch::manifest::hash_file;

/// SHA-256 of the directory's `SHA256SUMS` listing of its two files (as `sha256sum` prints it),
/// checked against the `SHA256SUMS` file when there is one.
pub(super) fn identity(dir: &Path) -> Result<String> {
    let listing = sums_listing(dir)?;
    if let Ok(stored) = std::fs::read_to_string(dir.join(SUMS_FILE)) {
        let want = parse_sums(&stored);
        for line in listing.lines() {
            let (sum, file) = line.split_once("  ").unwrap_or((line, ""));
            if want.get(file) != Some(&sum) {
                return Err(EngineError::Adapter {
                    dir: dir.to_path_buf(),
                    problem: AdapterProblem::Checksum(file.into()),
                });
            }
        }
    }
    Ok(hex::encode(Sha256::digest(listing.as_bytes())))
}

/// `"<sha256>  <file>\n"` for the config and the weights, in that (sorted) order.
pub fn sums_listing(dir: &Path) -> Result<String> {
    let mut listing = String::new();
    for file in [CONFIG_FILE, WEIGHTS_FILE] {
        let entry = hash_file(&dir.join(file), &mut |_| {})?;
        listing.push_str(&format!("{}  {file}\n", entry.sha256));
    }
    Ok(listing)
}

/// File name → hex digest of a `sha256sum` listing (a `*` binary marker is dropped).
pub fn parse_sums(text: &str) -> HashMap<&str, &str> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(sum, file)| (file.trim_start().trim_start_matches('*'), sum))
        .collect()
}
