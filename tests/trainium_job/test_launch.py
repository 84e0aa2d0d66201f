"""The torchrun command line helper (importable without torch)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainium_job.launch import (
    LaunchSpec,
    launch_env,
    precompile_args,
    render,
    script_args_from_dict,
    torchrun_args,
)


def spec(**kw) -> LaunchSpec:
    base = dict(nnodes=2, nproc_per_node=32, rdzv_endpoint="job-worker-0.job:29400")
    return LaunchSpec(**{**base, **kw})


def test_given_defaults_then_full_torchrun_argv():
    s = spec(script_args=("--batch_size", "16"))
    assert torchrun_args(s) == [
        "torchrun",
        "--nnodes",
        "2",
        "--nproc_per_node",
        "32",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "job-worker-0.job:29400",
        "--rdzv_id",
        "bert-pretrain",
        "--max_restarts",
        "3",
        "-m",
        "training.trainer.pretrain",
        "--batch_size",
        "16",
    ]
    assert s.world_size == 64


def test_given_optional_fields_then_rendered_before_module():
    s = spec(
        rdzv_backend="etcd-v2",
        node_rank=1,
        monitor_interval=0.5,
        rdzv_conf={"read_timeout": "60", "join_timeout": "900"},
        torchrun="/venv/bin/torchrun",
    )
    argv = torchrun_args(s)
    assert argv[0] == "/venv/bin/torchrun"
    assert argv[argv.index("--node_rank") + 1] == "1"
    assert argv[argv.index("--monitor_interval") + 1] == "0.5"
    assert argv[argv.index("--rdzv_conf") + 1] == "join_timeout=900,read_timeout=60"  # sorted
    assert argv.index("--rdzv_conf") < argv.index("-m")


def test_given_list_arguments_then_spec_stays_hashable():
    s = spec(script_args=["--lr", "0.001"])
    assert s.script_args == ("--lr", "0.001")
    assert hash(s) == hash(spec(script_args=("--lr", "0.001")))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("nnodes", 0),
        ("nnodes", "2"),
        ("nnodes", True),
        ("nproc_per_node", 0),
        ("max_restarts", -1),
        ("rdzv_backend", "static"),
        ("rdzv_endpoint", "host"),
        ("rdzv_endpoint", "host:0"),
        ("rdzv_endpoint", "host:70000"),
        ("rdzv_endpoint", ":29400"),
        ("rdzv_id", ""),
        ("rdzv_id", "a b"),
        ("node_rank", 2),
        ("node_rank", -1),
        ("module", "training/trainer/pretrain.py"),
        ("script_args", "--lr 1"),
        ("script_args", ("--lr", 1)),
        ("monitor_interval", 0),
        ("rdzv_conf", {"join_timeout": "1,2"}),
        ("torchrun", " "),
    ],
)
def test_given_invalid_field_then_value_error_names_it(field, value):
    with pytest.raises(ValueError, match=f"^{field}"):
        spec(**{field: value})


def test_given_spec_then_frozen():
    with pytest.raises(AttributeError):
        spec().nnodes = 3  # type: ignore[misc]


def test_given_mapping_then_sorted_flags_and_bools():
    argv = script_args_from_dict(
        {
            "lr": 4e-4,
            "batch_size": 16,
            "data_dir": "/data/x",
            "precompile": True,
            "param_digest": False,
            "resume_ckpt": None,
            "weight_decay": 0.01,
        }
    )
    assert argv == [
        "--batch_size",
        "16",
        "--data_dir",
        "/data/x",
        "--lr",
        "0.0004",
        "--precompile",
        "--weight_decay",
        "0.01",
    ]
    assert script_args_from_dict({"b": 1, "a": 2}) == script_args_from_dict({"a": 2, "b": 1})


@pytest.mark.parametrize("bad", [{"x": [1]}, {"x": {"a": 1}}])
def test_given_unsupported_value_then_type_error_names_key(bad):
    with pytest.raises(TypeError, match="'x'"):
        script_args_from_dict(bad)


def test_given_bad_key_then_value_error():
    with pytest.raises(ValueError, match="flag name"):
        script_args_from_dict({"--lr": 1})


def test_given_precompile_then_same_command_short_and_without_checkpoints():
    s = spec(script_args=("--batch_size", "16", "--steps_this_run", "500", "--steps_this_run=7"))
    argv = precompile_args(s, steps=4)
    assert argv[0] == "neuron_parallel_compile"
    trial = argv[1:]
    real = torchrun_args(s)
    # Same launcher flags except the rendezvous id and restarts; same module; same args except steps.
    assert trial[trial.index("--nproc_per_node") + 1] == "32"
    assert trial[trial.index("--rdzv_id") + 1] == "bert-pretrain-precompile"
    assert trial[trial.index("--max_restarts") + 1] == "0"
    assert trial[trial.index("-m") :][:4] == ["-m", "training.trainer.pretrain", "--batch_size", "16"]
    assert trial[-3:] == ["--steps_this_run", "4", "--precompile"]
    assert sum(a.startswith("--steps_this_run") for a in trial) == 1
    assert real[real.index("--steps_this_run") + 1] == "500"  # the real run is untouched
    with pytest.raises(ValueError, match="^steps"):
        precompile_args(s, steps=1)


def test_given_spec_then_launch_env_disables_shared_rendezvous_store():
    assert launch_env(spec()) == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def test_given_argv_then_render_round_trips_through_shell():
    argv = torchrun_args(spec(script_args=("--output_dir", "/data/run one")))
    assert (
        subprocess.run(
            ["bash", "-c", 'printf "%s\\n" ' + render(argv)[len("torchrun ") :]],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        == argv[1:]
    )


def test_given_no_torch_then_launch_imports():
    # The CDK app imports the helper at synth time, where torch may be missing.
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['numpy'] = None\n"
        "import training, trainium_job.launch\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "print(trainium_job.launch.render(trainium_job.launch.torchrun_args("
        "trainium_job.launch.LaunchSpec(1, 1, 'localhost:1'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("torchrun --nnodes 1")
