"""The ``python -m loopir`` command line (also installed as ``loopir``).

Subcommands:

- ``demo``: the guided tour (see [`loopir.cli.demo`][loopir.cli.demo]);
- ``show FILE``: a workload's IR, trace, lowered IR or CUDA source
  ([`loopir.cli.show`][loopir.cli.show]);
- ``bench``: a quick built-in benchmark or a ``benchmarks/`` script
  ([`loopir.cli.bench`][loopir.cli.bench]).

Color and live progress are used only when stdout is a terminal (``--color`` overrides).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from loopir.cli.term import Console
from loopir.errors import LoopIRError

__all__ = ["build_parser", "main"]


def _shape(text: str) -> tuple[int, int, int]:
    """``"960x770x2304"`` or ``"960,770,2304"`` -> (960, 770, 2304)."""
    parts = text.replace(",", "x").lower().split("x")
    try:
        vals = tuple(int(p) for p in parts)
    except ValueError:
        vals = ()
    if len(vals) != 3 or min(vals) <= 0:
        raise argparse.ArgumentTypeError(f"expected a shape M x K x N such as 960x770x2304, got {text!r}")
    return vals


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m loopir``."""
    import loopir

    p = argparse.ArgumentParser(
        prog="python -m loopir",
        description="loopir: GPU kernels as loop nests, optimized by traced schedules.",
    )
    p.add_argument("--version", action="version", version=f"loopir {loopir.__version__}")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="ANSI color and live progress (default: only on a terminal)")  # fmt: skip
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="log loopir's INFO (-v) or DEBUG (-vv) messages to stderr")  # fmt: skip
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    d = sub.add_parser("demo", help="the guided tour: schedule, trace, local padding, CUDA, CUTLASS",
                       description="Build the dense workload, apply the DietCode schedule, show the "
                       "trace, the local padding diff and the CUDA source, then run it on the GPU "
                       "(or the CPU executor without one).")  # fmt: skip
    d.add_argument("--shape", type=_shape, default=(960, 770, 2304), metavar="MxKxN",
                   help="the dense problem (default 960x770x2304)")  # fmt: skip
    d.add_argument("--cpu-shape", type=_shape, default=(60, 50, 70), metavar="MxKxN",
                   help="the problem the CPU executor runs without a GPU (default 60x50x70)")  # fmt: skip
    d.add_argument("--small", action="store_true",
                   help="use the CPU shape everywhere (short IR, quick)")  # fmt: skip
    d.add_argument("--cpu", action="store_true", help="run on the CPU even when there is a GPU")
    d.add_argument("--no-cutlass", action="store_true", help="skip the CUTLASS step")
    d.add_argument("--source-lines", type=int, default=40, metavar="N",
                   help="lines of CUDA source to print (default 40)")  # fmt: skip

    s = sub.add_parser("show", help="print a workload's IR and trace from a Python file",
                       description="Run FILE and print the Schedule or PrimFunc it defines "
                       "(variables schedule/sch, or func with an optional apply_trace(sch)).")  # fmt: skip
    s.add_argument("file", help="a Python file defining schedule, sch or func")
    s.add_argument("--name", help="the variable to show (default: schedule, sch, then func)")
    s.add_argument("--json", action="store_true", help="also print the trace as JSON")
    s.add_argument("--no-trace", action="store_true", help="do not print the trace")
    s.add_argument("--lower", action="store_true", help="also print the lowered IR")
    s.add_argument("--local-pad", action="store_true", help="lower with tir.enable_local_pad (shows the lowered IR, as --lower, unless --cuda)")
    s.add_argument("--cuda", action="store_true", help="also print the CUDA source")

    b = sub.add_parser("bench", help="a quick benchmark, or a benchmarks/ script",
                       description="Without NAME: the CPU executor (and the dense schedule on the "
                       "GPU when there is one). With NAME: run benchmarks/NAME.py ARGS.")  # fmt: skip
    b.add_argument("name", nargs="?", help="a script in benchmarks/ (see --list)")
    b.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    b.add_argument("--list", action="store_true", help="list the benchmark scripts")
    b.add_argument("--dir", help="the benchmarks folder (default: ./benchmarks or the repository's)")
    b.add_argument("--shape", type=_shape, default=(64, 64, 64), metavar="MxKxN",
                   help="CPU problem of the quick benchmark (default 64x64x64)")  # fmt: skip
    b.add_argument("--gpu-shape", type=_shape, default=(960, 770, 2304), metavar="MxKxN",
                   help="GPU problem of the quick benchmark (default 960x770x2304)")  # fmt: skip
    b.add_argument("--cpu", action="store_true", help="skip the GPU part")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m loopir``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG if args.verbose > 1 else logging.INFO,
                            format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)  # fmt: skip
    con = Console(sys.stdout, args.color)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "demo":
            from loopir.cli.demo import DemoOptions, run_demo

            shape = args.cpu_shape if args.small else args.shape
            opts = DemoOptions(shape=shape, cpu_shape=args.cpu_shape, source_lines=args.source_lines,
                               force_cpu=args.cpu, cutlass=not args.no_cutlass)  # fmt: skip
            return run_demo(con, opts)
        if args.command == "show":
            from loopir.cli.show import ShowOptions, run_show

            sopts = ShowOptions(name=args.name, trace=not args.no_trace, json=args.json,
                                lower=args.lower, local_pad=args.local_pad, cuda=args.cuda)  # fmt: skip
            return run_show(con, args.file, sopts)
        if args.command == "bench":
            from loopir.cli.bench import find_benchmarks_dir, list_scripts, quick_bench, run_script

            if args.list:
                folder = find_benchmarks_dir(args.dir)
                for name, doc in list_scripts(folder).items():
                    con.write(f"{name:12s} {doc}")
                return 0
            if args.name:
                return run_script(con, args.name, args.args, find_benchmarks_dir(args.dir))
            return quick_bench(con, args.shape, args.gpu_shape, force_cpu=args.cpu)
    except LoopIRError as exc:
        # a clear one-line error for the user; the traceback only with -vv
        if args.verbose > 1:
            raise
        sys.stderr.write(f"error: {type(exc).__name__}: {exc}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        # the reader went away (``python -m loopir demo | head``): stop quietly, and keep the
        # interpreter from failing again when it flushes stdout at exit
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    parser.error(f"unknown command {args.command!r}")
    return 2
