import sys

from benchmarks.sim.cli import main

sys.exit(main())
