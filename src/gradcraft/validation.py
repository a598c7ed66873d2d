"""Checking what comes from outside: command-line values and the JSON files gradcraft reads.

One vocabulary for both, so that a flag and the file field it ends up in are checked alike:

    steps = Value(int, low=1)                 # an integer >= 1
    steps("10") -> 10; steps("-1") -> argparse.ArgumentTypeError   (an argparse `type=`)
    steps.problem(-1) -> "must be an integer >= 1, got -1"          (a value read from a file)

    doc = read_json("runs/x/checkpoints/step_00000100/state.json")  # bounded size and depth
    check_fields(doc, "state.json", {"step": Value(int, low=0), ...}, required=("step",))

A bad file is one `UserError` line naming the file and the field ("runs/x/state.json: field 'step'
must be an integer >= 0, got -5; <what to do>"); callers that can fall back (an older checkpoint)
catch it and say so instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import types
import typing

from gradcraft.errors import UserError

# JSON files gradcraft writes are small (configs, state, manifests: kilobytes; tokenizers: tens of
# MB). Larger ones are refused before they are read into memory.
MAX_JSON_BYTES = 64 << 20
# The largest public tokenizer.json files are about 35 MB; parsing JSON takes ~20x its size in memory,
# so a larger file is refused before it is read.
MAX_TOKENIZER_BYTES = 64 << 20
_NAMES = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
    list: "a list",
    dict: "an object",
}


class Value:
    """The allowed values of one flag or field: a kind (int, float, str, bool, list, dict), optional
    bounds (`low`/`high`, inclusive unless `low_open`/`high_open`), optional `choices`, and whether
    null (None) is allowed. Floats must be finite (no NaN or infinity)."""

    def __init__(
        self, kind, low=None, high=None, low_open=False, high_open=False, choices=None, optional=False, not_between=None
    ):
        self.kind, self.low, self.high, self.choices, self.optional = kind, low, high, choices, optional
        self.low_open, self.high_open = low_open, high_open
        self.not_between = not_between  # (a, b): values strictly between a and b are refused
        self.__name__ = self.describe()  # argparse names the type in some of its messages

    def describe(self) -> str:
        text = _NAMES.get(self.kind, self.kind.__name__)
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        if self.low is not None and self.high is not None:
            text += f" in {'(' if self.low_open else '['}{self.low}, {self.high}{')' if self.high_open else ']'}"
        elif self.low is not None:
            text += f" {'>' if self.low_open else '>='} {self.low}"
        elif self.high is not None:
            text += f" {'<' if self.high_open else '<='} {self.high}"
        if self.not_between is not None:
            text += f", not between {self.not_between[0]} and {self.not_between[1]}"
        return text + (" or null" if self.optional else "")

    def or_null(self) -> Value:
        """The same check, with null (None) allowed too."""
        copy = Value(
            self.kind, self.low, self.high, self.low_open, self.high_open, self.choices, True, self.not_between
        )
        return copy

    def problem(self, value) -> str | None:
        """None when `value` is allowed, else "must be ..., got ..."."""
        if value is None and self.optional:
            return None
        ok = _is_kind(value, self.kind)
        if ok and self.kind in (int, float):
            ok = (
                math.isfinite(value)
                and (self.low is None or (value > self.low if self.low_open else value >= self.low))
                and (self.high is None or (value < self.high if self.high_open else value <= self.high))
            )
        if ok and self.not_between is not None:
            ok = not self.not_between[0] < value < self.not_between[1]
        if ok and self.choices is not None:
            ok = value in self.choices
        return None if ok else f"must be {self.describe()}, got {_short(value)}"

    def __call__(self, text: str):
        """Parse a command-line string (argparse `type=`): the value, or ArgumentTypeError."""
        if self.kind is int:
            try:
                value = int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}") from None
        elif self.kind is float:
            try:
                value = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}") from None
        else:
            value = text
        if self.problem(value) is not None:
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}")
        return value


# The ranges shared by flags and fields (cli/common.py re-exports them for the flags).
positive_int = Value(int, low=1)
non_negative_int = Value(int, low=0)
positive_float = Value(float, low=0, low_open=True)
non_negative_float = Value(float, low=0)
probability = Value(float, low=0, high=1)  # 0 and 1 included
fraction = Value(float, low=0, high=1, high_open=True)  # [0, 1): dropout, label smoothing, AdamW betas
seed = Value(int, low=0, high=2**63 - 1)
port = Value(int, low=1, high=65535)


def setting(
    default=dataclasses.MISSING,
    *,
    help: str,
    value: Value | None = None,
    aliases=(),
    flag: bool = True,
    resumable: bool = False,
    default_factory=dataclasses.MISSING,
):
    """A configuration dataclass field with its metadata, the one place its description lives:
    `help` (what it means; the `train` flag's help), `value` (its range, checked on a flag, in a
    --config file and in the run's saved files), `aliases` (other flag spellings), `flag` (False: no
    generated flag: it has its own, or none), `resumable` (a model field that may change on --resume)."""
    metadata = {"help": help, "value": value, "aliases": tuple(aliases), "flag": flag, "resumable": resumable}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def field_values(cls) -> dict:
    """name -> Value for each field of a configuration dataclass: the range of its `setting`
    metadata (null allowed where the annotation allows None), else the type of its annotation."""
    result = dataclass_fields(cls)
    for f in dataclasses.fields(cls):
        value = f.metadata.get("value")
        if value is not None:
            optional = f.name in result and result[f.name].optional
            result[f.name] = value.or_null() if optional and not value.optional else value
    return result


def _is_kind(value, kind) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _short(value) -> str:
    text = json.dumps(value) if isinstance(value, (dict, list, str, bool, type(None))) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_fields(doc, path: str, fields: dict, required=(), allow_unknown: bool = True, hint: str = "") -> dict:
    """Check that `doc` (parsed from the file `path`) is an object whose `fields` (name -> Value)
    have allowed values, with every `required` name present; unknown names are an error unless
    `allow_unknown`. Returns doc; a UserError names the file and the field otherwise."""

    def bad(what):
        raise UserError(f"{path}: {what}" + (f"; {hint}" if hint else ""))

    if not isinstance(doc, dict):
        bad(f"must hold a JSON object, got {_short(doc)}")
    missing = [name for name in required if name not in doc]
    if missing:
        bad(f"field {missing[0]!r} is missing")
    if not allow_unknown:
        unknown = sorted(set(doc) - set(fields))
        if unknown:
            bad(f"unknown field {unknown[0]!r}")
    for name, spec in fields.items():
        if name in doc:
            problem = spec.problem(doc[name])
            if problem is not None:
                bad(f"field {name!r} {problem}")
    return doc


def dataclass_fields(cls) -> dict:
    """name -> Value for each field of a dataclass, from its annotations (int, float, str, bool,
    dict, list, and `X | None`). Fields of other types are not checked."""
    hints = typing.get_type_hints(cls)
    result = {}
    for f in dataclasses.fields(cls):
        kind, optional = hints[f.name], False
        args = typing.get_args(kind)
        if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
            rest = [a for a in args if a is not type(None)]
            optional = len(rest) < len(args)
            kind = rest[0] if len(rest) == 1 else None
        kind = typing.get_origin(kind) or kind
        if kind in _NAMES:
            result[f.name] = Value(kind, optional=optional)
    return result


def parse_json(raw: bytes, path: str, hint: str = ""):
    """The JSON document in `raw` (the bytes of the file `path`), or a UserError naming the file:
    not UTF-8, not JSON, or nested too deeply for the parser."""
    tail = f"; {hint}" if hint else ""
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text{tail}") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}){tail}") from None
    except RecursionError:
        raise UserError(f"{path} is nested too deeply to be a file gradcraft wrote{tail}") from None


def read_bytes(path: str, max_bytes: int, what: str = "", hint: str = "", kind: str = "file") -> bytes:
    """The bytes of the file `path`, at most max_bytes (its size checked before reading). A missing
    file, a folder, an unreadable or too large one is one UserError: `what` prefixes the path
    ("settings file "), `hint` ends the line, a folder is "not a {kind}"."""
    tail = f"; {hint}" if hint else ""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise UserError(
                    f"{what}{path} is {size:,} bytes, more than the {max_bytes:,} a file of its kind can hold{tail}"
                )
            raw = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise UserError(f"{what}{path} does not exist{tail}") from None
    except IsADirectoryError:
        raise UserError(f"{what}{path} is a folder, not a {kind}{tail}") from None
    except OSError as e:
        raise UserError(f"cannot read {what}{path}: {e.strerror}{tail}") from None
    if len(raw) > max_bytes:  # (a file that grew, or a pipe: fstat told nothing)
        raise UserError(f"{what}{path} is more than the {max_bytes:,} bytes a file of its kind can hold{tail}")
    return raw


def read_json(path: str, max_bytes: int | None = None, hint: str = ""):
    """Read and parse a JSON file whose size is at most max_bytes (default MAX_JSON_BYTES), checked
    before reading."""
    raw = read_bytes(path, MAX_JSON_BYTES if max_bytes is None else max_bytes, hint=hint, kind="JSON file")
    return parse_json(raw, path, hint)
