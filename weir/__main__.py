"""``python -m weir`` is the ``weir`` command."""

import sys

from weir.cli.main import main

sys.exit(main())
