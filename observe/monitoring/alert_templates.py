"""Go-template lookups of the XID catalogue, for the annotations of the XID alerts.

Prometheus renders an alert's annotations with Go's ``text/template`` at every evaluation; the
catalogue (``observe.xid``) is not there, so each XID alert carries, per code it can fire for, the
code's name and NVIDIA's recommended action as a chain of
``{{ if eq $labels.xid "2" "3" }}...{{ else if ... }}...{{ else }}...{{ end }}`` (Go's ``eq``
with several arguments is true when the first equals any of the others). Codes with the same text
share one branch and the most common text is the ``else``, so a class's template stays short
(the application class, 68 codes, is about 3 kB). Only codes of the alert's classes are listed:
an alert can carry no other code.

XID 154 ("GPU recovery action changed") takes the class of the recovery action the driver asks
for (``observe.xid.RECOVERY_ACTION_SEVERITY``), so it may come with any class that action maps to;
its action then reads that class's first action.

Standard library and ``observe.xid`` only.
"""

from __future__ import annotations

from collections import Counter

from observe import xid

#: The XID whose class is the driver's recovery action, not its catalogue entry.
RECOVERY_XID = 154


def codes_of(classes: tuple[str, ...]) -> list[int]:
    """Codes an alert over ``classes`` can carry: the catalogue's codes of those classes, and
    XID 154 when its recovery action can map to one of them (ascending)."""
    found = {code for code, info in xid.CATALOGUE.items() if info.severity in classes}
    if set(xid.RECOVERY_ACTION_SEVERITY.values()) & set(classes):
        found.add(RECOVERY_XID)
    return sorted(found)


def _action(code: int, xid_class: str) -> str:
    if code == RECOVERY_XID and xid_class in xid.SEVERITY_ACTION:
        return f"The driver's recovery action (XID 154) asks for this. {xid.SEVERITY_ACTION[xid_class]}"
    return xid.lookup(code).action


def lookup(label: str, texts: dict[str, str], fallback: str | None = None) -> str:
    """A Go template choosing among ``texts`` (label value → text) by ``$labels.<label>``.

    Args:
        label: the alert label to switch on (``xid``, ``xid_class``).
        texts: label value → the text for it.
        fallback: the text for any other value; ``None`` makes the most common text the ``else``
            (every value the alert can carry is then in ``texts``).

    Returns:
        The plain text when every value has the same text, else an ``if``/``else if`` chain.
        Texts must not contain ``{{``.
    """
    by_text: dict[str, list[str]] = {}
    for value, text in texts.items():
        if "{{" in text:
            raise ValueError(f"text for {value!r} contains a template action")
        by_text.setdefault(text, []).append(value)
    if fallback is None:
        fallback = Counter(texts.values()).most_common(1)[0][0]
        by_text.pop(fallback)
    if not by_text:
        return fallback
    branches = [" ".join(f'"{v}"' for v in values) for values in by_text.values()]
    parts = [
        f"{{{{ {'if' if i == 0 else 'else if'} eq $labels.{label} {values} }}}}{text}"
        for i, (values, text) in enumerate(zip(branches, by_text, strict=True))
    ]
    return "".join(parts) + f"{{{{ else }}}}{fallback}{{{{ end }}}}"


def xid_name(classes: tuple[str, ...]) -> str:
    """Template: the catalogue's name of the alert's XID code, for an alert over ``classes``."""
    return lookup("xid", {str(code): xid.lookup(code).name for code in codes_of(classes)}, fallback="Unknown XID")


def xid_action(classes: tuple[str, ...]) -> str:
    """Template: NVIDIA's recommended action for the alert's XID code, for an alert over ``classes``.

    With one class the code alone decides; over several (dcgm-exporter's critical alert) the
    ``xid_class`` label picks the class first.
    """
    if classes == ("unknown",):
        return xid.UNKNOWN_ACTION
    if len(classes) == 1:
        return lookup("xid", {str(code): _action(code, classes[0]) for code in codes_of(classes)})
    per_class = {cls: xid_action((cls,)) for cls in classes}
    chain = "".join(
        f'{{{{ {"if" if i == 0 else "else if"} eq $labels.xid_class "{cls}" }}}}{text}'
        for i, (cls, text) in enumerate(per_class.items())
    )
    return chain + f"{{{{ else }}}}{xid.UNKNOWN_ACTION}{{{{ end }}}}"
