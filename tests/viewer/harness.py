"""Headless Chromium for the viewer's tests and benchmark.

Debian's chromium (its headless shell where installed) and chromedriver,
driven by python3-selenium; no browser is downloaded and nothing reaches the
network. A site root is laid out in a temp directory the way the repository
is (viewer/, node_modules/, tests/ linked in, traces/ holding the fixture
traces), so ?trace=NAME is read from ../traces/ exactly as in the repository.
"""
import atexit
import contextlib
import functools
import http.server
import os
import shutil
import sys
import tempfile
import threading

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

REPO = tracecheck.ROOT
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# What the tests drive: Chromium's headless shell (Debian's
# chromium-headless-shell, the same Blink and V8 without the browser's own
# windowing layer) when it is installed, else Chromium. On the 2-core VM the
# shell starts in about 1 CPU-s instead of 4 and loads lecture_08's page in
# about 0.8 instead of 1.2 (docs/testing.md); a step and an axe-core run cost
# the same in both. LECTERN_BROWSER=/usr/bin/chromium chooses Chromium; the
# benchmark (bench/viewer_bench.py) always measures Chromium, what a reader runs.
HEADLESS_SHELL = "/usr/lib/chromium/chromium-headless-shell"
BROWSER = os.environ.get("LECTERN_BROWSER") or (HEADLESS_SHELL if os.access(HEADLESS_SHELL, os.X_OK) else CHROMIUM)
# Chromium's headless window keeps 143 px of its height for a toolbar it
# does not draw (the page is 143 px shorter than the window at every size
# tried, Chromium 156); the shell's page is its whole window. The tests'
# sizes are Chromium's windows, so the shell's window is made that much
# shorter: the same page either way.
TOOLBAR = 143


def _is_shell(binary):
    return os.path.basename(binary) == "chromium-headless-shell"


def set_size(drv, width, height):
    """Sizes the browser's window as Chromium's would be at width x height
    (the page inside it the same in Chromium and in its shell)."""
    drv.set_window_size(width, height - TOOLBAR if getattr(drv, "_lectern_shell", False) else height)


def make_root(traces_dir, node_modules=True):
    """A temp site root: viewer/, tests/, assets/ (and node_modules/) linked to
    the repository, traces/ linked to traces_dir."""
    root = tempfile.mkdtemp(prefix="lectern-view-")
    links = ["viewer", "tests", "assets"] + (["node_modules"] if node_modules else [])
    for name in links:
        if os.path.exists(os.path.join(REPO, name)):
            os.symlink(os.path.join(REPO, name), os.path.join(root, name))
    os.symlink(os.path.abspath(traces_dir), os.path.join(root, "traces"))
    return root


def browser(width=1280, height=800, binary=None):
    """A new headless browser (BROWSER unless binary names another) at
    width x height; quit_browser() ends it."""
    binary = binary or BROWSER
    opts = Options()
    opts.binary_location = binary
    # Chromium gets a profile folder of its own (removed at quit). The shell
    # gets none (it leaves none behind): given one, chromedriver cannot
    # find the shell's first page ("unable to discover open pages").
    shell = _is_shell(binary)
    profile = None if shell else tempfile.mkdtemp(prefix="lectern-chromium-")
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                "--disable-dev-shm-usage", "--disable-extensions", "--hide-scrollbars",
                "--force-device-scale-factor=1", f"--window-size={width},{height}"] + \
            ([] if shell else [f"--user-data-dir={profile}"]):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    drv._lectern_shell = shell
    set_size(drv, width, height)
    drv._lectern_profile = profile
    return drv


_shared = None


def shared_browser(width=1280, height=800):
    """The one browser of this process, started on the first call and quit
    at exit: starting Chromium takes seconds on a loaded machine, so the test
    classes of a run share one instead of starting one each. Each call leaves
    it as a fresh one would be for the next class: on a blank page, at
    width x height, with Selenium's default script timeout (a class that
    adds a script to every new document removes it in its tearDownClass).
    The viewer keeps nothing in storage, so nothing else carries over."""
    global _shared
    if _shared is not None:
        try:
            _shared.get("about:blank")
        except Exception:   # it died: start another
            _shared = None
    if _shared is None:
        _shared = browser(width, height)
        atexit.register(_quit_quietly, _shared)
    _shared.set_script_timeout(30)
    set_size(_shared, width, height)
    return _shared


def _quit_quietly(drv):
    try:
        quit_browser(drv)
    except Exception:
        pass


def quit_browser(drv):
    profile = getattr(drv, "_lectern_profile", None)
    try:
        drv.quit()
    finally:
        if profile:
            shutil.rmtree(profile, ignore_errors=True)


def file_url(root, query):
    return "file://" + os.path.join(root, "viewer", "index.html") + query


def wait_ready(drv, timeout=20):
    """Waits until the viewer has shown a trace or an error; returns which."""
    WebDriverWait(drv, timeout).until(
        lambda d: d.execute_script("var v = window.lecternViewer; return v && (v.ready || v.error);"))
    return drv.execute_script("return window.lecternViewer.error")


AXE = os.path.join(REPO, "node_modules", "axe-core", "axe.min.js")
_axe_src = None


def axe(drv, context="document"):
    """axe-core's violations of the page's current state, one string each:
    'rule (impact): up to three elements'; None when node_modules/axe-core
    is missing (npm ci). context: a JavaScript expression for what to check
    (an element; the whole document by default). axe-core is put into a page
    once; running it again on the same page (after the page changed) reuses it.
    Only violations are asked for (resultTypes): axe still runs every rule
    on every node and reports every violation, but describes at most one
    node of each passing or inapplicable rule (it builds a selector for each
    node it reports), about a quarter less time on the lectures' pages."""
    global _axe_src
    if not os.path.exists(AXE):
        return None
    if not drv.execute_script("return !!window.axe"):
        if _axe_src is None:
            with open(AXE, encoding="utf-8") as f:
                _axe_src = f.read()
        drv.execute_script(_axe_src)
    return drv.execute_async_script("""var done = arguments[arguments.length - 1];
        axe.run(%s, {resultTypes: ['violations']}).then(function (r) { done(r.violations.map(function (v) {
          return v.id + ' (' + v.impact + '): ' + v.nodes.slice(0, 3).map(function (n) {
            return n.target.join(' '); }).join(', ');
        })); }, function (e) { done(['axe failed: ' + e]); });""" % context)


@contextlib.contextmanager
def http_server(root):
    """Serves root on an ephemeral localhost port, like `make view`."""
    handler = functools.partial(_Quiet, directory=root)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield "http://127.0.0.1:%d" % srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
