// A decode step's transformer layers for one sequence in one persistent launch (sm_90a): one block
// an SM, every block resident at once (a cooperative launch), running each layer as five phases with
// a grid-wide barrier after each:
//   0. RMSNorm, the q/k/v products, RoPE on q and k, k and v written to the layer's bf16 pools;
//   1. attention of the new query over the sequence's keys, split-KV, GQA-aware; the last split of
//      a KV head to finish merges that head's splits;
//   2. the output product, added onto the residual stream x;
//   3. RMSNorm, the gate and up products, silu(gate) · up;
//   4. the down product, added onto x.
// The products are those of gemv.cu (activations rounded to bf16 and staged once a block, sums in
// f32); a warp takes a pair of weight rows at a time (RoPE's two halves, gate and up, or two
// neighbouring rows).
//
// What makes it one launch worth having is the weight stream: weights are no phase's output, so
// each warp copies the rows it will multiply (its pairs of the block's contiguous share of every
// product of every layer, in the order it takes them) into a ring of 4 KiB slots of its own in shared
// memory (cp.async.bulk, one "full" mbarrier a slot), refilling a slot as soon as it has read it.
// A warp's copies thus run ahead of its products across the barriers by as much as its ring holds
// (5 slots at the Llama-3.2-1B shape, 160 KiB a block, some 6 µs of an SM's share of the memory's
// bandwidth): while the warps wait at a barrier, stage activations or attend, the memory keeps
// streaming the next product's weights. Each warp waits only on its own slots, whose every use it
// has seen, so a barrier's parity always names the copy it waits for. The barriers between phases
// are a counter in global memory that each block bumps once and then watches.
//
// A ring holds a few microseconds of the memory's bandwidth; while every block stages, attends or
// waits at a barrier, the rings are full and the memory would idle. With `ahead` set, each warp
// also keeps the `ahead` chunks after its ring's asked of L2 (cp.async.bulk.prefetch.L2), topped up
// after every barrier, so the memory streams the coming weights through those pauses, and the
// ring's copies (with an evict-first hint, so they do not push the prefetched lines out) find them
// in L2.
#include "common.cuh"
#include "hopper.cuh"

#define STEP_WARPS 8                         // consumer warps a block
#define STEP_CONSUMERS (STEP_WARPS * 32)
#define STEP_THREADS STEP_CONSUMERS
#define CHUNK_ELEMS 2048                     // bf16 weights a ring slot holds
#define CHUNK_BYTES (CHUNK_ELEMS * 2)
#define STEP_MAX_SPLITS 32                   // key splits a KV head at most (a lane each to merge)
#define STEP_SPLIT_KEYS 32                   // keys a split at least
#define STEP_MAX_GROUP 8                     // query heads a KV head at most

// One layer's weights and pools.
struct StepLayer {
    const bf16_t *wq, *wk, *wv, *wo, *wg, *wu, *wd;  // [out, in] each
    const float *norm1, *norm2;                      // the RMSNorms before q/k/v and gate/up
    bf16_t *kc, *vc;  // [num_slots, kv_heads * head_dim]
};

// What the step reads and writes, then `layers` StepLayer records (the host lays both out in one
// buffer of 8-byte words).
struct StepArgs {
    float* x;              // [hidden]: the residual stream, updated in place
    float* q;              // [heads * head_dim]: the rotated query
    float* attn;           // [heads * head_dim]: attention's output
    float* act;            // [inter]: silu(gate) · up
    float* parts;          // [heads, STEP_MAX_SPLITS, head_dim]: the splits' outputs
    float* part_ml;        // [heads, STEP_MAX_SPLITS, 2]: their maxima (log2 domain) and sums
    unsigned* counters;    // [1 + layers * kv_heads], zero at launch: barrier, then arrivals
    const float* rope;     // [head_dim]: cos, then sin, at the token's position
    const unsigned* slot;  // [1]: the token's pool slot
    const unsigned* block_table;  // the sequence's blocks
    const unsigned* seq_len;      // [1]: keys, the new one included
    unsigned long long* profile;  // null, or [5 · layers + 1][blocks][2]: see `note_time`
    long long layers, hidden, heads, kv_heads, head_dim, inter, block_size, nslots;
    long long ahead;       // chunks a warp keeps prefetched into L2 beyond its ring (0: none)
    float eps, eps_pad, scale, scale_pad;  // RMSNorm epsilon; 1 / sqrt(head_dim)
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ float load_cg(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ float4 load_cg4(const float* p) {
    float4 v;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

// Copies `bytes` (a multiple of 16) from global `src` to shared `dst`, counted on `bar`, with the L2
// cache policy `policy`.
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar,
                                          unsigned long long policy) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], "
        "%2, [%3], %4;" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(policy)
        : "memory");
}

// The L2 policy of the rings' copies: evict first where chunks are prefetched ahead of them (the
// line is done with once copied, and the prefetched ones stay), else the usual.
__device__ __forceinline__ unsigned long long ring_policy(bool ahead) {
    unsigned long long p;
    if (ahead) {
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    } else {
        asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
    }
    return p;
}

// The block's barrier (named: the warps share it with no other).
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(STEP_CONSUMERS) : "memory");
}

// Sum over the consumer threads; every one gets it.
__device__ __forceinline__ float consumers_sum(float v, float* red /* [STEP_WARPS], shared */) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    consumers_sync();
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < STEP_WARPS; ++w) t += red[w];
    consumers_sync();
    return t;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Where the step is profiled (a.profile set), records the block's entry `e`: the time it arrived
// at a point and the time it went on from there. Entry 0 is the start, entry n + 1 grid barrier n,
// entry 5 · layers the end (arrival and departure the same there).
__device__ __forceinline__ void note_time(unsigned long long* profile, unsigned e,
                                          unsigned long long arrived) {
    if (profile == nullptr) return;
    unsigned long long* at = profile + 2 * ((size_t)e * gridDim.x + blockIdx.x);
    at[0] = arrived;
    at[1] = global_ns();
}

// Waits until every block has arrived at barrier number `n` of the step. Writes before it, by any
// consumer thread of any block, are visible to every consumer thread after it.
__device__ __forceinline__ void grid_barrier(unsigned* counter, unsigned n,
                                             unsigned long long* profile) {
    consumers_sync();
    if (threadIdx.x == 0) {
        const unsigned long long arrived = profile ? global_ns() : 0;
        __threadfence();
        atomicAdd(counter, 1u);
        const unsigned target = (n + 1) * gridDim.x;
        unsigned seen;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
        } while (seen < target);
        note_time(profile, n + 1, arrived);
    }
    consumers_sync();
}

// The products of a layer: phase 0 (q/k/v), 2 (o), 3 (gate/up) and 4 (down), as pairs of rows.
struct Product {
    int items, in;
};
template <int HD>
__device__ __forceinline__ Product product_of(const StepArgs& a, int phase) {
    constexpr int hd = HD;
    switch (phase) {
        case 0: return {(int)(a.heads + 2 * a.kv_heads) * (hd / 2), (int)a.hidden};
        case 2: return {(int)a.hidden / 2, (int)a.heads * hd};
        case 3: return {(int)a.inter, (int)a.hidden};
        default: return {(int)a.hidden / 2, (int)a.inter};
    }
}

// Which of q, k, v (0, 1, 2) q/k/v pair `i` belongs to, its head and its dim below head_dim / 2.
template <int HD>
__device__ __forceinline__ int3 locate_qkv(const StepArgs& a, int i) {
    constexpr int half = HD / 2;
    const int qp = (int)a.heads * half, kp = (int)a.kv_heads * half;
    const int which = i < qp ? 0 : (i < qp + kp ? 1 : 2);
    const int at = which == 0 ? i : i - qp - (which - 1) * kp;
    return make_int3(which, at / half, at % half);
}

// Row m (0 or 1) of pair `i` of a product.
template <int HD>
__device__ __forceinline__ const bf16_t* pair_row(const StepArgs& a, const StepLayer& L, int phase,
                                                  int i, int m, int in) {
    switch (phase) {
        case 0: {
            const int3 at = locate_qkv<HD>(a, i);
            const bf16_t* W = at.x == 0 ? L.wq : at.x == 1 ? L.wk : L.wv;
            return W + (size_t)(at.y * HD + at.z + m * (HD / 2)) * in;
        }
        case 2: return L.wo + (size_t)(2 * i + m) * in;
        case 3: return (m == 0 ? L.wg : L.wu) + (size_t)i * in;
        default: return L.wd + (size_t)(2 * i + m) * in;
    }
}

// The pairs a block takes of a product's `items`: a contiguous range, the same size for every block
// give or take one (the first block's starts at 0), its t-th pair going to warp t % STEP_WARPS. The
// host checks that items · blocks fits in 32 bits.
__device__ __forceinline__ int block_first(int items) {
    return (int)((unsigned)items * blockIdx.x / gridDim.x);
}
__device__ __forceinline__ int block_items(int items) {
    return (int)((unsigned)items * (blockIdx.x + 1) / gridDim.x) - block_first(items);
}

// Shared memory: the ring's barriers, the reduction scratch, the ring, the staged activations,
// each warp's attention scratch.
struct Smem {
    unsigned full;         // nslots barriers: a slot's copy has landed
    float* red;            // [STEP_WARPS]
    unsigned ring;         // nslots · CHUNK_BYTES, 128-byte aligned (its shared-memory address)
    const unsigned char* ring_ptr;  // the same, to read
    uint4* stage;          // bf16 activations, 8 a piece
    float* scratch;        // STEP_WARPS · attention_scratch(head_dim) floats
};

// A warp's place in its stream of weight chunks: the layer, the product phase (0, 2, 3, 4), the
// warp's pair t of the block's share (t ≡ warp mod STEP_WARPS), the row m of the pair, the chunk c
// of the row; `done` past the last. It keeps the phase's block share (first pair, pairs), row
// length and chunks a row, so that moving on costs no division.
struct Cursor {
    int l, phase, t, m, c;
    bool done;
    int first, n, in, chunks;
};

// Sets the cursor's phase values for its phase.
template <int HD>
__device__ __forceinline__ void enter_phase(const StepArgs& a, Cursor& cur) {
    const Product p = product_of<HD>(a, cur.phase);
    cur.first = block_first(p.items);
    cur.n = block_items(p.items);
    cur.in = p.in;
    cur.chunks = (p.in + CHUNK_ELEMS - 1) / CHUNK_ELEMS;
}

// Moves `cur` on to the first chunk at or after it that exists (past phases where the warp has no
// pair, and from one layer to the next).
template <int HD>
__device__ __forceinline__ void settle(const StepArgs& a, Cursor& cur) {
    while (!cur.done && cur.t >= cur.n) {
        cur.phase = cur.phase == 0 ? 2 : cur.phase + 1;
        cur.t = threadIdx.x >> 5;
        cur.m = cur.c = 0;
        if (cur.phase > 4) {
            cur.phase = 0;
            cur.done = ++cur.l == (int)a.layers;
        }
        enter_phase<HD>(a, cur);
    }
}

// The warp's first chunk.
template <int HD>
__device__ __forceinline__ Cursor first_chunk(const StepArgs& a) {
    Cursor cur = {0, 0, (int)(threadIdx.x >> 5), 0, 0, a.layers == 0, 0, 0, 0, 0};
    enter_phase<HD>(a, cur);
    settle<HD>(a, cur);
    return cur;
}

// The warp's next chunk after `cur`.
template <int HD>
__device__ __forceinline__ void advance(const StepArgs& a, Cursor& cur) {
    if (++cur.c == cur.chunks) {
        cur.c = 0;
        if (++cur.m == 2) {
            cur.m = 0;
            cur.t += STEP_WARPS;
            settle<HD>(a, cur);
        }
    }
}

// A warp's ring: its `depth` slots, their "full" barriers, and the chunks issued into it so far
// (chunk i goes to slot i % depth) with the cursor of the next to issue; the chunks prefetched into
// L2 so far with the cursor of the next to prefetch; the copies' L2 policy.
struct WarpRing {
    int first_slot, depth;
    unsigned issued;
    Cursor next;
    unsigned prefetched;
    Cursor next_prefetch;
    unsigned long long policy;
};

// Where the chunk at `cur` starts in its weight row, and its bytes (the row's last chunk may be short).
template <int HD>
__device__ __forceinline__ const bf16_t* chunk_source(const StepArgs& a, const StepLayer* layers,
                                                      const Cursor& cur, unsigned& bytes) {
    const bf16_t* row = pair_row<HD>(a, layers[cur.l], cur.phase, cur.first + cur.t, cur.m, cur.in);
    bytes = min(CHUNK_ELEMS, cur.in - cur.c * CHUNK_ELEMS) * 2;
    return row + cur.c * CHUNK_ELEMS;
}

// Issues the copy of the warp's next chunk (lane 0) into its slot, if the stream has one left. The
// slot's previous chunk must be consumed: the warp's lanes have passed a __syncwarp since reading it.
template <int HD>
__device__ __forceinline__ void issue_next(const StepArgs& a, const StepLayer* layers, const Smem& s,
                                           WarpRing& r) {
    if (r.next.done) return;
    if ((threadIdx.x & 31) == 0) {
        unsigned bytes;
        const bf16_t* src = chunk_source<HD>(a, layers, r.next, bytes);
        const int slot = r.first_slot + r.issued % r.depth;
        fence_async_shared();  // the lanes' reads of the slot before the copy's writes
        mbar_arrive_expect(s.full + 8 * slot, bytes);
        bulk_copy(s.ring + slot * CHUNK_BYTES, src, bytes, s.full + 8 * slot, r.policy);
    }
    ++r.issued;
    advance<HD>(a, r.next);
}

// Asks L2 for the warp's chunks up to `a.ahead` past the last its ring has issued (lane 0 issues;
// every lane moves the cursor). Where the ring has overtaken the prefetch, it starts at the ring.
template <int HD>
__device__ __forceinline__ void top_up_l2(const StepArgs& a, const StepLayer* layers, WarpRing& r) {
    if (a.ahead == 0) return;
    if (r.prefetched < r.issued) {
        r.next_prefetch = r.next;
        r.prefetched = r.issued;
    }
    while (!r.next_prefetch.done && r.prefetched < r.issued + (unsigned)a.ahead) {
        if ((threadIdx.x & 31) == 0) {
            unsigned bytes;
            const bf16_t* src = chunk_source<HD>(a, layers, r.next_prefetch, bytes);
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
        }
        ++r.prefetched;
        advance<HD>(a, r.next_prefetch);
    }
}

// Pieces of 8 values a consumer thread holds to stage an RMS-normalised input in one pass.
#define STAGE_HELD 4

// Stages the bf16 pieces v[0..8) · scale · norm_w (norm_w null: · 1) as piece p.
__device__ __forceinline__ void stage_piece(const Smem& s, int p, const float* v, float scale,
                                            const float* norm_w) {
    float y[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = norm_w ? v[j] * scale * norm_w[8 * p + j] : v[j];
    s.stage[p] = make_uint4(pack_bf16x2(y[0], y[1]), pack_bf16x2(y[2], y[3]),
                            pack_bf16x2(y[4], y[5]), pack_bf16x2(y[6], y[7]));
}

// Stages src[0..n) as bf16 (times RMSNorm's scale and norm_w where norm_w is given). Every consumer
// thread calls it; it ends with the consumers synchronised. Where a thread's share of the pieces
// fits in registers, src is read once for the norm's sum and the staging together.
__device__ void stage_input(const Smem& s, const float* src, int n, const float* norm_w,
                            float eps) {
    const int tid = threadIdx.x, pieces = n / 8;
    if (pieces <= STAGE_HELD * STEP_CONSUMERS) {
        float v[STAGE_HELD][8], ss = 0.0f;
#pragma unroll
        for (int i = 0; i < STAGE_HELD; ++i) {
            const int p = tid + i * STEP_CONSUMERS;
            const float4 lo = p < pieces ? load_cg4(src + 8 * p) : make_float4(0, 0, 0, 0);
            const float4 hi = p < pieces ? load_cg4(src + 8 * p + 4) : make_float4(0, 0, 0, 0);
            const float w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                v[i][j] = w[j];
                ss += w[j] * w[j];
            }
        }
        const float scale = norm_w ? rsqrtf(consumers_sum(ss, s.red) / n + eps) : 1.0f;
#pragma unroll
        for (int i = 0; i < STAGE_HELD; ++i) {
            const int p = tid + i * STEP_CONSUMERS;
            if (p < pieces) stage_piece(s, p, v[i], scale, norm_w);
        }
        consumers_sync();
        return;
    }
    float scale = 1.0f;
    if (norm_w) {
        float ss = 0.0f;
        for (int k = tid * 4; k < n; k += STEP_CONSUMERS * 4) {
            const float4 v = load_cg4(src + k);
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
        scale = rsqrtf(consumers_sum(ss, s.red) / n + eps);
    }
    for (int p = tid; p < pieces; p += STEP_CONSUMERS) {
        const float4 lo = load_cg4(src + 8 * p), hi = load_cg4(src + 8 * p + 4);
        const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        stage_piece(s, p, v, scale, norm_w);
    }
    consumers_sync();
}

// One lane's share of a chunk's dot product with the staged activations: `pieces` of 8 (a full
// chunk's loads all issued before its sums, in four independent sums).
__device__ __forceinline__ float chunk_dot(const uint4* w, const uint4* x, int pieces, int lane) {
    constexpr int FULL = CHUNK_ELEMS / 8 / 32;  // pieces a lane takes of a full chunk
    if (pieces == CHUNK_ELEMS / 8) {
        uint4 wv[FULL], xv[FULL];
#pragma unroll
        for (int k = 0; k < FULL; ++k) {
            wv[k] = w[lane + 32 * k];
            xv[k] = x[lane + 32 * k];
        }
        float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < FULL; ++k) {
            float wf[8], xf[8];
            unpack8(wv[k], wf);
            unpack8(xv[k], xf);
#pragma unroll
            for (int j = 0; j < 8; ++j) sum[j & 3] = fmaf(wf[j], xf[j], sum[j & 3]);
        }
        return (sum[0] + sum[1]) + (sum[2] + sum[3]);
    }
    float sum = 0.0f;
    for (int q = lane; q < pieces; q += 32) {
        float wf[8], xf[8];
        unpack8(w[q], wf);
        unpack8(x[q], xf);
#pragma unroll
        for (int j = 0; j < 8; ++j) sum = fmaf(wf[j], xf[j], sum);
    }
    return sum;
}

// The warp's products of its pairs in one product phase, taking their chunks from its ring (the
// `consumed` counter runs over the whole step) and refilling each slot as it frees it;
// `finish(pair, a0, a1)` runs on lane 0 with the two rows' sums.
template <int HD, class Finish>
__device__ void consume(const StepArgs& a, const StepLayer* layers, const Smem& s, WarpRing& r,
                        unsigned& consumed, Product p, Finish finish) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int chunks = (p.in + CHUNK_ELEMS - 1) / CHUNK_ELEMS, n = block_items(p.items);
    const int first = block_first(p.items);
    for (int t = warp; t < n; t += STEP_WARPS) {
        float acc[2] = {0.0f, 0.0f};
#pragma unroll
        for (int m = 0; m < 2; ++m) {
            for (int c = 0; c < chunks; ++c, ++consumed) {
                const int slot = r.first_slot + consumed % r.depth;
                mbar_wait(s.full + 8 * slot, (consumed / r.depth) & 1);
                const int pieces = min(CHUNK_ELEMS, p.in - c * CHUNK_ELEMS) / 8;
                const uint4* w = reinterpret_cast<const uint4*>(s.ring_ptr + slot * CHUNK_BYTES);
                acc[m] += chunk_dot(w, s.stage + c * (CHUNK_ELEMS / 8), pieces, lane);
                __syncwarp();
                issue_next<HD>(a, layers, s, r);
            }
        }
        const float a0 = warp_sum(acc[0]), a1 = warp_sum(acc[1]);
        if (lane == 0) finish(first + t, a0, a1);
    }
}

#include "step_attention.cuh"

// The consumers' step: the five phases of every layer.
template <int HD>
__device__ void consume_step(const StepArgs& a, const StepLayer* layers, const Smem& s, WarpRing& r) {
    const int half = HD / 2;
    unsigned consumed = 0, barrier = 0;
    // Each phase ends with the warp's L2 prefetch topped up, then the grid barrier.
    auto end_phase = [&]() {
        top_up_l2<HD>(a, layers, r);
        grid_barrier(a.counters, barrier++, a.profile);
    };
    // The output and down products' pairs (rows 2i and 2i + 1) added onto x.
    auto add_onto_x = [&](int i, float y1, float y2) {
        const float x1 = load_cg(a.x + 2 * i), x2 = load_cg(a.x + 2 * i + 1);
        a.x[2 * i] = x1 + y1;
        a.x[2 * i + 1] = x2 + y2;
    };
    for (int l = 0; l < (int)a.layers; ++l) {
        const StepLayer& L = layers[l];
        // 0: q/k/v with RoPE and the KV write.
        stage_input(s, a.x, (int)a.hidden, L.norm1, a.eps);
        Product p = product_of<HD>(a, 0);
        const unsigned slot = *a.slot;
        consume<HD>(a, layers, s, r, consumed, p, [&](int i, float y1, float y2) {
            const int3 at = locate_qkv<HD>(a, i);
            if (at.x < 2) {
                const float c = a.rope[at.z], sn = a.rope[half + at.z];
                const float x1 = y1, x2 = y2;
                y1 = x1 * c - x2 * sn;
                y2 = x2 * c + x1 * sn;
            }
            const int d = at.y * HD + at.z;
            if (at.x == 0) {
                a.q[d] = y1;
                a.q[d + half] = y2;
            } else {
                bf16_t* pool = (at.x == 1 ? L.kc : L.vc) + (size_t)slot * a.kv_heads * HD + d;
                pool[0] = f32_to_bf16(y1);
                pool[half] = f32_to_bf16(y2);
            }
        });
        end_phase();
        // 1: attention.
        attention_phase<HD>(a, L, s, l);
        end_phase();
        // 2: the output product onto x.
        p = product_of<HD>(a, 2);
        stage_input(s, a.attn, p.in, nullptr, 0.0f);
        consume<HD>(a, layers, s, r, consumed, p, add_onto_x);
        end_phase();
        // 3: gate and up, SwiGLU.
        p = product_of<HD>(a, 3);
        stage_input(s, a.x, p.in, L.norm2, a.eps);
        consume<HD>(a, layers, s, r, consumed, p,
                [&](int i, float g, float u) { a.act[i] = g / (1.0f + expf(-g)) * u; });
        end_phase();
        // 4: down onto x.
        p = product_of<HD>(a, 4);
        stage_input(s, a.act, p.in, nullptr, 0.0f);
        consume<HD>(a, layers, s, r, consumed, p, add_onto_x);
        if (l + 1 < (int)a.layers) end_phase();
    }
}

// Shared memory's layout for `nslots` slots and activations of `stage_elems` values.
__device__ __forceinline__ Smem smem_layout(unsigned char* base, int nslots, int stage_elems) {
    Smem s;
    const unsigned b = smem_addr(base);
    const int ring_off = (8 * nslots + 4 * STEP_WARPS + 127) / 128 * 128;
    s.full = b;
    s.red = reinterpret_cast<float*>(base + 8 * nslots);
    s.ring = b + ring_off;
    s.ring_ptr = base + ring_off;
    s.stage = reinterpret_cast<uint4*>(base + ring_off + nslots * CHUNK_BYTES);
    s.scratch = reinterpret_cast<float*>(base + ring_off + nslots * CHUNK_BYTES + stage_elems * 2);
    return s;
}

template <int HD>
__device__ void decode_layers(const StepArgs* args) {
    extern __shared__ __align__(128) unsigned char smem[];
    const StepArgs a = *args;
    const StepLayer* layers = reinterpret_cast<const StepLayer*>(args + 1);
    const int stage_elems =
        (int)((max(max(a.hidden, a.inter), a.heads * a.head_dim) + 7) / 8 * 8);
    const Smem s = smem_layout(smem, (int)a.nslots, stage_elems);
    if (threadIdx.x == 0) {
        for (int i = 0; i < (int)a.nslots; ++i) mbar_init(s.full + 8 * i, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    // Each warp's ring is nslots / STEP_WARPS slots, filled with its first chunks before any phase.
    const int depth = (int)a.nslots / STEP_WARPS;
    const Cursor first = first_chunk<HD>(a);
    WarpRing r = {(int)(threadIdx.x >> 5) * depth, depth, 0u, first, 0u, first, ring_policy(a.ahead > 0)};
    if (threadIdx.x == 0 && a.profile) note_time(a.profile, 0, global_ns());
    for (int i = 0; i < depth; ++i) issue_next<HD>(a, layers, s, r);
    top_up_l2<HD>(a, layers, r);
    consume_step<HD>(a, layers, s, r);
    if (a.profile) {
        consumers_sync();
        if (threadIdx.x == 0) note_time(a.profile, 5 * (unsigned)a.layers, global_ns());
    }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Entry points by head_dim; the host launches them only on compute capability 9.0.
extern "C" __global__ void __launch_bounds__(STEP_THREADS, 1)
    decode_layers_bf16_hd64(const StepArgs* args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    decode_layers<64>(args);
#endif
}
extern "C" __global__ void __launch_bounds__(STEP_THREADS, 1)
    decode_layers_bf16_hd128(const StepArgs* args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    decode_layers<128>(args);
#endif
}
