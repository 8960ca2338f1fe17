"""One error type for every bad input: it names the field and the problem in one line."""


class AsapError(ValueError):
    """Bad input. ``str(err)`` is ``"<field>: <problem>"``, one line, what the CLI prints before exiting 2."""

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)
