// Element-wise and row-copy ops: SiLU·mul (of f32 to f32, of bf16 to bf16), GELU, add, bias add,
// f32 → bf16, embedding gather, row gather. Grid-stride loops over 64-bit element counts.
#include "common.cuh"

#define GRID_STRIDE(i, n) \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); \
         i += (long long)gridDim.x * blockDim.x)

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// out = silu(gate) * up, four elements a thread and step (16-byte loads), then the last n % 4.
template <typename T>
__device__ __forceinline__ void silu_mul_into(const float* gate, const float* up, T* out,
                                              long long n) {
    const long long quads = n / 4;
    GRID_STRIDE(i, quads) {
        const float4 g = reinterpret_cast<const float4*>(gate)[i];
        const float4 u = reinterpret_cast<const float4*>(up)[i];
        store4(out, i, silu_mul(g.x, u.x), silu_mul(g.y, u.y), silu_mul(g.z, u.z),
               silu_mul(g.w, u.w));
    }
    GRID_STRIDE(j, n - 4 * quads) {
        const long long i = 4 * quads + j;
        store_from_f32(out + i, silu_mul(gate[i], up[i]));
    }
}

extern "C" __global__ void silu_mul_f32(
    const float* gate,  // [n]
    const float* up,    // [n]
    float* out,         // [n]
    long long n) {
    silu_mul_into(gate, up, out, n);
}

// out = bf16(silu(gate) * up) over bf16 gate and up products (the prefill MLP's), eight elements a
// thread and step (16-byte loads), then the last n % 8.
extern "C" __global__ void silu_mul_of_bf16(
    const bf16_t* gate,  // [n]
    const bf16_t* up,    // [n]
    bf16_t* out,         // [n]
    long long n) {
    const long long octs = n / 8;
    GRID_STRIDE(i, octs) {
        const uint4 g = reinterpret_cast<const uint4*>(gate)[i];
        const uint4 u = reinterpret_cast<const uint4*>(up)[i];
        const unsigned gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
        unsigned o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float g0 = __uint_as_float(gw[j] << 16), g1 = __uint_as_float(gw[j] & 0xffff0000u);
            const float u0 = __uint_as_float(uw[j] << 16), u1 = __uint_as_float(uw[j] & 0xffff0000u);
            o[j] = pack_bf16x2(silu_mul(g0, u0), silu_mul(g1, u1));
        }
        reinterpret_cast<uint4*>(out)[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
    GRID_STRIDE(j, n - 8 * octs) {
        const long long i = 8 * octs + j;
        out[i] = f32_to_bf16(silu_mul(load_f32(gate + i), load_f32(up + i)));
    }
}

// Exact (erf) GELU in place.
extern "C" __global__ void gelu_f32(
    float* x,  // [n]
    long long n) {
    GRID_STRIDE(i, n) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

// x += y
extern "C" __global__ void add_f32(
    float* x,        // [n]
    const float* y,  // [n]
    long long n) {
    GRID_STRIDE(i, n) { x[i] += y[i]; }
}

// out[r, c] += bias[c]
extern "C" __global__ void bias_add_f32(
    float* out,         // [rows, cols]
    const float* bias,  // [cols]
    long long rows,
    int cols) {
    GRID_STRIDE(i, rows * cols) { out[i] += bias[i % cols]; }
}

// y = bf16(x), rounded to nearest even.
extern "C" __global__ void cast_f32_bf16(
    const float* x,  // [n]
    bf16_t* y,       // [n]
    long long n) {
    // Four elements a thread and step (a 16-byte load, an 8-byte store), then the last n % 4.
    const long long quads = n / 4;
    GRID_STRIDE(i, quads) {
        const float4 v = reinterpret_cast<const float4*>(x)[i];
        reinterpret_cast<uint2*>(y)[i] = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
    }
    GRID_STRIDE(j, n - 4 * quads) { y[4 * quads + j] = f32_to_bf16(x[4 * quads + j]); }
}

// out[t] = table[ids[t]] widened to f32, for the entry points below.
template <typename T>
__device__ void gather(
    const T* table,        // [any, width]
    const unsigned* ids,   // [rows]
    float* out,            // [rows, width]
    int rows,
    int width) {
    GRID_STRIDE(i, (long long)rows * width) {
        const long long r = i / width, c = i % width;
        out[i] = load_f32(table + (long long)ids[r] * width + c);
    }
}

// out[t] = table[ids[t] - first] widened to f32, zeros where ids[t] is not among the table's rows
// first..first + table_rows (a tensor-parallel rank holds one part of the vocabulary).
template <typename T>
__device__ void embed_part(
    const T* table,        // [table_rows, width]
    const unsigned* ids,   // [rows]
    float* out,            // [rows, width]
    int rows,
    int width,
    unsigned first,
    unsigned table_rows) {
    GRID_STRIDE(i, (long long)rows * width) {
        const long long r = i / width, c = i % width;
        const unsigned row = ids[r] - first; // ids below first wrap past table_rows
        out[i] = row < table_rows ? load_f32(table + (long long)row * width + c) : 0.f;
    }
}

extern "C" __global__ void embedding_f32(
    const float* table, const unsigned* ids, float* out, int rows, int width, unsigned first,
    unsigned table_rows) {
    embed_part(table, ids, out, rows, width, first, table_rows);
}

extern "C" __global__ void embedding_bf16(
    const bf16_t* table, const unsigned* ids, float* out, int rows, int width, unsigned first,
    unsigned table_rows) {
    embed_part(table, ids, out, rows, width, first, table_rows);
}

// out[t] = x[idx[t]]
extern "C" __global__ void gather_rows_f32(
    const float* x,       // [any, width]
    const unsigned* idx,  // [rows]
    float* out,           // [rows, width]
    int rows,
    int width) {
    gather(x, idx, out, rows, width);
}
