"""The CLI's time figures: residues of interval sums read as zero, small times in their unit."""

from asap.cli.format import seconds


def test_residues_of_interval_sums_read_as_zero():
    assert seconds(1.7e-18) == "0"
    assert seconds(2.5e-5) == "25.0 µs"
