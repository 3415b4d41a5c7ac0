// Skinny matrix products for decode steps, over bf16 weights `W [out, in]` and at most 4 f32
// activation rows `x [rows, in]`, each activation rounded to bf16 first (as the tensor-core path
// rounds its inputs) and the products accumulated in f32. One launch replaces the f32 → bf16 cast and
// the cuBLAS call, and fuses what follows the product in a decode layer: a bias, a residual add, three
// projections of one input (q, k, v), or SwiGLU's silu(gate)·up; and the RMSNorm before q/k/v and
// gate/up. `in` must be a multiple of 8.
//
// A block of 8 warps takes 8 output features, one a warp. The block first stages the activations it
// needs as bf16 in shared memory (normalised and rounded once for all its warps, a tile of up to
// STAGE_ELEMS values at a time), then each warp streams its weight row in 16-byte pieces, U pieces a
// lane in flight while it multiplies the previous U with the staged rows. The first pieces are
// requested before the staging, and before the kernel waits for the previous one (launched with
// programmatic dependent launch, it starts while that kernel finishes), so their latency overlaps
// both.
#include "common.cuh"

#define GEMV_WARPS 8  // output features per block
#define GEMV_THREADS (GEMV_WARPS * 32)
#define STAGE_ELEMS 8192  // bf16 activations a block stages at once, all rows together (16 KiB)

// 16 bytes of weights, read once: not kept in L1.
__device__ __forceinline__ uint4 load_streamed(const bf16_t* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

// The 8 bf16 values of a 16-byte piece, widened.
__device__ __forceinline__ void unpack8(const uint4 w, float* f) {
    const unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}

// The RMSNorm scale of each row, rsqrt(mean(x²) + eps) as rms_norm_f32 computes it (summed over the
// block), or 1 without a norm. Every thread of the block calls it.
template <int R, bool NORM>
__device__ __forceinline__ void block_row_scales(const float* __restrict__ x, int rows, int in,
                                                 float eps, float* scale) {
    __shared__ float partial[R][GEMV_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < R; ++r) scale[r] = 1.0f;
    if constexpr (NORM) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float ss = 0.0f;
        if (r < rows) {
            for (int k = threadIdx.x * 4; k < in; k += GEMV_THREADS * 4) {
                const float4 a = *reinterpret_cast<const float4*>(x + (size_t)r * in + k);
                ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
            }
        }
        ss = warp_sum(ss);
        if (lane == 0) partial[r][warp] = ss;
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
}

// Stages x'[r, lo..hi) for the first `rows` rows as bf16 pieces of 8 (row r from xs[r · STAGE_ELEMS /
// 8 / R]), x' being x, or x · scale[r] · norm_w with NORM. Every thread of the block calls it.
template <int R, bool NORM>
__device__ __forceinline__ void stage_tile(uint4* xs, const float* __restrict__ x,
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
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = v[j] * scale[r] * g[j];
        }
        xs[r * (STAGE_ELEMS / 8 / R) + ((k - lo) >> 3)] =
            make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]),
                       pack_bf16x2(v[6], v[7]));
    }
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

// acc[m][r] += the products of a lane's U pieces (inputs k, k + 256, ...) with the staged rows, whose
// tile starts at input `lo`.
template <int R, int M, int U>
__device__ __forceinline__ void dot_group(const uint4 (*w)[U], const uint4* xs, int rows, int in,
                                          int k, int lo, float (*acc)[R]) {
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
                unpack8(xs[r * (STAGE_ELEMS / 8 / R) + ((at - lo) >> 3)], v);
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

// acc[m][r] = Σ_k w_rows[m][k] · bf16(x'[r, k]) for the warp's M weight rows (x' as stage_tile
// makes it, in `xs`: STAGE_ELEMS / 8 pieces of shared memory), summed over the warp: every lane gets
// the sums. Every thread of the block calls it; a
// warp without an output feature (`active` false) only helps stage.
template <int R, int M, bool NORM>
__device__ __forceinline__ void staged_dot(uint4* xs, const bf16_t* const* w_rows, bool active,
                                           const float* __restrict__ x, const float* norm_w,
                                           float eps, int rows, int in, float (*acc)[R]) {
    // More pieces in flight per lane where registers allow.
    constexpr int U = (R == 1 && M == 1) ? 4 : 2;
    constexpr int GROUP = 256 * U;        // inputs a warp takes per step
    constexpr int TILE = STAGE_ELEMS / R;  // inputs staged at once
    static_assert(TILE % GROUP == 0, "a step's inputs lie in one staged tile");
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
    }
    uint4 cur[M][U];
    load_group<M, U>(cur, w_rows, active, in, lane * 8);
    // The weights above are no kernel's output; x and y may be the previous kernel's.
    allow_next_grid();
    wait_for_previous_grid();
    float scale[R];
    block_row_scales<R, NORM>(x, rows, in, eps, scale);
#pragma unroll 1
    for (int k0 = 0; k0 < in; k0 += GROUP) {
        const int lo = k0 - k0 % TILE;
        if (k0 == lo) {
            __syncthreads();  // every warp is done with the previous tile
            stage_tile<R, NORM>(xs, x, norm_w, scale, rows, in, lo, min(in, lo + TILE));
            __syncthreads();
        }
        uint4 next[M][U];
        load_group<M, U>(next, w_rows, active, in, k0 + GROUP + lane * 8);
        if (active) dot_group<R, M, U>(cur, xs, rows, in, k0 + lane * 8, lo, acc);
#pragma unroll
        for (int m = 0; m < M; ++m) {
#pragma unroll
            for (int u = 0; u < U; ++u) cur[m][u] = next[m][u];
        }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
    }
}

// staged_dot on x as is (norm_w null) or RMS-normalised with norm_w and eps.
template <int R, int M>
__device__ __forceinline__ void staged_dot_maybe_normed(uint4* xs, const bf16_t* const* w_rows,
                                                        bool active,
                                                        const float* __restrict__ x,
                                                        const float* norm_w, float eps, int rows,
                                                        int in, float (*acc)[R]) {
    if (norm_w) {
        staged_dot<R, M, true>(xs, w_rows, active, x, norm_w, eps, rows, in, acc);
    } else {
        staged_dot<R, M, false>(xs, w_rows, active, x, norm_w, eps, rows, in, acc);
    }
}

// y[r, o] = (accumulate ? y[r, o] : 0) + bias[o] + Σ_k W[o, k] · bf16(x[r, k]); bias may be null.
template <int R>
__device__ void gemv(const bf16_t* __restrict__ W, const float* __restrict__ x, const float* bias,
                     float* y, int rows, int in, int out, int accumulate) {
    __shared__ uint4 xs[STAGE_ELEMS / 8];
    const int o = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    const bool active = o < out;
    float acc[1][R];
    const bf16_t* w_rows[1] = {W + (size_t)(active ? o : 0) * in};
    staged_dot<R, 1, false>(xs, w_rows, active, x, nullptr, 0.0f, rows, in, acc);
    if (active && (threadIdx.x & 31) == 0) {
        const float b = bias ? bias[o] : 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r < rows) {
                float* p = y + (size_t)r * out + o;
                *p = (accumulate ? *p : 0.0f) + (acc[0][r] + b);
            }
        }
    }
}

// Three products of one input (q, k, v), RMS-normalised first when norm_w is given: features 0..out0
// go to y0, the next out12 to y1, the next out12 to y2.
template <int R>
__device__ void gemv3(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                      const float* b1, const float* b2, float* y0, float* y1, float* y2,
                      const float* __restrict__ x, const float* norm_w, float eps, int rows, int in,
                      int out0, int out12) {
    __shared__ uint4 xs[STAGE_ELEMS / 8];
    int o = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    const bf16_t* W = W0;
    const float* b = b0;
    float* y = y0;
    int out = out0;
    if (o >= out0) {
        o -= out0;
        const bool second = o >= out12;
        o -= second ? out12 : 0;
        W = second ? W2 : W1;
        b = second ? b2 : b1;
        y = second ? y2 : y1;
        out = out12;
    }
    const bool active = o < out;
    float acc[1][R];
    const bf16_t* w_rows[1] = {W + (size_t)(active ? o : 0) * in};
    staged_dot_maybe_normed<R, 1>(xs, w_rows, active, x, norm_w, eps, rows, in, acc);
    if (active && (threadIdx.x & 31) == 0) {
        const float bias = b ? b[o] : 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r < rows) y[(size_t)r * out + o] = acc[0][r] + bias;
        }
    }
}

// y[r, o] = silu(g) · u with g = Σ_k Wg[o, k] · bf16(x'[r, k]) and u likewise with Wu, x' being x
// RMS-normalised when norm_w is given.
template <int R>
__device__ void gemv_silu_mul(const bf16_t* __restrict__ Wg, const bf16_t* __restrict__ Wu,
                              const float* __restrict__ x, const float* norm_w, float eps, float* y,
                              int rows, int in, int out) {
    __shared__ uint4 xs[STAGE_ELEMS / 8];
    const int o = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    const bool active = o < out;
    const size_t row = (size_t)(active ? o : 0) * in;
    float gu[2][R];
    const bf16_t* w_rows[2] = {Wg + row, Wu + row};
    staged_dot_maybe_normed<R, 2>(xs, w_rows, active, x, norm_w, eps, rows, in, gu);
    if (active && (threadIdx.x & 31) == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r < rows) y[(size_t)r * out + o] = gu[0][r] / (1.0f + expf(-gu[0][r])) * gu[1][r];
        }
    }
}

// Entry points for up to 1, 2 and 4 rows (`rows` at most the suffix). With more rows the activation
// loads outgrow the weight loads and cuBLAS is faster.
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2)
    gemv_bf16_r1(const bf16_t* W, const float* x, const float* bias, float* y, int rows, int in,
                  int out, int accumulate) {
    gemv<1>(W, x, bias, y, rows, in, out, accumulate);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2)
    gemv3_bf16_r1(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                   const float* b1, const float* b2, float* y0, float* y1, float* y2, const float* x,
                   const float* norm_w, float eps, int rows, int in, int out0, int out12) {
    gemv3<1>(W0, W1, W2, b0, b1, b2, y0, y1, y2, x, norm_w, eps, rows, in, out0, out12);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2)
    gemv_silu_mul_bf16_r1(const bf16_t* Wg, const bf16_t* Wu, const float* x, const float* norm_w,
                           float eps, float* y, int rows, int in, int out) {
    gemv_silu_mul<1>(Wg, Wu, x, norm_w, eps, y, rows, in, out);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2)
    gemv_bf16_r2(const bf16_t* W, const float* x, const float* bias, float* y, int rows, int in,
                  int out, int accumulate) {
    gemv<2>(W, x, bias, y, rows, in, out, accumulate);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2)
    gemv3_bf16_r2(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                   const float* b1, const float* b2, float* y0, float* y1, float* y2, const float* x,
                   const float* norm_w, float eps, int rows, int in, int out0, int out12) {
    gemv3<2>(W0, W1, W2, b0, b1, b2, y0, y1, y2, x, norm_w, eps, rows, in, out0, out12);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2)
    gemv_silu_mul_bf16_r2(const bf16_t* Wg, const bf16_t* Wu, const float* x, const float* norm_w,
                           float eps, float* y, int rows, int in, int out) {
    gemv_silu_mul<2>(Wg, Wu, x, norm_w, eps, y, rows, in, out);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2)
    gemv_bf16_r4(const bf16_t* W, const float* x, const float* bias, float* y, int rows, int in,
                  int out, int accumulate) {
    gemv<4>(W, x, bias, y, rows, in, out, accumulate);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2)
    gemv3_bf16_r4(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                   const float* b1, const float* b2, float* y0, float* y1, float* y2, const float* x,
                   const float* norm_w, float eps, int rows, int in, int out0, int out12) {
    gemv3<4>(W0, W1, W2, b0, b1, b2, y0, y1, y2, x, norm_w, eps, rows, in, out0, out12);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2)
    gemv_silu_mul_bf16_r4(const bf16_t* Wg, const bf16_t* Wu, const float* x, const float* norm_w,
                           float eps, float* y, int rows, int in, int out) {
    gemv_silu_mul<4>(Wg, Wu, x, norm_w, eps, y, rows, in, out);
}
