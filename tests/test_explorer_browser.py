"""The explorer notebook in a real browser: JupyterLab on localhost (a temp dir holding a copy of
notebooks/09_explorer.ipynb), headless Chromium driven by Playwright runs every cell in a 1280 px
window: the figure must sit above the controls at least 900 px wide, the "measure on GPU" control
must show disabled with its reason (no GPU here), and typing an M or dragging its slider must redraw:
the figure's pixels change and the reported best partition becomes the one fo_lib predicts for the
new value.

Skips only when no Chromium binary is installed, and never in CI (``CI`` set: .ci/run installs
Debian's ``chromium``, so its absence there is a failure); ``FO_CHROMIUM`` names another binary."""
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gloo_ranks import free_port

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "09_explorer.ipynb"


def chromium_binary() -> str | None:
    for name in (os.environ.get("FO_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


CHROMIUM = chromium_binary()
IN_CI = bool(os.environ.get("CI"))
pytestmark = [pytest.mark.skipif(CHROMIUM is None and not IN_CI,
                                 reason="no Chromium binary installed (apt-get install chromium; or set FO_CHROMIUM)"),
              pytest.mark.timeout(240)]


def test_ci_has_a_browser():
    """CI must run the browser test, not skip it."""
    assert CHROMIUM is not None, "no Chromium binary: .ci/run installs Debian's chromium before the tests"


def _copy_notebook(folder: Path, figures: Path) -> Path:
    """The notebook, its figures redirected to ``figures`` (what papermill's parameters would do)."""
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", ()))
    assert "figures_dir = None" in params.source
    params.source = params.source.replace("figures_dir = None", f"figures_dir = {str(figures)!r}")
    out = folder / NOTEBOOK.name
    nbformat.write(nb, out)
    return out


@pytest.fixture
def lab(tmp_path):
    """JupyterLab serving ``tmp_path/work``; yields (base URL, token, work dir)."""
    import jupyterlab  # noqa: F401  (the notebooks extra)
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    port, token = free_port(), "fo-explorer-test"
    import matplotlib
    env = dict(os.environ, HOME=str(home), PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               MPLCONFIGDIR=matplotlib.get_configdir(), JUPYTER_PLATFORM_DIRS="1")
    # Render every cell, not only those in view (JupyterLab 4's windowed notebook would leave the
    # widget's output unattached until scrolled to).
    settings = tmp_path / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    log = open(tmp_path / "lab.log", "w")
    # --allow-root: CI runs as root.
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
           f"--IdentityProvider.token={token}", "--allow-root", f"--ServerApp.root_dir={work}",
           f"--LabApp.user_settings_dir={tmp_path / 'settings'}", "--LabApp.news_url=",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not start:\n" + (tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield url, token, work
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _wait_for(fn, timeout: float, what: str, page=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _run_all_cells(page) -> None:
    """Run > Run All Cells, once the kernel is connected; a click made while it was still connecting
    runs nothing, so click again until a prompt shows the first cell running or done."""
    page.locator(".jp-StatusBar-Widget", has_text="| Idle").first.wait_for(timeout=90_000)
    started = page.locator(".jp-InputPrompt", has_text=re.compile(r"\[(\*|\d+)\]"))
    for _ in range(4):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:
            started.first.wait_for(timeout=15_000)
            return
        except Exception:  # playwright's TimeoutError: the click came too early, try again
            page.keyboard.press("Escape")
    raise AssertionError("Run All Cells never started a cell")


def _wait_for_summary(summary, want: str, what: str) -> None:
    _wait_for(lambda: summary.inner_text() == want, 60, f"the summary for {what}: {want!r} (still "
              f"{summary.inner_text()!r})")


def test_explorer_redraws_when_m_is_typed_or_dragged_in_a_real_browser(lab, tmp_path):
    from playwright import sync_api  # the test extra
    from fo_lib.experiments import explorer
    from fo_lib.experiments.explorer import measure

    url, token, work = lab
    nb = _copy_notebook(work, tmp_path / "figures")
    with sync_api.sync_playwright() as pw:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            # A laptop's window: the figure must still be wide enough to read.
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(f"{url}/lab/tree/{nb.name}?token={token}&reset", timeout=60_000)
            page.locator(".jp-Notebook").first.wait_for(timeout=60_000)
            _run_all_cells(page)
            image = page.locator("img.fo-explorer-image")
            summary = page.locator(".fo-explorer-summary")
            image.wait_for(state="attached", timeout=120_000)
            _wait_for(lambda: image.get_attribute("src") and summary.inner_text().startswith("best partition"), 60,
                      "the first figure")
            image.scroll_into_view_if_needed()
            src0, pixels0, text0 = image.get_attribute("src"), image.screenshot(), summary.inner_text()
            assert text0 == explorer.explore().summary()

            # Layout: the figure above the controls and inside the notebook (not clipped at its right
            # edge beside the file browser); with the file browser collapsed, as a reader does, at
            # least 900 px wide in a 1280 px window.
            typed = page.locator(".fo-control-M input")
            panel = page.locator(".jp-NotebookPanel-notebook").first.bounding_box()
            fig_box, m_box = image.bounding_box(), typed.bounding_box()
            assert fig_box["x"] + fig_box["width"] <= panel["x"] + panel["width"] + 1, (fig_box, panel)
            assert fig_box["y"] + fig_box["height"] <= m_box["y"], (fig_box, m_box)
            page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").first.click()
            _wait_for(lambda: image.bounding_box()["width"] >= 900, 10,
                      f"the figure to take the window's width (still {image.bounding_box()['width']:.0f} px)")

            # Without a GPU the measure control is shown, disabled, with its reason beside it.
            button = page.locator(".fo-explorer-measure")
            no_gpu = measure.CudaBackend().device()[0] is None
            assert button.is_visible() and button.is_disabled() == no_gpu
            if no_gpu:
                assert measure.NO_GPU in page.locator(".fo-explorer-measure-reason").inner_text()

            # Type an M off the slider's 128 grid and press Enter: the exact value must be drawn (the
            # check that catches a text box not wired to the redraw, or a slider that snaps it back).
            typed.fill("3000")
            typed.press("Enter")
            _wait_for_summary(summary, explorer.explore(M=3000).summary(), "M=3000")
            _wait_for(lambda: image.get_attribute("src") != src0, 30, "a new image")
            assert image.screenshot() != pixels0, "the image shows the same pixels after M was typed"
            assert typed.input_value() == "3000"

            # Drag the M slider's handle to the right, as a user would; its text box follows and the
            # widget redraws on release (continuous_update=False).
            handle = page.locator(".fo-slider-M .noUi-handle")
            box = handle.bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.mouse.down()
            page.mouse.move(box["x"] + box["width"] / 2 + 25, box["y"] + box["height"] / 2, steps=5)
            page.mouse.up()
            m1 = int(_wait_for(lambda: typed.input_value() if typed.input_value() != "3000" else None, 10,
                               "the text box to follow the slider"))
            _wait_for_summary(summary, explorer.explore(M=m1).summary(), f"M={m1}")
        except BaseException:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)  # kept by pytest's tmp_path
            print(f"screenshot: {tmp_path / 'failure.png'}; JupyterLab log: {tmp_path / 'lab.log'}")
            raise
        finally:
            browser.close()
