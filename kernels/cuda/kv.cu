// KV-cache writes: new K and V rows scattered into the paged pools at their slots (f32, bf16, or int8
// with one scale per slot and head); and whole blocks packed out of and back into the pools (tiered KV).
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

// x / scale (given as its inverse) rounded half away from zero and clamped to ±127; NaN gives 0.
__device__ __forceinline__ signed char quantized(float x, float inv) {
    const float r = roundf(__fmul_rn(x, inv));
    return (signed char)(isnan(r) ? 0.0f : fminf(fmaxf(r, -127.0f), 127.0f));
}

// One head of one row quantised into an int8 pool, as the CPU backend does: scale = max |x| / 127,
// each element x / scale rounded half away from zero and clamped to ±127 (all zeros: scale 0). One
// warp per head.
__device__ void quantize_head(
    const float* x,   // [head_dim]
    signed char* q,   // [head_dim]: the slot's head in the pool
    float* scale,     // the slot's head's scale
    int head_dim) {
    const int lane = threadIdx.x & 31;
    float amax = 0.0f;
    for (int e = lane; e < head_dim; e += 32) {
        amax = fmaxf(amax, fabsf(x[e]));
    }
    for (int o = 16; o > 0; o >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    }
    const float s = amax / 127.0f;
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int e = lane; e < head_dim; e += 32) {
        q[e] = quantized(x[e], inv);
    }
    if (lane == 0) {
        *scale = s;
    }
}

// int8 pools: k_cache[slot_mapping[t]] = k[t] quantised per head, likewise v. One warp per (row,
// KV head); 1-D grid of any block size that is a multiple of 32.
extern "C" __global__ void kv_write_int8(
    const float* k,                // [rows, num_kv_heads, head_dim]
    const float* v,                // [rows, num_kv_heads, head_dim]
    const unsigned* slot_mapping,  // [rows]
    signed char* k_cache,          // [num_blocks, block_size, num_kv_heads, head_dim]
    signed char* v_cache,          // [num_blocks, block_size, num_kv_heads, head_dim]
    float* k_scales,               // [num_blocks, block_size, num_kv_heads]
    float* v_scales,               // [num_blocks, block_size, num_kv_heads]
    int rows,
    int num_kv_heads,
    int head_dim) {
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (warp >= (long long)rows * num_kv_heads) {
        return;
    }
    const long long r = warp / num_kv_heads, h = warp % num_kv_heads;
    const long long src = warp * head_dim;
    const long long dst = (long long)slot_mapping[r] * num_kv_heads + h;
    quantize_head(k + src, k_cache + dst * head_dim, k_scales + dst, head_dim);
    quantize_head(v + src, v_cache + dst * head_dim, v_scales + dst, head_dim);
}

// rope_scatter's work four pairs a thread (16-byte loads; `head_dim` a multiple of 8).
template <typename T>
__device__ __forceinline__ void rope_scatter_by_4(float* q, float* k, const float* v,
                                                  const float* table, const unsigned* slots, T* kc,
                                                  T* vc, int rows, int heads, int kv_heads,
                                                  int head_dim) {
    const int half = head_dim / 2, all = heads + kv_heads, quads = half / 4;
    const long long n = (long long)rows * all * quads;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / ((long long)all * quads);
        const int h = (int)(i / quads % all), j = (int)(i % quads) * 4;
        const float4 c = *reinterpret_cast<const float4*>(table + r * head_dim + j);
        const float4 s = *reinterpret_cast<const float4*>(table + r * head_dim + half + j);
        const bool is_q = h < heads;
        float* x = is_q ? q + (r * heads + h) * head_dim : k + (r * kv_heads + h - heads) * head_dim;
        const float4 x1 = *reinterpret_cast<const float4*>(x + j);
        const float4 x2 = *reinterpret_cast<const float4*>(x + half + j);
        const float4 y1 = make_float4(x1.x * c.x - x2.x * s.x, x1.y * c.y - x2.y * s.y,
                                      x1.z * c.z - x2.z * s.z, x1.w * c.w - x2.w * s.w);
        const float4 y2 = make_float4(x2.x * c.x + x1.x * s.x, x2.y * c.y + x1.y * s.y,
                                      x2.z * c.z + x1.z * s.z, x2.w * c.w + x1.w * s.w);
        *reinterpret_cast<float4*>(x + j) = y1;
        *reinterpret_cast<float4*>(x + half + j) = y2;
        if (!is_q) {
            const long long width = (long long)kv_heads * head_dim;
            const long long col = (long long)(h - heads) * head_dim;
            const long long dst = (long long)slots[r] * width + col;
            const float* vr = v + r * width + col;
            store4(kc + dst + j, 0, y1);
            store4(kc + dst + half + j, 0, y2);
            store4(vc + dst + j, 0, *reinterpret_cast<const float4*>(vr + j));
            store4(vc + dst + half + j, 0, *reinterpret_cast<const float4*>(vr + half + j));
        }
    }
}

// RoPE on q and k (HF half-split, the row's cos/sin from `table`), then k and v written to the pool
// slots, in one launch: what rope_f32 on q, rope_f32 on k and kv_write do one after the other (k is
// rotated in place too, so every buffer ends as after those three).
template <typename T>
__device__ void rope_scatter(
    float* q,               // [rows, heads, head_dim]
    float* k,               // [rows, kv_heads, head_dim]
    const float* v,         // [rows, kv_heads, head_dim]
    const float* table,     // [rows, head_dim]
    const unsigned* slots,  // [rows]
    T* kc,                  // [num_slots, kv_heads * head_dim]
    T* vc,                  // [num_slots, kv_heads * head_dim]
    int rows,
    int heads,
    int kv_heads,
    int head_dim) {
    // Launched with programmatic dependent launch after the q/k/v products: the attention kernel
    // may start now, and this one reads the products only once they are done.
    allow_next_grid();
    wait_for_previous_grid();
    const int half = head_dim / 2, all = heads + kv_heads;
    if ((half & 3) == 0) {
        rope_scatter_by_4(q, k, v, table, slots, kc, vc, rows, heads, kv_heads, head_dim);
        return;
    }
    const long long n = (long long)rows * all * half;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / ((long long)all * half);
        const int h = (int)(i / half % all), j = (int)(i % half);
        const float c = table[r * head_dim + j], s = table[r * head_dim + half + j];
        const bool is_q = h < heads;
        float* x = is_q ? q + (r * heads + h) * head_dim : k + (r * kv_heads + h - heads) * head_dim;
        const float x1 = x[j], x2 = x[half + j];
        const float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
        x[j] = y1;
        x[half + j] = y2;
        if (!is_q) {
            const long long width = (long long)kv_heads * head_dim;
            const long long col = (long long)(h - heads) * head_dim;
            const long long dst = (long long)slots[r] * width + col;
            const float* vr = v + r * width + col;
            store_from_f32(kc + dst + j, y1);
            store_from_f32(kc + dst + half + j, y2);
            store_from_f32(vc + dst + j, vr[j]);
            store_from_f32(vc + dst + half + j, vr[half + j]);
        }
    }
}

extern "C" __global__ void rope_kv_write_f32(float* q, float* k, const float* v, const float* table,
                                             const unsigned* slots, float* kc, float* vc, int rows,
                                             int heads, int kv_heads, int head_dim) {
    rope_scatter(q, k, v, table, slots, kc, vc, rows, heads, kv_heads, head_dim);
}

extern "C" __global__ void rope_kv_write_bf16(float* q, float* k, const float* v, const float* table,
                                              const unsigned* slots, bf16_t* kc, bf16_t* vc, int rows,
                                              int heads, int kv_heads, int head_dim) {
    rope_scatter(q, k, v, table, slots, kc, vc, rows, heads, kv_heads, head_dim);
}

// Eight bf16 values at `p` as f32, plus `bias` (f32, at the same offset) where there is one.
__device__ __forceinline__ void load8_biased(const bf16_t* p, const float* bias, float* f) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
    if (bias != nullptr) {
        const float4 a = reinterpret_cast<const float4*>(bias)[0];
        const float4 b = reinterpret_cast<const float4*>(bias)[1];
        f[0] += a.x, f[1] += a.y, f[2] += a.z, f[3] += a.w;
        f[4] += b.x, f[5] += b.y, f[6] += b.z, f[7] += b.w;
    }
}

__device__ __forceinline__ void store8_bf16(bf16_t* p, const float* f) {
    *reinterpret_cast<uint4*>(p) = make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]),
                                              pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
}

// The bf16 form of rope_kv_write, for prefill whose q, k and v products were written in bf16: each
// gets its bias (where `q_bias` etc. are not null), q is rotated in place (bf16), k rotated and v
// copied into their bf16 pool slots (the k product is left as it was: nothing reads it again).
// `head_dim` a multiple of 16: a thread takes eight pairs (16-byte loads). 1-D grid of any shape.
extern "C" __global__ void rope_kv_write_bf16io(
    bf16_t* q,              // [rows, heads, head_dim]
    const bf16_t* k,        // [rows, kv_heads, head_dim]
    const bf16_t* v,        // [rows, kv_heads, head_dim]
    const float* q_bias,    // [heads · head_dim] or null
    const float* k_bias,    // [kv_heads · head_dim] or null
    const float* v_bias,    // [kv_heads · head_dim] or null
    const float* table,     // [rows, head_dim]: cos then sin
    const unsigned* slots,  // [rows]
    bf16_t* kc,             // [num_slots, kv_heads · head_dim]
    bf16_t* vc,             // [num_slots, kv_heads · head_dim]
    int rows, int heads, int kv_heads, int head_dim) {
    allow_next_grid();
    wait_for_previous_grid();
    const int half = head_dim / 2, all = heads + kv_heads, octs = half / 8;
    const long long n = (long long)rows * all * octs;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / ((long long)all * octs);
        const int h = (int)(i / octs % all), j = (int)(i % octs) * 8;
        const bool is_q = h < heads;
        const int col = (is_q ? h : h - heads) * head_dim;
        const long long at = is_q ? (r * heads) * head_dim + col : (r * kv_heads) * head_dim + col;
        const float* bias = is_q ? q_bias : k_bias;
        float x1[8], x2[8], y1[8], y2[8];
        load8_biased((is_q ? q : k) + at + j, bias ? bias + col + j : nullptr, x1);
        load8_biased((is_q ? q : k) + at + half + j, bias ? bias + col + half + j : nullptr, x2);
        const float* cr = table + r * head_dim + j;
        const float* sr = table + r * head_dim + half + j;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            y1[e] = x1[e] * cr[e] - x2[e] * sr[e];
            y2[e] = x2[e] * cr[e] + x1[e] * sr[e];
        }
        if (is_q) {
            store8_bf16(q + at + j, y1);
            store8_bf16(q + at + half + j, y2);
        } else {
            const long long dst = (long long)slots[r] * kv_heads * head_dim + col;
            float v1[8], v2[8];
            load8_biased(v + at + j, v_bias ? v_bias + col + j : nullptr, v1);
            load8_biased(v + at + half + j, v_bias ? v_bias + col + half + j : nullptr, v2);
            store8_bf16(kc + dst + j, y1);
            store8_bf16(kc + dst + half + j, y2);
            store8_bf16(vc + dst + j, v1);
            store8_bf16(vc + dst + half + j, v2);
        }
    }
}

// Quantises one head held across a warp's lanes (`x[t]` holds element lane + 32·t, `n` of them a lane,
// those at or past `head_dim` zero) into its int8 slot and scale, as quantize_head does.
template <int N>
__device__ __forceinline__ void quantize_lanes(const float* x, signed char* q, float* scale,
                                               int head_dim) {
    const int lane = threadIdx.x & 31;
    float amax = 0.0f;
#pragma unroll
    for (int t = 0; t < N; ++t) {
        amax = fmaxf(amax, fabsf(x[t]));
    }
    for (int o = 16; o > 0; o >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    }
    const float s = amax / 127.0f;
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
#pragma unroll
    for (int t = 0; t < N; ++t) {
        if (lane + 32 * t < head_dim) {
            q[lane + 32 * t] = quantized(x[t], inv);
        }
    }
    if (lane == 0) {
        *scale = s;
    }
}

// rope_kv_write_bf16io for int8 pools: one warp per (row, head of q then k). A q head gets its bias and
// is rotated in place (bf16); a k head gets its bias, is rotated and quantised into its slot, and the v
// head beside it gets its bias and is quantised; the k and v products are left as they were.
// `head_dim` even and at most 256; 1-D grid of any block size that is a multiple of 32.
extern "C" __global__ void rope_kv_write_int8_bf16io(
    bf16_t* q, const bf16_t* k, const bf16_t* v, const float* q_bias, const float* k_bias,
    const float* v_bias, const float* table, const unsigned* slots, signed char* kc,
    signed char* vc, float* k_scales, float* v_scales, int rows, int heads, int kv_heads,
    int head_dim) {
    allow_next_grid();
    wait_for_previous_grid();
    constexpr int PAIRS = 4;  // pairs a lane holds: head_dim / 2 ≤ 128
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int all = heads + kv_heads, lane = threadIdx.x & 31, half = head_dim / 2;
    if (warp >= (long long)rows * all) {
        return;
    }
    const long long r = warp / all;
    const int h = (int)(warp % all);
    const bool is_q = h < heads;
    const int col = (is_q ? h : h - heads) * head_dim;
    const long long at = is_q ? r * heads * head_dim + col : r * kv_heads * head_dim + col;
    const bf16_t* x = is_q ? q + at : k + at;
    const float* bias = is_q ? q_bias : k_bias;
    const float* cs = table + r * head_dim;
    // The rotated head: element j + 32·t in y1[t], element half + j + 32·t in y2[t].
    float y1[PAIRS], y2[PAIRS];
#pragma unroll
    for (int t = 0; t < PAIRS; ++t) {
        const int j = lane + 32 * t;
        y1[t] = y2[t] = 0.0f;
        if (j < half) {
            const float x1 = bf16_to_f32(x[j]) + (bias ? bias[col + j] : 0.0f);
            const float x2 = bf16_to_f32(x[half + j]) + (bias ? bias[col + half + j] : 0.0f);
            const float c = cs[j], s = cs[half + j];
            y1[t] = x1 * c - x2 * s;
            y2[t] = x2 * c + x1 * s;
        }
    }
    if (is_q) {
#pragma unroll
        for (int t = 0; t < PAIRS; ++t) {
            const int j = lane + 32 * t;
            if (j < half) {
                q[at + j] = f32_to_bf16(y1[t]);
                q[at + half + j] = f32_to_bf16(y2[t]);
            }
        }
        return;
    }
    // The head's elements in lane order for quantize_lanes: lane + 32·t for t < 2·PAIRS.
    float kx[2 * PAIRS], vx[2 * PAIRS];
#pragma unroll
    for (int t = 0; t < 2 * PAIRS; ++t) {
        kx[t] = vx[t] = 0.0f;
    }
    // half is a multiple of 32 here (head_dim 64 or 128 go to this kernel), so element j + 32·t of
    // the second half is element 32·(t + half / 32) + lane of the head.
    const int second = half / 32;
#pragma unroll
    for (int t = 0; t < PAIRS; ++t) {
        if (t < second) {
            kx[t] = y1[t];
            kx[t + second] = y2[t];
        }
    }
    const bf16_t* vr = v + at;
#pragma unroll
    for (int t = 0; t < 2 * PAIRS; ++t) {
        const int e = lane + 32 * t;
        if (e < head_dim) {
            vx[t] = bf16_to_f32(vr[e]) + (v_bias ? v_bias[col + e] : 0.0f);
        }
    }
    const long long dst = (long long)slots[r] * kv_heads + (h - heads);
    quantize_lanes<2 * PAIRS>(kx, kc + dst * head_dim, k_scales + dst, head_dim);
    quantize_lanes<2 * PAIRS>(vx, vc + dst * head_dim, v_scales + dst, head_dim);
}

// rope_kv_write for int8 pools, whose write needs a whole head's largest value: one warp per (row,
// head of q then k). A q head is rotated in place; a k head is rotated in place and quantised into its
// slot (by `quantize_head`, once the warp's lanes see each other's rotated values), and the v head
// beside it quantised, as rope on q, rope on k and kv_write_int8 leave them. 1-D grid of any block size
// that is a multiple of 32.
extern "C" __global__ void rope_kv_write_int8(float* q, float* k, const float* v, const float* table,
                                              const unsigned* slots, signed char* kc,
                                              signed char* vc, float* k_scales, float* v_scales,
                                              int rows, int heads, int kv_heads, int head_dim) {
    allow_next_grid();
    wait_for_previous_grid();
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int all = heads + kv_heads, lane = threadIdx.x & 31, half = head_dim / 2;
    if (warp >= (long long)rows * all) {
        return;
    }
    const long long r = warp / all;
    const int h = (int)(warp % all);
    const bool is_q = h < heads;
    float* x = is_q ? q + (r * heads + h) * head_dim : k + (r * kv_heads + h - heads) * head_dim;
    const float* cs = table + r * head_dim;
    for (int j = lane; j < half; j += 32) {
        const float c = cs[j], s = cs[half + j], x1 = x[j], x2 = x[half + j];
        x[j] = x1 * c - x2 * s;
        x[half + j] = x2 * c + x1 * s;
    }
    if (is_q) {
        return;
    }
    __syncwarp();  // quantize_head reads values other lanes rotated
    const long long dst = (long long)slots[r] * kv_heads + (h - heads);
    quantize_head(x, kc + dst * head_dim, k_scales + dst, head_dim);
    quantize_head(v + (r * kv_heads + h - heads) * head_dim, vc + dst * head_dim, v_scales + dst,
                  head_dim);
}

// Whole KV blocks between the parts of a model's pools (each layer's K and V elements, and an int8 pool's
// scales) and packed host records, 16 bytes at a time, for the tiered KV cache. Record i is block ids[i]
// of every part in turn, `record_words` 16-byte words long. blockIdx.y picks the part: parts[y] is its
// base address, parts[num_parts + y] its words per block, parts[2 * num_parts + y] where its words start
// in a record. `gather` packs the blocks, else unpacks them.
__device__ void copy_blocks(const unsigned long long* parts, int num_parts, uint4* packed,
                            const unsigned* ids, int n, int record_words, bool gather) {
    const int y = blockIdx.y;
    uint4* part = (uint4*)parts[y];
    const long long words = (long long)parts[num_parts + y];
    const long long offset = (long long)parts[2 * num_parts + y];
    const long long total = (long long)n * words;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long b = i / words, w = i % words;
        uint4* slot = part + (long long)ids[b] * words + w;
        uint4* rec = packed + b * record_words + offset + w;
        if (gather) {
            *rec = *slot;
        } else {
            *slot = *rec;
        }
    }
}

extern "C" __global__ void kv_blocks_gather(const unsigned long long* parts, int num_parts,
                                            uint4* packed, const unsigned* ids, int n,
                                            int record_words) {
    copy_blocks(parts, num_parts, packed, ids, n, record_words, true);
}

extern "C" __global__ void kv_blocks_scatter(const unsigned long long* parts, int num_parts,
                                             uint4* packed, const unsigned* ids, int n,
                                             int record_words) {
    copy_blocks(parts, num_parts, packed, ids, n, record_words, false);
}

// Whole KV blocks moved between the parts of some pools and records in pinned host memory, which the
// device reaches over the bus (mapped: the same addresses as on the host). records[i] is the address
// of record i; the parts' words start `first_word` words into a record (the group's place in it),
// parts[] as for copy_blocks. Each thread keeps four 16-byte loads in flight, so a few blocks per part
// keep the bus busy while the rest of the GPU computes.
__device__ __forceinline__ void copy_mapped(const unsigned long long* parts, int num_parts,
                                            const unsigned long long* records,
                                            long long first_word, const unsigned* ids, int n,
                                            bool to_host) {
    const int y = blockIdx.y;
    uint4* part = (uint4*)parts[y];
    const long long words = (long long)parts[num_parts + y];
    const long long offset = first_word + (long long)parts[2 * num_parts + y];
    const long long total = (long long)n * words;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long base = blockIdx.x * (long long)blockDim.x + threadIdx.x; base < total;
         base += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const long long i = base + k * stride;
            if (i < total) {
                const long long b = i / words, w = i % words;
                v[k] = to_host ? part[(long long)ids[b] * words + w]
                               : ((const uint4*)records[b])[offset + w];
            }
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const long long i = base + k * stride;
            if (i < total) {
                const long long b = i / words, w = i % words;
                if (to_host) {
                    ((uint4*)records[b])[offset + w] = v[k];
                } else {
                    part[(long long)ids[b] * words + w] = v[k];
                }
            }
        }
    }
}

// Records in pinned host memory unpacked into blocks `ids` of the parts (a reload).
extern "C" __global__ void kv_blocks_scatter_mapped(const unsigned long long* parts, int num_parts,
                                                    const unsigned long long* records,
                                                    long long first_word, const unsigned* ids,
                                                    int n) {
    copy_mapped(parts, num_parts, records, first_word, ids, n, false);
}

// Blocks `ids` of the parts packed into records in pinned host memory (an offload).
extern "C" __global__ void kv_blocks_gather_mapped(const unsigned long long* parts, int num_parts,
                                                   const unsigned long long* records,
                                                   long long first_word, const unsigned* ids,
                                                   int n) {
    copy_mapped(parts, num_parts, records, first_word, ids, n, true);
}
