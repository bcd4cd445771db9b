"""NVIDIA XID errors: what each code means, and a parser for the kernel-log lines that carry them.

The catalogue gives every XID code NVIDIA documents with a meaning its name, a severity class and
the action NVIDIA recommends. Sources:

- NVIDIA, "XID Errors" (https://docs.nvidia.com/deploy/xid-errors/), the Xid listing and the Xid
  catalog for Ampere and newer GPUs ("Resolution Bucket (Immediate Action)": RESTART_APP,
  RESET_GPU, RESTART_BM, WORKFLOW_NVLINK_ERR, IGNORE, ...), drivers r550-r570;
- NVIDIA, "GPU Debug Guidelines" (https://docs.nvidia.com/deploy/gpu-debug-guidelines/), the
  XID messages section, for the order of actions (restart the app, reset the GPU, reboot, RMA);
- NVML's ``nvmlDeviceGpuRecoveryAction_t`` (None, GPU reset, node reboot, drain P2P, drain and
  reset) for the recovery action XID 154 reports.

The severity class is the immediate-action bucket folded into five classes the alerts use:
``application`` (restart the job), ``gpu_reset``, ``node_reboot``, ``nvlink_fabric`` and
``informational``; a code missing from the table, or documented as unused, is ``unknown``.

The parser reads one stream of lines (``dmesg``, ``dmesg -T``, ``/dev/kmsg`` records, syslog) and
keeps state across lines: the PCI bus -> GPU UUID map the driver prints as
``NVRM: GPU at PCI:0000:3b:00: GPU-…``, and the last XID 79 per bus, so the two lines a driver
prints for one fall off the bus count once. It imports only ``observe.model``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from observe.model import XidEvent

Severity = Literal["application", "gpu_reset", "node_reboot", "nvlink_fabric", "informational", "unknown"]
SEVERITIES: tuple[str, ...] = ("application", "gpu_reset", "node_reboot", "nvlink_fabric", "informational", "unknown")


@dataclass(frozen=True)
class XidInfo:
    """What one XID code means.

    Attributes:
        code: the XID number.
        name: NVIDIA's short description of the code.
        severity: the severity class (module docstring).
        action: what NVIDIA recommends doing first, with its resolution bucket in capitals.
    """

    code: int
    name: str
    severity: Severity
    action: str


RESTART_APP = "Restart the application (RESTART_APP); if it recurs, debug the application or run DCGM diagnostics."
APP_BUG = "Check the application's CUDA code (RESTART_APP / CHECK_APP); no hardware action is needed."
RESET_GPU = (
    "Drain the GPU and reset it (RESET_GPU, nvidia-smi -r); run DCGM diagnostics; contact NVIDIA support if it recurs."
)
REBOOT = (
    "Drain the node and reboot it (RESTART_BM); if it recurs, check PCIe seating, power and cooling, "
    "then contact NVIDIA support."
)
NVLINK = (
    "Follow NVIDIA's NVLink workflow (WORKFLOW_NVLINK_ERR): check links with nvidia-smi nvlink -s, "
    "reset the GPU (and the NVSwitch fabric if involved), run DCGM diagnostics."
)
WATCH = "No immediate action (IGNORE); watch for recurrence."
ECC_REMAP = (
    "Drain the GPU and reset it when convenient so the pending row remap takes effect (RESET_GPU); "
    "replace the GPU if remapping fails."
)
UNKNOWN_ACTION = "Unknown XID: look it up in NVIDIA's XID catalog for this driver and contact support if it recurs."


def _table(severity: Severity, action: str, rows: dict[int, str]) -> dict[int, XidInfo]:
    return {code: XidInfo(code, name, severity, action) for code, name in rows.items()}


#: Code -> meaning. Unused and reserved codes are left out (they read as unknown).
CATALOGUE: dict[int, XidInfo] = {
    **_table(
        "application",
        RESTART_APP,
        {
            2: "Invalid or corrupted push buffer stream",
            3: "Invalid or corrupted push buffer stream",
            4: "Invalid or corrupted push buffer stream, or GPU semaphore timeout",
            6: "Invalid or corrupted push buffer stream",
            7: "Invalid or corrupted push buffer address",
            8: "GPU stopped processing",
            11: "Invalid or corrupted push buffer stream",
            16: "Display engine hung",
            19: "Display engine error",
            20: "Invalid or corrupted MPEG push buffer",
            21: "Invalid or corrupted motion estimation push buffer",
            22: "Invalid or corrupted video processor push buffer",
            24: "GPU semaphore timeout",
            25: "Invalid or illegal push buffer stream",
            27: "Video processor exception",
            28: "Video processor exception",
            29: "Video processor exception",
            30: "GPU semaphore access error",
            32: "Invalid or corrupted push buffer stream (PBDMA error)",
            34: "Video processor exception",
            35: "Video processor exception",
            36: "Video processor exception",
            42: "Video processor exception",
            46: "GPU stopped processing",
            47: "Video processor exception",
            56: "Display engine error",
            60: "Video processor exception",
            68: "NVDEC0 exception (video decoder)",
            69: "Graphics engine class error",
            70: "CE3 copy engine error",
            71: "CE4 copy engine error",
            72: "CE5 copy engine error",
            73: "NVENC2 error",
            75: "CE6 copy engine error",
            76: "CE7 copy engine error",
            77: "CE8 copy engine error",
            80: "Corrupted data sent to GPU",
            81: "VGA subsystem error",
            82: "NVJPG0 error",
            83: "NVDEC1 error",
            84: "NVDEC2 error",
            85: "CE9 copy engine error",
            86: "OFA exception",
            88: "NVDEC3 error",
            89: "NVDEC4 error",
            94: "Contained ECC error (the affected application was stopped; the GPU keeps working)",
            96: "NVDEC5 error",
            97: "NVDEC6 error",
            98: "NVDEC7 error",
            99: "NVJPG1 error",
            100: "NVJPG2 error",
            101: "NVJPG3 error",
            102: "NVJPG4 error",
            103: "NVJPG5 error",
            104: "NVJPG6 error",
            105: "NVJPG7 error",
            109: "Context switch timeout",
            111: "Display bundle error event",
            112: "Display supervisor error",
            113: "DisplayPort link training error",
            114: "Display pipeline underflow",
            115: "Display core channel error",
            116: "Display window channel error",
            117: "Display cursor channel error",
            118: "Display pixel pipeline error",
        },
    ),
    **_table(
        "application",
        APP_BUG,
        {
            13: "Graphics engine exception (e.g. an out-of-range address in a kernel)",
            31: "GPU memory page fault (MMU fault, usually an illegal address in the application)",
            43: "GPU stopped processing the channel (the application hit a software-induced fault)",
        },
    ),
    **_table(
        "gpu_reset",
        RESET_GPU,
        {
            9: "Driver error programming GPU",
            12: "Driver error handling GPU exception",
            18: "Bus mastering disabled in PCI config space",
            26: "Framebuffer timeout",
            33: "Internal micro-controller error",
            37: "Driver firmware error",
            38: "Driver firmware error",
            44: "Graphics engine fault during context switch",
            48: "Double bit ECC error (DBE)",
            54: "Auxiliary power is not connected to the GPU board",
            57: "Error programming video memory interface",
            58: "Unstable video memory interface detected",
            59: "Internal micro-controller error",
            61: "Internal micro-controller breakpoint or warning",
            62: "Internal micro-controller halt",
            64: "ECC page retirement or row remapper recording failure",
            65: "Video processor exception",
            66: "Illegal access by driver",
            67: "Illegal access by driver",
            95: "Uncontained ECC error (every application on the GPU is affected)",
            110: "Security fault error",
            119: "GSP RPC timeout (the GPU System Processor stopped answering)",
            120: "GSP error",
            122: "SPI PMU RPC read failure",
            123: "SPI PMU RPC write failure",
            124: "SPI PMU RPC erase failure",
            125: "InfoROM filesystem failure",
            140: "Unrecovered ECC error",
            143: "GPU initialization failure",
        },
    ),
    63: XidInfo(63, "ECC page retirement or row remapping recording event", "gpu_reset", ECC_REMAP),
    79: XidInfo(79, "GPU has fallen off the bus", "node_reboot", REBOOT),
    **_table(
        "nvlink_fabric",
        NVLINK,
        {
            74: "NVLink error",
            121: "C2C (chip-to-chip) link error",
            144: "NVLink SAW error",
            145: "NVLink RLW error",
            146: "NVLink TLW error",
            147: "NVLink TREX error",
            148: "NVLink NVLPW control error",
            149: "NVLink NETIR error",
            150: "NVLink MSE error",
        },
    ),
    **_table(
        "informational",
        WATCH,
        {
            45: "Preemptive cleanup, due to previous errors (see the XID it names as its cause)",
            92: "High single-bit ECC error rate",
            93: "Non-fatal violation of provisioned InfoROM wear limit",
            106: "SMBPBI test message",
            107: "SMBPBI test message (silent)",
        },
    ),
    154: XidInfo(
        154,
        "GPU recovery action changed",
        "informational",
        "Do what the recovery action in the message says (XID_154_EVAL): none, GPU reset, "
        "node reboot, drain P2P, or drain and reset.",
    ),
}

#: XID 154's recovery actions (NVML ``nvmlDeviceGpuRecoveryAction_t``) -> severity class.
RECOVERY_ACTION_SEVERITY: dict[str, Severity] = {
    "none": "informational",
    "gpu reset": "gpu_reset",
    "gpu reset required": "gpu_reset",
    "reset gpu": "gpu_reset",
    "node reboot": "node_reboot",
    "node reboot required": "node_reboot",
    "reboot node": "node_reboot",
    "drain p2p": "nvlink_fabric",
    "drain and reset": "gpu_reset",
}


#: The first action for each severity class, for XID 154's recovery action.
SEVERITY_ACTION: dict[str, str] = {
    "application": RESTART_APP,
    "gpu_reset": RESET_GPU,
    "node_reboot": REBOOT,
    "nvlink_fabric": NVLINK,
    "informational": WATCH,
}


def lookup(code: int) -> XidInfo:
    """The meaning of ``code``; a code outside the catalogue comes back with severity ``unknown``."""
    return CATALOGUE.get(code) or XidInfo(code, "Unknown XID", "unknown", UNKNOWN_ACTION)


def normalise_bus(text: str) -> str:
    """A PCI address as ``dddd:bb:dd`` in lower case, however the driver or NVML spelled it.

    Accepts ``PCI:0000:3b:00``, ``0000:3B:00``, ``0000:af:00.0`` and NVML's ``00000000:3B:00.0``
    (an 8-digit domain is cut to its last 4 digits). Returns the text lower-cased and stripped
    when it is not a PCI address.
    """
    m = _BUS.search(text)
    if not m:
        return text.strip().lower()
    return f"{m['domain'][-4:]}:{m['bus']}:{m['device']}".lower()


_BUS = re.compile(r"(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})(?:\.[0-7])?")
_KMSG = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;")
_GPU_AT = re.compile(r"NVRM: GPU at (?:PCI:)?(?P<bus>[0-9a-fA-F:.]+): (?P<uuid>GPU-[0-9a-fA-F-]{36})")
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\): "
    r"(?P<code>\d+)(?:,\s*(?P<rest>.*))?$"
)
_FALLEN = re.compile(
    r"NVRM: GPU (?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?: "
    r"GPU has fallen off the bus"
)
_PID = re.compile(r"^pid=(?P<pid>'?<?[\w-]+>?'?),\s*")
_NAME = re.compile(r"^name=(?P<name>[^,]*),\s*")
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")
_RECOVERY = re.compile(r"recovery action changed from .*? to 0x[0-9a-fA-F]+ \((?P<action>[^)]+)\)")
_FATAL = re.compile(r"\b(Nonfatal|Fatal)\b")
_LINK = re.compile(r"\bLink\s+(-?\d+)\b")
_NVLINK5 = range(144, 151)
#: A "fallen off the bus" line within this many lines of an XID 79 line for the same bus is the
#: same event (drivers print both; older drivers print only the second).
FALLEN_OFF_WINDOW_LINES = 20


class KernelLogParser:
    """Turns kernel-log lines into ``XidEvent``s, one line at a time.

    Args:
        node: node name put on every event.

    Attributes:
        parse_errors: lines that start an XID report but could not be read (e.g. truncated).
        bus_uuids: PCI bus (``dddd:bb:dd``) -> GPU UUID, learnt from ``GPU at PCI:…`` lines.
    """

    def __init__(self, node: str = "") -> None:
        self.node = node
        self.parse_errors = 0
        self.bus_uuids: dict[str, str] = {}
        self._line_no = 0
        self._last_79: dict[str, tuple[int, str]] = {}  # bus -> (line number, which form)

    def feed(self, line: str, now: float = 0.0, boot_time: float | None = None) -> XidEvent | None:
        """Read one line; return the XID event it carries, or ``None``.

        Args:
            line: one kernel-log line or ``/dev/kmsg`` record, with or without its newline.
            now: Unix time to stamp the event with when the line has no usable timestamp.
            boot_time: Unix time of boot; with it, a ``/dev/kmsg`` record's microseconds since
                boot become the event's time.

        Never raises on bad input: a line that starts an XID report but cannot be read adds one
        to ``parse_errors`` and returns ``None``.
        """
        self._line_no += 1
        if "NVRM" not in line:
            return None
        line = line.rstrip("\r\n")
        when = now
        kmsg = _KMSG.match(line)
        if kmsg:
            line = line[kmsg.end() :]
            if boot_time is not None:
                when = boot_time + int(kmsg.group(3)) / 1e6
        if m := _GPU_AT.search(line):
            self.bus_uuids[normalise_bus(m["bus"])] = m["uuid"]
            return None
        if m := _FALLEN.search(line):
            bus = normalise_bus(m["bus"])
            if self._same_79(bus, "fallen"):
                return None
            return self._event(79, bus, line, when, pid=None, process=None, rest="")
        if "NVRM: Xid" not in line:
            return None
        m = _XID.search(line)
        if m is None:
            self.parse_errors += 1
            return None
        code, bus, rest = int(m["code"]), normalise_bus(m["bus"]), m["rest"] or ""
        if code == 79 and self._same_79(bus, "xid"):
            return None
        pid = process = None
        if p := _PID.match(rest):
            pid = int(p["pid"]) if p["pid"].isdigit() else None
            rest = rest[p.end() :]
            if n := _NAME.match(rest):
                name = n["name"].strip()
                process = None if name in ("", "<unknown>") else name
                rest = rest[n.end() :]
        return self._event(code, bus, line, when, pid, process, rest)

    def _same_79(self, bus: str, form: str) -> bool:
        """Whether a 79 of the other form was seen for ``bus`` just before; remember this one."""
        seen = self._last_79.get(bus)
        self._last_79[bus] = (self._line_no, form)
        return bool(seen and seen[1] != form and self._line_no - seen[0] <= FALLEN_OFF_WINDOW_LINES)

    def _event(
        self, code: int, bus: str, raw: str, when: float, pid: int | None, process: str | None, rest: str
    ) -> XidEvent:
        info = lookup(code)
        severity, action = info.severity, info.action
        fatal = link = recovery = caused_by = None
        if code in _NVLINK5:
            if f := _FATAL.search(rest):
                fatal = f.group(1) == "Fatal"
            if k := _LINK.search(rest):
                link = int(k.group(1))
        if r := _RECOVERY.search(rest):
            recovery = r["action"].strip()
            severity = RECOVERY_ACTION_SEVERITY.get(recovery.lower(), severity)
            action = f"The driver now requires: {recovery}. {SEVERITY_ACTION.get(severity, info.action)}"
        if c := _CAUSED_BY.search(rest):
            caused_by = int(c.group(1))
        return XidEvent(
            xid=code,
            name=info.name,
            severity=severity,
            action=action,
            node=self.node,
            gpu=None,
            gpu_uuid=self.bus_uuids.get(bus),
            pci_bus=bus,
            pid=pid,
            process=process,
            time_unix=when,
            source="kernel_log",
            message=rest,
            raw=raw,
            fatal=fatal,
            link=link,
            recovery_action=recovery,
            caused_by=caused_by,
        )
