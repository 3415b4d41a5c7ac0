// Picking tokens on the device, one block of 1024 threads per row of logits: the arg-max, and the
// draw the host sampler makes (engine/src/sampling.rs, `pick_token`) — temperature, top-k, top-p,
// then a uniform draw over the kept tokens' cumulative probability.
//
// The host orders the tokens by scaled logit (descending, then by id), keeps the top-k first, then
// the shortest prefix whose probability reaches top_p, and returns the token whose share of that
// prefix's cumulative sum holds draw · sum. Here nothing is sorted: each of the three cuts is a
// most-significant-digit radix select over order-preserving 32-bit keys of the scaled logits (four
// passes of 8 bits through a shared histogram), weighted by count for top-k and by probability for
// top-p and the draw. Probabilities are fixed point (2^32 · e^(s − max)) summed in 64-bit integers,
// so a row's pick does not depend on the order its threads add in. Tokens with equal keys have equal
// probabilities, so a cut inside a run of equal keys is a count of them, taken in id order.
#include "common.cuh"

#define PICK_THREADS 1024
#define MASS_ONE 4294967296.0  // fixed-point unit of probability relative to the row's maximum
#define ALL_IDS 0x7fffffff

typedef unsigned long long mass_t;

// Keys whose unsigned order is the floats' order (−inf lowest of those that occur: NaN is read as −inf).
__device__ __forceinline__ unsigned order_key(float x) {
    const unsigned b = __float_as_uint(x);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_value(unsigned key) {
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// A prefix of the tokens in the host's order: those with a key above `key`, and those at `key` up to
// id `last_id`.
struct Cut {
    unsigned key;
    int last_id;
    __device__ bool keeps(unsigned k, int id) const { return k > key || (k == key && id <= last_id); }
};

// One row's view: its logits, the inverse temperature, its largest scaled logit.
struct Row {
    const float* logits;
    int vocab;
    float inv_t;
    float max;
    __device__ float scaled(int i) const {
        const float l = logits[i];
        return isnan(l) ? NEG_INF : __fmul_rn(l, inv_t);
    }
    // Fixed-point probability relative to the maximum (every token 1 when all are −inf, as the host's
    // uniform fallback).
    __device__ mass_t mass(float s) const {
        return s == max ? (mass_t)MASS_ONE : (mass_t)((double)expf(s - max) * MASS_ONE);
    }
};

__device__ mass_t block_sum_mass(mass_t v) {
    __shared__ mass_t partial[32];
    __shared__ mass_t total;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        mass_t sum = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) sum += partial[w];
        total = sum;
    }
    __syncthreads();
    return total;
}

// Probability mass of the tokens both cuts keep.
__device__ mass_t kept_mass(const Row& row, Cut a, Cut b) {
    mass_t sum = 0;
    for (int i = threadIdx.x; i < row.vocab; i += blockDim.x) {
        const float s = row.scaled(i);
        const unsigned k = order_key(s);
        if (a.keeps(k, i) && b.keeps(k, i)) sum += row.mass(s);
    }
    return block_sum_mass(sum);
}

// Walking the tokens both cuts keep in the host's order, the key at which the running total of each
// token's weight (1 with `by_count`, else its mass) first reaches `target` (≥ 1); `*rest` is what is
// left of the target for the tokens at that key.
__device__ unsigned select_key(const Row& row, Cut a, Cut b, bool by_count, mass_t target,
                               mass_t* rest) {
    __shared__ mass_t hist[256];
    __shared__ unsigned s_prefix;
    __shared__ mass_t s_target;
    unsigned prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        // Most of a row's keys share their top bits: each thread adds up its run of one bin and
        // flushes it when the bin changes, so the shared atomics do not queue on one address.
        unsigned run_bin = 0;
        mass_t run = 0;
        for (int i = threadIdx.x; i < row.vocab; i += blockDim.x) {
            const float s = row.scaled(i);
            const unsigned k = order_key(s);
            if ((k & mask) == prefix && a.keeps(k, i) && b.keeps(k, i)) {
                const mass_t w = by_count ? 1 : row.mass(s);
                const unsigned bin = (k >> shift) & 255u;
                if (bin != run_bin && run != 0) {
                    atomicAdd(&hist[run_bin], run);
                    run = 0;
                }
                run_bin = bin;
                run += w;
            }
        }
        if (run != 0) atomicAdd(&hist[run_bin], run);
        __syncthreads();
        if (threadIdx.x == 0) {
            mass_t above = 0;
            int bin = 255;
            for (; bin > 0 && above + hist[bin] < target; --bin) above += hist[bin];
            s_prefix = prefix | ((unsigned)bin << shift);
            s_target = target - above;
        }
        __syncthreads();
        prefix = s_prefix;
        target = s_target;
        mask |= 255u << shift;
    }
    *rest = target;
    return prefix;
}

// The id of the n-th (from 1) token in id order that has key `key` and that both cuts keep.
__device__ int nth_at_key(const Row& row, Cut a, Cut b, unsigned key, mass_t n) {
    __shared__ int warp_hits[32];
    __shared__ int s_id;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    mass_t seen = 0;
    for (int c = 0; c < row.vocab; c += blockDim.x) {
        const int i = c + threadIdx.x;
        bool hit = false;
        if (i < row.vocab) {
            const unsigned k = order_key(row.scaled(i));
            hit = k == key && a.keeps(k, i) && b.keeps(k, i);
        }
        const int hits = __syncthreads_count(hit);
        if (seen + hits >= n) {
            const unsigned ballot = __ballot_sync(0xffffffffu, hit);
            if (lane == 0) warp_hits[warp] = __popc(ballot);
            __syncthreads();
            int before = __popc(ballot & ((1u << lane) - 1));
            for (int w = 0; w < warp; ++w) before += warp_hits[w];
            if (hit && seen + before + 1 == n) s_id = i;
            __syncthreads();
            return s_id;
        }
        seen += hits;
    }
    return row.vocab - 1;  // n beyond the tokens at `key`: not reached for targets within the total
}

// The cut that keeps, in the host's order, tokens until their running weight reaches `target`.
__device__ Cut cut_at(const Row& row, Cut a, Cut b, bool by_count, mass_t target) {
    mass_t rest;
    const unsigned key = select_key(row, a, b, by_count, target, &rest);
    // Tokens at one key share one weight: the rest is a count of them.
    const mass_t each = by_count ? 1 : row.mass(key_value(key));
    const mass_t n = each == 0 ? 1 : (rest + each - 1) / each;
    return Cut{key, nth_at_key(row, a, b, key, n)};
}

// The index of the largest of row[0..vocab), the first of equals; NaN never wins (a row of NaNs
// only gives 0, as the host's arg-max answers). Every thread gets the answer.
__device__ int block_argmax(const float* __restrict__ row, int vocab) {
    __shared__ float best_v[32];
    __shared__ int best_i[32];
    __shared__ int s_best;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    float v = NEG_INF;
    int i = ALL_IDS;
    // 16-byte loads when rows stay aligned: four values per load, many loads in flight.
    const int vec = (vocab & 3) == 0 ? vocab / 4 : 0;
    for (int q = t; q < vec; q += blockDim.x) {
        const float4 x = reinterpret_cast<const float4*>(row)[q];
        const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            if (xs[e] > v || (xs[e] == v && 4 * q + e < i)) {
                v = xs[e];
                i = 4 * q + e;
            }
        }
    }
    for (int j = 4 * vec + t; j < vocab; j += blockDim.x) {
        const float x = row[j];
        if (x > v || (x == v && j < i)) {
            v = x;
            i = j;
        }
    }
    for (int round = 0; round < 2; ++round) {
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, v, o);
            const int oi = __shfl_xor_sync(0xffffffffu, i, o);
            if (ov > v || (ov == v && oi < i)) {
                v = ov;
                i = oi;
            }
        }
        if (round == 1) break;
        if (lane == 0) {
            best_v[warp] = v;
            best_i[warp] = i;
        }
        __syncthreads();
        const int warps = blockDim.x >> 5;
        v = lane < warps ? best_v[lane] : NEG_INF;
        i = lane < warps ? best_i[lane] : ALL_IDS;
    }
    if (t == 0) s_best = i == ALL_IDS ? 0 : i;
    __syncthreads();
    return s_best;
}

__device__ float block_max(float v) {
    __shared__ float partial[32];
    __shared__ float result;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = NEG_INF;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) m = fmaxf(m, partial[w]);
        result = m;
    }
    __syncthreads();
    return result;
}

// --- Candidates: most rows keep few tokens, found without radix passes -------------------------
//
// One pass bins every token by its distance below the row's largest scaled logit (NEAR_BINS bins of
// BIN_NATS, and "far" beyond), counting tokens and adding masses per bin. Walking the bins from the
// top gives the bin where the top-k count, the top-p mass or (neither set) the draw is reached; when
// the tokens down to that bin number at most CAND_CAP, they are the candidates: sorted by (key
// descending, id ascending) in shared memory, their fixed-point masses scanned, and the three cuts
// read off exactly as the radix path makes them. Otherwise the radix path runs.

#define NEAR_BINS 64
#define BIN_NATS 0.5f
#define CAND_CAP 1024

// A token's bin: 0 for the largest logits, NEAR_BINS for the far ones (and −inf, NaN distances).
__device__ __forceinline__ int bin_of(const Row& row, float s) {
    const float d = __fsub_rn(row.max, s);
    return d < NEAR_BINS * BIN_NATS ? (int)(d * (1.0f / BIN_NATS)) : NEAR_BINS;
}

// Inclusive scan of v over the block's threads (in thread order).
__device__ mass_t block_scan_mass(mass_t v) {
    __shared__ mass_t warp_total[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        const mass_t n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += n;
    }
    if (lane == 31) warp_total[warp] = v;
    __syncthreads();
    mass_t before = 0;
    for (int w = 0; w < warp; ++w) before += warp_total[w];
    __syncthreads();
    return v + before;
}

// The first index i < n with at[i] >= target (at ascending), or -1.
__device__ int first_reaching(const mass_t* at, int n, mass_t target) {
    __shared__ int found;
    if (threadIdx.x == 0) found = -1;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        if (at[i] >= target && (i == 0 || at[i - 1] < target)) found = i;
    }
    __syncthreads();
    const int result = found;
    __syncthreads();  // everyone has read it before a next call resets it
    return result;
}

// Sorts keys[0..n) ascending (n a power of two, at most CAND_CAP).
__device__ void bitonic_sort(unsigned long long* keys, int n) {
    for (int k = 2; k <= n; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const int other = i ^ j;
                if (other > i) {
                    const unsigned long long a = keys[i], b = keys[other];
                    if ((a > b) == ((i & k) == 0)) {
                        keys[i] = b;
                        keys[other] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
}

// The pick from the candidates, or -1 when they do not hold it (the caller's radix path decides).
__device__ int pick_from_candidates(const Row& row, int top_k, float top_p, float draw) {
    // Each warp bins into its own histogram (no queueing across warps), summed after.
    __shared__ unsigned warp_count[PICK_THREADS / 32][NEAR_BINS];
    __shared__ mass_t warp_mass[PICK_THREADS / 32][NEAR_BINS];
    __shared__ unsigned bin_count[NEAR_BINS];
    __shared__ mass_t bin_mass[NEAR_BINS];
    __shared__ unsigned long long keys[CAND_CAP];  // (~key << 32) | id: key descending, id ascending
    __shared__ mass_t running[CAND_CAP];           // inclusive running masses in that order
    __shared__ int s_last_bin, s_count, s_filled;
    __shared__ mass_t s_total;
    const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int i = threadIdx.x; i < warps * NEAR_BINS; i += blockDim.x) {
        warp_count[i / NEAR_BINS][i % NEAR_BINS] = 0;
        warp_mass[i / NEAR_BINS][i % NEAR_BINS] = 0;
    }
    __syncthreads();
    mass_t far_mass = 0;
    for (int i = threadIdx.x; i < row.vocab; i += blockDim.x) {
        const float s = row.scaled(i);
        const int b = bin_of(row, s);
        const mass_t w = row.mass(s);
        if (b == NEAR_BINS) {
            far_mass += w;
        } else {
            atomicAdd(&warp_count[warp][b], 1u);
            if (w != 0) atomicAdd(&warp_mass[warp][b], w);
        }
    }
    far_mass = block_sum_mass(far_mass);  // (its barriers also close the binning)
    for (int b = threadIdx.x; b < NEAR_BINS; b += blockDim.x) {
        unsigned count = 0;
        mass_t mass = 0;
        for (int w = 0; w < warps; ++w) {
            count += warp_count[w][b];
            mass += warp_mass[w][b];
        }
        bin_count[b] = count;
        bin_mass[b] = mass;
    }
    __syncthreads();
    const bool by_k = top_k > 0 && top_k < row.vocab;
    if (threadIdx.x == 0) {
        mass_t total = far_mass;
        for (int b = 0; b < NEAR_BINS; ++b) total += bin_mass[b];
        // Without top-k: the nucleus's mass target, or (no nucleus either) the draw's position.
        const mass_t target = top_p < 1.0f
                                  ? max((mass_t)ceil((double)top_p * (double)total), (mass_t)1)
                                  : min((mass_t)((double)draw * (double)total), total - 1) + 1;
        int last = -1, count = 0;
        mass_t mass = 0;
        for (int b = 0; b < NEAR_BINS && last < 0; ++b) {
            count += (int)bin_count[b];
            mass += bin_mass[b];
            if (by_k ? count >= top_k : mass >= target) last = b;
        }
        s_last_bin = count <= CAND_CAP ? last : -1;
        s_count = count;
        s_total = total;
        s_filled = 0;
    }
    __syncthreads();
    const int last_bin = s_last_bin, n = s_count;
    if (last_bin < 0) {
        return -1;
    }
    for (int i = threadIdx.x; i < row.vocab; i += blockDim.x) {
        const float s = row.scaled(i);
        if (bin_of(row, s) <= last_bin) {
            const int at = atomicAdd(&s_filled, 1);
            keys[at] = ((unsigned long long)~order_key(s) << 32) | (unsigned)i;
        }
    }
    int padded = 1;
    while (padded < n) padded <<= 1;
    __syncthreads();
    for (int i = n + threadIdx.x; i < padded; i += blockDim.x) keys[i] = ~0ull;
    __syncthreads();
    bitonic_sort(keys, padded);
    // Running masses: each thread adds a contiguous run of candidates, then the block scans.
    const int per = (n + blockDim.x - 1) / blockDim.x, from = threadIdx.x * per;
    mass_t own = 0;
    for (int i = from; i < min(n, from + per); ++i) {
        own += row.mass(key_value(~(unsigned)(keys[i] >> 32)));
        running[i] = own;
    }
    const mass_t before = block_scan_mass(own) - own;
    for (int i = from; i < min(n, from + per); ++i) running[i] += before;
    __syncthreads();
    const int kept_k = by_k ? top_k : n;
    const mass_t total = by_k ? running[kept_k - 1] : s_total;
    int kept_n = kept_k;
    mass_t kept = total;
    if (top_p < 1.0f) {
        const mass_t target = max((mass_t)ceil((double)top_p * (double)total), (mass_t)1);
        kept_n = first_reaching(running, kept_k, target) + 1;
        kept = running[kept_n - 1];
    }
    const mass_t at = min((mass_t)((double)draw * (double)kept), kept - 1);
    const int chosen = first_reaching(running, kept_n, at + 1);
    return chosen < 0 ? -1 : (int)(keys[chosen] & 0xffffffffu);
}

// ids[r] = the index of the largest of logits[r, :], the first of equals; one block per row.
extern "C" __global__ void __launch_bounds__(PICK_THREADS)
    argmax_rows_f32(const float* __restrict__ logits, unsigned* ids, int vocab) {
    const int best = block_argmax(logits + (size_t)blockIdx.x * vocab, vocab);
    if (threadIdx.x == 0) ids[blockIdx.x] = (unsigned)best;
}

// ids[r] = the token the host sampler's `pick_token` picks from logits[r, :] with picks[r, :] =
// (temperature, top_k, top_p, draw); temperature 0 or top_k 1 is the arg-max. One block per row.
extern "C" __global__ void __launch_bounds__(PICK_THREADS) sample_rows_f32(
    const float* __restrict__ logits,  // [rows, vocab]
    const float* __restrict__ picks,   // [rows, 4]
    unsigned* ids,                     // [rows]
    int vocab) {
    const float* p = picks + 4 * blockIdx.x;
    const float temperature = p[0], top_p = p[2], draw = p[3];
    const int top_k = (int)p[1];
    const float* logits_row = logits + (size_t)blockIdx.x * vocab;
    if (temperature <= 0.0f || top_k == 1) {
        const int best = block_argmax(logits_row, vocab);
        if (threadIdx.x == 0) ids[blockIdx.x] = (unsigned)best;
        return;
    }
    Row row{logits_row, vocab, __frcp_rn(temperature), NEG_INF};
    float m = NEG_INF;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) m = fmaxf(m, row.scaled(i));
    row.max = block_max(m);
    const int fast = pick_from_candidates(row, top_k, top_p, draw);
    if (fast >= 0) {
        if (threadIdx.x == 0) ids[blockIdx.x] = (unsigned)fast;
        return;
    }
    const Cut all{0u, ALL_IDS};
    const Cut top = top_k > 0 && top_k < vocab ? cut_at(row, all, all, true, (mass_t)top_k) : all;
    Cut nucleus = all;
    if (top_p < 1.0f) {
        const mass_t total = kept_mass(row, top, all);
        const mass_t target = (mass_t)ceil((double)top_p * (double)total);
        nucleus = cut_at(row, top, all, false, max(target, (mass_t)1));
    }
    const mass_t kept = kept_mass(row, top, nucleus);
    // The token whose share holds draw · kept: the first whose running mass passes it.
    const mass_t at = min((mass_t)((double)draw * (double)kept), kept - 1);
    const Cut chosen = cut_at(row, top, nucleus, false, at + 1);
    if (threadIdx.x == 0) ids[blockIdx.x] = (unsigned)chosen.last_id;
}
