//! Converts a llama GGUF file into an HF-style model directory.
//!
//! Usage: `cargo run --release -p docqa-engine --example gguf_to_hf -- MODEL.gguf OUT_DIR`

use std::path::PathBuf;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let (Some(gguf), Some(out)) = (args.next(), args.next()) else {
        return Err("usage: gguf_to_hf MODEL.gguf OUT_DIR".into());
    };
    let start = Instant::now();
    docqa_engine::convert::convert_gguf_to_hf(&PathBuf::from(gguf), &PathBuf::from(&out))?;
    println!("converted into {} in {:.2?}", PathBuf::from(out).display(), start.elapsed());
    Ok(())
}
