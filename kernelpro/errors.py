"""One error type for problems the user can fix; the CLI prints its message as one line."""


class KernelProError(Exception):
    """A user-facing error: its message is one line that says what is wrong and what to do."""


class TaskError(KernelProError):
    """A task file is malformed."""
