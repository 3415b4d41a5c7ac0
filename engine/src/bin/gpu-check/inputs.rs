//! Inputs for the checks: a seeded random source (fresh per run, seed printed), and a pair of
//! backends that receive the same data, with outputs poisoned by NaN before every op.

use cudarc::driver::CudaSlice;
use docqa_engine::Result;
use docqa_engine::backend::Backend;
use docqa_engine::backend::cpu::{CpuBackend, CpuWeight};
use docqa_engine::backend::cuda::{CudaBackend, CudaWeight};
use docqa_engine::weights::{TensorRef, WeightDtype};

pub use docqa_engine::test_rng::Rng;

/// Little-endian bytes of `values` stored as `dtype` (bf16 rounds to nearest even).
pub fn tensor_bytes(values: &[f32], dtype: WeightDtype) -> Vec<u8> {
    match dtype {
        WeightDtype::Bf16 => values
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// The CPU reference and the GPU under test.
pub struct Pair {
    /// The reference.
    pub cpu: CpuBackend,
    /// The backend under test.
    pub gpu: CudaBackend,
}

impl Pair {
    /// The same data on both backends.
    pub fn buf(&self, data: &[f32]) -> Result<(Vec<f32>, CudaSlice<f32>)> {
        let mut g = self.gpu.alloc(data.len())?;
        self.gpu.write(&mut g, data)?;
        Ok((data.to_vec(), g))
    }

    /// A NaN-filled output buffer of `len` elements on both backends.
    pub fn poisoned(&self, len: usize) -> Result<(Vec<f32>, CudaSlice<f32>)> {
        self.buf(&vec![f32::NAN; len])
    }

    /// The same indices on both backends.
    pub fn ids(&self, data: &[u32]) -> Result<(Vec<u32>, CudaSlice<u32>)> {
        let mut g = self.gpu.alloc_ids(data.len())?;
        self.gpu.write_ids(&mut g, data)?;
        Ok((data.to_vec(), g))
    }

    /// A matrix `[rows, cols]` of `values` stored as `dtype`, on both backends.
    pub fn matrix(
        &self,
        values: &[f32],
        shape: [usize; 2],
        dtype: WeightDtype,
    ) -> Result<(CpuWeight, CudaWeight)> {
        let bytes = tensor_bytes(values, dtype);
        let t = TensorRef {
            name: "check",
            dtype,
            shape: &shape,
            bytes: &bytes,
        };
        Ok((self.cpu.upload_matrix(&t)?, self.gpu.upload_matrix(&t)?))
    }

    /// A vector weight on both backends.
    pub fn vector(&self, values: &[f32]) -> Result<(CpuWeight, CudaWeight)> {
        let bytes = tensor_bytes(values, WeightDtype::F32);
        let shape = [values.len()];
        let t = TensorRef {
            name: "check",
            dtype: WeightDtype::F32,
            shape: &shape,
            bytes: &bytes,
        };
        Ok((self.cpu.upload_vector(&t)?, self.gpu.upload_vector(&t)?))
    }

    /// The first `n` elements of a GPU buffer.
    pub fn read(&self, g: &CudaSlice<f32>, n: usize) -> Result<Vec<f32>> {
        let mut v = vec![0.0; n];
        self.gpu.read(g, &mut v)?;
        Ok(v)
    }
}
