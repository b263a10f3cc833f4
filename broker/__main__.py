"""`python -m broker [-c broker.conf] [--key value ...]`: the broker daemon."""

import sys

from broker.daemon import broker_main

sys.exit(broker_main())
