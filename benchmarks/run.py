"""Time every operator through ``dml_onnx.InferenceSession`` against its native peers, in one run.

    python -m benchmarks.run [--repeat N] [--only TEXT] [--results DIR] [--cores 1,2,16]

Each row runs one ``dml_onnx`` node and then each of its peers on the same inputs (one side's
samples after the other's: see :func:`measure`), and reports the median time of each, the
spread (interquartile range over the median) and the ratio ours / peer against the target.
Peers: onnxruntime's own kernels on the node's standard form (``MaxRoiPool``, ``RoiAlign``,
``LpPool``, ``Col2Im``, ``Pad`` + ``Gather`` for Unfold), ``torch.nn.functional.unfold`` and
torchvision's ``roi_align`` backward when torch and torchvision are importable (they are never
a dependency; rows whose peer is missing say so), and for the float16 rows our own float32 run.
Before timing, every row checks that our output equals the peer's where the specification says
they agree, and measures the memory our run allocates (numpy allocations, by ``tracemalloc``).

With ``--cores``, the rows run once per core count, each in a child process pinned to that many
CPUs (its affinity, so our kernels' threads follow), with onnxruntime's ``intra_op_num_threads``
(ours and the peers' sessions) and torch's ``set_num_threads`` set to the same count: every side
gets the same cores. The report then holds a table per core count and one of how each row
scales.

Writes ``benchmarks.md`` (the tables) to ``--results`` (default: ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import dml_onnx
from benchmarks.harness import (
    RESULTS,
    environment,
    load_average,
    measure,
    run_pinned,
    session_options,
    summary,
    table_head,
    temporaries,
)
from benchmarks.rows import Row, onnxruntime_peer, rows


@dataclass
class Result:
    """One row against one peer: medians in ms, spreads, the output check, our temporaries."""

    row: str
    peer: str
    target: float
    ours_ms: float = math.nan
    ours_spread: float = math.nan
    peer_ms: float = math.nan
    peer_spread: float = math.nan
    agrees: str = ""
    temporaries: float = math.nan  # our peak numpy allocation beyond the outputs, in outputs

    @property
    def ratio(self) -> float:
        return self.ours_ms / self.peer_ms if self.peer_ms else math.nan

    @property
    def met(self) -> str:
        return "" if math.isnan(self.ratio) else ("yes" if self.ratio <= self.target else "no")


def run_row(row: Row, repeat: int, threads: int, log: Callable[[str], None]) -> list[Result]:
    """Our node and its peers on ``threads`` threads: medians, agreement, our temporaries."""
    session = dml_onnx.InferenceSession(row.model(), session_options(threads))
    feeds = row.feeds()
    ours = lambda: session.run(None, feeds)[0]  # noqa: E731
    peers = list(row.peers)
    if row.onnxruntime is not None:
        peers.insert(0, onnxruntime_peer(row, *row.onnxruntime))
    made = [(peer, peer.make(threads)) for peer in peers]
    calls = [ours, *(call for _, call in made if call is not None)]
    # timed before any peer has run: onnxruntime's workers spin on the cores for a while
    # after a parallel kernel, which would slow down our samples
    log(f"  timing ours and {len(calls) - 1} peer(s), {repeat} samples each")
    samples = measure(calls, repeat, row.tiny)
    ours_ms, ours_spread = summary(samples[0])
    temp = math.nan if row.tiny else temporaries(lambda: session.run(None, feeds))
    timed = iter(samples[1:])
    out = []
    for peer, call in made:
        result = Result(row.name, peer.label, row.target)
        result.ours_ms, result.ours_spread, result.temporaries = ours_ms, ours_spread, temp
        if call is None:
            result.agrees = f"peer missing ({peer.missing} not importable)"
        else:
            agrees, diff = peer.agreement.check(ours(), peer.comparable(call()))
            result.agrees = (f"{'yes' if agrees else 'NO'} ({peer.agreement.describe()}, "
                             f"max diff {diff:.1e})")
            result.peer_ms, result.peer_spread = summary(next(timed))
        out.append(result)
    return out


def _ms(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.3f}" if value < 1 else f"{value:.1f}"


def table(results: Sequence[Result]) -> str:
    """The results as a Markdown table."""
    lines = [table_head("benchmark", "peer", "ours ms", "spread", "peer ms", "spread",
                        "ratio", "target", "met", "output check", "temporaries",
                        text=("peer", "met", "output check"))]
    for r in results:
        ratio = "-" if math.isnan(r.ratio) else f"{r.ratio:.2f}"
        spread = "-" if math.isnan(r.peer_spread) else f"{r.peer_spread:.0%}"
        temp = "-" if math.isnan(r.temporaries) else f"{r.temporaries:.2f}"
        lines.append(f"| {r.row} | {r.peer} | {_ms(r.ours_ms)} | {r.ours_spread:.0%} | "
                     f"{_ms(r.peer_ms)} | {spread} | {ratio} | <= {r.target:g} | {r.met} | "
                     f"{r.agrees} | {temp} |")
    return "\n".join(lines)


LEGEND = ("ratio = median ours / median peer (below 1: we are faster); spread = "
          "interquartile range / median; output check = our output against the peer's; "
          "temporaries = peak memory of our run beyond its outputs (numpy allocations, and "
          "the growth of the process's peak resident size), in units of the outputs' size.")


def markdown(results: Sequence[Result], repeat: int, load: tuple[float, float]) -> str:
    return (f"# Benchmark results\n\n{environment(repeat, load)}.\n\n{LEGEND}\n\n"
            + table(results) + "\n")


def scaling_table(by_cores: dict[int, list[Result]]) -> str:
    """Per row and peer: our time, the peer's time and the ratio at each core count, and our
    time at the most cores over our time at the fewest."""
    counts = sorted(by_cores)
    slash = " / ".join(str(k) for k in counts)
    lines = [table_head("benchmark", "peer", f"ours ms at {slash} cores", "peer ms",
                        "ratio", f"ours {counts[-1]} / ours {counts[0]}",
                        text=("peer",))]
    for first in by_cores[counts[0]]:
        same = [next(r for r in by_cores[k] if (r.row, r.peer) == (first.row, first.peer))
                for k in counts]
        ratios = " / ".join("-" if math.isnan(r.ratio) else f"{r.ratio:.2f}" for r in same)
        lines.append(f"| {first.row} | {first.peer} | "
                     f"{' / '.join(_ms(r.ours_ms) for r in same)} | "
                     f"{' / '.join(_ms(r.peer_ms) for r in same)} | {ratios} | "
                     f"{same[-1].ours_ms / same[0].ours_ms:.2f} |")
    return "\n".join(lines)


def cores_markdown(by_cores: dict[int, list[Result]], repeat: int,
                   load: tuple[float, float]) -> str:
    """The report of a ``--cores`` run: how each row scales, then a table per core count."""
    parts = [f"# Benchmark results at {', '.join(map(str, sorted(by_cores)))} cores\n\n"
             f"{environment(repeat, load)}. At k cores every side is given k cores: our "
             "process is pinned to k CPUs, onnxruntime's intra_op_num_threads is k, torch "
             f"uses k threads.\n\n{LEGEND}\n\n## Scaling\n\n{scaling_table(by_cores)}\n"]
    for k in sorted(by_cores):
        parts.append(f"\n## {k} core{'s' if k > 1 else ''}\n\n{table(by_cores[k])}\n")
    return "".join(parts)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=21, help="samples per call (default 21)")
    parser.add_argument("--only", default="", help="run the rows whose name contains this")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="where to write benchmarks.md")
    parser.add_argument("--cores", default="",
                        help="comma-separated core counts (e.g. 1,2,16): a run per count, "
                             "every side pinned to that many cores")
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    load_before = load_average()
    args.results.mkdir(parents=True, exist_ok=True)
    if args.cores:
        by_cores = {}
        for cores in sorted({int(k) for k in args.cores.split(",")}):
            log(f"== {cores} core(s)")
            by_cores[cores] = run_pinned(cores, "benchmarks.run", ["--repeat", str(args.repeat),
                                                                   "--only", args.only], Result)
        text = cores_markdown(by_cores, args.repeat, (load_before, load_average()))
        print(text)
        (args.results / "benchmarks.md").write_text(text)
        log(f"wrote {args.results / 'benchmarks.md'}")
        return
    chosen = [row for row in rows(np.random.default_rng(0)) if args.only in row.name]
    results: list[Result] = []
    for index, row in enumerate(chosen, 1):
        log(f"[{index}/{len(chosen)}] {row.name}")
        results += run_row(row, args.repeat, args.threads, log)
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(r) for r in results]))
        return
    text = markdown(results, args.repeat, (load_before, load_average()))
    print(text)
    (args.results / "benchmarks.md").write_text(text)
    log(f"wrote {args.results / 'benchmarks.md'}")


if __name__ == "__main__":
    main()
