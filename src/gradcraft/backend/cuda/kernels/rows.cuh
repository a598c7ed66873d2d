// Device helpers of the row kernels (softmax.cu, norms.cu): which row a thread works on in their
// register layouts, and sums over a row held in registers or re-read from memory.
//
// The register layouts keep a row of nvec vectors (row length / VEC) in NV slots of VEC values a
// thread: one row per warp (WARP: 32 lanes) or per block (blockDim.x threads); slot k of a thread holds
// the row's vector k * nthr + lane, where that exists (below nvec).
#pragma once
#include "common.cuh"

template <bool WARP> struct RowThread {
    int lane, nthr, nvec;
    i64 row;  // the (first) row of this warp (warp layout: blockDim.x / 32 rows a block) or of this block
    __device__ __forceinline__ explicit RowThread(int nvec_)
        : lane(WARP ? (int)(threadIdx.x & 31) : (int)threadIdx.x),
          nthr(WARP ? 32 : (int)blockDim.x),
          nvec(nvec_),
          row(WARP ? (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5) : (i64)blockIdx.x) {}
    // The vector of the row that slot k holds (where below nvec).
    __device__ __forceinline__ int vec(int k) const { return k * nthr + lane; }
};

// Slots of the row starting at r: every vector of the row this thread holds.
template <bool WARP, int NV, typename T, int VEC>
__device__ __forceinline__ void load_row(Frag<T, VEC> (&f)[NV], const T* r, const RowThread<WARP>& t) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int v = t.vec(k);
        if (v < t.nvec) f[k].load(r + (i64)v * VEC);
    }
}

// fn(k, v, a's values, b's values) for every slot k of this thread that holds a vector v of the row,
// over two rows held alike (x and g, y and g); A: the accumulator type the values are widened to.
template <typename A, bool WARP, int NV, typename T, int VEC, typename Fn>
__device__ __forceinline__ void for_each_slot(const Frag<T, VEC> (&a)[NV], const Frag<T, VEC> (&b)[NV],
                                              const RowThread<WARP>& t, Fn fn) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int v = t.vec(k);
        if (v < t.nvec) {
            A av[VEC], bv[VEC];
            a[k].get(av);
            b[k].get(bv);
            fn(k, v, av, bv);
        }
    }
}

// Writes the row at r: fn(k, v, values) fills the VEC values of vector v, held in slot k, for every
// slot of this thread that holds one.
template <typename A, int NV, int VEC, bool WARP, typename T, typename Fn>
__device__ __forceinline__ void store_row(T* r, const RowThread<WARP>& t, Fn fn) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int v = t.vec(k);
        if (v < t.nvec) {
            A vals[VEC];
            fn(k, v, vals);
            store_vals<VEC>(r + (i64)v * VEC, vals);
        }
    }
}

// A row to sum over: sum(fn) is the sum of fn(value) over the row's values, reduced over the warp or
// block (every thread of the warp or block must call; scratch holds 32 values).
// RegsRow: the row held in slots (load_row).
template <bool WARP, int NV, typename T, int VEC, typename A> struct RegsRow {
    const Frag<T, VEC> (&f)[NV];
    const RowThread<WARP>& t;
    A* scratch;
    template <typename Fn> __device__ __forceinline__ A sum(Fn fn) const {
        A s = 0;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            if (t.vec(k) < t.nvec) {
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
