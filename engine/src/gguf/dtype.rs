//! ggml tensor element types as they appear in GGUF tensor infos: ids, block sizes and block byte sizes.
//!
//! Only the types in [`GgmlType::is_dequantizable`] can be turned into floats by [`super::dequant`]; the
//! others are known so that a file using them still opens and its sizes can be checked.

/// A ggml tensor type: either a plain float/int type or a block-quantised format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 half precision.
    F16,
    /// Blocks of 32: f16 scale, 16 bytes of 4-bit values, `w = (q - 8) * d`.
    Q4_0,
    /// Blocks of 32: f16 scale `d`, f16 minimum `m`, 16 bytes of 4-bit values, `w = q * d + m`.
    Q4_1,
    /// Blocks of 32, 5-bit, symmetric.
    Q5_0,
    /// Blocks of 32, 5-bit, with minimum.
    Q5_1,
    /// Blocks of 32: f16 scale `d` and 32 signed bytes, `w = q * d`.
    Q8_0,
    /// Blocks of 32, 8-bit with a precomputed sum.
    Q8_1,
    /// K-quant, 2-bit super-blocks of 256.
    Q2K,
    /// K-quant, 3-bit super-blocks of 256.
    Q3K,
    /// K-quant, 4-bit super-blocks of 256.
    Q4K,
    /// K-quant, 5-bit super-blocks of 256.
    Q5K,
    /// K-quant, 6-bit super-blocks of 256.
    Q6K,
    /// K-quant, 8-bit super-blocks of 256.
    Q8K,
    /// Blocks of 32: f16 scale and 16 bytes of 4-bit codes into a non-linear table of 16 levels.
    IQ4NL,
    /// IQ4_NL's codes in super-blocks of 256 with a 6-bit scale for each sub-block of 32.
    IQ4XS,
    /// Signed 8-bit integers.
    I8,
    /// Signed 16-bit integers.
    I16,
    /// Signed 32-bit integers.
    I32,
    /// Signed 64-bit integers.
    I64,
    /// IEEE 754 double precision.
    F64,
    /// bfloat16.
    BF16,
}

impl GgmlType {
    /// The type for a raw ggml type id, or `None` when the id is unknown.
    pub fn from_id(id: u32) -> Option<Self> {
        use GgmlType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2K,
            11 => Q3K,
            12 => Q4K,
            13 => Q5K,
            14 => Q6K,
            15 => Q8K,
            20 => IQ4NL,
            23 => IQ4XS,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            30 => BF16,
            _ => return None,
        })
    }

    /// The raw ggml type id.
    pub fn id(self) -> u32 {
        use GgmlType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2K => 10,
            Q3K => 11,
            Q4K => 12,
            Q5K => 13,
            Q6K => 14,
            Q8K => 15,
            IQ4NL => 20,
            IQ4XS => 23,
            I8 => 24,
            I16 => 25,
            I32 => 26,
            I64 => 27,
            F64 => 28,
            BF16 => 30,
        }
    }

    /// Number of elements in one block (1 for plain types).
    pub fn block_len(self) -> u64 {
        use GgmlType::*;
        match self {
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4NL => 32,
            Q2K | Q3K | Q4K | Q5K | Q6K | Q8K | IQ4XS => 256,
            F32 | F16 | BF16 | I8 | I16 | I32 | I64 | F64 => 1,
        }
    }

    /// Number of bytes one block occupies.
    pub fn block_bytes(self) -> u64 {
        use GgmlType::*;
        match self {
            F32 | I32 => 4,
            F16 | BF16 | I16 => 2,
            I8 => 1,
            I64 | F64 => 8,
            Q4_0 | IQ4NL => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2K => 84,
            Q3K => 110,
            Q4K => 144,
            Q5K => 176,
            Q6K => 210,
            Q8K => 292,
            IQ4XS => 136,
        }
    }

    /// Whether [`super::dequant::dequantize`] supports this type.
    pub fn is_dequantizable(self) -> bool {
        super::dequant::supports(self)
    }
}

/// ggml's name of a tensor type id (as gguf-py 0.19 numbers them), for messages about types docqa does
/// not read (the I-quants, the ternary and FP4 types), or `None` for an id ggml does not have.
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    const NAMES: [&str; 42] = [
        "F32", "F16", "Q4_0", "Q4_1", "", "", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K",
        "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
        "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16", "", "", "", "TQ1_0",
        "TQ2_0", "", "", "", "MXFP4", "NVFP4", "Q1_0",
    ];
    NAMES.get(id as usize).copied().filter(|n| !n.is_empty())
}

/// ` (NAME)` for an id ggml names, else nothing: the tail of an error message's type id.
pub fn name_suffix(id: impl std::borrow::Borrow<u32>) -> String {
    ggml_type_name(*id.borrow()).map_or_else(String::new, |n| format!(" ({n})"))
}
