import sys

from rmqpy.cli.main import main

sys.exit(main())
