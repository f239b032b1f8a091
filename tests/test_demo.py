"""`synth-tui demo --no-tui` end to end: real servers, a real RL loop, the SDK's lines."""

from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_demo_headless_succeeds_and_the_score_rises(tmp_path):
    exe = Path(sys.executable).with_name("synth-tui")
    workdir = tmp_path / "demo"
    result = subprocess.run([str(exe), "demo", "--no-tui", "--workdir", str(workdir)],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "Verification OK" in out and "Task app healthy" in out
    assert "Final status: succeeded" in out
    scores = [float(s) for s in re.findall(r"\[metric\] train\.mean_score=([0-9.]+)", out)]
    assert len(scores) >= 5
    assert scores[0] < 0.5 and scores[-1] > scores[0] + 0.3, scores
    evals = [float(s) for s in re.findall(r"\[metric\] eval\.mean_score=([0-9.]+)", out)]
    assert evals and evals[-1] >= 0.8
    env_path = workdir / ".env"
    assert stat.S_IMODE(env_path.stat().st_mode) == 0o600
    secrets = [line.split("=", 1)[1] for line in env_path.read_text().splitlines()
               if line.startswith(("SYNTH_API_KEY", "ENVIRONMENT_API_KEY"))]
    for secret in secrets:
        assert secret not in out and secret not in result.stderr


def test_demo_reuses_its_folder(tmp_path):
    exe = Path(sys.executable).with_name("synth-tui")
    workdir = tmp_path / "demo"
    for _ in range(2):
        result = subprocess.run([str(exe), "demo", "--no-tui", "--workdir", str(workdir), "--poll-timeout", "0.5"],
                                capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert result.returncode in (0, 4), result.stderr[-2000:]
        assert "Traceback" not in result.stderr
