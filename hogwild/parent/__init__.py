"""Steps 4 and 5 of `hogwild.train`, supervise and result: what the parent does while the workers train.

parent_loop.py's `ParentLoop` waits until every worker is ready, then alone decides when to log (metrics.py:
metrics.jsonl, TensorBoard, the progress bar), evaluate (evaluation.py: a snapshot evaluated on a thread), write a
checkpoint (through the run's `RunCheckpoints`, hogwild/share/checkpoint.py) and stop; supervisor.py notices a
failed worker within seconds and stops the others, progress_watch.py a hung one; agent.py is the multi-host
extension point polled on every tick.

Usage (engine.py): `loop = ParentLoop(shared, supervisor, metrics, attached); failure = loop.wait_until_ready()`,
then `failure, records = loop.run(periodic, deadline)`
"""
from .agent import CommunicationAgent, SharedTrainingState
from .evaluation import EvaluationFailed, Evaluator, PeriodicEvaluation
from .metrics import MetricsLog
from .parent_loop import ParentLoop
from .supervisor import Supervisor, WorkerFailed

__all__ = ["ParentLoop", "Supervisor", "WorkerFailed", "Evaluator", "PeriodicEvaluation", "EvaluationFailed",
           "MetricsLog", "CommunicationAgent", "SharedTrainingState"]
