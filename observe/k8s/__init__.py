"""Kubernetes: training jobs (TrainJob, PyTorchJob), ``fsdp-observe job`` and the generated manifests.

One way, top to bottom (the import-linter contracts in ``pyproject.toml`` hold it):

- ``jobs`` (``job status|logs|stop`` for any kind) and ``access`` (the job's NetworkPolicy, the
  viewer's and operator's Roles);
- ``kinds``: one module per job kind behind the ``JobKind`` interface (API coordinates, check
  and render from settings, pod labels, status, stop);
- ``pod``: the trainer pod every kind runs (command, environment, volumes, security, devices);
- ``job_settings`` (typed settings from ``.env``/YAML), over ``storage`` (weights and checkpoint
  volumes, and the ``ModelPlan`` made once when the settings are checked);
- ``client``/``kubeconfig`` (the API connection) and ``names`` (labels, ports, name rules).

``observe.k8s.names`` is standard-library only, so any module (the TUI's discovery included) can
import the label selectors and port names without pulling in the ``kubernetes`` client.
"""
