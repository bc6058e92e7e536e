"""The benchmark script's table and report (not its timings): rows, ratios, targets, missing
peers; and the memory bound at its sizes."""

from __future__ import annotations

import functools
import json
import math
import sys

import numpy as np
import pytest

import dml_onnx
from benchmarks import bandwidth, graphs, harness, models, neighbours, run, timeline
from benchmarks.harness import traced_peak
from benchmarks.rows import rows as benchmark_rows


def test_every_target_row_is_there_with_a_peer():
    rows = benchmark_rows(np.random.default_rng(0))
    names = [row.name for row in rows]
    assert len(names) == len(set(names))
    for op in dml_onnx.OPERATORS_BY_NAME:
        assert any(r.op == op and r.tiny for r in rows), op
        assert any(r.op == op and not r.tiny and r.target < 1.5 for r in rows), op
        assert any(r.op == op and "float16" in r.name and r.target == 1.5 for r in rows), op
    assert all(row.peers or row.onnxruntime for row in rows)


def test_table_reports_ratio_target_and_missing_peers():
    met = run.Result("Fold big", "onnxruntime Col2Im", 0.5, ours_ms=2.0, ours_spread=0.1,
                       peer_ms=5.0, peer_spread=0.05, agrees="yes", temporaries=0.25)
    missed = run.Result("Fold tiny", "onnxruntime Col2Im", 2.0, ours_ms=0.03,
                          ours_spread=0.02, peer_ms=0.01, peer_spread=0.02, agrees="yes")
    missing = run.Result("Unfold big", "torch unfold", 0.5, ours_ms=3.0, ours_spread=0.1,
                           agrees="peer missing (torch not importable)")
    assert (met.ratio, met.met) == (0.4, "yes")
    assert missed.met == "no" and math.isnan(missing.ratio) and missing.met == ""
    lines = run.markdown([met, missed, missing], 5, (0.5, 1.0)).splitlines()
    rows = [line for line in lines if line.startswith("| ") and "benchmark" not in line]
    assert rows[0].split(" | ")[6:10] == ["0.40", "<= 0.5", "yes", "yes"]
    assert rows[1].split(" | ")[6:9] == ["3.00", "<= 2", "no"]
    assert "peer missing (torch not importable)" in rows[2] and " - | - |" in rows[2]
    assert rows[0].endswith("| 0.25 |")


def test_float32_rows_allocate_at_most_one_output_sized_temporary():
    """The issue's memory bound at the benchmark's own sizes: a run's numpy allocations beyond
    its outputs stay within one output-sized temporary, plus 5% for the fixed-size scratch."""
    import dml_onnx

    for row in benchmark_rows(np.random.default_rng(0)):
        if row.tiny or "float16" in row.name:
            continue
        session = dml_onnx.InferenceSession(row.model())
        feeds = row.feeds()
        session.run(None, feeds)  # plans and caches are built on the first call
        peak, outputs = traced_peak(functools.partial(session.run, None, feeds))
        size = sum(o.nbytes for o in outputs if o is not None)
        assert peak - size <= 1.05 * size, (row.name, (peak - size) / size)


def test_the_bandwidth_script_reports_each_streaming_row(capsys, monkeypatch):
    """benchmarks/bandwidth.py runs, and its rows hold positive times and their ratios."""
    module = bandwidth
    monkeypatch.setattr(sys, "argv", ["bandwidth.py", "--threads", "1"])
    monkeypatch.setattr(module, "best_ms", functools.partial(module.best_ms, repeat=1))
    module.main()
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[0] for row in rows] == ["| Fold 3x3, pad 1, [8,576,3136] -> [8,64,56,56]",
                                        "| RoiAlign1 FPN P2, 156 ROIs, X [1,256,200,272]"]
    read, ours = float(rows[0][2]), float(rows[0][4])
    assert read > 0 and ours > 0
    assert abs(float(rows[0][9].rstrip(" |")) - ours / read) < 0.05  # of printed times


def test_the_neighbours_script_reports_ours_alone_and_after_a_plain_session(capsys,
                                                                            monkeypatch):
    """benchmarks/neighbours.py runs and prints one row of positive times."""
    module = neighbours
    monkeypatch.setattr(sys, "argv", ["neighbours.py", "--threads", "1", "--repeat", "1"])
    module.main()
    row = capsys.readouterr().out.splitlines()[2].split(" | ")
    alone, default, quiet = (float(cell.split()[0].strip("| ")) for cell in row[1:4])
    assert row[0] == "| 1" and min(alone, default, quiet) > 0


def test_the_models_script_reports_ratios_failures_and_op_types():
    """benchmarks/models.py's report (not its timings): the ROI nodes' ratio, a failed export,
    dml_onnx op types recognised in profiler names, and the output check."""
    module = models
    done = module.Result("Mask R-CNN, TorchScript, default threshold", 2, stock_ms=100.0,
                         raised_ms=90.0, stock_nodes={"RoiAlign": 20.0, "Conv": 50.0},
                         raised_nodes={"RoiAlign1": 5.0, "Conv": 50.0},
                         round_ratios=[0.95, 0.85, 0.9], agrees="yes")
    failed = module.Result("Mask R-CNN, dynamo, default threshold", 2, error="export failed")
    lines = module.table([done, failed]).splitlines()
    assert lines[2].split(" | ")[2:10] == ["no", "100.0", "90.0", "0.90", "0.85-0.95", "20.0",
                                           "5.0", "0.25"]
    assert "export failed" in lines[3]
    assert "RoiAlign1 — / 5.0" in module.node_table([done])
    assert module._op_type("RoiAlign1_float_int64_unguarded") == "RoiAlign1"
    assert module._op_type("Conv") == "Conv"
    assert module._agree([np.ones(3)], [np.ones(3)]) == "yes"
    assert module._agree([np.ones(3)], [np.zeros(3)]).startswith("no")


def test_the_models_script_takes_the_median_run_of_each_op_type(tmp_path):
    """node_times: warm-up runs left out; per op type the median of the runs' totals, so that
    one slow run does not move it."""
    runs = [(900, 900), (3000, 1000), (1000, 1000), (1200, 50000), (5000, 1000)]  # us each
    trace = []  # 2 warm-up runs, then 3 counted; each RoiAlign1 twice per run
    for align, conv in runs:
        for name, op, dur in (("a", "RoiAlign1_float_int64", align), ("b", "Conv", conv),
                              ("c", "RoiAlign1_float_int64", align)):
            trace.append({"cat": "Node", "name": f"{name}_kernel_time", "dur": dur,
                          "args": {"op_name": op}})
        trace.append({"cat": "Session", "name": "model_run", "dur": 1})

    class Profiled:
        def __init__(self, options):
            self.runs = 0

        def run(self, names, feeds):
            self.runs += 1

        def end_profiling(self):
            assert self.runs == len(runs)
            path = tmp_path / "trace.json"
            path.write_text(json.dumps(trace))
            return str(path)

    times = models.node_times(Profiled, {}, 1, 3, str(tmp_path))
    assert times == {"RoiAlign1": 2.4, "Conv": 1.0}


@pytest.mark.parametrize("kind, nodes", [("unfold", 8), ("roi_align", 4)])
def test_the_graphs_scripts_chains_compute_what_their_stock_forms_compute(kind, nodes):
    """benchmarks/graphs.py's chains (no torch needed): ours in dml_onnx's session and the
    lowered stock model in plain onnxruntime agree, with the dml_onnx nodes it says."""
    import onnx
    import onnxruntime as ort

    import dml_onnx
    stock, ours, feeds = graphs._chain_model(kind)
    model = onnx.load_from_string(ours)
    assert sum(node.domain == dml_onnx.DOMAIN for node in model.graph.node) == nodes
    want = ort.InferenceSession(stock, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = dml_onnx.InferenceSession(ours).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_alternating_rounds_time_each_side_in_turn_on_new_sessions(monkeypatch):
    """harness.alternating: per round a new session of each side in turn, its warm-up runs
    untimed, then the median of each side's timed runs."""
    monkeypatch.setattr(harness, "SETTLE", 0)
    made, ticks = [], iter(range(10**6))
    monkeypatch.setattr(harness.time, "perf_counter", lambda: next(ticks) / 1000)

    class Session:
        def __init__(self, side):
            made.append(side)
            self.side = side

        def run(self, names, feeds):
            if self.side == "slow":  # each timed run of this side takes two ticks more
                next(ticks)
                next(ticks)
            return [self.side]

    medians, outputs, rounds = harness.alternating({"fast": lambda: Session("fast"),
                                                    "slow": lambda: Session("slow")}, {}, 3)
    assert made == ["fast", "slow"] * harness.ROUNDS
    assert outputs == {"fast": ["fast"], "slow": ["slow"]}
    assert medians == pytest.approx({"fast": 1.0, "slow": 3.0})
    assert rounds == {"fast": pytest.approx([1.0] * harness.ROUNDS),
                      "slow": pytest.approx([3.0] * harness.ROUNDS)}
    assert harness.round_ratios(rounds, "slow", "fast") == pytest.approx([3.0] * harness.ROUNDS)
    assert harness.spread_cell([1.04, 0.91, 0.97]) == "0.91-1.04"


def test_the_timeline_makes_each_side_and_restores_the_segments_threads(monkeypatch):
    """benchmarks/timeline.py: a side "segments at N" runs split with every segment at N
    intra-op threads, "one session" as one session, whatever the model's sizes; the route and
    the sizing are the shipped ones again after."""
    from dml_onnx.runtime import plan, segments

    stock, ours, feeds = graphs._chain_model("roi_align")
    made = timeline.sides(stock, ours, 4, ["auto", "1", "one"])
    assert list(made) == ["stock", "ours", "ours, segments at 1", "ours, one session"]
    limits = plan.ONE_SESSION_COPIES, plan.ONE_SESSION_WEIGHTS
    assert made["ours, one session"]()._split is None  # where the suite's limits split it
    assert limits == (plan.ONE_SESSION_COPIES, plan.ONE_SESSION_WEIGHTS)
    at_one = made["ours, segments at 1"]()
    assert {s._sess.session_options.intra_op_num_threads for s in at_one._split.sessions} == {1}
    assert segments.segment_threads(None, 4) == 4
    from dml_onnx._kernels import _threads
    shipped, grain = _threads.launch_work, _threads.GRAIN
    with pytest.raises(RuntimeError), harness.scaled_split_point(4):
        assert _threads.launch_work(16) == 4 * shipped(16) and grain == _threads.GRAIN
        raise RuntimeError
    assert _threads.launch_work is shipped
    shipped = made["ours"]()
    assert {s._sess.session_options.intra_op_num_threads
            for s in shipped._split.sessions} == {2, 4}  # sized by work, and unknown work
    monkeypatch.setattr(timeline.time, "sleep", lambda seconds: None)
    cells = timeline.per_run_ms(made["stock"], feeds, sessions=1, runs=3)
    assert len(cells) == len(timeline.RANGES) and all(c > 0 for c in cells[:3])
    assert math.isnan(cells[3]) and math.isnan(cells[4])


def test_rounds_reach_the_pinned_children_and_the_rounds_they_time(monkeypatch):
    """``--rounds`` sets the alternating rounds of the parent (its header) and is handed to
    every pinned child, which times that many rounds per side."""
    import argparse

    monkeypatch.setattr(harness, "ROUNDS", harness.ROUNDS)  # restored after the test
    parser = argparse.ArgumentParser()
    harness.pinned_arguments(parser, "graphs", "graphs.md")
    args = parser.parse_args(["--rounds", "3", "--cores", "1", "--torch", "no,yes"])
    harness.use_rounds(args)
    assert harness.ROUNDS == 3
    handed = []
    monkeypatch.setattr(harness, "run_pinned",
                        lambda cores, module, argv, result: handed.append(list(argv)) or [])
    harness.run_all_pinned(args, "benchmarks.graphs", ["--repeat", "2"], object)
    assert handed == [["--repeat", "2", "--rounds", "3"],
                      ["--repeat", "2", "--rounds", "3", "--with-torch"]]
    monkeypatch.setattr(harness, "SETTLE", 0)

    class Session:
        def run(self, names, feeds):
            return []

    made = []
    harness.alternating({"a": lambda: made.append("a") or Session()}, {}, 1)
    assert made == ["a"] * 3
    with pytest.raises(SystemExit, match="--rounds 0"):
        harness.use_rounds(parser.parse_args(["--rounds", "0"]))


def test_the_launch_script_times_each_distinct_kernel_call_of_a_graph_alone():
    """benchmarks/launch.py: one run of a graph as one session hands over each distinct
    kernel call (the RoiAlign1 chain's last two share their shapes), which then runs alone
    on its own copies of the inputs; a split point moved for a block is the shipped one
    again after it."""
    from benchmarks import launch
    from dml_onnx._kernels import _threads

    stock, ours, feeds = graphs._chain_model("roi_align")
    found = launch.kernel_calls(ours, feeds, 2)
    assert [label.split(" [")[0] for label, _ in found] == ["RoiAlign1"] * 3
    assert found[0][0].startswith("RoiAlign1 [1, 32, 32, 32], [16, 4], [16]")
    first = found[0][1]()
    assert np.array_equal(found[0][1]()[0], first[0]) and first[0].shape == (16, 32, 16, 16)
    shipped = _threads.launch_work
    with launch.split_point(1, 1.0):
        assert _threads.workers(10**9) == 1
    with launch.split_point(2, 0.5):  # from one grain on (two as shipped)
        assert _threads.thread_limit.get() == 2
        assert _threads.workers(32768) == min(2, _threads.THREADS)
        assert _threads.workers(32767) == 1
    assert _threads.launch_work is shipped and _threads.thread_limit.get() == 0
    order: list[str] = []
    launch.median_us(lambda: order.append("call"), 4, lambda: order.append("before"))
    assert order[-8:] == ["before", "call"] * 4  # untimed calls first, then each timed one
    flush = launch.cache_flush()
    assert flush() == 1 << 26  # it reads every value
