// Rotary position embedding: the cos/sin table per row, and the in-place rotation (HF half-split).
#include "common.cuh"

// table[r] = mscale·cos(pos·f) for the first half, mscale·sin(pos·f) for the second; angles in f64
// because positions reach 10⁵ and f32 would lose the low bits of pos·f.
extern "C" __global__ void rope_table_f32(
    const unsigned* positions,  // [rows]
    const float* inv_freq,      // [half]
    float* table,               // [rows, 2 * half]
    int rows,
    int half,
    float mscale) {
    const long long n = (long long)rows * half;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / half;
        const int f = (int)(i % half);
        double s, c;
        sincos((double)positions[r] * (double)inv_freq[f], &s, &c);
        table[r * 2 * half + f] = (float)c * mscale;
        table[r * 2 * half + half + f] = (float)s * mscale;
    }
}

// Rotates pairs (i, i + head_dim/2) of every head by the row's angles.
extern "C" __global__ void rope_f32(
    float* x,            // [rows, heads, head_dim]
    const float* table,  // [rows, head_dim]
    int rows,
    int heads,
    int head_dim) {
    const int half = head_dim / 2;
    const long long n = (long long)rows * heads * half;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / ((long long)heads * half);
        const long long h = i / half % heads;
        const int k = (int)(i % half);
        float* head = x + (r * heads + h) * head_dim;
        const float c = table[r * head_dim + k], s = table[r * head_dim + half + k];
        const float x1 = head[k], x2 = head[half + k];
        head[k] = x1 * c - x2 * s;
        head[half + k] = x2 * c + x1 * s;
    }
}
