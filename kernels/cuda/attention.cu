// Attention with an online softmax: causal over the paged KV pool (decoder), bidirectional within each
// sequence of a packed varlen batch (encoder).
//
// First, plain version: one block per (query row, head), head_dim threads (a multiple of 32, at most
// 256). Keys stream in tiles of TILE: each warp scores keys of the tile (lanes split the head), the
// tile's scores go through shared memory, then every thread rescales its running output element once
// per tile and adds the tile's values. Correct for any length; speed comes in later versions.
//
// Sink windows (StreamingLLM): a query at position p past its sinks and window scores the sink keys
// with its sink-rotated row (q_sinks, rotated to its position within the cache) and the keys
// p + 1 - window ..= p with its own row, in one online softmax.
#include "common.cuh"

#define TILE 32
#define MAX_HEAD_DIM 256

// A sequence's keys in the paged pool [num_blocks, block_size, num_kv_heads, head_dim]. Logical block b
// is row entry b below sink_blocks and b - block_offset from there on (a window's row skips the blocks
// it dropped); both are 0 for dense attention. int8 pools carry one scale per (slot, head); the
// others none (null).
template <typename T>
struct PagedKeys {
    const T* k;              // [num_blocks, block_size, num_kv_heads, head_dim]
    const T* v;              // [num_blocks, block_size, num_kv_heads, head_dim]
    const float* k_scales;   // [num_blocks, block_size, num_kv_heads], or null
    const float* v_scales;   // [num_blocks, block_size, num_kv_heads], or null
    int head_dim;
    const unsigned* blocks;  // [max_blocks_per_seq]: this sequence's row of the block table
    int block_size;
    int row_stride;  // num_kv_heads * head_dim
    int head_off;    // kv_head * head_dim
    int sink_blocks;
    int block_offset;
    __device__ long long offset(int j) const {
        const int b = j / block_size;
        const int entry = b < sink_blocks ? b : b - block_offset;
        const long long slot = (long long)blocks[entry] * block_size + j % block_size;
        return slot * row_stride + head_off;
    }
    // Scales of the key and value at element offset o (a row's first element).
    __device__ float k_scale(long long o) const { return k_scales ? k_scales[o / head_dim] : 1.0f; }
    __device__ float v_scale(long long o) const { return v_scales ? v_scales[o / head_dim] : 1.0f; }
};

// A sequence's keys in dense rows [tokens, num_kv_heads, head_dim] starting at row `start`.
struct DenseKeys {
    const float* k;  // [tokens, num_kv_heads, head_dim]
    const float* v;  // [tokens, num_kv_heads, head_dim]
    long long start;
    int row_stride;
    int head_off;
    __device__ long long offset(int j) const { return (start + j) * row_stride + head_off; }
    __device__ float k_scale(long long) const { return 1.0f; }
    __device__ float v_scale(long long) const { return 1.0f; }
};

// Running online-softmax state of one output element.
struct Softmax {
    float m, l, acc;
};

// Folds keys begin..end, scored against q, into the block's online softmax; the block's threads each own
// one output element.
template <typename Keys>
__device__ void absorb(
    const float* q,  // [head_dim]: this row's head
    Keys kv,
    int begin,
    int end,
    int head_dim,
    float scale,
    Softmax& st) {
    __shared__ float q_s[MAX_HEAD_DIM];
    __shared__ float s_s[TILE];
    const int d = threadIdx.x, lane = d & 31, warp = d >> 5, warps = blockDim.x >> 5;
    __syncthreads();
    q_s[d] = q[d];
    __syncthreads();
    for (int j0 = begin; j0 < end; j0 += TILE) {
        const int n = min(TILE, end - j0);
        for (int jj = warp; jj < n; jj += warps) {
            const long long o = kv.offset(j0 + jj);
            float s = 0.0f;
            for (int e = lane; e < head_dim; e += 32) {
                s += q_s[e] * load_f32(kv.k + o + e);
            }
            s = warp_sum(s);
            if (lane == 0) {
                s_s[jj] = s * kv.k_scale(o) * scale;
            }
        }
        __syncthreads();
        float tile_max = st.m;
        for (int jj = 0; jj < n; ++jj) {
            tile_max = fmaxf(tile_max, s_s[jj]);
        }
        const float correction = expf(st.m - tile_max);
        st.l *= correction;
        st.acc *= correction;
        for (int jj = 0; jj < n; ++jj) {
            const float p = expf(s_s[jj] - tile_max);
            st.l += p;
            const long long o = kv.offset(j0 + jj);
            st.acc += p * load_f32(kv.v + o + d) * kv.v_scale(o);
        }
        st.m = tile_max;
        __syncthreads();
    }
}

// Softmax(q·Kᵀ·scale)·V over the first `visible` keys, for one query row and head.
template <typename Keys>
__device__ void attend(
    const float* q,  // [head_dim]: this row's head
    Keys kv,
    int visible,
    int head_dim,
    float scale,
    float* out) {    // [head_dim]
    Softmax st = {NEG_INF, 0.0f, 0.0f};
    absorb(q, kv, 0, visible, head_dim, scale, st);
    out[threadIdx.x] = st.l > 0.0f ? st.acc / st.l : 0.0f;
}

// Index of the sequence owning query row t: the last s with query_start_loc[s] <= t.
__device__ __forceinline__ int seq_of(
    const unsigned* query_start_loc,  // [num_seqs + 1]
    int num_seqs,
    int t) {
    int lo = 0, hi = num_seqs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if ((int)query_start_loc[mid] <= t) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

// One (query row, head) of causal paged attention, for the entry points below.
template <typename T>
__device__ void paged(
    const float* q,                   // [num_tokens, num_heads, head_dim]
    const T* k_cache,                 // [num_blocks, block_size, num_kv_heads, head_dim]
    const T* v_cache,                 // [num_blocks, block_size, num_kv_heads, head_dim]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]: int8 pools, else null
    const float* v_scales,            // likewise
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    float* out,                       // [num_tokens, num_heads, head_dim]
    int num_seqs, int num_heads, int num_kv_heads, int head_dim, int block_size,
    int max_blocks_per_seq, float scale) {
    const int t = blockIdx.x, h = blockIdx.y;
    const int s = seq_of(query_start_loc, num_seqs, t);
    const int q_len = (int)(query_start_loc[s + 1] - query_start_loc[s]);
    const int i = t - (int)query_start_loc[s];
    const int visible = (int)seq_lens[s] - q_len + i + 1;
    const int kv_head = h / (num_heads / num_kv_heads);
    PagedKeys<T> kv;
    kv.k = k_cache;
    kv.v = v_cache;
    kv.k_scales = k_scales;
    kv.v_scales = v_scales;
    kv.head_dim = head_dim;
    kv.blocks = block_table + (long long)s * max_blocks_per_seq;
    kv.block_size = block_size;
    kv.row_stride = num_kv_heads * head_dim;
    kv.head_off = kv_head * head_dim;
    kv.sink_blocks = 0;
    kv.block_offset = 0;
    const long long row = ((long long)t * num_heads + h) * head_dim;
    attend(q + row, kv, visible, head_dim, scale, out + row);
}

// One (query row, head) of causal paged attention where sequences may stream through sink windows.
template <typename T>
__device__ void paged_windowed(
    const float* q,                   // [num_tokens, num_heads, head_dim]
    const float* q_sinks,             // [num_tokens, num_heads, head_dim]: rotated to in-cache positions
    const T* k_cache,                 // [num_blocks, block_size, num_kv_heads, head_dim]
    const T* v_cache,                 // [num_blocks, block_size, num_kv_heads, head_dim]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]: int8 pools, else null
    const float* v_scales,            // likewise
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    const unsigned* windows,          // [num_seqs, 3]: sinks, window (0: dense), block offset
    float* out,                       // [num_tokens, num_heads, head_dim]
    int num_seqs, int num_heads, int num_kv_heads, int head_dim, int block_size,
    int max_blocks_per_seq, float scale) {
    const int t = blockIdx.x, h = blockIdx.y;
    const int s = seq_of(query_start_loc, num_seqs, t);
    const int q_len = (int)(query_start_loc[s + 1] - query_start_loc[s]);
    const int pos = (int)seq_lens[s] - q_len + (t - (int)query_start_loc[s]);
    const int sinks = (int)windows[3 * s], window = (int)windows[3 * s + 1];
    PagedKeys<T> kv;
    kv.k = k_cache;
    kv.v = v_cache;
    kv.k_scales = k_scales;
    kv.v_scales = v_scales;
    kv.head_dim = head_dim;
    kv.blocks = block_table + (long long)s * max_blocks_per_seq;
    kv.block_size = block_size;
    kv.row_stride = num_kv_heads * head_dim;
    kv.head_off = h / (num_heads / num_kv_heads) * head_dim;
    kv.sink_blocks = window > 0 ? (sinks + block_size - 1) / block_size : 0;
    kv.block_offset = (int)windows[3 * s + 2];
    const long long row = ((long long)t * num_heads + h) * head_dim;
    Softmax st = {NEG_INF, 0.0f, 0.0f};
    if (window == 0 || pos < sinks + window) {
        absorb(q + row, kv, 0, pos + 1, head_dim, scale, st);
    } else {
        absorb(q_sinks + row, kv, 0, sinks, head_dim, scale, st);
        absorb(q + row, kv, pos + 1 - window, pos + 1, head_dim, scale, st);
    }
    out[row + threadIdx.x] = st.l > 0.0f ? st.acc / st.l : 0.0f;
}

// Causal attention with sink windows over an f32 paged pool. Grid (num_tokens, num_heads), block
// head_dim threads.
extern "C" __global__ void paged_attention_windowed_f32(
    const float* q, const float* q_sinks, const float* k_cache, const float* v_cache,
    const unsigned* query_start_loc, const unsigned* seq_lens, const unsigned* block_table,
    const unsigned* windows, float* out, int num_seqs, int num_heads, int num_kv_heads,
    int head_dim, int block_size, int max_blocks_per_seq, float scale) {
    paged_windowed(q, q_sinks, k_cache, v_cache, nullptr, nullptr, query_start_loc, seq_lens,
                   block_table, windows, out, num_seqs, num_heads, num_kv_heads, head_dim,
                   block_size, max_blocks_per_seq, scale);
}

// Causal attention with sink windows over a bf16 paged pool. Grid (num_tokens, num_heads), block
// head_dim threads.
extern "C" __global__ void paged_attention_windowed_bf16(
    const float* q, const float* q_sinks, const bf16_t* k_cache, const bf16_t* v_cache,
    const unsigned* query_start_loc, const unsigned* seq_lens, const unsigned* block_table,
    const unsigned* windows, float* out, int num_seqs, int num_heads, int num_kv_heads,
    int head_dim, int block_size, int max_blocks_per_seq, float scale) {
    paged_windowed(q, q_sinks, k_cache, v_cache, nullptr, nullptr, query_start_loc, seq_lens,
                   block_table, windows, out, num_seqs, num_heads, num_kv_heads, head_dim,
                   block_size, max_blocks_per_seq, scale);
}

// Causal attention over an f32 paged pool. Grid (num_tokens, num_heads), block head_dim threads.
extern "C" __global__ void paged_attention_f32(
    const float* q,                   // [num_tokens, num_heads, head_dim]
    const float* k_cache,             // [num_blocks, block_size, num_kv_heads, head_dim]
    const float* v_cache,             // [num_blocks, block_size, num_kv_heads, head_dim]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    float* out,                       // [num_tokens, num_heads, head_dim]
    int num_seqs, int num_heads, int num_kv_heads, int head_dim, int block_size,
    int max_blocks_per_seq, float scale) {
    paged(q, k_cache, v_cache, nullptr, nullptr, query_start_loc, seq_lens, block_table, out,
          num_seqs, num_heads, num_kv_heads, head_dim, block_size, max_blocks_per_seq, scale);
}

// Causal attention over a bf16 paged pool. Grid (num_tokens, num_heads), block head_dim threads.
extern "C" __global__ void paged_attention_bf16(
    const float* q,                   // [num_tokens, num_heads, head_dim]
    const bf16_t* k_cache,            // [num_blocks, block_size, num_kv_heads, head_dim]
    const bf16_t* v_cache,            // [num_blocks, block_size, num_kv_heads, head_dim]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    float* out,                       // [num_tokens, num_heads, head_dim]
    int num_seqs, int num_heads, int num_kv_heads, int head_dim, int block_size,
    int max_blocks_per_seq, float scale) {
    paged(q, k_cache, v_cache, nullptr, nullptr, query_start_loc, seq_lens, block_table, out,
          num_seqs, num_heads, num_kv_heads, head_dim, block_size, max_blocks_per_seq, scale);
}

// Causal attention over an int8 paged pool (one scale per slot and head). Grid (num_tokens,
// num_heads), block head_dim threads.
extern "C" __global__ void paged_attention_int8(
    const float* q,                   // [num_tokens, num_heads, head_dim]
    const signed char* k_cache,       // [num_blocks, block_size, num_kv_heads, head_dim]
    const signed char* v_cache,       // [num_blocks, block_size, num_kv_heads, head_dim]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]
    const float* v_scales,            // [num_blocks, block_size, num_kv_heads]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    float* out,                       // [num_tokens, num_heads, head_dim]
    int num_seqs, int num_heads, int num_kv_heads, int head_dim, int block_size,
    int max_blocks_per_seq, float scale) {
    paged(q, k_cache, v_cache, k_scales, v_scales, query_start_loc, seq_lens, block_table, out,
          num_seqs, num_heads, num_kv_heads, head_dim, block_size, max_blocks_per_seq, scale);
}

// Causal attention with sink windows over an int8 paged pool. Grid (num_tokens, num_heads), block
// head_dim threads.
extern "C" __global__ void paged_attention_windowed_int8(
    const float* q, const float* q_sinks, const signed char* k_cache, const signed char* v_cache,
    const float* k_scales, const float* v_scales, const unsigned* query_start_loc,
    const unsigned* seq_lens, const unsigned* block_table, const unsigned* windows, float* out,
    int num_seqs, int num_heads, int num_kv_heads, int head_dim, int block_size,
    int max_blocks_per_seq, float scale) {
    paged_windowed(q, q_sinks, k_cache, v_cache, k_scales, v_scales, query_start_loc, seq_lens,
                   block_table, windows, out, num_seqs, num_heads, num_kv_heads, head_dim,
                   block_size, max_blocks_per_seq, scale);
}

// Bidirectional attention within each sequence of a packed batch. Grid (num_tokens, num_heads), block
// head_dim threads.
extern "C" __global__ void varlen_attention_f32(
    const float* q,                   // [num_tokens, num_heads, head_dim]
    const float* k,                   // [num_tokens, num_kv_heads, head_dim]
    const float* v,                   // [num_tokens, num_kv_heads, head_dim]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    float* out,                       // [num_tokens, num_heads, head_dim]
    int num_seqs, int num_heads, int num_kv_heads, int head_dim, float scale) {
    const int t = blockIdx.x, h = blockIdx.y;
    const int s = seq_of(query_start_loc, num_seqs, t);
    DenseKeys kv;
    kv.k = k;
    kv.v = v;
    kv.start = query_start_loc[s];
    kv.row_stride = num_kv_heads * head_dim;
    kv.head_off = h / (num_heads / num_kv_heads) * head_dim;
    const long long row = ((long long)t * num_heads + h) * head_dim;
    const int len = (int)(query_start_loc[s + 1] - query_start_loc[s]);
    attend(q + row, kv, len, head_dim, scale, out + row);
}
