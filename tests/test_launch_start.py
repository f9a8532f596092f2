"""How ranks start (executor.launch.StartMethod, executor/rank_process.py): gloo ranks forked from a forkserver
that imported torch, NCCL ranks spawned; a forked rank sees the caller's environment at launch time, not the
server's (frozen when it started)."""

from __future__ import annotations

import os

import pytest

from executor import launch
from executor.launch import StartMethod
from executor.rank_process import backend_flag


def _env_and_start(rank: int, world: int, name: str) -> tuple:
    return os.environ.get(name), world


def test_gloo_forks_from_the_server_and_nccl_spawns():
    assert StartMethod.for_backend("gloo") is StartMethod.FORKSERVER
    assert StartMethod.for_backend("nccl") is StartMethod.SPAWN


@pytest.mark.parametrize("argv, name", [([], None), (["plan.json", "--backend", "nccl"], "nccl"),
                                        (["--backend=gloo", "--steps", "2"], "gloo")])
def test_the_backend_flag_is_read_in_either_spelling(argv, name):
    assert backend_flag(argv) == name


@pytest.mark.multiproc
def test_a_forked_rank_sees_the_callers_environment_at_launch(monkeypatch):
    monkeypatch.setenv("TRAINPLAN_TEST_START", "first")
    assert launch.run(_env_and_start, 2, ("TRAINPLAN_TEST_START",))[1][0] == "first"  # the server is running now
    monkeypatch.setenv("TRAINPLAN_TEST_START", "second")
    results = launch.run(_env_and_start, 2, ("TRAINPLAN_TEST_START",))
    assert [r[0] for r in results] == ["second", "second"] and results[0][1] == 2


def _write_stderr(rank: int, world: int) -> int:
    os.write(2, f"rank {rank} of {world} on stderr\n".encode())  # one write: print's text and newline could interleave
    return rank


@pytest.mark.multiproc
def test_a_forked_rank_writes_to_the_callers_stderr_at_launch(tmp_path):
    """The server keeps the streams it started with; a rank must write where its launcher's fd 2 points now
    (pytest's capfd, a notebook, a redirect between launches: the calibrate CLI's progress lines)."""
    launch.run(_write_stderr, 2)  # the server is running now, with this process's fd 2 of this moment
    path = tmp_path / "stderr.txt"
    with open(path, "w") as moved:
        saved = os.dup(2)
        os.dup2(moved.fileno(), 2)
        try:
            launch.run(_write_stderr, 2)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    assert sorted(path.read_text().splitlines()) == ["rank 0 of 2 on stderr", "rank 1 of 2 on stderr"]
