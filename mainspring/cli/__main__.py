"""``python -m mainspring.cli``: the ``mainspring`` command."""

import sys

from ._main import main

sys.exit(main())
