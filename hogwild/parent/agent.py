"""Extension point for multi-host training: a per-host communication agent beside the local workers.

The engine hands an agent a `SharedTrainingState` - the shared parameters and optimizer state, the live global
update count and the stop flag - and calls it from the parent process: `start` before the workers train, `poll`
on every tick of the parent's loop (cheap; heavy exchanges belong in the agent's own thread or process),
`failure` to learn that the agent (e.g. a remote host) failed, `report` for the fields it adds to each metrics
record, and `stop` once the workers have stopped and before the final checkpoint. Nothing here imports MPI; `hogwild/multihost/` implements agents with it.

Serves step 4 of `hogwild.train` (supervise): the engine holds a run's agent as an `AttachedAgent`.

Usage: `hogwild.train(model, loss_fn, batches, config, agent=MyAgent())`
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..config import Config
from ..share.run_state import RunControl, SharedCounters


@dataclass
class SharedTrainingState:
    """What an agent may read and write: everything here lives in shared memory."""

    model: nn.Module  # parameters and buffers in shared memory; read/write them in place (copy_, add_)
    optimizer: Any  # hogwild.shared_optim.SharedOptimizer (state_dict / load_state_dict)
    counters: SharedCounters
    control: RunControl  # control.stopping: a stop was requested
    config: Config
    request_stop: Callable[[str], None]  # ask the engine to stop all local workers, giving the reason
    failure: str | None = None  # set before agent.stop() when a local worker (or the agent) failed

    @property
    def params(self) -> list[torch.Tensor]:
        return list(self.model.parameters())

    def global_updates(self) -> int:
        """Shared updates applied by the local workers so far (this run and the resumed ones)."""
        return self.counters.global_updates()

    def stopped(self) -> bool:
        return self.control.stopping


class CommunicationAgent:
    """Base class: every hook is optional. Hooks run in the parent process's main thread."""

    def start(self, state: SharedTrainingState) -> None:
        """Called once, after the parameters are shared and before the workers start."""

    def poll(self, state: SharedTrainingState) -> None:
        """Called on every tick of the parent's loop (about every 0.1 s)."""

    def failure(self) -> str | None:
        """A description if the agent failed (the engine then stops, checkpoints and raises), else None."""
        return None

    def stop(self, state: SharedTrainingState) -> None:
        """Called after the local workers stopped, before the final checkpoint and evaluation."""

    def report(self) -> dict | None:
        """Fields added to every 'train' record of metrics.jsonl (e.g. a multi-host agent's exchange figures)."""
        return None


@dataclass
class AttachedAgent:
    """The engine's handle on a run's agent: each hook is called with the state the agent was started with."""

    agent: CommunicationAgent
    state: SharedTrainingState

    def start(self) -> None:
        self.agent.start(self.state)

    def poll(self) -> None:
        self.agent.poll(self.state)

    def failure(self) -> str | None:
        return self.agent.failure()

    def report(self) -> dict | None:
        return self.agent.report()

    def stop(self, failure: str | None) -> None:
        """Tell the agent how the local run ended (`state.failure`), then stop it."""
        self.state.failure = failure
        self.agent.stop(self.state)
