// Device helpers of the row kernels (softmax.cu, norms.cu): which row a thread works on in their
// register layouts, and sums over a row held in registers or re-read from memory.
//
// The register layouts keep a row in NV slots of VEC values a thread: one row per warp (WARP: 32
// lanes) or per block (blockDim.x threads); slot k of a thread holds the row's vector k * nthr + lane,
// where that exists (below nvec = row length / VEC).
#pragma once
#include "common.cuh"

template <bool WARP> struct RowThread {
    int lane, nthr;
    __device__ __forceinline__ RowThread()
        : lane(WARP ? (int)(threadIdx.x & 31) : (int)threadIdx.x), nthr(WARP ? 32 : (int)blockDim.x) {}
    // The row of this warp (warp layout: blockDim.x / 32 rows a block) or of this block.
    __device__ __forceinline__ i64 row() const {
        return WARP ? (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5) : (i64)blockIdx.x;
    }
    // The vector of the row that slot k holds.
    __device__ __forceinline__ int vec(int k) const { return k * nthr + lane; }
};

// Slots of the row starting at r: every vector of the row this thread holds.
template <bool WARP, int NV, typename T, int VEC>
__device__ __forceinline__ void load_row(Frag<T, VEC> (&f)[NV], const T* r, const RowThread<WARP>& t, int nvec) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int v = t.vec(k);
        if (v < nvec) f[k].load(r + (i64)v * VEC);
    }
}

// A row to sum over: sum(fn) is the sum of fn(value) over the row's values, reduced over the warp or
// block (every thread of the warp or block must call; scratch holds 32 values).
// RegsRow: the row held in slots (load_row).
template <bool WARP, int NV, typename T, int VEC, typename A> struct RegsRow {
    const Frag<T, VEC> (&f)[NV];
    const RowThread<WARP>& t;
    int nvec;
    A* scratch;
    template <typename Fn> __device__ __forceinline__ A sum(Fn fn) const {
        A s = 0;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            if (t.vec(k) < nvec) {
                A v[VEC];
                f[k].get(v);
#pragma unroll
                for (int i = 0; i < VEC; ++i) s += fn(v[i]);
            }
        }
        return row_sum<WARP>(s, scratch);
    }
};

// MemRow: a row of nvec vectors at r, re-read from memory, one row per block.
template <int VEC, typename T, typename A> struct MemRow {
    const T* r;
    int nvec;
    A* scratch;
    template <typename Fn> __device__ __forceinline__ A sum(Fn fn) const {
        A s = 0;
#pragma unroll 4
        for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
            A t[VEC];
            load_vals<VEC>(r + (i64)v * VEC, t);
#pragma unroll
            for (int i = 0; i < VEC; ++i) s += fn(t[i]);
        }
        return block_sum(s, scratch);
    }
};
