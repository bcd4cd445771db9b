"""``fsdp-observe-trainer``: one rank of a training run (start it with ``torchrun --no-python``).

The console script runs ``entry`` (``python -m trainer`` runs it too, but a ``trainer.py`` in
the working directory would shadow the package there; the console script's path never does).

Exit status: 0 on success, 2 for a user mistake (one line naming the flag and the fix), 143
after SIGTERM and 130 after SIGINT (the ranks agree on a step; its checkpoint is saved when
``--checkpoint-dir`` is set), 1 for any other failure (one line; ``FSDP_OBSERVE_DEBUG=1`` adds
the traceback). The stop signals are recorded from the first line of ``main`` on
(``observe.stopping``), so one that arrives while torch loads is kept, not lost. The process ends
with ``os._exit`` after flushing, so no teardown race of the runtime's threads can turn a
finished run into a crash.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback

from observe import stopping
from observe.errors import UserError
from trainer.runspec.config import TrainConfig

#: 128 + SIGINT, as a shell reports it.
SIGINT_EXIT_STATUS = 128 + signal.SIGINT


def main(argv: list[str] | None = None) -> int:
    """Parse, validate, train; return the exit status."""
    stopping.install()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    rank = os.environ.get("RANK", "0")
    try:
        cfg = TrainConfig.from_argv(sys.argv[1:] if argv is None else argv, environ=os.environ)
        world = os.environ.get("WORLD_SIZE")
        local = os.environ.get("LOCAL_WORLD_SIZE", world)
        files = cfg.validate(int(world) if world else 1, int(local) if local else 1)
        from trainer.data import EmptyStream
        from trainer.train import run

        try:
            return run(cfg, files)
        except EmptyStream as exc:
            raise UserError("--data", str(exc), "add documents, or lower --val-fraction") from None
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:  # SIGINT before main's first line
        print(f"rank {rank}: interrupted", file=sys.stderr)
        return SIGINT_EXIT_STATUS
    except Exception as exc:  # noqa: BLE001 - one line for the user, traceback on request
        if os.environ.get("FSDP_OBSERVE_DEBUG"):
            traceback.print_exc()
        print(f"error: rank {rank}: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return 1


def entry() -> None:
    """The console script: ``main()``, flush, then ``os._exit`` with its status."""
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    entry()
