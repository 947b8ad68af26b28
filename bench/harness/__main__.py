import sys

from bench.harness.cli import main

sys.exit(main())
