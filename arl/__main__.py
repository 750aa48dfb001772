"""`python -m arl ...` runs the `arl` command."""

import sys

from arl.cli.main import main

sys.exit(main())
