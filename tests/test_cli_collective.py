"""``trainplan collective``: the table, JSON rows, the plot, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from trainplan.__main__ import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_issue_example_prints_a_row_per_size_and_algorithm(capsys):
    code, out, _ = run(capsys, "collective", "--cluster", "dgx-h100", "--nodes", "4", "--op", "all-reduce",
                       "--algorithm", "all", "--ranks", "32", "--bytes", "1KB..1GB")
    assert code == 0
    rows = [line for line in out.splitlines()[2:] if line.strip()]
    sizes = 21  # 2^10 .. 2^30
    algorithms = {line.split()[1] for line in rows}
    assert {"ring", "tree", "hierarchical"} <= algorithms
    assert len(rows) == sizes * len(algorithms)


def test_json_rows_carry_the_nccl_tests_fields(capsys):
    code, out, _ = run(capsys, "collective", "--cluster", "dgx-a100", "--nodes", "2", "--algorithm", "ring,tree",
                       "--bytes", "1MB..4MB", "--json")
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 6
    for row in rows:
        assert {"op", "algorithm", "ranks", "bytes", "time_s", "algbw_GBps", "busbw_GBps"} <= row.keys()
        assert row["ranks"] == 16
        # nccl-tests convention: busbw = algbw * 2(p-1)/p for all-reduce.
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 2 * 15 / 16)


def test_ring_crosses_tree_as_size_grows(capsys):
    """Tree wins small messages across many nodes, ring wins large ones (NCCL's tuner behaves the same)."""
    _, out, _ = run(capsys, "collective", "--cluster", "dgx-h100", "--nodes", "16", "--algorithm", "ring,tree",
                    "--bytes", "1KiB..1GiB", "--json")
    rows = json.loads(out)
    time = {(r["algorithm"], r["bytes"]): r["time_s"] for r in rows}
    assert time["tree", 1024] < time["ring", 1024]
    assert time["ring", 2**30] < time["tree", 2**30]


def test_plot_is_written(capsys, tmp_path):
    target = tmp_path / "coll.png"
    code, _, err = run(capsys, "collective", "--cluster", "dgx-h100", "--algorithm", "all", "--bytes", "1KB..1MB",
                       "--plot", str(target))
    assert code == 0 and target.stat().st_size > 10_000
    assert str(target) in err


@pytest.mark.parametrize("argv, field", [
    (["--cluster", "dgx-h10"], "unknown preset 'dgx-h10'"),
    (["--cluster", "dgx-h100", "--bytes", "-5"], "bytes"),
    (["--cluster", "dgx-h100", "--bytes", "1GB..1KB"], "bytes"),
    (["--cluster", "dgx-h100", "--ranks", "64"], "ranks"),
    (["--cluster", "dgx-h100", "--ranks", "1"], "ranks"),
    (["--cluster", "dgx-h100", "--algorithm", "butterfly"], "unknown algorithm 'butterfly'"),
    (["--cluster", "dgx-h100", "--op", "all-to-all", "--algorithm", "tree"], "tree does not implement all-to-all"),
    (["--cluster", "dgx-h100", "--op", "scatter"], "unknown operation"),
    (["--cluster", "dgx-h100", "--algorithm", "nvls", "--nodes", "2"], "nvls does not implement"),
    # measuring CPU gloo processes against an NCCL GPU preset printed err% -98.9 without a word (issue 15)
    (["--cluster", "dgx-h100", "--measure", "--nproc", "2", "--algorithm", "ring"], "cluster: dgx-h100 models nccl, "
                                                                                      "but --measure runs gloo"),
    (["--cluster", "localhost-cpu", "--measure", "--nproc", "10000", "--algorithm", "ring"],
     "nproc: 10000 processes on"),  # past 8 per core: refused before launching anything
    # nothing moves (blocks of 4-byte elements per peer round to 0): was a ZeroDivisionError in algbw
    (["--cluster", "dgx-h100", "--op", "all-to-all", "--bytes", "8"], "bytes: an all-to-all over 8 ranks sends "
                                                                        "whole 4-byte elements to each peer: give "
                                                                        "at least 32 bytes, got 8"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, field):
    code, out, err = run(capsys, "collective", *argv)
    assert code == 2
    assert field in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_malformed_cluster_file_names_the_field(capsys, tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("name: c\nnodes: 1\ngpus_per_node: 8\n"
                   "device: {name: X, peak_tflops: {bf16: 1}, memory_GB: 80, hbm_bw_GBps: 100}\n"
                   "intra_node: {kind: nvswitch, bw_GBps: -3, latency_us: 1}\n")
    code, _, err = run(capsys, "collective", "--cluster", str(bad))
    assert code == 2 and "intra_node.bw_GBps" in err


def test_installed_entry_point_reports_errors_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "trainplan", "collective", "--cluster", "nope"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "known:" in proc.stderr


@pytest.mark.multiproc
def test_measure_puts_measured_beside_estimated(capsys):
    code, out, _ = run(capsys, "collective", "--cluster", "localhost-cpu", "--measure", "--nproc", "2",
                         "--algorithm", "ring,native", "--bytes", "64KB", "--repeats", "3", "--warmup", "1", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["algorithm"] for r in rows] == ["ring", "native"]
    for row in rows:
        assert row["measured_p10_s"] <= row["measured_time_s"] <= row["measured_p90_s"]
        assert row["error_pct"] == pytest.approx((row["time_s"] - row["measured_time_s"]) / row["measured_time_s"] * 100)


@pytest.mark.parametrize("argv, message", [
    (["--measure"], "--nproc"),
    (["--measure", "--nproc", "2", "--ranks", "3"], "differ"),
    (["--algorithm", "native"], "needs --measure"),
    (["--measure", "--nproc", "2", "--backend", "nccl", "--algorithm", "ring"], "nccl"),
])
def test_bad_measure_flags_are_one_line(capsys, argv, message):
    code, _, err = run(capsys, "collective", "--cluster", "localhost-cpu", "--bytes", "64KB", *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flags, words", [
    (["--nodes", "1024", "--algorithm", "direct"], "algorithm: direct costs every pair of ranks and stops at 1,024 ranks (bounded work), "
                                "this group has 8,192"),
    (["--nodes", "1024", "--op", "all-to-all", "--bytes", "1MB"], "no registered algorithm implements all-to-all on this group of 8192 "
                                               "ranks; direct, pairwise cost every pair of ranks and stop at 1,024"),
    (["--algorithm", "ps", "--nodes", "64"], "ps costs every pair of ranks and stops at 256 ranks"),
])
def test_pair_costing_algorithms_are_bounded(capsys, flags, words):
    """Found by the long CLI fuzz run (2026-11-24): `collective --nodes 1024 --algorithm all` (8,192
    ranks) ran past 60 s CPU and 11.8 GB, in the algorithms that cost every rank pair (direct: p² flows;
    ps: one shard per worker). They stop at a stated group size with one line; `all` leaves them out."""
    code, _, err = run(capsys, "collective", "--cluster", "dgx-h100", *flags)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("flags, words", [
    (["--op", "broadcast", "--nodes", "1024"], "ring cost every step window of a chunk pipeline as deep as the group "
                                               "and stop at 1,024 ranks (bounded work)"),
    (["--op", "reduce", "--nodes", "129", "--algorithm", "ring"], "ring costs every step window of a chunk pipeline "
                                                                  "as deep as the group and stops at 1,024 ranks"),
])
def test_chained_broadcast_and_reduce_are_bounded(capsys, flags, words):
    """Found by the long CLI fuzz run (issue 15): `collective --op broadcast --nodes 1024` (8,192 ranks)
    ran past 27 s CPU unfinished: the ring's chained pipeline costs p·Σk step windows. Past 1,024 ranks
    it is refused with one line, before any costing; all-reduce on the ring keeps no bound."""
    code, _, err = run(capsys, "collective", "--cluster", "dgx-a100", *flags)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


def test_ring_bound_is_per_op():
    from simulator.cluster.io import load_cluster
    from simulator.collectives import registry
    from simulator.collectives.base import Op
    cluster = load_cluster("dgx-a100", nodes=129)
    assert "ring" in registry.supporting(Op.BROADCAST, cluster, range(1024))
    assert "ring" not in registry.supporting(Op.BROADCAST, cluster, range(1032))
    assert "ring" not in registry.supporting(Op.REDUCE, cluster, range(1032))
    assert "ring" in registry.supporting(Op.ALL_REDUCE, cluster, range(1032))


def test_all_leaves_out_the_algorithms_past_their_bound(capsys):
    from simulator.cluster.io import load_cluster
    from simulator.collectives import registry
    from simulator.collectives.base import Op
    cluster = load_cluster("dgx-h100", nodes=128)
    assert {"direct", "ps"} <= set(registry.supporting(Op.ALL_REDUCE, cluster, range(256)))
    big = registry.supporting(Op.ALL_REDUCE, cluster, range(1024))
    assert "direct" in big and "ps" not in big and "ring" in big
    assert "direct" not in registry.supporting(Op.ALL_REDUCE, load_cluster("dgx-h100", nodes=129), range(1032))


def test_all_is_bounded_in_ranks(capsys):
    """`--algorithm all` on 8,192 ranks took 82 s of CPU after the pair-costing bound (long fuzz run,
    2026-11-24): refused past 1,024 ranks with one line that names a fix."""
    code, _, err = run(capsys, "collective", "--cluster", "dgx-h100", "--nodes", "1024", "--algorithm", "all")
    assert code == 2 and "'all' over 8,192 ranks" in err and "--algorithm ring,tree" in err, err
