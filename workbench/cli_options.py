"""What every command line parses alike: repeatable KEY=VALUE options (-o, --conf)."""

from __future__ import annotations

from workbench.errors import WorkbenchError


def key_values(pairs: list[str] | None, what: str, example: str, dashes_to_underscores: bool = True) -> dict[str, str]:
    """KEY=VALUE pairs as a dict (`-o max-count=1` becomes max_count); a malformed pair is one line naming it."""
    options = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise WorkbenchError(f"{what} {pair!r} is not KEY=VALUE (e.g. {example})")
        options[key.replace("-", "_") if dashes_to_underscores else key] = value
    return options
