import sys

from bench.stress.runner import main

sys.exit(main())
