//! docqa-kernels: the CUDA sources of docqa's GPU backend and the registry that names them.
//!
//! The `.cu`/`.cuh` files live beside this crate, one op family per file, with `extern "C"` entry points
//! named `<op>_<dtype>[_<variant>]`. This crate exposes them as embedded source text so the engine can
//! compile them at run time with NVRTC, or load cubins built ahead of time for `sm_90a`.

/// A CUDA module known to docqa: its name and its source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSource {
    /// Module name, also the stem of its `.cu` file.
    pub name: &'static str,
    /// The CUDA C++ source of the module.
    pub source: &'static str,
}

/// Every CUDA module docqa ships. Empty until the CUDA backend lands.
pub const SOURCES: &[KernelSource] = &[];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_module_has_a_unique_name() {
        let mut names: Vec<_> = SOURCES.iter().map(|s| s.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }
}
