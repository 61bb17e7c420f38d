"""The errors of bad input that every layer raises: a config field that is
wrong (`ConfigError`, `ConfigTypeError`) and a bad command line
(`UsageError`).

A config error names its field as data (``error.field``), not only as the
first word of its message: the command line writes the field's flag
(``--env``, ``--total-steps``) or config-file key in its place
(`ConfigError.named`). Both stay what callers caught before: a
`ConfigError` is a ``ValueError``, a `ConfigTypeError` a ``TypeError`` (and
a `ConfigError`).

Imports nothing: the configs, the registry and the command line's parser
raise these before anything heavy is loaded.
"""

from __future__ import annotations

__all__ = ["ConfigError", "ConfigTypeError", "UsageError"]


class ConfigError(ValueError):
    """A bad value of the field ``field`` (of a config, or an argument of a
    factory): ``str(error)`` is ``"<field> <problem>"`` (``"lr must be in
    (0.0, inf], got 0"``).

    Attributes:
      field: the field's name (``"lr"``, ``"env_name"``).
      problem: what is wrong with it, the message after the name.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem

    def named(self, name: str) -> str:
        """The message with ``name`` in place of the field's
        (``named("--lr")``: ``"--lr must be in (0.0, inf], got 0"``)."""
        return f"{name} {self.problem}"

    def __reduce__(self) -> tuple:  # pickles (a worker's error) with both arguments
        return type(self), (self.field, self.problem)


class ConfigTypeError(ConfigError, TypeError):
    """A value of the wrong type for the field ``field`` (``"num_envs must be
    an int, got 8.0"``): a ``TypeError``, and a `ConfigError`."""


class UsageError(SystemExit):
    """Bad command-line input: `jaxsample.cli.main` prints it as one line
    and the process exits with status 2 (as argparse does for its own
    errors). The benchmark runners (``python -m jaxsample.bench.driver``)
    raise it too."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message
