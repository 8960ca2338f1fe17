"""One error type for every bad input: it names the field and the problem in one line."""

# every character str.splitlines() breaks a line at, written as its escape so that a message quoting the user's
# input (a strategy string with a newline, a file name) stays one line
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(text: str) -> str:
    return str(text).translate(_LINE_BREAKS)


class AsapError(ValueError):
    """Bad input. ``str(err)`` is ``"<field>: <problem>"``, one line, what the CLI prints before exiting 2."""

    def __init__(self, field: str, problem: str):
        self.field = one_line(field)
        self.problem = one_line(problem)
        super().__init__(f"{self.field}: {self.problem}" if self.field else self.problem)
