"""The torch-free contract of a training run: its settings and flags (``config``), model shapes
(``presets``), data files (``corpus``), checkpoint files (``checkpoint_files``) and the torchrun
command that starts it (``launch``).

The only part of ``trainer`` that ``observe`` (the CLI, ``observe.k8s``, ``observe.scaling`` and
the demo) may import. Nothing here imports torch.
"""
