// Hopper's warpgroup tensor-core instructions (wgmma, sm_90a) for the flash-attention kernels
// (flash_hopper.cu: forward, flash_hopper_bwd.cu: backward): the product wrappers, shared-memory matrix
// descriptors and the swizzled tiles they read.
//
// A block runs one or two warpgroups of four warps (128 threads each). wgmma multiplies a warpgroup's 64 x N
// tile (float32 accumulators: warp w of the group the 16 rows 16 w.., lane l holding rows l / 4 and
// l / 4 + 8, columns 8 j + 2 (l % 4) and the next) by operands in shared memory, or with A (64 x 16,
// 16-bit pairs) from registers in exactly the accumulator's layout, so a product's result rounded to
// 16 bits can feed the next product without leaving registers.
//
// Shared tiles are "swizzled 128-byte" tiles (wgmma's SWIZZLE_128B layout): a tile of R rows and D
// columns is D / 64 column blocks of R rows of 128 bytes, the 16-byte chunk c of row r stored at chunk
// c ^ (r % 8) (so the eight rows an 8 x 8 core matrix spans sit in distinct banks), 1024-byte aligned.
// Read as K-major (the k index along a row: Q and K for S = Q K^T), a descriptor's stride byte offset is
// the 1024 bytes between 8-row groups, and a k-step of 16 columns moves 32 bytes along the row (the
// next column block past 64). Read as MN-major (V for P V: keys down, head dims along a row), the
// stride byte offset is again the 1024 bytes between 8-row (8-key) groups, the leading byte offset
// the distance between 64-column blocks, and a k-step of 16 keys moves 2048 bytes.
//
// Everything here exists only when compiling for sm_90a (FH_ENABLED); for any other target the
// kernels that include it compile empty and backend/cuda/flash_attention.py does not launch them.
#pragma once
#include "common.cuh"
#include "flash.cuh"

#define FH_WARPGROUP 128  // threads

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FH_ENABLED 1

// ---------------------------------------------------------------- wgmma wrappers
// d (64 x N, float32; 16-row slices a warp) = (accumulate ? d : 0) + A (64 x 16) B (16 x N).
// _ss_: A and B from shared-memory descriptors, both K-major (at N = 64, TRANS = 1: both MN-major).
// _rs_: A from registers (four 32-bit registers of 16-bit pairs, mma.sync's A layout per warp), B MN-major (transposed).

template <int TRANS = 0>
__device__ __forceinline__ void wgmma_ss_m64n64k16_bf16(float* d, u64 da, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %35;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(accumulate), "n"(TRANS));
}

__device__ __forceinline__ void wgmma_rs_m64n64k16_bf16(float* d, const u32* a, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_ss_m64n128k16_bf16(float* d, u64 da, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_rs_m64n128k16_bf16(float* d, const u32* a, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

template <int TRANS = 0>
__device__ __forceinline__ void wgmma_ss_m64n64k16_f16(float* d, u64 da, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %35;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(accumulate), "n"(TRANS));
}

__device__ __forceinline__ void wgmma_rs_m64n64k16_f16(float* d, const u32* a, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_ss_m64n128k16_f16(float* d, u64 da, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_rs_m64n128k16_f16(float* d, const u32* a, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}


__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written by cp.async (the generic proxy) and next read by wgmma (the async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void st_shared_u32(u32 addr, u32 v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
// Keep the compiler from moving reads or writes of accumulator registers across an asynchronous wgmma.
template <int N> __device__ __forceinline__ void hold(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <bool BF16, int N> __device__ __forceinline__ void mma_ss(float* d, u64 da, u64 db, int accumulate) {
    if constexpr (BF16 && N == 64) wgmma_ss_m64n64k16_bf16(d, da, db, accumulate);
    else if constexpr (BF16 && N == 128) wgmma_ss_m64n128k16_bf16(d, da, db, accumulate);
    else if constexpr (N == 64) wgmma_ss_m64n64k16_f16(d, da, db, accumulate);
    else wgmma_ss_m64n128k16_f16(d, da, db, accumulate);
}
// d (64 x 64) (+)= A B with A and B both MN-major in shared memory (A's 64 rows along a tile's rows).
template <bool BF16> __device__ __forceinline__ void mma_ss_mn(float* d, u64 da, u64 db, int accumulate) {
    if constexpr (BF16) wgmma_ss_m64n64k16_bf16<1>(d, da, db, accumulate);
    else wgmma_ss_m64n64k16_f16<1>(d, da, db, accumulate);
}
template <bool BF16, int N> __device__ __forceinline__ void mma_rs(float* d, const u32* a, u64 db, int accumulate) {
    if constexpr (BF16 && N == 64) wgmma_rs_m64n64k16_bf16(d, a, db, accumulate);
    else if constexpr (BF16 && N == 128) wgmma_rs_m64n128k16_bf16(d, a, db, accumulate);
    else if constexpr (N == 64) wgmma_rs_m64n64k16_f16(d, a, db, accumulate);
    else wgmma_rs_m64n128k16_f16(d, a, db, accumulate);
}

// ---------------------------------------------------------------- mbarriers, register reallocation
// For the warp-specialised kernels (a producer warpgroup copying tiles, consumer warpgroups multiplying
// them): a stage's "full" barrier completes when the producer's copies into it have landed, its "empty"
// barrier when every consumer warp is done reading it. A barrier's k-th completion has phase parity k & 1.

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives once this thread's cp.async copies issued so far have landed (noinc: the barrier's count
// names the copying threads, each arriving this way once per phase).
__device__ __forceinline__ void mbar_arrive_copies(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Blocks until the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile("{\n.reg .pred done;\nWAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
// A warpgroup's registers a thread handed back (producer) or taken (consumers): the kernel must be
// capped at entry (__launch_bounds__(threads, 1)) for ptxas to honour these.
template <int N> __device__ __forceinline__ void regs_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void regs_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Barrier `id` (1..15; 0 is __syncthreads') of `threads` threads (a multiple of 32): the consumer
// warpgroups of a warp-specialised kernel meeting without the producer.
__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrives on barrier `id` of `threads` threads without waiting (the threads that sync there wait for it).
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---------------------------------------------------------------- bulk reductions into global memory
// dst[i] += src[i] in float32 over `bytes` (a multiple of 16; both 16-byte aligned) by the copy engine
// (cp.reduce.async.bulk): one thread issues it, no thread loads or adds. Shared writes by the generic
// proxy must be fenced (fence_proxy_async) and made visible to the issuing thread first.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, u32 src, u32 bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// At most N of this thread's committed bulk groups still reading their shared source (_read), or not
// yet complete.
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---------------------------------------------------------------- swizzled tiles and descriptors

// A shared-memory matrix descriptor in the 128-byte swizzle mode: start address, leading and stride
// byte offsets (each in 16-byte units), layout type 1 (SWIZZLE_128B) in bits 62-63.
__device__ __forceinline__ u64 desc128(u32 addr, u32 leading_bytes, u32 stride_bytes) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)(leading_bytes >> 4) << 16) | ((u64)(stride_bytes >> 4) << 32) |
           (1ull << 62);
}
// k-step kk (columns 16 kk..) of a K-major tile of R rows starting at `tile` (its first row here).
// The step's offset is added to the descriptor's address field (bits 0-13, 16-byte units: shared
// addresses stay below 256 KB, so it never carries out), so that with kk unrolled the tile's
// descriptor is built once and each step costs one addition, not the whole bit packing again.
template <int R> __device__ __forceinline__ u64 desc_k(u32 tile, int kk) {
    return desc128(tile, 16, 1024) + (u32)(((kk >> 2) * (R * 128) + (kk & 3) * 32) >> 4);
}
// k-step kk (rows 16 kk..) of an MN-major tile of R rows.
template <int R> __device__ __forceinline__ u64 desc_mn(u32 tile, int kk) {
    return desc128(tile, R * 128, 1024) + (u32)(kk * (2048 >> 4));
}

// Where a thread writes into row r of a swizzled tile at `tile` (1024-byte aligned): swizzled_row once,
// then for 16-byte chunk c (0..7) the 4-byte piece `tq` of it at swizzled_chunk(row, c). The chunk lies
// at c ^ (r % 8), and tile + 128 r has bits 4-6 clear, so its address is one XOR away from the row's
// (instead of an XOR and an addition for each chunk); row r + 8 is 1024 bytes further.
__device__ __forceinline__ u32 swizzled_row(u32 tile, int r, int tq) {
    return tile + r * 128 + ((r & 7) << 4) + tq * 4;
}
__device__ __forceinline__ u32 swizzled_chunk(u32 row, int c) { return row ^ (c << 4); }
// R rows of D 16-bit values, global rows row0.. (stride elements; rows past `rows` read as zeros), into
// the swizzled tile at shared address s, by the block's THREADS threads. A thread copies the same
// 16-byte chunk c of rows r0, r0 + STEP, ...: STEP being a multiple of 8, the chunk's swizzled place
// (c ^ (r % 8)) is the same in each, so the addresses are worked out once and then only advance (the
// copies are most of the kernels' integer work otherwise).
template <int D, int R, int THREADS>
__device__ __forceinline__ void load_swizzled(u32 s, const u16* g, i64 stride, int row0, int rows) {
    constexpr int CHUNKS = D / 8, STEP = THREADS / CHUNKS;
    static_assert(THREADS % CHUNKS == 0 && STEP % 8 == 0 && R % STEP == 0, "a thread's rows share a swizzle");
    const int c = threadIdx.x % CHUNKS, r0 = threadIdx.x / CHUNKS;
    const u32 dst = s + (c >> 3) * (R * 128) + r0 * 128 + (((c & 7) ^ (r0 & 7)) << 4);
    const u16* src = g + (i64)(row0 + r0) * stride + c * 8;
    const int left = rows - row0 - r0;  // rows of this thread's column still inside the tensor
    // Every tile but a tensor's last: no row to test, no address to select (about twenty fewer
    // instructions a call, in loops that are short of issue slots).
    if (left >= R) {
#pragma unroll
        for (int j = 0; j < R / STEP; ++j) cp_async16(dst + j * STEP * 128, src + j * STEP * stride, 16);
        return;
    }
#pragma unroll
    for (int j = 0; j < R / STEP; ++j) {
        const bool ok = j * STEP < left;
        cp_async16(dst + j * STEP * 128, ok ? src + j * STEP * stride : g, ok ? 16 : 0);
    }
}
// BN keys from key n0 (and their values) of the rows kb and vb (S of them) into the shared tiles sk and
// sv: the query-tile kernels' staging of one key/value tile.
template <int D, int BN, int THREADS>
__device__ __forceinline__ void load_kv_tile(u32 sk, u32 sv, const u16* kb, i64 kst, const u16* vb, i64 vst, int n0,
                                             int S) {
    load_swizzled<D, BN, THREADS>(sk, kb, kst, n0, S);
    load_swizzled<D, BN, THREADS>(sv, vb, vst, n0, S);
}
#endif  // FH_ENABLED
