"""``python -m coremetry``: the same as the ``coremetry`` command."""

import sys

from coremetry.cli import main

sys.exit(main())
