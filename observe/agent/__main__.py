"""``python -m observe.agent``: the same as ``fsdp-observe agent``."""

import sys

from observe.agent.cli import main

sys.exit(main(sys.argv[1:]))
