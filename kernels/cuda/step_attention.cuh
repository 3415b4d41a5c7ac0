// The attention phase of the one-launch decode step (decode_step.cu): each warp attends one split
// of a KV head's keys for the head's query heads, an online softmax over 32-key tiles, and the last
// split of a KV head to finish merges its splits into the attention output. Included by
// decode_step.cu inside its sm_90a section, after StepArgs, StepLayer, Smem and their helpers.

// Key j's pool slot.
__device__ __forceinline__ unsigned key_slot(const StepArgs& a, int j) {
    const unsigned bs = (unsigned)a.block_size;
    return a.block_table[j / bs] * bs + j % bs;
}

// A lane's DPL dims of one V row: 2 (head_dim 64) or 4 (128) bf16 values.
template <int DPL>
struct VPiece;
template <>
struct VPiece<2> {
    unsigned u;
    __device__ __forceinline__ void load(const bf16_t* p) { u = *reinterpret_cast<const unsigned*>(p); }
    __device__ __forceinline__ void zero() { u = 0u; }
    __device__ __forceinline__ void widen(float* f) const {
        f[0] = __uint_as_float(u << 16);
        f[1] = __uint_as_float(u & 0xffff0000u);
    }
};
template <>
struct VPiece<4> {
    uint2 u;
    __device__ __forceinline__ void load(const bf16_t* p) { u = *reinterpret_cast<const uint2*>(p); }
    __device__ __forceinline__ void zero() { u = make_uint2(0u, 0u); }
    __device__ __forceinline__ void widen(float* f) const {
        f[0] = __uint_as_float(u.x << 16);
        f[1] = __uint_as_float(u.x & 0xffff0000u);
        f[2] = __uint_as_float(u.y << 16);
        f[3] = __uint_as_float(u.y & 0xffff0000u);
    }
};

// The lane's dims of V rows k0 .. k0 + VK of the tile (zeros past `keys`: a slot never written may
// hold any bits, and a NaN times a zero probability is still NaN).
template <int HD, int VK>
__device__ __forceinline__ void load_v(VPiece<HD / 32>* vr, const bf16_t* vc, const unsigned* slots,
                                       int k0, int keys, int width, int kvh, int lane) {
#pragma unroll
    for (int kk = 0; kk < VK; ++kk) {
        if (k0 + kk < keys) {
            vr[kk].load(vc + (size_t)slots[k0 + kk] * width + kvh * HD + lane * (HD / 32));
        } else {
            vr[kk].zero();
        }
    }
}

// Query heads a KV head may have at each head_dim (the host checks): at 128 the registers of more
// would spill.
__host__ __device__ constexpr int max_group(int hd) { return hd == 64 ? STEP_MAX_GROUP : 4; }

// The floats of a warp's attention scratch: its query heads' queries and probabilities, and the
// tile's key slots.
__host__ __device__ constexpr int attention_scratch(int hd) {
    return max_group(hd) * hd + max_group(hd) * 32 + 32;
}

// One split of one KV head: the online softmax over keys [lo, hi) for the head's G query heads,
// its output, maximum and sum written to parts / part_ml.
template <int HD, int G>
__device__ void attend_split(const StepArgs& a, const StepLayer& L, float* scratch, int kvh, int s,
                             int lo, int hi, unsigned long long* marks) {
    constexpr int DPL = HD / 32;            // dims a lane holds
    constexpr int VK = HD == 64 ? 32 : 16;  // V rows loaded at once
    constexpr int KH = HD == 64 ? 1 : 2;    // parts a K row is loaded in
    constexpr int MAXG = G;
    const int lane = threadIdx.x & 31;
    const int width = (int)a.kv_heads * HD;
    float* qs = scratch;              // [G][HD], scaled into the log2 domain
    float* ps = scratch + MAXG * HD;  // [G][32]
    unsigned* slots = reinterpret_cast<unsigned*>(ps + MAXG * 32);  // [32]
    const float qscale = a.scale * 1.44269504088896340736f;
    {
        // Every load before any store: each load_cg is ordered after the stores before it.
        float qv[MAXG * HD / 32];
#pragma unroll
        for (int i = 0; i < MAXG * HD / 32; ++i) {
            const int e = lane + 32 * i;
            qv[i] = e < G * HD ? load_cg(a.q + (size_t)kvh * G * HD + e) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < MAXG * HD / 32; ++i) {
            if (lane + 32 * i < G * HD) qs[lane + 32 * i] = qv[i] * qscale;
        }
    }
    __syncwarp();
    if (marks && lane == 0) marks[1] = global_ns();
    float m[MAXG], l[MAXG], o[MAXG][DPL];
#pragma unroll
    for (int g = 0; g < MAXG; ++g) {
        m[g] = NEG_INF;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < DPL; ++e) o[g][e] = 0.0f;
    }
    for (int t0 = lo; t0 < hi; t0 += 32) {
        const int j = t0 + lane, keys = min(32, hi - t0);
        const bool valid = j < hi;
        slots[lane] = valid ? key_slot(a, j) : 0u;
        __syncwarp();
        // The tile's loads are issued ahead of the math that needs them: the lane's key row of K (in
        // KH parts), and the lane's dims of the first VK keys' V rows.
        const bf16_t* krow = L.kc + (size_t)slots[lane] * width + kvh * HD;
        constexpr int KP = HD / 8 / KH;  // 16-byte pieces of a part
        uint4 kp[KP];
#pragma unroll
        for (int p = 0; p < KP; ++p) {
            kp[p] = valid ? *reinterpret_cast<const uint4*>(krow + 8 * p) : make_uint4(0, 0, 0, 0);
        }
        VPiece<DPL> vr[VK];
        load_v<HD, VK>(vr, L.vc, slots, 0, keys, width, kvh, lane);
        float sc[MAXG];
#pragma unroll
        for (int g = 0; g < MAXG; ++g) sc[g] = 0.0f;
#pragma unroll
        for (int part = 0; part < KH; ++part) {
            if (part > 0) {
#pragma unroll
                for (int p = 0; p < KP; ++p) {
                    kp[p] = valid ? *reinterpret_cast<const uint4*>(krow + 8 * (part * KP + p))
                                  : make_uint4(0, 0, 0, 0);
                }
            }
#pragma unroll
            for (int p = 0; p < KP; ++p) {
                float kf[8];
                unpack8(kp[p], kf);
                const int d0 = 8 * (part * KP + p);
#pragma unroll
                for (int g = 0; g < MAXG; ++g) {
                    if (g < G) {
#pragma unroll
                        for (int e = 0; e < 8; ++e) sc[g] = fmaf(qs[g * HD + d0 + e], kf[e], sc[g]);
                    }
                }
            }
        }
#pragma unroll
        for (int g = 0; g < MAXG; ++g) {
            if (g >= G) continue;
            const float sg = valid ? sc[g] : NEG_INF;
            const float mnew = fmaxf(m[g], warp_max(sg));
            const float pg = valid ? fast_exp2(sg - mnew) : 0.0f;
            const float alpha = fast_exp2(m[g] - mnew);
            l[g] = l[g] * alpha + warp_sum(pg);
#pragma unroll
            for (int e = 0; e < DPL; ++e) o[g][e] *= alpha;
            m[g] = mnew;
            ps[g * 32 + lane] = pg;
        }
        __syncwarp();
#pragma unroll
        for (int k0 = 0; k0 < 32; k0 += VK) {
            if (k0 > 0) load_v<HD, VK>(vr, L.vc, slots, k0, keys, width, kvh, lane);
#pragma unroll
            for (int kk = 0; kk < VK; ++kk) {
                float vf[DPL];
                vr[kk].widen(vf);
#pragma unroll
                for (int g = 0; g < MAXG; ++g) {
                    if (g >= G) continue;
                    const float pg = ps[g * 32 + k0 + kk];
#pragma unroll
                    for (int e = 0; e < DPL; ++e) o[g][e] = fmaf(pg, vf[e], o[g][e]);
                }
            }
        }
        __syncwarp();
    }
#pragma unroll
    for (int g = 0; g < MAXG; ++g) {
        if (g >= G) continue;
        const size_t part = (size_t)(kvh * G + g) * STEP_MAX_SPLITS + s;
#pragma unroll
        for (int e = 0; e < DPL; ++e) a.parts[part * HD + lane * DPL + e] = o[g][e];
        if (lane == 0) {
            a.part_ml[2 * part] = m[g];
            a.part_ml[2 * part + 1] = l[g];
        }
    }
}

// Merges the `splits` splits of KV head kvh's query heads into attn: each lane reads the maximum
// and sum of split `lane`, then the splits' outputs are summed MERGE_BATCH splits at a time, every
// load of a batch (all the group's heads) issued before its sums.
#define MERGE_BATCH 8
template <int HD, int G>
__device__ void merge_splits(const StepArgs& a, int kvh, int splits) {
    constexpr int DPL = HD / 32, MAXG = G;
    const int lane = threadIdx.x & 31;
    float f[MAXG], total[MAXG], acc[MAXG][DPL], ms[MAXG], ls[MAXG];
#pragma unroll
    for (int g = 0; g < MAXG; ++g) {  // every head's loads before the reductions that wait on them
        const size_t first = (size_t)(kvh * G + g) * STEP_MAX_SPLITS;
        const bool mine = g < G && lane < splits;
        ms[g] = mine ? load_cg(a.part_ml + 2 * (first + lane)) : NEG_INF;
        ls[g] = mine ? load_cg(a.part_ml + 2 * (first + lane) + 1) : 0.0f;
    }
#pragma unroll
    for (int g = 0; g < MAXG; ++g) {
        const bool mine = g < G && lane < splits;
        const float mx = warp_max(ms[g]);
        f[g] = mine ? fast_exp2(ms[g] - mx) : 0.0f;
        total[g] = warp_sum(f[g] * ls[g]);
#pragma unroll
        for (int e = 0; e < DPL; ++e) acc[g][e] = 0.0f;
    }
    for (int sp0 = 0; sp0 < splits; sp0 += MERGE_BATCH) {
        float o[MERGE_BATCH][MAXG][DPL];
#pragma unroll
        for (int i = 0; i < MERGE_BATCH; ++i) {
#pragma unroll
            for (int g = 0; g < MAXG; ++g) {
                const size_t part = (size_t)(kvh * G + g) * STEP_MAX_SPLITS + sp0 + i;
#pragma unroll
                for (int e = 0; e < DPL; ++e) {
                    o[i][g][e] = g < G && sp0 + i < splits
                                     ? load_cg(a.parts + part * HD + lane * DPL + e)
                                     : 0.0f;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < MERGE_BATCH; ++i) {
#pragma unroll
            for (int g = 0; g < MAXG; ++g) {
                const float fs = __shfl_sync(0xffffffffu, f[g], (sp0 + i) & 31);
#pragma unroll
                for (int e = 0; e < DPL; ++e) acc[g][e] = fmaf(fs, o[i][g][e], acc[g][e]);
            }
        }
    }
#pragma unroll
    for (int g = 0; g < MAXG; ++g) {
        if (g >= G) continue;
#pragma unroll
        for (int e = 0; e < DPL; ++e)
            a.attn[(size_t)(kvh * G + g) * HD + lane * DPL + e] = acc[g][e] / total[g];
    }
}

// attend_split and merge_splits for `group` query heads a KV head (1 to G), each compiled for its
// group, so that no lane steps through heads the model does not have.
template <int HD, int G>
__device__ void attend_split_of(int group, const StepArgs& a, const StepLayer& L, float* scratch,
                                int kvh, int s, int lo, int hi, unsigned long long* marks) {
    if constexpr (G > 1) {
        if (group < G) return attend_split_of<HD, G - 1>(group, a, L, scratch, kvh, s, lo, hi, marks);
    }
    attend_split<HD, G>(a, L, scratch, kvh, s, lo, hi, marks);
}
template <int HD, int G>
__device__ void merge_splits_of(int group, const StepArgs& a, int kvh, int splits) {
    if constexpr (G > 1) {
        if (group < G) return merge_splits_of<HD, G - 1>(group, a, kvh, splits);
    }
    merge_splits<HD, G>(a, kvh, splits);
}

// Phase 1: the splits dealt over the grid's warps, a warp of each block before a second of any
// (attention is the work of few warps: spread, each has an SM's issue nearly to itself); the last
// split of a KV head to finish merges it.
template <int HD>
__device__ void attention_phase(const StepArgs& a, const StepLayer& L, const Smem& s, int layer) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int len = (int)*a.seq_len, kv_heads = (int)a.kv_heads;
    const int grid_warps = gridDim.x * STEP_WARPS;
    const int splits = max(1, min(min(STEP_MAX_SPLITS, (len + STEP_SPLIT_KEYS - 1) / STEP_SPLIT_KEYS),
                                  grid_warps / kv_heads));
    float* scratch = s.scratch + warp * attention_scratch(HD);
    // Where profiled, KV head 0's times: its split 0's warp notes 0 (start), 1 (query loaded),
    // 2 (split done), 3 (fenced), 4 (counted); the warp that merges it 7 (its split's start),
    // 5 (merge begun) and 6 (merged).
    unsigned long long* marks =
        a.profile ? a.profile + 2 * (size_t)(5 * a.layers + 1) * gridDim.x + 8 * layer : nullptr;
    auto mark = [&](bool mine, int k) {
        if (marks && mine && lane == 0) marks[k] = global_ns();
    };
    const int group = (int)(a.heads / a.kv_heads);
    for (int it = warp * gridDim.x + blockIdx.x; it < kv_heads * splits; it += grid_warps) {
        const int kvh = it / splits, sp = it % splits;
        const int lo = (int)((long long)sp * len / splits), hi = (int)((long long)(sp + 1) * len / splits);
        const unsigned long long began = marks ? global_ns() : 0;
        mark(it == 0, 0);
        attend_split_of<HD, max_group(HD)>(group, a, L, scratch, kvh, sp, lo, hi,
                                           it == 0 ? marks : nullptr);
        mark(it == 0, 2);
        __threadfence();
        mark(it == 0, 3);
        __syncwarp();
        unsigned last = 0;
        if (lane == 0) last = atomicAdd(a.counters + 1 + layer * kv_heads + kvh, 1u) == (unsigned)splits - 1;
        last = __shfl_sync(0xffffffffu, last, 0);
        mark(it == 0, 4);
        if (last) {
            __threadfence();
            if (marks && kvh == 0 && lane == 0) marks[7] = began;
            mark(kvh == 0, 5);
            merge_splits_of<HD, max_group(HD)>(group, a, kvh, splits);
            mark(kvh == 0, 6);
        }
    }
}
