// Many tensors converted between float32, bfloat16 and float16 in one launch: a mixed-precision step
// casts every weight to bf16 and every weight gradient back to float32, one small kernel each
// (~150 launches of 5-8 us on gpt2-124m) where one pass over all of them streams at bandwidth.
// The chunk table as in multi_tensor.cuh; each thread converts 4 neighbouring elements per turn so
// that a warp's loads cover whole cache lines with several loads in flight.
#include "multi_tensor.cuh"

extern "C" __global__ void cast_many(const u64* src, const int* src_codes, const u64* dst, const int* dst_codes,
                                     const i64* sizes, const int* chunk_tensor, const i64* chunk_start,
                                     int n_chunks) {
    for (int c = blockIdx.x; c < n_chunks; c += gridDim.x) {
        const int k = chunk_tensor[c];
        const i64 start = chunk_start[c], end = min(start + (i64)CHUNK, sizes[k]);
        const void* s = (const void*)src[k];
        void* d = (void*)dst[k];
        const int sc = src_codes[k], dc = dst_codes[k];
        for (i64 i = start + threadIdx.x; i < end; i += 4 * (i64)blockDim.x) {
            float v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const i64 j = i + (i64)u * blockDim.x;
                v[u] = j < end ? load_any(s, sc, j) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const i64 j = i + (i64)u * blockDim.x;
                if (j < end) store_any(d, dc, j, v[u]);
            }
        }
    }
}
