"""``python -m observe.cli``: the same as the ``fsdp-observe`` command."""

import sys

from observe.cli import main

sys.exit(main())
