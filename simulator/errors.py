"""The one exception type that bad user input raises anywhere in the simulator.

The CLI turns it into a single line on stderr and exit code 2; its message names the
offending field and, where there is one, the fix.
"""


class SpecError(ValueError):
    """A user-supplied value is invalid. The message names the field and says how to fix it."""

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")
