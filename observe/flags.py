"""Command-line flags: the one-line argparse parser, and flags declared once on dataclass fields.

``OneLineParser`` is the parser class of every command (each ``fsdp-observe`` subcommand and the
trainer's rank entry point): a usage mistake raises ``observe.errors.UserError`` instead of
printing argparse's usage block, so it becomes one line, ``error: FIELD: PROBLEM; FIX``.

A setting that is also a flag is spelled once, on its dataclass field::

    seq_len: int = field(default=256, metadata=flag("--seq-len", "tokens per sequence"))

From that one declaration come the parser (``add_flags``: name, type, help text and the
default shown in it), the settings of a command line (``parse_flags`` + ``apply_flags``: only the
flags given, over the dataclass defaults) and the command line of a settings object
(``to_argv``: the flags whose values differ from the defaults), which the launchers use. The
dataclass default is the only default: the parser's are ``argparse.SUPPRESS``, so which flags a
command line really gave can be told (``parse_flags`` returns only those).

Standard library only: a leaf module every package may import.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, NoReturn, TypeVar

from observe.errors import UserError

_UNKNOWN = re.compile(r"unrecognized arguments: (.+)")
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")

T = TypeVar("T")


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage mistakes raise ``UserError`` (one line) instead of printing usage.

    An unknown flag is reported before a missing required one (``--confg x`` is a typo of
    ``--config``, not a missing ``--config``), by the subcommand it was given to (``job render``'s
    own flags, help and did-you-mean), with a did-you-mean from the parser's own flags: a close
    spelling, or the one flag it begins. Subclasses may override ``fallback`` for a
    command-specific fix where no did-you-mean applies.
    """

    def parse_args(  # type: ignore[override]
        self,
        args: typing.Sequence[str] | None = None,
        namespace: argparse.Namespace | None = None,
    ) -> argparse.Namespace:
        """argparse's ``parse_args``, unknown flags first (see the class).

        Raises:
            UserError: the first usage mistake.
        """
        self._refuse_unknown(args, namespace)
        return super().parse_args(args, namespace)

    def add_subparsers(self, **kwargs: Any) -> Any:
        """argparse's ``add_subparsers``; each subcommand's parser reports its own unknown flags."""
        kwargs.setdefault("parser_class", _SubcommandParser)
        return super().add_subparsers(**kwargs)

    def _refuse_unknown(self, args: typing.Sequence[str] | None, namespace: argparse.Namespace | None) -> None:
        """Parse once with no flag required; unknown arguments are then this parser's error."""
        required = [action for action in self._actions if action.required]
        for action in required:
            action.required = False
        try:
            _, unknown = super().parse_known_args(args, argparse.Namespace(**vars(namespace or argparse.Namespace())))
        finally:
            for action in required:
                action.required = True
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")

    def error(self, message: str) -> NoReturn:
        """Raise a ``UserError``; argparse calls this for every mistake.

        ``argument --flag: problem[; fix]`` becomes field ``--flag``; anything else (unknown
        arguments, a missing required flag) is the command's own field. The fix is the one the
        message carries after ``; `` (a ``type=`` function's), else ``hint(message)``.
        """
        field, problem = self.prog, message
        if message.startswith("argument ") and ": " in message:
            names, problem = message.removeprefix("argument ").split(": ", 1)
            field = names.split("/")[-1]
        problem, _, fix = problem.partition("; ")
        raise UserError(field, problem, fix or self.hint(message))

    def hint(self, message: str) -> str:
        """The fix appended to argparse's ``message``: a close flag or choice, else ``--help``."""
        unknown, choice = _UNKNOWN.match(message), _INVALID_CHOICE.search(message)
        close = None
        if unknown:
            close = self.close_flag(unknown.group(1).split()[0].split("=")[0])
        elif choice:
            choices = [c.strip().strip("'") for c in choice.group(2).split(",")]  # quoted before Python 3.12.8
            close = next(iter(difflib.get_close_matches(choice.group(1), choices, n=1, cutoff=0.6)), None)
        if close:
            return f"did you mean {close}? (run '{self.prog} --help' for the flags)"
        return self.fallback(message)

    def fallback(self, message: str) -> str:
        """The fix when no flag or choice is close to what ``message`` names: ``--help``."""
        return f"run '{self.prog} --help' for the flags"

    def close_flag(self, given: str) -> str | None:
        """The long flag ``given`` most likely meant: the closest spelling (difflib ratio ≥ 0.75),
        else the only flag that begins with it (``--nproc`` for ``--nproc-per-node``); or None."""
        if not given.startswith("--") or len(given) < 5:  # at least three letters
            return None
        names = {f.lstrip("-"): f for f in self.flags() if f.startswith("--")}
        close = difflib.get_close_matches(given.lstrip("-"), names, n=1, cutoff=0.75)
        if close:
            return names[close[0]]
        longer = [f for f in names.values() if f.startswith(given)]
        return longer[0] if len(longer) == 1 else None

    def flags(self) -> list[str]:
        """Every long and short option string this parser accepts."""
        return [s for action in self._actions for s in action.option_strings]


class _SubcommandParser(OneLineParser):
    """A subcommand's parser (``job render``): refuses its own unknown flags, so the message names
    the subcommand, its flags and its ``--help``, not the parent's."""

    def parse_known_args(  # type: ignore[override]
        self,
        args: typing.Sequence[str] | None = None,
        namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        self._refuse_unknown(args, namespace)
        return super().parse_known_args(args, namespace)


@dataclasses.dataclass(frozen=True)
class Flag:
    """How one dataclass field appears on a command line (made by ``flag``; see there)."""

    name: str
    help: str
    group: str | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    nargs: str | None = None
    const: Any = None
    parse: Callable[[str], Any] | None = None
    format: Callable[[Any], str] | None = None
    default_text: str | None = None
    env: str | None = None


def flag(
    name: str,
    help: str,
    *,
    group: str | None = None,
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
    nargs: str | None = None,
    const: Any = None,
    parse: Callable[[str], Any] | None = None,
    format: Callable[[Any], str] | None = None,
    default_text: str | None = None,
    env: str | None = None,
) -> dict[str, Flag]:
    """Field metadata declaring the flag of a dataclass field: ``field(..., metadata=flag(...))``.

    Args:
        name: the long option, e.g. ``--seq-len``.
        help: what it sets; the default is appended as ``(default: X)`` from the field.
        group: the ``--help`` section (default: the enclosing dataclass's group in ``add_flags``).
        metavar, choices, nargs, const: as for ``argparse.add_argument``. ``nargs`` is needed for
            list fields (``"+"``); ``nargs="?"`` with ``const`` is a flag with an optional value.
        parse: text → field value (the ``type=`` function); default: the field's type (``int``,
            ``float``, ``str``). A bool field without ``parse`` is an ``on`` switch (store_true).
            ``parse`` may raise ``argparse.ArgumentTypeError("problem; fix")``.
        format: field value → the flag's text on a generated command line; default ``str``.
        default_text: what ``--help`` shows as the default instead of the field's value (for a
            default worked out later, e.g. "torchrun's --rdzv-id, else generated").
        env: an environment variable whose value is the default, when ``apply_flags`` is given
            an environment.
    """
    return {"flag": Flag(name, help, group, metavar, choices, nargs, const, parse, format, default_text, env)}


def iter_flags(cls: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Flag]]:
    """``(path, field, flag)`` for every flag declared on ``cls`` and its nested dataclasses.

    ``path`` is the dotted attribute path (``data.seq_len``); nested dataclass fields (those whose
    type is a dataclass) are walked depth-first in declaration order.
    """
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind) and isinstance(kind, type):
            yield from iter_flags(kind, f"{prefix}{f.name}.")
        elif "flag" in f.metadata:
            yield f"{prefix}{f.name}", f, f.metadata["flag"]


def add_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    groups: Mapping[str, str] | None = None,
    only: Collection[str] | None = None,
) -> None:
    """Add every flag of ``cls`` to ``parser``, in argument groups by ``Flag.group``.

    Args:
        parser: the parser to fill; each flag's ``dest`` is its dotted path and its default is
            ``argparse.SUPPRESS`` (so only given flags reach the namespace).
        cls: a dataclass whose fields (and nested dataclasses' fields) carry ``flag`` metadata.
        groups: the group of the flags of a nested dataclass, by its top-level field name
            (``{"data": "data"}``), for flags that name none themselves.
        only: the paths to add (default: every flag of ``cls``).
    """
    defaults = cls()
    made = {g.title: g for g in parser._action_groups if g.title}  # reuse groups made beforehand
    hints = _hints(cls)
    for path, _, spec in iter_flags(cls):
        if only is not None and path not in only:
            continue
        title = spec.group or (groups or {}).get(path.split(".")[0])
        target: Any = parser
        if title:
            if title not in made:
                made[title] = parser.add_argument_group(title)
            target = made[title]
        kind = hints[path]
        kwargs: dict[str, Any] = {"dest": path, "default": argparse.SUPPRESS, "help": _help(spec, _get(defaults, path))}
        if kind is bool and spec.parse is None:
            kwargs["action"] = "store_true"
        else:
            kwargs["type"] = spec.parse or _scalar(kind)
            kwargs["metavar"] = spec.metavar or spec.name.lstrip("-").upper().replace("-", "_")
            for key in ("choices", "nargs", "const"):
                if getattr(spec, key) is not None:
                    kwargs[key] = getattr(spec, key)
        target.add_argument(spec.name, **kwargs)


def parse_flags(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    """The flags ``argv`` gives, as ``{path: value}`` (a parser filled by ``add_flags``).

    Raises:
        UserError: a usage mistake, when ``parser`` is a ``OneLineParser``.
        SystemExit: argparse's usage error for a plain parser.
    """
    return dict(vars(parser.parse_args(argv)))


def apply_flags(base: T, values: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> T:
    """A copy of the dataclass ``base`` with ``values`` (``{path: value}``) set.

    Args:
        base: the settings to start from (e.g. the class's defaults).
        values: from ``parse_flags``; unknown paths are a programming error (``KeyError``).
        environ: when given, a flag declared with ``env`` and absent from ``values`` takes its
            value from this environment (parsed like the flag's text).

    Raises:
        UserError: such an environment variable's value does not parse (named as the field).
    """
    values = dict(values)
    if environ is not None:
        for path, _, spec in iter_flags(type(base)):
            if spec.env and path not in values and environ.get(spec.env):
                values[path] = _from_env(spec, _hints(type(base))[path], environ[spec.env])
    nested: dict[str, dict[str, Any]] = {}
    own: dict[str, Any] = {}
    for path, value in values.items():
        head, _, rest = path.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            own[head] = value
    for head, inner in nested.items():
        own[head] = apply_flags(getattr(base, head), inner)
    return dataclasses.replace(base, **own)  # type: ignore[type-var]


def to_argv(settings: object, base: object | None = None, explicit: Collection[str] = ()) -> list[str]:
    """The command line that gives ``settings``: each flag whose value differs from ``base``.

    Args:
        settings: a dataclass instance with ``flag`` metadata.
        base: what the parser starts from (default: the class's defaults), so
            ``apply_flags(base, parse_flags(parser, to_argv(s, base))) == s`` for any ``s``
            whose differences a flag can express.
        explicit: paths written out even at their default value (unless ``None`` or an
            on-switch that is off), for a command line people read (a manifest).

    Raises:
        ValueError: a difference no flag can express (an on-switch turned off, a value set back
            to ``None``): a programming error of the caller.
    """
    base = type(settings)() if base is None else base
    hints = _hints(type(settings))
    argv: list[str] = []
    for path, _, spec in iter_flags(type(settings)):
        value, default = _get(settings, path), _get(base, path)
        shown = path in explicit and value is not None and not (hints[path] is bool and spec.parse is None)
        if value == default and not shown:
            continue
        if hints[path] is bool and spec.parse is None:
            if not value:
                raise ValueError(f"{spec.name} is an on-switch; it cannot turn {path} off")
            argv.append(spec.name)
        elif value is None:
            raise ValueError(f"{spec.name} cannot set {path} back to None")
        elif spec.nargs == "+":
            argv += [spec.name, *map(spec.format or str, value)]
        else:
            argv += [spec.name, (spec.format or str)(value)]
    return argv


def flag_names(cls: type) -> dict[str, str]:
    """``{path: flag name}`` of every flag of ``cls`` (``{"data.seq_len": "--seq-len", ...}``)."""
    return {path: spec.name for path, _, spec in iter_flags(cls)}


def _from_env(spec: Flag, kind: Any, text: str) -> Any:
    parse = spec.parse or _scalar(kind)
    try:
        return parse(text)
    except (argparse.ArgumentTypeError, ValueError) as exc:  # the parse of the user's text, nothing else
        problem, _, fix = str(exc).partition("; ")
        raise UserError(
            f"${spec.env}",
            f"{text!r} ({problem})" if parse in (int, float) else problem,
            fix or f"set {spec.env} as you would pass {spec.name}, or unset it",
        ) from None


def _help(spec: Flag, default: Any) -> str:
    shown = spec.default_text
    if shown is None and default is not None and default is not False and default not in ((), []):
        shown = (spec.format or str)(default) if not isinstance(default, (list, tuple)) else ",".join(map(str, default))
    return f"{spec.help} (default: {shown})" if shown else spec.help


def _get(obj: object, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _hints(cls: type) -> dict[str, Any]:
    """``{path: the field's type}`` with ``X | None`` read as ``X`` and ``list[X]`` as ``X``."""
    out = {}
    for path, _, _ in iter_flags(cls):
        owner: Any = cls
        *heads, last = path.split(".")
        for head in heads:
            owner = typing.get_type_hints(owner)[head]
        out[path] = _base_type(typing.get_type_hints(owner)[last])
    return out


def _base_type(kind: Any) -> Any:
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        return _base_type(args[0]) if len(args) == 1 else kind
    if typing.get_origin(kind) in (list, tuple):
        return _base_type(typing.get_args(kind)[0])
    return kind


def _scalar(kind: Any) -> Callable[[str], Any]:
    if kind in (int, float, str):
        return typing.cast(Callable[[str], Any], kind)
    raise TypeError(f"a flag of type {kind!r} needs parse=")
