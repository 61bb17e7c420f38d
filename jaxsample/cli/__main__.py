"""``python -m jaxsample.cli``: the ``jaxsample`` command."""

import sys

from jaxsample.cli.parser import main

sys.exit(main())
