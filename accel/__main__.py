"""``python -m accel`` is the ``accel`` command."""

import sys

from accel.cli import main

sys.exit(main())
