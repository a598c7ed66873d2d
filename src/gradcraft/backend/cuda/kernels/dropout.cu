// Dropout: y = x / (1 - p) where the element's uniform number u >= p, else 0.
//
// The random state lives in device memory: state = int64 [seed, counter], owned by
// gradcraft/ops/creation.py. The counter moves on once per training step (a kernel of the step, so a
// replayed CUDA graph moves it too), and `stream` (a launch constant: the layer's place in the step)
// tells the dropout layers of one step apart. Element i's number is word i % 4 of
//     philox_block(i / 4 + 1, counter, stream, 0; key seed, 0)
// = NumPy's Generator(Philox(counter=[0, counter, stream, 0], key=[seed, 0])).random(), the reference
// `_dropout` in backend/cpu/dropout.py. The mask is a function of (seed, counter, stream, i) alone, so the
// backward pass (this kernel on the gradient, reading the same state) regenerates the forward mask.
#include "common.cuh"
#include "philox.cuh"

// Each thread makes one Philox call and handles the 4 elements it covers.
template <typename T>
__device__ void dropout_body(const T* x, T* y, i64 n, const i64* state, u64 stream, double p, double scale) {
    typedef typename acc<T>::type A;
    const A s = (A)scale;
    const u64 seed = (u64)state[0], counter = (u64)state[1];
    i64 groups = (n + 3) / 4;
    for (i64 q = blockIdx.x * (i64)blockDim.x + threadIdx.x; q < groups; q += (i64)gridDim.x * blockDim.x) {
        u64x4 r = philox4x64_block((u64)q + 1, counter, stream, 0, seed, 0);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            i64 i = 4 * q + k;
            if (i < n) {
                bool keep = uniform53(r.v[k]) >= p;
                y[i] = store<T>(keep ? (A)to_float(x[i]) * s : (A)0);
            }
        }
    }
}

#define DROPOUT(NAME, T) \
    extern "C" __global__ void dropout_##NAME(const T* x, T* y, i64 n, const i64* state, u64 stream, double p, \
                                              double scale) { \
        dropout_body<T>(x, y, n, state, stream, p, scale); }
FOR_FLOAT_TYPES(DROPOUT)

// Attention-weight dropout on the explicit path: x (rows, t, s) holds the weights of queries i0..i0+t and
// keys j0..j0+s of a (B, H, T, S) attention (rows = B * H); the mask is the flash kernels' (philox.cuh
// AttnDropout, backend/philox.py), so both paths drop the same weights. One Philox call per element:
// this path is the reference and the fallback, not the fast one.
template <typename T>
__device__ void attention_dropout_body(const T* x, T* y, i64 n, int t, int s, int Tq, int S, int i0, int j0,
                                       const i64* state, u32 stream, u32 threshold, float scale) {
    typedef typename acc<T>::type A;
    const AttnDropout d = attn_dropout(state, stream, threshold, scale);
    const i64 groups = (S + 7) / 8;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < n; idx += (i64)gridDim.x * blockDim.x) {
        const i64 col = idx % s, r = idx / s, i = r % t, bh = r / t, j = j0 + col;
        const bool keep = (d.keep8((u64)((bh * Tq + i0 + i) * groups + j / 8)) >> (j & 7)) & 1u;
        y[idx] = store<T>(keep ? (A)to_float(x[idx]) * (A)scale : (A)0);
    }
}

#define ATTENTION_DROPOUT(NAME, T) \
    extern "C" __global__ void attention_dropout_##NAME(const T* x, T* y, i64 n, int t, int s, int Tq, int S, \
                                                        int i0, int j0, const i64* state, u32 stream, \
                                                        u32 threshold, float scale) { \
        attention_dropout_body<T>(x, y, n, t, s, Tq, S, i0, j0, state, stream, threshold, scale); }
FOR_FLOAT_TYPES(ATTENTION_DROPOUT)
