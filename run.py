"""Command line of the hogwild project: train (default), `tag`, `translate`, `plot`. All logic lives in `tasks/`.

Usage: `python run.py` (built-in synthetic task, 2 CPU workers); `python run.py --help` for every flag.
"""
import signal
import sys

if __name__ == "__main__":
    # Ctrl-C during the imports (torch's take seconds) is held until main() takes it ("interrupted", exit 130): torch's
    # import can swallow a KeyboardInterrupt half-way, leaving numpy half-imported for the run to fail on later
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    # imported here, not above: each spawned worker imports this file again (as __mp_main__) and needs only the
    # module of its loss function, not the whole command line (about a second of a worker's start-up)
    from hogwild.tasks.cli import console

    sys.exit(console("run.py"))
