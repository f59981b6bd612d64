"""The `pdag` command line as a user meets it: README's commands and the main job's "next:" lines run as
typed, one input reader for every file (size, encoding, depth, special files), quiet broken pipes, calibrate's
checks, --model by Hugging Face id or config.json, and the server's flags through `pdag serve`."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.calibration.accuracy import load_measurements
from tools.cli import main
from tools.rules.lookup import lookup_rule

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PDAG = [sys.executable, "-c", "import sys; from tools.cli import main; sys.exit(main())"]


def readme_plan() -> dict:
    section = README.split("## The plan", 1)[1]
    return json.loads(section.split("```json", 1)[1].split("```", 1)[0])


def readme_commands() -> list[list[str]]:
    block = README.split("## Command line", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    out = []
    for line in block.splitlines():
        for part in re.split(r"\s#\s", line, maxsplit=1)[0].split(";"):
            argv = shlex.split(part)
            if argv:
                out.append(argv)
    return out


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.json").write_text(json.dumps(readme_plan()), encoding="utf-8")
    h100 = [p for p in load_measurements() if p["gpu"] == "h100-sxm"]
    (tmp_path / "my-measurements.json").write_text(json.dumps({"points": h100}), encoding="utf-8")
    (tmp_path / "cfg.json").write_text(json.dumps({"enable_attention_dp": True}), encoding="utf-8")
    # the config.json a user brings for a model with no preset (MiniMax-M2's own was not found; M2.5's has its shapes)
    m25 = Path(__file__).resolve().parents[1] / "knowledge" / "models" / "minimax-m2.5.json"
    (tmp_path / "config.json").write_text(m25.read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


@pytest.mark.slow  # tens of seconds (the serving simulator prices every point); .ci/run runs it
def test_readme_commands_run_as_typed(workdir, capsys):
    commands = readme_commands()
    assert len(commands) >= 15 and all(c[0] == "pdag" for c in commands)
    for argv in commands:
        args = argv[1:]
        if args[:1] == ["serve"]:
            continue  # it takes over the process; test_serve_takes_the_server_flags runs it
        if args[:1] == ["accuracy"]:
            args.append("--no-loo")  # the leave-one-out refits take ~30 s; tests/test_estimate_accuracy covers them
        code = main(args)
        out, err = capsys.readouterr()
        assert code in (0, 1), (argv, err)
        assert out.strip() and "Traceback" not in err, argv


def test_next_lines_of_the_main_job_run_as_typed(workdir, capsys):
    for typed in ([], ["--model", "mixtral-8x7b", "--gpus", "8", "--tp", "8", "--ep", "8"],
                  ["plan", "plan.json", "--batch", "4"]):
        assert main(typed) in (0, 1)
        out = capsys.readouterr().out
        nexts = re.findall(r"(pdag [^\n(]*?)\s+\(", out.split("next:", 1)[1])
        assert len(nexts) == (2 if "no engine launch command" in out else 3), out
        for line in nexts:
            code = main(shlex.split(line)[1:])
            err = capsys.readouterr().err
            assert code in (0, 1), (line, err)


def test_rule_query_from_the_readme_ranks_tp_within_node_first():
    assert lookup_rule(query="why not TP across nodes").rules[0].id == "TP-WITHIN-NODE"


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and re.match(r"pdag \d+\.\d+", capsys.readouterr().out)


def test_model_flag_takes_hf_ids_and_config_files(tmp_path, capsys):
    assert main(["export", "--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpus", "8", "--tp", "8",
                 "--engine", "vllm"]) == 0
    assert "Llama-3.1-70B" in capsys.readouterr().out
    cfg = json.loads((ROOT / "knowledge" / "models" / "llama-3.1-8b.json").read_text())  # a real config.json
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["validate", "--model", str(tmp_path / "config.json"), "--gpu", "h100-sxm", "--gpus", "1"]) == 0
    assert main(["build", "--model", "nobody/Unknown-1B", "--gpus", "1"]) == 2
    assert "--model" in capsys.readouterr().err


def test_export_reads_plan_json_output_and_search_takes_a_plan_file(tmp_path, capsys):
    assert main(["plan", "--model", "mixtral-8x7b", "--gpus", "8", "--tp", "8", "--ep", "8", "--json"]) == 0
    (tmp_path / "out.json").write_text(capsys.readouterr().out)
    assert main(["export", str(tmp_path / "out.json"), "--engine", "sglang"]) == 0
    assert "--tp-size 8" in capsys.readouterr().out
    assert main(["search", str(tmp_path / "out.json"), "--top", "2"]) == 0
    assert "mixtral-8x7b on 8x h100-sxm" in capsys.readouterr().out
    assert main(["search", "--tp", "8"]) == 2
    assert "--tp" in capsys.readouterr().err


BAD_FILES = {
    "binary": (b"\x00\x01\x02\x03" * 10, "binary"),
    "latin-1": ('{"model": "caf\xe9"}'.encode("latin-1"), "not UTF-8"),
    "utf-16 without bom": ('{"a": 1}'.encode("utf-16-le"), "UTF-16"),
    "deep": (b"[" * 5000 + b"]" * 5000, "nested"),
    "huge integer": (b'{"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": ' + b"9" * 5000 + b"}}",
                     "digits"),
    "nan": (b'{"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": NaN}}', "NaN"),
    "bad bom": (b"\xff\xfe\x00\xd8\x00\x00", "byte-order mark"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_reader_refuses_bad_files_with_a_clear_error(tmp_path, capsys, name):
    data, expected = BAD_FILES[name]
    (tmp_path / "f.json").write_bytes(data)
    assert main(["validate", str(tmp_path / "f.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: plan_file") and expected in err, err


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-be", "utf-32"])
def test_reader_accepts_unicode_with_a_bom(tmp_path, capsys, encoding):
    text = json.dumps({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}})
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data
    (tmp_path / "p.json").write_bytes(data)
    assert main(["validate", str(tmp_path / "p.json")]) == 0, capsys.readouterr().err


def test_reader_size_cap(tmp_path):
    from tools.core.errors import PdagInputError
    from tools.core.inputs import read_text_file

    (tmp_path / "big.json").write_text("1" * 2000)
    with pytest.raises(PdagInputError, match="at most 1,000 bytes"):
        read_text_file(str(tmp_path / "big.json"), "plan_file", max_bytes=1000)


def test_special_files_never_block(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    for target in (str(fifo), "/dev/zero", str(tmp_path)):
        out = subprocess.run([*PDAG, "validate", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "plan_file" in out.stderr and "Traceback" not in out.stderr, out.stderr
    for argv in (["estimate", "--efficiency", "/dev/zero"], ["calibrate", str(fifo), "--gpu", "h100-sxm"],
                 ["accuracy", "/dev/zero"]):
        out = subprocess.run([*PDAG, *argv], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "not a regular file" in out.stderr, (argv, out.stderr)
    assert time.monotonic() - t0 < 60


def test_broken_pipe_is_quiet():
    proc = subprocess.run(f"{shlex.join(PDAG)} build --model deepseek-v3 --gpu h200 --gpus 64 --pp 2 --tp 8 --ep 8"
                          f" --json | head -c 10", shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert len(proc.stdout) == 10
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_serve_takes_the_server_flags():
    out = subprocess.run([*PDAG, "serve", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for flag in ("--http", "--auth-token", "--session-idle-timeout", "--max-body-bytes", "--allowed-host"):
        assert flag in out.stdout
    bad = subprocess.run([*PDAG, "serve", "--http", "--port", "0"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "--port" in bad.stderr


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


ROW = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "metric": "tpot_ms", "value": "9.5", "input_len": "512",
       "output_len": "128", "batch_size": "1", "tp": "1"}


@pytest.mark.parametrize("column,value,expected", [
    ("value", "nan", "finite"), ("value", "inf", "finite"), ("batch_size", "inf", "whole number"),
    ("tp", "eight", "whole number"), ("tp", "2.5", "whole number"), ("value", "-3", "positive"),
])
def test_calibrate_refuses_bad_cells(tmp_path, capsys, column, value, expected):
    write_csv(tmp_path / "m.csv", [ROW, {**ROW, column: value}])
    assert main(["calibrate", str(tmp_path / "m.csv"), "--gpu", "h100-sxm", "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err


def test_calibrate_refuses_string_degrees_and_nan_in_json(tmp_path, capsys):
    point = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "metric": "tpot_ms", "value": 9.5, "input_len": 512,
             "output_len": 128, "batch_size": 1, "parallel": {"tp": "8"}}
    (tmp_path / "m.json").write_text(json.dumps({"points": [point]}))
    assert main(["calibrate", str(tmp_path / "m.json"), "--gpu", "h100-sxm"]) == 2
    assert "parallel.tp" in capsys.readouterr().err
    (tmp_path / "n.json").write_text(json.dumps({"points": [{**point, "parallel": {"tp": 1}, "value": "NaN"}]})
                                     .replace('"NaN"', "NaN"))
    assert main(["calibrate", str(tmp_path / "n.json"), "--gpu", "h100-sxm"]) == 2
    assert "NaN" in capsys.readouterr().err


def test_calibrate_warns_on_few_points_and_is_fast_on_20000_rows(tmp_path, capsys):
    # three decode points pin the one factor that bounds them (memory); one point cannot
    few = [{**ROW, "batch_size": "1", "value": "9.0"}]
    write_csv(tmp_path / "few.csv", few)
    assert main(["calibrate", str(tmp_path / "few.csv"), "--gpu", "h100-sxm", "--out", str(tmp_path / "o.json"),
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert any("distinct configuration" in w for w in result["warnings"])
    configs = [(b, i, tp) for b in (1, 4, 16, 64) for i in (256, 2048) for tp in (1, 2, 4)]
    rows = [{**ROW, "batch_size": str(b), "input_len": str(i), "tp": str(tp),
             "value": f"{(6 + 0.05 * b) / tp ** 0.7 * (1 + (n % 7) / 50):.3f}"}
            for n in range(20_000) for b, i, tp in [configs[n % len(configs)]]]
    write_csv(tmp_path / "many.csv", rows)
    t0 = time.perf_counter()
    assert main(["calibrate", str(tmp_path / "many.csv"), "--gpu", "h100-sxm", "--out", str(tmp_path / "o.json"),
                 "--json"]) == 0
    elapsed = time.perf_counter() - t0
    result = json.loads(capsys.readouterr().out)
    assert result["rows"] == 20_000 and result["points"] == len(configs)
    assert elapsed < 30, elapsed


def test_calibrate_warns_when_a_factor_sits_at_its_bound(tmp_path, capsys):
    # Measurements 50x faster than the hardware allows: the memory efficiency can only stop at its cap.
    rows = [{**ROW, "batch_size": str(b), "input_len": str(i), "value": "0.1"} for b in (1, 2, 4, 8, 16)
            for i in (256, 1024)]
    write_csv(tmp_path / "fast.csv", rows)
    assert main(["calibrate", str(tmp_path / "fast.csv"), "--gpu", "h100-sxm", "--out", str(tmp_path / "o.json"),
                 "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert any("cap" in w or "edge" in w for w in warnings), warnings


def test_accuracy_lists_the_largest_errors_unless_asked_for_every_point(capsys):
    src = str(ROOT / "evals" / "measurements" / "serving.json")
    n_points = len(load_measurements(src))

    def point_lines(extra: list[str]) -> list[str]:
        assert main(["accuracy", src, "--no-loo", *extra]) == 0
        out = capsys.readouterr().out
        return [ln for ln in out.splitlines() if ln.startswith(("nimsrv180-", "vllmblog-"))]

    three = point_lines(["--rows", "3"])
    errors = [abs(float(ln.split()[-1].rstrip("%"))) for ln in three]
    assert len(three) == 3 and errors == sorted(errors, reverse=True)
    assert len(point_lines([])) == 20
    assert len(point_lines(["--rows", "all"])) == n_points
    with pytest.raises(SystemExit):
        main(["accuracy", src, "--rows", "many"])
    assert "--rows" in capsys.readouterr().err
