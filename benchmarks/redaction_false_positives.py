"""How often the agent's redaction touches text that holds no secret, and how often its
random-token rule catches a random credential (``observe/agent/redact.py``, ``looks_random``).

One command; no processes are started and nothing leaves this machine. Corpora without secrets:

- the command lines of the redaction cases (``tests/cases/redaction.tsv`` and
  ``tests/agent/redaction-extra.tsv``) that must leave the node unchanged;
- every file path of this interpreter's standard library (``sysconfig`` ``stdlib``), as an argument;
- every standard-library module name, dotted (``email.mime.multipart``), from the same tree, plus
  ``sys.stdlib_module_names``.

Random credentials (the rule's true-positive rate), ``--samples`` of each kind: URL-safe base64
(``secrets.token_urlsafe``) of 15-48 bytes, base62 of 20-64 characters, AWS-secret-key shaped
(40 of ``[A-Za-z0-9/+]``), base36 (lower case and digits, 32 characters) and hexadecimal
(40 characters; left alone on purpose: the shape of hashes and ids).

For each corpus: items, items the random-token rule alone changes, items the whole redaction
changes, and the rates. Prints a table and writes JSON to ``--out``::

    python -m benchmarks.redaction_false_positives
    python -m benchmarks.redaction_false_positives --samples 200 --out /tmp/fp.json   # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import string
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from observe.agent.redact import (
    RANDOM_HIGH_ENTROPY_BITS,
    RANDOM_MIN_CHARS,
    RANDOM_MIN_CLASS_CHANGES,
    RANDOM_MIN_ENTROPY_BITS,
    _redact_random,
    safe_command,
)

REPO = Path(__file__).resolve().parents[1]
SHARED_CASES = REPO / "tests" / "cases" / "redaction.tsv"
EXTRA_CASES = REPO / "tests" / "agent" / "redaction-extra.tsv"


def case_lines() -> list[list[str]]:
    """Argument vectors of the cases whose output must equal their input."""
    out = []
    for path, split in ((SHARED_CASES, str.split), (EXTRA_CASES, shlex.split)):
        for line in path.read_text().splitlines()[1:]:
            if not line or line.startswith("#"):
                continue
            command, expected = line.split("\t")[:2]
            args = command.split(" ") if split is str.split else shlex.split(command)
            if expected == " ".join(args):
                out.append(args)
    return out


def stdlib_paths() -> list[str]:
    """Every file path under this interpreter's standard library (third-party packages left out)."""
    root = sysconfig.get_paths()["stdlib"]
    return sorted(
        os.path.join(d, f)
        for d, dirs, files in os.walk(root)
        if not dirs.__setitem__(slice(None), [x for x in dirs if x not in ("site-packages", "dist-packages")])
        for f in files
    )


def stdlib_modules(paths: list[str]) -> list[str]:
    """Dotted module names of the standard library's ``.py`` files, plus ``sys.stdlib_module_names``."""
    root = sysconfig.get_paths()["stdlib"]
    names = set(getattr(sys, "stdlib_module_names", ()))
    for path in paths:
        if path.endswith(".py"):
            rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
            names.add(rel.removesuffix(".__init__"))
    return sorted(names)


def random_rule_fires(text: str) -> bool:
    """Whether the random-token rule (AWS secret key shape or ``looks_random``) changes ``text``."""
    return _redact_random(text) != text


def as_cmdline(args: list[str]) -> bytes:
    return "\0".join(args).encode("utf-8", "surrogateescape") + b"\0"


def measure(name: str, items: list[list[str]]) -> dict:
    """Rates over ``items`` (argument vectors without secrets)."""
    random_hits = sum(any(random_rule_fires(a) for a in args) for args in items)
    changed = sum(safe_command(as_cmdline(args)) != " ".join(args) for args in items)
    n = max(1, len(items))
    return {
        "corpus": name,
        "items": len(items),
        "random_rule": random_hits,
        "random_rule_rate": random_hits / n,
        "changed": changed,
        "changed_rate": changed / n,
    }


def credentials(samples: int, rng: random.Random) -> dict[str, list[str]]:
    """``samples`` random credentials of each kind."""
    b62 = string.ascii_letters + string.digits
    b36 = string.ascii_lowercase + string.digits

    def pick(alphabet: str, n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    import base64

    return {
        "urlsafe base64, 15-48 bytes": [
            base64.urlsafe_b64encode(rng.randbytes(rng.randint(15, 48))).decode() for _ in range(samples)
        ],
        "base62, 20-64 chars": [pick(b62, rng.randint(20, 64)) for _ in range(samples)],
        "AWS secret key shape (40)": [pick(b62 + "/+", 40) for _ in range(samples)],
        "base36, 32 chars": [pick(b36, 32) for _ in range(samples)],
        "hex, 40 chars (left alone)": [pick("0123456789abcdef", 40) for _ in range(samples)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=2000, help="random credentials of each kind (default 2000)")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "fsdp-observe-bench" / "redaction_false_positives.json",
    )
    ns = ap.parse_args()
    started = time.perf_counter()
    paths = stdlib_paths()
    corpora = [
        measure("redaction cases without a secret", case_lines()),
        measure("stdlib file paths", [[p] for p in paths]),
        measure("stdlib module names", [[m] for m in stdlib_modules(paths)]),
    ]
    rng = random.Random(ns.seed)
    caught = []
    for kind, tokens in credentials(ns.samples, rng).items():
        hits = sum(safe_command(f"prog\0{t}\0".encode()) != f"prog {t}" for t in tokens)
        caught.append({"kind": kind, "samples": len(tokens), "caught": hits, "rate": hits / len(tokens)})
    print(
        f"random-token rule: >= {RANDOM_MIN_CHARS} chars, entropy >= {RANDOM_MIN_ENTROPY_BITS} bits/char, "
        f"class changes >= {RANDOM_MIN_CLASS_CHANGES}, or entropy >= {RANDOM_HIGH_ENTROPY_BITS}"
    )
    print(f"{'text without secrets':40} {'items':>7} {'random rule':>12} {'rate':>8} {'any rule':>9} {'rate':>8}")
    for c in corpora:
        print(
            f"{c['corpus']:40} {c['items']:>7,} {c['random_rule']:>12,} {c['random_rule_rate']:>8.3%} "
            f"{c['changed']:>9,} {c['changed_rate']:>8.3%}"
        )
    print(f"\n{'random credential':40} {'samples':>7} {'caught':>12} {'rate':>8}")
    for c in caught:
        print(f"{c['kind']:40} {c['samples']:>7,} {c['caught']:>12,} {c['rate']:>8.1%}")
    print(f"\n({time.perf_counter() - started:.1f} s)")
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    thresholds = {
        "min_chars": RANDOM_MIN_CHARS,
        "min_entropy_bits": RANDOM_MIN_ENTROPY_BITS,
        "min_class_changes": RANDOM_MIN_CLASS_CHANGES,
        "high_entropy_bits": RANDOM_HIGH_ENTROPY_BITS,
    }
    ns.out.write_text(
        json.dumps({"thresholds": thresholds, "false_positives": corpora, "true_positives": caught}, indent=1) + "\n"
    )
    print(f"JSON: {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
