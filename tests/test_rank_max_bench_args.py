"""benchmarks/rank_max_statistics.py refuses a results path that is not a file in one line, exit 2, before any probe
launch (an unexpanded shell glob used to end in a FileNotFoundError traceback)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_missing_results_file_is_one_line_exit_2(tmp_path):
    missing = tmp_path / "r1" / "*.results.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rank_max_statistics.py"), "--summary",
                           "--probe", "1", str(missing)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"results: no such file {str(missing)!r}; "
                                                "pass results files written by trainplan execute"]
    assert "Traceback" not in done.stderr and done.stdout == ""
