"""`python -m gradcraft ...`: the same command line as the `gradcraft` script."""

import sys

from gradcraft.cli.main import main

sys.exit(main())
