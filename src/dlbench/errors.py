"""Errors a user can cause. The CLI turns them into one line on stderr and exit status 2."""


class UserError(Exception):
    """Bad input from the user: a flag, a suite file, a store, an import file."""
