// Reductions: over the last axis of a contiguous (R, C) array (sum, max, min; one block per row,
// float accumulation for half types), and the column sums of float64 partial results that other
// kernels leave (the norms' weight gradients, the grad norm).
#include "common.cuh"

template <typename T, int OP>  // OP: 0 sum, 1 max, 2 min
__device__ void reduce_last_body(const T* x, T* y, int C) {
    typedef typename acc<T>::type A;
    __shared__ A scratch[32];
    const i64 row = blockIdx.x;
    const T* xr = x + row * C;
    A v = OP == 0 ? (A)0 : (OP == 1 ? neg_inf<A>() : -neg_inf<A>());
    bool nan = false;
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        A e = to_float(xr[j]);
        nan |= e != e;  // max/min propagate NaN, as NumPy does
        v = OP == 0 ? v + e : (OP == 1 ? fmx(v, e) : fmn(v, e));
    }
    if (OP == 0) v = block_sum(v, scratch);
    else {
        v = OP == 1 ? block_max(v, scratch) : -block_max(-v, scratch);
        nan = block_sum((A)(nan ? 1 : 0), scratch) > (A)0;
        if (nan) v = quiet_nan<A>();
    }
    if (threadIdx.x == 0) y[row] = store<T>(v);
}

// y[j] = sum over r < R of partial[r * stride + j], for j < C.
template <typename T>
__device__ void sum_partials_body(const double* partial, T* y, int R, int C, i64 stride) {
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < C; j += gridDim.x * blockDim.x) {
        double s = 0;
        for (int r = 0; r < R; ++r) s += partial[r * stride + j];
        y[j] = store<T>((typename acc<T>::type)s);
    }
}

// y[row] = the index of the largest (MIN: smallest) value of x's row, as NumPy's argmax/argmin: the
// first index among equal values, and the first NaN if the row has one. One block per row.
template <typename A, bool MIN>
__device__ __forceinline__ bool arg_better(A v, int i, A best, int best_i) {  // (v, i) wins over (best, best_i)
    const bool nv = v != v, nb = best != best;
    if (nv != nb) return nv;
    if (nv || v == best) return i < best_i;
    return MIN ? v < best : v > best;
}
template <typename T, bool MIN>
__device__ __forceinline__ void arg_take(const T* xr, int j, typename acc<T>::type& best, int& best_i) {
    const typename acc<T>::type v = to_float(xr[j]);
    if (arg_better<typename acc<T>::type, MIN>(v, j, best, best_i)) best = v, best_i = j;
}

// One row of a vocabulary (a decoding step's greedy pick: one row, 32000-50257 values) is
// latency-bound: the row is read in 16-byte words, up to U of them in flight a thread before the first
// comparison (a 1024-thread block then has 128 KB in flight: gpt2's 50257 bf16 logits in one round
// trip, float32 in two, instead of one value a load and a dozen trips). U = 8 keeps the words in 32
// registers, under the 64 a thread of a 1024-thread block may hold. The winner does not depend on
// the order in which values are seen (arg_better is a total order: NaN, then value, then index), so
// the scalar head (up to the first 16-byte boundary), the words and the scalar tail can be taken in
// any order, and so can the chunks of a split row (below).
// The block's winner over xr[begin, end) (indices relative to xr), on thread 0.
template <typename T, bool MIN>
__device__ void arg_block(const T* xr, int begin, int end, typename acc<T>::type& best, int& best_i) {
    typedef typename acc<T>::type A;
    constexpr int VEC = 16 / (int)sizeof(T), U = 8;
    __shared__ A best_values[32];
    __shared__ int best_indices[32];
    best = to_float(xr[begin]);
    best_i = begin;
    const int step = blockDim.x, C = end - begin;
    const T* xs = xr + begin;
    // values before the first 16-byte boundary, then whole words, then the values after the last
    int head = (int)(((16 - (reinterpret_cast<unsigned long long>(xs) & 15)) & 15) / sizeof(T));
    if (head > C || reinterpret_cast<unsigned long long>(xs) % sizeof(T)) head = C;
    const int words = (C - head) / VEC, tail = head + words * VEC;
    for (int j = threadIdx.x; j < head; j += step) arg_take<T, MIN>(xr, begin + j, best, best_i);
    for (int j = tail + threadIdx.x; j < C; j += step) arg_take<T, MIN>(xr, begin + j, best, best_i);
    const T* xw = xs + head;
    for (int w = threadIdx.x; w < words; w += U * step) {
        Frag<T, VEC> f[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (w + u * step < words) f[u].load(xw + (i64)(w + u * step) * VEC);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (w + u * step >= words) break;
            A v[VEC];
            f[u].get(v);
            const int j0 = begin + head + (w + u * step) * VEC;
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                if (arg_better<A, MIN>(v[e], j0 + e, best, best_i)) best = v[e], best_i = j0 + e;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const A v = __shfl_xor_sync(0xffffffffu, best, o);
        const int i = __shfl_xor_sync(0xffffffffu, best_i, o);
        if (arg_better<A, MIN>(v, i, best, best_i)) best = v, best_i = i;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    if (lane == 0) best_values[warp] = best, best_indices[warp] = best_i;
    __syncthreads();
    if (warp == 0) {
        best = best_values[lane < warps ? lane : 0], best_i = best_indices[lane < warps ? lane : 0];
        for (int o = 16; o > 0; o >>= 1) {
            const A v = __shfl_xor_sync(0xffffffffu, best, o);
            const int i = __shfl_xor_sync(0xffffffffu, best_i, o);
            if (arg_better<A, MIN>(v, i, best, best_i)) best = v, best_i = i;
        }
    }
}

// Where the winner of row r goes: y[r], and for a greedy decoding step (greedy_advance, backend/cuda/
// reduce.py) also ids[r] (the next step's input token) and the position it sits at, one further
// (position[r] for a position per row; position[0], by row 0, for one shared by every row).
__device__ __forceinline__ void arg_write(i64* y, i64* ids, i64* position, int positions, int row, int best_i) {
    y[row] = best_i;
    if (ids) ids[row] = best_i;
    if (position && (positions > 1 || row == 0)) position[positions > 1 ? row : 0] += 1;
}

// One block per row.
template <typename T, bool MIN>
__device__ void arg_last_body(const T* x, i64* y, int C, i64* ids, i64* position, int positions) {
    typename acc<T>::type best;
    int best_i;
    arg_block<T, MIN>(x + (i64)blockIdx.x * C, 0, C, best, best_i);
    if (threadIdx.x == 0) arg_write(y, ids, position, positions, blockIdx.x, best_i);
}

// Few rows (a decoding step's batch): one block per row leaves most SMs idle and reads a 50257-wide
// row through one SM; here grid (splits, rows), block s takes the row's chunk [s chunk, (s + 1) chunk)
// and leaves its winner in the partials, and the last block of the row to finish (counted as the
// KV-cache attention's split kernel counts, kernels/kv_cache.cu: fence, atomicAdd on counters[row],
// the one that sees splits - 1 sets the counter back to 0 for the next launch) takes the winner of the
// partials. The result is the one-block kernel's (arg_better is a total order).
template <typename T, bool MIN>
__device__ void arg_split_body(const T* x, i64* y, int C, int chunk, typename acc<T>::type* part_v, int* part_i,
                               int* counters, i64* ids, i64* position, int positions) {
    typedef typename acc<T>::type A;
    const int row = blockIdx.y, splits = gridDim.x, begin = blockIdx.x * chunk;
    const int end = begin + chunk < C ? begin + chunk : C;
    A best;
    int best_i;
    arg_block<T, MIN>(x + (i64)row * C, begin, end, best, best_i);
    __shared__ bool last;
    if (threadIdx.x == 0) {
        part_v[row * splits + blockIdx.x] = best;
        part_i[row * splits + blockIdx.x] = best_i;
        __threadfence();  // the partial, visible device-wide before the count says so
        last = atomicAdd(counters + row, 1) == splits - 1;
        if (last) counters[row] = 0;  // every other block has counted: ready for the next launch
    }
    __syncthreads();
    if (!last || threadIdx.x >= 32) return;
    // The row's winner: lane s reads split s's partial (splits <= 32, reduce.py), all in one round trip.
    __threadfence();  // (acquire: the other blocks' partials are read after their counts)
    const int lane = threadIdx.x, s = lane < splits ? lane : 0;
    best = __ldcg(part_v + row * splits + s);
    best_i = __ldcg(part_i + row * splits + s);
    for (int o = 16; o > 0; o >>= 1) {
        const A v = __shfl_xor_sync(0xffffffffu, best, o);
        const int i = __shfl_xor_sync(0xffffffffu, best_i, o);
        if (arg_better<A, MIN>(v, i, best, best_i)) best = v, best_i = i;
    }
    if (lane == 0) arg_write(y, ids, position, positions, row, best_i);
}

#define ARG(KIND, NAME, T, MIN) \
    extern "C" __global__ void __launch_bounds__(1024) KIND##_last_##NAME(const T* x, i64* y, int C, i64* ids, \
                                                                         i64* position, int positions) { \
        arg_last_body<T, MIN>(x, y, C, ids, position, positions); } \
    extern "C" __global__ void __launch_bounds__(1024) KIND##_split_##NAME( \
        const T* x, i64* y, int C, int chunk, acc<T>::type* part_v, int* part_i, int* counters, i64* ids, \
        i64* position, int positions) { \
        arg_split_body<T, MIN>(x, y, C, chunk, part_v, part_i, counters, ids, position, positions); }
#define REDUCE(NAME, T) \
    ARG(argmax, NAME, T, false) ARG(argmin, NAME, T, true) \
    extern "C" __global__ void reduce_sum_##NAME(const T* x, T* y, int C) { reduce_last_body<T, 0>(x, y, C); } \
    extern "C" __global__ void reduce_max_##NAME(const T* x, T* y, int C) { reduce_last_body<T, 1>(x, y, C); } \
    extern "C" __global__ void reduce_min_##NAME(const T* x, T* y, int C) { reduce_last_body<T, 2>(x, y, C); } \
    extern "C" __global__ void sum_partials_##NAME(const double* partial, T* y, int R, int C, i64 stride) { \
        sum_partials_body<T>(partial, y, R, C, stride); }
FOR_FLOAT_TYPES(REDUCE)
