"""`gradcraft.Generator`: a random-number generator object, as `torch.Generator`.

gradcraft's random ops are lazy and counter-based: each op takes one 63-bit seed from a generator
when it is built and stores it in its node, and its kernel (backend/cpu/random.py, the CUDA
kernels) turns (seed, element index) into numbers. A Generator is therefore a source of such seeds:
a NumPy PCG64 stream on the host, seeded by `manual_seed`. The global generator
(`gradcraft.default_generator`, seeded by `gradcraft.manual_seed`) is one of them; an op given
`generator=g` takes its seed from g instead, so its numbers depend on g's seed and on how many
draws g gave before, and on nothing else. The numbers are not PyTorch's (its generator is another
algorithm), but the same seed gives the same numbers on every run and on every device.
"""

from __future__ import annotations

import json

import numpy as np

from gradcraft.device import canonical
from gradcraft.errors import RuntimeError_, TypeError_
from gradcraft.tensor import Tensor

_SEED_LIMIT = 2**63 - 1

# Seeds drawn from any generator since the process started: a compiled step function asks whether it
# drew any (gradcraft/compiled_step.py), since a replay would reuse the recorded ones.
draws = {"count": 0}


class Generator:
    """A seeded source of random numbers for the random ops' `generator=` argument.

    >>> g = Generator().manual_seed(0)
    >>> g.initial_seed()
    0
    """

    def __init__(self, device=None):
        self.device = canonical(device)
        self.manual_seed(int(np.random.default_rng().integers(0, _SEED_LIMIT)))

    def manual_seed(self, seed) -> Generator:
        seed = int(seed)
        if not -(2**63) <= seed < 2**64:
            raise RuntimeError_(f"Overflow when unpacking long long: seed {seed} is out of range [-2**63, 2**64)")
        self._initial_seed = seed & (2**64 - 1)
        self._source = np.random.default_rng(self._initial_seed)
        return self

    def seed(self) -> int:
        """Seed from the operating system's entropy; returns the new seed, as torch."""
        seed = int(np.random.default_rng().integers(0, _SEED_LIMIT))
        self.manual_seed(seed)
        return seed

    def initial_seed(self) -> int:
        return self._initial_seed

    def get_state(self):
        """The generator's state as a uint8 tensor (what `set_state` takes)."""
        text = json.dumps({"seed": self._initial_seed, "state": self._source.bit_generator.state})
        return Tensor(np.frombuffer(text.encode(), dtype=np.uint8).copy())

    def set_state(self, new_state) -> Generator:
        try:
            raw = np.asarray(new_state.numpy() if hasattr(new_state, "numpy") else new_state, dtype=np.uint8)
            saved = json.loads(raw.tobytes().decode())
            source = np.random.default_rng()
            source.bit_generator.state = saved["state"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
            raise RuntimeError_("Invalid generator state: pass a tensor returned by Generator.get_state()") from error
        self._initial_seed, self._source = int(saved["seed"]), source
        return self

    def next_seed(self) -> int:
        """One seed for one random op (the op's numbers follow from it)."""
        draws["count"] += 1
        return int(self._source.integers(0, _SEED_LIMIT))

    @property
    def host_state(self) -> dict:
        """The host stream's state (JSON-serializable), for `gradcraft.get_rng_state`."""
        return self._source.bit_generator.state

    @host_state.setter
    def host_state(self, state: dict) -> None:
        self._source.bit_generator.state = state

    def numpy_rng(self) -> np.random.Generator:
        """A NumPy generator drawn from this one, for the random ops that run on the host."""
        draws["count"] += 1
        return np.random.default_rng(self.next_seed())

    def __repr__(self) -> str:
        return f"<gradcraft.Generator object at {id(self):#x}>"


default_generator = Generator()  # gradcraft.default_generator: seeded by gradcraft.manual_seed


def resolve(generator) -> Generator:
    """`generator` itself, or the global generator when it is None; anything else is a TypeError."""
    if generator is None:
        return default_generator
    if not isinstance(generator, Generator):
        raise TypeError_(f"generator must be a gradcraft.Generator, not {type(generator).__name__}")
    return generator
