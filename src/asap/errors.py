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


def from_validation(err, where: str = "", whole: str = "", every: bool = False) -> AsapError:
    """The one ``AsapError`` of a pydantic ``ValidationError`` (the one validation style of the input models):
    its field is ``where`` + the first error's location, dotted (``whole`` when the error is the whole input's),
    its problem the error's message as its validator wrote it (without pydantic's ``Value error, ``). ``every``
    appends the other errors, ``; location: message`` each, so ``str()`` of the result lists them all."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e.get("loc", ()))
        parts.append((loc, str(e.get("msg", "")).removeprefix("Value error, ")))
    (loc, problem), rest = parts[0], parts[1:] if every else []
    problem += "".join(f"; {f}: {m}" if f else f"; {m}" for f, m in rest)
    return AsapError(f"{where}{loc or whole}" if (loc or whole) else "", problem)


def validated(model, values, where: str = "", whole: str = ""):
    """``model.model_validate(values)`` (a pydantic model), its first error raised as ``from_validation``'s
    ``AsapError``."""
    from pydantic import ValidationError

    try:
        return model.model_validate(values)
    except ValidationError as e:
        raise from_validation(e, where, whole) from None
