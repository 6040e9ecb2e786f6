"""The durable demo's worker process: ``python -m mainspring._demos --worker MODE ...``."""

import sys

from ._durable import worker_main

worker_main(sys.argv[1:])
