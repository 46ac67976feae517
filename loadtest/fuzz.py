"""The door's fuzz suite at length: tests/e2e/test_fuzz.py with 10,000 cases (or --cases N).

The suite is the one CI runs with a few hundred cases; this only raises the count and prints
its report: cases tried, failures (hypothesis stops at the first and shrinks it), worker
restarts, and how the answers were spread over statuses. Exit status is pytest's.

    python loadtest/fuzz.py [--cases N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        env = {**os.environ, "MURGW_FUZZ_CASES": str(args.cases), "MURGW_FUZZ_REPORT": report}
        rc = subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/e2e/test_fuzz.py"], cwd=ROOT,
                            env=env).returncode
        result = {}
        if os.path.exists(report):
            with open(report) as fh:
                result = json.load(fh)
    print(f"cases tried: {result.get('cases', '?')}, failures: {0 if rc == 0 else 1}, "
          f"worker restarts: {result.get('restarts', '?')}")
    for status, count in result.get("statuses", {}).items():
        print(f"  {status}: {count}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
