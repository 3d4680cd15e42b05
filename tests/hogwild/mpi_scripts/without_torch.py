"""Lets a script import hogwild.multihost's numpy-only modules (transport, pieces, exchange_stats, dist_config)
without hogwild's package init, which imports torch: seconds per rank, on a busy machine, for a job that needs only
numpy and MPI (the link and transport scripts beside this one).

Usage (before any hogwild import): `import without_torch  # noqa: F401`
"""
import sys
import types
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "hogwild"

for name, folder in (("hogwild", PACKAGE), ("hogwild.multihost", PACKAGE / "multihost")):
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
