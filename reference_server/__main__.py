"""`python -m reference_server`: the bundled OpenAI-compatible server (see docs/server.md)."""

import sys

from reference_server.api.cli import main

if __name__ == "__main__":
    sys.exit(main())
