"""hogwild.config: defaults, the workers/devices shorthand, and ValueErrors naming the field."""
import pytest
import torch

from hogwild import Config


def test_defaults_train_one_cpu_worker_for_one_epoch():
    config = Config()
    assert config.devices == ["cpu"]
    assert config.workers == 1
    assert config.epochs == 1  # no stop condition given -> one epoch
    assert config.mode == "hogwild"


def test_the_docstring_describes_every_field_with_its_default():
    """Each field is declared with its help (hogwild.config_fields.setting), which help(Config) lists."""
    import dataclasses
    import re

    documented = dict(re.findall(r"^- (\w+) = (.*?): ", Config.__doc__, re.M))
    fields = {f.name: f for f in dataclasses.fields(Config)}
    assert set(documented) == set(fields)
    for name, field in fields.items():
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
        assert documented[name] == ('"%s"' % default if isinstance(default, str) else repr(default)), name


def test_a_field_without_its_declaration_is_named():
    """A field added to Config as a plain default would have no help, no check and no run.py flag."""
    import dataclasses

    from hogwild.config_fields import describe

    @dataclasses.dataclass
    class Plain(Config):
        prefetch_depth: int = 2

    with pytest.raises(TypeError, match=r"^Plain\.prefetch_depth is not declared: give it setting\(default, help, "):
        describe(Plain)


def test_workers_shorthand_and_devices():
    assert Config(workers=3).devices == ["cpu", "cpu", "cpu"]
    config = Config(devices=["cpu-replica", "cpu"])
    assert config.workers == 2
    assert Config(devices=["cuda:0", "cuda:1"]).workers == 2
    assert Config(workers=3, mode="single").devices == ["cpu"]


def test_a_stop_condition_replaces_the_default_epoch():
    assert Config(max_steps=10).epochs is None
    assert Config(time_limit=5.0).epochs is None


def test_round_trip_through_dict():
    config = Config(workers=2, optimizer="adam", lr=1e-3, optimizer_args={"betas": (0.8, 0.99)}, epochs=3,
                    checkpoint_dir="runs/x", checkpoint_every=10, clip_norm=1.0)
    assert Config.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['colour'\]"):
        Config.from_dict({"colour": "red"})


@pytest.mark.parametrize("kwargs, field", [
    ({"workers": 0}, "workers"),
    ({"workers": 2.5}, "workers"),
    ({"devices": "cpu"}, "devices"),
    ({"devices": []}, "devices"),
    ({"devices": ["gpu0"]}, "devices"),
    ({"devices": ["cpu", "cpu"], "workers": 3}, "workers"),
    ({"mode": "async"}, "mode"),
    ({"optimizer": "lbfgs"}, "optimizer"),
    ({"lr": 0}, "lr"),
    ({"lr": float("nan")}, "lr"),
    ({"optimizer_args": {"lr": 0.1}}, "optimizer_args"),
    ({"optimizer": "adam", "optimizer_args": {"momentum": 0.9}}, "optimizer_args"),
    ({"optimizer": "adam", "optimizer_args": {"betas": (1.5, 0.9)}}, "optimizer_args"),
    ({"lr_schedule": "cosine"}, "lr_schedule"),
    ({"decay_per_epoch": -0.1}, "decay_per_epoch"),
    ({"warmup_steps": -1}, "warmup_steps"),
    ({"lr_schedule": "linear_decay", "decay_updates": 0}, "decay_updates"),
    ({"lr_schedule": "linear_decay", "decay_updates": 2.5}, "decay_updates"),
    ({"decay_updates": 40_000}, "decay_updates"),  # constant schedule: the option would be ignored
    ({"clip_norm": 0.0}, "clip_norm"),
    ({"max_steps": 0}, "max_steps"),
    ({"epochs": 1.5}, "epochs"),
    ({"time_limit": -1}, "time_limit"),
    ({"eval_every": 0}, "eval_every"),
    ({"best_mode": "largest"}, "best_mode"),
    ({"patience": 0}, "patience"),
    ({"checkpoint_every": 10}, "checkpoint_every"),
    ({"resume": True}, "resume"),
    ({"queue_depth": 0}, "queue_depth"),
    ({"data_assignment": "random"}, "data_assignment"),
    ({"mode": "sync", "workers": 2, "data_assignment": "partition"}, "data_assignment"),
    ({"seed": "1"}, "seed"),
    ({"progress": "yes"}, "progress"),
    ({"skip_nonfinite": 1}, "skip_nonfinite"),
    ({"threads_per_worker": 0}, "threads_per_worker"),
    ({"eval_device": "tpu"}, "eval_device"),
    ({"checkpoint_minutes": -1}, "checkpoint_minutes"),
    ({"checkpoint_minutes": float("inf")}, "checkpoint_minutes"),
    ({"max_restarts": -1}, "max_restarts"),
    ({"max_restarts": 1.0}, "max_restarts"),
    ({"max_restarts": 1, "mode": "sync", "workers": 2}, "max_restarts"),
    ({"max_restarts": 1, "data_assignment": "partition"}, "max_restarts"),
])
def test_invalid_values_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^Config\.{field}: "):
        Config(**kwargs)


def test_zero_means_off_where_declared_so():
    """time_limit, checkpoint_minutes and eval_budget: 0 is None (a command line cannot say None); elsewhere 0 is a
    value, refused where it is not one."""
    config = Config(time_limit=0, checkpoint_minutes=0, eval_budget=0.0)
    assert (config.time_limit, config.checkpoint_minutes, config.eval_budget, config.epochs) == (None, None, None, 1)
    assert Config(checkpoint_minutes=0.5).checkpoint_minutes == 0.5
    with pytest.raises(ValueError, match=r"^Config\.hang_timeout: must be > 0, got 0$"):
        Config(hang_timeout=0)


def test_decay_updates_reaches_the_workers_schedule():
    config = Config(lr=0.03, lr_schedule="linear_decay", decay_per_epoch=0.0135, decay_updates=40_000)
    assert config.schedule().decay_updates == 40_000
    assert config.schedule()(20_000, 7) == pytest.approx(0.03 - 0.0135 / 2, abs=1e-15)  # epoch plays no part
    assert Config.from_dict(config.to_dict()) == config
    assert Config(lr_schedule="linear_decay", decay_per_epoch=0.01).schedule().decay_updates == 0  # per epoch

def test_evaluation_device_and_budget():
    assert Config(workers=2).evaluation_device() == "cpu"
    gpus = Config(devices=["cuda:1", "cuda:0"])
    assert gpus.evaluation_device(visible_gpus=3) == "cuda:2"  # 'auto': a GPU no worker uses
    assert gpus.evaluation_device(after_training=True, visible_gpus=3) == "cuda:2"
    assert gpus.evaluation_device(visible_gpus=2) == "cpu"  # every GPU trains: not a worker's GPU while training
    assert gpus.evaluation_device(after_training=True, visible_gpus=2) == "cuda:1"  # the first worker's, after
    assert Config(devices=["cuda", "cuda"]).evaluation_device(visible_gpus=2) == "cuda:1"  # 'cuda' is cuda:0
    assert Config(devices=["cuda:0"], eval_device="cpu").evaluation_device() == "cpu"
    assert Config(eval_device="cpu-replica").evaluation_device() == "cpu"
    missing = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(ValueError, match=rf"^Config\.eval_device: {missing} does not exist: "):
        Config(eval_device=missing)
    assert Config().eval_budget == 0.1 and Config(eval_budget=0).eval_budget is None  # 0: no cap
    for bad in (1.5, -0.1, float("nan"), "x"):
        with pytest.raises(ValueError, match=r"^Config\.eval_budget: "):
            Config(eval_budget=bad)


@pytest.mark.parametrize("kwargs, field, message", [
    ({"overlap_update": True}, "overlap_update", "device workers"),
    ({"devices": ["cpu-replica"] * 2, "mode": "sync", "overlap_update": True}, "overlap_update", "sync"),
    ({"overlap_update": "yes"}, "overlap_update", "True or False"),
    ({"fused_step": True, "optimizer": "rmsprop"}, "fused_step", "fused CPU kernel"),
    ({"amp": "fp16"}, "amp", "bf16"),
    ({"pin_shared": 1}, "pin_shared", "True or False"),
    ({"sparse_pull": True, "mode": "sync", "devices": ["cpu-replica"] * 2}, "sparse_pull", "sync"),
])
def test_device_options_are_validated(kwargs, field, message):
    with pytest.raises(ValueError, match=f"Config.{field}: .*{message}"):
        Config(**kwargs)


def test_one_gpu_per_worker_is_only_required_in_sync_mode():
    config = Config(devices=["cuda:0", "cuda:0"])  # Hogwild workers may share a GPU
    assert config.workers == 2
    assert Config(devices=["cuda:0", "cuda:1"], mode="sync").workers == 2
