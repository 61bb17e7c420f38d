"""``python -m jaxsample``: the same as the ``jaxsample`` command."""

import sys

from jaxsample.cli import main

sys.exit(main())
