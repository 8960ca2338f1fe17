"""``python -m asap.calibrate --worker CONFIG RANK``: one calibration worker (``asap.calibrate.measure``)."""

import sys

from asap.calibrate.measure import worker_main

if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(worker_main(sys.argv[2], int(sys.argv[3])))
    print("usage: python -m asap.calibrate --worker CONFIG RANK (use `asap calibrate`)", file=sys.stderr)
    sys.exit(2)
