//! Loading docqa's kernel modules: the ahead-of-time `sm_90a` cubins when the device is compute
//! capability 9.0 and the files are present, NVRTC from the embedded sources otherwise.
//!
//! Cubins are looked up in `$DOCQA_CUBIN_DIR`, else in `cubins/` beside the executable.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::{CompileOptions, Ptx};
use docqa_kernels::{KernelSource, SOURCES};

use super::device::{cuda_err, nvrtc_present};
use crate::error::{EngineError, Result};

/// Every kernel of every module, by name, and where their code came from.
pub struct Kernels {
    functions: HashMap<&'static str, CudaFunction>,
    /// How the modules were loaded, for logs: e.g. `cubin sm_90a (5 modules)`.
    pub origin: String,
}

/// The architecture suffix of prebuilt cubins for this compute capability, if any are built for it.
fn cubin_arch(cc: (i32, i32)) -> Option<&'static str> {
    (cc == (9, 0)).then_some("90a")
}

/// The folder holding prebuilt cubins.
fn cubin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCQA_CUBIN_DIR") {
        return Some(dir.into());
    }
    Some(std::env::current_exe().ok()?.parent()?.join("cubins"))
}

/// The prebuilt cubin of `m`, when there is one for this device.
fn read_cubin(m: &KernelSource, cc: (i32, i32)) -> Option<Vec<u8>> {
    let path = cubin_dir()?.join(m.cubin_file(cubin_arch(cc)?));
    std::fs::read(path).ok()
}

/// The virtual architecture NVRTC compiles for. Compute capability 9.0 takes the
/// architecture-specific target, as the cubins are built: the Hopper kernels' warpgroup MMAs exist
/// only there.
fn nvrtc_arch(cc: (i32, i32)) -> String {
    let suffix = if cc == (9, 0) { "a" } else { "" };
    format!("compute_{}{}{suffix}", cc.0, cc.1)
}

/// Compiles `m` with NVRTC for this device's virtual architecture.
fn compile(m: &KernelSource, cc: (i32, i32)) -> Result<Ptx> {
    if !nvrtc_present() {
        return Err(EngineError::NoCudaDevice(
            "no prebuilt cubins for this GPU and NVRTC (libnvrtc) is not installed".into(),
        ));
    }
    let arch: &'static str = Box::leak(nvrtc_arch(cc).into_boxed_str());
    let opts = CompileOptions {
        arch: Some(arch),
        name: Some(format!("{}.cu", m.name)),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(m.nvrtc_source(), opts)
        .map_err(|e| EngineError::Cuda(format!("NVRTC could not compile {}: {e:?}", m.name)))
}

impl Kernels {
    /// Loads every module into `ctx`.
    pub fn load(ctx: &Arc<CudaContext>, cc: (i32, i32)) -> Result<Self> {
        let mut functions = HashMap::new();
        let (mut cubins, mut compiled) = (0, 0);
        for m in SOURCES {
            let image = match read_cubin(m, cc) {
                Some(bytes) => {
                    cubins += 1;
                    Ptx::from_binary(bytes)
                }
                None => {
                    compiled += 1;
                    compile(m, cc)?
                }
            };
            let module = ctx.load_module(image).map_err(cuda_err)?;
            for &f in m.functions {
                functions.insert(f, module.load_function(f).map_err(cuda_err)?);
            }
        }
        let origin = match (cubins, compiled) {
            (c, 0) => format!("cubin sm_90a ({c} modules)"),
            (0, n) => format!("NVRTC {} ({n} modules)", nvrtc_arch(cc)),
            (c, n) => format!("{c} cubin + {n} NVRTC modules"),
        };
        Ok(Kernels { functions, origin })
    }

    /// The kernel named `name`.
    pub fn get(&self, name: &str) -> Result<&CudaFunction> {
        self.functions
            .get(name)
            .ok_or_else(|| EngineError::Internal(format!("no CUDA kernel named {name}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_targets_hopper_specifically_and_other_gpus_by_their_capability() {
        assert_eq!(nvrtc_arch((9, 0)), "compute_90a");
        assert_eq!(nvrtc_arch((8, 9)), "compute_89");
        assert_eq!(nvrtc_arch((10, 0)), "compute_100");
    }

    /// NVRTC is the fallback for GPUs without prebuilt cubins, so every module must compile with it
    /// too (no include path, no math.h macros). Skipped where NVRTC is not installed, unless
    /// `DOCQA_REQUIRE_NVRTC=1` (CI sets it).
    #[test]
    fn every_kernel_module_compiles_with_nvrtc() {
        if !nvrtc_present() {
            assert!(
                std::env::var_os("DOCQA_REQUIRE_NVRTC").is_none(),
                "DOCQA_REQUIRE_NVRTC is set but libnvrtc cannot be loaded"
            );
            eprintln!("skipped: NVRTC is not installed");
            return;
        }
        for m in SOURCES {
            for cc in [(8, 0), (9, 0)] {
                if let Err(e) = compile(m, cc) {
                    panic!("{e}");
                }
            }
        }
    }
}
