"""``python -m specgate ...``: the ``specgate`` command (``specgate.cli``) with this interpreter."""

import sys

from specgate.cli import main

sys.exit(main())
