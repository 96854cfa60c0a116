"""Errors a user can cause. The CLI turns them into one line on stderr and exit status 2."""


class UserError(Exception):
    """Bad input from the user: a flag, a suite file, a store, an import file."""


class BenchmarkFailed(Exception):
    """A benchmark that stopped partway for a reason it says in one line (its input turned out
    unusable): stored as an `error` result with that line and no traceback; the command exits 1."""
