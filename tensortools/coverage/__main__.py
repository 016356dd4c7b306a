"""``python -m tensortools.coverage``: see tensortools.coverage.cli."""

import os
import sys

from tensortools.coverage.cli import main

try:
    status = main()
    sys.stdout.flush()
except BrokenPipeError:
    # The reader stopped reading (`| head`): what it wanted was written. Further writes,
    # including the interpreter's own flush at exit, go nowhere.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    status = 0
sys.exit(status)
