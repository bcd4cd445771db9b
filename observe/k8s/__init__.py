"""Kubernetes: PyTorchJob rendering, ``fsdp-observe job`` and the generated manifests.

``observe.k8s.names`` is standard-library only, so any module (the TUI's discovery included) can
import the label selectors and port names without pulling in the ``kubernetes`` client.
"""
