//! Tensors owned in memory rather than borrowed from a mapped file: a projection with a LoRA adapter
//! merged in, or the part of a tensor that one rank of a tensor-parallel group holds.

use std::ops::Range;

use super::{TensorRef, WeightDtype};

/// An owned tensor in one of the engine's dtypes; [`OwnedTensor::as_ref`] is what a backend uploads.
#[derive(Debug, Clone)]
pub struct OwnedTensor {
    name: String,
    dtype: WeightDtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl OwnedTensor {
    /// `values` (laid out as `base`) rounded to nearest even in `base`'s dtype.
    pub fn rounded_like(base: &TensorRef<'_>, values: &[f32]) -> Self {
        // Into a buffer of the final length, element by element: a loop the compiler vectorises.
        let size = match base.dtype {
            WeightDtype::F32 => 4,
            WeightDtype::Bf16 | WeightDtype::F16 => 2,
        };
        let mut bytes = vec![0u8; values.len() * size];
        let pairs = bytes.chunks_exact_mut(2).zip(values);
        match base.dtype {
            WeightDtype::F32 => {
                for (b, v) in bytes.chunks_exact_mut(4).zip(values) {
                    b.copy_from_slice(&v.to_le_bytes());
                }
            }
            WeightDtype::Bf16 => {
                pairs.for_each(|(b, &v)| b.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes()))
            }
            WeightDtype::F16 => {
                pairs.for_each(|(b, &v)| b.copy_from_slice(&half::f16::from_f32(v).to_le_bytes()))
            }
        };
        OwnedTensor {
            name: base.name.to_owned(),
            dtype: base.dtype,
            shape: base.shape.to_vec(),
            bytes,
        }
    }

    /// The outermost rows `rows` of `t` (of a vector: its elements `rows`).
    ///
    /// # Panics
    /// When `t` has no dimension or `rows` reaches past its first.
    pub fn rows(t: &TensorRef<'_>, rows: Range<usize>) -> Self {
        let row_bytes = t.bytes.len() / t.shape[0].max(1);
        let mut shape = t.shape.to_vec();
        shape[0] = rows.len();
        OwnedTensor {
            name: t.name.to_owned(),
            dtype: t.dtype,
            shape,
            bytes: t.bytes[rows.start * row_bytes..rows.end * row_bytes].to_vec(),
        }
    }

    /// The columns `cols` of the matrix `t`, every row of them.
    ///
    /// # Panics
    /// When `t` is not a matrix or `cols` reaches past its columns.
    pub fn cols(t: &TensorRef<'_>, cols: Range<usize>) -> Self {
        let [rows, width] = t.shape else {
            panic!("{} is not a matrix: {:?}", t.name, t.shape)
        };
        assert!(cols.end <= *width, "columns {cols:?} of {width}");
        let size = t.bytes.len() / (rows * width).max(1);
        let (start, end) = (cols.start * size, cols.end * size);
        let bytes = t
            .bytes
            .chunks_exact(width * size)
            .flat_map(|row| &row[start..end])
            .copied()
            .collect();
        OwnedTensor {
            name: t.name.to_owned(),
            dtype: t.dtype,
            shape: vec![*rows, cols.len()],
            bytes,
        }
    }

    /// The tensor as the backends take it.
    pub fn as_ref(&self) -> TensorRef<'_> {
        TensorRef {
            name: &self.name,
            dtype: self.dtype,
            shape: &self.shape,
            bytes: &self.bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bf16_matrix(rows: usize, cols: usize) -> (Vec<usize>, Vec<u8>) {
        let bytes = (0..rows * cols)
            .flat_map(|i| half::bf16::from_f32(i as f32).to_le_bytes())
            .collect();
        (vec![rows, cols], bytes)
    }

    fn view<'a>(shape: &'a [usize], bytes: &'a [u8]) -> TensorRef<'a> {
        TensorRef {
            name: "m",
            dtype: WeightDtype::Bf16,
            shape,
            bytes,
        }
    }

    #[test]
    fn rows_of_a_matrix_are_its_contiguous_middle() {
        let (shape, bytes) = bf16_matrix(4, 3);
        let part = OwnedTensor::rows(&view(&shape, &bytes), 1..3);
        assert_eq!(part.as_ref().shape, &[2, 3]);
        assert_eq!(part.as_ref().to_f32(), [3., 4., 5., 6., 7., 8.]);
    }

    #[test]
    fn columns_of_a_matrix_take_the_same_span_of_every_row() {
        let (shape, bytes) = bf16_matrix(3, 4);
        let part = OwnedTensor::cols(&view(&shape, &bytes), 2..4);
        assert_eq!(part.as_ref().shape, &[3, 2]);
        assert_eq!(part.as_ref().to_f32(), [2., 3., 6., 7., 10., 11.]);
    }

    #[test]
    fn rows_of_a_vector_are_its_elements() {
        let bytes: Vec<u8> = [1f32, 2., 3., 4.]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let shape = [4];
        let t = TensorRef {
            name: "b",
            dtype: WeightDtype::F32,
            shape: &shape,
            bytes: &bytes,
        };
        assert_eq!(OwnedTensor::rows(&t, 2..4).as_ref().to_f32(), [3., 4.]);
    }

    #[test]
    fn rounding_keeps_the_base_dtype_and_shape() {
        let (shape, bytes) = bf16_matrix(1, 2);
        let base = view(&shape, &bytes);
        let t = OwnedTensor::rounded_like(&base, &[1.0039, -2.5]);
        assert_eq!(t.as_ref().dtype, WeightDtype::Bf16);
        assert_eq!(t.as_ref().to_f32(), [1.0, -2.5]);
    }

    #[test]
    fn every_dtype_rounds_and_widens_each_value_as_half_does() {
        let values: Vec<f32> = (0..1000)
            .map(|i| (i as f32 - 500.0) * 0.37e-3 * (1.0 + i as f32))
            .chain([f32::NAN, f32::INFINITY, -0.0, 1e-40, 70_000.0])
            .collect();
        let shape = [values.len()];
        for dtype in [WeightDtype::F32, WeightDtype::Bf16, WeightDtype::F16] {
            let base = TensorRef {
                name: "v",
                dtype,
                shape: &shape,
                bytes: &[],
            };
            let owned = OwnedTensor::rounded_like(&base, &values);
            let want: Vec<u32> = values
                .iter()
                .map(|&v| match dtype {
                    WeightDtype::F32 => v,
                    WeightDtype::Bf16 => half::bf16::from_f32(v).to_f32(),
                    WeightDtype::F16 => half::f16::from_f32(v).to_f32(),
                })
                .map(f32::to_bits)
                .collect();
            let got: Vec<u32> = owned
                .as_ref()
                .to_f32()
                .into_iter()
                .map(f32::to_bits)
                .collect();
            assert_eq!(got, want, "{dtype:?}");
        }
    }
}
