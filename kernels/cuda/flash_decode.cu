// Decode attention (one new query row per sequence) over a bf16 or int8 paged KV pool, split-KV
// (flash-decoding) and GQA-aware. int8 keys and values stay int8 in registers until the chunk uses
// them, then are widened to bf16 exactly; their per-row scales multiply the scores and the
// probabilities in f32.
//
// flash_decode: one block of 4 warps per (key split, KV head, sequence). The group's query heads
// (up to 16) are the rows of one mma.sync m16n8k16 tile, so every K and V element of the split is
// read once for the whole group. Warps take interleaved chunks of keys (16 from bf16 pools, 32 from
// int8 ones, so a chunk's loads carry as many bytes) and load them straight into registers (no shared
// memory): K in an order of head dimensions that matches the permuted Q fragments, V transposed in
// registers with movmatrix. Each warp keeps its own online
// softmax; the block merges its 4 warps and writes the split's normalized output and (max, sum).
// flash_decode_reduce merges the splits of each (sequence, head).
#include "common.cuh"

#define WARPS 4
#define MAX_GROUP 16

// Key rows a lane loads per chunk (8 keys a row across the warp): 2 from bf16 pools, 4 from int8.
template <typename T>
struct ChunkRows {
    static constexpr int value = IsInt8<T>::value ? 4 : 2;
};

// What a lane loads per row and piece of 8 head dimensions: 16 bytes of bf16, or 8 of int8.
template <typename T>
struct LoadPiece {
    using type = uint4;
};
template <>
struct LoadPiece<signed char> {
    using type = uint2;
};

// The group's query rows as bf16 A fragments with the head dimensions permuted: fragment 2s+e,
// register pair (0, 2) holds dims 32s + 8t + 4e + {0,1}, {2,3} (t = lane % 4), matching the order
// in which load_keys leaves K. Rows (heads of the group) at or past `rows` are zero.
template <int HD>
__device__ __forceinline__ void load_q_permuted(
    unsigned (*qa)[4],  // [HD / 16][4]
    const float* q,     // [group, HD]: the group's first head of this token
    int rows) {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const int col = (kk >> 1) * 32 + 8 * t + (kk & 1) * 4;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = g + (i & 1) * 8, c = col + (i >> 1) * 2;
            float2 v = make_float2(0.0f, 0.0f);
            if (row < rows) {
                v = *reinterpret_cast<const float2*>(q + row * HD + c);
            }
            qa[kk][i] = pack_bf16x2(v.x, v.y);
        }
    }
}

// A sequence's block-table row, and under a sink window its sink blocks and the offset of the blocks
// after them (both 0 for dense attention, where the mapping folds away).
struct Window {
    const unsigned* blocks;  // [max_blocks_per_seq]
    int block_size, sink_blocks, offset;
    // The pool slot of key j (a key the window still sees).
    __device__ __forceinline__ long long slot(int j) const {
        int b = j / block_size;
        if (offset != 0 && b >= sink_blocks) {
            b -= offset;
        }
        return (long long)blocks[b] * block_size + j % block_size;
    }
};

// 16-byte pieces of ROWS keys' rows: row r (key j + 8r + lane / 4), dims 32s + 8(lane % 4) + [0, 8).
// Keys at or past `end` read as zeros.
template <int HD, int ROWS>
__device__ __forceinline__ void load_rows(
    uint4 (*dst)[HD / 32],   // [ROWS][HD / 32]
    float*,                  // no row scales: bf16 pools
    const bf16_t* pool,      // [num_blocks, block_size, num_kv_heads, HD]
    const float*,            // no scales: bf16 pools
    Window w, int row_stride, int head_off, int j, int end) {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int key = j + 8 * r + g;
        const bf16_t* p = pool + head_off + 8 * t;
        // Keys below `end` are in the sequence's row (a window's range never reaches a block that
        // left it).
        if (key < end) {
            p += w.slot(key) * row_stride;
        }
#pragma unroll
        for (int s = 0; s < HD / 32; ++s) {
            dst[r][s] = key < end ? *reinterpret_cast<const uint4*>(p + 32 * s)
                                  : make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

// The same pieces from an int8 pool, 8 bytes each, left as they are (widen_int8x8 makes them bf16
// when the chunk uses them), and the rows' scales (0 past `end`), which the chunk applies to the
// scores and probabilities in f32.
template <int HD, int ROWS>
__device__ __forceinline__ void load_rows(
    uint2 (*dst)[HD / 32],     // [ROWS][HD / 32]
    float* row_scale,          // [ROWS]
    const signed char* pool,   // [num_blocks, block_size, num_kv_heads, HD]
    const float* scales,       // [num_blocks, block_size, num_kv_heads]
    Window w, int row_stride, int head_off, int j, int end) {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int key = j + 8 * r + g;
        row_scale[r] = 0.0f;
        if (key >= end) {
#pragma unroll
            for (int s = 0; s < HD / 32; ++s) {
                dst[r][s] = make_uint2(0u, 0u);
            }
            continue;
        }
        const long long row = w.slot(key) * row_stride + head_off;
        const signed char* p = pool + row + 8 * t;
        row_scale[r] = scales[row / HD];
#pragma unroll
        for (int s = 0; s < HD / 32; ++s) {
            dst[r][s] = *reinterpret_cast<const uint2*>(p + 32 * s);
        }
    }
}

// A loaded piece as four bf16 pairs.
__device__ __forceinline__ uint4 as_bf16(uint4 piece) { return piece; }
__device__ __forceinline__ uint4 as_bf16(uint2 piece) { return widen_int8x8(piece); }

// Multiplies each score column (key j + 8n + 2t + (i & 1)) by its key's row scale, which the lanes
// with lane / 4 = that key's offset loaded (load_rows).
template <int ROWS>
__device__ __forceinline__ void scale_columns(float (*sc)[4], const float* row_scale) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < ROWS; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            sc[n][i] *= __shfl_sync(0xffffffffu, row_scale[n], (2 * t + (i & 1)) * 4);
        }
    }
}

// One chunk of 8 · ROWS keys for the warp: scores, online softmax, P·V. With int8 pools the keys'
// and values' scales (ks, vs: the rows this lane loaded) scale the scores, and the probabilities
// before P·V (the running sums stay unscaled).
template <int HD, int ROWS, bool INT8, typename P>
__device__ __forceinline__ void chunk(
    float (*o)[4], float* m, float* l,  // [HD / 8][4], [2], [2]: the warp's running state
    unsigned (*qa)[4],                  // [HD / 16][4]: permuted Q fragments
    P (*kr)[HD / 32],                   // [ROWS][HD / 32]: the chunk's keys (load_rows)
    P (*vr)[HD / 32],                   // [ROWS][HD / 32]: the chunk's values (load_rows)
    const float* ks, const float* vs,   // [ROWS], [ROWS]: int8 row scales
    float scale_log2, int j, int end) {
    const int t = threadIdx.x & 3;
    float sc[ROWS][4];
#pragma unroll
    for (int n = 0; n < ROWS; ++n) {
        sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
        for (int s = 0; s < HD / 32; ++s) {
            const uint4 k = as_bf16(kr[n][s]);
            mma_bf16_16816(sc[n], qa[2 * s], k.x, k.y);
            mma_bf16_16816(sc[n], qa[2 * s + 1], k.z, k.w);
        }
    }
    if constexpr (INT8) {
        scale_columns<ROWS>(sc, ks);
    }
#pragma unroll
    for (int n = 0; n < ROWS; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const bool out = j + 8 * n + 2 * t + (i & 1) >= end;
            sc[n][i] = out ? NEG_INF : sc[n][i];
        }
    }
    online_softmax<ROWS, HD / 8>(sc, m, l, o, scale_log2);
    if constexpr (INT8) {
        scale_columns<ROWS>(sc, vs);
    }
    // Keys 16h .. 16h + 15 of the chunk: rows 2h and 2h + 1.
#pragma unroll
    for (int h = 0; h < ROWS / 2; ++h) {
        const unsigned pa[4] = {
            pack_bf16x2(sc[2 * h][0], sc[2 * h][1]),
            pack_bf16x2(sc[2 * h][2], sc[2 * h][3]),
            pack_bf16x2(sc[2 * h + 1][0], sc[2 * h + 1][1]),
            pack_bf16x2(sc[2 * h + 1][2], sc[2 * h + 1][3]),
        };
        // Output tile 4s + w covers dims 32s + 8(lane/4 / 2) + 2w + (lane/4 % 2) as its column lane/4.
#pragma unroll
        for (int s = 0; s < HD / 32; ++s) {
            const uint4 a = as_bf16(vr[2 * h][s]), b = as_bf16(vr[2 * h + 1][s]);
            const unsigned v0[4] = {a.x, a.y, a.z, a.w};
            const unsigned v1[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                mma_bf16_16816(o[4 * s + w], pa, movmatrix_trans(v0[w]), movmatrix_trans(v1[w]));
            }
        }
    }
}

// Writes the warp's state to shared memory: output rows (unnormalized, natural dim order), max (in
// the log2 domain), sum.
template <int HD>
__device__ __forceinline__ void stash(
    float (*o_s)[HD],    // [16][HD], shared: this warp's slot
    float (*ml_s)[2],    // [16][2], shared: this warp's slot
    float (*o)[4], float* m, float* l, float scale_log2) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float sum = quad_sum(l[r]);
        if (t == 0) {
            ml_s[g + 8 * r][0] = m[r] * scale_log2;
            ml_s[g + 8 * r][1] = sum;
        }
#pragma unroll
        for (int ot = 0; ot < HD / 8; ++ot) {
            const int d = (ot >> 2) * 32 + 8 * t + 2 * (ot & 3);
            o_s[g + 8 * r][d] = o[ot][2 * r];
            o_s[g + 8 * r][d + 1] = o[ot][2 * r + 1];
        }
    }
}

template <int HD, typename T, bool WINDOWED>
__device__ void decode(
    const float* q,                   // [num_tokens, num_heads, HD]
    const T* k_cache,                 // [num_blocks, block_size, num_kv_heads, HD]
    const T* v_cache,                 // [num_blocks, block_size, num_kv_heads, HD]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]: int8 pools, else null
    const float* v_scales,            // likewise
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    const unsigned* windows,          // [num_seqs, 3]: sinks, window, block offset (windowed)
    float* part_o,                    // [num_seqs, splits, num_heads, HD]
    float* part_ml,                   // [num_seqs, splits, num_heads, 2]
    int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq, int split_len,
    float scale, int sink_part, int split_base, int splits) {
    __shared__ float o_s[WARPS][MAX_GROUP][HD];
    __shared__ float ml_s[WARPS][MAX_GROUP][2];
    allow_next_grid();  // the merge, or the output product, may start
    wait_for_previous_grid();  // q and the new keys come from the kernel before
    const int sp = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
    const int warp = threadIdx.x >> 5, group = num_heads / num_kv_heads;
    Window win{block_table + (long long)s * max_blocks_per_seq, block_size, 0, 0};
    // The keys this launch reads: all of them; or under a sink window, the window (sink_part 0)
    // or the sinks (sink_part 1) of a sequence past its sinks and window.
    int lo = 0, hi = (int)seq_lens[s];
    if constexpr (WINDOWED) {
        const int sinks = (int)windows[3 * s], window = (int)windows[3 * s + 1];
        const bool streaming = window > 0 && hi - 1 >= sinks + window;
        win.sink_blocks = window > 0 ? (sinks + block_size - 1) / block_size : 0;
        win.offset = (int)windows[3 * s + 2];
        if (sink_part) {
            hi = streaming ? sinks : 0;
        } else if (streaming) {
            lo = hi - window;
        }
    }
    const int begin = lo + sp * split_len, end = min(hi, begin + split_len);
    const int row_stride = num_kv_heads * HD, head_off = kvh * HD;
    const long long token = query_start_loc[s];

    unsigned qa[HD / 16][4];
    load_q_permuted<HD>(qa, q + (token * num_heads + kvh * group) * HD, group);
    float o[HD / 8][4], m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) {
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    }
    const float scale_log2 = scale * 1.4426950408889634f;
    constexpr bool INT8 = IsInt8<T>::value;
    constexpr int ROWS = ChunkRows<T>::value, CHUNK = 8 * ROWS;
    using Piece = typename LoadPiece<T>::type;
    for (int j = begin + warp * CHUNK; j < end; j += WARPS * CHUNK) {
        Piece kr[ROWS][HD / 32], vr[ROWS][HD / 32];
        float ks[ROWS], vs[ROWS];
        load_rows<HD, ROWS>(kr, ks, k_cache, k_scales, win, row_stride, head_off, j, end);
        load_rows<HD, ROWS>(vr, vs, v_cache, v_scales, win, row_stride, head_off, j, end);
        chunk<HD, ROWS, INT8>(o, m, l, qa, kr, vr, ks, vs, scale_log2, j, end);
    }
    stash<HD>(o_s[warp], ml_s[warp], o, m, l, scale_log2);
    __syncthreads();
    for (int e = threadIdx.x; e < group * HD; e += blockDim.x) {
        const int row = e / HD, d = e % HD;
        float mx = NEG_INF;
        for (int w = 0; w < WARPS; ++w) {
            mx = fmaxf(mx, ml_s[w][row][0]);
        }
        const float ref = mx == NEG_INF ? 0.0f : mx;
        float sum = 0.0f, acc = 0.0f;
        for (int w = 0; w < WARPS; ++w) {
            const float f = fast_exp2(ml_s[w][row][0] - ref);
            sum += ml_s[w][row][1] * f;
            acc += o_s[w][row][d] * f;
        }
        const long long at = ((long long)s * splits + split_base + sp) * num_heads + kvh * group + row;
        part_o[at * HD + d] = sum > 0.0f ? acc / sum : 0.0f;
        if (d == 0) {
            part_ml[at * 2] = mx;
            part_ml[at * 2 + 1] = sum;
        }
    }
}

// Entry points: grid (splits, num_kv_heads, num_seqs), 128 threads; split_len a multiple of 64 (bf16
// pools) or 128 (int8: one step of the block's warps) keeps every warp busy;
// at most 16 query heads per KV head. The `_windowed` ones take sequences that may stream through
// sink windows, in two launches into one set of splits: the window (q, sink_part 0, splits
// [0, n)), then the sinks (q_sinks, sink_part 1, split n); `splits` counts both. At head_dim 128
// the int8 and windowed variants' registers do not fit the 3-blocks-per-SM budget without
// spilling: 2 there.
extern "C" __global__ void __launch_bounds__(WARPS * 32, 3) flash_decode_bf16_hd64(
    const float* q,                   // [num_tokens, num_heads, 64]: one row per sequence
    const bf16_t* k_cache,             // [num_blocks, block_size, num_kv_heads, 64]
    const bf16_t* v_cache,             // [num_blocks, block_size, num_kv_heads, 64]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    float* part_o,                    // [num_seqs, splits, num_heads, 64]
    float* part_ml,                   // [num_seqs, splits, num_heads, 2]
    int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq, int split_len,
    float scale) {
    decode<64, bf16_t, false>(q, k_cache, v_cache, nullptr, nullptr, query_start_loc, seq_lens, block_table, nullptr, part_o, part_ml, num_heads, num_kv_heads, block_size, max_blocks_per_seq, split_len, scale, 0, 0, (int)gridDim.x);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, 3) flash_decode_bf16_hd128(
    const float* q,                   // [num_tokens, num_heads, 128]: one row per sequence
    const bf16_t* k_cache,             // [num_blocks, block_size, num_kv_heads, 128]
    const bf16_t* v_cache,             // [num_blocks, block_size, num_kv_heads, 128]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    float* part_o,                    // [num_seqs, splits, num_heads, 128]
    float* part_ml,                   // [num_seqs, splits, num_heads, 2]
    int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq, int split_len,
    float scale) {
    decode<128, bf16_t, false>(q, k_cache, v_cache, nullptr, nullptr, query_start_loc, seq_lens, block_table, nullptr, part_o, part_ml, num_heads, num_kv_heads, block_size, max_blocks_per_seq, split_len, scale, 0, 0, (int)gridDim.x);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, 3) flash_decode_windowed_bf16_hd64(
    const float* q,                   // [num_tokens, num_heads, 64]: one row per sequence
    const bf16_t* k_cache,             // [num_blocks, block_size, num_kv_heads, 64]
    const bf16_t* v_cache,             // [num_blocks, block_size, num_kv_heads, 64]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    const unsigned* windows,          // [num_seqs, 3]: sinks, window, block offset
    float* part_o,                    // [num_seqs, splits, num_heads, 64]
    float* part_ml,                   // [num_seqs, splits, num_heads, 2]
    int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq, int split_len,
    float scale, int sink_part, int split_base, int splits) {
    decode<64, bf16_t, true>(q, k_cache, v_cache, nullptr, nullptr, query_start_loc, seq_lens, block_table, windows, part_o, part_ml, num_heads, num_kv_heads, block_size, max_blocks_per_seq, split_len, scale, sink_part, split_base, splits);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, 2) flash_decode_windowed_bf16_hd128(
    const float* q,                   // [num_tokens, num_heads, 128]: one row per sequence
    const bf16_t* k_cache,             // [num_blocks, block_size, num_kv_heads, 128]
    const bf16_t* v_cache,             // [num_blocks, block_size, num_kv_heads, 128]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    const unsigned* windows,          // [num_seqs, 3]: sinks, window, block offset
    float* part_o,                    // [num_seqs, splits, num_heads, 128]
    float* part_ml,                   // [num_seqs, splits, num_heads, 2]
    int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq, int split_len,
    float scale, int sink_part, int split_base, int splits) {
    decode<128, bf16_t, true>(q, k_cache, v_cache, nullptr, nullptr, query_start_loc, seq_lens, block_table, windows, part_o, part_ml, num_heads, num_kv_heads, block_size, max_blocks_per_seq, split_len, scale, sink_part, split_base, splits);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, 3) flash_decode_int8_hd64(
    const float* q,                   // [num_tokens, num_heads, 64]: one row per sequence
    const signed char* k_cache,        // [num_blocks, block_size, num_kv_heads, 64]
    const signed char* v_cache,        // [num_blocks, block_size, num_kv_heads, 64]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]
    const float* v_scales,            // [num_blocks, block_size, num_kv_heads]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    float* part_o,                    // [num_seqs, splits, num_heads, 64]
    float* part_ml,                   // [num_seqs, splits, num_heads, 2]
    int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq, int split_len,
    float scale) {
    decode<64, signed char, false>(q, k_cache, v_cache, k_scales, v_scales, query_start_loc, seq_lens, block_table, nullptr, part_o, part_ml, num_heads, num_kv_heads, block_size, max_blocks_per_seq, split_len, scale, 0, 0, (int)gridDim.x);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, 2) flash_decode_int8_hd128(
    const float* q,                   // [num_tokens, num_heads, 128]: one row per sequence
    const signed char* k_cache,        // [num_blocks, block_size, num_kv_heads, 128]
    const signed char* v_cache,        // [num_blocks, block_size, num_kv_heads, 128]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]
    const float* v_scales,            // [num_blocks, block_size, num_kv_heads]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    float* part_o,                    // [num_seqs, splits, num_heads, 128]
    float* part_ml,                   // [num_seqs, splits, num_heads, 2]
    int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq, int split_len,
    float scale) {
    decode<128, signed char, false>(q, k_cache, v_cache, k_scales, v_scales, query_start_loc, seq_lens, block_table, nullptr, part_o, part_ml, num_heads, num_kv_heads, block_size, max_blocks_per_seq, split_len, scale, 0, 0, (int)gridDim.x);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, 3) flash_decode_windowed_int8_hd64(
    const float* q,                   // [num_tokens, num_heads, 64]: one row per sequence
    const signed char* k_cache,        // [num_blocks, block_size, num_kv_heads, 64]
    const signed char* v_cache,        // [num_blocks, block_size, num_kv_heads, 64]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]
    const float* v_scales,            // [num_blocks, block_size, num_kv_heads]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    const unsigned* windows,          // [num_seqs, 3]: sinks, window, block offset
    float* part_o,                    // [num_seqs, splits, num_heads, 64]
    float* part_ml,                   // [num_seqs, splits, num_heads, 2]
    int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq, int split_len,
    float scale, int sink_part, int split_base, int splits) {
    decode<64, signed char, true>(q, k_cache, v_cache, k_scales, v_scales, query_start_loc, seq_lens, block_table, windows, part_o, part_ml, num_heads, num_kv_heads, block_size, max_blocks_per_seq, split_len, scale, sink_part, split_base, splits);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, 2) flash_decode_windowed_int8_hd128(
    const float* q,                   // [num_tokens, num_heads, 128]: one row per sequence
    const signed char* k_cache,        // [num_blocks, block_size, num_kv_heads, 128]
    const signed char* v_cache,        // [num_blocks, block_size, num_kv_heads, 128]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]
    const float* v_scales,            // [num_blocks, block_size, num_kv_heads]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    const unsigned* windows,          // [num_seqs, 3]: sinks, window, block offset
    float* part_o,                    // [num_seqs, splits, num_heads, 128]
    float* part_ml,                   // [num_seqs, splits, num_heads, 2]
    int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq, int split_len,
    float scale, int sink_part, int split_base, int splits) {
    decode<128, signed char, true>(q, k_cache, v_cache, k_scales, v_scales, query_start_loc, seq_lens, block_table, windows, part_o, part_ml, num_heads, num_kv_heads, block_size, max_blocks_per_seq, split_len, scale, sink_part, split_base, splits);
}

// Merges the splits of one (head, sequence): softmax-weighted sum of their normalized outputs.
// Grid (num_heads, num_seqs), REDUCE_THREADS threads (head_dim a multiple of 4, at most 4 ·
// REDUCE_THREADS / 4). A decode step at batch 1 has few (head, sequence) pairs and many splits, so
// the splits are read in parallel, not one after the other: the block finds the largest split max
// together, then its threads form groups of head_dim / 4 lanes, each group takes every groups-th
// split (one 16-byte load of the output per lane and split, all in flight together), and the
// groups' weighted sums meet in shared memory.
#define REDUCE_THREADS 256

// The largest value over the block; every thread gets it. `scratch` holds 32 floats of shared memory.
__device__ __forceinline__ float reduce_block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < REDUCE_THREADS / 32 ? scratch[lane] : NEG_INF;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS) flash_decode_reduce(
    const float* part_o,              // [num_seqs, splits, num_heads, head_dim]
    const float* part_ml,             // [num_seqs, splits, num_heads, 2]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    float* out,                       // [num_tokens, num_heads, head_dim]
    int splits, int num_heads, int head_dim) {
    __shared__ float scratch[32];
    __shared__ float4 partial[REDUCE_THREADS];
    __shared__ float weights[REDUCE_THREADS];
    allow_next_grid();  // the output product may start fetching its weights
    wait_for_previous_grid();  // the splits come from the decode kernel
    const int h = blockIdx.x, s = blockIdx.y, tid = threadIdx.x;
    const long long first = (long long)s * splits * num_heads + h;
    float mx = NEG_INF;
    for (int sp = tid; sp < splits; sp += REDUCE_THREADS) {
        const long long at = first + (long long)sp * num_heads;
        if (part_ml[at * 2 + 1] > 0.0f) {
            mx = fmaxf(mx, part_ml[at * 2]);
        }
    }
    mx = reduce_block_max(mx, scratch);
    const int lanes = head_dim / 4, groups = REDUCE_THREADS / lanes;
    const int g = tid / lanes, lane = tid % lanes;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float sum = 0.0f;
    if (g < groups) {
        for (int sp = g; sp < splits; sp += groups) {
            const long long at = first + (long long)sp * num_heads;
            const float l = part_ml[at * 2 + 1];
            if (l > 0.0f) {
                const float w = l * fast_exp2(part_ml[at * 2] - mx);
                const float4 o = reinterpret_cast<const float4*>(part_o + at * head_dim)[lane];
                sum += w;
                acc.x += w * o.x, acc.y += w * o.y, acc.z += w * o.z, acc.w += w * o.w;
            }
        }
    }
    partial[tid] = acc;
    weights[tid] = lane == 0 && g < groups ? sum : 0.0f;
    __syncthreads();
    float total = 0.0f;
    for (int k = 0; k < groups; ++k) total += weights[k * lanes];
    if (tid < lanes) {
        float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int k = 0; k < groups; ++k) {
            const float4 p = partial[k * lanes + tid];
            t.x += p.x, t.y += p.y, t.z += p.z, t.w += p.w;
        }
        const float inv = total > 0.0f ? 1.0f / total : 0.0f;
        const long long token = query_start_loc[s];
        float4* dst = reinterpret_cast<float4*>(out + (token * num_heads + h) * head_dim) + tid;
        *dst = make_float4(t.x * inv, t.y * inv, t.z * inv, t.w * inv);
    }
}
