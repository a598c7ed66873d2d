// Each row's next token drawn on the device (F.sample_tokens): the definition is gradcraft/sampling.py
// (softmax of logits / temperature over the top-k, then the top-p nucleus, and the token whose
// cumulative probability in id order first exceeds the row's uniform number), which the tests hold
// this kernel to. One block of SAMPLE_THREADS threads per row.
//
// Why on the device: a server decoding 64 sequences otherwise copies 64 rows of logits to the host
// and samples them one by one in Python (~150 us a row at a 32k vocabulary), more time than the
// decoding step itself.
//
// How: the k-th largest logit by a radix select (four 8-bit passes over the row's order-preserving
// 32-bit keys, counting in shared memory); the candidates (keys >= the k-th's, ties included) are
// compacted in id order, one per thread; their probabilities in float64 as the host computes them;
// top-p by a bitonic sort of (probability descending, id ascending) and a prefix sum; the draw by a
// prefix sum in id order. A row with no top-k and no top-p draws over the whole vocabulary, segment
// by segment. A row the kernel cannot hold (more than SAMPLE_THREADS candidates, or top-p without
// top-k) gets -1: the caller samples it on the host with the same uniform number.
#include "common.cuh"

#define SAMPLE_THREADS 1024  // as THREADS in backend/cuda/sampling.py: candidates a block can hold

// A key that orders floats as numbers (and NaN above everything, as NumPy's sorts put it last;
// -0.0 and 0.0 equal, as NumPy compares them).
#define NAN_KEY 0xffffffffu
__device__ __forceinline__ u32 order_key(float x) {
    if (x != x) return NAN_KEY;
    if (x == 0.0f) return 0x80000000u;
    const u32 u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block-wide exclusive prefix sum of one value per thread (blockDim.x a multiple of 32, <= 1024).
// Returns the sum of the values of the threads before this one; *total gets the sum of all.
template <typename A> __device__ A block_exclusive_scan(A v, A* warp_totals, A* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    A inclusive = v;
    for (int o = 1; o < 32; o <<= 1) {
        const A up = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += up;
    }
    __syncthreads();  // warp_totals may still be read by a previous scan
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
        A w = lane < warps ? warp_totals[lane] : (A)0;
        for (int o = 1; o < 32; o <<= 1) {
            const A up = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += up;
        }
        if (lane < warps) warp_totals[lane] = w;  // inclusive totals of the warps
    }
    __syncthreads();
    *total = warp_totals[warps - 1];
    return (warp ? warp_totals[warp - 1] : (A)0) + inclusive - v;
}

// (p, i) comes before (q, j) in the top-p order: more probable first, then the lower id.
__device__ __forceinline__ bool nucleus_before(double p, int i, double q, int j) {
    return p > q || (p == q && i < j);
}

template <typename T>
__device__ void sample_tokens_body(const T* logits, const double* temperature, const i64* top_k, const double* top_p,
                                   const double* uniform, i64* out, int V) {
    __shared__ u32 hist[256];
    __shared__ double prob[SAMPLE_THREADS];  // candidate t's probability (candidates in id order)
    __shared__ double sorted_p[SAMPLE_THREADS];
    __shared__ int sorted_t[SAMPLE_THREADS];
    __shared__ int cand_id[SAMPLE_THREADS];
    __shared__ double dscratch[32];
    __shared__ int iscratch[32];
    __shared__ u32 chosen_prefix, chosen_rest;
    __shared__ int answer, last_positive;
    const int row = blockIdx.x, t = threadIdx.x, n = blockDim.x;
    const T* x = logits + (i64)row * V;
    const double temp = temperature[row], u = uniform[row], nucleus = top_p[row];
    const i64 k = top_k[row];
    if (temp == 0.0) {  // greedy: the first of the largest values (NaN first), as np.argmax
        u32 best = 0;
        int best_i = V;
        for (int i = t; i < V; i += n) {
            const u32 key = order_key(to_float(x[i]));
            if (best_i == V || key > best) best = key, best_i = i;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const u32 other = __shfl_xor_sync(0xffffffffu, best, o);
            const int other_i = __shfl_xor_sync(0xffffffffu, best_i, o);
            if (other_i < V && (best_i == V || other > best || (other == best && other_i < best_i)))
                best = other, best_i = other_i;
        }
        if ((t & 31) == 0) iscratch[t >> 5] = best_i, hist[t >> 5] = best;
        __syncthreads();
        if (t == 0) {
            for (int w = 1; w < n / 32; ++w)
                if (iscratch[w] < V && (best_i == V || hist[w] > best || (hist[w] == best && iscratch[w] < best_i)))
                    best = hist[w], best_i = iscratch[w];
            out[row] = best_i;
        }
        return;
    }
    if (k <= 0 || k >= V) {  // the whole vocabulary
        if (nucleus < 1.0) {
            if (t == 0) out[row] = -1;  // a nucleus over all V needs a sort of V: the host's
            return;
        }
        // max, then each thread's contiguous segment of exp(x / T - max / T), then the segment
        // whose cumulative sum passes u * total, walked in id order
        float m = neg_inf<float>();
        for (int i = t; i < V; i += n) m = fmaxf(m, to_float(x[i]));
        m = block_max(m, reinterpret_cast<float*>(dscratch));
        const double shift = (double)m / temp;
        const int seg = (V + n - 1) / n, lo = min(V, t * seg), hi = min(V, lo + seg);
        double mine = 0;
        for (int i = lo; i < hi; ++i) mine += exp((double)to_float(x[i]) / temp - shift);
        double total;
        const double before = block_exclusive_scan(mine, dscratch, &total);
        if (t == 0) answer = V, last_positive = -1;
        __syncthreads();
        if (total != total) {  // a NaN logit: the host's
            if (t == 0) out[row] = -1;
            return;
        }
        // Every segment that starts at or before the target is walked; the earliest index whose running
        // sum passes it wins (segments' sums and the scan may differ in the last bits: no gap, no race).
        const double target = u * total;
        int positive = -1;
        double run = before;
        for (int i = lo; i < hi; ++i) {
            const double p = exp((double)to_float(x[i]) / temp - shift);
            if (p > 0) positive = i;
            run += p;
            if (before <= target && run > target) {
                atomicMin(&answer, i);
                break;
            }
        }
        atomicMax(&last_positive, positive);
        __syncthreads();
        if (t == 0) out[row] = answer < V ? answer : last_positive;  // (u * total past every sum: the last)
        return;
    }
    // the k-th largest key: four passes of 8 bits, most significant first
    u32 prefix = 0, mask = 0, rest = (u32)k;  // rest: how many of the keys matching prefix are still above
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = t; i < 256; i += n) hist[i] = 0;
        __syncthreads();
        for (int i = t; i < V; i += n) {
            const u32 key = order_key(to_float(x[i]));
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (t == 0) {
            u32 above = 0;
            for (int d = 255; d >= 0; --d) {
                if (above + hist[d] >= rest) {
                    chosen_prefix = prefix | ((u32)d << shift);
                    chosen_rest = rest - above;
                    break;
                }
                above += hist[d];
            }
        }
        __syncthreads();
        prefix = chosen_prefix, rest = chosen_rest, mask |= 255u << shift;
    }
    const u32 kth = prefix;
    // the candidates in id order, one per thread: each thread counts its contiguous segment first
    const int seg = (V + n - 1) / n, lo = min(V, t * seg), hi = min(V, lo + seg);
    int mine = 0;
    // (NaN is never a candidate: `x >= kth` is false for it in NumPy; a NaN k-th value leaves none)
    for (int i = lo; i < hi; ++i) {
        const u32 key = order_key(to_float(x[i]));
        mine += key >= kth && key != NAN_KEY;
    }
    int count;
    int slot = block_exclusive_scan(mine, iscratch, &count);
    if (count > n || count == 0) {
        if (t == 0) out[row] = -1;  // ties past the block's size, or no candidate: the host's
        return;
    }
    for (int i = lo; i < hi; ++i) {
        const u32 key = order_key(to_float(x[i]));
        if (key >= kth && key != NAN_KEY) cand_id[slot++] = i;
    }
    __syncthreads();
    const bool holds = t < count;
    const double scaled = holds ? (double)to_float(x[cand_id[t]]) / temp : neg_inf<double>();
    const double m = block_max(scaled, dscratch);
    double p = holds ? exp(scaled - m) : 0.0;
    p /= block_sum(p, dscratch);
    if (nucleus < 1.0) {  // keep the most probable until their mass reaches top_p
        sorted_p[t] = holds ? p : -1.0;
        sorted_t[t] = holds ? t : n;
        __syncthreads();
        for (int size = 2; size <= n; size <<= 1) {
            for (int stride = size >> 1; stride > 0; stride >>= 1) {
                const int other = t ^ stride;
                if (other > t) {
                    const bool forward = (t & size) == 0;
                    const bool swap = forward ? nucleus_before(sorted_p[other], sorted_t[other], sorted_p[t], sorted_t[t])
                                              : nucleus_before(sorted_p[t], sorted_t[t], sorted_p[other], sorted_t[other]);
                    if (swap) {
                        const double tp = sorted_p[t];
                        const int ti = sorted_t[t];
                        sorted_p[t] = sorted_p[other], sorted_t[t] = sorted_t[other];
                        sorted_p[other] = tp, sorted_t[other] = ti;
                    }
                }
                __syncthreads();
            }
        }
        double total;
        const double mass_before = block_exclusive_scan(t < count ? sorted_p[t] : 0.0, dscratch, &total);
        prob[t] = 0.0;
        __syncthreads();
        if (t < count) prob[sorted_t[t]] = mass_before < nucleus ? sorted_p[t] : 0.0;
        __syncthreads();
        p = prob[t];
        p /= block_sum(p, dscratch);
    }
    // the draw: the first candidate whose cumulative probability (id order) exceeds u
    double total;
    const double cdf = block_exclusive_scan(p, dscratch, &total) + p;
    const int passed = block_sum((holds && cdf / total <= u) ? 1.0 : 0.0, dscratch);
    if (t == 0) out[row] = cand_id[min(passed, count - 1)];
}

#define SAMPLE(NAME, T) \
    extern "C" __global__ void sample_tokens_##NAME(const T* logits, const double* temperature, const i64* top_k, \
                                                    const double* top_p, const double* uniform, i64* out, int V) { \
        sample_tokens_body<T>(logits, temperature, top_k, top_p, uniform, out, V); }
SAMPLE(f32, float)
SAMPLE(bf16, bf16)
SAMPLE(f16, f16)
