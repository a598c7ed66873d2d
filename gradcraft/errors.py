"""Errors a user can cause.

A `UserError` carries one line that says what was wrong and what to do. The
command-line front ends print it as `error: <line>` and exit with status 2,
never with a traceback.
"""


class UserError(Exception):
    """Bad input from the user: a missing file, a wrong flag, a mismatched shape."""
