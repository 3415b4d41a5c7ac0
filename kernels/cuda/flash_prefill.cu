// Prefill attention, FlashAttention-2 style, over a bf16 or int8 paged KV pool: causal, GQA, varlen
// batches (query_start_loc / seq_lens), chunks after a cached prefix (a sequence's queries are the last
// rows of its context). int8 tiles are staged raw (with their scales) and widened to bf16 in shared
// memory (exactly) before the mma code reads them; the scales multiply the scores, and the
// probabilities before P·V, in f32.
//
// One block of PREFILL_WARPS warps per (tile of 32 · PREFILL_WARPS query rows of one sequence, query
// head); each warp owns 32 rows (two mma row tiles, so every K and V fragment read from shared memory
// feeds two mmas). Keys stream through shared memory in tiles of 64, gathered through the block table
// with cp.async into two stages (the next tile's K and V load while this tile is computed). Q·Kᵀ and
// P·V are mma.sync m16n8k16 (bf16 in, f32 accumulate); the online softmax stays in registers. Q
// arrives as f32 and is rounded to bf16 once, into shared memory; the output is written as f32. Key
// tiles past the block's last visible key are never visited; only tiles crossing the diagonal are
// masked.
//
// Under sink windows a block reads only its rows' windows (and the sinks), so a step of a few
// thousand rows has few blocks (one a query tile and head) and each a long run of key tiles: the
// windowed entry points then split the window's tiles over gridDim.z blocks, which write their rows'
// outputs with their softmax references and sums, and flash_prefill_merge combines the splits.
#include "common.cuh"

// Warps per block, 32 query rows each (the host reads the block size back as the kernel's launch
// bound; a power of two up to 4); blocks per SM the register budget is cut for. Other values are for
// kernel-lab comparisons.
#ifndef PREFILL_WARPS
#define PREFILL_WARPS 4
#endif
#ifndef PREFILL_MIN_BLOCKS
#define PREFILL_MIN_BLOCKS 2
#endif
#define MT 2                          // mma row tiles (16 rows) per warp
#define THREADS (PREFILL_WARPS * 32)
#define BM (PREFILL_WARPS * 16 * MT)  // query rows per block
// Keys per tile of bf16 pools (64; 32 is a kernel-lab variant); the host sizes their shared memory
// for 64.
#ifndef BN_HD128
#define BN_HD128 64
#endif
#ifndef BN_HD64
#define BN_HD64 64
#endif
#define BN_OF(HD) ((HD) == 128 ? BN_HD128 : BN_HD64)
#define PAD 8                    // bf16 padding per shared row: conflict-free ldmatrix
// KV block sizes the kernel takes are multiples of this (the host checks).
#define PREFILL_BLOCK_MULTIPLE 8

// Issues the async copies of keys [j0, j0 + BN) of one KV head into shared K and V tiles;
// rows at or past `end` are zero-filled. Each thread copies one 16-byte column piece of
// BN·HD/8/THREADS consecutive rows (4 at head_dim 64, 8 at 128), which share one KV block
// since the block size is a multiple of PREFILL_BLOCK_MULTIPLE: one block-table lookup per tile, then
// a fixed stride (the lookups, each a dependent global load, were a third of the kernel's stall
// samples when made per row).
template <int HD, int BN>
__device__ __forceinline__ void load_tiles(
    bf16_t (*k_dst)[HD + PAD],  // [BN][HD + PAD], shared
    bf16_t (*v_dst)[HD + PAD],  // [BN][HD + PAD], shared
    const bf16_t* k_pool,       // [num_blocks, block_size, num_kv_heads, HD]: at the KV head
    const bf16_t* v_pool,       // [num_blocks, block_size, num_kv_heads, HD]: at the KV head
    KeyBlocks kb, int row_stride, int j0, int end) {
    constexpr int CHUNKS = HD / 8;              // 16-byte pieces per row
    constexpr int ROWS = BN * CHUNKS / THREADS;  // rows per thread
    static_assert(BN * CHUNKS % THREADS == 0 && THREADS % CHUNKS == 0 &&
                      PREFILL_BLOCK_MULTIPLE % ROWS == 0,
                  "threads must tile the rows, each thread's rows within one KV block");
    const int col = (threadIdx.x % CHUNKS) * 8, r0 = threadIdx.x / CHUNKS * ROWS;
    const unsigned k_base = smem_addr(&k_dst[r0][col]), v_base = smem_addr(&v_dst[r0][col]);
    constexpr unsigned STEP = (HD + PAD) * 2;  // bytes between shared rows
    const int first = j0 + r0;
    long long off = col;
    // Rows past `end`, or in a block that left a sink window, are zero-filled.
    int stop = first;
    if (first < end) {
        const long long slot = kb.slot(first);
        if (slot >= 0) {
            off += slot * row_stride;
            stop = end;
        }
    }
// Unrolled at head_dim 128, the copies' addresses cost the registers its 64-key tiles need.
#pragma unroll(HD == 128 ? 1 : 8)
    for (int i = 0; i < ROWS; ++i) {
        const int bytes = first + i < stop ? 16 : 0;
        cp_async_16(k_base + i * STEP, k_pool + off, bytes);
        cp_async_16(v_base + i * STEP, v_pool + off, bytes);
        off += first + i + 1 < stop ? row_stride : 0;
    }
}

// int8 pools: the raw bytes of keys [j0, j0 + BN) of one KV head and their scales, copied
// asynchronously into one staging slot (rows at or past `end` zero-filled). Each thread copies one
// 16-byte piece of BN·HD/16/THREADS consecutive rows of one KV block, and the thread with the
// first piece of a row copies its scales.
template <int HD, int BN>
__device__ __forceinline__ void load_raw(
    signed char (*k_dst)[HD],     // [BN][HD], shared
    signed char (*v_dst)[HD],     // [BN][HD], shared
    float* ks_dst, float* vs_dst,  // [BN], shared
    const signed char* k_pool,    // [num_blocks, block_size, num_kv_heads, HD]: at the KV head
    const signed char* v_pool,    // [num_blocks, block_size, num_kv_heads, HD]: at the KV head
    const float* k_scales,        // [num_blocks, block_size, num_kv_heads]: at the KV head
    const float* v_scales,        // [num_blocks, block_size, num_kv_heads]: at the KV head
    KeyBlocks kb, int num_kv_heads, int j0, int end) {
    constexpr int CHUNKS = HD / 16;
    constexpr int ROWS = BN * CHUNKS / THREADS;
    static_assert(BN * CHUNKS % THREADS == 0 && THREADS % CHUNKS == 0 &&
                      PREFILL_BLOCK_MULTIPLE % ROWS == 0,
                  "threads must tile the rows, each thread's rows within one KV block");
    const int col = (threadIdx.x % CHUNKS) * 16, r0 = threadIdx.x / CHUNKS * ROWS;
    const int first = j0 + r0;
    long long slot = 0;
    int stop = first;  // rows from here on are zero-filled (past `end`, or out of the window)
    if (first < end) {
        slot = kb.slot(first);
        stop = slot >= 0 ? end : first;
    }
    const int row_stride = num_kv_heads * HD;
// Rolled at head_dim 128, as in load_tiles: the 64-key tiles' accumulators hold the registers.
#pragma unroll(HD == 128 ? 1 : 4)
    for (int i = 0; i < ROWS; ++i) {
        const bool in = first + i < stop;
        const long long at = in ? slot + i : 0;
        cp_async_16(smem_addr(&k_dst[r0 + i][col]), k_pool + at * row_stride + col, in ? 16 : 0);
        cp_async_16(smem_addr(&v_dst[r0 + i][col]), v_pool + at * row_stride + col, in ? 16 : 0);
        if (col == 0) {
            cp_async_4(smem_addr(&ks_dst[r0 + i]), k_scales + at * num_kv_heads, in ? 4 : 0);
            cp_async_4(smem_addr(&vs_dst[r0 + i]), v_scales + at * num_kv_heads, in ? 4 : 0);
        }
    }
}

// The staged int8 tile widened into the bf16 K and V tiles the mma code reads (exact: |q| ≤ 127);
// the rows' scales are applied to the scores and probabilities (scale_key_columns).
template <int HD, int BN>
__device__ __forceinline__ void widen_tiles(
    bf16_t (*k_dst)[HD + PAD], bf16_t (*v_dst)[HD + PAD],           // [BN][HD + PAD], shared
    const signed char (*k_src)[HD], const signed char (*v_src)[HD]) {  // [BN][HD], shared
    constexpr int PIECES = BN * HD / 8;  // 8 values each
#pragma unroll(HD == 128 ? 1 : 4)
    for (int i = threadIdx.x; i < PIECES; i += THREADS) {
        const int row = i / (HD / 8), col = (i % (HD / 8)) * 8;
        const uint2 kr = *reinterpret_cast<const uint2*>(&k_src[row][col]);
        const uint2 vr = *reinterpret_cast<const uint2*>(&v_src[row][col]);
        *reinterpret_cast<uint4*>(&k_dst[row][col]) = widen_int8x8(kr);
        *reinterpret_cast<uint4*>(&v_dst[row][col]) = widen_int8x8(vr);
    }
}

// The block's query rows, rounded to bf16, into shared memory; rows past `rows` are zero.
template <int HD>
__device__ __forceinline__ void store_q(
    bf16_t (*q_s)[HD + PAD],  // [BM][HD + PAD], shared
    const float* q,           // [num_tokens, num_heads, HD]: at the block's first row and head
    int q_stride, int rows) {
    for (int i = threadIdx.x; i < BM * HD / 4; i += THREADS) {
        const int row = i / (HD / 4), col = (i % (HD / 4)) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row < rows) {
            v = *reinterpret_cast<const float4*>(q + (long long)row * q_stride + col);
        }
        *reinterpret_cast<uint2*>(&q_s[row][col]) =
            make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
    }
}

// S = Q·Kᵀ for the warp's 32 rows and the tile's BN keys.
template <int HD, int BN>
__device__ __forceinline__ void scores(
    float (*sc)[BN / 8][4],   // [MT][BN / 8][4]
    bf16_t (*q_s)[HD + PAD],  // [32][HD + PAD], shared: the warp's rows
    bf16_t (*k_s)[HD + PAD]) {  // [BN][HD + PAD], shared
    const int lane = threadIdx.x & 31, mi = lane >> 3, r = lane & 7;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
            sc[mt][nt][0] = sc[mt][nt][1] = sc[mt][nt][2] = sc[mt][nt][3] = 0.0f;
        }
    }
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        unsigned qa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            ldmatrix_x4(qa[mt],
                        smem_addr(&q_s[mt * 16 + (mi & 1) * 8 + r][kk * 16 + (mi >> 1) * 8]));
        }
#pragma unroll
        for (int np = 0; np < BN / 16; ++np) {
            unsigned b[4];
            ldmatrix_x4(b, smem_addr(&k_s[np * 16 + (mi >> 1) * 8 + r][kk * 16 + (mi & 1) * 8]));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_bf16_16816(sc[mt][2 * np], qa[mt], b[0], b[1]);
                mma_bf16_16816(sc[mt][2 * np + 1], qa[mt], b[2], b[3]);
            }
        }
    }
}

// O += P·V for the warp's 32 rows; P (probabilities, f32 fragments) is rounded to bf16 here.
template <int HD, int BN>
__device__ __forceinline__ void accumulate(
    float (*o)[HD / 8][4],      // [MT][HD / 8][4]
    float (*sc)[BN / 8][4],     // [MT][BN / 8][4]
    bf16_t (*v_s)[HD + PAD]) {  // [BN][HD + PAD], shared
    const int lane = threadIdx.x & 31, mi = lane >> 3, r = lane & 7;
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks) {
        unsigned pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            pa[mt][0] = pack_bf16x2(sc[mt][2 * ks][0], sc[mt][2 * ks][1]);
            pa[mt][1] = pack_bf16x2(sc[mt][2 * ks][2], sc[mt][2 * ks][3]);
            pa[mt][2] = pack_bf16x2(sc[mt][2 * ks + 1][0], sc[mt][2 * ks + 1][1]);
            pa[mt][3] = pack_bf16x2(sc[mt][2 * ks + 1][2], sc[mt][2 * ks + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < HD / 16; ++dp) {
            unsigned b[4];
            ldmatrix_x4_trans(
                b, smem_addr(&v_s[ks * 16 + (mi & 1) * 8 + r][dp * 16 + (mi >> 1) * 8]));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_bf16_16816(o[mt][2 * dp], pa[mt], b[0], b[1]);
                mma_bf16_16816(o[mt][2 * dp + 1], pa[mt], b[2], b[3]);
            }
        }
    }
}

// Under a sink window, masks what each row does not see in the current phase: in the sink phase
// (Q rotated to in-cache positions) the keys at or past `sinks`, and every key of rows not yet past
// their sinks and window; in the window phase keys past the row's position and, for rows past their
// sinks and window, keys before the window.
template <int BN>
__device__ __forceinline__ void mask_window(
    float (*sc)[4],  // [BN / 8][4]
    int j0, int pos0, bool sink_phase, int sinks, int window) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int j = j0 + nt * 8 + 2 * t + (i & 1), pos = pos0 + g + (i >> 1) * 8;
            const bool streaming = window > 0 && pos >= sinks + window;
            const bool hidden = sink_phase ? (j >= sinks || !streaming)
                                           : (j > pos || (streaming && j <= pos - window));
            sc[nt][i] = hidden ? NEG_INF : sc[nt][i];
        }
    }
}

// Keys per tile: int8 pools and bidirectional batches at head_dim 128 take 32, since their staging and
// dequantisation (or dense addressing) do not fit beside 64-key tiles' registers without spilling.
template <int HD, typename T, bool BIDIR>
__host__ __device__ constexpr int tile_keys() {
    return (IsInt8<T>::value || BIDIR) && HD == 128 ? 32 : BN_OF(HD);
}

// Masks keys at or past `end` (bidirectional attention: every row sees the sequence's keys).
template <int BN>
__device__ __forceinline__ void mask_keys_from(float (*sc)[4], int j0, int end) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            sc[nt][i] = j0 + nt * 8 + 2 * t + (i & 1) >= end ? NEG_INF : sc[nt][i];
        }
    }
}

// A split's part of a warp's 16 output rows: the rows as store_rows writes them (normalised by the
// split's own sum), and each row's reference (log2 units; -inf where the split saw none of its keys)
// and sum beside them.
template <int OT>
__device__ __forceinline__ void store_split_rows(
    float (*o)[4],    // [OT][4]: output accumulators
    const float* m,   // [2]: the rows' references (raw score units)
    const float* l,   // [2]: the rows' partial sums (this lane's share)
    float* part_o,    // [num_tokens, row_stride]: the split's outputs, at the head's first column
    float* part_ml,   // [num_tokens, ml_stride]: the split's (reference, sum) pairs, at the head's
    int first, int row0, int rows, int row_stride, int ml_stride, float scale_log2) {
    store_rows<OT>(o, l, part_o, first, row0, rows, row_stride);
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float sum = quad_sum(l[r]);
        const int row = row0 + g + r * 8;
        if (row < rows && t == 0) {
            const float ref = sum > 0.0f ? m[r] * scale_log2 : NEG_INF;
            store2(part_ml + (long long)(first + row) * ml_stride, ref, sum);
        }
    }
}

// WINDOWED: sequences may stream through sink windows. BIDIR: bidirectional attention within each
// sequence of a packed batch (BERT), keys and values dense bf16 rows beside the queries, no cache.
// SPLITS: a windowed launch may split its window tiles (gridDim.z > 1); the windowed entry point over
// bf16 pools at head_dim 128 has no split form (its store would spill at the 255-register limit).
template <int HD, typename T, bool WINDOWED, bool BIDIR, bool SPLITS = WINDOWED>
__device__ void prefill(
    const float* q,                   // [num_tokens, num_heads, HD]
    const float* q_sinks,             // [num_tokens, num_heads, HD]: in-cache positions (windowed)
    const T* k_cache,                 // [num_blocks, block_size, num_kv_heads, HD]
    const T* v_cache,                 // [num_blocks, block_size, num_kv_heads, HD]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]: int8 pools, else null
    const float* v_scales,            // likewise
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    const unsigned* windows,          // [num_seqs, 3]: sinks, window (0: dense), block offset
    float* out,                       // [num_tokens, num_heads, HD]
    float* part_o,                    // [splits, num_tokens, num_heads, HD]: gridDim.z > 1 only
    float* part_ml,                   // [splits, num_tokens, num_heads, 2]: likewise
    int num_seqs, int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq,
    float scale) {
    constexpr bool INT8 = IsInt8<T>::value;
    constexpr int BN = tile_keys<HD, T, BIDIR>();
    static_assert(!(WINDOWED && BIDIR), "a bidirectional batch has no cache to stream through");
    static_assert(WINDOWED || !SPLITS, "only windowed launches split");
    constexpr int STAGES = INT8 ? 1 : 2;  // bf16 tile stages
    // Dynamic shared memory: Q [BM][HD + PAD]; K and V tiles [STAGES][BN][HD + PAD]; for int8 pools
    // then the raw K and V tiles [2][BN][HD] and their scales [2][BN], staged in two slots.
    extern __shared__ __align__(16) unsigned char smem[];
    typedef bf16_t Row[HD + PAD];
    typedef Row Tile[BN];
    typedef signed char RawTile[BN][HD];
    Row* q_s = reinterpret_cast<Row*>(smem);
    Tile* k_s = reinterpret_cast<Tile*>(q_s + BM);
    Tile* v_s = k_s + STAGES;
    RawTile* k_raw = reinterpret_cast<RawTile*>(v_s + STAGES);  // [2], int8 pools only
    RawTile* v_raw = k_raw + 2;
    float* k_sc = reinterpret_cast<float*>(v_raw + 2);  // [2][BN], int8 pools only
    float* v_sc = k_sc + 2 * BN;
    int s, tile;
    // Reversed order: the longest (last) query tiles start first.
    if (!find_query_tile<BM>(query_start_loc, num_seqs, gridDim.x - 1 - blockIdx.x, &s, &tile)) {
        return;
    }
    const int h = blockIdx.y, warp = threadIdx.x >> 5;
    const int q0 = (int)query_start_loc[s], q_len = (int)query_start_loc[s + 1] - q0;
    const int ctx = BIDIR ? q_len : (int)seq_lens[s], prefix = ctx - q_len;
    const int m0 = tile * BM, wrow = m0 + warp * 16 * MT;
    // Keys visible to some row of the block.
    const int end = BIDIR ? ctx : min(ctx, prefix + m0 + BM);
    const int kv_head = h / (num_heads / num_kv_heads);
    const int row_stride = num_kv_heads * HD, head_off = kv_head * HD;
    const int q_stride = num_heads * HD;
    const int shift = (block_size & (block_size - 1)) == 0 ? __ffs(block_size) - 1 : -1;
    KeyBlocks kb{block_table + (long long)s * max_blocks_per_seq, block_size, shift, 0, 0,
                 BIDIR ? (long long)q0 : -1};
    int sinks = 0, window = 0;
    if constexpr (WINDOWED) {
        sinks = (int)windows[3 * s];
        window = (int)windows[3 * s + 1];
        kb.sink_blocks = window > 0 ? (sinks + block_size - 1) / block_size : 0;
        kb.offset = (int)windows[3 * s + 2];
    }
    // Rows past their sinks and window read the sinks with q_sinks first (a phase of its own); the
    // window phase starts at the first row's window when that row streams.
    const bool first_streams = window > 0 && prefix + m0 >= sinks + window;
    const bool last_streams = window > 0 && end - 1 >= sinks + window;
    const int window_from = first_streams ? prefix + m0 + 1 - window : 0;
    // A split launch (gridDim.z > 1): block blockIdx.z reads its share of the window phase's tiles,
    // the first split the sinks as well.
    const bool sink_phase_runs = WINDOWED && last_streams && (!SPLITS || blockIdx.z == 0);

    float o[MT][HD / 8][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        m[mt][0] = m[mt][1] = NEG_INF;
        l[mt][0] = l[mt][1] = 0.0f;
#pragma unroll
        for (int i = 0; i < HD / 8; ++i) {
            o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
        }
    }
    const float scale_log2 = scale * 1.4426950408889634f;
    const T* k_head = k_cache + head_off;
    const T* v_head = v_cache + head_off;
    // Starts the copies of tile `jt` into staging slot `slot`.
    const auto issue = [&](int jt, int slot) {
        if constexpr (INT8) {
            load_raw<HD, BN>(k_raw[slot], v_raw[slot], k_sc + slot * BN, v_sc + slot * BN, k_head,
                             v_head, k_scales + kv_head, v_scales + kv_head, kb, num_kv_heads,
                             jt * BN, end);
        } else {
            load_tiles<HD, BN>(k_s[slot], v_s[slot], k_head, v_head, kb, row_stride, jt * BN, end);
        }
    };
#pragma unroll 1
    for (int phase = sink_phase_runs ? 0 : 1; phase < 2; ++phase) {
        const bool sink_phase = phase == 0;
        if (WINDOWED && !sink_phase && sink_phase_runs) {
            __syncthreads();  // every warp done with the sink phase's Q and tiles
        }
        const float* q_src = WINDOWED && sink_phase ? q_sinks : q;
        store_q<HD>(q_s, q_src + ((long long)(q0 + m0)) * q_stride + h * HD, q_stride, q_len - m0);
        int first_tile = sink_phase ? 0 : window_from / BN;
        int tiles = sink_phase ? (sinks + BN - 1) / BN : (end + BN - 1) / BN;
        if (SPLITS && !sink_phase && gridDim.z > 1) {
            const int share = (tiles - first_tile + (int)gridDim.z - 1) / (int)gridDim.z;
            first_tile += (int)blockIdx.z * share;  // at or past `tiles`: none for this split
            tiles = min(tiles, first_tile + share);
        }
        if (first_tile < tiles) {
            issue(first_tile, 0);
        }
        cp_async_commit();
        for (int jt = first_tile; jt < tiles; ++jt) {
            const int j0 = jt * BN, cur = (jt - first_tile) & 1;
            cp_async_wait_all();
            __syncthreads();  // tile jt (and Q) in; every warp done with tile jt - 1, refilled next
            int ready = cur;  // the bf16 stage holding tile jt
            if constexpr (INT8) {
                widen_tiles<HD, BN>(k_s[0], v_s[0], k_raw[cur], v_raw[cur]);
                __syncthreads();
                ready = 0;
            }
            if (jt + 1 < tiles) {
                issue(jt + 1, cur ^ 1);
            }
            cp_async_commit();
            float sc[MT][BN / 8][4];
            scores<HD, BN>(sc, q_s + warp * 16 * MT, k_s[ready]);
            if constexpr (INT8) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    scale_key_columns<BN / 8>(sc[mt], k_sc + cur * BN);
                }
            }
            // Rows past the sequence's queries see up to `end` only, through the same test.
            const bool mask = WINDOWED || j0 + BN > end || (!BIDIR && j0 + BN > prefix + m0);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if constexpr (BIDIR) {
                    if (mask) {
                        mask_keys_from<BN>(sc[mt], j0, end);
                    }
                } else if constexpr (WINDOWED) {
                    mask_window<BN>(sc[mt], j0, prefix + wrow + mt * 16, sink_phase, sinks, window);
                } else if (mask) {
                    mask_causal<BN / 8>(sc[mt], j0, prefix + wrow + mt * 16);
                }
                online_softmax<BN / 8, HD / 8>(sc[mt], m[mt], l[mt], o[mt], scale_log2);
            }
            if constexpr (INT8) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {  // P·V with V's scales folded into P
                    scale_key_columns<BN / 8>(sc[mt], v_sc + cur * BN);
                }
            }
            accumulate<HD, BN>(o, sc, v_s[ready]);
        }
    }
    if (SPLITS && gridDim.z > 1) {
        const long long split = blockIdx.z, tokens = query_start_loc[num_seqs];
        float* split_o = part_o + split * tokens * q_stride + h * HD;
        float* split_ml = part_ml + (split * tokens * num_heads + h) * 2;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            store_split_rows<HD / 8>(o[mt], m[mt], l[mt], split_o, split_ml, q0, wrow + mt * 16,
                                     q_len, q_stride, num_heads * 2, scale_log2);
        }
        return;
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        store_rows<HD / 8>(o[mt], l[mt], out + h * HD, q0, wrow + mt * 16, q_len, q_stride);
    }
}

// Merges the splits of a split windowed launch: each (token, head)'s split outputs weighted by their
// sums against the largest reference. One thread a 4-column piece of one (token, head) row;
// `rows` = num_tokens · num_heads, head_dim a multiple of 4.
extern "C" __global__ void flash_prefill_merge(
    const float* part_o,   // [splits, rows, head_dim]
    const float* part_ml,  // [splits, rows, 2]
    float* out,            // [rows, head_dim]
    int rows, int head_dim, int splits) {
    const int pieces = head_dim / 4;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * pieces) {
        return;
    }
    const long long row = i / pieces;
    const int c = (int)(i % pieces);
    const float2* ml = reinterpret_cast<const float2*>(part_ml);
    float mx = NEG_INF;
    for (int sp = 0; sp < splits; ++sp) {
        const float2 p = ml[sp * (long long)rows + row];
        if (p.y > 0.0f) {
            mx = fmaxf(mx, p.x);
        }
    }
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float total = 0.0f;
    for (int sp = 0; sp < splits; ++sp) {
        const long long at = sp * (long long)rows + row;
        const float2 p = ml[at];
        if (p.y > 0.0f) {
            const float w = p.y * fast_exp2(p.x - mx);
            const float4 o = reinterpret_cast<const float4*>(part_o + at * head_dim)[c];
            total += w;
            acc.x += w * o.x, acc.y += w * o.y, acc.z += w * o.z, acc.w += w * o.w;
        }
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    reinterpret_cast<float4*>(out + row * head_dim)[c] =
        make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
}

// Entry points: grid (num_tokens / BM + num_seqs, num_heads), THREADS threads (the launch bound),
// dynamic shared memory at least (bf16) (BM + 4 · BN) · (HD + 8) · 2 or (int8)
// (BM + 2 · BN) · (HD + 8) · 2 + 4 · BN · (HD + 4) bytes, BN = tile_keys; surplus blocks return at
// once. KV block sizes are multiples of PREFILL_BLOCK_MULTIPLE. The `_windowed` entry points take
// sequences that may stream through sink windows (and dense ones, window 0); with gridDim.z > 1 they
// split each block's window tiles and write the splits to part_o and part_ml, for
// flash_prefill_merge (grid over num_tokens · num_heads · head_dim / 4 threads) to combine into
// `out`.
extern "C" __global__ void __launch_bounds__(THREADS, PREFILL_MIN_BLOCKS) flash_prefill_bf16_hd64(
    const float* q,                   // [num_tokens, num_heads, 64]
    const bf16_t* k_cache,             // [num_blocks, block_size, num_kv_heads, 64]
    const bf16_t* v_cache,             // [num_blocks, block_size, num_kv_heads, 64]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    float* out,                       // [num_tokens, num_heads, 64]
    int num_seqs, int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq,
    float scale) {
    prefill<64, bf16_t, false, false>(q, nullptr, k_cache, v_cache, nullptr, nullptr,
                                      query_start_loc, seq_lens, block_table, nullptr, out, nullptr, nullptr,
                                      num_seqs, num_heads, num_kv_heads, block_size,
                                      max_blocks_per_seq, scale);
}

extern "C" __global__ void __launch_bounds__(THREADS, PREFILL_MIN_BLOCKS) flash_prefill_bf16_hd128(
    const float* q,                   // [num_tokens, num_heads, 128]
    const bf16_t* k_cache,             // [num_blocks, block_size, num_kv_heads, 128]
    const bf16_t* v_cache,             // [num_blocks, block_size, num_kv_heads, 128]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    float* out,                       // [num_tokens, num_heads, 128]
    int num_seqs, int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq,
    float scale) {
    prefill<128, bf16_t, false, false>(q, nullptr, k_cache, v_cache, nullptr, nullptr,
                                       query_start_loc, seq_lens, block_table, nullptr, out, nullptr, nullptr,
                                       num_seqs, num_heads, num_kv_heads, block_size,
                                       max_blocks_per_seq, scale);
}

extern "C" __global__ void __launch_bounds__(THREADS, PREFILL_MIN_BLOCKS) flash_prefill_windowed_bf16_hd64(
    const float* q,                   // [num_tokens, num_heads, 64]
    const float* q_sinks,             // [num_tokens, num_heads, 64]: in-cache positions
    const bf16_t* k_cache,             // [num_blocks, block_size, num_kv_heads, 64]
    const bf16_t* v_cache,             // [num_blocks, block_size, num_kv_heads, 64]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    const unsigned* windows,          // [num_seqs, 3]: sinks, window, block offset
    float* out,                       // [num_tokens, num_heads, 64]
    float* part_o,                    // [splits, num_tokens, num_heads, 64]: split launches only
    float* part_ml,                   // [splits, num_tokens, num_heads, 2]: likewise
    int num_seqs, int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq,
    float scale) {
    prefill<64, bf16_t, true, false>(q, q_sinks, k_cache, v_cache, nullptr, nullptr,
                                     query_start_loc, seq_lens, block_table, windows, out, part_o, part_ml, num_seqs,
                                     num_heads, num_kv_heads, block_size, max_blocks_per_seq,
                                     scale);
}

extern "C" __global__ void __launch_bounds__(THREADS, PREFILL_MIN_BLOCKS) flash_prefill_windowed_bf16_hd128(
    const float* q,                   // [num_tokens, num_heads, 128]
    const float* q_sinks,             // [num_tokens, num_heads, 128]: in-cache positions
    const bf16_t* k_cache,             // [num_blocks, block_size, num_kv_heads, 128]
    const bf16_t* v_cache,             // [num_blocks, block_size, num_kv_heads, 128]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    const unsigned* windows,          // [num_seqs, 3]: sinks, window, block offset
    float* out,                       // [num_tokens, num_heads, 128]
    float* part_o,                    // [splits, num_tokens, num_heads, 128]: unused: no split form
    float* part_ml,                   // [splits, num_tokens, num_heads, 2]: likewise
    int num_seqs, int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq,
    float scale) {
    prefill<128, bf16_t, true, false, false>(q, q_sinks, k_cache, v_cache, nullptr, nullptr,
                                      query_start_loc, seq_lens, block_table, windows, out, part_o, part_ml,
                                      num_seqs, num_heads, num_kv_heads, block_size,
                                      max_blocks_per_seq, scale);
}

extern "C" __global__ void __launch_bounds__(THREADS, PREFILL_MIN_BLOCKS) flash_prefill_int8_hd64(
    const float* q,                   // [num_tokens, num_heads, 64]
    const signed char* k_cache,        // [num_blocks, block_size, num_kv_heads, 64]
    const signed char* v_cache,        // [num_blocks, block_size, num_kv_heads, 64]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]
    const float* v_scales,            // [num_blocks, block_size, num_kv_heads]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    float* out,                       // [num_tokens, num_heads, 64]
    int num_seqs, int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq,
    float scale) {
    prefill<64, signed char, false, false>(q, nullptr, k_cache, v_cache, k_scales, v_scales,
                                           query_start_loc, seq_lens, block_table, nullptr, out, nullptr, nullptr,
                                           num_seqs, num_heads, num_kv_heads, block_size,
                                           max_blocks_per_seq, scale);
}

extern "C" __global__ void __launch_bounds__(THREADS, PREFILL_MIN_BLOCKS) flash_prefill_int8_hd128(
    const float* q,                   // [num_tokens, num_heads, 128]
    const signed char* k_cache,        // [num_blocks, block_size, num_kv_heads, 128]
    const signed char* v_cache,        // [num_blocks, block_size, num_kv_heads, 128]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]
    const float* v_scales,            // [num_blocks, block_size, num_kv_heads]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    float* out,                       // [num_tokens, num_heads, 128]
    int num_seqs, int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq,
    float scale) {
    prefill<128, signed char, false, false>(q, nullptr, k_cache, v_cache, k_scales, v_scales,
                                            query_start_loc, seq_lens, block_table, nullptr, out, nullptr, nullptr,
                                            num_seqs, num_heads, num_kv_heads, block_size,
                                            max_blocks_per_seq, scale);
}

extern "C" __global__ void __launch_bounds__(THREADS, PREFILL_MIN_BLOCKS) flash_prefill_windowed_int8_hd64(
    const float* q,                   // [num_tokens, num_heads, 64]
    const float* q_sinks,             // [num_tokens, num_heads, 64]: in-cache positions
    const signed char* k_cache,        // [num_blocks, block_size, num_kv_heads, 64]
    const signed char* v_cache,        // [num_blocks, block_size, num_kv_heads, 64]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]
    const float* v_scales,            // [num_blocks, block_size, num_kv_heads]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    const unsigned* windows,          // [num_seqs, 3]: sinks, window, block offset
    float* out,                       // [num_tokens, num_heads, 64]
    float* part_o,                    // [splits, num_tokens, num_heads, 64]: split launches only
    float* part_ml,                   // [splits, num_tokens, num_heads, 2]: likewise
    int num_seqs, int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq,
    float scale) {
    prefill<64, signed char, true, false>(q, q_sinks, k_cache, v_cache, k_scales, v_scales,
                                          query_start_loc, seq_lens, block_table, windows, out, part_o, part_ml,
                                          num_seqs, num_heads, num_kv_heads, block_size,
                                          max_blocks_per_seq, scale);
}

extern "C" __global__ void __launch_bounds__(THREADS, PREFILL_MIN_BLOCKS) flash_prefill_windowed_int8_hd128(
    const float* q,                   // [num_tokens, num_heads, 128]
    const float* q_sinks,             // [num_tokens, num_heads, 128]: in-cache positions
    const signed char* k_cache,        // [num_blocks, block_size, num_kv_heads, 128]
    const signed char* v_cache,        // [num_blocks, block_size, num_kv_heads, 128]
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]
    const float* v_scales,            // [num_blocks, block_size, num_kv_heads]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    const unsigned* seq_lens,         // [num_seqs]
    const unsigned* block_table,      // [num_seqs, max_blocks_per_seq]
    const unsigned* windows,          // [num_seqs, 3]: sinks, window, block offset
    float* out,                       // [num_tokens, num_heads, 128]
    float* part_o,                    // [splits, num_tokens, num_heads, 128]: split launches only
    float* part_ml,                   // [splits, num_tokens, num_heads, 2]: likewise
    int num_seqs, int num_heads, int num_kv_heads, int block_size, int max_blocks_per_seq,
    float scale) {
    prefill<128, signed char, true, false>(q, q_sinks, k_cache, v_cache, k_scales, v_scales,
                                           query_start_loc, seq_lens, block_table, windows, out, part_o, part_ml,
                                           num_seqs, num_heads, num_kv_heads, block_size,
                                           max_blocks_per_seq, scale);
}

// Bidirectional attention within each sequence of a packed batch (BERT), dense bf16 K and V rows.
extern "C" __global__ void __launch_bounds__(THREADS, PREFILL_MIN_BLOCKS) flash_prefill_bidir_bf16_hd64(
    const float* q,                   // [num_tokens, num_heads, 64]
    const bf16_t* k,                  // [num_tokens, num_kv_heads, 64]
    const bf16_t* v,                  // [num_tokens, num_kv_heads, 64]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    float* out,                       // [num_tokens, num_heads, 64]
    int num_seqs, int num_heads, int num_kv_heads, float scale) {
    prefill<64, bf16_t, false, true>(q, nullptr, k, v, nullptr, nullptr, query_start_loc, nullptr,
                                       nullptr, nullptr, out, nullptr, nullptr, num_seqs, num_heads, num_kv_heads, 16, 0,
                                       scale);
}

extern "C" __global__ void __launch_bounds__(THREADS, PREFILL_MIN_BLOCKS) flash_prefill_bidir_bf16_hd128(
    const float* q,                   // [num_tokens, num_heads, 128]
    const bf16_t* k,                  // [num_tokens, num_kv_heads, 128]
    const bf16_t* v,                  // [num_tokens, num_kv_heads, 128]
    const unsigned* query_start_loc,  // [num_seqs + 1]
    float* out,                       // [num_tokens, num_heads, 128]
    int num_seqs, int num_heads, int num_kv_heads, float scale) {
    prefill<128, bf16_t, false, true>(q, nullptr, k, v, nullptr, nullptr, query_start_loc, nullptr,
                                       nullptr, nullptr, out, nullptr, nullptr, num_seqs, num_heads, num_kv_heads, 16, 0,
                                       scale);
}
