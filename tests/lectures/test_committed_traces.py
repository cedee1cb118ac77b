"""Every trace the repository ships (traces/NAME.json) is valid and made from
the sources as they are now: its lecture and every file it carries (the
lecture's lib code too), with every step's stack line-accurate against them.

A trace is regenerated with `make`, then `build/lectures/NAME --out traces`;
a binary built before an edit writes a trace whose text is the edited file's
and whose lines are the old build's, which this catches. One class per
trace, in a file of its own: a planted bug in a lecture (scripts/mutate.py)
makes its trace stale, which says nothing about whether the lecture's own
checks notice the bug, so the lectures' test files leave this out.

    /usr/bin/python3 tests/lectures/test_committed_traces.py
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

TRACES = os.path.join(tracecheck.ROOT, "traces")


def shipped():
    """The lectures whose trace the repository ships."""
    return sorted(name[:-5] for name in os.listdir(TRACES)
                  if name.endswith(".json") and name != "index.json" and not name.endswith(".failed.json"))


class Shipped(unittest.TestCase):
    def test_every_lecture_with_a_source_ships_a_trace_checked_here(self):
        names = shipped()
        self.assertIn("lecture_08", names)
        for name in names:
            self.assertTrue(os.path.exists(os.path.join(tracecheck.ROOT, "lectures", name + ".c")),
                            "traces/%s.json has no lectures/%s.c" % (name, name))


for _name in shipped():
    globals()["Trace_" + _name] = type("Trace_" + _name, (tracecheck.CommittedTrace, unittest.TestCase),
                                       {"NAME": _name})


if __name__ == "__main__":
    unittest.main()
