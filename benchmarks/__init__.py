"""One module per performance claim: each prints a table and writes JSON (``--out``).

Run from the checkout's root as modules, ``python -m benchmarks.NAME`` (README, "Tests and
benchmarks"), so they import ``observe``, ``trainer``, ``tests.support`` and each other the same way
the tests do, with no path set-up of their own.
"""
