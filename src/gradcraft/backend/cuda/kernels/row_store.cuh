// Rows of a product's accumulator written to global memory in 16-byte pieces: the flash-attention
// kernels' epilogues (O in the forward, dK and dV in the backward).
//
// In the mma / wgmma accumulator layout a thread holds, for each of its rows, two adjacent columns of
// every 8-column group: group j's columns 8 j + 2 tq and 8 j + 2 tq + 1, tq = lane % 4. Rounded to 16
// bits that is one 32-bit register a group, and the four threads of a quad (the lanes that share
// lane / 4) hold the group's eight columns between them. Written as they stand, each register is a
// 4-byte store, and one store instruction of a warp puts 16 bytes into each of 8 rows: 8 cache lines
// and 8 half-written sectors for 128 bytes, which the L1's store path takes a line at a time. Here the
// quad first transposes each 4 x 4 block of registers (groups 4 m .. 4 m + 3 of its four threads) with
// two rounds of shuffles, after which thread tq holds all of group 4 m + tq, 16 contiguous bytes: one
// store, a quarter of the instructions, each filling whole sectors.
//
// Needs u16 and u32 (common.cuh); tests/test_row_store.py runs it on the CPU with a warp of threads.
#pragma once

// One 16-byte store. On the GPU in PTX: written in C++, NVRTC may fold it and the fallback's four 4-byte
// stores of the same bytes into the fallback (as it did for a row's first piece); elsewhere (the test's
// CPU build) plain C++.
__device__ __forceinline__ void store_16b(u32* to, const u32* a) {
#if defined(__CUDA_ARCH__)
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(to), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])
                 : "memory");
#else
    *(uint4*)to = make_uint4(a[0], a[1], a[2], a[3]);
#endif
}

// row: this thread's row (16-bit elements, at least 4-byte aligned); pairs[j]: its register of group j.
// Every lane of the warp must call it, with the same GROUPS (shuffles); with store false (a row past the
// end) a thread only takes part in the shuffles. A row that is not 16-byte aligned gets the same bytes
// in 4-byte stores, and so do the last GROUPS % 4 groups (head dims 48 and 96: 6 and 12 groups, the
// latter whole). pairs is overwritten.
template <int GROUPS> __device__ __forceinline__ void store_row_16b(u16* row, u32* pairs, int tq, bool store) {
    const bool odd = tq & 1, high = tq & 2;
    const bool wide = (reinterpret_cast<unsigned long long>(row) & 15) == 0;  // (pieces start 16 k bytes in)
#pragma unroll
    for (int m = 0; m < GROUPS / 4; ++m) {
        u32* a = pairs + 4 * m;  // a[j]: this thread's columns of group 4 m + j
        // Thread s's slot j belongs in thread j's slot s: each round moves the registers whose slot
        // differs from the lane in one bit across that bit of the lane (to the partner's same-bit slot).
#pragma unroll
        for (int k = 0; k < 4; k += 2) {  // bit 0: slots 0 and 1, 2 and 3
            const u32 got = __shfl_xor_sync(0xffffffffu, odd ? a[k] : a[k + 1], 1);
            if (odd)
                a[k] = got;
            else
                a[k + 1] = got;
        }
#pragma unroll
        for (int k = 0; k < 2; ++k) {  // bit 1: slots 0 and 2, 1 and 3
            const u32 got = __shfl_xor_sync(0xffffffffu, high ? a[k] : a[k + 2], 2);
            if (high)
                a[k] = got;
            else
                a[k + 2] = got;
        }
        if (!store) continue;
        u32* to = (u32*)(row + 8 * (4 * m + tq));  // group 4 m + tq, whose columns 2 s and 2 s + 1 are a[s]
        if (wide) {
            store_16b(to, a);
        } else {
#pragma unroll
            for (int s = 0; s < 4; ++s) to[s] = a[s];
        }
    }
    if (store) {
#pragma unroll
        for (int j = GROUPS / 4 * 4; j < GROUPS; ++j) ((u32*)row)[4 * j + tq] = pairs[j];  // as they stand
    }
}
