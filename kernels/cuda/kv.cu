// KV-cache writes: new K and V rows scattered into the paged pools at their slots.
#include "common.cuh"

// kc[slots[t]] = k[t], vc[slots[t]] = v[t], rounded to T, for the entry points below.
template <typename T>
__device__ void scatter(
    const float* k,          // [rows, width]
    const float* v,          // [rows, width]
    const unsigned* slots,   // [rows]
    T* kc,                   // [num_slots, width]
    T* vc,                   // [num_slots, width]
    int rows,
    int width) {
    const long long n = (long long)rows * width;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / width, c = i % width;
        const long long dst = (long long)slots[r] * width + c;
        store_from_f32(kc + dst, k[i]);
        store_from_f32(vc + dst, v[i]);
    }
}

// k_cache[slot_mapping[t]] = k[t], likewise v; width = num_kv_heads * head_dim.
extern "C" __global__ void kv_write_f32(
    const float* k,                // [rows, num_kv_heads, head_dim]
    const float* v,                // [rows, num_kv_heads, head_dim]
    const unsigned* slot_mapping,  // [rows]
    float* k_cache,                // [num_blocks, block_size, num_kv_heads, head_dim]
    float* v_cache,                // [num_blocks, block_size, num_kv_heads, head_dim]
    int rows,
    int width) {
    scatter(k, v, slot_mapping, k_cache, v_cache, rows, width);
}

// bf16 pools, rounded to nearest even.
extern "C" __global__ void kv_write_bf16(
    const float* k,                // [rows, num_kv_heads, head_dim]
    const float* v,                // [rows, num_kv_heads, head_dim]
    const unsigned* slot_mapping,  // [rows]
    bf16_t* k_cache,               // [num_blocks, block_size, num_kv_heads, head_dim]
    bf16_t* v_cache,               // [num_blocks, block_size, num_kv_heads, head_dim]
    int rows,
    int width) {
    scatter(k, v, slot_mapping, k_cache, v_cache, rows, width);
}
