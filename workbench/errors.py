"""One exception type for mistakes a user can fix: the CLI prints its message as one line, no traceback."""


class WorkbenchError(RuntimeError):
    """A clear, one-line error that names the input and says what to do."""
