"""Errors a user can cause.

A `UserError` carries one line that says what was wrong and what to do. The
command-line front ends print it as `error: <line>` and exit with status 2,
never with a traceback.

Where Python itself expects a built-in exception type (an index past the end ends a `for` loop only
as an IndexError; `except TypeError` around a call with wrong arguments), the error is also of that
type: `IndexError_` is both a UserError and an IndexError, and so on. PyTorch raises RuntimeError for
a refused in-place write or a second backward; `RuntimeError_` keeps that contract.
"""


class UserError(Exception):
    """Bad input from the user: a missing file, a wrong flag, a mismatched shape."""


class IndexError_(UserError, IndexError):
    """An index out of range (ends iteration over a tensor, as Python's protocol needs)."""


class TypeError_(UserError, TypeError):
    """An argument of the wrong type."""


class ValueError_(UserError, ValueError):
    """An argument of the right type with a value that cannot be used."""


class RuntimeError_(UserError, RuntimeError):
    """What PyTorch refuses at run time: an in-place write to a leaf that requires grad, a second
    backward through a freed graph, a tensor modified after it was saved for backward."""


class ConfigError(UserError):
    """A bad value of a configuration field (ModelConfig, TrainConfig). The message names the fields
    as a Python user writes them (`n_heads must be positive`); `fields` lists them, so that a front
    end can say them its own way: `spelled(lambda name: "--" + name)` is the command line's."""

    def __init__(self, message: str, fields=()):
        super().__init__(message)
        self.fields = tuple(fields)

    def spelled(self, spell) -> str:
        """The message with each of `fields` (whole words) written as spell(field)."""
        import re

        text = str(self)
        for name in sorted(self.fields, key=len, reverse=True):
            text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", lambda _m, n=name: spell(n), text)
        return text


class LinAlgError(RuntimeError_):
    """torch.linalg.LinAlgError: a singular matrix to invert or solve with, a matrix that is not
    positive-definite to factor (a RuntimeError, as in PyTorch)."""
