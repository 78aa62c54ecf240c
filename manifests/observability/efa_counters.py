"""The EFA device's own byte counters, where node-exporter can serve them: the mechanism that carries the
KV cache, watched (manifests/observability/kv_path.py compares them with what NIXL moved).

What the pinned versions give, read in their source:

- The EFA kernel driver keeps per-port counters in sysfs, `/sys/class/infiniband/<device>/ports/<port>/
  hw_counters/<name>`: `tx_bytes`, `rx_bytes`, `send_bytes`, `recv_bytes`, `rdma_read_bytes`,
  `rdma_read_resp_bytes` and their packet and work-request counts (Linux drivers/infiniband/hw/efa/
  efa_verbs.c, `EFA_DEFINE_PORT_STATS`; `rdma_write_*` on newer drivers). It keeps no `counters/`
  directory: that is the InfiniBand PMA's, which EFA does not implement.
- node-exporter 1.12.1 (prometheus-node-exporter chart 4.56.1, kube-prometheus-stack 88.5.3's) has an
  InfiniBand collector, on by default, but it reads `counters/` and only the Mellanox names of
  `hw_counters/` (collector/infiniband_linux.go; procfs 0.21.1 sysfs/class_infiniband.go
  `InfiniBandHwCounters`): for an EFA device it exports the port's state and rate, no byte.
- The EFA device plugin (aws-efa-k8s-device-plugin v0.5.30) advertises `vpc.amazonaws.com/efa` and
  exports no metric.

So a sidecar of node-exporter's own pod reads the EFA byte counters every 15 seconds and writes them
for node-exporter's textfile collector (on by default; `--collector.textfile.directory`), through the
chart's `sidecars`, `sidecarVolumeMount` and `extraArgs` (prometheus-node-exporter 4.56.1 values.yaml
and templates/daemonset.yaml: a sidecar takes node-exporter's image, a busybox one with a shell, and its
security context; the shared volume is an emptyDir node-exporter mounts read-only). It mounts the pod's
`sys` volume (the host's /sys) read-only. A node without EFA writes an empty file.
"""

from __future__ import annotations

from typing import Any

TEXTFILE_DIRECTORY = "/var/run/efa-textfile"
SIDECAR_NAME = "efa-counters"
INTERVAL_SECONDS = 15
COUNTERS = (
    "tx_bytes",
    "rx_bytes",
    "send_bytes",
    "recv_bytes",
    "rdma_read_bytes",
    "rdma_read_resp_bytes",
    "rdma_write_bytes",
    "rdma_write_recv_bytes",
)
"""The EFA port counters exported, each as `node_efa_<name>_total{device, port}` (a counter)."""
RECEIVED = ("rx_bytes", "rdma_read_bytes")
"""What a decode node receives: bytes sent to it (an emulated read's data packets, a TCP-less send) and
bytes its own RDMA reads brought (GPUDirect, host buffers on a device with RDMA read)."""


def metric(counter: str) -> str:
    return f"node_efa_{counter}_total"


SCRIPT = f"""\
# EFA byte counters for node-exporter's textfile collector (manifests/observability/efa_counters.py).
sys="${{SYSFS:-/host/sys}}"
out="${{OUT:-{TEXTFILE_DIRECTORY}}}"
while true; do
  tmp="$out/efa.prom.tmp"
  : > "$tmp"
  for name in {" ".join(COUNTERS)}; do
    typed=""
    for counters in "$sys"/class/infiniband/*/ports/*/hw_counters; do
      [ -r "$counters/$name" ] || continue
      device="${{counters#"$sys"/class/infiniband/}}"
      device="${{device%%/*}}"
      port="${{counters%/hw_counters}}"
      port="${{port##*/}}"
      if [ -z "$typed" ]; then
        echo "# HELP node_efa_${{name}}_total EFA port counter $name (sysfs hw_counters)." >> "$tmp"
        echo "# TYPE node_efa_${{name}}_total counter" >> "$tmp"
        typed=1
      fi
      labels="device=\\"$device\\",port=\\"$port\\""
      echo "node_efa_${{name}}_total{{$labels}} $(cat "$counters/$name")" >> "$tmp"
    done
  done
  mv "$tmp" "$out/efa.prom"
  [ -n "${{ONCE:-}}" ] && break
  sleep {INTERVAL_SECONDS}
done
"""
"""busybox sh (node-exporter's image); SYSFS, OUT and ONCE let the tests run it on a fake tree."""


def node_exporter_values(resources: dict[str, Any]) -> dict[str, Any]:
    """prometheus-node-exporter values that add the sidecar and point the textfile collector at it."""
    return {
        "extraArgs": [f"--collector.textfile.directory={TEXTFILE_DIRECTORY}"],
        "sidecarVolumeMount": [{"name": "efa-textfile", "mountPath": TEXTFILE_DIRECTORY, "readOnly": False}],
        "sidecars": [
            {
                "name": SIDECAR_NAME,
                "command": ["/bin/sh", "-c", SCRIPT],
                "volumeMounts": [{"name": "sys", "mountPath": "/host/sys", "readOnly": True}],
                "resources": resources,
            }
        ],
    }
