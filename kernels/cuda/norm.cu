// Row normalisations: RMSNorm and LayerNorm. One block per row; f32 sums over the block.
#include "common.cuh"

// out = x / sqrt(mean(x²) + eps) * w, stored as f32, or rounded to bf16 for a tensor-core product
// (the same values cast_f32_bf16 makes of the f32 ones). Rows whose width is a multiple of 4 (every
// row then starts 16 bytes aligned) go 16 bytes a load.
template <typename T>
__device__ __forceinline__ void rms_norm(const float* x, const float* w, T* out, int width,
                                         float eps) {
    __shared__ float scratch[32];
    const float* xr = x + (long long)blockIdx.x * width;
    T* o = out + (long long)blockIdx.x * width;
    if ((width & 3) == 0) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* w4 = reinterpret_cast<const float4*>(w);
        float ss = 0.0f;
        for (int c = threadIdx.x; c < width / 4; c += blockDim.x) {
            const float4 v = x4[c];
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
        const float inv = rsqrtf(block_sum(ss, scratch) / width + eps);
        for (int c = threadIdx.x; c < width / 4; c += blockDim.x) {
            const float4 v = x4[c], g = w4[c];
            store4(o, c, v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
        }
        return;
    }
    float ss = 0.0f;
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        ss += xr[c] * xr[c];
    }
    const float inv = rsqrtf(block_sum(ss, scratch) / width + eps);
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        store_from_f32(o + c, xr[c] * inv * w[c]);
    }
}

extern "C" __global__ void rms_norm_f32(
    const float* x,  // [rows, width]
    const float* w,  // [width]
    float* out,      // [rows, width]
    int width,
    float eps) {
    allow_next_grid();  // the LM head's product may start fetching its weights
    rms_norm(x, w, out, width, eps);
}

extern "C" __global__ void rms_norm_bf16(
    const float* x,  // [rows, width]
    const float* w,  // [width]
    bf16_t* out,     // [rows, width]
    int width,
    float eps) {
    rms_norm(x, w, out, width, eps);
}

// out = (x - mean) / sqrt(var + eps) * w + b, two passes over the row.
extern "C" __global__ void layer_norm_f32(
    const float* x,  // [rows, width]
    const float* w,  // [width]
    const float* b,  // [width]
    float* out,      // [rows, width]
    int width,
    float eps) {
    __shared__ float scratch[32];
    const float* xr = x + (long long)blockIdx.x * width;
    float* o = out + (long long)blockIdx.x * width;
    float s = 0.0f;
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        s += xr[c];
    }
    const float mean = block_sum(s, scratch) / width;
    float v = 0.0f;
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        const float d = xr[c] - mean;
        v += d * d;
    }
    const float inv = rsqrtf(block_sum(v, scratch) / width + eps);
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        o[c] = (xr[c] - mean) * inv * w[c] + b[c];
    }
}
