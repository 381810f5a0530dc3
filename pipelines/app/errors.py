"""The command line's one error type."""

from __future__ import annotations


class UsageError(Exception):
    """A user mistake (bad argument, missing input, invalid config): reported as one sentence
    on stderr, exit code 2, before any Spark work starts."""
