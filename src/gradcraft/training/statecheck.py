"""Deep checks of what a checkpoint holds: the nested fields of state.json (random generators,
schedule, sampler, optimizer groups) and the tensors of the weights and optimizer files.

runfiles.check_state calls check_state_fields (a failure there makes the checkpoint fall back to
the previous one); load_checkpoint and the weight loaders call check_optimizer_tensors and
check_weight_arrays. Each problem is one UserError line naming the file, the field (or tensor) and
what was expected: never a KeyError, an IndexError deep in NumPy, or a run that "finishes" with
NaN weights because a moment was NaN, negative or float16.
"""

import numpy as np

from gradcraft.errors import UserError
from gradcraft.validation import Value, check_fields

EDITED = "the file was damaged or edited by hand"
# No run has more steps than this (2**40: a trillion steps): a larger step or sampler epoch is damage.
MAX_STEP = 1 << 40
_step = Value(int, low=0, high=MAX_STEP)
_u64 = Value(int, low=0, high=2**64 - 1)

GROUP_FIELDS = {
    "lr": Value(float, low=0),
    "weight_decay": Value(float, low=0),
    "eps": Value(float, low=0, low_open=True),
    "betas": Value(list),
    "names": Value(list, optional=True),
}
_beta = Value(float, low=0, high=1, high_open=True)


def _bad(path: str, what: str):
    raise UserError(f"{path}: {what}; {EDITED}")


def check_bit_generator(state, path: str, field: str) -> None:
    """A NumPy bit generator's state (what `rng.bit_generator.state` gives): accepted by NumPy."""
    if not isinstance(state, dict) or not isinstance(state.get("bit_generator"), str):
        _bad(path, f"field {field!r} must be a NumPy random generator's state (an object naming its bit_generator)")
    kind = getattr(np.random, state["bit_generator"], None) if state["bit_generator"].isidentifier() else None
    if not (isinstance(kind, type) and issubclass(kind, np.random.BitGenerator)):
        _bad(path, f"field {field!r} names an unknown bit_generator {state['bit_generator']!r}")
    try:
        kind().state = state
    except (TypeError, ValueError, KeyError, OverflowError) as e:
        _bad(path, f"field {field!r} is not a valid {state['bit_generator']} state ({e})")


def check_rng(rng, path: str) -> None:
    """state.json's "rng" (gradcraft.get_rng_state): the host generator, the dropout seed and counters."""
    if "generator" not in rng:  # an older run's: the host generator's state alone
        check_bit_generator(rng, path, "rng")
        return
    check_fields(
        rng,
        f"{path} (rng)",
        {"generator": Value(dict), "dropout_seed": _u64, "dropout": Value(dict)},
        required=("generator", "dropout_seed", "dropout"),
        allow_unknown=False,
        hint=EDITED,
    )
    check_bit_generator(rng["generator"], path, "rng.generator")
    for device, counter in rng["dropout"].items():
        if not (isinstance(counter, list) and len(counter) == 2 and all(_u64.problem(v) is None for v in counter)):
            _bad(path, f"field 'rng.dropout.{device}' must be two integers in [0, 2**64), got {counter!r:.60}")


def check_schedule(schedule, path: str, step: int) -> None:
    """state.json's "schedule": a known kind whose fields build that schedule, finite at `step`."""
    from gradcraft.optim.lr_schedule import SCHEDULES, from_state_dict

    if schedule is None:
        return
    kind = schedule.get("kind")
    if kind not in SCHEDULES:
        _bad(path, f"field 'schedule.kind' must be one of {', '.join(SCHEDULES)}, got {kind!r:.40}")
    try:
        lr = from_state_dict(schedule)(step)
        ok = isinstance(lr, (int, float)) and np.isfinite(lr) and lr >= 0
    except (TypeError, ValueError, KeyError, ArithmeticError, AttributeError, RecursionError) as e:
        _bad(path, f"field 'schedule' is not a valid {kind} schedule ({type(e).__name__}: {e})")
    if not ok:
        _bad(path, f"field 'schedule' gives the learning rate {lr!r} at step {step}; expected a finite number >= 0")


def check_sampler(sampler, path: str) -> None:
    """state.json's "sampler": a known kind with its fields (the position against the data set is
    checked when the sampler loads it: data/sampler.py)."""
    from gradcraft.data.sampler import SAMPLERS

    if sampler.get("kind") not in SAMPLERS:
        _bad(path, f"field 'sampler.kind' must be one of {', '.join(SAMPLERS)}, got {sampler.get('kind')!r:.40}")
    if sampler["kind"] == "random":
        check_fields(sampler, f"{path} (sampler)", {"rng": Value(dict)}, required=("rng",), hint=EDITED)
        check_bit_generator(sampler["rng"], path, "sampler.rng")
    else:
        check_fields(
            sampler,
            f"{path} (sampler)",
            {"epoch": _step, "position": _step},
            required=("epoch", "position"),
            hint=EDITED,
        )


def check_groups(groups, path: str) -> None:
    if not groups:
        _bad(path, "field 'optimizer.param_groups' is empty; expected one object per parameter group")
    for i, group in enumerate(groups):
        where = f"{path} (optimizer param_groups[{i}])"
        check_fields(group, where, GROUP_FIELDS, required=("lr", "weight_decay", "eps", "betas"), hint=EDITED)
        betas = group["betas"]
        if len(betas) != 2 or any(_beta.problem(b) is not None for b in betas):
            raise UserError(f"{where}: field 'betas' must be two numbers in [0, 1), got {betas!r:.60}; {EDITED}")
        names = group.get("names")
        if names is not None and not all(isinstance(n, str) for n in names):
            raise UserError(f"{where}: field 'names' must be a list of parameter names; {EDITED}")


def check_state_fields(doc: dict, path: str) -> None:
    """The nested fields of a checkpoint's state.json (its top level is checked by runfiles.check_state)."""
    check_rng(doc["rng"], path)
    check_schedule(doc.get("schedule"), path, doc["step"])
    check_sampler(doc["sampler"], path)
    check_groups(doc["optimizer"]["param_groups"], path)
    for key, value in doc["optimizer"]["scalars"].items():
        index, _, name = key.partition(".")
        if not (index.isdigit() and name):
            _bad(path, f"optimizer scalar {key!r} is not '<parameter index>.<name>'")
        if name != "step" or _step.problem(value) is not None:
            _bad(path, f"optimizer scalar {key!r} must be a step count ('<index>.step', an integer in [0, 2**40])")


# ------------------------------------------------------------------ tensors

# AdamW's per-parameter state: moments in float32, the second ones never negative.
MOMENTS = ("exp_avg", "exp_avg_sq")
OPTIONAL_MOMENTS = ("max_exp_avg_sq",)  # amsgrad
NON_NEGATIVE = ("exp_avg_sq", "max_exp_avg_sq")
FLOAT_WEIGHTS = (np.float32, np.float16, np.float64)


def _nonfinite(array) -> bool:
    # chunked: no temporary as large as a big tensor
    flat = array.reshape(-1)
    step = 1 << 22
    return any(not np.isfinite(flat[i : i + step]).all() for i in range(0, flat.size, step))


def check_optimizer_tensors(tensors: dict, scalars: dict, shapes: list, path: str) -> None:
    """The optimizer file's tensors `{"<index>.<moment>": array}` against the parameters' `shapes`
    (in the optimizer's order) and the step scalars: every name known, both moments of a parameter
    (and its step) present together, float32, of the parameter's shape, finite, and the second
    moments >= 0. A UserError naming the tensor otherwise."""
    indices = set()
    for key, value in tensors.items():
        index, _, name = key.partition(".")
        if not (index.isdigit() and int(index) < len(shapes) and name in MOMENTS + OPTIONAL_MOMENTS):
            expected = f"'<index>.exp_avg' and '<index>.exp_avg_sq' for parameters 0..{len(shapes) - 1}"
            _bad(path, f"unknown tensor {key!r}; expected {expected}")
        i = int(index)
        indices.add(i)
        if value.dtype != np.float32:
            _bad(path, f"tensor {key!r} is {value.dtype}; optimizer moments must be float32")
        if tuple(value.shape) != tuple(shapes[i]):
            _bad(path, f"tensor {key!r} has shape {tuple(value.shape)}; parameter {i} has shape {tuple(shapes[i])}")
        if _nonfinite(value):
            _bad(path, f"tensor {key!r} holds NaN or infinite values; expected finite moments")
        if name in NON_NEGATIVE and value.size and float(value.min()) < 0:
            _bad(path, f"tensor {key!r} holds negative values; a second moment is >= 0")
    for i in sorted(indices | {int(k.partition(".")[0]) for k in scalars}):
        if i >= len(shapes):
            _bad(path, f"optimizer scalar '{i}.step' names parameter {i}; the model has {len(shapes)}")
        for name in MOMENTS:
            if f"{i}.{name}" not in tensors:
                _bad(path, f"tensor '{i}.{name}' is missing (parameter {i} has optimizer state)")
        if f"{i}.step" not in scalars:
            _bad(path, f"optimizer scalar '{i}.step' is missing (parameter {i} has moments)")


def check_weight_arrays(weights: dict, path: str) -> None:
    """Floating-point weights, all finite: an int8 or bool tensor (which a cast would turn into
    garbage or zeros) or a NaN is a UserError naming the tensor."""
    for name, value in weights.items():
        if value.dtype not in FLOAT_WEIGHTS and value.dtype.name != "bfloat16":
            raise UserError(
                f"{path}: tensor {name!r} is {value.dtype}; expected floating-point weights (float32, bfloat16 "
                "or float16); quantized or integer weights are not read"
            )
        if _nonfinite(value):
            raise UserError(f"{path}: tensor {name!r} holds NaN or infinite values; the weights are damaged")


def nonfinite_parameter(model) -> str | None:
    """The name of the model's first parameter holding NaN or infinity (None: all finite)."""
    for name, p in model.state_dict().items():
        if _nonfinite(np.asarray(p.numpy())):
            return name
    return None
