"""Make text a process exposes safe to leave the node: secrets redacted, controls escaped, length cut.

Every string the agent exports that a process controls (its command line, its name, the process
name and message in a kernel-log line) goes through here before it reaches ``/metrics`` or
``/snapshot``. Three steps, in this order, argument by argument:

1. **Decode**: ``/proc/<pid>/cmdline`` bytes as UTF-8; an invalid byte becomes the four
   characters ``\\xff`` (Python's ``backslashreplace``).
2. **Redact** (``REDACTED`` replaces the secret, the rest stays):
   - the value of a flag or variable whose name ends in a secret word (``--hf_token X``,
     ``--token=X``, ``HF_TOKEN=X``, ``aws_secret_access_key X``); the name is split on ``-``,
     ``_`` and ``.`` and only its last word counts, so ``--token-budget 100`` and
     ``--max_tokens 4096`` stay as they are;
   - the password in a URL (``https://user:<redacted>@host``) and secret query parameters
     (``?token=``, ``&X-Amz-Signature=``, ``&sig=``);
   - ``Authorization``-style header values and ``Bearer`` tokens;
   - well-known token shapes anywhere (Hugging Face ``hf_…``, GitHub ``ghp_…``/``github_pat_…``,
     GitLab ``glpat-…``, Slack ``xox?-…``, OpenAI ``sk-…``, AWS ``AKIA…``/``ASIA…``, Google
     ``AIza…``, JSON Web Tokens).
3. **Escape and cut**: control characters (C0, DEL, C1, e.g. newline or the ESC of an ANSI
   colour) become visible escapes (``\\n``, ``\\t``, ``\\x1b``), as ``ps`` and htop print them,
   so no label value or table cell can move a terminal's cursor; an argument longer than
   ``MAX_ARG_CHARS`` and a command line longer than ``MAX_COMMAND_CHARS`` are cut, ending in
   ``…[+N chars]`` (N = characters removed).

The process environment is never read. Standard library only.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"
#: Longest argument kept whole, in characters (after redaction and escaping).
MAX_ARG_CHARS = 256
#: Longest command line kept whole, in characters.
MAX_COMMAND_CHARS = 1024
#: Longest process name or other short field, in characters.
MAX_NAME_CHARS = 128

#: Last words of a flag or variable name whose value is a secret.
SECRET_WORDS = frozenset({
    "token", "password", "passwd", "pwd", "secret", "key", "apikey", "credential", "credentials",
    "auth", "passphrase", "signature",
})

_NAME_WORDS = re.compile(r"[-_.]+")
_FLAG_ASSIGN = re.compile(r"^(?P<name>-{1,2}[A-Za-z][\w.-]*|[A-Za-z_][A-Za-z0-9_.]*)=(?P<value>.*)$", re.S)
_FLAG = re.compile(r"^-{1,2}(?P<name>[A-Za-z][\w.-]*)$")
_WORD = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)$")
# Bounded repeats keep every pattern linear in the text's length (a 100,000-character argument).
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]{0,31}://[^/\s:@]{0,256}):(?P<password>[^/\s@]+)@")
_QUERY = re.compile(r"(?P<head>[?&;](?P<name>[\w.-]+)=)(?P<value>[^&#;\s]+)")
_HEADER = re.compile(r"(?i)\b(?P<head>(?:proxy-)?authorization|x-api-key|api-key|x-auth-token|cookie)"
                     r"(?P<sep>\s*[:=]\s*)(?P<value>\S.*)$", re.S)
_BEARER = re.compile(r"(?i)\b(?P<head>bearer|basic)\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})")
_TOKENS = re.compile(
    r"\bhf_[A-Za-z0-9]{30,}"
    r"|\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|\bgithub_pat_\w{22,}"
    r"|\bglpat-[\w-]{20,}"
    r"|\bxox[abprs]-[\w-]{10,}"
    r"|\bsk-[A-Za-z0-9_-]{20,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
    r"|\bAIza[0-9A-Za-z_-]{35}"
    r"|\beyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]+"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_NAMES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def is_secret_name(name: str) -> bool:
    """Whether a flag or variable called ``name`` holds a secret (its last word is a secret word)."""
    words = [w for w in _NAME_WORDS.split(name.strip("-").lower()) if w]
    return bool(words) and words[-1] in SECRET_WORDS


def redact_text(text: str) -> str:
    """``text`` with URL passwords and secret query values, header values and known token shapes
    replaced by ``REDACTED``."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}:{REDACTED}@", text)
    text = _QUERY.sub(lambda m: m["head"] + REDACTED if is_secret_name(m["name"]) or m["name"].lower() == "sig"
                      else m.group(), text)
    text = _HEADER.sub(lambda m: f"{m['head']}{m['sep']}{REDACTED}", text)
    text = _BEARER.sub(lambda m: f"{m['head']} {REDACTED}", text)
    return _TOKENS.sub(REDACTED, text)


def redact_args(args: list[str]) -> list[str]:
    """Redact a decoded argument vector (rules in the module docstring); same length as ``args``."""
    out: list[str] = []
    secret_next = False
    for arg in args:
        if secret_next and not arg.startswith("-"):
            out.append(REDACTED)
            secret_next = False
            continue
        secret_next = False
        if (m := _FLAG_ASSIGN.match(arg)) and is_secret_name(m["name"]):
            out.append(f"{m['name']}={REDACTED}")
            continue
        if (m := _FLAG.match(arg) or _WORD.match(arg)) and is_secret_name(m["name"]):
            secret_next = True
        out.append(redact_text(arg))
    return out


def escape_controls(text: str) -> str:
    """Control characters as visible escapes: newline -> ``\\n``, ESC -> ``\\x1b``."""
    return _CONTROL.sub(lambda m: _CONTROL_NAMES.get(m.group(), f"\\x{ord(m.group()):02x}"), text)


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters plus the marker ``…[+N chars]`` when it is longer."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[+{len(text) - limit} chars]"


def safe_command(cmdline: bytes) -> str:
    """A ``/proc/<pid>/cmdline`` (NUL-separated arguments) as one exportable line.

    Returns the arguments decoded, redacted, escaped, cut and joined by single spaces (as ``ps``
    prints them); an empty string for an empty command line (kernel threads).
    """
    raw = cmdline[:-1] if cmdline.endswith(b"\0") else cmdline
    if not raw:
        return ""
    args = [a.decode("utf-8", "backslashreplace") for a in raw.split(b"\0")]
    return cut(" ".join(cut(escape_controls(a), MAX_ARG_CHARS) for a in redact_args(args)), MAX_COMMAND_CHARS)


def safe_text(text: str, limit: int = MAX_NAME_CHARS) -> str:
    """Any other process-controlled string (process name, kernel message): redacted, escaped, cut."""
    return cut(escape_controls(redact_text(" ".join(redact_args(text.split(" "))))), limit)
