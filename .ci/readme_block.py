"""Print the N-th fenced sh block under the README's "Quick start" heading (N = 1 or 2).

CI runs block 2 (set-up + tests) through this, so CI and the README cannot drift apart.
"""

import re
import sys
from pathlib import Path

n = int(sys.argv[1])
lines = Path(__file__).resolve().parents[1].joinpath("README.md").read_text().splitlines()
start = next(i for i, line in enumerate(lines) if re.match(r"^#+\s*quick\s*-?start", line, re.I))
blocks, current = [], None
for line in lines[start + 1:]:
    if current is None and re.match(r"^#{1,2}\s", line):
        break
    if current is None and re.match(r"^```\s*(sh|bash)\s*$", line):
        current = []
    elif current is not None and line.startswith("```"):
        blocks.append("\n".join(current))
        current = None
    elif current is not None:
        current.append(line)
print(blocks[n - 1])
