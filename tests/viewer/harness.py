"""Headless Chromium for the viewer's tests and benchmark.

Debian's chromium and chromedriver, driven by python3-selenium; no browser is
downloaded and nothing reaches the network. A site root is laid out in a temp
directory the way the repository is (viewer/, node_modules/, tests/ linked in,
traces/ holding the fixture traces), so ?trace=NAME is read from ../traces/
exactly as in the repository.
"""
import contextlib
import functools
import http.server
import os
import shutil
import tempfile
import threading

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


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


def browser(width=1280, height=800):
    profile = tempfile.mkdtemp(prefix="lectern-chromium-")
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                "--disable-dev-shm-usage", "--disable-extensions", "--hide-scrollbars",
                "--force-device-scale-factor=1", f"--window-size={width},{height}",
                f"--user-data-dir={profile}"]:
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    drv.set_window_size(width, height)
    drv._lectern_profile = profile
    return drv


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
