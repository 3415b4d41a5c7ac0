//! docqa-kernels: the CUDA sources of docqa's GPU backend and the registry that names them.
//!
//! The `.cu`/`.cuh` files live in `kernels/cuda/`, one op family per file, with `extern "C"` entry
//! points named `<op>_<dtype>[_<variant>]`. This crate exposes them as embedded source text so the
//! engine can compile them at run time with NVRTC, or load the cubins that `kernels/build-cubins.sh`
//! builds ahead of time for `sm_90a` (file `<module>.sm_90a.cubin`).
//!
//! The modules include only the headers of [`HEADERS`] (`common.cuh`, `hopper.cuh` for the
//! warpgroup-MMA kernels, `sm90_items.cuh` and `sm90_loads.cuh` for the Hopper prefill,
//! `step_attention.cuh` for the one-launch decode step); [`KernelSource::nvrtc_source`] pastes
//! them in, so NVRTC needs no include path.

/// A CUDA module known to docqa: its name, its source text and its entry points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSource {
    /// Module name, also the stem of its `.cu` file.
    pub name: &'static str,
    /// The CUDA C++ source of the module.
    pub source: &'static str,
    /// Its `extern "C"` kernels.
    pub functions: &'static [&'static str],
}

/// The headers the modules include, by file name: `common.cuh` (every module), `hopper.cuh` (the
/// warpgroup-MMA primitives, after `common.cuh`), and `sm90_items.cuh` and `sm90_loads.cuh` (the
/// Hopper prefill kernel's work items and its producer's loads, after `hopper.cuh`), and
/// `step_attention.cuh` (the one-launch decode step's attention phase, inside `decode_step.cu`).
/// None includes another.
pub const HEADERS: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../cuda/common.cuh")),
    ("hopper.cuh", include_str!("../cuda/hopper.cuh")),
    ("sm90_items.cuh", include_str!("../cuda/sm90_items.cuh")),
    ("sm90_loads.cuh", include_str!("../cuda/sm90_loads.cuh")),
    (
        "step_attention.cuh",
        include_str!("../cuda/step_attention.cuh"),
    ),
];

impl KernelSource {
    /// The source with each header pasted in place of its `#include`, ready for NVRTC.
    pub fn nvrtc_source(&self) -> String {
        HEADERS
            .iter()
            .fold(self.source.to_owned(), |source, (name, text)| {
                source.replacen(&format!("#include \"{name}\""), text, 1)
            })
    }

    /// File name of the module's ahead-of-time cubin for `sm_<arch>` (e.g. `"90a"`).
    pub fn cubin_file(&self, arch: &str) -> String {
        format!("{}.sm_{arch}.cubin", self.name)
    }
}

/// Every CUDA module docqa ships.
pub const SOURCES: &[KernelSource] = &[
    KernelSource {
        name: "elementwise",
        source: include_str!("../cuda/elementwise.cu"),
        functions: &[
            "silu_mul_f32",
            "silu_mul_of_bf16",
            "gelu_f32",
            "add_f32",
            "bias_add_f32",
            "cast_f32_bf16",
            "embedding_f32",
            "embedding_bf16",
            "gather_rows_f32",
        ],
    },
    KernelSource {
        name: "norm",
        source: include_str!("../cuda/norm.cu"),
        functions: &["rms_norm_f32", "rms_norm_bf16", "layer_norm_f32"],
    },
    KernelSource {
        name: "rope",
        source: include_str!("../cuda/rope.cu"),
        functions: &["rope_table_f32", "rope_f32"],
    },
    KernelSource {
        name: "kv",
        source: include_str!("../cuda/kv.cu"),
        functions: &[
            "kv_write_f32",
            "kv_write_bf16",
            "kv_write_int8",
            "rope_kv_write_f32",
            "rope_kv_write_bf16",
            "rope_kv_write_int8",
            "rope_kv_write_bf16io",
            "rope_kv_write_int8_bf16io",
            "kv_blocks_gather",
            "kv_blocks_scatter",
            "kv_blocks_scatter_mapped",
            "kv_blocks_gather_mapped",
        ],
    },
    KernelSource {
        name: "attention",
        source: include_str!("../cuda/attention.cu"),
        functions: &[
            "paged_attention_f32",
            "paged_attention_bf16",
            "paged_attention_windowed_f32",
            "paged_attention_windowed_bf16",
            "paged_attention_int8",
            "paged_attention_windowed_int8",
            "varlen_attention_f32",
        ],
    },
    KernelSource {
        name: "flash_prefill",
        source: include_str!("../cuda/flash_prefill.cu"),
        functions: &[
            "flash_prefill_bf16_hd64",
            "flash_prefill_bf16_hd128",
            "flash_prefill_int8_hd64",
            "flash_prefill_int8_hd128",
            "flash_prefill_windowed_bf16_hd64",
            "flash_prefill_windowed_bf16_hd128",
            "flash_prefill_windowed_int8_hd64",
            "flash_prefill_windowed_int8_hd128",
            "flash_prefill_bidir_bf16_hd64",
            "flash_prefill_bidir_bf16_hd128",
            "flash_prefill_merge",
        ],
    },
    KernelSource {
        name: "flash_prefill_sm90",
        source: include_str!("../cuda/flash_prefill_sm90.cu"),
        functions: &[
            "flash_prefill_sm90_bf16_hd64",
            "flash_prefill_sm90_bf16_hd128",
            "flash_prefill_sm90_int8_hd64",
            "flash_prefill_sm90_int8_hd128",
            "flash_prefill_sm90_tma_bf16_hd64",
            "flash_prefill_sm90_tma_bf16_hd128",
            "flash_prefill_sm90_bf16_hd64_bf16io",
            "flash_prefill_sm90_bf16_hd128_bf16io",
            "flash_prefill_sm90_tma_bf16_hd64_bf16io",
            "flash_prefill_sm90_tma_bf16_hd128_bf16io",
            "flash_prefill_sm90_int8_hd64_bf16io",
            "flash_prefill_sm90_int8_hd128_bf16io",
        ],
    },
    KernelSource {
        name: "flash_decode",
        source: include_str!("../cuda/flash_decode.cu"),
        functions: &[
            "flash_decode_bf16_hd64",
            "flash_decode_bf16_hd128",
            "flash_decode_int8_hd64",
            "flash_decode_int8_hd128",
            "flash_decode_windowed_bf16_hd64",
            "flash_decode_windowed_bf16_hd128",
            "flash_decode_windowed_int8_hd64",
            "flash_decode_windowed_int8_hd128",
            "flash_decode_reduce",
        ],
    },
    KernelSource {
        name: "gemv",
        source: include_str!("../cuda/gemv.cu"),
        functions: &[
            "gemv_bf16_r1",
            "gemv3_bf16_r1",
            "gemv_silu_mul_bf16_r1",
            "gemv_bf16_r2",
            "gemv3_bf16_r2",
            "gemv_silu_mul_bf16_r2",
            "gemv_bf16_r4",
            "gemv3_bf16_r4",
            "gemv_silu_mul_bf16_r4",
            "gemv3_rope_kv_bf16_r1",
            "gemv3_rope_kv_bf16_r2",
            "gemv3_rope_kv_bf16_r4",
            "gemv3_rope_kv_f32_r1",
            "gemv3_rope_kv_f32_r2",
            "gemv3_rope_kv_f32_r4",
        ],
    },
    KernelSource {
        name: "decode_step",
        source: include_str!("../cuda/decode_step.cu"),
        functions: &["decode_layers_bf16_hd64", "decode_layers_bf16_hd128"],
    },
    KernelSource {
        name: "sample",
        source: include_str!("../cuda/sample.cu"),
        functions: &["argmax_rows_f32", "sample_rows_f32"],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the parenthesis closing the one opened just before `text` is (bounds may be macro calls).
    fn closing_paren(text: &str) -> Option<usize> {
        let mut depth = 1;
        for (i, ch) in text.char_indices() {
            depth += match ch {
                '(' => 1,
                ')' => -1,
                _ => 0,
            };
            if depth == 0 {
                return Some(i);
            }
        }
        None
    }

    /// Names of the `extern "C" __global__ void [__launch_bounds__(..)] NAME(` kernels of a source.
    fn kernel_names(source: &str) -> Vec<&str> {
        let decl = "extern \"C\" __global__ void ";
        source
            .match_indices(decl)
            .map(|(i, _)| {
                let rest = source[i + decl.len()..].trim_start();
                let rest = match rest.strip_prefix("__launch_bounds__(") {
                    Some(r) => r[closing_paren(r).map_or(0, |p| p + 1)..].trim_start(),
                    None => rest,
                };
                rest.split('(').next().unwrap_or("").trim()
            })
            .collect()
    }

    #[test]
    fn every_registered_module_has_a_unique_name() {
        let mut names: Vec<_> = SOURCES.iter().map(|s| s.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }

    #[test]
    fn every_listed_function_is_an_extern_c_kernel_of_its_module() {
        for m in SOURCES {
            let declared = kernel_names(m.source);
            for f in m.functions {
                assert!(declared.contains(f), "{} lacks {f}", m.name);
            }
            let count = m.source.matches("extern \"C\" __global__").count();
            assert_eq!(count, m.functions.len(), "{} lists every kernel", m.name);
        }
    }

    #[test]
    fn nvrtc_source_needs_no_include_path() {
        for m in SOURCES {
            assert!(!m.nvrtc_source().contains("#include"), "{}", m.name);
        }
    }

    /// The names of the files in `kernels/cuda/` ending in `suffix`, without it, sorted.
    fn cuda_files(suffix: &str) -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cuda");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("kernels/cuda exists")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(suffix).map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn every_cuh_file_is_a_header_the_modules_may_include() {
        let mut known: Vec<String> = HEADERS
            .iter()
            .map(|(n, _)| n.trim_end_matches(".cuh").to_owned())
            .collect();
        known.sort();
        assert_eq!(cuda_files(".cuh"), known);
    }

    #[test]
    fn every_cu_file_is_registered() {
        let mut registered: Vec<String> = SOURCES.iter().map(|s| s.name.to_owned()).collect();
        registered.sort();
        assert_eq!(cuda_files(".cu"), registered);
    }
}
