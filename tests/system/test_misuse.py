"""Misuse of the public API: NULL where a pointer belongs, collectives called
wrongly, a forced backend, and the options and return values that nothing
else looks at (--quiet, note_system's status).

Every case must end in a clear error that names the call and the lecture
line that made it (file:line in the message, and that line really holds the
call), exit status 1 and a written trace; never a crash.

    /usr/bin/python3 tests/system/test_misuse.py        (LECTERN_BUILD picks the build)
"""
import os
import re
import subprocess
import sys
import unittest
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
FIXTURE_SRC = os.path.join(ROOT, "tests", "fixtures", "misuse_fixture.c")
HEADER = os.path.join(ROOT, "runtime", "lectern.h")

# Functions whose NULL is not a mistake: like free(NULL), they do nothing.
NULL_IS_FINE = {"tensor_free.t", "adamw_free.opt", "see.title",
                "check_close.what",          # a check without a name is called "check_close"
                "lecture_option.fallback",   # no fallback: NULL when the option is not given
                # no caption, title, unit, axis label or span label
                "table_new.caption_fmt", "table_column.unit", "chart_new.x_label", "chart_new.y_label",
                "chart_new.title_fmt", "chart_span.label", "chart_span_modelled.label",
                # a NULL group is all ranks
                "dist_group_rank.g", "dist_group_size.g", "dist_all_reduce_in.g", "dist_reduce_scatter_in.g",
                "dist_all_gather_in.g", "dist_broadcast_in.g", "dist_all_to_all_in.g", "dist_all_reduce_in_async.g",
                "dist_reduce_scatter_in_async.g", "dist_all_gather_in_async.g", "dist_broadcast_in_async.g",
                "dist_all_to_all_in_async.g"}
# Not callable from a lecture's body: it is the lecture's main.
NOT_A_CASE = {"lecture_main"}
POINTER_TYPEDEFS = {"spawn_fn"}


fixture = tracecheck.fixture


def run(binary, out, env=None, args=()):
    # Each case is a lecture of one spawn of 1 or 2 ranks that ends at its
    # first error: a pool of just those ranks (LECTERN_POOL_MIN=1) rather
    # than the 4 a lecture's spawns share by default (a quarter less CPU for
    # the suite; the pool's own sizes are tests/ranks/test_spawn.py's).
    return tracecheck.run(binary, out, *args, env=dict({"LECTERN_POOL_MIN": "1"}, **(env or {})), timeout=180)


# A case is a process of its own that mostly waits (for its ranks to start
# and stop): this many run at a time, each writing into a folder of its own;
# their checks then run in order.
WORKERS = 4


def run_cases(cases, out):
    """{case: (process, its out folder)}: misuse_fixture run once per
    LECTERN_FIXTURE_CASE, WORKERS at a time."""
    def one(case):
        d = os.path.join(out, re.sub(r"[^\w.-]", "_", case))
        os.mkdir(d)
        return case, (run(fixture("misuse_fixture"), d, {"LECTERN_FIXTURE_CASE": case}), d)
    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(pool.map(one, cases))


def pointer_parameters():
    """{"function.parameter"} for every pointer parameter of every function
    runtime/lectern.h declares."""
    with open(HEADER) as f:
        text = f.read()
    # A function lx_NAME behind a macro NAME(...) is called as NAME.
    macros = set(re.findall(r"^\s*#\s*define\s+(\w+)\(", text, flags=re.M))
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"^\s*#.*$", "", text, flags=re.M)
    text = re.sub(r"\s+", " ", text)
    found = set()
    for stmt in text.split(";"):
        stmt = stmt.split("}")[-1].split("{")[-1].strip()
        if stmt.startswith("typedef"):
            continue
        m = re.match(r"^(?:const )?(?:struct )?[A-Za-z_]\w*[ *]+(\w+)\((.*?)\)(?: LECTERN_PRINTF.*)?$", stmt)
        if not m or m.group(1) in NOT_A_CASE:
            continue
        fn = m.group(1)
        if fn.startswith("lx_") and fn[3:] in macros:
            fn = fn[3:]
        for param in m.group(2).split(","):
            param = param.strip()
            if param in ("void", "...", ""):
                continue
            name = re.search(r"(\w+)\s*$", param).group(1)
            if name == "args_text":   # the macro's own text of its arguments, never a lecture's; NULL: no names
                continue              # (tests/trace/test_note_args.py calls lx_note with NULL)
            if "*" in param or param.split()[0] in POINTER_TYPEDEFS:
                found.add("%s.%s" % (fn, name))
    return found


def fixture_cases():
    with open(FIXTURE_SRC) as f:
        src = f.read()
    return set(re.findall(r'\{"(\w+\.\w+)", c_\w+\}', src)) | \
        set(re.findall(r'strcmp\(c, "(dist_\w+\.\w+)"\)', src))


errors = tracecheck.errors


class Base(tracecheck.FixtureTest):
    def src_line(self, n):
        with open(FIXTURE_SRC) as f:
            return f.read().split("\n")[n - 1]

    def failed_case(self, case, call, ran):
        """Checks a case that must fail, run by run_cases (ran: its process
        and out folder); returns (message, trace). The message names the
        fixture's file:line, and that line calls `call` with the mistake."""
        p, out = ran
        self.assertEqual(p.returncode, 1, "%s: %s" % (case, tracecheck.why(p)))
        self.assertNotRegex(p.stderr, r"SIG[A-Z]+|Segmentation|core dumped", case)
        t = tracecheck.validate(os.path.join(out, "misuse_fixture.failed.json"))
        self.assertEqual(t["meta"]["status"], "failed")
        msgs = [m for _, m in errors(t) if call + "(" in m or call + ":" in m]
        self.assertTrue(msgs, "%s: no error names %s: %s" % (case, call, errors(t)))
        m = re.match(r"tests/fixtures/misuse_fixture\.c:(\d+): ", msgs[0])
        self.assertTrue(m, "%s: the message names no lecture line: %r" % (case, msgs[0]))
        line = self.src_line(int(m.group(1)))
        # (lx_NAME: the function behind the macro NAME, called by hand with what the macro would pass.)
        self.assertRegex(line, r"\b(?:lx_)?%s\(" % re.escape(call), "%s: line %s is not the call" % (case, m.group(1)))
        self.assertNotIn("never", msgs[0])
        return msgs[0], t


class NullInputs(Base):
    def test_every_pointer_parameter_has_a_case(self):
        missing = pointer_parameters() - fixture_cases()
        self.assertEqual(missing, set(), "runtime/lectern.h has pointer parameters no NULL case tries")

    def test_null_is_a_clear_error_at_the_line(self):
        cases = sorted(fixture_cases())
        ran = run_cases(cases, self.out)
        for case in cases:
            with self.subTest(case=case):
                call = case.split(".")[0]
                if case in NULL_IS_FINE:
                    p, out = ran[case]
                    self.assertEqual(p.returncode, 0, tracecheck.why(p))
                    t = tracecheck.validate(os.path.join(out, "misuse_fixture.json"))
                    self.assertEqual(t["steps"][-1]["renderings"][0]["data"], "after")
                    continue
                msg, _ = self.failed_case(case, call, ran[case])
                self.assertIn("NULL", msg)


class CollectiveMisuse(Base):
    CASES = {
        "misuse:send_to_self": ("dist_send", "cannot send to itself"),
        "misuse:recv_from_self": ("dist_recv", "cannot receive from itself"),
        "misuse:send_to_no_rank": ("dist_send", "dst 2 is not a rank of this world (0 to 1)"),
        "misuse:recv_from_no_rank": ("dist_recv", "src -1 is not a rank of this world (0 to 1)"),
        "misuse:broadcast_from_no_rank": ("dist_broadcast", "src 7 is not a rank"),
        "misuse:reduce_to_no_rank": ("dist_reduce", "dst 2 is not a rank"),
        "misuse:unknown_op": ("dist_all_reduce", "unknown reduction op 42"),
        "misuse:reduce_scatter_sizes": ("dist_reduce_scatter", "input must be world_size (2) times output"),
        "misuse:reduce_scatter_same_memory": ("dist_reduce_scatter", "output and input are the same memory (output is elements 0 to 3 of input): the reduce-scatter writes output while it still reads input. Give it an output of its own"),
        "misuse:all_gather_sizes": ("dist_all_gather", "output must be world_size (2) times input"),
        "misuse:all_gather_same_memory": ("dist_all_gather", "output and input are the same memory (input is elements 0 to 3 of output): the gather writes output while it still reads input. Give it a copy: tensor *mine = zeros(4, 0, get_device(rank)); tensor_copy(mine, input); then gather from mine"),
        "misuse:scatter_sizes": ("dist_scatter", "input must be world_size (2) times output"),
        "misuse:gather_sizes": ("dist_gather", "output must be world_size (2) times input"),
        "misuse:scatter_from_no_rank": ("dist_scatter", "src 5 is not a rank"),
        "misuse:gather_to_no_rank": ("dist_gather", "dst -3 is not a rank"),
        "misuse:isend_to_self": ("dist_isend", "cannot send to itself"),
        "misuse:send_recv_one_chunk": ("dist_irecv", "this tensor shares memory with the one dist_isend at "
                                       "tests/fixtures/misuse_fixture.c:"),
        "misuse:irecv_from_no_rank": ("dist_irecv", "src 9 is not a rank"),
        "misuse:outside_spawn": ("dist_all_reduce", "outside a spawned function"),
        "misuse:model_compute_nan": ("model_compute", "ms is NaN, not a time"),
        "misuse:model_compute_negative": ("model_compute", "ms is -5, below 0"),
        "misuse:model_compute_infinite": ("model_compute", "inf ms is more than LECTERN_MAX_MODEL_MS (10000 ms)"),
        "misuse:model_compute_too_long": ("model_compute", "20000 ms is more than LECTERN_MAX_MODEL_MS (10000 ms)"),
    }

    def test_each_misuse_names_call_line_and_problem(self):
        ran = run_cases(sorted(self.CASES), self.out)
        for case, (call, words) in sorted(self.CASES.items()):
            with self.subTest(case=case):
                msg, t = self.failed_case(case, call, ran[case])
                self.assertIn(words, msg)
                if case != "misuse:outside_spawn":
                    # The rank that erred is named, with the spawn's world size.
                    rank_errors = [s for s, m in errors(t) if s.get("rank") == 1]
                    self.assertTrue(rank_errors, errors(t))
                    self.assertEqual(rank_errors[0]["world_size"], 2)
                if call == "model_compute":
                    # Refused: nothing slept, nothing recorded as modelled.
                    self.assertEqual(t["modelled"], [])
                    self.assertIs(t["meta"]["modelled_compute"], False)


class ForcedBackend(Base):
    def test_forced_mpi_is_used_and_said(self):
        p = run(fixture("spawn_basic"), self.out, {"LECTERN_BACKEND": "mpi"})
        self.assertEqual(p.returncode, 0, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(self.out, "spawn_basic.json"))
        self.assertTrue(t["spawns"])
        for s in t["spawns"]:
            self.assertEqual(s["backend"], "mpi")
            self.assertIn("LECTERN_BACKEND=mpi", s["reason"])
        notes = [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "markdown"]
        self.assertTrue(any(n.startswith("spawn: LECTERN_BACKEND=mpi") for n in notes), notes)

    def test_unknown_backend_is_an_error_at_the_spawn_line(self):
        p = run(fixture("spawn_basic"), self.out, {"LECTERN_BACKEND": "gloo"})
        self.assertEqual(p.returncode, 1, tracecheck.why(p))
        t = tracecheck.validate(os.path.join(self.out, "spawn_basic.failed.json"))
        (step, msg), = errors(t)
        self.assertIn("LECTERN_BACKEND='gloo'", msg)
        self.assertIn("'mpi' or 'nccl'", msg)
        src = t["files"]["tests/fixtures/spawn_basic.c"].split("\n")
        self.assertIn("spawn(", src[step["stack"][-1]["line"] - 1])


class OptionsAndReturns(Base):
    def test_quiet_silences_progress_in_lecture_and_ranks(self):
        binary = fixture("spawn_basic")
        loud = subprocess.run([binary, "--out", self.out], capture_output=True, text=True, timeout=180)
        self.assertEqual(loud.returncode, 0, tracecheck.why(loud))
        self.assertRegex(loud.stderr, r"\[spawn_basic +[0-9.]+s\] start")
        self.assertRegex(loud.stderr, r"\[spawn_basic +[0-9.]+s\] done: \d+ steps written to ")
        quiet = subprocess.run([binary, "--quiet", "--out", self.out], capture_output=True, text=True,
                               timeout=180)
        self.assertEqual(quiet.returncode, 0, tracecheck.why(quiet))
        self.assertEqual(quiet.stderr, "")
        self.assertEqual(quiet.stdout, "")

    def test_note_system_returns_the_exit_status(self):
        p = run(fixture("input_fixture"), self.out, {"LECTERN_FIXTURE_INPUT": "status"})
        self.assertEqual(p.returncode, 1, tracecheck.why(p))   # exit 3 is recorded as an error
        t = tracecheck.validate(os.path.join(self.out, "input_fixture.failed.json"))
        said = [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "text"
                and "returned" in r["data"]]
        # 128 + 15: a shell killed by SIGTERM, as the shell itself would say.
        self.assertEqual(said, ["exit 3 returned 3", "true returned 0", "a killed shell returned 143"])
        outputs = [r for s in t["steps"] for r in s["renderings"] if r.get("command")]
        self.assertEqual([o["exit_status"] for o in outputs], [3, 0, 143])


if __name__ == "__main__":
    unittest.main(verbosity=2)
