"""``asap.cli.coerce``: an option's plain value coerced without Pydantic gives what Typer's own adapter gives, the
rest goes to that adapter (its errors unchanged), and a small ``asap estimate`` imports neither Pydantic nor
PyYAML."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer._adapters import build_adapter
from typer.models import OptionInfo

from asap.cli.coerce import MISSING, plain_value

TEXTS = ["0", "7", "32", "-5", "123456789012345678", "1234567890123456789", "032", "+3", " 4", "4 ", "1_000",
         "1.5", "-0.25", "2.", ".5", "1e3", "1E-2", "2.5e+07", "1e400", "inf", "nan", "-0", "0.0", "abc", "",
         "0x10", "1,000", "١٢"]
VALUES = [*TEXTS, 0, 3, -2, 1.5, 0.0, True, False, None, [1]]


def adapter_result(annotation, value, low=None, high=None):
    """What Typer's Pydantic adapter returns for ``value`` (or the exception it raises, by type)."""
    adapter = build_adapter(annotation, OptionInfo(min=low, max=high))
    try:
        return adapter.validate_python(value)
    except Exception as e:  # noqa: BLE001 - compared by type: the fast path must not take a value it refuses
        return type(e)


@pytest.mark.parametrize("annotation", [str, bool, int, float])
@pytest.mark.parametrize("bounds", [(None, None), (1.0, None), (0.0, 100.0)])
def test_fast_path_equals_typers_adapter(annotation, bounds):
    if annotation in (str, bool) and bounds != (None, None):
        return  # bounds are for numbers
    taken = 0
    for value in VALUES:
        fast = plain_value(annotation, value, *bounds)
        if fast is MISSING:
            continue
        taken += 1
        expected = adapter_result(annotation, value, *bounds)
        assert fast == expected and type(fast) is type(expected), (annotation, bounds, value)
    assert taken >= (2 if annotation is bool else 3)  # the common values do take the fast path


def test_fast_path_leaves_the_odd_values_to_the_adapter():
    for text in ("1_000", " 4", "+3", "032", "inf", "nan", "1e400"):
        assert plain_value(int, text) is MISSING and plain_value(float, text) is MISSING
    assert plain_value(int, "1234567890123456789") is MISSING  # past 18 digits
    assert plain_value(float, "0.5", 1.0) is MISSING  # out of range: the adapter's error names the bound
    assert plain_value(int, True) is MISSING and plain_value(float, True) is MISSING


def run_asap(*args: str) -> subprocess.CompletedProcess:
    code = ("import json, sys; from asap.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)\n"
            "sys.exit(code)")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)


def test_small_estimate_imports_neither_pydantic_nor_yaml():
    done = run_asap("estimate", "-m", "llama3-8b", "-c", "dgx-h100-1node", "-b", "32", "-s", "4096", "-S", "tp2",
                    "--moe-imbalance", "1.0", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["strategy"]["tp"] == 2
    loaded = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert not {"pydantic", "pydantic_core", "yaml"} & loaded


@pytest.mark.parametrize(("args", "message"), [
    (["-b", "abc"], "Invalid value for '--global-batch' / '-b': Input should be a valid integer, unable to parse "
                    "string as an integer"),
    (["-b", "32", "--moe-imbalance", "0.5"], "Invalid value for '--moe-imbalance': Input should be greater than or "
                                              "equal to 1"),
])
def test_a_value_the_fast_path_refuses_gets_typers_error(args, message):
    done = run_asap("estimate", "-m", "llama3-8b", "-c", "dgx-h100-1node", "-s", "4096", *args)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == f"error: {message}"
