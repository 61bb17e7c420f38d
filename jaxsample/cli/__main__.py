"""``python -m jaxsample.cli``: the ``jaxsample`` command."""

from jaxsample.cli import command

command()
