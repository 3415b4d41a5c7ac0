// Decode attention (one new query row per sequence) over a bf16 or int8 paged KV pool, split-KV
// (flash-decoding) and GQA-aware. int8 keys and values stay int8 in registers until the chunk uses
// them, then are widened to f16 exactly (two byte permutes and two packed subtractions per four
// values); their per-row scales multiply the scores and the probabilities in f32, and the chunk's
// products run on f16 tensor cores (Q and P rounded to f16, which keeps 3 more bits than bf16).
//
// flash_decode: one block of 4 warps per (KV head, key split, sequence), the KV heads fastest in the
// grid, so the blocks reading one range of keys for all heads of a sequence run together. The
// group's query heads (up to 16) are the rows of one mma.sync m16n8k16 tile, so every K and V
// element of the split is read once for the whole group. Warps take interleaved chunks of keys (16
// from bf16 pools, 32 from int8 ones, so a chunk's loads carry as many bytes), each lane 16-byte
// pieces of rows: K in an order of head dimensions that matches the permuted Q fragments, V
// transposed in registers with movmatrix. How the pieces arrive depends on the pool:
// - bf16 at head_dim 128 (no sink window): two chunks in registers, the next one's loads in flight
//   while this one computes (2 blocks an SM);
// - int8: a ring of 3 chunks a warp in shared memory filled by cp.async, 2 in flight while one
//   computes, with no registers held for them (the int8 chunk's widening and scaling leave no
//   registers for a second chunk). The kernel issues instructions at about half the schedulers'
//   rate with 2 warps each, so the copies' addressing is kept short: a key's block by a
//   multiply-high (FastDiv) and every offset within a row or a stage an immediate of the copy;
// - otherwise one chunk at a time, straight into registers.
// Each warp keeps its own online softmax; the block merges its 4 warps and writes the split's
// normalized output and (max, sum). flash_decode_reduce merges the splits of each (sequence, head).
#include "common.cuh"

#define WARPS 4
#define MAX_GROUP 16
// Stages of an int8 decode warp's ring in shared memory (run_chunks_staged; the host sizes the
// dynamic shared memory from the same number).
#define INT8_RING_STAGES 3

// How a warp reads one pool type. A lane loads 16-byte pieces of key rows: DIMS head dimensions a
// piece (8 bf16 or 16 int8), ROWS rows a chunk (8 keys a row across the warp), so a chunk's loads
// carry the same bytes from either pool; `pairs` turns a piece into the packed pairs the tensor cores
// take (bf16 as loaded, int8 widened to f16), `pack` and `mma` are the matching rounding and product.
template <typename T>
struct Pool;
template <>
struct Pool<bf16_t> {
    static constexpr int DIMS = 8, ROWS = 2;
    __device__ static __forceinline__ unsigned pack(float lo, float hi) { return pack_bf16x2(lo, hi); }
    __device__ static __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
        mma_bf16_16816(c, a, b0, b1);
    }
    __device__ static __forceinline__ void pairs(uint4 piece, unsigned* out /* [4] */) {
        out[0] = piece.x, out[1] = piece.y, out[2] = piece.z, out[3] = piece.w;
    }
};
template <>
struct Pool<signed char> {
    static constexpr int DIMS = 16, ROWS = 4;
    __device__ static __forceinline__ unsigned pack(float lo, float hi) { return pack_f16x2(lo, hi); }
    __device__ static __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
        mma_f16_16816(c, a, b0, b1);
    }
    __device__ static __forceinline__ void pairs(uint4 piece, unsigned* out /* [8] */) {
        widen_int8x16_f16(piece, out);
    }
};

// The first head dimension of lane t's piece s: pieces of W dims, the warp's 4 lanes of a key row
// side by side.
template <int W>
__device__ __forceinline__ int piece_dim(int s, int t) {
    return 4 * W * s + W * t;
}

// The group's query rows as A fragments (bf16 or f16 pairs, as the pool's products take them) with
// the head dimensions permuted to match the keys' pieces: fragment (W / 4)·s + e, register pair
// (0, 2), holds dims piece_dim(s, t) + 4e + {0,1}, {2,3} (t = lane % 4). Rows (heads of the group) at
// or past `rows` are zero.
template <int HD, typename T>
__device__ __forceinline__ void load_q_permuted(
    unsigned (*qa)[4],  // [HD / 16][4]
    const float* q,     // [group, HD]: the group's first head of this token
    int rows) {
    constexpr int W = Pool<T>::DIMS, F = W / 4;
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const int col = piece_dim<W>(kk / F, t) + (kk % F) * 4;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = g + (i & 1) * 8, c = col + (i >> 1) * 2;
            float2 v = make_float2(0.0f, 0.0f);
            if (row < rows) {
                v = *reinterpret_cast<const float2*>(q + row * HD + c);
            }
            qa[kk][i] = Pool<T>::pack(v.x, v.y);
        }
    }
}

// A sequence's block-table row, and under a sink window its sink blocks and the offset of the blocks
// after them (both 0 for dense attention, where the mapping folds away).
struct Window {
    const unsigned* blocks;  // [max_blocks_per_seq]
    FastDiv block_size;
    int sink_blocks, offset;
    // The pool slot of key j (a key the window still sees; a pool holds fewer than 2^32 slots).
    __device__ __forceinline__ unsigned slot(int j) const {
        const unsigned b = block_size.div((unsigned)j), within = (unsigned)j - b * block_size.d;
        const int row = offset != 0 && (int)b >= sink_blocks ? (int)b - offset : (int)b;
        return blocks[row] * block_size.d + within;
    }
};

// Where one (sequence, KV head)'s keys and values are: the pools (and with int8 pools their row
// scales), the sequence's blocks under its window, a pool row's stride and the head's offset in it.
template <typename T>
struct KvRows {
    const T* k_cache;         // [num_blocks, block_size, num_kv_heads, HD]
    const T* v_cache;         // likewise
    const float* k_scales;    // [num_blocks, block_size, num_kv_heads]: int8 pools, else null
    const float* v_scales;    // likewise
    Window w;
    int row_stride, head_off;
    // The element offset of key `key`'s row for this head (the head's offset alone past `end`,
    // where nothing is read).
    __device__ __forceinline__ long long row(int key, int end) const {
        return row_at(key < end ? w.slot(key) : 0u);
    }
    // The element offset of pool slot `slot`'s row for this head.
    __device__ __forceinline__ long long row_at(unsigned slot) const {
        return (long long)slot * (unsigned)row_stride + head_off;
    }
};

// One chunk of a warp in registers: ROWS key rows a lane (key j + 8r + lane / 4), their 16-byte
// pieces of K and V at piece_dim(s, lane % 4), and with int8 pools the rows' scales (0 past the end),
// which the chunk applies to the scores and probabilities in f32.
template <int HD, typename T>
struct Chunk {
    static constexpr int ROWS = Pool<T>::ROWS, PIECES = HD / (4 * Pool<T>::DIMS);
    uint4 k[ROWS][PIECES], v[ROWS][PIECES];
    float ks[ROWS], vs[ROWS];
};

// Loads the chunk at key j straight into registers (keys at or past `end` read as zeros; a window's
// range never reaches a block that left it).
template <int HD, typename T>
__device__ __forceinline__ void load_chunk(Chunk<HD, T>& c, const KvRows<T>& src, int j, int end) {
    constexpr int W = Pool<T>::DIMS;
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int r = 0; r < Chunk<HD, T>::ROWS; ++r) {
        const int key = j + 8 * r + g;
        const long long row = src.row(key, end);
        if constexpr (IsInt8<T>::value) {
            c.ks[r] = key < end ? src.k_scales[row / HD] : 0.0f;
            c.vs[r] = key < end ? src.v_scales[row / HD] : 0.0f;
        }
#pragma unroll
        for (int s = 0; s < Chunk<HD, T>::PIECES; ++s) {
            const long long at = row + piece_dim<W>(s, t);
            const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
            c.k[r][s] = key < end ? *reinterpret_cast<const uint4*>(src.k_cache + at) : zero;
            c.v[r][s] = key < end ? *reinterpret_cast<const uint4*>(src.v_cache + at) : zero;
        }
    }
}

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
template <int HD, typename T>
__device__ __forceinline__ void chunk(
    float (*o)[4], float* m, float* l,  // [HD / 8][4], [2], [2]: the warp's running state
    unsigned (*qa)[4],                  // [HD / 16][4]: permuted Q fragments
    const Chunk<HD, T>& c,              // the chunk's keys, values and int8 row scales
    float scale_log2, int j, int end) {
    using P = Pool<T>;
    constexpr bool INT8 = IsInt8<T>::value;
    constexpr int W = P::DIMS, ROWS = P::ROWS, PIECES = HD / (4 * W), R = W / 2;
    const int t = threadIdx.x & 3;
    float sc[ROWS][4];
#pragma unroll
    for (int n = 0; n < ROWS; ++n) {
        sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
        for (int s = 0; s < PIECES; ++s) {
            unsigned k[R];
            P::pairs(c.k[n][s], k);
#pragma unroll
            for (int e = 0; e < R / 2; ++e) {
                P::mma(sc[n], qa[(R / 2) * s + e], k[2 * e], k[2 * e + 1]);
            }
        }
    }
    if constexpr (INT8) {
        scale_columns<ROWS>(sc, c.ks);
    }
#pragma unroll
    for (int n = 0; n < ROWS; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const bool out = j + 8 * n + 2 * t + (i & 1) >= end;
            sc[n][i] = out ? NEG_INF : sc[n][i];
        }
    }
    online_softmax<ROWS, HD / 8, !INT8>(sc, m, l, o, scale_log2);  // int8: f16 probabilities
    if constexpr (INT8) {
        scale_columns<ROWS>(sc, c.vs);
    }
    // Keys 16h .. 16h + 15 of the chunk: rows 2h and 2h + 1.
#pragma unroll
    for (int h = 0; h < ROWS / 2; ++h) {
        const unsigned pa[4] = {
            P::pack(sc[2 * h][0], sc[2 * h][1]),
            P::pack(sc[2 * h][2], sc[2 * h][3]),
            P::pack(sc[2 * h + 1][0], sc[2 * h + 1][1]),
            P::pack(sc[2 * h + 1][2], sc[2 * h + 1][3]),
        };
        // Output tile R·s + w covers dims piece_dim(s, (lane/4) / 2) + 2w + (lane/4 % 2) as its
        // column lane/4.
#pragma unroll
        for (int s = 0; s < PIECES; ++s) {
            unsigned a[R], b[R];
            P::pairs(c.v[2 * h][s], a);
            P::pairs(c.v[2 * h + 1][s], b);
#pragma unroll
            for (int w = 0; w < R; ++w) {
                P::mma(o[R * s + w], pa, movmatrix_trans(a[w]), movmatrix_trans(b[w]));
            }
        }
    }
}

// Writes the warp's state to shared memory: output rows (unnormalized, natural dim order), max (in
// the log2 domain), sum.
template <int HD, int W>
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
            const int d = piece_dim<W>(ot / (W / 2), t) + 2 * (ot % (W / 2));
            o_s[g + 8 * r][d] = o[ot][2 * r];
            o_s[g + 8 * r][d + 1] = o[ot][2 * r + 1];
        }
    }
}

// One warp's chunk in shared memory: each lane's pieces (and with int8 pools its rows' scales) at
// [..][lane], so a lane reads back what it copied and the warp's 16-byte reads fall on distinct banks.
template <int HD, typename T>
struct Stage {
    static constexpr int ROWS = Pool<T>::ROWS, PIECES = HD / (4 * Pool<T>::DIMS);
    uint4 k[ROWS][PIECES][32], v[ROWS][PIECES][32];
    float ks[ROWS][32], vs[ROWS][32];
    // The fields' byte offsets, for copies addressed from the stage's shared address.
    static constexpr unsigned K_AT = 0, V_AT = 16 * 32 * ROWS * PIECES, KS_AT = 2 * V_AT,
                              VS_AT = KS_AT + 4 * 32 * ROWS;
};

// Starts the async copies of the chunk at key j into the stage at shared address `st` (keys at or
// past `end` zero-filled: zero pieces, zero scales), as one commit group. The offsets within the
// stage and the pool row are constants the copy instructions carry.
template <int HD, typename T>
__device__ __forceinline__ void stage_chunk(unsigned st, const KvRows<T>& src, int j, int end) {
    using S = Stage<HD, T>;
    static_assert(sizeof(S) == S::VS_AT + 4 * 32 * S::ROWS, "Stage's offsets match its layout");
    constexpr int W = Pool<T>::DIMS;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int heads = src.row_stride / HD, head = src.head_off / HD;
    const unsigned pieces = st + 16 * lane, scales = st + 4 * lane;  // this lane's places
#pragma unroll
    for (int r = 0; r < S::ROWS; ++r) {
        const int key = j + 8 * r + g;
        const bool in = key < end;
        const unsigned slot = in ? src.w.slot(key) : 0u;
        const long long row = src.row_at(slot) + piece_dim<W>(0, t);
        const int bytes = in ? 16 : 0;
#pragma unroll
        for (int s = 0; s < S::PIECES; ++s) {
            const unsigned at = 16 * 32 * (r * S::PIECES + s);
            cp_async_16(pieces + S::K_AT + at, src.k_cache + row + piece_dim<W>(s, 0), bytes);
            cp_async_16(pieces + S::V_AT + at, src.v_cache + row + piece_dim<W>(s, 0), bytes);
        }
        if constexpr (IsInt8<T>::value) {
            const unsigned scale = slot * (unsigned)heads + (unsigned)head;
            cp_async_4(scales + S::KS_AT + 4 * 32 * r, src.k_scales + scale, bytes / 4);
            cp_async_4(scales + S::VS_AT + 4 * 32 * r, src.v_scales + scale, bytes / 4);
        }
    }
    cp_async_commit();
}

// The warp's chunks through a ring of S stages in shared memory: S - 1 chunks' copies in flight
// while one computes, with no registers held for them.
template <int HD, typename T, int S>
__device__ __forceinline__ void run_chunks_staged(
    Stage<HD, T>* ring,  // [S]: this warp's stages
    float (*o)[4], float* m, float* l, unsigned (*qa)[4], const KvRows<T>& src, int first, int end,
    float scale_log2) {
    constexpr int STEP = WARPS * 8 * Pool<T>::ROWS;
    const int lane = threadIdx.x & 31;
    const int n = first < end ? (end - first + STEP - 1) / STEP : 0;
    const unsigned ring_at = smem_addr(ring);
    const auto stage_at = [&](int c) {
        return ring_at + (unsigned)(c % S) * (unsigned)sizeof(Stage<HD, T>);
    };
#pragma unroll
    for (int c = 0; c < S - 1; ++c) {
        if (c < n) {
            stage_chunk<HD, T>(stage_at(c), src, first + c * STEP, end);
        } else {
            cp_async_commit();
        }
    }
    for (int c = 0; c < n; ++c) {
        const int ahead = c + S - 1;
        if (ahead < n) {
            stage_chunk<HD, T>(stage_at(ahead), src, first + ahead * STEP, end);
        } else {
            cp_async_commit();
        }
        cp_async_wait<S - 1>();
        const Stage<HD, T>& st = ring[c % S];
        Chunk<HD, T> regs;
#pragma unroll
        for (int r = 0; r < Chunk<HD, T>::ROWS; ++r) {
#pragma unroll
            for (int s = 0; s < Chunk<HD, T>::PIECES; ++s) {
                regs.k[r][s] = st.k[r][s][lane];
                regs.v[r][s] = st.v[r][s][lane];
            }
            regs.ks[r] = st.ks[r][lane];
            regs.vs[r] = st.vs[r][lane];
        }
        chunk<HD, T>(o, m, l, qa, regs, scale_log2, first + c * STEP, end);
    }
}

// The stages a warp's ring holds for a pool type: int8 pools stream through shared memory; bf16
// ones load straight into registers (0).
template <typename T>
__host__ __device__ constexpr int ring_stages() {
    return IsInt8<T>::value ? INT8_RING_STAGES : 0;
}

// The warp's chunks with two in registers: the next one's loads are in flight while this one
// computes (bf16 pools at head_dim 128 without sink windows, whose 2 blocks an SM then hold 16 KiB
// of loads a warp).
template <int HD, typename T>
__device__ __forceinline__ void run_chunks_double(
    float (*o)[4], float* m, float* l, unsigned (*qa)[4], const KvRows<T>& src, int first, int end,
    float scale_log2) {
    constexpr int STEP = WARPS * 8 * Pool<T>::ROWS;
    Chunk<HD, T> c[2];
    if (first < end) {
        load_chunk<HD, T>(c[0], src, first, end);
    }
    for (int j = first; j < end; j += 2 * STEP) {
        if (j + STEP < end) {
            load_chunk<HD, T>(c[1], src, j + STEP, end);
        }
        chunk<HD, T>(o, m, l, qa, c[0], scale_log2, j, end);
        if (j + STEP >= end) {
            break;
        }
        if (j + 2 * STEP < end) {
            load_chunk<HD, T>(c[0], src, j + 2 * STEP, end);
        }
        chunk<HD, T>(o, m, l, qa, c[1], scale_log2, j + STEP, end);
    }
}

// The warp's chunks one at a time, loaded straight into registers.
template <int HD, typename T>
__device__ __forceinline__ void run_chunks(
    float (*o)[4], float* m, float* l, unsigned (*qa)[4], const KvRows<T>& src, int first, int end,
    float scale_log2) {
    constexpr int STEP = WARPS * 8 * Pool<T>::ROWS;
    for (int j = first; j < end; j += STEP) {
        Chunk<HD, T> c;
        load_chunk<HD, T>(c, src, j, end);
        chunk<HD, T>(o, m, l, qa, c, scale_log2, j, end);
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
    constexpr int S = ring_stages<T>();
    // With a ring, the warps' stages fill the dynamic shared memory, and the warps' rows for the
    // block's merge reuse it once every warp is done with the stages.
    extern __shared__ uint4 dynamic_smem[];
    __shared__ float ml_s[WARPS][MAX_GROUP][2];
    float (*o_s)[MAX_GROUP][HD] = reinterpret_cast<float (*)[MAX_GROUP][HD]>(dynamic_smem);
    if constexpr (S == 0) {
        __shared__ float o_static[WARPS][MAX_GROUP][HD];
        o_s = o_static;
    }
    allow_next_grid();  // the merge, or the output product, may start
    wait_for_previous_grid();  // q and the new keys come from the kernel before
    const int kvh = blockIdx.x, sp = blockIdx.y, s = blockIdx.z;
    const int warp = threadIdx.x >> 5, group = num_heads / num_kv_heads;
    Window win{block_table + (long long)s * max_blocks_per_seq, FastDiv(block_size), 0, 0};
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
    const long long token = query_start_loc[s];

    unsigned qa[HD / 16][4];
    load_q_permuted<HD, T>(qa, q + (token * num_heads + kvh * group) * HD, group);
    float o[HD / 8][4], m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) {
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    }
    const float scale_log2 = scale * 1.4426950408889634f;
    const int first = begin + warp * 8 * Pool<T>::ROWS;
    const KvRows<T> src{k_cache, v_cache, k_scales, v_scales, win, num_kv_heads * HD, kvh * HD};
    if constexpr (S > 0) {
        Stage<HD, T>* ring = reinterpret_cast<Stage<HD, T>*>(dynamic_smem) + warp * S;
        run_chunks_staged<HD, T, S>(ring, o, m, l, qa, src, first, end, scale_log2);
        __syncthreads();  // every warp's stages are read before the merge's rows overwrite them
    } else if constexpr (HD == 128 && !WINDOWED) {
        run_chunks_double<HD, T>(o, m, l, qa, src, first, end, scale_log2);
    } else {
        run_chunks<HD, T>(o, m, l, qa, src, first, end, scale_log2);
    }
    stash<HD, Pool<T>::DIMS>(o_s[warp], ml_s[warp], o, m, l, scale_log2);
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

// Entry points: grid (num_kv_heads, splits, num_seqs), 128 threads; split_len a multiple of 64 (bf16
// pools) or 128 (int8: one step of the block's warps) keeps every warp busy;
// at most 16 query heads per KV head. The `_windowed` ones take sequences that may stream through
// sink windows, in two launches into one set of splits: the window (q, sink_part 0, splits
// [0, n)), then the sinks (q_sinks, sink_part 1, split n); `splits` counts both. At head_dim 128
// every variant runs 2 blocks an SM: the bf16 one's two chunks in registers, the windowed ones'
// registers, and the int8 ones' rings (dynamic shared memory, sized by the host) do not fit 3.
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
    decode<64, bf16_t, false>(q, k_cache, v_cache, nullptr, nullptr, query_start_loc, seq_lens, block_table, nullptr, part_o, part_ml, num_heads, num_kv_heads, block_size, max_blocks_per_seq, split_len, scale, 0, 0, (int)gridDim.y);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, 2) flash_decode_bf16_hd128(
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
    decode<128, bf16_t, false>(q, k_cache, v_cache, nullptr, nullptr, query_start_loc, seq_lens, block_table, nullptr, part_o, part_ml, num_heads, num_kv_heads, block_size, max_blocks_per_seq, split_len, scale, 0, 0, (int)gridDim.y);
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
    decode<64, signed char, false>(q, k_cache, v_cache, k_scales, v_scales, query_start_loc, seq_lens, block_table, nullptr, part_o, part_ml, num_heads, num_kv_heads, block_size, max_blocks_per_seq, split_len, scale, 0, 0, (int)gridDim.y);
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
    decode<128, signed char, false>(q, k_cache, v_cache, k_scales, v_scales, query_start_loc, seq_lens, block_table, nullptr, part_o, part_ml, num_heads, num_kv_heads, block_size, max_blocks_per_seq, split_len, scale, 0, 0, (int)gridDim.y);
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
