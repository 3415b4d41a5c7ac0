// The Hopper prefill kernel's loads (flash_prefill_sm90.cu): what its producer warpgroup copies
// into the K/V ring for one item, as cp.async pieces through the block table, as TMA boxes, or over
// int8 pools as raw pieces staged and widened to f16. Included by that module after its tile geometry
// (PRODUCERS, ROW_BYTES, SM90_BLOCK_MULTIPLE, swizzled) and hopper.cuh, for sm_90a builds only.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Issues the async copies of keys [j0, j0 + BN) of one KV head into the swizzled K and V tiles (rows
// at or past `end` zero-filled), by the producer warpgroup (`tid` its thread): each work item is one
// 16-byte piece of 8 consecutive keys, which share one KV block (one block-table lookup), and the
// producer's threads take consecutive pieces of the same keys.
template <int HD, int BN>
__device__ __forceinline__ void load_tiles(
    unsigned k_dst, unsigned v_dst,  // shared addresses of the K and V tiles
    const bf16_t* k_pool,            // [num_blocks, block_size, num_kv_heads, HD]: at the KV head
    const bf16_t* v_pool,            // likewise
    KeyBlocks kb, int row_stride, int j0, int end, int tid) {
    constexpr int CHUNKS = HD / 8, GROUP = SM90_BLOCK_MULTIPLE;
    constexpr int ITEMS = BN / GROUP * CHUNKS;
#pragma unroll 1
    for (int it = 0; it < (ITEMS + PRODUCERS - 1) / PRODUCERS; ++it) {
        const int item = tid + it * PRODUCERS;
        if (item >= ITEMS) {
            break;
        }
        const int c = item % CHUNKS, r0 = item / CHUNKS * GROUP;
        const int first = j0 + r0;
        long long off = c * 8;
        int stop = first;
        if (first < end) {
            off += kb.slot(first) * row_stride;
            stop = end;
        }
#pragma unroll
        for (int i = 0; i < GROUP; ++i) {
            const int bytes = first + i < stop ? 16 : 0;
            const unsigned at = swizzled(BN, r0 + i, c);
            cp_async_16(k_dst + at, k_pool + off, bytes);
            cp_async_16(v_dst + at, v_pool + off, bytes);
            off += first + i + 1 < stop ? row_stride : 0;
        }
    }
}

// The producer warpgroup: every key tile of the block, through the ring of ST stages (the producer
// fills a stage as soon as every consumer warpgroup is done with the tile it held).
template <int HD, int BN, int ST>
__device__ __forceinline__ void produce(
    unsigned k_base,              // shared: the ring's first K tile (stage s: + 2 · s · BN · HD · 2)
    unsigned full, unsigned empty,  // shared: the stages' barriers (8 bytes apart)
    const bf16_t* k_head, const bf16_t* v_head,  // the pools at the KV head
    const KeyBlocks& kb, int row_stride, int end, int tiles,
    int ring,  // the ring's tiles before this item's
    int tid) {
    constexpr int TILE_BYTES = BN * HD * 2;
    for (int t = 0; t < tiles; ++t) {
        const int g = ring + t, st = g % ST;
        if (g >= ST) {
            mbar_wait(empty + 8 * st, (g / ST - 1) & 1);  // ring tile g - ST released
        }
        const unsigned k_tile = k_base + 2 * st * TILE_BYTES;
        load_tiles<HD, BN>(k_tile, k_tile + TILE_BYTES, k_head, v_head, kb, row_stride, t * BN, end,
                           tid);
        mbar_arrive_on_copies(full + 8 * st);
    }
}

// The producer in the TMA form, one warp (`lane` its lane): each KV block of a tile in view is one
// box of block_size rows per 64 columns of K and of V (tensor maps over [slots, num_kv_heads, HD] with
// the tiles' 128-byte swizzle), landing where load_tiles would put it; blocks past `end` are not
// loaded (the consumers zero the V rows past it). The warp reads a tile's block ids at once (at most
// BN / 8 of them), lane 0 issues the copies. Block sizes divide BN.
template <int HD, int BN, int ST>
__device__ __forceinline__ void produce_tma(unsigned k_base, unsigned full, unsigned empty,
                                            const TensorMap* k_map, const TensorMap* v_map,
                                            const unsigned* table, int block_size, int kv_head,
                                            int end, int tiles, int ring, int lane) {
    constexpr int TILE_BYTES = BN * HD * 2;
    static_assert(BN / SM90_BLOCK_MULTIPLE <= 32, "a tile's block ids fit one warp");
    for (int t = 0; t < tiles; ++t) {
        const int g = ring + t, st = g % ST;
        if (g >= ST) {
            mbar_wait(empty + 8 * st, (g / ST - 1) & 1);  // ring tile g - ST released
        }
        const unsigned k_tile = k_base + 2 * st * TILE_BYTES, bar = full + 8 * st;
        const int first = t * BN / block_size;
        const int blocks = (min(end, (t + 1) * BN) - t * BN + block_size - 1) / block_size;
        const int id = lane < blocks ? (int)table[first + lane] : 0;
        if (lane == 0) {
            mbar_arrive_expect(bar, blocks * block_size * HD * 2 * 2);
        }
        for (int b = 0; b < blocks; ++b) {
            const int slot = __shfl_sync(0xffffffffu, id, b) * block_size;
            if (lane == 0) {
#pragma unroll
                for (int half = 0; half < HD / 64; ++half) {
                    const unsigned at = half * BN * ROW_BYTES + b * block_size * ROW_BYTES;
                    tma_load_3d(k_tile + at, k_map, half * 64, kv_head, slot, bar);
                    tma_load_3d(k_tile + TILE_BYTES + at, v_map, half * 64, kv_head, slot, bar);
                }
            }
        }
    }
}

// int8 pools: keys a producer thread stages per tile (consecutive, within one KV block: the host
// takes block sizes that are multiples of 8), each one 16-byte piece of K and one of V. A staging
// slot holds the pieces (16 bytes) of the 2 · INT8_KEYS (key, K or V) pairs of every thread,
// thread-major within each pair so a warp's are adjacent, then the tile's K and V scales [2][BN]
// (f32), each copied by one thread.
#define INT8_KEYS 4
#define INT8_SLOT_BYTES(BN) (2 * INT8_KEYS * PRODUCERS * 16 + 2 * (BN) * 4)
// Staging slots: tiles are staged INT8_SLOTS - 1 ahead of the one being widened (kernel lab: three
// slots measured the same as two; the host sizes shared memory for two).
#ifndef INT8_SLOTS
#define INT8_SLOTS 2
#endif

// The producer warpgroup over int8 pools (`tid` its thread). For every key tile it stages its raw
// pieces (16 columns of INT8_KEYS keys, K and V) and its share of the tile's scales (one or two)
// into staging slot t % INT8_SLOTS with cp.async (rows at or past `end` zero-filled), INT8_SLOTS - 1
// tiles ahead; once they landed and the ring stage is free, it widens its pieces into the stage's
// swizzled f16 tiles (exactly: |q| <= 127), copies its scales into the stage's scale arrays, and
// arrives on the stage's full barrier. What a thread widens or copies is what it staged, so no thread waits for another's.
template <int HD, int BN, int ST>
__device__ __forceinline__ void produce_int8(
    unsigned k_base,                // shared: the ring's first K tile (stage s: + 2 · s · BN · HD · 2)
    unsigned full, unsigned empty,  // shared: the stages' barriers (8 bytes apart)
    unsigned raw_base,              // shared: the INT8_SLOTS staging slots
    unsigned scale_base,            // shared: [ST][2][BN] f32, K's then V's scales of each stage
    const signed char* k_head, const signed char* v_head,  // the pools at the KV head
    const float* ks_head, const float* vs_head,            // their scales at the KV head
    const KeyBlocks& kb, int row_stride, int scale_stride, int end, int tiles,
    int ring,  // the ring's tiles before this item's
    int tid) {
    constexpr int TILE_BYTES = BN * HD * 2, PIECES = HD / 16, PAIRS = 2 * INT8_KEYS;
    constexpr int SLOT_BYTES = INT8_SLOT_BYTES(BN), SCALES = 2 * BN;
    static_assert(BN / INT8_KEYS * PIECES == PRODUCERS, "one item a producer thread");
    static_assert(SCALES % PRODUCERS == 0, "the same count of scales a producer thread");
    // This thread's piece c and first key r0: consecutive threads take consecutive pieces of a key
    // group. The stores of a quarter warp then land two to a 16-byte bank group (Nsight Compute:
    // 5.8-way conflicts on average over the kernel's shared stores at head_dim 128), but spreading
    // them over eight bank groups (two key groups a quarter warp, one in rotated key order) measured
    // the same TFLOP/s: the stores are not what holds the int8 form back.
    const int c = tid % PIECES, r0 = tid / PIECES * INT8_KEYS;
    // Where pair p (key i of K: i; of V: INT8_KEYS + i) of this thread lies in a slot, and scale i
    // (K's of key i, or V's of key i - BN) of the tile.
    const auto piece_at = [&](unsigned raw, int p) { return raw + (p * PRODUCERS + tid) * 16; };
    const auto scale_at = [&](unsigned raw, int i) { return raw + PAIRS * PRODUCERS * 16 + i * 4; };
    const auto stage = [&](int t) {
        const int first = t * BN + r0;
        const int valid = first < end ? min(INT8_KEYS, end - first) : 0;
        const long long slot = valid > 0 ? kb.slot(first) : 0;
        const unsigned raw = raw_base + (t % INT8_SLOTS) * SLOT_BYTES;
#pragma unroll 1
        for (int i = 0; i < INT8_KEYS; ++i) {
            const long long row = slot + (i < valid ? i : 0);
            const int bytes = i < valid ? 16 : 0;
            cp_async_16(piece_at(raw, i), k_head + row * row_stride + c * 16, bytes);
            cp_async_16(piece_at(raw, INT8_KEYS + i), v_head + row * row_stride + c * 16, bytes);
        }
#pragma unroll
        for (int i = tid; i < SCALES; i += PRODUCERS) {
            const int key = t * BN + i % BN;
            const float* scales = i < BN ? ks_head : vs_head;
            const long long row = key < end ? kb.slot(key) : 0;
            cp_async_4(scale_at(raw, i), scales + row * scale_stride, key < end ? 4 : 0);
        }
        cp_async_commit();
    };
    const auto widen = [&](int t) {
        const int g = ring + t, st = g % ST;
        if (g >= ST) {
            mbar_wait(empty + 8 * st, (g / ST - 1) & 1);  // ring tile g - ST released
        }
        const unsigned raw = raw_base + (t % INT8_SLOTS) * SLOT_BYTES;
        const unsigned k_tile = k_base + 2 * st * TILE_BYTES;
        // A key at a time, its K and V pieces loaded together, then widened and stored.
#pragma unroll 1
        for (int i = 0; i < INT8_KEYS; ++i) {
            uint4 piece[2];
#pragma unroll
            for (int kv = 0; kv < 2; ++kv) {
                asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(piece[kv].x), "=r"(piece[kv].y), "=r"(piece[kv].z),
                               "=r"(piece[kv].w)
                             : "r"(piece_at(raw, kv * INT8_KEYS + i)));
            }
#pragma unroll
            for (int kv = 0; kv < 2; ++kv) {
                unsigned w[8];
                widen_int8x16_f16(piece[kv], w);
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(
                                     k_tile + kv * TILE_BYTES + swizzled(BN, r0 + i, 2 * c + half)),
                                 "r"(w[4 * half]), "r"(w[4 * half + 1]), "r"(w[4 * half + 2]),
                                 "r"(w[4 * half + 3])
                                 : "memory");
                }
            }
        }
        // This thread's scales, K's at [st][0][key] and V's at [st][1][key].
#pragma unroll
        for (int i = tid; i < SCALES; i += PRODUCERS) {
            unsigned v;
            asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(scale_at(raw, i)));
            asm volatile("st.shared.u32 [%0], %1;" ::"r"(scale_base + (st * SCALES + i) * 4), "r"(v)
                         : "memory");
        }
        fence_async_shared();  // the widened tiles, seen by the consumers' MMAs
        mbar_arrive(full + 8 * st);
    };
#pragma unroll
    for (int t = 0; t + 1 < INT8_SLOTS; ++t) {
        if (t < tiles) {
            stage(t);
        }
    }
    for (int t = 0; t < tiles; ++t) {
        if (t + INT8_SLOTS - 1 < tiles) {
            stage(t + INT8_SLOTS - 1);  // into the slot tile t - 1 left
            cp_async_wait<INT8_SLOTS - 1>();  // tile t's pieces and scales landed
        } else {
            cp_async_wait<0>();
        }
        widen(t);
    }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
