"""`mneme replay` on machines without a GPU: compile-only output, JSON, --config, errors."""

import json

import pytest
from click.testing import CliRunner
from mneme.cli.main import cli
from mneme.replay.engine import ReplayResult
from replay_support import ADD_BIAS, GOLDEN, SAXPY, static_hash


def mneme(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code, result.output


def test_summary_and_json():
    code, out = mneme("replay", "-rdb", GOLDEN, "-rid", "1b78", "--compile-only")
    assert code == 0, out
    assert "saxpy(float, float const*, float*, int)" in out and "compile-only" in out
    code, out = mneme(
        "replay", "-rdb", GOLDEN, "-rid", "1b78", "--compile-only", "--json", "default<O1>"
    )
    assert code == 0, out
    result = ReplayResult.from_json(out)
    assert result.configuration.compile.pipeline == "default<O1>" and result.compile_only


def test_flags_and_config_file_round_trip(tmp_path):
    code, out = mneme(
        "replay",
        "-rdb",
        GOLDEN / "kernels" / "5acf7c2e2f6ed113",
        "-rid",
        "1b78",
        "--compile-only",
        "--json",
        "--block-dim-x",
        "128",
        "--grid-dim-x",
        "8",
        "--specialize",
        "--specialize-dims",
        "--set-launch-bounds",
        "--min-blocks-per-sm",
        "2",
        "--max-registers",
        "32",
        "--codegen-opt",
        "2",
        "--iterations",
        "3",
        "function(sroa,instcombine)",
    )
    assert code == 0, out
    first = json.loads(out)
    compile = first["configuration"]["compile"]
    assert compile["pipeline"] == "function(sroa,instcombine)"
    assert compile["block_dim"] == [128, 1, 1] and compile["grid_dim"] == [8, 1, 1]
    assert compile["max_threads"] == 128 and compile["min_blocks"] == 2
    assert compile["max_registers"] == 32 and compile["codegen_opt_level"] == 2
    assert set(compile["specialize_args"]) == {"0", "3"}
    assert first["configuration"]["replay"]["iterations"] == 3
    saved = tmp_path / "result.json"
    saved.write_text(out)
    code, out = mneme("replay", "-rdb", GOLDEN, "-rid", "1b78", "--json", "--config", saved)
    assert code == 0, out
    assert json.loads(out)["configuration"] == first["configuration"]


def test_output_ll(tmp_path, replay_db):
    target = tmp_path / "out.ll"
    code, out = mneme(
        "replay",
        "-rdb",
        replay_db.root,
        "-rid",
        static_hash(SAXPY),
        "--compile-only",
        "--specialize",
        "--output-ll",
        target,
    )
    assert code == 0, out
    text = target.read_text()
    assert "ptx_kernel void @_Z5saxpyfPKfPfi(" in text
    assert ", 2.000000e+00" in text  # the recorded a, folded
    assert text.count("define ") == 1  # only the replayed kernel is left


def test_globals_kernel_by_name(replay_db):
    code, out = mneme("replay", "-rdb", f"{replay_db.root}/add_bias", "--compile-only")
    assert code == 0, out
    assert "add_bias(int*, int)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-rdb", "/no/such/db"], "/no/such/db does not exist"),
        (["-rdb", GOLDEN], "holds 3 instances; choose one with -rid: "),
        (["-rdb", GOLDEN, "-rid", "0000"], "recorded: e7f17c4ea52f6596/124f544219bb53cf"),
        (["-rdb", GOLDEN, "-rid", "1b78", "function(gvnn)"], "unknown function pass 'gvnn'"),
        (["-rdb", GOLDEN, "-rid", "1b78", "--block-dim-x", "4096"], "exceeds CUDA's limit of 1024"),
        (
            ["-rdb", GOLDEN, "-rid", "1b78", "--block-dim-x", "64", "--block-dim-y", "64"],
            "4096 threads exceeds the device limit",
        ),
        (
            ["-rdb", GOLDEN, "-rid", "1b78", "--config", "/no/such.json"],
            "cannot read /no/such.json",
        ),
    ],
)
def test_user_errors_are_one_line(args, message):
    code, out = mneme("replay", *args, "--compile-only")
    assert code == 2, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mneme: error: ") and message in lines[0], out
    assert "Traceback" not in out


def test_corrupt_ir_is_one_line(tmp_path, replay_db):
    import shutil

    copy = tmp_path / "copy.rdb"
    shutil.copytree(replay_db.root, copy)
    chunks = sorted((copy / "kernels" / static_hash(ADD_BIAS) / "ir").rglob("c/*"))
    assert chunks
    for chunk in chunks:
        chunk.write_bytes(b"\x00" * chunk.stat().st_size)
    code, out = mneme("replay", "-rdb", copy, "-rid", static_hash(ADD_BIAS) + "/", "--compile-only")
    assert code == 2 and len(out.strip().splitlines()) == 1, out


def test_restore_progress_only_for_instances_that_take_seconds():
    """mneme replay shows a (transient) restore bar for instances of 2 GiB or more to move;
    the engine's DeviceImage tells it each streamed batch."""
    from types import SimpleNamespace

    from mneme.replay.engine.restore import restore_bytes
    from mneme.replay.replay_command import PROGRESS_FROM_BYTES, restore_progress

    small = SimpleNamespace(regions=[SimpleNamespace(size=1 << 20)])
    large = SimpleNamespace(regions=[SimpleNamespace(size=3 << 29), SimpleNamespace(size=1 << 29)])
    assert restore_bytes(large) == 4 << 30 >= PROGRESS_FROM_BYTES
    with restore_progress(small) as progress:
        assert progress is None
    with restore_progress(large) as progress:
        progress(1 << 30)  # advances the bar
