"""`python -m hogwild.multihost.simulate ARGS` run in the test's own process: the same main(), without a second start
of Python and of torch, which `import hogwild` brings (seconds on a busy 2-core machine). For the tests of jobs on
simulated hosts; mark such a test @pytest.mark.timeout(N): no subprocess timeout bounds its job.

Usage: `code, output = simulate_here(capfd, "--hosts", "2", "--", sys.executable, script)`
"""
import signal

from hogwild.multihost import simulate


def simulate_here(capfd, *args: str) -> tuple[int, str]:
    """simulate.main(ARGS): its exit status, and what it and the job's ranks printed (stdout, then stderr)."""
    capfd.readouterr()  # only this job's output
    handler = signal.getsignal(signal.SIGTERM)  # main() sets its own, to remove the hosts on the way out
    try:
        code = simulate.main(list(args))
    finally:
        signal.signal(signal.SIGTERM, handler)
    out, err = capfd.readouterr()
    return code, out + err
