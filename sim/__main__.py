"""``python -m sim``: the ``clustersim`` command."""

import sys

from sim.cli import main

sys.exit(main())
