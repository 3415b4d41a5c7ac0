// Element-wise and row-copy ops: SiLU·mul, GELU, add, bias add, f32 → bf16, embedding gather,
// row gather. Grid-stride loops over 64-bit element counts.
#include "common.cuh"

#define GRID_STRIDE(i, n) \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); \
         i += (long long)gridDim.x * blockDim.x)

// out = silu(gate) * up
extern "C" __global__ void silu_mul_f32(
    const float* gate,  // [n]
    const float* up,    // [n]
    float* out,         // [n]
    long long n) {
    GRID_STRIDE(i, n) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
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
    GRID_STRIDE(i, n) { y[i] = f32_to_bf16(x[i]); }
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

// out[t] = table[ids[t]]
extern "C" __global__ void embedding_f32(
    const float* table,  // [vocab, width]
    const unsigned* ids, // [rows]
    float* out,          // [rows, width]
    int rows,
    int width) {
    gather(table, ids, out, rows, width);
}

// out[t] = table[ids[t]], bf16 table.
extern "C" __global__ void embedding_bf16(
    const bf16_t* table,  // [vocab, width]
    const unsigned* ids,  // [rows]
    float* out,           // [rows, width]
    int rows,
    int width) {
    gather(table, ids, out, rows, width);
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
