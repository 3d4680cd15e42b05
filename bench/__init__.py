"""Benchmarks a user or maintainer reruns, from the repository root as modules: `python -m bench.bench_engine`
(engine throughput), `bench.bench_models`, `bench.bench_data`, `bench.bench_distributed` (multi-host),
`bench.bench_convergence` (time to accuracy), each with `--quick` (seconds on a CPU), and `bench.bench_gpu` and
`bench.gpu_step_check` (the graphed GPU step against the eager one; `--device cpu --quick` on a CPU), and
`bench.gpu_copy_out` (a POS device worker's copy-out and update, on the CPU side); they
print the command that produced them and their ratios. docs/benchmarks.md has the current figures and commands.
They import only the installed package (`hogwild`, ...).

Usage: `print("command:", command_line())` in a benchmark's main.
"""
import shlex
import sys


def command_line() -> str:
    """The running benchmark's command as a user retypes it: `python -m bench.NAME ARGS`."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    program = ["-m", spec.name] if spec is not None else [sys.argv[0]]
    return shlex.join(["python", *program, *sys.argv[1:]])
