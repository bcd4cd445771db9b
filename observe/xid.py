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
prints for one fall off the bus count once. It reads the shapes drivers really print:

- any whitespace between ``Xid``, the bus, the code and its fields (``):  48,  pid=…``);
- every "fallen off the bus" form as an XID 79: current drivers' ``NVRM: GPU 0000:af:00.0: GPU
  has fallen off the bus.`` (beside their ``Xid … 79`` line), older drivers' ``NVRM: GPU at
  0000:1b:00.0 has fallen off the bus.``, and the probe-time message of the driver's ``nv.c``
  (open-gpu-kernel-modules; e.g. 525.125.06), printed when the GPU's registers read all ones as
  the driver loads, over two or three lines: ``NVRM: The NVIDIA GPU 0000:1a:00.0`` / ``NVRM: (PCI
  ID: 10de:1db6) installed in this system has`` / ``NVRM: fallen off the bus and is not responding
  to commands.``;
- PCI domains whole: a VMD domain has five hex digits (``10000:3b:00``), NVML prints eight
  (``00010000:3B:00.0``); both are ``10000:3b:00``, never cut to ``0000:3b:00``, another GPU's bus.

**One report, one count.** A driver prints several lines for one fault: an out-of-range access
gives an XID 13 ``Graphics SM Warp Exception``, an ``SM Global Exception`` and a ``Graphics
Exception: ESR`` line, one per SM that saw it plus the ESR, all for one pid at one instant. Lines
with the same bus, code and pid within ``REPORT_WINDOW_SECONDS`` of the report's first line are
that report and count once, so an application-burst threshold counts distinct faults, not lines:
the parser still returns an event for each of them, marked ``continues`` after the first, and
the agent counts and keeps only the first (the lines stay in the kernel log as the driver wrote
them).
The window is one second: the lines of a report come from one interrupt within microseconds, and
the coarsest clocks in logs (``dmesg -T``, syslog) tick once a second, so one report can straddle a
tick; a CUDA context that faulted is dead, so the same pid does not fault again within a second as
another fault. Time is the line's own (``/dev/kmsg``'s microseconds, a ``[ 12.345678]`` or syslog
or ISO 8601 prefix), else the reading time. A line without a pid (XID 79, 31 on older drivers)
always begins a report, except the probe-time message a driver repeats for one GPU (it retries its
probe every ~0.2 s): its repeats within a second continue the first. It imports only ``observe.model``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
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

    Accepts ``PCI:0000:3b:00``, ``0000:3B:00``, ``0000:af:00.0`` and NVML's ``00000000:3B:00.0``:
    the domain is written with at least 4 digits and no more than it needs, so NVML's 8-digit
    ``00010000`` and the kernel's ``10000`` (a VMD domain) are both ``10000``. Returns the text
    lower-cased and stripped when it is not a PCI address.
    """
    m = _BUS.search(text)
    if not m:
        return text.strip().lower()
    return f"{int(m['domain'], 16):04x}:{m['bus']}:{m['device']}".lower()


_BUS = re.compile(r"(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})(?:\.[0-7])?")
_KMSG = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;")
_GPU_AT = re.compile(r"NVRM: GPU at (?:PCI:)?(?P<bus>[0-9a-fA-F:.]+): (?P<uuid>GPU-[0-9a-fA-F-]{36})")
_BUS_TEXT = r"(?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?"
_XID = re.compile(rf"NVRM: Xid\s*\(\s*{_BUS_TEXT}\s*\):\s*(?P<code>\d+)\s*(?:,\s*(?P<rest>.*))?$")
#: "GPU has fallen off the bus" as current drivers print it, and as older ones did.
_FALLEN = re.compile(rf"NVRM: GPU (?:at )?{_BUS_TEXT}:?\s+(?:GPU )?has fallen off the bus")
#: The first line of the probe-time message: the bus; "fallen off the bus" follows within 2 lines.
_THE_GPU = re.compile(rf"NVRM: The NVIDIA GPU {_BUS_TEXT}")
_FALLEN_TAIL = "fallen off the bus"
#: Lines of the probe-time message after its first.
PROBE_MESSAGE_LINES = 2
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
#: Lines of one XID report: same bus, code and pid within this many seconds of its first line.
REPORT_WINDOW_SECONDS = 1.0
#: Reports remembered at once before those past their window are forgotten (bounded memory).
MAX_OPEN_REPORTS = 256

_MONTHS = {
    m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"))
}
_SINCE_BOOT = re.compile(r"\[\s*(\d+\.\d+)\]")
_CTIME = re.compile(r"^\[\w{3} (\w{3}) +(\d+) (\d\d):(\d\d):(\d\d) (\d{4})\]")
_SYSLOG = re.compile(r"^(\w{3}) +(\d+) (\d\d):(\d\d):(\d\d)(\.\d+)? ")
_ISO = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(\.\d+)?")


def line_clock(line: str) -> float | None:
    """Seconds on the clock a kernel-log line carries, for telling its lines apart in time (``None``
    when it carries none): ``[ 12.345678]`` (since boot), ``[Mon Mar  3 09:12:45 2025]``
    (``dmesg -T``), ``Mar  3 09:12:45`` (syslog) or ``2025-03-03T09:12:45.123456`` (ISO 8601). The
    numbers of one stream compare with each other; they are no Unix time."""
    if m := _SINCE_BOOT.search(line, 0, 40):
        return float(m.group(1))
    if m := _CTIME.match(line):
        month, day, hh, mm, ss, year = m.groups()
        return (
            ((int(year) * 12 + _MONTHS.get(month, 0)) * 31 + int(day)) * 86400.0
            + int(hh) * 3600
            + int(mm) * 60
            + int(ss)
        )
    if m := _ISO.match(line):
        year, month, day, hh, mm, ss, frac = m.groups()
        seconds = ((int(year) * 12 + int(month)) * 31 + int(day)) * 86400.0 + int(hh) * 3600 + int(mm) * 60 + int(ss)
        return seconds + float(frac or 0)
    if m := _SYSLOG.match(line):
        month, day, hh, mm, ss, frac = m.groups()
        seconds = (_MONTHS.get(month, 0) * 31 + int(day)) * 86400.0 + int(hh) * 3600 + int(mm) * 60 + int(ss)
        return seconds + float(frac or 0)
    return None


class KernelLogParser:
    """Turns kernel-log lines into ``XidEvent``s, one line at a time.

    Args:
        node: node name put on every event.

    Attributes:
        parse_errors: lines that start an XID report but could not be read (e.g. truncated).
        folded: lines that continued a report already returned (module docstring).
        bus_uuids: PCI bus (``dddd:bb:dd``) -> GPU UUID, learnt from ``GPU at PCI:…`` lines.
    """

    def __init__(self, node: str = "") -> None:
        self.node = node
        self.parse_errors = 0
        self.folded = 0
        self.bus_uuids: dict[str, str] = {}
        self._line_no = 0
        self._last_79: dict[str, tuple[int, str]] = {}  # bus -> (line number, which form)
        #: (bus, code, pid or message form) -> the time of its report's first line
        self._reports: dict[tuple[str, int, object], float] = {}
        self._probe: tuple[int, str] | None = None  # (line number, bus) of a probe-time message's first line

    def feed(self, line: str, now: float = 0.0, boot_time: float | None = None) -> XidEvent | None:
        """Read one line; return the XID event it carries, or ``None``. An event whose
        ``continues`` is true is a further line of a report already returned: do not count it.

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
        when, clock = now, None
        kmsg = _KMSG.match(line)
        if kmsg:
            line = line[kmsg.end() :]
            clock = int(kmsg.group(3)) / 1e6
            if boot_time is not None:
                when = boot_time + clock
        if clock is None:
            clock = line_clock(line)
        if clock is None:
            clock = now
        if m := _GPU_AT.search(line):
            self.bus_uuids[normalise_bus(m["bus"])] = m["uuid"]
            return None
        if m := _FALLEN.search(line):
            bus = normalise_bus(m["bus"])
            if self._same_79(bus, "fallen"):
                return None
            return self._event(79, bus, line, when, pid=None, process=None, rest="")
        if (probed := self._probe_message(line)) is not None:
            if self._same_79(probed, "probe"):
                return None
            event = self._event(79, probed, line, when, pid=None, process=None, rest="")
            return replace(event, continues=True) if self._same_report(probed, 79, "probe", clock) else event
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
        event = self._event(code, bus, line, when, pid, process, rest)
        return replace(event, continues=True) if pid is not None and self._same_report(bus, code, pid, clock) else event

    def _probe_message(self, line: str) -> str | None:
        """The bus of a probe-time "fallen off the bus" message once its "fallen off the bus" part
        is read (on this line, or within ``PROBE_MESSAGE_LINES`` after the first); else ``None``."""
        if m := _THE_GPU.search(line):
            self._probe = (self._line_no, normalise_bus(m["bus"]))
        if self._probe is None or _FALLEN_TAIL not in line:
            return None
        first, bus = self._probe
        self._probe = None
        return bus if self._line_no - first <= PROBE_MESSAGE_LINES else None

    def _same_report(self, bus: str, code: int, who: object, clock: float) -> bool:
        """Whether this line belongs to the report of ``(bus, code)`` by ``who`` (a pid, or a
        message form) begun within ``REPORT_WINDOW_SECONDS``; else it begins a new report."""
        began = self._reports.get((bus, code, who))
        if began is not None and 0 <= clock - began <= REPORT_WINDOW_SECONDS:
            self.folded += 1
            return True
        if len(self._reports) >= MAX_OPEN_REPORTS:  # forget reports whose window has passed
            self._reports = {k: t for k, t in self._reports.items() if 0 <= clock - t <= REPORT_WINDOW_SECONDS}
        self._reports[(bus, code, who)] = clock
        return False

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
