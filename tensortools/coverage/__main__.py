"""``python -m tensortools.coverage``: see tensortools.coverage.cli."""

import sys

from tensortools.coverage.cli import main

sys.exit(main())
