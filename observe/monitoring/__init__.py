"""Monitoring as code, as a monitoring mixin does it: one ``Settings`` object drives the Grafana
dashboards (``dashboards``, built with grafanalib through ``grafana``), the Prometheus rules
(``rules``) and their Kubernetes objects (``kube_objects``); ``queries`` holds PromQL they share;
``generate`` renders everything in memory and is the one writer and checker
(``fsdp-observe dashboards``)."""
