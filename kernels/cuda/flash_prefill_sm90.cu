// Prefill attention for Hopper (sm_90a) over a bf16 or int8 paged KV pool: causal, GQA, varlen
// batches, chunks after a cached prefix, as flash_prefill.cu's kernels compute it, with the products
// on warpgroup MMA (wgmma) instead of mma.sync.
//
// A block takes work items, each a tile of 64 · WG query rows of one sequence and one query head:
// over bf16 pools with cp.async loads the blocks are persistent, one an SM, each claiming items until
// none is left; the TMA and int8 forms have a block an item (persistent, they measured 6-16 % and,
// at head_dim 64, 2.5 % slower on an H100, for reasons not yet found). A block has WG consumer
// warpgroups of 64 rows each (three) and one producer warpgroup, which claims the items and hands
// them to the consumers. The producer gathers key tiles of BN keys (128 at head_dim 64, 64 at 128) through the block table with cp.async into a ring of shared-memory
// stages (K and V tile per stage), each signalled full on an mbarrier when its copies land and
// handed back on another once the consumers are done with it; it gives its registers to the
// consumers (setmaxnreg). A consumer warpgroup reads the key tiles up to its own rows' diagonal and
// hands the later ones back unread. Shared tiles are stored in the layout wgmma reads without bank
// conflicts: rows of 64 elements (128 bytes), 16-byte pieces swizzled by the row (piece c of row r
// at c ^ r % 8), a head_dim 128 tile as two such 64-column halves. A consumer rounds its Q rows to
// bf16 once into shared memory, then per key tile issues S = Q·Kᵀ for the next tile (Q and K from
// shared memory, both K-major) together with O += P·V for this one (P from registers, rounded to
// bf16; V from shared memory, N-major: the transposed read wgmma does for 16-bit types), and turns
// the next scores into probabilities while P·V runs (the online softmax on the accumulators: per
// warp, the m16n8 fragments of its 16 rows, as mma.sync's). The output is written as f32. A second
// form of the kernel (`flash_prefill_sm90_tma_*`) has one producer warp load each KV block of a
// tile with TMA (one box per 64 columns of K and of V, through tensor maps of the pools that
// swizzle as the tiles are laid out) instead of the warpgroup's cp.async pieces; it takes block
// sizes that divide the key tile. Over int8 pools (`flash_prefill_sm90_int8_*`) each producer
// thread stages its own raw pieces of a tile and a share of its scales with cp.async into one of its
// staging slots and, once they land, widens them to f16 (exactly: |q| <= 127) into the ring stage,
// the scales beside it; the consumers round Q and P to f16 for f16 MMAs, and multiply the score
// columns by K's scales and the probabilities by V's before P·V, in f32, as flash_prefill.cu's int8
// kernels and the int8 decode kernel do.
//
// Built only for sm_90a (wgmma does not exist elsewhere); for other targets the entry points compile
// to nothing and the host never launches them.
#include "common.cuh"
#include "hopper.cuh"
#include "sm90_items.cuh"

// Consumer warpgroups per block (64 query rows each: 2 or 3) and keys per tile, by head_dim; other
// values are for kernel-lab comparisons (the host reads the block size back as the launch bound, and
// sizes shared memory for these tiles).
#ifndef SM90_WG_HD64
#define SM90_WG_HD64 3
#endif
#ifndef SM90_WG_HD128
#define SM90_WG_HD128 3
#endif
#ifndef SM90_BN_HD64
#define SM90_BN_HD64 128
#endif
#ifndef SM90_BN_HD128
#define SM90_BN_HD128 64
#endif
// Stages of the K/V ring (the host sizes shared memory for 3 stages of the tiles above).
#ifndef SM90_STAGES_HD64
#define SM90_STAGES_HD64 3
#endif
#ifndef SM90_STAGES_HD128
#define SM90_STAGES_HD128 3
#endif
// Consumer warpgroups (MMAs and softmax, 64 query rows each), then one producer warpgroup (loads).
#define PRODUCERS 128
#define THREADS_OF(WG) ((WG) * 128 + PRODUCERS)
// Bytes of one swizzled row (64 bf16) and of one 8-row swizzle pattern.
#define ROW_BYTES 128
#define PATTERN_BYTES 1024
// KV block sizes the kernel takes are multiples of this (the host checks): each thread copies that
// many consecutive keys of one KV block.
#define SM90_BLOCK_MULTIPLE 8

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The MMAs' input type: bf16 over bf16 pools, f16 over int8 pools (their values widen to f16 in two
// instructions a pair, to bf16 in five; f16 keeps three more bits of Q and P than bf16).
template <bool INT8>
struct MmaOf {
    using T = MmaBf16;
};
template <>
struct MmaOf<true> {
    using T = MmaF16;
};

// Two f32 values rounded to the MMAs' input type, as one pair (`lo` in the low half).
template <typename E>
__device__ __forceinline__ unsigned pack_pair(float lo, float hi) {
    return pack_bf16x2(lo, hi);
}
template <>
__device__ __forceinline__ unsigned pack_pair<MmaF16>(float lo, float hi) {
    return pack_f16x2(lo, hi);
}

// Byte offset of 16-byte piece `c` (of HD / 8) of row `r` in a swizzled tile of `rows` rows.
__device__ __forceinline__ unsigned swizzled(int rows, int r, int c) {
    return (c >> 3) * rows * ROW_BYTES + r * ROW_BYTES + (((c & 7) ^ (r & 7)) << 4);
}

// Eight consecutive query values rounded to the MMAs' type E (bf16 ones are already rounded).
template <typename E>
__device__ __forceinline__ uint4 packed8(const float* src) {
    const float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
    return make_uint4(pack_pair<E>(a.x, a.y), pack_pair<E>(a.z, a.w), pack_pair<E>(b.x, b.y),
                      pack_pair<E>(b.z, b.w));
}
template <typename E>
__device__ __forceinline__ uint4 packed8(const bf16_t* src) {
    const uint4 u = *reinterpret_cast<const uint4*>(src);
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
    unsigned r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        r[i] = pack_pair<E>(__uint_as_float(w[i] << 16), __uint_as_float(w[i] & 0xffff0000u));
    }
    return make_uint4(r[0], r[1], r[2], r[3]);
}
template <>
__device__ __forceinline__ uint4 packed8<MmaBf16>(const bf16_t* src) {
    return *reinterpret_cast<const uint4*>(src);
}

// A consumer warpgroup's 64 query rows (`tid` its thread), rounded to the MMAs' type E, into its
// part of the swizzled Q tile of BM rows, from row `first_row` on; rows past `rows` are zero.
template <int HD, int BM, typename E, typename IO>
__device__ __forceinline__ void store_q(
    unsigned char* q_s,  // [BM · HD · 2 bytes], shared, swizzled
    const IO* q,         // [num_tokens, num_heads, HD]: at the warpgroup's first row and head
    int q_stride, int rows, int first_row, int tid) {
    for (int i = tid; i < 64 * HD / 8; i += 128) {
        const int r = i / (HD / 8), c = i % (HD / 8);
        uint4 packed = make_uint4(0u, 0u, 0u, 0u);
        if (r < rows) {
            packed = packed8<E>(q + (long long)r * q_stride + c * 8);
        }
        *reinterpret_cast<uint4*>(q_s + swizzled(BM, first_row + r, c)) = packed;
    }
}

// Issues S = Q·Kᵀ for the warpgroup's 64 rows and a tile's BN keys (one commit group); the Q tile
// has BM rows.
template <int HD, int BN, int BM, typename E>
__device__ __forceinline__ void issue_scores(float (&sc)[BN / 8][4], unsigned q_wg, unsigned k_tile) {
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) {
        // 16 columns (32 bytes) a step along the swizzled rows; the second half of a head_dim 128
        // tile lies its rows' count of rows further.
        const unsigned half = (ks >> 2) * ROW_BYTES, within = (ks & 3) * 32;
        wgmma_ss<BN, E>(sc, smem_desc(q_wg + half * BM + within, 16, PATTERN_BYTES),
                     smem_desc(k_tile + half * BN + within, 16, PATTERN_BYTES), ks > 0);
    }
    wgmma_commit();
}

// Issues O += P·V for the warpgroup's rows and a tile's keys (one commit group): 16 keys (two 8-row
// patterns) a step; V is read N-major, its 64-column halves BN rows apart (the leading offset).
template <int HD, int BN, typename E>
__device__ __forceinline__ void issue_values(float (&o)[HD / 8][4], const unsigned (&p)[BN / 16][4],
                                             unsigned v_tile) {
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks) {
        wgmma_rs<HD, E>(o, p[ks], smem_desc(v_tile + ks * 2 * PATTERN_BYTES, BN * ROW_BYTES,
                                          PATTERN_BYTES), 1);
    }
    wgmma_commit();
}

// The tile's probabilities rounded to pairs of the MMAs' type E, as A fragments of P·V (16 keys
// each).
template <int BN, typename E>
__device__ __forceinline__ void pack_probs(unsigned (&p)[BN / 16][4], const float (&sc)[BN / 8][4]) {
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks) {
        p[ks][0] = pack_pair<E>(sc[2 * ks][0], sc[2 * ks][1]);
        p[ks][1] = pack_pair<E>(sc[2 * ks][2], sc[2 * ks][3]);
        p[ks][2] = pack_pair<E>(sc[2 * ks + 1][0], sc[2 * ks + 1][1]);
        p[ks][3] = pack_pair<E>(sc[2 * ks + 1][2], sc[2 * ks + 1][3]);
    }
}

// Registers per thread of the producer and of the consumers once they trade (setmaxnreg), by the
// consumer warpgroups a block has: at most 64K per SM over the one block it holds (the int8
// producer fits in 32 with its loops over keys not unrolled).
template <int WG>
struct Regs {
    static_assert(WG == 2 || WG == 3, "two or three consumer warpgroups");
    static constexpr int PRODUCER = WG == 2 ? 40 : 32;
    static constexpr int CONSUMER = WG == 2 ? 232 : 160;
    static_assert(WG * 128 * CONSUMER + PRODUCERS * PRODUCER <= 65536, "the SM's register file");
};

// The producer's loads, which lay tiles out as above.
#include "sm90_loads.cuh"

// Zeroes rows [from, BN) of a swizzled tile, by the CONSUMERS consumer threads (`tid` among them): a
// V tile's rows past the keys in view, which P·V multiplies by probabilities of 0 and must not hold
// NaN.
template <int HD, int BN, int CONSUMERS>
__device__ __forceinline__ void zero_rows(unsigned tile, int from, int tid) {
    for (int i = tid; i < (BN - from) * (HD / 8); i += CONSUMERS) {
        const int r = from + i / (HD / 8), c = i % (HD / 8);
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(tile + swizzled(BN, r, c)),
                     "r"(0)
                     : "memory");
    }
}

// Where a block's parts lie in shared memory: Q [BM · HD], then ST stages of K and V tiles [BN · HD],
// all bf16 (f16 over int8 pools) and swizzled; then 128 bytes of barriers: the stages' full and empty
// ones (8 · ST bytes each, from `full`), the two work-item slots' full and empty ones and the slots
// themselves; for int8 pools then the staging slots and the stages' K and V scales [ST][2][BN].
template <int HD, int WG>
struct Layout {
    static constexpr unsigned BN = HD == 64 ? SM90_BN_HD64 : SM90_BN_HD128;
    static constexpr unsigned ST = HD == 64 ? SM90_STAGES_HD64 : SM90_STAGES_HD128;
    static_assert(ST <= 4, "the stages' barriers and the item slots fit 128 bytes");
    static constexpr unsigned K = WG * 64 * HD * 2, FULL = K + 2 * ST * BN * HD * 2;
    // Only the base is held: every other address is it plus a constant.
    unsigned q;
    __device__ __forceinline__ unsigned k() const { return q + K; }
    __device__ __forceinline__ unsigned full() const { return q + FULL; }
    __device__ __forceinline__ unsigned empty() const { return q + FULL + 8 * ST; }
    __device__ __forceinline__ unsigned item_full() const { return q + FULL + 64; }
    __device__ __forceinline__ unsigned item_empty() const { return q + FULL + 80; }
    __device__ __forceinline__ unsigned item_slot() const { return q + FULL + 96; }
    __device__ __forceinline__ unsigned raw() const { return q + FULL + 128; }
    __device__ __forceinline__ unsigned scales() const {
        return raw() + INT8_SLOTS * INT8_SLOT_BYTES(BN);
    }
};

// The producer warpgroup (`tid` its thread) over the block's items: over bf16 pools its thread 0
// schedules them (persistent blocks), over int8 pools the block has one; the warpgroup loads each
// item's key tiles into the ring, whose tiles it counts across items.
template <int HD, int WG, bool INT8>
__device__ __forceinline__ void producer(const Layout<HD, WG>& L, const void* k_cache,
                                         const void* v_cache, const float* k_scales,
                                         const float* v_scales, const Batch& b, int tid) {
    constexpr int BN = HD == 64 ? SM90_BN_HD64 : SM90_BN_HD128;
    constexpr int ST = HD == 64 ? SM90_STAGES_HD64 : SM90_STAGES_HD128;
    constexpr int BM = WG * 64;
    const int total = b.query_tiles * b.num_heads;
    const int shift = (b.block_size & (b.block_size - 1)) == 0 ? __ffs(b.block_size) - 1 : -1;
    int ring = 0;  // tiles loaded so far
    for (int k = 0;; ++k) {
        int index = k == 0 ? (int)blockIdx.x : total;
        if (!INT8) {
            if (tid == 0) {
                if (k > 0) {
                    wait_for_free_stage(L, ring);
                }
                schedule(L, total, k);
            }
            // The warpgroup reads the slot after thread 0 wrote it, and before it may write the
            // slot again (two items on, past this barrier's next use).
            asm volatile("bar.sync 8, %0;" ::"n"(PRODUCERS) : "memory");
            asm volatile("ld.shared.u32 %0, [%1];"
                         : "=r"(index)
                         : "r"(L.item_slot() + 4 * (k & 1))
                         : "memory");
        }
        if (index >= total) {
            break;
        }
        Item it;
        Span sp;
        if (!item_and_span<BM, BN>(index, b, &it, &sp)) {
            continue;  // a surplus item
        }
        const int kv_head = it.h / (b.num_heads / b.num_kv_heads);
        const KeyBlocks kb{b.block_table + (long long)it.s * b.max_blocks_per_seq, b.block_size,
                           shift, 0, 0, -1};
        if (INT8) {
            produce_int8<HD, BN, ST>(
                L.k(), L.full(), L.empty(), L.raw(), L.scales(),
                static_cast<const signed char*>(k_cache) + kv_head * HD,
                static_cast<const signed char*>(v_cache) + kv_head * HD, k_scales + kv_head,
                v_scales + kv_head, kb, b.num_kv_heads * HD, b.num_kv_heads, sp.end, sp.tiles,
                ring, tid);
        } else {
            produce<HD, BN, ST>(L.k(), L.full(), L.empty(),
                                static_cast<const bf16_t*>(k_cache) + kv_head * HD,
                                static_cast<const bf16_t*>(v_cache) + kv_head * HD, kb,
                                b.num_kv_heads * HD, sp.end, sp.tiles, ring, tid);
        }
        ring += sp.tiles;
    }
    cp_async_wait_all();
}

// The TMA form's producer, one warp (`lane` its lane), over the block's one item.
template <int HD, int WG>
__device__ __forceinline__ void producer_tma(const Layout<HD, WG>& L, const TensorMap* k_map,
                                             const TensorMap* v_map, const Batch& b, int lane) {
    constexpr int BN = HD == 64 ? SM90_BN_HD64 : SM90_BN_HD128;
    constexpr int ST = HD == 64 ? SM90_STAGES_HD64 : SM90_STAGES_HD128;
    constexpr int BM = WG * 64;
    Item it;
    Span sp;
    if (!item_and_span<BM, BN>(blockIdx.x, b, &it, &sp)) {
        return;  // a surplus item
    }
    produce_tma<HD, BN, ST>(L.k(), L.full(), L.empty(), k_map, v_map,
                            b.block_table + (long long)it.s * b.max_blocks_per_seq, b.block_size,
                            it.h / (b.num_heads / b.num_kv_heads), sp.end, sp.tiles, 0, lane);
}

// A consumer warpgroup (`wg`, `tid` its thread) on one item, whose first key tile is the ring's
// tile `ring` (counted across items): its 64 query rows against the keys they see, the output
// written.
template <int HD, int WG, bool TMA, bool INT8, typename IO>
__device__ __forceinline__ void consume(const Layout<HD, WG>& L, unsigned char* smem, const IO* q, IO* out,
                                        const Item& it, const Span& sp, int ring, int num_heads,
                                        float scale_log2, int wg, int tid) {
    constexpr int BN = HD == 64 ? SM90_BN_HD64 : SM90_BN_HD128;
    constexpr int ST = HD == 64 ? SM90_STAGES_HD64 : SM90_STAGES_HD128;
    constexpr int TILE_BYTES = BN * HD * 2, BM = WG * 64, CONSUMERS = WG * 128;
    using E = typename MmaOf<INT8>::T;
    const auto k_tile = [&](int t) { return L.k() + 2 * ((ring + t) % ST) * TILE_BYTES; };
    const auto full = [&](int t) { return L.full() + 8 * ((ring + t) % ST); };
    const auto full_parity = [&](int t) { return (unsigned)((ring + t) / ST) & 1; };
    const auto empty = [&](int t) { return L.empty() + 8 * ((ring + t) % ST); };
    // Tile t's K scales (`kv` 0) or V's (1), as a generic pointer.
    const auto key_scales = [&](int t, int kv) {
        return reinterpret_cast<const float*>(smem + (L.scales() - L.q)) +
               (((ring + t) % ST) * 2 + kv) * BN;
    };
    const int q_stride = num_heads * HD;
    const int warp = tid >> 5;
    const int wrow = sp.m0 + wg * 64 + warp * 16;
    // The keys this warpgroup's rows see, and the tiles holding them (the TMA form's consumers read
    // every tile the producer loads: they zero the last one's tail together).
    const int wg_first = sp.prefix + sp.m0 + wg * 64;  // position of the warpgroup's first row
    const int wg_end = TMA ? sp.end : min(sp.prefix + sp.q_len, wg_first + 64);
    const int wg_tiles = (wg_end + BN - 1) / BN;
    // Tiles crossing the diagonal or the context's end are masked.
    const auto masked = [&](int t) { return (t + 1) * BN > wg_end || (t + 1) * BN > wg_first; };
    // The warpgroup's Q rows (its previous item's MMAs are done with them), seen by its MMAs.
    store_q<HD, BM, E>(smem, q + (long long)(sp.q0 + sp.m0 + wg * 64) * q_stride + it.h * HD,
                       q_stride, sp.q_len - sp.m0 - wg * 64, wg * 64, tid);
    fence_async_shared();
    asm volatile("bar.sync %0, 128;" ::"r"(4 + wg) : "memory");

    // This warpgroup's 64 Q rows: 8-row patterns 1024 bytes apart, a head_dim 128 tile's second
    // 64 columns BM rows further.
    const unsigned q_wg = L.q + wg * 64 * ROW_BYTES;
    float o[HD / 8][4], sc[BN / 8][4], m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f}, alpha[2];
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) {
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    }
    unsigned p[BN / 16][4];
    mbar_wait(full(0), full_parity(0));
    fence_async_shared();
    wgmma_fence();
    issue_scores<HD, BN, BM, E>(sc, q_wg, k_tile(0));
    wgmma_wait<0>();
    pin<BN / 8>(sc);
    if (INT8) {
        scale_key_columns<BN / 8>(sc, key_scales(0, 0));
    }
    if (masked(0)) {
        mask_causal<BN / 8>(sc, 0, sp.prefix + wrow);
    }
    softmax_tile<BN / 8, !INT8>(sc, m, l, alpha, scale_log2);
    if (INT8) {
        scale_key_columns<BN / 8>(sc, key_scales(0, 1));  // P·V with V's scales folded into P
    }
    pack_probs<BN, E>(p, sc);
    // Each step: P·V of tile jt runs while tile jt + 1's scores are turned into probabilities.
    for (int jt = 0; jt + 1 < wg_tiles; ++jt) {
        mbar_wait(full(jt + 1), full_parity(jt + 1));
        fence_async_shared();
        pin<HD / 8>(o);
        wgmma_fence();
        issue_scores<HD, BN, BM, E>(sc, q_wg, k_tile(jt + 1));
        issue_values<HD, BN, E>(o, p, k_tile(jt) + TILE_BYTES);
        wgmma_wait<1>();  // the scores are in; P·V may still run
        pin<BN / 8>(sc);
        if (INT8) {
            scale_key_columns<BN / 8>(sc, key_scales(jt + 1, 0));
        }
        if (masked(jt + 1)) {
            mask_causal<BN / 8>(sc, (jt + 1) * BN, sp.prefix + wrow);
        }
        softmax_tile<BN / 8, !INT8>(sc, m, l, alpha, scale_log2);
        if (INT8) {
            scale_key_columns<BN / 8>(sc, key_scales(jt + 1, 1));
        }
        wgmma_wait<0>();
        pin<HD / 8>(o);
        mbar_arrive(empty(jt));  // tile jt's K and V read
        rescale_rows<HD / 8>(o, alpha);
        pack_probs<BN, E>(p, sc);
    }
    if (TMA && sp.end < sp.tiles * BN) {
        // The last tile's V rows past the keys in view hold what the pool had there (or nothing):
        // the warpgroups zero them together before any reads the tile.
        zero_rows<HD, BN, CONSUMERS>(k_tile(sp.tiles - 1) + TILE_BYTES, sp.end - (sp.tiles - 1) * BN,
                                     wg * 128 + tid);
        fence_async_shared();
        asm volatile("bar.sync 7, %0;" ::"n"(CONSUMERS) : "memory");
    }
    pin<HD / 8>(o);
    wgmma_fence();
    issue_values<HD, BN, E>(o, p, k_tile(wg_tiles - 1) + TILE_BYTES);
    wgmma_wait<0>();
    pin<HD / 8>(o);
    // Hands back the warpgroup's last tile, then the ones past its rows unread, each once it is
    // full (so no arrival counts towards an earlier use of the stage), for the producer to refill.
    for (int t = wg_tiles - 1; t < sp.tiles; ++t) {
        if (t >= wg_tiles) {
            mbar_wait(full(t), full_parity(t));
        }
        mbar_arrive(empty(t));
    }
    store_rows<HD / 8>(o, l, out + it.h * HD, sp.q0, wrow, sp.q_len, q_stride);
}

// A block: one producer warpgroup and WG consumer warpgroups over (query tile, head) items until
// none is left for it; the K/V ring and its barriers carry over from item to item, so the producer
// loads the next item's first tiles while the consumers finish the last ones, and a warpgroup whose
// rows end early starts the next item's.
template <int HD, int WG, bool TMA, bool INT8, typename IO>
__device__ void prefill_sm90(
    const IO* q,                      // [num_tokens, num_heads, HD]: f32, or bf16 (bf16 pools)
    const void* k_cache,              // [num_blocks, block_size, num_kv_heads, HD]: bf16 or int8
    const void* v_cache,              // (cp.async form)
    const float* k_scales,            // [num_blocks, block_size, num_kv_heads]: int8 pools
    const float* v_scales,
    const TensorMap* k_map,           // the pools' tensor maps (TMA form)
    const TensorMap* v_map,
    const Batch& b,
    IO* out,                          // [num_tokens, num_heads, HD]
    float scale) {
    constexpr int BN = HD == 64 ? SM90_BN_HD64 : SM90_BN_HD128;
    constexpr int ST = HD == 64 ? SM90_STAGES_HD64 : SM90_STAGES_HD128;
    constexpr int BM = WG * 64, CONSUMERS = WG * 128;
    // int8 pools: the staging slots and the stages' scales after the barriers.
    constexpr int INT8_BYTES = INT8 ? INT8_SLOTS * INT8_SLOT_BYTES(BN) + ST * 2 * BN * 4 : 0;
    static_assert((BM + 2 * ST * BN) * HD * 2 + 1024 + 128 + INT8_BYTES <= 227 * 1024,
                  "a block's shared memory");
    static_assert(!(INT8 && TMA), "the TMA form reads bf16 pools");
    // Dynamic shared memory, from its first 1024-byte boundary (the swizzle pattern's alignment).
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    const Layout<HD, WG> L{smem_addr(smem)};
    if (threadIdx.x == 0) {
        for (int st = 0; st < ST; ++st) {
            mbar_init(L.full() + 8 * st, TMA ? 1 : PRODUCERS);
            mbar_init(L.empty() + 8 * st, CONSUMERS);
        }
        for (int slot = 0; slot < 2; ++slot) {
            mbar_init(L.item_full() + 8 * slot, 1);
            mbar_init(L.item_empty() + 8 * slot, CONSUMERS);  // read by every consumer thread
        }
        if (TMA) {
            // The barriers' initialisation, seen by the TMA unit that completes their transactions.
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
    }
    __syncthreads();
    // The warpgroup, broadcast from lane 0 so the compiler knows it is the same across the warp:
    // what derives from it (the warpgroup's tiles, their shared addresses, the MMA descriptors)
    // stays on the uniform datapath.
    const int wg = __shfl_sync(0xffffffffu, threadIdx.x >> 7, 0), tid = threadIdx.x & 127;
    if (wg == WG) {
        regs_shrink<Regs<WG>::PRODUCER>();
        if (TMA) {
            if (tid < 32) {
                producer_tma<HD, WG>(L, k_map, v_map, b, tid);
            }
        } else {
            producer<HD, WG, INT8>(L, k_cache, v_cache, k_scales, v_scales, b, tid);
        }
        return;
    }
    regs_grow<Regs<WG>::CONSUMER>();
    const float scale_log2 = scale * 1.4426950408889634f;
    const int total = b.query_tiles * b.num_heads;
    int ring = 0;  // tiles the producer loaded for the items before
    for (int k = 0;; ++k) {
        // Persistent blocks (bf16 pools, cp.async) take their items from the scheduler; the others
        // have one.
        const int index = !TMA && !INT8 ? read_item(L, k) : k == 0 ? (int)blockIdx.x : total;
        if (index >= total) {
            break;
        }
        Item it;
        Span sp;
        if (!item_and_span<BM, BN>(index, b, &it, &sp)) {
            continue;  // a surplus item
        }
        consume<HD, WG, TMA, INT8, IO>(L, smem, q, out, it, sp, ring, b.num_heads, scale_log2, wg,
                                       tid);
        ring += sp.tiles;
    }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Entry points: a grid along x of query_tiles · num_heads blocks (the TMA and int8 forms), or of at
// most that many (the cp.async form over bf16 pools: persistent, one wave, as many as the SMs hold),
// query_tiles = num_tokens / BM + num_seqs (the surplus items are skipped), THREADS_OF(WG)
// threads (the launch bound; BM = 64 · WG), dynamic shared memory at least (BM + 2 · ST · BN) · HD · 2
// + 1024 + 128 bytes. Every form takes q [num_tokens, num_heads, HD], then the pools, then the batch:
// query_start_loc [num_seqs + 1], seq_lens [num_seqs], block_table [num_seqs, max_blocks_per_seq],
// out [num_tokens, num_heads, HD], the sizes, query_tiles and the softmax scale. q and out are
// f32, or bf16 in the `_bf16io` forms (the products before and after read and write bf16, so neither
// is rounded on a pass of its own).
// The cp.async form takes the bf16 pools [num_blocks, block_size, num_kv_heads, HD] (block sizes
// multiples of SM90_BLOCK_MULTIPLE); the TMA form their tensor maps over [num_blocks · block_size,
// num_kv_heads, HD] (boxes of 64 × 1 × block_size, 128-byte swizzle; block sizes dividing 128).
#define SM90_BATCH_PARAMS(IO)                                                               \
    const unsigned *query_start_loc, const unsigned *seq_lens, const unsigned *block_table, \
        IO *out, int num_seqs, int num_heads, int num_kv_heads, int block_size,             \
        int max_blocks_per_seq, int query_tiles, float scale
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SM90_RUN(IO, HD, WG, TMA, INT8, K, V, KS, VS, K_MAP, V_MAP)                               \
    prefill_sm90<HD, WG, TMA, INT8, IO>(                                                           \
        q, K, V, KS, VS, K_MAP, V_MAP,                                                             \
        Batch{query_start_loc, seq_lens, block_table, num_seqs, num_heads, num_kv_heads,          \
              block_size, max_blocks_per_seq, query_tiles},                                        \
        out, scale)
#else
#define SM90_RUN(IO, HD, WG, TMA, INT8, K, V, KS, VS, K_MAP, V_MAP)
#endif
// Consumer warpgroups of the int8 form at head_dim 64 (kernel lab: 2 against 3).
#ifndef SM90_WG_INT8_HD64
#define SM90_WG_INT8_HD64 3
#endif

// The forms over bf16 pools: cp.async and TMA loads, head_dim 64 and 128, q and out in f32, then in bf16.
extern "C" __global__ void __launch_bounds__(THREADS_OF(SM90_WG_HD64), 1) flash_prefill_sm90_bf16_hd64(
    const float* q, const bf16_t* k_cache, const bf16_t* v_cache, SM90_BATCH_PARAMS(float)) {
    SM90_RUN(float, 64, SM90_WG_HD64, false, false, k_cache, v_cache, nullptr, nullptr, nullptr, nullptr);
}

extern "C" __global__ void __launch_bounds__(THREADS_OF(SM90_WG_HD128), 1) flash_prefill_sm90_bf16_hd128(
    const float* q, const bf16_t* k_cache, const bf16_t* v_cache, SM90_BATCH_PARAMS(float)) {
    SM90_RUN(float, 128, SM90_WG_HD128, false, false, k_cache, v_cache, nullptr, nullptr, nullptr, nullptr);
}

extern "C" __global__ void __launch_bounds__(THREADS_OF(SM90_WG_HD64), 1) flash_prefill_sm90_tma_bf16_hd64(
    const float* q, const __grid_constant__ TensorMap k_map, const __grid_constant__ TensorMap v_map,
    SM90_BATCH_PARAMS(float)) {
    SM90_RUN(float, 64, SM90_WG_HD64, true, false, nullptr, nullptr, nullptr, nullptr, &k_map, &v_map);
}

extern "C" __global__ void __launch_bounds__(THREADS_OF(SM90_WG_HD128), 1) flash_prefill_sm90_tma_bf16_hd128(
    const float* q, const __grid_constant__ TensorMap k_map, const __grid_constant__ TensorMap v_map,
    SM90_BATCH_PARAMS(float)) {
    SM90_RUN(float, 128, SM90_WG_HD128, true, false, nullptr, nullptr, nullptr, nullptr, &k_map, &v_map);
}

extern "C" __global__ void __launch_bounds__(THREADS_OF(SM90_WG_HD64), 1) flash_prefill_sm90_bf16_hd64_bf16io(
    const bf16_t* q, const bf16_t* k_cache, const bf16_t* v_cache, SM90_BATCH_PARAMS(bf16_t)) {
    SM90_RUN(bf16_t, 64, SM90_WG_HD64, false, false, k_cache, v_cache, nullptr, nullptr, nullptr, nullptr);
}

extern "C" __global__ void __launch_bounds__(THREADS_OF(SM90_WG_HD128), 1) flash_prefill_sm90_bf16_hd128_bf16io(
    const bf16_t* q, const bf16_t* k_cache, const bf16_t* v_cache, SM90_BATCH_PARAMS(bf16_t)) {
    SM90_RUN(bf16_t, 128, SM90_WG_HD128, false, false, k_cache, v_cache, nullptr, nullptr, nullptr, nullptr);
}

extern "C" __global__ void __launch_bounds__(THREADS_OF(SM90_WG_HD64), 1) flash_prefill_sm90_tma_bf16_hd64_bf16io(
    const bf16_t* q, const __grid_constant__ TensorMap k_map, const __grid_constant__ TensorMap v_map,
    SM90_BATCH_PARAMS(bf16_t)) {
    SM90_RUN(bf16_t, 64, SM90_WG_HD64, true, false, nullptr, nullptr, nullptr, nullptr, &k_map, &v_map);
}

extern "C" __global__ void __launch_bounds__(THREADS_OF(SM90_WG_HD128), 1) flash_prefill_sm90_tma_bf16_hd128_bf16io(
    const bf16_t* q, const __grid_constant__ TensorMap k_map, const __grid_constant__ TensorMap v_map,
    SM90_BATCH_PARAMS(bf16_t)) {
    SM90_RUN(bf16_t, 128, SM90_WG_HD128, true, false, nullptr, nullptr, nullptr, nullptr, &k_map, &v_map);
}

// int8 pools [num_blocks, block_size, num_kv_heads, HD] and their scales [num_blocks, block_size,
// num_kv_heads] (f32), block sizes multiples of SM90_BLOCK_MULTIPLE; dynamic shared memory as the
// bf16 form's plus INT8_SLOTS · INT8_SLOT_BYTES(BN) + ST · 2 · BN · 4 bytes.
extern "C" __global__ void __launch_bounds__(THREADS_OF(SM90_WG_INT8_HD64), 1) flash_prefill_sm90_int8_hd64(
    const float* q, const signed char* k_cache, const signed char* v_cache, const float* k_scales,
    const float* v_scales, SM90_BATCH_PARAMS(float)) {
    SM90_RUN(float, 64, SM90_WG_INT8_HD64, false, true, k_cache, v_cache, k_scales, v_scales, nullptr,
             nullptr);
}

extern "C" __global__ void __launch_bounds__(THREADS_OF(SM90_WG_HD128), 1) flash_prefill_sm90_int8_hd128(
    const float* q, const signed char* k_cache, const signed char* v_cache, const float* k_scales,
    const float* v_scales, SM90_BATCH_PARAMS(float)) {
    SM90_RUN(float, 128, SM90_WG_HD128, false, true, k_cache, v_cache, k_scales, v_scales, nullptr,
             nullptr);
}

// The int8 forms with q and out in bf16 (q widened to f16 for the MMAs as it is stored).
extern "C" __global__ void __launch_bounds__(THREADS_OF(SM90_WG_INT8_HD64), 1) flash_prefill_sm90_int8_hd64_bf16io(
    const bf16_t* q, const signed char* k_cache, const signed char* v_cache, const float* k_scales,
    const float* v_scales, SM90_BATCH_PARAMS(bf16_t)) {
    SM90_RUN(bf16_t, 64, SM90_WG_INT8_HD64, false, true, k_cache, v_cache, k_scales, v_scales, nullptr,
             nullptr);
}

extern "C" __global__ void __launch_bounds__(THREADS_OF(SM90_WG_HD128), 1) flash_prefill_sm90_int8_hd128_bf16io(
    const bf16_t* q, const signed char* k_cache, const signed char* v_cache, const float* k_scales,
    const float* v_scales, SM90_BATCH_PARAMS(bf16_t)) {
    SM90_RUN(bf16_t, 128, SM90_WG_HD128, false, true, k_cache, v_cache, k_scales, v_scales, nullptr,
             nullptr);
}
