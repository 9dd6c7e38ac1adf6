"""``python -m gymlab``: the ``gymlab`` command."""

import sys

from gymlab.cli import main

sys.exit(main())
