"""Make text a process exposes safe to leave the node: secrets redacted, controls escaped, length cut.

Every string the agent exports that a process controls (its command line, its name, the process
name and message in a kernel-log line) goes through here before it reaches ``/metrics`` or
``/snapshot``. Three steps, in this order, argument by argument:

1. **Decode**: ``/proc/<pid>/cmdline`` bytes as UTF-8; an invalid byte becomes the four
   characters ``\\xff`` (Python's ``backslashreplace``).
2. **Redact** (``REDACTED`` replaces the secret, the rest stays). Rules on the argument vector:
   - the value of a flag or variable whose name ends in a secret word (``--hf_token X``,
     ``--token=X``, ``HF_TOKEN=X``, ``aws_secret_access_key X``, ``--hfToken X``,
     ``-Dx.keyStorePassword=X``): the name is split on ``-``, ``_``, ``.`` and camelCase humps and
     only its last word counts, so ``--token-budget 100`` and ``--max_tokens 4096`` stay as they
     are; a value starting with ``-`` is still a value (only ``--word`` or a two-character ``-x``
     is taken for the next flag);
   - short flags that mean a password for the tool that reads them (``sshpass -p X``,
     ``mysql -pX``, ``redis-cli -a X``, ``zip -P X``, ``-p`` after ``login``), and the password
     of ``curl -u user:X``;
   - positional arguments after a ``login`` subcommand (``wandb login KEY``) that are not a
     host name or URL;
   - the positional argument a known tool takes as a password (``POSITIONAL_SECRETS``):
     ``htpasswd -b FILE USER PASSWORD`` (``-nb USER PASSWORD``), ``mysqladmin password NEW``,
     ``rabbitmqctl add_user USER PASSWORD`` (and ``change_password``, ``authenticate_user``),
     ``openssl passwd PASSWORD``, ``redis-cli AUTH [USER] PASSWORD``;
   - an argument holding spaces is a shell string (``bash -c "export HF_TOKEN=X && …"``): it is
     split into words (quotes and ``;``, ``&&``, ``|`` respected) and the same rules run on them,
     so a secret assignment is one word however its value is quoted (``HF_TOKEN="a b" python
     train.py`` keeps ``python train.py``) and a quoted value keeps its quotes.
   Rules on the text of each argument (``redact_text``):
   - PEM blocks (``-----BEGIN … PRIVATE KEY-----``), secret JSON members (``"password": "X"``),
     ``Authorization``-style headers and ``Bearer`` tokens;
   - URL user information: the password (``https://user:<redacted>@host``, an ``@`` inside the
     password included) or a lone token (``https://<redacted>@host``); Slack and Discord webhook
     paths;
   - ``NAME=VALUE`` pairs inside an argument with a secret name (query strings, connection
     strings such as ``…;AccountKey=X;…``, mount options), and openssl's ``pass:X``;
   - well-known token shapes anywhere (Hugging Face ``hf_…``, GitHub ``ghp_…``/``github_pat_…``,
     GitLab ``glpat-…``, Slack ``xox?-…``, OpenAI ``sk-…``, AWS ``AKIA…``/``ASIA…``, Google
     ``AIza…``, Vault ``hvs.…``, npm, PyPI, Stripe, JSON Web Tokens);
   - a bare AWS secret key (40 characters of base64 with a high entropy), and any other token
     that looks random (``looks_random``): 20 or more characters of letters, digits and ``+_=-``
     with a high per-character entropy and frequent changes between lower case, upper case and
     digits (path segments between ``/`` are judged one by one). Hexadecimal strings are left
     alone: they are the shape of hashes, commit ids and container ids, which are not secrets.
     ``benchmarks/redaction_false_positives.py`` measures how often this rule touches text that
     holds no secret.
3. **Escape and cut**: control characters (C0, DEL, C1, e.g. newline or the ESC of an ANSI
   colour) and the invisible and bidirectional formatting characters (U+200B-U+200F,
   U+2028-U+202E, U+2060-U+2069, U+FEFF, U+061C: text that reads one way and runs another)
   become visible escapes (``\\n``, ``\\x1b``, ``\\u202e``), as ``ps`` and htop print controls, so
   no label value or table cell can move a terminal's cursor or reorder what it shows; an
   argument longer than ``MAX_ARG_CHARS`` and a command line longer than ``MAX_COMMAND_CHARS``
   are cut, ending in ``…[+N chars]`` (N = characters removed).

The process environment is never read. Standard library only. Every pattern is linear in the
text's length (bounded repeats; a 100,000-character argument costs about a millisecond).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

REDACTED = "<redacted>"
#: Longest argument kept whole, in characters (after redaction and escaping).
MAX_ARG_CHARS = 256
#: Longest command line kept whole, in characters.
MAX_COMMAND_CHARS = 1024
#: Longest process name or other short field, in characters.
MAX_NAME_CHARS = 128
#: Shell strings inside shell strings are split this deep (``bash -c "ssh h 'X=1 cmd'"``).
MAX_SHELL_DEPTH = 3

#: Last words of a flag or variable name whose value is a secret.
SECRET_WORDS = frozenset(
    {
        "token",
        "password",
        "passwd",
        "pwd",
        "pass",
        "secret",
        "key",
        "apikey",
        "credential",
        "credentials",
        "auth",
        "passphrase",
        "signature",
    }
)
#: Endings of a one-word lower-case name that still name a secret (``--hftoken``, ``DBPASSWORD``,
#: ``--clientsecret``, ``accountkey``); ``key`` alone is not one (``--monkey``, ``--hotkey``).
SECRET_SUFFIXES = (
    "token",
    "password",
    "passwd",
    "secret",
    "passphrase",
    "apikey",
    "accesskey",
    "secretkey",
    "privatekey",
    "accountkey",
    "credentials",
    "credential",
    "signature",
)
#: Tools whose short flag (the letter) takes a password: ``sshpass -p X``, ``mysql -pX``.
PASSWORD_SHORT_FLAGS: dict[str, str] = {
    **dict.fromkeys(
        (
            "sshpass",
            "mysql",
            "mysqldump",
            "mysqladmin",
            "mysqlimport",
            "mysqlshow",
            "mysqlcheck",
            "mariadb",
            "mariadb-dump",
            "mariadb-admin",
            "7z",
            "7za",
            "7zz",
            "7zr",
        ),
        "p",
    ),
    "redis-cli": "a",
    "zip": "P",
    "unzip": "P",
}
#: Tools whose flag takes ``user:password`` (the part after the first colon is the secret).
USERPASS_FLAGS: dict[str, frozenset[str]] = {"curl": frozenset({"-u", "--user", "-U", "--proxy-user"})}


@dataclass(frozen=True)
class Positional:
    """Where a tool takes a secret as a positional argument (a word that is not a flag).

    Attributes:
        after: count positionals only after one of these words (a subcommand, any case); empty:
            from the tool's name on.
        index: the secret's place among those positionals, from 1; 0: every one.
        if_flag: only when a short-flag cluster holds this letter (``htpasswd -b``).
        index_with: ``(letter, index)``: the place instead when a cluster also holds that letter.
        arg_flags: flags that take the next word (not a positional).
    """

    after: frozenset[str] = frozenset()
    index: int = 1
    if_flag: str = ""
    index_with: tuple[str, int] | None = None
    arg_flags: frozenset[str] = frozenset()


#: Tools whose password is a positional argument (each documented so by its manual page).
POSITIONAL_SECRETS: dict[str, Positional] = {
    "htpasswd": Positional(index=3, if_flag="b", index_with=("n", 2), arg_flags=frozenset({"-C", "-r"})),
    "mysqladmin": Positional(after=frozenset({"password"})),
    "rabbitmqctl": Positional(after=frozenset({"add_user", "change_password", "authenticate_user"}), index=2),
    "openssl": Positional(after=frozenset({"passwd"}), index=0, arg_flags=frozenset({"-salt", "-in"})),
    "redis-cli": Positional(after=frozenset({"auth"}), index=0),
}
_TOOLS = frozenset(PASSWORD_SHORT_FLAGS) | frozenset(USERPASS_FLAGS) | frozenset(POSITIONAL_SECRETS)


class _PositionalSecret:
    """Follows one tool's words (``POSITIONAL_SECRETS``) and says which word is its secret."""

    def __init__(self, rule: Positional) -> None:
        self.rule = rule
        self.counting = not rule.after
        self.count = 0
        self.letters = ""
        self.skip_next = False

    def secret(self, word: str) -> bool | None:
        """Whether ``word``, the next word of the tool's command, is its secret; ``None`` when it is
        the subcommand that starts the count (no other rule should take ``passwd`` for a secret's name)."""
        rule = self.rule
        if self.skip_next:
            self.skip_next = False
            return False
        if word.startswith("-") and len(word) > 1:
            if word in rule.arg_flags:
                self.skip_next = True
            elif not word.startswith("--"):
                self.letters += word[1:]
            return False
        if not self.counting:
            self.counting = word.lower() in rule.after
            return None if self.counting else False
        self.count += 1
        if rule.if_flag and rule.if_flag not in self.letters:
            return False
        index = rule.index_with[1] if rule.index_with and rule.index_with[0] in self.letters else rule.index
        return index == 0 or self.count == index


_NAME_WORDS = re.compile(r"[-_.]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_FLAG_ASSIGN = re.compile(r"^(?P<name>-{1,2}[A-Za-z][\w.-]*|[A-Za-z_][A-Za-z0-9_.]*)=(?P<value>.*)$", re.S)
_FLAG = re.compile(r"^-{1,2}(?P<name>[A-Za-z][\w.-]*)$")
_WORD = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)$")
_NEXT_FLAG = re.compile(r"^(?:--[A-Za-z][\w.-]*(?:=.*)?|-[A-Za-z])$", re.S)
#: A positional argument after ``login`` that is a name, not a host, URL or path.
_LOGIN_SECRET = re.compile(r"^[^\s.:/@=-][^\s.:/@=]*$")
# A shell string's words: operators, or runs of plain characters and quoted parts.
_SHELL_TOKEN = re.compile(r"""&&|\|\||[;|&]|(?:[^\s'";|&]|'[^']{0,65536}'?|"(?:\\.|[^"\\]){0,65536}"?)+""")
_SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "&"})

# -- rules on the text of one argument, applied to the whole argument first ----------------------
_PEM = re.compile(
    r"(?P<begin>-----BEGIN (?P<label>[A-Z0-9 ]{1,64})-----)"
    r"(?:.{0,65536}?(?P<end>-----END (?P=label)-----)|.*)",
    re.S,
)
_JSON_MEMBER = re.compile(
    r"(?P<head>(?P<q>\\?[\"'])(?P<name>[A-Za-z_][\w.-]{0,63})(?P=q)\s{0,8}:\s{0,8})"
    r"(?P<value>\\?\"(?:\\[^\"]|[^\"\\]){0,4096}\\?\"|'(?:\\.|[^'\\]){0,4096}'|[^,}\]\s]{1,4096})"
)
_HEADER = re.compile(
    r"(?i)\b(?P<head>(?:proxy-)?authorization|x-api-key|api-key|x-auth-token|x-vault-token"
    r"|private-token|cookie)(?P<sep>\s{0,8}[:=]\s{0,8})(?P<value>[^\"'\r\n]{1,65536})"
)
_BEARER = re.compile(r"(?i)\b(?P<head>bearer|basic)\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})")
# -- rules on each word ---------------------------------------------------------------------------
_URL = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]{0,31}://)(?P<authority>[^/\s?#]{1,1024})")
_WEBHOOK = re.compile(
    r"(?P<head>\bhttps?://(?:hooks\.slack\.com/(?:services|workflows|triggers)/"
    r"|(?:[\w-]+\.)?discord(?:app)?\.com/api/webhooks/))[\w/-]{1,512}"
)
_ASSIGNMENT = re.compile(
    r"(?:^|(?<=[\s;,&?'\"(]))(?P<head>(?P<name>-{0,2}[A-Za-z_][\w.-]{0,63})\s?=\s?)"
    r"(?P<value>\"[^\"]{0,4096}\"?|'[^']{0,4096}'?|[^\s;,&'\"]{1,65536})"
)
_OPENSSL_PASS = re.compile(r"\bpass:(?P<value>\S{1,4096})")
_TOKENS = re.compile(
    r"\bhf_[A-Za-z0-9]{30,}"
    r"|\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|\bgithub_pat_\w{22,}"
    r"|\bglpat-[\w-]{20,}"
    r"|\bxox[abprs]-[\w-]{10,}"
    r"|\bsk-[A-Za-z0-9_-]{20,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
    r"|\bAIza[0-9A-Za-z_-]{35}"
    r"|\bhv[sbr]\.[\w-]{20,}"
    r"|\bnpm_[A-Za-z0-9]{36}\b|\bpypi-[\w-]{50,}"
    r"|\b[rs]k_(?:live|test)_[0-9A-Za-z]{16,}"
    r"|\beyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]+"
)
#: Runs of characters a random token is made of, long enough to hold one (``/`` separates path
#: segments, each judged on its own).
_RANDOM_CANDIDATE = re.compile(r"[A-Za-z0-9+_=-]{20,}")
#: An AWS secret access key: 40 characters of base64 (``/`` included), judged whole.
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_HEX = re.compile(r"^[0-9a-fA-F-]+$")
#: A hexadecimal part of 6 or more digits between separators (``llama2-7b-3f9a1c2e``: an id).
_HEX_PART = re.compile(r"(?:^|(?<=[-_./+]))[0-9a-fA-F]{6,}(?=[-_./+]|$)")

#: ``looks_random`` thresholds: shortest token (characters, without ``=`` padding), least Shannon
#: entropy (bits per character), least share of neighbouring characters that change class
#: (lower case, upper case, digit, other). Random base62 strings change class at 62 % of places
#: and words in names (``LlamaForCausalLM``, ``site-packages/torch``) at 10-35 %; tuned with
#: ``benchmarks/redaction_false_positives.py``, which prints both rates.
RANDOM_MIN_CHARS = 20
RANDOM_MIN_ENTROPY_BITS = 3.5
RANDOM_MIN_CLASS_CHANGES = 0.4
#: Entropy at which a token counts as random whatever its class changes (a bare AWS secret key,
#: ``wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY``, has 4.66 bits per character; names of 40
#: characters stay near 4.1).
RANDOM_HIGH_ENTROPY_BITS = 4.5

_INVISIBLE = "\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_INVISIBLE}]")
_CONTROL_NAMES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def is_secret_name(name: str) -> bool:
    """Whether a flag or variable called ``name`` holds a secret.

    Its last word decides (split on ``-_.`` and camelCase humps): a secret word (``SECRET_WORDS``),
    or, for a one-word name, a secret ending (``SECRET_SUFFIXES``: ``--hftoken``).
    """
    words = [w for w in _NAME_WORDS.split(name.strip("-")) if w]
    if not words:
        return False
    last = words[-1].lower()
    return last in SECRET_WORDS or last.endswith(SECRET_SUFFIXES)


def _class(ch: str) -> int:
    return 0 if "a" <= ch <= "z" else 1 if "A" <= ch <= "Z" else 2 if "0" <= ch <= "9" else 3


def randomness(token: str) -> tuple[float, float]:
    """``(entropy, class_changes)`` of ``token``: Shannon entropy in bits per character, and the
    share of neighbouring letters and digits whose class (lower case, upper case, digit) differs
    (separators such as ``-`` and ``/`` are skipped: ``meta-llama/Llama-2-7b`` changes at 4 of 14)."""
    n = len(token)
    if n < 2:
        return 0.0, 0.0
    entropy = -sum(c / n * math.log2(c / n) for c in Counter(token).values())
    classes = [k for k in map(_class, token) if k != 3]
    changes = sum(a != b for a, b in zip(classes, classes[1:], strict=False)) / max(1, len(classes) - 1)
    return entropy, changes


def looks_random(token: str) -> bool:
    """Whether ``token`` (letters, digits and ``+/_=-``) looks like a random credential.

    Without its ``=`` padding and its hexadecimal parts between separators (ids, hashes), at
    least ``RANDOM_MIN_CHARS`` characters with at least two of lower case, upper case and digits,
    and either both ``randomness`` figures at or above ``RANDOM_MIN_ENTROPY_BITS`` and
    ``RANDOM_MIN_CLASS_CHANGES``, or an entropy at or above ``RANDOM_HIGH_ENTROPY_BITS``.
    """
    token = _HEX_PART.sub("", token.rstrip("="))
    if len(token) < RANDOM_MIN_CHARS or _HEX.match(token):
        return False
    kinds = {_class(ch) for ch in token}
    if len(kinds & {0, 1, 2}) < 2:
        return False
    entropy, changes = randomness(token)
    return entropy >= RANDOM_HIGH_ENTROPY_BITS or (
        entropy >= RANDOM_MIN_ENTROPY_BITS and changes >= RANDOM_MIN_CLASS_CHANGES
    )


def _aws_secret(token: str) -> bool:
    """Whether a 40-character base64 run is shaped like an AWS secret key: lower case, upper case
    and digits, and an entropy of at least ``RANDOM_HIGH_ENTROPY_BITS``."""
    return len({_class(ch) for ch in token} & {0, 1, 2}) == 3 and randomness(token)[0] >= RANDOM_HIGH_ENTROPY_BITS


def _redact_random(text: str) -> str:
    text = _AWS_SECRET.sub(lambda m: REDACTED if _aws_secret(m.group()) else m.group(), text)
    return _RANDOM_CANDIDATE.sub(lambda m: REDACTED if looks_random(m.group()) else m.group(), text)


def _authority(m: re.Match[str]) -> str:
    """A URL's ``user:password@host`` with the password (or a lone token) redacted."""
    authority = m["authority"]
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return m.group()
    user, colon, _ = userinfo.partition(":")
    return f"{m['scheme']}{user}:{REDACTED}@{host}" if colon else f"{m['scheme']}{REDACTED}@{host}"


def _quoted(value: str) -> str:
    """``REDACTED`` in the quotes ``value`` had (``"x"`` -> ``"<redacted>"``)."""
    for q in ('\\"', '"', "'"):
        if value.startswith(q):
            return f"{q}{REDACTED}{q}"
    return REDACTED


def redact_blocks(text: str) -> str:
    """Secrets that may span spaces, in a whole argument: PEM blocks, secret JSON members,
    ``Authorization``-style header values and ``Bearer``/``Basic`` credentials."""
    text = _PEM.sub(lambda m: f"{m['begin']}{REDACTED}{m['end'] or ''}", text)
    text = _JSON_MEMBER.sub(lambda m: m["head"] + _quoted(m["value"]) if is_secret_name(m["name"]) else m.group(), text)
    text = _HEADER.sub(lambda m: f"{m['head']}{m['sep']}{REDACTED}", text)
    return _BEARER.sub(lambda m: f"{m['head']} {REDACTED}", text)


def redact_text(text: str) -> str:
    """``text`` with every secret the text rules find replaced by ``REDACTED`` (module docstring):
    blocks, URL user information and webhooks, secret ``NAME=VALUE`` pairs, ``pass:X``, known
    token shapes and random-looking tokens."""
    text = redact_blocks(text)
    text = _WEBHOOK.sub(lambda m: m["head"] + REDACTED, text)
    text = _URL.sub(_authority, text)
    text = _ASSIGNMENT.sub(
        lambda m: (
            m["head"] + _quoted(m["value"]) if is_secret_name(m["name"]) or m["name"].lower() == "sig" else m.group()
        ),
        text,
    )
    text = _OPENSSL_PASS.sub(f"pass:{REDACTED}", text)
    text = _TOKENS.sub(REDACTED, text)
    return _redact_random(text)


class _Words:
    """The argument-vector rules over one command (or one shell string's words), word by word.

    Args:
        depth: how deep in shell strings these words are (0: the argument vector itself).
        text_rules: run ``redact_text`` on each word (the argument vector); a shell string runs it
            once over the whole string instead (the same rules, far fewer passes).
    """

    def __init__(self, depth: int = 0, text_rules: bool = True) -> None:
        self.depth = depth
        self.text_rules = text_rules
        self.program: str | None = None
        self.secret_next = False
        self.userpass_next = False
        self.after_login = False
        self.positional: _PositionalSecret | None = None

    def _reset(self) -> None:
        self.program, self.secret_next, self.userpass_next, self.after_login = None, False, False, False
        self.positional = None

    def word(self, word: str) -> str:
        """``word`` made safe, given the words before it (one pair of enclosing quotes kept)."""
        if len(word) >= 2 and word[0] == word[-1] and word[0] in "'\"":
            return word[0] + self._word(word[1:-1]) + word[0]
        return self._word(word)

    def _word(self, word: str) -> str:
        if self.secret_next:
            self.secret_next = False
            if not _NEXT_FLAG.match(word):
                return REDACTED
        if self.userpass_next:
            self.userpass_next = False
            user, colon, _ = word.partition(":")
            if colon and not word.startswith("-"):
                return f"{user}:{REDACTED}"
        if word in _SHELL_OPERATORS:
            self._reset()
            return word
        if self.positional is not None and (secret := self.positional.secret(word)) is not False:
            return REDACTED if secret else word
        base = os.path.basename(word).lower()
        if base in _TOOLS and base != self.program:
            self.program = base
            rule = POSITIONAL_SECRETS.get(base)
            self.positional = _PositionalSecret(rule) if rule else None
            if rule:
                return word  # the tool's name: not a secret's name (htpasswd ends in "passwd")
        elif base == "login":
            self.after_login = True
            return word
        if (m := _FLAG_ASSIGN.match(word)) and is_secret_name(m["name"]):
            if self.depth < MAX_SHELL_DEPTH and not word.startswith("-") and any(ch.isspace() for ch in word):
                return shell_string(word, self.depth + 1)  # VAR="a b" cmd ...: a shell string, not one value
            return f"{m['name']}={_quoted(m['value'])}"
        short = PASSWORD_SHORT_FLAGS.get(self.program or "", "p" if self.after_login else "")
        if short and word.startswith(f"-{short}") and not word.startswith("--"):
            if word == f"-{short}":
                self.secret_next = True
                return word
            return f"-{short}{REDACTED}"
        userpass = USERPASS_FLAGS.get(self.program or "", frozenset())
        if word in userpass:
            self.userpass_next = True
            return word
        if len(word) > 2 and word[:2] in userpass and ":" in word:  # curl -ualice:pass
            return f"{word.partition(':')[0]}:{REDACTED}"
        if (m := _FLAG.match(word) or _WORD.match(word)) and is_secret_name(m["name"]):
            self.secret_next = True
            return word
        if self.after_login and _LOGIN_SECRET.match(word):
            return REDACTED
        if self.depth < MAX_SHELL_DEPTH and any(ch.isspace() for ch in word):
            return shell_string(word, self.depth + 1)
        return redact_text(word) if self.text_rules else word


def _shell_words(text: str) -> Iterator[tuple[str, str]]:
    """``(gap, word)`` pairs of a shell string: the text before each word, and the word."""
    end = 0
    for m in _SHELL_TOKEN.finditer(text):
        yield text[end : m.start()], m.group()
        end = m.end()
    yield text[end:], ""


def shell_string(text: str, depth: int = 1) -> str:
    """A shell string (``bash -c`` script) with its words made safe by the argument-vector rules,
    then the text rules over the whole string."""
    words = _Words(depth, text_rules=False)
    text = redact_blocks(text)
    return redact_text("".join(gap + (words.word(word) if word else "") for gap, word in _shell_words(text)))


def redact_args(args: list[str]) -> list[str]:
    """Redact a decoded argument vector (rules in the module docstring); same length as ``args``."""
    words = _Words()
    return [words.word(redact_blocks(arg)) for arg in args]


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    if ch in _CONTROL_NAMES:
        return _CONTROL_NAMES[ch]
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def escape_controls(text: str) -> str:
    """Control and invisible/bidirectional formatting characters as visible escapes: newline ->
    ``\\n``, ESC -> ``\\x1b``, RIGHT-TO-LEFT OVERRIDE -> ``\\u202e``."""
    return _CONTROL.sub(_escape, text)


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
    """Any other process-controlled string (process name, kernel message): redacted as a shell
    string would be, escaped, cut."""
    return cut(escape_controls(shell_string(text, 0) if text else text), limit)
