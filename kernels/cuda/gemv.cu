// Skinny matrix products for decode steps, over bf16 weights `W [out, in]` and at most 4 f32
// activation rows `x [rows, in]`, each activation rounded to bf16 first (as the tensor-core path
// rounds its inputs) and the products accumulated in f32. One launch replaces the f32 → bf16 cast and
// the cuBLAS call, and fuses what follows the product in a decode layer: a bias, a residual add, three
// projections of one input (q, k, v; with RoPE and the KV write after them, gemv3_rope_kv), or
// SwiGLU's silu(gate)·up; and the RMSNorm before q/k/v and gate/up. `in` must be a multiple of 8.
//
// A warp takes one output feature at a time. The block first stages the activations as bf16 in
// shared memory (normalised and rounded once for all its warps), then each warp streams its weight
// rows in 16-byte pieces, U pieces a lane in flight while it multiplies the previous U with the
// staged rows. Where the input fits in the stage (STAGE_ELEMS values, all rows together), the launch
// fills each SM once (sixteen warps) and each warp streams feature after feature without a pause; longer
// inputs are staged a tile at a time, once for every feature a block's warps take. The first pieces
// (two groups of them where the input fits the stage) are requested before the staging, and before
// the kernel waits for the previous one (launched with programmatic dependent launch, it starts while
// that kernel finishes), so their latency overlaps both. With an RMSNorm and a short input the block
// reads the activations once, for the norm's sum and the staging together.
#include "common.cuh"

// Output features a block takes at once, and blocks an SM holds (sixteen warps an SM either way, at
// most 128 registers a thread). The launches read both from the loaded kernel (its launch bounds and
// occupancy), so a kernel lab can build other block sizes with -DGEMV_WARPS=4 (or 16).
#ifndef GEMV_WARPS
#define GEMV_WARPS 8
#endif
#define GEMV_THREADS (GEMV_WARPS * 32)
#define GEMV_BLOCKS_PER_SM (16 / GEMV_WARPS)
#define STAGE_ELEMS 16384  // bf16 activations a block stages at once, all rows together (32 KiB)

// 16 bytes of weights, read once: not kept in L1.
__device__ __forceinline__ uint4 load_streamed(const bf16_t* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

// Every row's RMSNorm scale, rsqrt(mean(x²) + eps) as rms_norm_f32 computes it, from each thread's
// partial sums of squares ss[r] summed over the block. Every thread of the block calls it.
template <int R>
__device__ __forceinline__ void block_rms_scales(const float* ss, int in, float eps, float* scale) {
    __shared__ float partial[R][GEMV_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const float s = warp_sum(ss[r]);
        if (lane == 0) partial[r][warp] = s;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float total = 0.0f;
#pragma unroll
        for (int w = 0; w < GEMV_WARPS; ++w) total += partial[r][w];
        scale[r] = rsqrtf(total / in + eps);
    }
}

// The RMSNorm scale of each row (block_rms_scales over x), or 1 without a norm. Every thread of the
// block calls it.
template <int R, bool NORM>
__device__ __forceinline__ void block_row_scales(const float* __restrict__ x, int rows, int in,
                                                 float eps, float* scale) {
#pragma unroll
    for (int r = 0; r < R; ++r) scale[r] = 1.0f;
    if constexpr (NORM) {
        float ss[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            ss[r] = 0.0f;
            if (r < rows) {
                for (int k = threadIdx.x * 4; k < in; k += GEMV_THREADS * 4) {
                    const float4 a = *reinterpret_cast<const float4*>(x + (size_t)r * in + k);
                    ss[r] += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
                }
            }
        }
        block_rms_scales<R>(ss, in, eps, scale);
    }
}

// scale[r] for a row r known only at run time, chosen among registers (an indexed read of the array
// would put it in local memory).
template <int R>
__device__ __forceinline__ float row_scale(const float* scale, int r) {
    float s = scale[0];
#pragma unroll
    for (int rr = 1; rr < R; ++rr) s = rr == r ? scale[rr] : s;
    return s;
}

// Stages x'[r, lo..hi) for the first `rows` rows as bf16 pieces of 8 (row r from xs[r · row_pieces]),
// x' being x, or x · scale[r] · norm_w with NORM. Every thread of the block calls it.
template <int R, bool NORM>
__device__ __forceinline__ void stage_tile(uint4* xs, int row_pieces, const float* __restrict__ x,
                                           const float* __restrict__ norm_w, const float* scale,
                                           int rows, int in, int lo, int hi) {
    const int pieces = (hi - lo) >> 3;
    for (int p = threadIdx.x; p < rows * pieces; p += GEMV_THREADS) {
        const int r = p / pieces, k = lo + 8 * (p - r * pieces);
        const float4 a = *reinterpret_cast<const float4*>(x + (size_t)r * in + k);
        const float4 b = *reinterpret_cast<const float4*>(x + (size_t)r * in + k + 4);
        float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        if (NORM) {
            const float4 g0 = *reinterpret_cast<const float4*>(norm_w + k);
            const float4 g1 = *reinterpret_cast<const float4*>(norm_w + k + 4);
            const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
            const float s = row_scale<R>(scale, r);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = v[j] * s * g[j];
        }
        xs[r * row_pieces + ((k - lo) >> 3)] =
            make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]),
                       pack_bf16x2(v[6], v[7]));
    }
}

// Pieces of 8 activations a thread holds at most when the block stages x' in one pass.
#define ONE_PASS_PIECES 2
#ifndef GEMV_ONE_PASS
#define GEMV_ONE_PASS 1
#endif

// stage_tile over all of x for the first `rows` rows, with the RMSNorm's scale taken from the same
// loads: each thread reads its pieces of x (and of norm_w) once into registers, the block sums the
// squares, and the scaled pieces go to shared memory. One round trip to x instead of the two of
// block_row_scales then stage_tile. Returns false, staging nothing, where a thread would hold more than
// ONE_PASS_PIECES pieces. Every thread of the block calls it.
template <int R>
__device__ __forceinline__ bool stage_normalised_in_one_pass(uint4* xs, const float* __restrict__ x,
                                                            const float* __restrict__ norm_w,
                                                            float eps, int rows, int in) {
    const int pieces = in >> 3, total = rows * pieces;
    if (!GEMV_ONE_PASS || total > ONE_PASS_PIECES * GEMV_THREADS) return false;
    float v[ONE_PASS_PIECES][8], g[ONE_PASS_PIECES][8], ss[R];
#pragma unroll
    for (int r = 0; r < R; ++r) ss[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < ONE_PASS_PIECES; ++i) {
        const int p = threadIdx.x + i * GEMV_THREADS;
        if (p >= total) break;
        const int r = p / pieces, k = 8 * (p - r * pieces);
        const float4 a = *reinterpret_cast<const float4*>(x + (size_t)r * in + k);
        const float4 b = *reinterpret_cast<const float4*>(x + (size_t)r * in + k + 4);
        const float4 g0 = *reinterpret_cast<const float4*>(norm_w + k);
        const float4 g1 = *reinterpret_cast<const float4*>(norm_w + k + 4);
        const float vi[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        const float gi[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
        float sq = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            v[i][j] = vi[j];
            g[i][j] = gi[j];
            sq += vi[j] * vi[j];
        }
#pragma unroll
        for (int rr = 0; rr < R; ++rr) ss[rr] += rr == r ? sq : 0.0f;
    }
    float scale[R];
    block_rms_scales<R>(ss, in, eps, scale);
#pragma unroll
    for (int i = 0; i < ONE_PASS_PIECES; ++i) {
        const int p = threadIdx.x + i * GEMV_THREADS;
        if (p >= total) break;
        const float s = row_scale<R>(scale, p / pieces);
        float y[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) y[j] = v[i][j] * s * g[i][j];
        xs[p] = make_uint4(pack_bf16x2(y[0], y[1]), pack_bf16x2(y[2], y[3]),
                           pack_bf16x2(y[4], y[5]), pack_bf16x2(y[6], y[7]));
    }
    return true;
}

// The U pieces of each of the M weight rows a lane takes at inputs k, k + 256, ...: zeros past `in`
// or for a warp without an output feature.
template <int M, int U>
__device__ __forceinline__ void load_group(uint4 (*w)[U], const bf16_t* const* w_rows, bool active,
                                           int in, int k) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int at = k + 256 * u;
            w[m][u] = active && at < in ? load_streamed(w_rows[m] + at) : make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

// acc[m][r] += the products of a lane's U pieces (inputs k, k + 256, ...) with the staged rows (row r
// from xs[r · row_pieces]), whose tile starts at input `lo`.
template <int R, int M, int U>
__device__ __forceinline__ void dot_group(const uint4 (*w)[U], const uint4* xs, int row_pieces,
                                          int rows, int in, int k, int lo, float (*acc)[R]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int at = k + 256 * u;
        if (at >= in) break;
        float wf[M][8];
#pragma unroll
        for (int m = 0; m < M; ++m) unpack8(w[m][u], wf[m]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r < rows) {
                float v[8];
                unpack8(xs[r * row_pieces + ((at - lo) >> 3)], v);
#pragma unroll
                for (int m = 0; m < M; ++m) {
                    float s = acc[m][r];
#pragma unroll
                    for (int j = 0; j < 8; ++j) s = fmaf(wf[m][j], v[j], s);
                    acc[m][r] = s;
                }
            }
        }
    }
}

// The pieces a lane keeps in flight per weight row: more where registers allow. At one activation
// row, 8 pieces of one weight row (or 4 of each of a pair) are 128 bytes a lane, 32 KiB a block;
// half that left the large products 5-10 % short of the copy bandwidth (the kernel lab's variants
// build other values with -DGEMV_U_ONE / -DGEMV_U_PAIR).
#ifndef GEMV_U_ONE
#define GEMV_U_ONE 8
#endif
#ifndef GEMV_U_PAIR
#define GEMV_U_PAIR 4
#endif
template <int R, int M>
struct Stream {
    static constexpr int U = R == 1 ? (M == 1 ? GEMV_U_ONE : GEMV_U_PAIR) : 2;
    static constexpr int GROUP = 256 * U;        // inputs a warp takes per step
    static constexpr int TILE = STAGE_ELEMS / R;  // inputs staged at once
    static_assert(TILE % GROUP == 0, "a step's inputs lie in one staged tile");
};

// Sums each acc[m][r] over the warp (every lane gets the sums).
template <int R, int M>
__device__ __forceinline__ void warp_sums(float (*acc)[R]) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
    }
}

template <int R, int M>
__device__ __forceinline__ void zero(float (*acc)[R]) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
    }
}

// The products of inputs too long to stage at once: the block stages x' tile by tile for every
// round of GEMV_WARPS output features, and each warp streams the weight rows of its feature
// (`rows_of(o, w_rows)`) through each tile, then hands the warp's sums to `finish(o, acc)`. Every
// thread of the block calls it; the loop over features is the same for the whole block.
template <int R, int M, bool NORM, class RowsOf, class Finish>
__device__ __forceinline__ void tiled_products(uint4* xs, RowsOf rows_of, Finish finish,
                                               int outputs, const float* __restrict__ x,
                                               const float* norm_w, float eps, int rows, int in) {
    using S = Stream<R, M>;
    constexpr int U = S::U, GROUP = S::GROUP, TILE = S::TILE;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float scale[R];
    bool waited = false;
#pragma unroll 1
    for (int base = blockIdx.x * GEMV_WARPS; base < outputs; base += gridDim.x * GEMV_WARPS) {
        const int o = base + warp;
        const bool active = o < outputs;
        const bf16_t* w_rows[M];
        rows_of(active ? o : 0, w_rows);
        uint4 cur[M][U];
        load_group<M, U>(cur, w_rows, active, in, lane * 8);
        if (!waited) {
            // The weights above are no kernel's output; x and y may be the previous kernel's.
            allow_next_grid();
            wait_for_previous_grid();
            block_row_scales<R, NORM>(x, rows, in, eps, scale);
            waited = true;
        }
        float acc[M][R];
        zero<R, M>(acc);
#pragma unroll 1
        for (int k0 = 0; k0 < in; k0 += GROUP) {
            const int lo = k0 - k0 % TILE;
            if (k0 == lo) {
                __syncthreads();  // every warp is done with the previous tile
                stage_tile<R, NORM>(xs, TILE / 8, x, norm_w, scale, rows, in, lo, min(in, lo + TILE));
                __syncthreads();
            }
            uint4 next[M][U];
            load_group<M, U>(next, w_rows, active, in, k0 + GROUP + lane * 8);
            if (active) dot_group<R, M, U>(cur, xs, TILE / 8, rows, in, k0 + lane * 8, lo, acc);
#pragma unroll
            for (int m = 0; m < M; ++m) {
#pragma unroll
                for (int u = 0; u < U; ++u) cur[m][u] = next[m][u];
            }
        }
        warp_sums<R, M>(acc);
        if (active) finish(o, acc);
    }
}

// The products of inputs short enough to stage at once (in ≤ TILE): the block stages x' once, then
// each warp streams the weight rows of its features o = blockIdx.x · GEMV_WARPS + warp, then every
// gridDim.x · GEMV_WARPS, as one stream of pieces: the next feature's first pieces are requested
// while the last of the previous are multiplied. A warp's first two groups of pieces are requested
// before the kernel waits for the previous one, so that both are in flight while it stages x'. Every
// thread of the block calls it.
template <int R, int M, bool NORM, class RowsOf, class Finish>
__device__ __forceinline__ void resident_products(uint4* xs, RowsOf rows_of, Finish finish,
                                                  int outputs, const float* __restrict__ x,
                                                  const float* norm_w, float eps, int rows,
                                                  int in) {
    using S = Stream<R, M>;
    constexpr int U = S::U, GROUP = S::GROUP;
    const int lane = threadIdx.x & 31;
    const int stride = gridDim.x * GEMV_WARPS;
    const int steps = (in + GROUP - 1) / GROUP;
    // The group after (o, step): the next step of the same feature, or the first of the warp's next.
    auto after = [=](int& o, int& step) {
        if (++step == steps) {
            step = 0;
            o += stride;
        }
    };
    int o = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5), step = 0;
    const bool active = o < outputs;
    const bf16_t* w_rows[M];
    rows_of(active ? o : 0, w_rows);
    uint4 cur[M][U];
    load_group<M, U>(cur, w_rows, active, in, lane * 8);
    int next_o = o, next_step = step;
    after(next_o, next_step);
    bool next_active = next_o < outputs;
    const bf16_t* next_rows[M];
    rows_of(next_active ? next_o : 0, next_rows);
    uint4 next[M][U];
    load_group<M, U>(next, next_rows, next_active, in, next_step * GROUP + lane * 8);
    // The weights above are no kernel's output; x and y may be the previous kernel's.
    allow_next_grid();
    wait_for_previous_grid();
    if (!NORM || !stage_normalised_in_one_pass<R>(xs, x, norm_w, eps, rows, in)) {
        float scale[R];
        block_row_scales<R, NORM>(x, rows, in, eps, scale);
        stage_tile<R, NORM>(xs, in / 8, x, norm_w, scale, rows, in, 0, in);
    }
    __syncthreads();
    if (!active) return;
    float acc[M][R];
    zero<R, M>(acc);
#pragma unroll 1
    while (true) {
        dot_group<R, M, U>(cur, xs, in / 8, rows, in, step * GROUP + lane * 8, 0, acc);
        if (step + 1 == steps) {
            warp_sums<R, M>(acc);
            finish(o, acc);
            zero<R, M>(acc);
        }
        if (!next_active) break;
        o = next_o;
        step = next_step;
#pragma unroll
        for (int m = 0; m < M; ++m) {
#pragma unroll
            for (int u = 0; u < U; ++u) cur[m][u] = next[m][u];
        }
        after(next_o, next_step);
        next_active = next_o < outputs;
        rows_of(next_active ? next_o : 0, next_rows);
        load_group<M, U>(next, next_rows, next_active, in, next_step * GROUP + lane * 8);
    }
}

// Σ_k W_m[o, k] · bf16(x'[r, k]) for every output feature o < outputs and each of its M weight rows
// (`rows_of(o, w_rows)`), handed as acc[m][r] to `finish(o, acc)` by one warp (every lane calls it).
// x' is x, or x RMS-normalised with norm_w (non-null) and eps. The launch may have fewer blocks than
// outputs / GEMV_WARPS: the warps loop over the features. The launch gives the block rows · in · 2 bytes
// of dynamic shared memory where in ≤ STAGE_ELEMS / R, else STAGE_ELEMS · 2.
template <int R, int M, class RowsOf, class Finish>
__device__ __forceinline__ void products(RowsOf rows_of, Finish finish, int outputs,
                                         const float* __restrict__ x, const float* norm_w,
                                         float eps, int rows, int in) {
    extern __shared__ uint4 xs[];  // rows · in bf16 values where they fit, else STAGE_ELEMS
    const bool resident = in <= Stream<R, M>::TILE;
    if (norm_w && resident) {
        resident_products<R, M, true>(xs, rows_of, finish, outputs, x, norm_w, eps, rows, in);
    } else if (resident) {
        resident_products<R, M, false>(xs, rows_of, finish, outputs, x, norm_w, eps, rows, in);
    } else if (norm_w) {
        tiled_products<R, M, true>(xs, rows_of, finish, outputs, x, norm_w, eps, rows, in);
    } else {
        tiled_products<R, M, false>(xs, rows_of, finish, outputs, x, norm_w, eps, rows, in);
    }
}

// y[r, o] = (accumulate ? y[r, o] : 0) + bias[o] + Σ_k W[o, k] · bf16(x[r, k]); bias may be null.
template <int R>
__device__ void gemv(const bf16_t* __restrict__ W, const float* __restrict__ x, const float* bias,
                     float* y, int rows, int in, int out, int accumulate) {
    auto rows_of = [=](int o, const bf16_t** w) { w[0] = W + (size_t)o * in; };
    auto finish = [=](int o, float (*acc)[R]) {
        if ((threadIdx.x & 31) != 0) return;
        const float b = bias ? bias[o] : 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r < rows) {
                float* p = y + (size_t)r * out + o;
                *p = (accumulate ? *p : 0.0f) + (acc[0][r] + b);
            }
        }
    };
    products<R, 1>(rows_of, finish, out, x, nullptr, 0.0f, rows, in);
}

// Three products of one input (q, k, v), RMS-normalised first when norm_w is given: features 0..out0
// go to y0, the next out12 to y1, the next out12 to y2.
template <int R>
__device__ void gemv3(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                      const float* b1, const float* b2, float* y0, float* y1, float* y2,
                      const float* __restrict__ x, const float* norm_w, float eps, int rows, int in,
                      int out0, int out12) {
    // Which of the three products feature o belongs to (x: 0, 1, 2) and its row there (y).
    auto locate = [=](int o) {
        const int which = o < out0 ? 0 : (o < out0 + out12 ? 1 : 2);
        return make_int2(which, which == 0 ? o : o - out0 - (which - 1) * out12);
    };
    auto rows_of = [=](int o, const bf16_t** w) {
        const int2 at = locate(o);
        w[0] = (at.x == 0 ? W0 : at.x == 1 ? W1 : W2) + (size_t)at.y * in;
    };
    auto finish = [=](int o, float (*acc)[R]) {
        if ((threadIdx.x & 31) != 0) return;
        const int2 at = locate(o);
        const float* b = at.x == 0 ? b0 : at.x == 1 ? b1 : b2;
        float* y = at.x == 0 ? y0 : at.x == 1 ? y1 : y2;
        const int out = at.x == 0 ? out0 : out12;
        const float bias = b ? b[at.y] : 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r < rows) y[(size_t)r * out + at.y] = acc[0][r] + bias;
        }
    };
    products<R, 1>(rows_of, finish, out0 + 2 * out12, x, norm_w, eps, rows, in);
}

// gemv3 for attention with RoPE and the KV write after it, in one launch (what gemv3 then
// rope_kv_write do): a warp's feature is a pair of rows of one head, dims j and j + head_dim / 2 (q's
// pairs, then k's, then v's), so the warp has both halves RoPE rotates together. q and k are rotated
// with the row's cos/sin from `table` (HF half-split), k and v written to their pool slots, and q, k, v
// left in y0..y2 as rope_kv_write leaves them.
template <int R, typename T>
__device__ void gemv3_rope_kv(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                              const float* b1, const float* b2, float* q, float* k, float* v,
                              const float* __restrict__ x, const float* norm_w, float eps, int rows,
                              int in, int heads, int kv_heads, int head_dim,
                              const float* table,     // [rows, head_dim]
                              const unsigned* slots,  // [rows]
                              T* kc, T* vc) {         // [num_slots, kv_heads * head_dim]
    const int half = head_dim / 2, q_pairs = heads * half, kv_pairs = kv_heads * half;
    // Which product pair o belongs to (0: q, 1: k, 2: v), its head and its dim j < half.
    auto locate = [=](int o) {
        const int which = o < q_pairs ? 0 : (o < q_pairs + kv_pairs ? 1 : 2);
        const int at = which == 0 ? o : o - q_pairs - (which - 1) * kv_pairs;
        return make_int3(which, at / half, at % half);
    };
    auto rows_of = [=](int o, const bf16_t** w) {
        const int3 at = locate(o);
        const bf16_t* W = at.x == 0 ? W0 : at.x == 1 ? W1 : W2;
        w[0] = W + (size_t)(at.y * head_dim + at.z) * in;
        w[1] = W + (size_t)(at.y * head_dim + at.z + half) * in;
    };
    auto finish = [=](int o, float (*acc)[R]) {
        if ((threadIdx.x & 31) != 0) return;
        const int3 at = locate(o);
        const float* b = at.x == 0 ? b0 : at.x == 1 ? b1 : b2;
        const int d = at.y * head_dim + at.z, width = (at.x == 0 ? heads : kv_heads) * head_dim;
        const float bias1 = b ? b[d] : 0.0f, bias2 = b ? b[d + half] : 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r >= rows) continue;
            float y1 = acc[0][r] + bias1, y2 = acc[1][r] + bias2;
            if (at.x < 2) {
                const float c = table[r * head_dim + at.z], s = table[r * head_dim + half + at.z];
                const float x1 = y1, x2 = y2;
                y1 = x1 * c - x2 * s;
                y2 = x2 * c + x1 * s;
            }
            float* y = (at.x == 0 ? q : at.x == 1 ? k : v) + (size_t)r * width + d;
            y[0] = y1;
            y[half] = y2;
            if (at.x > 0) {
                T* pool = (at.x == 1 ? kc : vc) + (size_t)slots[r] * width + d;
                store_from_f32(pool, y1);
                store_from_f32(pool + half, y2);
            }
        }
    };
    products<R, 2>(rows_of, finish, q_pairs + 2 * kv_pairs, x, norm_w, eps, rows, in);
}

// y[r, o] = silu(g) · u with g = Σ_k Wg[o, k] · bf16(x'[r, k]) and u likewise with Wu, x' being x
// RMS-normalised when norm_w is given.
template <int R>
__device__ void gemv_silu_mul(const bf16_t* __restrict__ Wg, const bf16_t* __restrict__ Wu,
                              const float* __restrict__ x, const float* norm_w, float eps, float* y,
                              int rows, int in, int out) {
    auto rows_of = [=](int o, const bf16_t** w) {
        w[0] = Wg + (size_t)o * in;
        w[1] = Wu + (size_t)o * in;
    };
    auto finish = [=](int o, float (*gu)[R]) {
        if ((threadIdx.x & 31) != 0) return;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r < rows) y[(size_t)r * out + o] = gu[0][r] / (1.0f + expf(-gu[0][r])) * gu[1][r];
        }
    };
    products<R, 2>(rows_of, finish, out, x, norm_w, eps, rows, in);
}

// Entry points for up to 1, 2 and 4 rows (`rows` at most the suffix). With more rows the activation
// loads outgrow the weight loads and cuBLAS is faster.
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv_bf16_r1(const bf16_t* W, const float* x, const float* bias, float* y, int rows, int in,
                  int out, int accumulate) {
    gemv<1>(W, x, bias, y, rows, in, out, accumulate);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv3_bf16_r1(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                   const float* b1, const float* b2, float* y0, float* y1, float* y2, const float* x,
                   const float* norm_w, float eps, int rows, int in, int out0, int out12) {
    gemv3<1>(W0, W1, W2, b0, b1, b2, y0, y1, y2, x, norm_w, eps, rows, in, out0, out12);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv_silu_mul_bf16_r1(const bf16_t* Wg, const bf16_t* Wu, const float* x, const float* norm_w,
                           float eps, float* y, int rows, int in, int out) {
    gemv_silu_mul<1>(Wg, Wu, x, norm_w, eps, y, rows, in, out);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv_bf16_r2(const bf16_t* W, const float* x, const float* bias, float* y, int rows, int in,
                  int out, int accumulate) {
    gemv<2>(W, x, bias, y, rows, in, out, accumulate);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv3_bf16_r2(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                   const float* b1, const float* b2, float* y0, float* y1, float* y2, const float* x,
                   const float* norm_w, float eps, int rows, int in, int out0, int out12) {
    gemv3<2>(W0, W1, W2, b0, b1, b2, y0, y1, y2, x, norm_w, eps, rows, in, out0, out12);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv_silu_mul_bf16_r2(const bf16_t* Wg, const bf16_t* Wu, const float* x, const float* norm_w,
                           float eps, float* y, int rows, int in, int out) {
    gemv_silu_mul<2>(Wg, Wu, x, norm_w, eps, y, rows, in, out);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv_bf16_r4(const bf16_t* W, const float* x, const float* bias, float* y, int rows, int in,
                  int out, int accumulate) {
    gemv<4>(W, x, bias, y, rows, in, out, accumulate);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv3_bf16_r4(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                   const float* b1, const float* b2, float* y0, float* y1, float* y2, const float* x,
                   const float* norm_w, float eps, int rows, int in, int out0, int out12) {
    gemv3<4>(W0, W1, W2, b0, b1, b2, y0, y1, y2, x, norm_w, eps, rows, in, out0, out12);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv_silu_mul_bf16_r4(const bf16_t* Wg, const bf16_t* Wu, const float* x, const float* norm_w,
                           float eps, float* y, int rows, int in, int out) {
    gemv_silu_mul<4>(Wg, Wu, x, norm_w, eps, y, rows, in, out);
}
// The same with RoPE and the KV write fused (gemv3_rope_kv), over bf16 and f32 pools.
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv3_rope_kv_bf16_r1(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                          const float* b1, const float* b2, float* q, float* k, float* v,
                          const float* x, const float* norm_w, float eps, int rows, int in, int heads,
                          int kv_heads, int head_dim, const float* table, const unsigned* slots,
                          bf16_t* kc, bf16_t* vc) {
    gemv3_rope_kv<1, bf16_t>(W0, W1, W2, b0, b1, b2, q, k, v, x, norm_w, eps, rows, in, heads, kv_heads,
                         head_dim, table, slots, kc, vc);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv3_rope_kv_bf16_r2(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                          const float* b1, const float* b2, float* q, float* k, float* v,
                          const float* x, const float* norm_w, float eps, int rows, int in, int heads,
                          int kv_heads, int head_dim, const float* table, const unsigned* slots,
                          bf16_t* kc, bf16_t* vc) {
    gemv3_rope_kv<2, bf16_t>(W0, W1, W2, b0, b1, b2, q, k, v, x, norm_w, eps, rows, in, heads, kv_heads,
                         head_dim, table, slots, kc, vc);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv3_rope_kv_bf16_r4(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                          const float* b1, const float* b2, float* q, float* k, float* v,
                          const float* x, const float* norm_w, float eps, int rows, int in, int heads,
                          int kv_heads, int head_dim, const float* table, const unsigned* slots,
                          bf16_t* kc, bf16_t* vc) {
    gemv3_rope_kv<4, bf16_t>(W0, W1, W2, b0, b1, b2, q, k, v, x, norm_w, eps, rows, in, heads, kv_heads,
                         head_dim, table, slots, kc, vc);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv3_rope_kv_f32_r1(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                          const float* b1, const float* b2, float* q, float* k, float* v,
                          const float* x, const float* norm_w, float eps, int rows, int in, int heads,
                          int kv_heads, int head_dim, const float* table, const unsigned* slots,
                          float* kc, float* vc) {
    gemv3_rope_kv<1, float>(W0, W1, W2, b0, b1, b2, q, k, v, x, norm_w, eps, rows, in, heads, kv_heads,
                         head_dim, table, slots, kc, vc);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv3_rope_kv_f32_r2(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                          const float* b1, const float* b2, float* q, float* k, float* v,
                          const float* x, const float* norm_w, float eps, int rows, int in, int heads,
                          int kv_heads, int head_dim, const float* table, const unsigned* slots,
                          float* kc, float* vc) {
    gemv3_rope_kv<2, float>(W0, W1, W2, b0, b1, b2, q, k, v, x, norm_w, eps, rows, in, heads, kv_heads,
                         head_dim, table, slots, kc, vc);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_PER_SM)
    gemv3_rope_kv_f32_r4(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                          const float* b1, const float* b2, float* q, float* k, float* v,
                          const float* x, const float* norm_w, float eps, int rows, int in, int heads,
                          int kv_heads, int head_dim, const float* table, const unsigned* slots,
                          float* kc, float* vc) {
    gemv3_rope_kv<4, float>(W0, W1, W2, b0, b1, b2, q, k, v, x, norm_w, eps, rows, in, heads, kv_heads,
                         head_dim, table, slots, kc, vc);
}
