"""Calls that belong to the lecture's own process, made from a rank
(tests/fixtures/lecture_only_fixture.c): lecture_out_dir(), twin_record()
and twin_last_spawn(). Each is an error step of that rank at the line that
made it, naming the call and what to do instead; the call returns what
lectern.h promises (NULL, nothing, 0 with the reason in out->why); the run
exits 1 with its trace written (as NAME.failed.json) and the lecture's own
call before the spawn works.

    /usr/bin/python3 tests/trace/test_lecture_only.py        (LECTERN_BUILD picks the build)
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

FX = tracecheck.Fixture("lecture_only_fixture")

# case: (the error's words, what the rank noted the call returned)
CASES = {
    "lecture_out_dir": ("lecture_out_dir() is the lecture's own: a rank is given the folder through spawn's args",
                        "returned NULL"),
    "twin_record": ("twin_record: call it in the lecture, before the spawn it should record, not in a rank",
                    "returned"),
    "twin_last_spawn": ("twin_last_spawn: call it in the lecture after spawn(), not in a rank",
                        "returned 0: call it in the lecture after spawn(), not in a rank"),
}


class LectureOnly(tracecheck.FixtureTest):
    def test_each_call_from_a_rank_is_an_error_at_its_line(self):
        for case, (words, returned) in CASES.items():
            with self.subTest(case=case):
                out = os.path.join(self.out, case)
                os.makedirs(out)
                p = FX.run(out, case=case, timeout=120)
                self.assertEqual(p.returncode, 1, tracecheck.why(p))
                t = tracecheck.validate(os.path.join(out, "lecture_only_fixture.failed.json"))
                errs = tracecheck.errors(t)
                self.assertEqual(len(errs), 1, errs)
                step, message = errs[0]
                line = FX.line_of("%s(" % case)
                self.assertEqual((step["rank"], step["stack"][-1]["line"]), (0, line))
                self.assertEqual(message, "%s:%d: %s" % (FX.rel, line, words))
                self.assertIn(returned, tracecheck.texts(t))
                notes = [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "markdown"]
                self.assertIn("Before the spawn: the folder is given.", notes)


if __name__ == "__main__":
    unittest.main()
