// The global L2 norm of a list of gradients, deterministic, in two launches:
// grad_sumsq writes one partial sum of squares per chunk (multi_tensor.cuh's table, accumulated in
// double); grad_norm_finish adds them in a fixed order and writes out[0] = norm and
// out[1] = min(1, max_norm / (norm + 1e-6)), the clipping coefficient adamw.cu can read.
// scale_many multiplies every gradient by scale[0] in place (torch's _foreach_mul_ of clip_grad_norm_),
// in float32, rounding once to each gradient's dtype.
#include "multi_tensor.cuh"

extern "C" __global__ void grad_sumsq(const u64* ptrs, const int* codes, const i64* sizes, const int* chunk_tensor,
                                      const i64* chunk_start, int n_chunks, double* partial) {
    __shared__ double scratch[32];
    for (int c = blockIdx.x; c < n_chunks; c += gridDim.x) {
        const int k = chunk_tensor[c];
        const i64 start = chunk_start[c], end = min(start + (i64)CHUNK, sizes[k]);
        double s = 0;
        for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
            double v = load_any((const void*)ptrs[k], codes[k], i);
            s += v * v;
        }
        s = block_sum(s, scratch);
        if (threadIdx.x == 0) partial[c] = s;
    }
}

extern "C" __global__ void grad_norm_finish(const double* partial, int n, float* out, double max_norm) {
    __shared__ double scratch[32];
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) {
        double norm = sqrt(s);
        out[0] = (float)norm;
        out[1] = (float)(max_norm > 0 ? fmin(1.0, max_norm / (norm + 1e-6)) : 1.0);
    }
}

extern "C" __global__ void scale_many(const u64* ptrs, const int* codes, const i64* sizes, const int* chunk_tensor,
                                      const i64* chunk_start, int n_chunks, const float* scale) {
    const float s = scale[0];
    for (int c = blockIdx.x; c < n_chunks; c += gridDim.x) {
        const int k = chunk_tensor[c];
        const i64 start = chunk_start[c], end = min(start + (i64)CHUNK, sizes[k]);
        void* p = (void*)ptrs[k];
        for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) store_any(p, codes[k], i, load_any(p, codes[k], i) * s);
    }
}
