"""Model weights: what a weights folder must hold, Hugging Face Hub ids, and where a download goes.

Torch-free and without ``huggingface_hub`` (the Kubernetes renderer and the launcher check with
it before anything runs). The trainer reads a model shard by shard from a local
``save_pretrained`` folder: ``config.json`` and ``*.safetensors`` (``check_model_dir``). A hub id
(``meta-llama/Llama-2-7b-hf``) is downloaded first, by ``fsdp-observe-fetch-model``
(``trainer.fetch``) in a rendered job, or by hand with the ``hf`` command ``huggingface_hub``
installs (``DOWNLOAD_HINT``).
"""

from __future__ import annotations

import re
from pathlib import Path

from observe.errors import UserError

#: What a download fetches of a model repository: the config and tokenizer files (JSON, the
#: SentencePiece model) and the safetensors shards with their index. Repositories that also hold
#: ``pytorch_model*.bin`` or ``original/consolidated*.pth`` copies of the same weights (the Llama
#: repos do) would otherwise download them twice over.
WEIGHT_PATTERNS: tuple[str, ...] = ("*.json", "*.safetensors", "tokenizer.model", "*.tiktoken")
#: Files of which at least one makes a folder usable as ``--tokenizer`` (``AutoTokenizer``).
TOKENIZER_FILES: tuple[str, ...] = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")

#: A hub repository id as ``huggingface_hub.utils.validate_repo_id`` accepts it, with the
#: namespace required (a model's ``org/name``).
_HUB_ID = re.compile(r"[\w\-.]{1,96}/[\w\-.]{1,96}")


def is_hub_id(text: str) -> bool:
    """Whether ``text`` is a hub model id ``org/name`` (not a path: no leading ``/`` or ``.``)."""
    return (
        bool(_HUB_ID.fullmatch(text))
        and not text.startswith((".", "-"))
        and "--" not in text
        and ".." not in text
        and not text.endswith((".git", ".", "-"))
    )


def download_hint(repo_id: str = "ORG/NAME", local_dir: str = "DIR") -> str:
    """The ``hf download`` command line (huggingface_hub's CLI) that fetches what the trainer reads."""
    include = " ".join(f"'{p}'" for p in WEIGHT_PATTERNS)
    return f"hf download {repo_id} --local-dir {local_dir} --include {include}"


def local_dir_name(repo_id: str, revision: str = "main") -> str:
    """The folder a download of ``repo_id`` at ``revision`` goes to, under the model volume:
    ``meta-llama--Llama-2-7b-hf`` (``--`` as in the hub cache's names), ``@REV`` added for a
    revision other than ``main``."""
    name = repo_id.replace("/", "--")
    return name if revision == "main" else f"{name}@{re.sub(r'[^A-Za-z0-9._-]', '_', revision)}"


def check_model_dir(path: Path, field: str = "--model") -> None:
    """Refuse a folder the trainer cannot load a model from.

    Raises:
        UserError: naming ``field``: not a folder (with the download command for a hub id), no
            ``config.json``, or no ``.safetensors`` shard.
    """
    if not path.is_dir():
        text = str(path)
        if is_hub_id(text):
            raise UserError(
                field,
                f"{text!r} is a Hugging Face Hub id, not a local directory (weights are read "
                "shard by shard from local files)",
                f"download it first ({download_hint(text)}) and "
                "pass DIR; in a Kubernetes job MODEL=ORG/NAME downloads it for you",
            )
        raise UserError(
            field,
            f"{text!r} is not a local directory (weights are read shard by shard from local files)",
            f"pass a save_pretrained directory, or download one: {download_hint()}",
        )
    if not (path / "config.json").is_file():
        raise UserError(field, f"{str(path)!r} has no config.json", "pass a directory written by save_pretrained")
    if not any(path.glob("*.safetensors")):
        raise UserError(
            field,
            f"no .safetensors files in {str(path)!r} (weights are loaded shard by shard from safetensors only)",
            "save the model with save_pretrained(..., safe_serialization=True)",
        )


def has_tokenizer(path: Path) -> bool:
    """Whether ``path`` holds tokenizer files (``TOKENIZER_FILES``)."""
    return any((path / name).is_file() for name in TOKENIZER_FILES)
