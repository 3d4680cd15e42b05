"""A time limit bounds the workers' start-up too (issue #14 item 3): real spawned workers cannot import torch in
0.5 s, so with the start-up grace set to 0 the run stops with reason 'time_limit' before its first update, saying
so on stderr, after showing start-up progress."""
import re

import hogwild
from hogwild import parent_loop
from tests.hogwild import engine_helpers as H


def test_the_time_limit_bounds_a_slow_start(monkeypatch, capfd):
    monkeypatch.setattr(parent_loop, "STARTUP_GRACE", 0.0)
    monkeypatch.setattr(parent_loop, "STARTUP_QUIET", 0.1)
    result = hogwild.train(H.regression_model(), H.mse_loss, H.regression_batches(n=8),
                           hogwild.Config(workers=2, lr=0.01, time_limit=0.5, progress=False, tensorboard=False))
    assert (result.stop_reason, result.updates) == ("time_limit", 0)
    err = capfd.readouterr().err
    assert re.search(r"^starting workers: [01]/2 ready after 0 s$", err, re.M), err
    assert re.search(r"^time limit: workers still starting after \d+ s \(the limit of 0\.5 s plus 0 s for start-up\), "
                     r"[01]/2 ready: stopping before the first update$", err, re.M), err
