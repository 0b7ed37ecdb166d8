import sys

from benchmarks.latency.cli import main

sys.exit(main())
