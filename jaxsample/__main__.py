"""``python -m jaxsample``: the same as the ``jaxsample`` command."""

from jaxsample.cli import command

command()
