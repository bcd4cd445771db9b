"""Zero-code instrumentation: per-step series from an unchanged training script.

Switched on by ``FSDP_OBSERVE_INSTRUMENT=1`` (``observe.catalog.INSTRUMENT_ENV``) in any Python
process that inherits it, through one of two start-up hooks that both call
``bootstrap.start``: the ``fsdp_observe_instrument.pth`` file the wheel puts into site-packages
(one environment variable in a pod spec is enough), or the ``sitecustomize`` that
``fsdp-observe run`` puts first on ``PYTHONPATH`` (chaining to any ``sitecustomize`` it shadows).
``bootstrap`` imports only the standard library; once the program imports torch, ``hooks``
installs the optimizer, backward, ``clip_grad_norm_`` and DataLoader hooks; once it imports
``transformers.trainer``, the Hugging Face callback is appended to its default callbacks.
Nothing here imports the top-level ``trainer`` package.
"""
