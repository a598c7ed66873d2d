"""gradcraft's flash-attention launchers pointed at the lab's kernel files, so that every variant of
flash_variants.HOPPER_VARIANTS can be launched: flash_hopper_lab.cu and flash_hopper_bwd_lab.cu
include the package's kernel files and add the other variants, so the package's kernels come from
them too. Used by check_flash_hopper.py and bench/attention_kernels.py; needs CuPy and an H100/H200."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))  # (this checkout's gradcraft)
sys.path.insert(0, str(HERE))  # (flash_variants, beside this file)

FWD_FILE = str(HERE / "flash_hopper_lab.cu")
BWD_FILE = str(HERE / "flash_hopper_bwd_lab.cu")


def enable():
    """Point flash_attention.py's Hopper launches at the lab's files (compiler.hopper_module builds them for
    sm_90a, their includes taken from the package's kernels/), and return the attention module."""
    from gradcraft.backend.cuda import flash_attention

    flash_attention.HOPPER_FILE, flash_attention.HOPPER_BWD_FILE = FWD_FILE, BWD_FILE
    flash_attention._forward_plan.cache_clear()  # (plans prepared against the package's files)
    flash_attention._backward_plan.cache_clear()
    return flash_attention
