"""Multi-host training over MPI: one rank per host, each with local Hogwild workers; hosts synchronise by DOWNPOUR
(parameter servers), EASGD/EAMSGD, AD-PSGD (ring) or periodic allreduce.

Usage (under `mpiexec -n H python script.py`):
    from hogwild.multihost import DistConfig, train_distributed
    result = train_distributed(model, loss_fn, batches, hogwild.Config(workers=2, max_steps=200),
                               DistConfig(algorithm="easgd", period=4))

Modules: dist_config (DistConfig, roles), math (flat parameters, the algorithms' arithmetic), protocol (message tags
and kinds), transport (the only importer of mpi4py, lazily), pieces (big transfers in pieces), wire (fp32, bf16,
fp16 on the wire), exchange_stats (what the exchanges cost), agents and central_agents (the training hosts' exchange
thread), server (parameter servers and the tester), distributed_checkpoint (distributed run directories), leftovers
(the janitor that removes what an aborted rank leaves), host (the entry point); simulated_hosts and simulate (hosts as
network namespaces on one machine, for trying and testing it over TCP).
Importing this package never imports mpi4py: single-host use never needs MPI.

The package sits above the engine: each training host runs `hogwild.train` with an agent from .agents plugged into
its step 4 (supervise); servers and the tester run beside it.
"""
from .dist_config import ALGORITHMS, DistConfig
from .host import DistributedResult, train_distributed
from .transport import MPI_HINT, import_mpi

__all__ = ["ALGORITHMS", "DistConfig", "DistributedResult", "MPI_HINT", "import_mpi", "train_distributed"]
