// Skinny matrix products for decode steps, over bf16 weights `W [out, in]` and at most 4 f32
// activation rows `x [rows, in]`: one warp per output feature streams its weight row in 16-byte pieces
// and multiplies it with every activation row, each value rounded to bf16 first (as the tensor-core
// path rounds its inputs), accumulating in f32. One launch replaces the f32 → bf16 cast and the cuBLAS
// call, and fuses what follows the product in a decode layer: a bias, a residual add, three
// projections of one input (q, k, v), or SwiGLU's silu(gate)·up. `in` must be a multiple of 8.
#include "common.cuh"

#define GEMV_WARPS 8  // output features per block

__device__ __forceinline__ float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// The 8 weights of a 16-byte piece, widened.
__device__ __forceinline__ void unpack8(const uint4 w, float* f) {
    const unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}

// The RMSNorm scale of each row, rsqrt(mean(x²) + eps) as rms_norm_f32 computes it (summed over the
// warp), or 1 without a norm.
template <int R, bool NORM>
__device__ __forceinline__ void row_scales(const float* __restrict__ x, int rows, int in, float eps,
                                           float* scale) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        scale[r] = 1.0f;
        if (NORM && r < rows) {
            float ss = 0.0f;
            for (int k = lane * 4; k < in; k += 128) {
                const float4 a = *reinterpret_cast<const float4*>(x + (size_t)r * in + k);
                ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
            }
            scale[r] = rsqrtf(warp_sum(ss) / in + eps);
        }
    }
}

// acc[m][r] += Σ_{j<8} wf[m][j] · bf16(x'[r, k + j]) for M weight rows and the first `rows` rows of
// x, where x' is x, or x RMS-normalised (x · scale[r] · norm_w) with NORM.
template <int R, int M, bool NORM>
__device__ __forceinline__ void dot8(const float (*wf)[8], const float* __restrict__ x,
                                     const float* __restrict__ norm_w, const float* scale, int rows,
                                     int in, int k, float (*acc)[R]) {
    float g[8];
    if (NORM) {
        const float4 g0 = *reinterpret_cast<const float4*>(norm_w + k);
        const float4 g1 = *reinterpret_cast<const float4*>(norm_w + k + 4);
        g[0] = g0.x, g[1] = g0.y, g[2] = g0.z, g[3] = g0.w;
        g[4] = g1.x, g[5] = g1.y, g[6] = g1.z, g[7] = g1.w;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (r < rows) {
            const float4 a = *reinterpret_cast<const float4*>(x + (size_t)r * in + k);
            const float4 b = *reinterpret_cast<const float4*>(x + (size_t)r * in + k + 4);
            float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                v[j] = round_bf16(NORM ? v[j] * scale[r] * g[j] : v[j]);
            }
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

// acc[m][r] = Σ_k w_rows[m][k] · bf16(x'[r, k]) for M weight rows at once (their loads in flight
// together, x' computed once), summed over the warp; every lane gets the sums.
template <int R, int M, bool NORM>
__device__ __forceinline__ void warp_dot(const bf16_t* const* w_rows, const float* __restrict__ x,
                                         const float* __restrict__ norm_w, const float* scale, int rows,
                                         int in, float (*acc)[R]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
    }
    // More weight pieces in flight per lane where registers allow.
    constexpr int UNROLL = (R == 1 && M == 1 && !NORM) ? 4 : 2;
#pragma unroll UNROLL
    for (int k = lane * 8; k < in; k += 256) {
        float wf[M][8];
#pragma unroll
        for (int m = 0; m < M; ++m) {
            unpack8(__ldg(reinterpret_cast<const uint4*>(w_rows[m] + k)), wf[m]);
        }
        dot8<R, M, NORM>(wf, x, norm_w, scale, rows, in, k, acc);
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
    }
}

// warp_dot on x as is (norm_w null) or RMS-normalised with norm_w and eps.
template <int R, int M>
__device__ __forceinline__ void warp_dot_maybe_normed(const bf16_t* const* w_rows,
                                                      const float* __restrict__ x, const float* norm_w,
                                                      float eps, int rows, int in, float (*acc)[R]) {
    float scale[R];
    if (norm_w) {
        row_scales<R, true>(x, rows, in, eps, scale);
        warp_dot<R, M, true>(w_rows, x, norm_w, scale, rows, in, acc);
    } else {
        row_scales<R, false>(x, rows, in, eps, scale);
        warp_dot<R, M, false>(w_rows, x, norm_w, scale, rows, in, acc);
    }
}

// y[r, o] = (accumulate ? y[r, o] : 0) + bias[o] + Σ_k W[o, k] · bf16(x[r, k]); bias may be null.
template <int R>
__device__ void gemv(const bf16_t* __restrict__ W, const float* __restrict__ x, const float* bias,
                     float* y, int rows, int in, int out, int accumulate) {
    const int o = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (o >= out) return;
    float acc[1][R];
    const bf16_t* w_rows[1] = {W + (size_t)o * in};
    warp_dot_maybe_normed<R, 1>(w_rows, x, nullptr, 0.0f, rows, in, acc);
    if ((threadIdx.x & 31) == 0) {
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
    int o = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    const bf16_t* W = W0;
    const float* b = b0;
    float* y = y0;
    int out = out0;
    if (o >= out0) {
        o -= out0;
        if (o >= 2 * out12) return;
        const bool second = o >= out12;
        o -= second ? out12 : 0;
        W = second ? W2 : W1;
        b = second ? b2 : b1;
        y = second ? y2 : y1;
        out = out12;
    }
    if (o >= out) return;
    float acc[1][R];
    const bf16_t* w_rows[1] = {W + (size_t)o * in};
    warp_dot_maybe_normed<R, 1>(w_rows, x, norm_w, eps, rows, in, acc);
    if ((threadIdx.x & 31) == 0) {
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
    const int o = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (o >= out) return;
    float gu[2][R];
    const bf16_t* w_rows[2] = {Wg + (size_t)o * in, Wu + (size_t)o * in};
    warp_dot_maybe_normed<R, 2>(w_rows, x, norm_w, eps, rows, in, gu);
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r < rows) y[(size_t)r * out + o] = gu[0][r] / (1.0f + expf(-gu[0][r])) * gu[1][r];
        }
    }
}

// Entry points for up to 1, 2 and 4 rows (`rows` at most the suffix). With more rows the activation
// loads outgrow the weight loads and cuBLAS is faster.
extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_bf16_r1(const bf16_t* W, const float* x, const float* bias, float* y, int rows, int in,
                  int out, int accumulate) {
    gemv<1>(W, x, bias, y, rows, in, out, accumulate);
}
extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv3_bf16_r1(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                   const float* b1, const float* b2, float* y0, float* y1, float* y2, const float* x,
                   const float* norm_w, float eps, int rows, int in, int out0, int out12) {
    gemv3<1>(W0, W1, W2, b0, b1, b2, y0, y1, y2, x, norm_w, eps, rows, in, out0, out12);
}
extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_silu_mul_bf16_r1(const bf16_t* Wg, const bf16_t* Wu, const float* x, const float* norm_w,
                           float eps, float* y, int rows, int in, int out) {
    gemv_silu_mul<1>(Wg, Wu, x, norm_w, eps, y, rows, in, out);
}
extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_bf16_r2(const bf16_t* W, const float* x, const float* bias, float* y, int rows, int in,
                  int out, int accumulate) {
    gemv<2>(W, x, bias, y, rows, in, out, accumulate);
}
extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv3_bf16_r2(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                   const float* b1, const float* b2, float* y0, float* y1, float* y2, const float* x,
                   const float* norm_w, float eps, int rows, int in, int out0, int out12) {
    gemv3<2>(W0, W1, W2, b0, b1, b2, y0, y1, y2, x, norm_w, eps, rows, in, out0, out12);
}
extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_silu_mul_bf16_r2(const bf16_t* Wg, const bf16_t* Wu, const float* x, const float* norm_w,
                           float eps, float* y, int rows, int in, int out) {
    gemv_silu_mul<2>(Wg, Wu, x, norm_w, eps, y, rows, in, out);
}
extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_bf16_r4(const bf16_t* W, const float* x, const float* bias, float* y, int rows, int in,
                  int out, int accumulate) {
    gemv<4>(W, x, bias, y, rows, in, out, accumulate);
}
extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv3_bf16_r4(const bf16_t* W0, const bf16_t* W1, const bf16_t* W2, const float* b0,
                   const float* b1, const float* b2, float* y0, float* y1, float* y2, const float* x,
                   const float* norm_w, float eps, int rows, int in, int out0, int out12) {
    gemv3<4>(W0, W1, W2, b0, b1, b2, y0, y1, y2, x, norm_w, eps, rows, in, out0, out12);
}
extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_silu_mul_bf16_r4(const bf16_t* Wg, const bf16_t* Wu, const float* x, const float* norm_w,
                           float eps, float* y, int rows, int in, int out) {
    gemv_silu_mul<4>(Wg, Wu, x, norm_w, eps, y, rows, in, out);
}
