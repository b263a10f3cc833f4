"""`python -m rmqpy`: the `rmqpy` command."""

import sys

from rmqpy.cli.main import main

sys.exit(main())
