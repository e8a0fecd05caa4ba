"""`python -m loadgen`: see `loadgen.cli`."""

import sys

from loadgen.cli import main

sys.exit(main())
