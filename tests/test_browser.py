"""Notebook 05 in JupyterLab in a real browser: run it, move its widgets, read what they show.

nbval and papermill run notebooks headless, where widget state is not kept, so they never see
what a person sees after moving a slider. This test takes that path end to end: it starts
JupyterLab on 127.0.0.1 with a token, opens a copy of ``notebooks/05_halting.ipynb`` in
headless Chromium (Debian's ``chromium``, driven by Playwright), clears and runs every cell
at smoke size (``FROST_SMOKE=1``), then

- moves the quantile slider with the keyboard (PageDown on its handle: 0.5 -> 0.375), and
- picks the other seed in the model selector,

and checks after each that the summary line shows what ``ExitCache.at(q)`` gives for the same
model in this process (loaded from the cache the kernel trained into), and that the exit
histogram, the depth per class and the earliest/latest image grid are, byte for byte, the PNGs
the library draws here. Screenshots of the explorer after each move go to
``<outputs>/browser/05_halting_{slider,model}.png`` for a person to look at (``make test``: its
smoke folder; the committed ones in outputs/browser/ come from running this file alone). The server, its kernel
and the browser live in a temporary folder (their own Jupyter config, data, runtime, settings
and workspaces; the committed notebook is never run in place) and are shut down whatever happens.

Needs ``/usr/bin/chromium`` and ``playwright`` (``make test`` installs both; Playwright never
downloads a browser here). About a minute on two CPU cores, most of it the notebook itself.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from frost_nb.paths import outputs_dir, repo_root

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NOTEBOOK = "05_halting.ipynb"
# where this pytest run writes its outputs: the smoke folder under ``make test`` (FROST_OUTPUTS),
# so the tests never overwrite the committed screenshots; outputs/browser/ when run alone
SCREENSHOTS = outputs_dir() / "browser"
# time limits (seconds): generous for a loaded 2-core machine, but every wait is bounded
SERVER_START, PAGE_LOAD, RUN_ALL, WIDGET_UPDATE = 60, 120, 420, 60

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium; `make test` installs it as root)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is missing (pip install playwright; "
                                                             "`make test` installs it)")


@dataclass
class Lab:
    page: object  # playwright Page showing the notebook
    outputs: Path  # FROST_OUTPUTS of the kernel (its trained-model cache is outputs/cache)
    log: Path  # server and kernel log
    console: list[str]  # browser console errors and page errors


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, token: str, method: str = "GET"):
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"token {token}"})
    return urllib.request.urlopen(req, timeout=5)


def _start_server(root: Path, outputs: Path) -> tuple[subprocess.Popen, str, str, Path]:
    """JupyterLab over ``root/nb`` with everything of Jupyter's in ``root`` (nothing of the user's)."""
    settings = root / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    # no news / update check: no request leaves the machine and no toast covers the notebook
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    # a person's JupyterLab: no MPLBACKEND (make test sets Agg for pytest), so the kernel has the
    # inline backend; the explorer must not depend on it either way (frost_nb.notebook.widgets)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER", "IPYTHON")) and k != "MPLBACKEND"}
    env.update(FROST_SMOKE="1", FROST_OUTPUTS=str(outputs), FROST_CACHE=str(outputs / "cache"),
               FROST_PROGRESS="0", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               JUPYTER_CONFIG_DIR=str(root / "config"), JUPYTER_DATA_DIR=str(root / "data"),
               JUPYTER_RUNTIME_DIR=str(root / "runtime"), IPYTHONDIR=str(root / "ipython"),
               JUPYTER_PLATFORM_DIRS="1")
    port, token = _free_port(), secrets.token_hex(24)
    log = root / "server.log"
    # this interpreter's JupyterLab, so the kernel (python3 -> sys.executable) imports frost_nb
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={root / 'nb'}", "--ServerApp.terminals_enabled=False",
           f"--LabApp.user_settings_dir={root / 'lab-settings'}",
           f"--LabApp.workspaces_dir={root / 'workspaces'}"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # its own process group, killed as one
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START
    while True:
        try:
            _request(f"{base}/api/status", token)
            return proc, base, token, log
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop_server(proc, base, token)
                pytest.fail(f"JupyterLab did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.25)


def _stop_server(proc: subprocess.Popen, base: str, token: str) -> None:
    """Ask the server to shut down (it stops its kernels), then end its process group."""
    if proc.poll() is None:
        try:
            _request(f"{base}/api/shutdown", token, method="POST")
            proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=10)
            break
        except subprocess.TimeoutExpired:
            continue


def _menu(page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


# every code cell's prompt, and whether the kernel is idle (status bar "Python 3 (ipykernel) | Idle")
_STATE = """(() => ({
    prompts: [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')]
        .map(e => e.textContent.trim()),
    idle: [...document.querySelectorAll('.jp-StatusBar-TextItem')]
        .some(e => / \\| Idle$/.test(e.textContent))}))()"""
_LOADED = "() => { const s = " + _STATE + "; return s.idle && s.prompts.length > 0; }"
_CLEARED = ("() => { const s = " + _STATE + "; return s.prompts.length > 0"
            " && s.prompts.every(t => t === '[ ]:'); }")
# done: every prompt numbered; or stopped: the kernel idle with no cell queued or running
_FINISHED = ("() => { const s = " + _STATE + "; return s.prompts.every(t => /^\\[\\d+\\]:$/.test(t))"
             " || (s.idle && !s.prompts.some(t => t === '[*]:')); }")


def _run_all(page, log: Path) -> None:
    """Clear every output, run all cells, and wait until each has run (or one failed)."""
    _menu(page, "Edit", "Clear Outputs of All Cells")
    page.wait_for_function(_CLEARED, timeout=PAGE_LOAD * 1000)
    _menu(page, "Run", "Run All Cells")
    page.wait_for_function(_FINISHED, timeout=RUN_ALL * 1000, polling=500)
    state = page.evaluate(_STATE)
    if not all(re.fullmatch(r"\[\d+\]:", t) for t in state["prompts"]):
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        text = "\n".join(errors.all_inner_texts())
        pytest.fail(f"the notebook stopped (prompts {state['prompts']}):\n{text[-4000:]}\n"
                    f"server log:\n{log.read_text()[-2000:]}")


def _copy_as_a_user_opens_it(source: Path, target: Path) -> None:
    """A byte-for-byte copy of the committed notebook (never the file itself, which running it
    would change): its parameters cell names the committed run's checkpoint, which FROST_SMOKE
    checks exists and replaces by the smoke FROST on digits, so the kernel trains smoke models."""
    target.write_bytes(source.read_bytes())


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyterlab")
    (root / "nb").mkdir()
    _copy_as_a_user_opens_it(repo_root() / "notebooks" / NOTEBOOK, root / "nb" / NOTEBOOK)
    outputs = root / "outputs"
    proc, base, token, log = _start_server(root, outputs)
    console: list[str] = []
    try:
        with sync_api.sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                str(root / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
                viewport={"width": 1600, "height": 1300})
            try:
                page = context.pages[0] if context.pages else context.new_page()
                page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: console.append(str(e)))
                page.set_default_timeout(WIDGET_UPDATE * 1000)
                page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}", timeout=PAGE_LOAD * 1000)
                page.wait_for_function(_LOADED, timeout=PAGE_LOAD * 1000)
                _run_all(page, log)
                yield Lab(page, outputs, log, console)
            finally:
                context.close()
    finally:
        _stop_server(proc, base, token)


@pytest.fixture(scope="module")
def reference(lab):
    """The notebook's explorer rebuilt in this process from the models the kernel trained and
    cached: the library's own numbers and figures to compare the browser's against."""
    from frost_nb.analysis.exits import ExitCache
    from frost_nb.config import make_config
    from frost_nb.notebook.widgets import HaltingExplorer
    from frost_nb.runs import train_or_load
    from frost_nb.training import load_split

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FROST_SMOKE", "1")
        mp.setenv("FROST_OUTPUTS", str(lab.outputs))
        mp.setenv("FROST_CACHE", str(lab.outputs / "cache"))
        config = make_config("smoke", None, "frost")  # what the notebook builds under FROST_SMOKE=1
        test = load_split(config, "test")
        caches = {}
        for seed in (0, 1):  # the notebook's seeds at smoke size
            result = train_or_load(config.replace(**{"train.seed": seed}))
            assert result.from_cache, "the kernel should have trained and cached this model"
            caches[f"seed {seed}"] = ExitCache.from_model(result.model, result.calibrator, test,
                                                          batch_size=config.train.eval_batch_size)
    return HaltingExplorer(caches, images=test.x, classes=test.classes, quantile=0.5, examples=8)


def _stats(page) -> tuple[str, float, str]:
    """The explorer's summary line: (model label, quantile, the text after the label).

    Read as text content, not rendered text: JupyterLab 4.6 skips the rendering of cells out of
    view (windowing mode ``contentVisibility``), whose ``innerText`` is then empty."""
    stats = page.locator(".frost-explorer .frost-stats")
    stats.scroll_into_view_if_needed()  # where a person looks
    text = " ".join(stats.text_content().split())
    m = re.fullmatch(r"(.+?): (q = ([0-9.]+) · .*)", text)
    assert m, f"unexpected explorer summary {text!r}"
    return m.group(1), float(m.group(3)), m.group(2)


_PNG = """async img => {
    const bytes = new Uint8Array(await (await fetch(img.src)).arrayBuffer());
    let s = ''; for (const b of bytes) s += String.fromCharCode(b);
    return btoa(s); }"""


def _figures_match(page, reference) -> None:
    """Each figure the browser shows is, byte for byte, the one the library draws here."""
    for view in ("histogram", "per-class", "gallery"):
        img = page.locator(f".frost-explorer img.frost-{view}")
        shown = base64.b64decode(img.evaluate(_PNG))
        expected = bytes(getattr(reference, view.replace("-", "_")).value)
        assert shown == expected, f"the {view} differs ({len(shown)} bytes shown, {len(expected)} drawn here)"


def _wait_for_stats(page, pattern: str) -> None:
    page.locator(".frost-explorer .frost-stats", has_text=re.compile(pattern)).wait_for()
    # the summary line is written after the figures: wait until all of them are decoded too
    page.wait_for_function("() => [...document.querySelectorAll('.frost-explorer img')]"
                           ".every(i => i.complete && i.naturalWidth > 0)")


def _screenshot(page, name: str) -> None:
    """The explorer's output as a 256-colour PNG: a screenshot of the interface, half the bytes of a
    true-colour one, with nothing visible lost."""
    import io

    from PIL import Image

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    output = page.locator(".jp-OutputArea-child", has=page.locator(".frost-explorer"))  # with its prompt
    output.scroll_into_view_if_needed()
    png = output.screenshot(animations="disabled")
    Image.open(io.BytesIO(png)).convert("RGB").quantize(256).save(SCREENSHOTS / name, optimize=True)


def test_explorer_renders_in_jupyterlab(lab, reference):
    from frost_nb.notebook.widgets import describe

    page = lab.page
    _wait_for_stats(page, r"^seed 0: q = 0\.500 ")
    assert not page.get_by_text("Error displaying widget").count(), "a widget failed to render"
    assert not page.locator(".frost-explorer", has_text="<Figure size").count(), "a figure shown as text"
    label, q, shown = _stats(page)
    assert (label, q) == ("seed 0", 0.5)  # the notebook's quantile parameter, its first model
    assert shown == describe(reference.caches[label].at(q))
    _figures_match(page, reference)  # histogram, depth per class, earliest and latest images


def test_moving_the_quantile_slider_updates_the_numbers(lab, reference):
    from frost_nb.notebook.widgets import describe

    page = lab.page
    label, q0, shown0 = _stats(page)
    handle = page.locator(".frost-explorer .frost-quantile .noUi-handle")
    handle.focus()
    handle.press("PageDown")  # five steps of 0.025 down (0.5 -> 0.375), one change sent to the kernel
    _wait_for_stats(page, r": q = 0\.375 ")
    label1, q1, shown1 = _stats(page)
    assert (label1, q0, q1) == (label, 0.5, 0.375)
    assert page.locator(".frost-explorer .frost-quantile .widget-readout").text_content().strip() == "0.375"
    expected = reference.caches[label].at(q1)
    assert shown1 == describe(expected) != shown0
    assert f"accuracy {100 * expected.accuracy:.2f}%" in shown1
    assert f"mean depth {expected.mean_depth:.2f} of" in shown1
    reference.slider.value = q1
    _figures_match(page, reference)  # histogram and example grid redrawn for q = 0.375
    _screenshot(page, "05_halting_slider.png")


def test_the_model_selector_switches_to_the_other_seed(lab, reference):
    from frost_nb.notebook.widgets import describe

    page = lab.page
    _, q, shown0 = _stats(page)
    page.locator(".frost-explorer .frost-model select").select_option("seed 1")
    _wait_for_stats(page, r"^seed 1: ")
    label, q1, shown = _stats(page)
    assert (label, q1) == ("seed 1", q)  # the quantile stays where it was
    assert shown == describe(reference.caches["seed 1"].at(q)) != shown0
    reference.selector.value = "seed 1"
    reference.slider.value = q
    _figures_match(page, reference)
    _screenshot(page, "05_halting_model.png")
    assert not [m for m in lab.console if "widget" in m.lower()], lab.console
