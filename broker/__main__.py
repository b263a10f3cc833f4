"""`python -m rmqpy.broker [-c broker.conf] [--key value ...]`: the broker daemon."""

import sys

from rmqpy.broker.daemon import broker_main

sys.exit(broker_main())
