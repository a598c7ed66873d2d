// A list of tensors processed in one launch: the caller cuts every tensor into chunks of CHUNK
// elements and passes a table of (tensor, first element) pairs; block b handles chunks b,
// b + gridDim.x, ... Tensor pointers, sizes and dtype codes come as device arrays.
#pragma once
#include "common.cuh"

#define CHUNK 65536

struct TensorList {
    const u64* ptrs;   // data pointers
    const i64* sizes;  // element counts
    const int* codes;  // 0 float32, 1 bfloat16, 2 float16
};

__device__ __forceinline__ float load_any(const void* p, int code, i64 i) {
    if (code == 1) return to_float(((const bf16*)p)[i]);
    if (code == 2) return to_float(((const f16*)p)[i]);
    return ((const float*)p)[i];
}

__device__ __forceinline__ void store_any(void* p, int code, i64 i, float v) {
    if (code == 1) ((bf16*)p)[i] = from_float<bf16>(v);
    else if (code == 2) ((f16*)p)[i] = from_float<f16>(v);
    else ((float*)p)[i] = v;
}
