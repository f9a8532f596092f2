"""The one exception type that bad user input raises anywhere in the simulator.

The CLI turns it into a single line on stderr and exit code 2; its message names the
offending field and, where there is one, the fix. Input that is accepted but no longer means anything
(a retired key) raises no error: it issues a :class:`SpecNote` warning, which the CLI prints as one
``trainplan: note:`` line.
"""


class SpecError(ValueError):
    """A user-supplied value is invalid. The message names the field and says how to fix it."""

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class SpecNote(UserWarning):
    """Accepted input the user should hear about (a retired key whose value is ignored). Issued with
    :func:`warnings.warn`; the message names the field and the fix."""
