#!/usr/bin/python3
"""?trace=NAME reads traces/local/NAME.js (what `make run` wrote) when it is
there, else traces/NAME.js (the trace the repository ships).

    /usr/bin/python3 tests/viewer/test_local_traces.py [-v]
"""
import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_viewer as base  # noqa: E402


class TestLocalTraces(base.ViewerCase):
    def title(self):
        return self.js("return document.getElementById('title').textContent")

    def test_local_first_then_shipped(self):
        local = os.path.join(self.traces, "local")
        self.assertIsNone(self.open("?trace=demo"))
        self.assertEqual(self.title(), "Demo lecture")          # only the shipped one exists
        os.makedirs(local, exist_ok=True)
        try:
            # A local "demo": the checks fixture's trace under the name demo.
            with open(os.path.join(self.traces, "checks.js"), encoding="utf-8") as f:
                body = f.read().replace('["checks"]', '["demo"]', 1)
            with open(os.path.join(local, "demo.js"), "w", encoding="utf-8") as f:
                f.write(body)
            self.assertIsNone(self.open("?trace=demo"))
            self.assertEqual(self.title(), "Checks")
            # A name with neither still says the file is missing.
            err = self.open("?trace=nothing_here")
            self.assertIn("could not be read", str(err))
        finally:
            shutil.rmtree(local, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
