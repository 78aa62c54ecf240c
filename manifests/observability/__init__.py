"""The metrics stack as data, by what it holds; `build.build_observability` builds it from the settings in
one place (kube-prometheus-stack 88.5.3, dcgm-exporter 4.8.2, KubeRay 1.7.0, Ray 2.58.0, vLLM 0.26.0):

- `charts`: kube-prometheus-stack's and dcgm-exporter's values, their namespaces and the gp3 StorageClass;
- `monitors`: who Prometheus is (`scraper`) and the monitors that scrape Ray and KubeRay;
- `rules`: the alert rules (PrometheusRule `ray-llm-alerts`);
- `dashboards`: Ray's and the PD dashboards' ConfigMaps, and the head's Grafana settings;
- `build`: all of them together, in the order they must exist (`ObservabilityManifests`).
"""
