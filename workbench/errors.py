"""One exception type for mistakes a user can fix: the CLI prints its message as one line, no traceback."""


class WorkbenchError(RuntimeError):
    """A clear, one-line error that names the input and says what to do."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message as one line (its type's name when it has none), at most `limit` characters.

    The one way the workbench shortens a library's multi-line error into the line it shows a user.
    """
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__


def with_type(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line`` (just ``Type`` without a message): for errors whose type is half the story."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:limit]}" if text else type(exc).__name__
