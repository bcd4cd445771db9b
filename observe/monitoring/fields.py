"""Metric names of the exporters that are not ours: NVIDIA dcgm-exporter and node-exporter.

Named once here (ours live in ``observe.catalog``). Each DCGM field below is exported by a stock
install: it is listed, not commented out, in both counter files of the newest tagged
dcgm-exporter release (``tests/cases/dcgm/released-4.5.3-4.8.2``: ``default-counters.csv``, the
exporter's default, and ``dcp-metrics-included.csv``, which the GPU Operator sets), except
``DCGM_XID_COUNT``, which needs switching on (docs/dashboards.md). These are the names up to 4.8.x;
``observe.monitoring.dialects`` holds the later releases' and converts every figure to its base
unit once. Units are DCGM's, given beside each name.
"""

from __future__ import annotations

# --- dcgm-exporter: utilisation ------------------------------------------------------------------
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent; not reported for MIG instances
DCGM_MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"  # percent; not reported for MIG instances
DCGM_GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0..1; the MIG-safe utilisation
DCGM_TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"  # ratio 0..1 of cycles the tensor (HMMA) pipe is active
DCGM_DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"  # ratio 0..1 of cycles device memory is sending or receiving
# --- memory, clocks, heat, power -------------------------------------------------------------------
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"  # MiB
DCGM_SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"  # MHz
DCGM_GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"  # degrees C; every GPU (and MIG instance) reports it
DCGM_POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"  # W
# --- interconnect ---------------------------------------------------------------------------------
#: Typed ``counter`` in the csv but an instantaneous rate: NVML's cumulative KiB counters turned
#: into KiB/s and divided by 1000 (DCGM's ``ReadAndCacheNvLinkBandwidth``; dcgm-exporter PR #658,
#: NVIDIA/deepops PR #810). Charted as is, times 1024000 for bytes per second; never ``rate()``.
DCGM_NVLINK_BANDWIDTH = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
NVLINK_UNIT_TO_BYTES = 1024 * 1000
DCGM_PCIE_TX = "DCGM_FI_PROF_PCIE_TX_BYTES"  # bytes per second
DCGM_PCIE_RX = "DCGM_FI_PROF_PCIE_RX_BYTES"  # bytes per second
# --- errors ------------------------------------------------------------------------------------------
DCGM_PCIE_REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"  # counter of PCIe retries
DCGM_ROWS_REMAPPED_UNCORRECTABLE = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"  # counter
DCGM_ROWS_REMAPPED_CORRECTABLE = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"  # counter
DCGM_ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"  # 1 when remapping rows has failed
#: The last XID code a GPU reported (labels ``err_code``, ``err_msg``); sticky, never back to 0.
DCGM_XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
#: XID records per GPU and code (label ``xid``) in the exporter's window (``window_size_in_ms``):
#: a gauge, and off by default (commented out in default-counters.csv).
DCGM_XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
#: MIG labels dcgm-exporter adds to a GPU instance's series.
DCGM_MIG_PROFILE, DCGM_MIG_INSTANCE = "GPU_I_PROFILE", "GPU_I_ID"

DCGM: tuple[str, ...] = (
    DCGM_GPU_UTIL,
    DCGM_MEM_COPY_UTIL,
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_TENSOR_ACTIVE,
    DCGM_DRAM_ACTIVE,
    DCGM_FB_USED,
    DCGM_FB_FREE,
    DCGM_SM_CLOCK,
    DCGM_GPU_TEMP,
    DCGM_POWER_USAGE,
    DCGM_NVLINK_BANDWIDTH,
    DCGM_PCIE_TX,
    DCGM_PCIE_RX,
    DCGM_PCIE_REPLAY,
    DCGM_ROWS_REMAPPED_UNCORRECTABLE,
    DCGM_ROWS_REMAPPED_CORRECTABLE,
    DCGM_ROW_REMAP_FAILURE,
    DCGM_XID_ERRORS,
    DCGM_XID_COUNT,
)
MIB = 1024 * 1024

# --- node-exporter (kube-prometheus-stack runs it on every node) -----------------------------------------
NODE_CPU_SECONDS = "node_cpu_seconds_total"  # counter, label mode
NODE_NETWORK_RECEIVE = "node_network_receive_bytes_total"  # counter, label device
NODE_NETWORK_TRANSMIT = "node_network_transmit_bytes_total"  # counter, label device
NODE_DISK_READ = "node_disk_read_bytes_total"  # counter, label device
NODE_DISK_WRITTEN = "node_disk_written_bytes_total"  # counter, label device
NODE_DISK_IO_TIME = "node_disk_io_time_seconds_total"  # counter, label device
NODE_UNAME = "node_uname_info"  # value 1, one per node
NODE_BOOT_TIME = "node_boot_time_seconds"  # Unix time the node booted
NODE_EXPORTER: tuple[str, ...] = (
    NODE_UNAME,
    NODE_BOOT_TIME,
    NODE_CPU_SECONDS,
    NODE_NETWORK_RECEIVE,
    NODE_NETWORK_TRANSMIT,
    NODE_DISK_READ,
    NODE_DISK_WRITTEN,
    NODE_DISK_IO_TIME,
)
#: Virtual interfaces left out of the network panels (loopback, CNI veths, bridges, tunnels).
VIRTUAL_NETWORK_DEVICES = "lo|veth.*|cali.*|cilium.*|flannel.*|cni.*|docker.*|br-.*|vxlan.*|tunl.*|kube-.*|lxc.*"
#: Block devices left out of the disk panels (partitions and device-mapper are counted once on
#: the whole disk; loop and ram devices are not disks).
VIRTUAL_DISK_DEVICES = "loop.*|ram.*|dm-.*|sr.*|.*p[0-9]+|sd[a-z]+[0-9]+|vd[a-z]+[0-9]+|xvd[a-z]+[0-9]+"
