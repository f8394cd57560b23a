"""``python -m calibrate calibrate ...``: the ``clustersim`` command line with the
``calibrate`` subcommands registered directly, for a source tree that was never installed
(its entry point is then absent: the lent GPU's image, where the device script runs).
"""

from calibrate.cli import register
from sim.cli import main

if __name__ == "__main__":
    raise SystemExit(main(plugins=(register,)))
