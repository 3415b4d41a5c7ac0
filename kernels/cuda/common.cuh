// Helpers shared by every docqa kernel module.
//
// bf16 values travel as their 16-bit patterns (`bf16_t`), converted by hand, so the modules include no
// CUDA header and NVRTC compiles them without an include path. The registry pastes this file in place
// of the include line before handing a module to NVRTC.
#pragma once

typedef unsigned short bf16_t;

// -inf without math.h (NVRTC has no INFINITY macro).
#define NEG_INF __int_as_float(0xff800000)

// The f32 value of a bf16 bit pattern.
__device__ __forceinline__ float bf16_to_f32(bf16_t b) {
    return __uint_as_float(((unsigned)b) << 16);
}

// Rounds to the nearest bf16, ties to even; NaN stays a quiet NaN (as the CPU backend rounds).
__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (bf16_t)((u >> 16) | 0x40u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

__device__ __forceinline__ float load_f32(const float* p) { return *p; }
__device__ __forceinline__ float load_f32(const bf16_t* p) { return bf16_to_f32(*p); }
__device__ __forceinline__ float load_f32(const signed char* p) { return (float)*p; }
__device__ __forceinline__ void store_from_f32(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_from_f32(bf16_t* p, float v) { *p = f32_to_bf16(v); }

// The 8 bf16 values of a 16-byte piece, widened.
__device__ __forceinline__ void unpack8(const uint4 w, float* f) {
    const unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}

// Sum over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats of shared memory; the call ends with the block synchronised.
__device__ __forceinline__ float block_sum(float v, float* scratch /* [32], shared */) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    float t = lane < warps ? scratch[lane] : 0.0f;
    return warp_sum(t);
}

// Programmatic dependent launch (compute capability 9.0 and later). A kernel launched with it may
// start while the kernel before it on the stream is still running: every thread must call
// wait_for_previous_grid before it reads anything an earlier kernel wrote. allow_next_grid lets such
// a kernel launched after this one start its blocks now (they still wait for this grid to finish).
// Both do nothing for a kernel launched the usual way, and on older GPUs.
__device__ __forceinline__ void wait_for_previous_grid() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grid() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---- Tensor-core and async-copy helpers (sm_80 and later) for the flash attention kernels. ----

// Two f32 values rounded to one packed bf16 pair: `lo` in the low half, `hi` in the high half.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Four values at element 4i: 16 bytes of f32, or 8 of bf16.
__device__ __forceinline__ void store4(float* p, long long i, float a, float b, float c, float d) {
    reinterpret_cast<float4*>(p)[i] = make_float4(a, b, c, d);
}
__device__ __forceinline__ void store4(bf16_t* p, long long i, float a, float b, float c, float d) {
    reinterpret_cast<uint2*>(p)[i] = make_uint2(pack_bf16x2(a, b), pack_bf16x2(c, d));
}
template <typename T>
__device__ __forceinline__ void store4(T* p, long long i, float4 v) {
    store4(p, i, v.x, v.y, v.z, v.w);
}

// 2^x, the hardware approximation (relative error about 2^-22).
__device__ __forceinline__ float fast_exp2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// c += a·b for one m16n8k16 tile: bf16 inputs, f32 accumulators (PTX fragment layouts).
__device__ __forceinline__ void mma_bf16_16816(
    float* c,            // [4]: accumulator fragment
    const unsigned* a,   // [4]: A fragment (16x16, row major), bf16 pairs
    unsigned b0, unsigned b1) {  // B fragment (16x8, column major), bf16 pairs
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two f32 values rounded to one packed f16 pair: `lo` in the low half, `hi` in the high half.
__device__ __forceinline__ unsigned pack_f16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// c += a·b for one m16n8k16 tile: f16 inputs, f32 accumulators (the layouts of mma_bf16_16816).
__device__ __forceinline__ void mma_f16_16816(
    float* c,            // [4]: accumulator fragment
    const unsigned* a,   // [4]: A fragment (16x16, row major), f16 pairs
    unsigned b0, unsigned b1) {  // B fragment (16x8, column major), f16 pairs
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p /* shared */) {
    unsigned r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

// Four 8x8 b16 matrices from shared memory; lane l gives the address of row l%8 of matrix l/8.
__device__ __forceinline__ void ldmatrix_x4(unsigned* r /* [4] */, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// As ldmatrix_x4, each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r /* [4] */, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// The transpose of the 8x8 b16 matrix whose row lane/4, columns 2(lane%4) and +1, this lane holds.
__device__ __forceinline__ unsigned movmatrix_trans(unsigned a) {
    unsigned r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(a));
    return r;
}

// 16 bytes global -> shared without registers; bytes past `src_bytes` (0 or 16) are zero-filled.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}

// 4-byte asynchronous copy (through L1); src_bytes 0 zero-fills.
__device__ __forceinline__ void cp_async_4(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}

// Division of ints in [0, 2^31) by a divisor known at run time (a block size): a multiply-high, an
// add and a shift (Granlund and Montgomery's round-up method) where the integer division sequence
// takes about twenty instructions. The constructor's 64-bit division runs once.
struct FastDiv {
    unsigned d, mul, shift;
    __device__ __forceinline__ explicit FastDiv(int divisor) : d((unsigned)divisor) {
        shift = 32 - __clz(d - 1);  // ceil(log2 d); 0 for d = 1
        mul = (unsigned)((((1ull << 32) * ((1ull << shift) - d)) / d) + 1);
    }
    __device__ __forceinline__ unsigned div(unsigned n) const {
        return (__umulhi(n, mul) + n) >> shift;
    }
};

// Where a sequence's keys live: its block-table row, the block size (and its log2 when a power of
// two, else -1), and under a sink window its sink blocks and the offset of the blocks after them in
// the row (both 0 for dense attention); or, without a table, consecutive rows of a packed batch.
struct KeyBlocks {
    const unsigned* table;  // [max_blocks_per_seq]
    int block_size, shift, sink_blocks, offset;
    long long dense_base;   // >= 0: keys are dense rows from this one on (no table)
    // The pool slot of key j, or -1 when its block left the window (it is not in the row).
    __device__ __forceinline__ long long slot(int j) const {
        if (dense_base >= 0) {
            return dense_base + j;
        }
        int b = shift >= 0 ? j >> shift : j / block_size;
        // (Nothing left the window while the offset is 0: dense attention folds this away.)
        if (offset != 0 && b >= sink_blocks) {
            b -= offset;
            if (b < sink_blocks) {
                return -1;
            }
        }
        const int within = shift >= 0 ? j & (block_size - 1) : j - (j / block_size) * block_size;
        return (long long)table[b] * block_size + within;
    }
};

// Whether T is the int8 element type (templates choose their int8 paths with it).
template <typename T>
struct IsInt8 {
    static constexpr bool value = false;
};
template <>
struct IsInt8<signed char> {
    static constexpr bool value = true;
};

// Eight int8 values (little-endian in `raw`) widened to four bf16 pairs, exactly (|q| <= 128 fits
// bf16's significand). No integer-to-float conversion: each byte with its sign bit flipped (q + 128)
// becomes the low mantissa byte of 2^23, and subtracting 2^23 + 128 leaves q.
__device__ __forceinline__ uint4 widen_int8x8(uint2 raw) {
    const unsigned w[2] = {raw.x ^ 0x80808080u, raw.y ^ 0x80808080u};
    unsigned out[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float f[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            f[b] = __uint_as_float(__byte_perm(w[h], 0x4b000000u, 0x7540 + b)) - 8388736.0f;
        }
        out[2 * h] = pack_bf16x2(f[0], f[1]);
        out[2 * h + 1] = pack_bf16x2(f[2], f[3]);
    }
    return make_uint4(out[0], out[1], out[2], out[3]);
}

// Sixteen int8 values (little-endian in `raw`) widened to eight f16 pairs, exactly. Each byte with its
// sign bit flipped (q + 128) becomes the low mantissa byte of 1024 (f16 counts whole numbers there),
// and one packed subtraction of 1024 + 128 leaves q: two byte permutes and two f16x2 subtractions per
// four values, with no conversion instruction.
__device__ __forceinline__ void widen_int8x16_f16(uint4 raw, unsigned* out /* [8] */) {
    const unsigned w[4] = {raw.x ^ 0x80808080u, raw.y ^ 0x80808080u, raw.z ^ 0x80808080u,
                           raw.w ^ 0x80808080u};
    const unsigned bias = 0x64806480u;  // 1152.0 in both halves
#pragma unroll
    for (int h = 0; h < 4; ++h) {
        const unsigned lo = __byte_perm(w[h], 0x64646464u, 0x4140);
        const unsigned hi = __byte_perm(w[h], 0x64646464u, 0x4342);
        asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(out[2 * h]) : "r"(lo), "r"(bias));
        asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(out[2 * h + 1]) : "r"(hi), "r"(bias));
    }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }

// Waits for every async copy this thread issued.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// Waits until at most N of this thread's newest async-copy groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Row of key `j` in a paged pool: its block from the sequence's block table, then its slot.
__device__ __forceinline__ long long paged_slot(
    const unsigned* blocks,  // [max_blocks_per_seq]: the sequence's row of the block table
    int block_size, int j) {
    return (long long)blocks[j / block_size] * block_size + j % block_size;
}

// The work of prefill block `b` of a varlen batch cut into tiles of BM query rows (the blocks of
// sequence 0 first): which sequence, which of its query tiles; false when the block has none.
template <int BM>
__device__ __forceinline__ bool find_query_tile(
    const unsigned* query_start_loc,  // [num_seqs + 1]
    int num_seqs, int b, int* seq, int* tile) {
    for (int s = 0; s < num_seqs; ++s) {
        const int n = ((int)(query_start_loc[s + 1] - query_start_loc[s]) + BM - 1) / BM;
        if (b < n) {
            *seq = s;
            *tile = b;
            return true;
        }
        b -= n;
    }
    return false;
}

// Causal masking of a warp's score fragments (16 rows, this lane: rows lane/4 and lane/4 + 8, over a
// tile of NT·8 keys from j0 on): -inf past each row's last visible key, `last0` being that of the
// warp's first row.
template <int NT>
__device__ __forceinline__ void mask_causal(float (*sc)[4] /* [NT][4] */, int j0, int last0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int j = j0 + nt * 8 + 2 * t + (i & 1), last = last0 + g + (i >> 1) * 8;
            sc[nt][i] = j > last ? NEG_INF : sc[nt][i];
        }
    }
}

// Multiplies each column of a warp's m16n8 score (or probability) fragments ([NT][4]) by its key's
// scale (the lane holds columns 2 · (lane % 4) and the next of each 8): int8 pools' per-key scales.
template <int NT>
__device__ __forceinline__ void scale_key_columns(float (*sc)[4], const float* scales /* [NT · 8] */) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const float a = scales[nt * 8 + 2 * t], b = scales[nt * 8 + 2 * t + 1];
        sc[nt][0] *= a;
        sc[nt][1] *= b;
        sc[nt][2] *= a;
        sc[nt][3] *= b;
    }
}

// Sum over the 4 lanes of a quad (the lanes holding one row of an m16n8 fragment); each gets it.
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Two adjacent output values, as f32 or rounded to bf16.
__device__ __forceinline__ void store2(float* p, float a, float b) {
    *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store2(bf16_t* p, float a, float b) {
    *reinterpret_cast<unsigned*>(p) = pack_bf16x2(a, b);
}

// Writes a warp's 16 output rows of one head (this lane: rows lane/4 and lane/4 + 8 from `row0` on,
// counted from the sequence's first row `first`), each accumulator row divided by its softmax sum
// (`l`, this lane's share, summed over the lane's quad here); rows at or past `rows` are not written.
// `out` is f32, or bf16 where the output product reads bf16 next.
template <int OT, typename T>
__device__ __forceinline__ void store_rows(
    float (*o)[4],    // [OT][4]: output accumulators
    const float* l,   // [2]: the rows' partial sums
    T* out,           // [num_tokens, row_stride]: at the head's first column
    int first, int row0, int rows, int row_stride) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float sum = quad_sum(l[r]);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        const int row = row0 + g + r * 8;
        if (row < rows) {
            T* dst = out + (long long)(first + row) * row_stride + 2 * t;
#pragma unroll
            for (int ot = 0; ot < OT; ++ot) {
                store2(dst + ot * 8, o[ot][2 * r] * inv, o[ot][2 * r + 1] * inv);
            }
        }
    }
}

// How far (in log2 units) a row's new maximum may exceed the reference its probabilities are taken
// against before the reference moves. The reference need not be the true maximum: the output, the
// sums and the maxima handed to a split reduce stay relative to the same reference, so the result is
// the same, with probabilities up to 2^RESCALE_SLACK_LOG2 (256 at 8: far inside bf16's and f32's
// range). Once a row's scores have set a reference, most tiles leave it, and the warp skips rescaling
// its output accumulators. 0 moves the reference with every new maximum, as do the kernels over int8
// pools that multiply the probabilities by V's scales and round them to f16 (largest 65504): there a
// slack would overflow for V values past about 32K in place of 8M.
#ifndef RESCALE_SLACK_LOG2
#define RESCALE_SLACK_LOG2 8.0f
#endif

// One online-softmax step for a warp's 16 query rows (this lane: rows lane/4 and lane/4 + 8) over a
// tile of NT·8 raw scores, masked with -inf: updates the running references `m` (raw score units; a
// row's maximum, or with SLACK up to RESCALE_SLACK_LOG2 / scale_log2 below it) and partial sums `l`
// (this lane's columns only), leaves the tile's probabilities in `sc` and the factor each row's
// output accumulators must be scaled by in `alpha` (1 where the row's reference stayed; softmax in
// the log2 domain: exp(x·scale) = 2^(x·scale_log2)).
template <int NT, bool SLACK = true>
__device__ __forceinline__ void softmax_tile(
    float (*sc)[4],  // [NT][4]: score fragments of the tile
    float* m,        // [2]: running references of the lane's two rows
    float* l,        // [2]: running sums (this lane's share)
    float* alpha,    // [2]: out, the rows' rescale factors
    float scale_log2) {
    // Maxima and sums over independent partial chains (four, or two for short tiles), so a long
    // tile's dependent adds do not serialise.
    constexpr int CHAINS = NT >= 4 ? 4 : NT;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float part[CHAINS];
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) {
            part[c] = m[r];
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            part[nt % CHAINS] = fmaxf(part[nt % CHAINS], fmaxf(sc[nt][2 * r], sc[nt][2 * r + 1]));
        }
        float mx = part[0];
#pragma unroll
        for (int c = 1; c < CHAINS; ++c) {
            mx = fmaxf(mx, part[c]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // False where the maximum stayed within the slack, and where the row has seen only masked
        // scores (-inf - -inf is NaN).
        const bool moved = (mx - m[r]) * scale_log2 > (SLACK ? RESCALE_SLACK_LOG2 : 0.0f);
        const float kept = moved ? mx : m[r];
        const float ref = kept == NEG_INF ? 0.0f : kept * scale_log2;
        alpha[r] = moved ? fast_exp2(fmaf(m[r], scale_log2, -ref)) : 1.0f;
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) {
            part[c] = 0.0f;
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float p = fast_exp2(fmaf(sc[nt][2 * r + e], scale_log2, -ref));
                sc[nt][2 * r + e] = p;
                part[nt % CHAINS] += p;
            }
        }
        float sum = part[0];
#pragma unroll
        for (int c = 1; c < CHAINS; ++c) {
            sum += part[c];
        }
        l[r] = l[r] * alpha[r] + sum;
        m[r] = kept;
    }
}

// Scales the output accumulators of the lane's two rows by `alpha`; once the references settle most
// tiles leave every row's reference in place, and the warp skips the multiplies.
template <int OT>
__device__ __forceinline__ void rescale_rows(float (*o)[4] /* [OT][4] */, const float* alpha) {
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
        for (int ot = 0; ot < OT; ++ot) {
            o[ot][0] *= alpha[0];
            o[ot][1] *= alpha[0];
            o[ot][2] *= alpha[1];
            o[ot][3] *= alpha[1];
        }
    }
}

// softmax_tile, then the output accumulators `o` ([OT][4]) rescaled to the new references.
template <int NT, int OT, bool SLACK = true>
__device__ __forceinline__ void online_softmax(float (*sc)[4], float* m, float* l, float (*o)[4],
                                               float scale_log2) {
    float alpha[2];
    softmax_tile<NT, SLACK>(sc, m, l, alpha, scale_log2);
    rescale_rows<OT>(o, alpha);
}
