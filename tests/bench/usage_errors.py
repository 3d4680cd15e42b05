"""What the bench scripts' tests share: a bad option must stop the script with argparse's usage error.

Usage: `assert_refused(bench_engine.main, ["--variants", "x"], "--variants: unknown", capsys)`
"""
from collections.abc import Callable

import pytest


def assert_refused(main: Callable[[list[str]], object], argv: list[str], message: str, capsys) -> None:
    """main(argv) exits 2 and prints `message` on stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
