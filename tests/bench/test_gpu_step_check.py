"""bench/gpu_step_check.py: a run that checks and times gives its verdict first, and the dropout check fails on a
model whose replays draw the same masks. Its CPU form end to end (the checks, the step costs, its command) is
checked from gpu_check.sh's CPU mode: tests/bench/test_gpu_check.py."""
import torch

from bench import gpu_step_check as S


def test_a_run_gives_its_verdict_then_times_the_steps_and_fails_with_a_failed_check(monkeypatch, capsys):
    """The order of a run that checks and times (`--device cpu --quick`, and `--device cuda:0` on a GPU): the checks,
    the verdict at once, then the step costs; a failed check fails the run (exit 1) and is named in the verdict, and
    the timing still follows. The checks and the step costs themselves: tests/bench/test_gpu_check.py, from
    gpu_check.sh's stages a (--timed-steps 0) and d (--timing-only)."""
    child = type("Child", (), {"poll": lambda self: 0})()
    monkeypatch.setattr(S, "start_fallback", lambda device, preset: child)
    outcome = {"equality": True}
    for name in ("equality", "dropout_pair", "forced_fallback", "fallback"):
        monkeypatch.setattr(S, name, lambda *args, name=name: print(f"check {name}") or outcome.get(name, True))
    monkeypatch.setattr(S, "timing", lambda nets, batches, device, steps: print(f"timing of {steps} step"))
    assert S.main(["--device", "cpu", "--quick"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert lines == ["check equality"] * 2 + ["check dropout_pair"] * 2 + ["check forced_fallback", "check fallback",
                                                                         "verdict: OK", "timing of 1 step"]
    outcome["equality"] = False
    assert S.main(["--device", "cpu", "--quick"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == ["verdict: FAIL (equal nmt, equal pos)", "timing of 1 step"]


def test_the_dropout_check_fails_when_two_seeds_give_the_same_masks(capsys):
    batches, threads = S.task_batches(2, 500)["pos"], torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert S.dropout_pair("pos", S.models("small", 500, S.DROPOUT)["pos"], batches, torch.device("cpu"), 1e-4)
        assert not S.dropout_pair("pos", S.models("small", 500, 0.0)["pos"], batches, torch.device("cpu"), 1e-4)
    finally:
        torch.set_num_threads(threads)
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("dropout pos: ") and last.endswith(": FAIL (the same masks twice)")
