#!/usr/bin/env bash
# Browser tests of the viewer: Debian's headless Chromium driven by
# python3-selenium, pages opened from file:// (and once over localhost).
# Screenshots land in build/viewer-screenshots/. Exit status 1 on failure;
# the last line reads "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
for bin in /usr/bin/chromium /usr/bin/chromedriver /usr/bin/python3; do
    if [ ! -x "$bin" ]; then
        echo "viewer tests: $bin is missing (apt-get install chromium chromium-driver python3-selenium)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done
[ -d node_modules/@highlightjs ] || echo "viewer tests: node_modules/ missing (npm ci): highlighting and plots are not checked"
# Arguments: test names, module first (test_hostile.TestHostileTrace.test_drop);
# none runs every tests/viewer/test_*.py.
exec /usr/bin/python3 - "$@" <<'PY'
import glob
import importlib
import os
import sys
import unittest

sys.path.insert(0, "tests/viewer")
loader = unittest.defaultTestLoader
names = sys.argv[1:]
if names:
    suite = loader.loadTestsFromNames(names)
else:
    mods = sorted(os.path.basename(p)[:-3] for p in glob.glob("tests/viewer/test_*.py"))
    suite = unittest.TestSuite(loader.loadTestsFromModule(importlib.import_module(m)) for m in mods)
import time

import harness
print("viewer tests: driving " + harness.BROWSER, flush=True)


class Timed(unittest.TextTestResult):
    """Seconds per test class, its setUpClass and tearDownClass included
    (the time from the previous class's last test to this class's last)."""
    times = {}
    last = None

    def startTestRun(self):
        Timed.last = time.monotonic()
        super().startTestRun()

    def stopTest(self, test):
        super().stopTest(test)
        now = time.monotonic()
        key = type(test).__module__ + "." + type(test).__name__
        Timed.times[key] = Timed.times.get(key, 0) + now - Timed.last
        Timed.last = now


started = time.monotonic()
res = unittest.TextTestRunner(verbosity=2, resultclass=Timed).run(suite)
for key, s in sorted(Timed.times.items(), key=lambda kv: -kv[1]):
    print("viewer time: %6.1f s  %s" % (s, key))
print("viewer time: %6.1f s  in all" % (time.monotonic() - started))
failed = len(res.failures) + len(res.errors) + len(res.unexpectedSuccesses)
passed = res.testsRun - failed - len(res.skipped)
print(f"viewer tests: {len(res.skipped)} skipped; screenshots in build/viewer-screenshots/")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
