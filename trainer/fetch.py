"""``fsdp-observe-fetch-model``: download a model from the Hugging Face Hub into a folder, then run a command.

A PyTorchJob rendered with ``MODEL=org/name`` (``fsdp-observe job render``) starts each pod with it,
before torchrun, so every pod holds the weights before any rank loads them::

    fsdp-observe-fetch-model meta-llama/Llama-2-7b-hf --revision main \\
        --local-dir /models/meta-llama--Llama-2-7b-hf -- fsdp-observe-torchrun ... --model /models/...

It downloads with ``huggingface_hub.snapshot_download`` (the token from ``HF_TOKEN``, which the job
takes from its Secret; ``HF_ENDPOINT`` for a mirror) only what the trainer reads
(``trainer.runspec.weights.WEIGHT_PATTERNS``), skips files already complete (a restarted pod, a
shared volume another pod filled), checks the folder as the trainer will (``check_model_dir``) and
then *replaces itself* with the command after ``--`` (``execvp``), so torchrun is the container's
main process and gets the kubelet's SIGTERM.

Exit status: the command's; 2 for a mistake the job's settings can fix (a gated or unknown
repository, a bad revision, no safetensors: one ``error:`` line naming the setting), 1 when the
download failed otherwise (the hub unreachable: the line names ``hf download`` for a volume filled
beforehand), 143 / 130 on SIGTERM / SIGINT during the download (the next start resumes it).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from observe import stopping
from observe.errors import UserError
from observe.flags import OneLineParser
from trainer.runspec.weights import WEIGHT_PATTERNS, check_model_dir, download_hint, has_tokenizer, is_hub_id

PROG = "fsdp-observe-fetch-model"


def build_parser() -> OneLineParser:
    """The command line: the repository, where to put it, and the command to run next."""
    ap = OneLineParser(
        prog=PROG,
        usage=f"{PROG} ORG/NAME --local-dir DIR [--revision REV] [-- COMMAND ...]",
        description="Download a model's config, tokenizer and safetensors weights from the Hugging "
        "Face Hub into a folder (files already there are kept), then run COMMAND in this process's "
        "place.",
    )
    ap.add_argument("repo", metavar="ORG/NAME", help="the model repository, e.g. meta-llama/Llama-2-7b-hf")
    ap.add_argument("--revision", default="main", help="branch, tag or commit (default main)")
    ap.add_argument("--local-dir", required=True, metavar="DIR", help="the folder the files go to")
    ap.add_argument(
        "--require-tokenizer",
        action="store_true",
        help="refuse a repository without tokenizer files (the job passes the folder as --tokenizer)",
    )
    return ap


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(own flags, command)``: what comes after the first ``--`` is the command to run next."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def fetch(repo: str, revision: str, local_dir: Path, require_tokenizer: bool = False) -> Path:
    """Download ``repo`` at ``revision`` into ``local_dir`` (what the trainer reads) and check it.

    Raises:
        UserError: a mistake in the job's settings (field ``MODEL`` or ``MODEL_REVISION``).
        DownloadFailed: anything else stopped the download.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    token = os.environ.get("HF_TOKEN")
    secret = "the job's HF_TOKEN_SECRET" if token else "no token (HF_TOKEN is not set: HF_TOKEN_SECRET)"
    try:
        snapshot_download(
            repo, revision=revision, local_dir=str(local_dir), allow_patterns=list(WEIGHT_PATTERNS), token=token or None
        )
    except GatedRepoError:
        raise UserError(
            "MODEL",
            f"{repo} is gated and {secret} does not give access to it",
            "accept the model's licence on huggingface.co with the token's account, and store that "
            "token in the Secret HF_TOKEN_SECRET names (kubectl create secret generic hf-token "
            "--from-literal=token=...)",
        ) from None
    except RevisionNotFoundError:
        raise UserError(
            "MODEL_REVISION",
            f"{repo} has no revision {revision!r}",
            "give a branch, tag or commit the repository has (default main)",
        ) from None
    except RepositoryNotFoundError:
        raise UserError(
            "MODEL",
            f"{repo} is not on the hub, or is private and {secret} cannot read it",
            "check the id (ORG/NAME) on huggingface.co; for a private model set HF_TOKEN_SECRET",
        ) from None
    except Exception as exc:  # noqa: BLE001 - the hub's client raises many kinds (network, HTTP, disk): one line
        raise DownloadFailed(repo, local_dir, exc) from None
    try:
        check_model_dir(local_dir, field="MODEL")
    except UserError as exc:
        raise UserError(
            "MODEL",
            f"{repo}: {exc.problem}",
            "choose a repository with a config.json and "
            "safetensors weights (the trainer loads nothing else), or convert one and mount it with "
            "MODEL_PVC",
        ) from None
    if require_tokenizer and not has_tokenizer(local_dir):
        raise UserError(
            "MODEL",
            f"{repo} has no tokenizer files (tokenizer.json, tokenizer.model)",
            "give a repository with its tokenizer, or pass --tokenizer PATH in TRAINER_ARGS",
        )
    return local_dir


class DownloadFailed(Exception):
    """The download stopped for a reason the settings cannot fix (the network, the hub, the disk)."""

    def __init__(self, repo: str, local_dir: Path, cause: BaseException) -> None:
        reason = f"{type(cause).__name__}: {cause}".splitlines()[0][:300]
        super().__init__(
            f"cannot download {repo} into {local_dir} ({reason}); let the pods reach huggingface.co "
            f"(or HF_ENDPOINT), or fill a volume beforehand ({download_hint(repo, 'DIR')}) and mount it "
            "with MODEL_PVC"
        )


def main(argv: list[str] | None = None) -> int:
    """Download, then ``execvp`` the command; the exit status when there is no command or it failed."""
    stop = stopping.install()
    own, command = split_command(sys.argv[1:] if argv is None else argv)
    try:
        ns = build_parser().parse_args(own)
        if not is_hub_id(ns.repo):
            raise UserError("MODEL", f"{ns.repo!r} is not a hub id", "write the repository as ORG/NAME")
        outcome: dict[str, Any] = {}

        def download() -> None:
            try:
                outcome["path"] = fetch(ns.repo, ns.revision, Path(ns.local_dir), ns.require_tokenizer)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                outcome["error"] = exc

        worker = threading.Thread(target=download, name="fetch-model", daemon=True)
        worker.start()
        while worker.is_alive():  # a stop signal ends the wait; the partial files stay for the next start
            if stop.wait(0.5):
                print(
                    f"{PROG}: {stopping.signal_name(stop.signum or 15)} during the download of {ns.repo}; exiting "
                    "(the next start resumes it)",
                    file=sys.stderr,
                    flush=True,
                )
                return stopping.exit_status(stop.signum or 15)
        if "error" in outcome:
            raise outcome["error"]
        print(f"{PROG}: {ns.repo} ({ns.revision}) is in {outcome['path']}", flush=True)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_status
    except DownloadFailed as exc:
        print(f"error: MODEL: {exc}", file=sys.stderr, flush=True)
        return 1
    if not command:
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"error: {PROG}: cannot run {command[0]!r} ({exc.strerror})", file=sys.stderr, flush=True)
        return 127
    return 0  # pragma: no cover - execvp does not return


def entry() -> None:
    """The console script."""
    sys.exit(main())
