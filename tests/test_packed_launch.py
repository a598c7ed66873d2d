"""backend/cuda/packed.py's argument layouts, and the attention launchers' argument types against the
kernels' own parameter lists (read from the .cu files): checked without a GPU, since a wrong type in a
packed buffer shifts every argument after it. The launches themselves run in tests/test_cuda_attention.py."""

import ast
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from gradcraft.backend.cuda import packed

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "src" / "gradcraft" / "backend" / "cuda" / "kernels"


def test_layout_aligns_each_value_to_its_size():
    layout = packed.layout("PiqfIi")
    buffer = bytearray(layout.size)
    layout.pack_into(buffer, 0, 0x1122334455667788, -5, 2**40 + 3, 0.5, 2**32 - 1, 7)
    # pointer 0..8, int32 8..12, (pad) int64 16..24, float 24..28, uint32 28..32, int32 32..36
    assert layout.size == 36
    assert struct.unpack_from("<Q", buffer, 0)[0] == 0x1122334455667788
    assert struct.unpack_from("<i", buffer, 8)[0] == -5
    assert struct.unpack_from("<q", buffer, 16)[0] == 2**40 + 3
    assert struct.unpack_from("<f", buffer, 24)[0] == 0.5
    assert struct.unpack_from("<I", buffer, 28)[0] == 2**32 - 1
    assert struct.unpack_from("<i", buffer, 32)[0] == 7


def test_layout_takes_numpy_scalars():
    import numpy as np

    layout = packed.layout("qif")
    buffer = bytearray(layout.size)
    layout.pack_into(buffer, 0, np.int64(-3), np.int32(4), np.float32(1.5))
    assert struct.unpack_from("<qif", buffer, 0) == (-3, 4, 1.5)


def test_layout_refuses_unknown_types_and_oversized_buffers():
    with pytest.raises(ValueError, match="no kernel argument type 'd'"):
        packed.layout("Pd")
    with pytest.raises(ValueError, match="more than a kernel takes"):
        packed.layout("q" * (packed.BUFFER_BYTES // 8 + 1))


# ------------------------------------------------------------ the attention launchers' types

_C_TYPE = [  # (a parameter's declaration, its format character)
    (re.compile(r"\*"), "P"),
    (re.compile(r"^(const\s+)?i64\b"), "q"),
    (re.compile(r"^(const\s+)?u32\b"), "I"),
    (re.compile(r"^(const\s+)?int\b"), "i"),
    (re.compile(r"^(const\s+)?float\b"), "f"),
]


def _attention_types() -> dict:
    """The module-level *_TYPES strings of backend/cuda/flash_attention.py, evaluated from its source (the
    module itself imports CuPy)."""
    tree = ast.parse((ROOT / "src" / "gradcraft" / "backend" / "cuda" / "flash_attention.py").read_text())
    names: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.endswith("_TYPES") or name in ("_SHAPE", "_DROP"):
                names[name] = eval(compile(ast.Expression(node.value), name, "eval"), {}, dict(names))
    return names


def _source(name: str) -> str:
    """A kernel file with its line continuations joined and comments dropped; "a.cu+dev/cuda/b.cu": a
    package file followed by a lab file that includes it (a path with a slash is the checkout's)."""
    text = "\n".join((ROOT / n if "/" in n else KERNELS / n).read_text() for n in name.split("+"))
    text = text.replace("\\\n", " ")
    return re.sub(r"//[^\n]*", "", text)


def _parameters(text: str, kernel: str) -> str:
    """The parameter list of the kernel whose name starts with `kernel` (its macro spelling),
    macros among the parameters expanded."""
    start = text.index(kernel)
    open_at = text.index("(", start)
    depth, i = 0, open_at
    while True:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            break
        i += 1
    params = text[open_at + 1 : i]
    for macro in re.findall(r"\b[A-Z][A-Z_]+\b", params):
        body = re.search(rf"#define {macro}\b(.*)", text)
        assert body, f"no #define of {macro}"
        params = params.replace(macro, body.group(1).strip())
    return params


def _types(params: str) -> str:
    out = []
    for declaration in (p.strip() for p in params.split(",")):
        declaration = declaration.replace("__restrict__", "").strip()
        out.append(next(c for pattern, c in _C_TYPE if pattern.search(declaration)))
    return "".join(out)


@pytest.mark.parametrize(
    "file,kernel,types",
    [
        ("flash_hopper.cu", "hopper_fwd_##NAME##_d##D##_n##BN##_w##WGS(", "FWD_TYPES"),
        ("flash_hopper.cu", "##TAIL(FH_PARAMS, int heads", "PERSISTENT_FWD_TYPES"),
        ("flash_hopper_bwd.cu", "hopper_bwd_dq_##NAME##_d##D##_n##BN", "DQ_TYPES"),
        ("flash_hopper_bwd.cu", "hopper_bwd_dkdv_##NAME", "DKDV_TYPES"),
        ("flash_hopper_bwd.cu+dev/cuda/flash_hopper_bwd_lab.cu", "hopper_bwd_##KIND##_##NAME", "FUSED_TYPES"),
        ("flash_hopper_bwd.cu", "hopper_bwd_fused_##NAME##_d##D##_m##BM##_c2_ws", "WS_BWD_TYPES"),
        ("flash_hopper_bwd.cu", "hopper_bwd_dq_convert_##NAME", "CONVERT_TYPES"),
        ("flash_attention.cu", "flash_bwd_dot_bf16(", "DOT_TYPES"),
        ("flash_attention.cu", "flash_fwd_##TAG", "FWD_TYPES+_DROP"),
        ("flash_attention.cu", "flash_bwd_dq_##TAG", "DQ_TYPES+_DROP"),
        ("flash_attention.cu", "flash_bwd_dkdv_##TAG", "DKDV_TYPES+_DROP"),
    ],
)
def test_attention_argument_types_match_the_kernels(file, kernel, types):
    names = _attention_types()
    expected = "".join(names[part] for part in types.split("+"))
    assert _types(_parameters(_source(file), kernel)) == expected


# ------------------------------------------------------------ scripts/record_attention_launches.py


def _record(*args):
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "record_attention_launches.py"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_launch_recordings_agree_for_one_tree_and_tell_a_planted_change(tmp_path):
    """Two recordings of this tree agree launch for launch; a copy of it with one scalar argument
    changed (the dQ convert's scale) is told apart, and only in that kernel's launches."""
    ours, again = tmp_path / "ours.json", tmp_path / "again.json"
    assert _record("record", ours, "--quick").returncode == 0
    assert _record("record", again, "--quick").returncode == 0
    same = _record("compare", ours, again)
    assert same.returncode == 0 and " 0 differ" in same.stdout and "0 agree but for" in same.stdout
    planted = tmp_path / "planted"
    shutil.copytree(
        ROOT / "src" / "gradcraft", planted / "src" / "gradcraft", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(ROOT / "dev" / "cuda", planted / "dev" / "cuda", ignore=shutil.ignore_patterns("__pycache__"))
    source = planted / "src" / "gradcraft" / "backend" / "cuda" / "flash_attention.py"
    text = source.read_text()
    assert text.count("(*dqs, H, T, scale)") == 1
    source.write_text(text.replace("(*dqs, H, T, scale)", "(*dqs, H, T, scale * 2)"))
    mutant = tmp_path / "mutant.json"
    assert _record("record", mutant, "--quick", "--tree", planted).returncode == 0
    told = _record("compare", ours, mutant)
    assert told.returncode == 1 and " 0 differ" not in told.stdout
    differing = [line for line in told.stdout.splitlines() if line.startswith("  ")]
    assert differing and all("hopper_bwd_dq_convert" in line for line in differing)


def test_launch_recorder_refuses_bad_input_in_one_line(tmp_path):
    missing = _record("compare", tmp_path / "none.json", tmp_path / "none.json")
    assert missing.returncode == 2 and missing.stderr.startswith("error: cannot read the recording")
    assert len(missing.stderr.strip().splitlines()) == 1
    not_a_tree = _record("record", tmp_path / "out.json", "--tree", tmp_path)
    assert not_a_tree.returncode == 2 and "has no src/gradcraft/backend/cuda/packed.py" in not_a_tree.stderr
    assert not (tmp_path / "out.json").exists()
