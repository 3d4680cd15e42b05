"""Where the tests find MPI: the mpiexec beside this interpreter (the venv's `pip install '.[mpi]'`), and why not.

Usage: `pytestmark = pytest.mark.skipif(mpi_missing() is not None, reason=str(mpi_missing()))`
"""
import pathlib
import sys

MPIEXEC = pathlib.Path(sys.executable).parent / "mpiexec"


def mpi_missing() -> str | None:
    """None when mpiexec and mpi4py are installed, else the reason to skip."""
    if not MPIEXEC.exists():
        return f"MPI is not installed: no {MPIEXEC} (pip install '.[mpi]')"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install '.[mpi]')"
    return None
