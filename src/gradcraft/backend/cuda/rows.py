"""How the row kernels (kernels/softmax.cu, kernels/norms.cu) take their rows: the warp, block and loop
layouts, their grids, and rows along another axis than the last."""

import cupy as cp

from gradcraft.backend.cuda import launch as L

# Values a thread keeps in registers in the warp and block layouts of the row kernels: the E constants
# of softmax.cu and norms.cu (keep them equal).
SOFTMAX_E = (32, 16)  # SOFTMAX_WARP_E, SOFTMAX_BLOCK_E
NORM_FWD_E = (32, 16)  # NORM_FWD_WARP_E, NORM_FWD_BLOCK_E
NORM_BWD_E = (32, 16)  # NORM_BWD_WARP_E, NORM_BWD_BLOCK_E
WARP_LAYOUT_THREADS = 256  # 8 rows a block (the kernels' __launch_bounds__)


def layout(width, dtype, arrays, warp_e, block_e, max_threads):
    """How a row kernel takes rows of `width` values: (layout, access, threads).

    layout: "warp" (a row per warp, in registers: width <= 32 * warp_e), "block" (a row per block of
    ceil(width / block_e) threads, rounded up to a warp, in registers: at most max_threads of them) or
    "loop" (a row per block of max_threads, re-read from memory); access: "v" (16-byte loads and
    stores: width a multiple of 16 / itemsize, every array 16-byte aligned) or "s" (one value each)."""
    access = L.access(dtype, *arrays, width=width)
    if width <= 32 * warp_e:
        return "warp", access, WARP_LAYOUT_THREADS
    threads = -(-width // block_e)
    threads = -(-threads // 32) * 32
    if threads <= max_threads:
        return "block", access, threads
    return "loop", access, max_threads


def grid(layout, rows):
    """Blocks for `rows` rows: 8 rows a block in the warp layout, else a block per row."""
    return -(-rows // (WARP_LAYOUT_THREADS // 32)) if layout == "warp" else rows


def run(file, kernel, rows, width, arrays, e, args, max_threads=1024):
    """Launch `kernel`_{layout}_{access}_{dtype} of `file` (one row per warp or per block, see layout)
    over `rows` rows of `width` values; arrays[0] gives the dtype, and every array the alignment."""
    dtype = arrays[0].dtype
    layout_, access, threads = layout(width, dtype, arrays, *e, max_threads)
    L.run(file, f"{kernel}_{layout_}_{access}_{L.suffix(dtype)}", grid(layout_, rows), threads, args)


def last_axis(fn, x, axis, *rest):
    """Run a row kernel over `axis` by moving it last (and back)."""
    if axis in (-1, x.ndim - 1):
        return fn(x, *rest)
    moved = [cp.moveaxis(a, axis, -1) for a in (x, *rest)]
    return cp.ascontiguousarray(cp.moveaxis(fn(*moved), -1, axis))  # (ndim >= 1 here)
