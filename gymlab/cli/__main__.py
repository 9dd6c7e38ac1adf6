"""``python -m gymlab.cli``: the ``gymlab`` command."""

import sys

from gymlab.cli import main

sys.exit(main())
