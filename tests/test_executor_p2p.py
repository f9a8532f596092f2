"""Schedule replay with isend/irecv (gloo, 2 and 4 ranks, tiny tensors) and launcher failure reporting.

The schedules here are written by hand from the textbook algorithms (Patarasuk & Yuan 2009 for the
ring: reduce-scatter then all-gather in p−1 steps each; a binomial tree reduce then broadcast), so
the replay is tested independently of the simulator's registry. Reference: ``dist.all_reduce``
(allclose, rtol 1e-5 / atol 1e-5: float32 sums in a different order).
"""

from __future__ import annotations

import pytest

from executor import launch
from executor.collective_bench import check_replays
from executor.p2p import replay_schedule
from simulator.collectives.base import Op, Schedule, Transfer, split
from simulator.errors import SpecError

pytestmark = pytest.mark.multiproc


def ring_all_reduce(p: int, nbytes: int) -> Schedule:
    """Ring: step s of reduce-scatter sends slice (i−s) mod p to i+1 (add); all-gather forwards (write)."""
    slices = split(nbytes, p)
    transfers = []
    for s in range(p - 1):
        for i in range(p):
            off, n = slices[(i - s) % p]
            transfers.append(Transfer(step=s, src=i, dst=(i + 1) % p, offset=off, nbytes=n, reduce=True))
    for s in range(p - 1):
        for i in range(p):
            off, n = slices[(i + 1 - s) % p]
            transfers.append(Transfer(step=p - 1 + s, src=i, dst=(i + 1) % p, offset=off, nbytes=n))
    return Schedule(op=Op.ALL_REDUCE, algorithm="ring", ranks=tuple(range(p)), nbytes=nbytes,
                    transfers=tuple(transfers))


def tree_all_reduce(p: int, nbytes: int) -> Schedule:
    """Binomial tree: at level k rank i (i mod 2^(k+1) = 2^k) adds its buffer into i − 2^k; then mirror."""
    levels = max(1, (p - 1).bit_length())
    up = []
    for k in range(levels):
        for i in range(p):
            if i % (2 ** (k + 1)) == 2 ** k:
                up.append((k, i, i - 2 ** k))
    transfers = [Transfer(step=k, src=i, dst=j, offset=0, nbytes=nbytes, reduce=True) for k, i, j in up]
    for k, i, j in up:
        transfers.append(Transfer(step=2 * levels - 1 - k, src=j, dst=i, offset=0, nbytes=nbytes))
    return Schedule(op=Op.ALL_REDUCE, algorithm="tree", ranks=tuple(range(p)), nbytes=nbytes,
                    transfers=tuple(transfers))


def pairwise_all_to_all(p: int, nbytes: int) -> Schedule:
    """Step s: rank i sends its slice (i+s) mod p to rank (i+s) mod p, into that rank's slice i."""
    slices = split(nbytes, p)
    transfers = []
    for s in range(1, p):
        for i in range(p):
            j = (i + s) % p
            transfers.append(Transfer(step=s - 1, src=i, dst=j, offset=slices[j][0], nbytes=slices[j][1],
                                      dst_offset=slices[i][0]))
    return Schedule(op=Op.ALL_TO_ALL, algorithm="pairwise", ranks=tuple(range(p)), nbytes=nbytes,
                    transfers=tuple(transfers))


HAND_SIZES = [4, 12, 36, 1024]
"""4 B (one element: empty slices), 12 B and 36 B (9 elements over 4 ranks: slices 3,2,2,2), 1 KiB (even)."""
SIMULATOR_SIZES = [4, 36, 1000, 4096]
"""1000 B = 250 elements: uneven slices over 4 ranks."""


def _hand_schedules(p: int) -> list[Schedule]:
    return [ring_all_reduce(p, n) for n in HAND_SIZES] + [tree_all_reduce(p, n) for n in HAND_SIZES]


def _simulator_schedules(p: int) -> list[Schedule]:
    from executor.collective_bench import local_cluster
    from simulator.collectives import registry

    cluster = local_cluster(p)
    return [registry.build_schedule(cluster, list(range(p)), Op.ALL_REDUCE, n, a)
            for a in ("ring", "tree") for n in SIMULATOR_SIZES]


@pytest.fixture(scope="module")
def all_reduce_errors():
    """Per process count, one launch replays both the hand-written and the simulator's all-reduce schedules
    (``check_replays`` checks each schedule on its own inputs, so sharing the launch changes no comparison;
    it saves a process start-up, about 2 s of CPU per rank). Returns {p: (hand errors, simulator errors)}."""
    out = {}
    for p in (2, 4):
        hand, sim = _hand_schedules(p), _simulator_schedules(p)
        errors = check_replays(Op.ALL_REDUCE, hand + sim, p, seed=p)
        assert len(errors) == len(hand) + len(sim)
        out[p] = (errors[:len(hand)], errors[len(hand):])
    return out


@pytest.mark.parametrize("p", [2, 4])
def test_ring_and_tree_replays_equal_dist_all_reduce(all_reduce_errors, p):
    hand, _ = all_reduce_errors[p]
    assert len(hand) == 2 * len(HAND_SIZES)
    assert max(hand) < 1e-5


def test_all_to_all_replay_uses_separate_buffers_and_dst_offset():
    errors = check_replays(Op.ALL_TO_ALL, [pairwise_all_to_all(4, 64)], 4)
    assert errors == [0.0]  # pure copies: bit-identical


def _swap_worker(rank, world):
    import torch

    # Step 0: 0→1 and 1→0 overwrite the whole buffer. With reads from the start-of-step snapshot the
    # buffers swap; a replay that applied rank 1's receive before its send would send 0's data back.
    schedule = Schedule(op=Op.SEND_RECV, algorithm="swap", ranks=(0, 1), nbytes=8, transfers=(
        Transfer(step=0, src=0, dst=1, offset=0, nbytes=8), Transfer(step=0, src=1, dst=0, offset=0, nbytes=8)))
    return replay_schedule(schedule, torch.full((2,), float(rank)), rank).tolist()


def test_transfers_of_a_step_read_the_start_of_step_buffer():
    assert launch.run(_swap_worker, 2) == [[1.0, 1.0], [0.0, 0.0]]


def test_replay_rejects_a_tensor_of_the_wrong_size():
    import torch

    with pytest.raises(SpecError, match="schedule is for 16"):
        replay_schedule(ring_all_reduce(2, 16), torch.zeros(3), 0)


def test_replay_rejects_offsets_off_the_element_grid():
    import torch

    bad = Schedule(op=Op.ALL_REDUCE, algorithm="bad", ranks=(0, 1), nbytes=8,
                   transfers=(Transfer(step=0, src=0, dst=1, offset=2, nbytes=4),))
    with pytest.raises(SpecError, match="element boundaries"):
        replay_schedule(bad, torch.zeros(2), 0)


def _fail_on_rank_one(rank, world):
    import torch
    import torch.distributed as dist

    if rank == 1:
        raise ValueError("deliberate failure on rank one")
    dist.all_reduce(torch.ones(4))  # rank 0 blocks on the dead peer; it must not mask rank 1's error
    return rank


def test_launch_reports_the_first_failure_with_its_rank_and_message():
    with pytest.raises(launch.LaunchError, match="deliberate failure on rank one") as info:
        launch.run(_fail_on_rank_one, 2, pg_timeout_s=20)
    assert info.value.rank == 1
    assert "ValueError" in info.value.detail


def _rank_and_world(rank, world, scale):
    return {"rank": rank, "world": world, "value": scale * rank}


def test_launch_returns_results_in_rank_order():
    assert launch.run(_rank_and_world, 3, (10,)) == [
        {"rank": 0, "world": 3, "value": 0}, {"rank": 1, "world": 3, "value": 10},
        {"rank": 2, "world": 3, "value": 20}]


def test_nccl_without_cuda_is_a_spec_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present: nccl is valid here")
    with pytest.raises(SpecError, match="nccl needs CUDA"):
        launch.run(_rank_and_world, 2, (1,), backend="nccl")


@pytest.mark.gpu
def test_nccl_replay_equals_all_reduce():
    errors = check_replays(Op.ALL_REDUCE, [ring_all_reduce(2, 4096), tree_all_reduce(2, 4096)], 2, backend="nccl")
    assert max(errors) < 1e-4


@pytest.mark.parametrize("p", [2, 4])
def test_simulator_ring_and_tree_schedules_replay_to_dist_all_reduce(all_reduce_errors, p):
    _, sim = all_reduce_errors[p]
    assert len(sim) == 2 * len(SIMULATOR_SIZES)
    assert max(sim) < 1e-5
