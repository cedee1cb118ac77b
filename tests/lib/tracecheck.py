r"""Checks on lectern traces, shared by the script tests.

The one helper library of the script tests: every tests/FOLDER/test_*.py
finds it with one line and imports it.

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    import tracecheck
    tracecheck.ROOT, tracecheck.BUILD      # the repository; the build folder the runner names
    tracecheck.built("lectures", "x")      # a path inside the build folder
    tracecheck.line_of(path, "text")       # 1-based line of the first line holding "text"
    tracecheck.run(binary, out, *args)     # a lecture or fixture run --quiet --out out
    fx = tracecheck.Fixture("x")           # tests/fixtures/x.c: fx.binary, fx.source, fx.rel,
                                           #   fx.line_of("text"), fx.run(out, case="name")
    class T(tracecheck.FixtureTest)        # a TestCase with a temp folder (self.out) and
                                           #   self.run_fixture(name): rc, stdout, stderr
    trace = tracecheck.load(path)          # the .json, parsed
    tracecheck.validate(path)              # schema + js twin + line accuracy; raises AssertionError
    tracecheck.step_problem(trace, i)      # why step i's stack is wrong, or None
    tracecheck.texts(trace)                # the data of its text renderings, in order

A lecture's own test (tests/lectures/test_lecture_*.py) runs it once per class and
reads its trace through three mixins for unittest.TestCase:

    class Lecture(tracecheck.LectureRun, tracecheck.WholeTrace, unittest.TestCase):
        NAME = "lecture_x"                 # runs build/lectures/lecture_x --quick
        SECTIONS = ["# Title", "## Part"]  # headings in the order they must come
        ...  self.texts(r"^Rank (\d): ..."), self.table(r"^caption$"), self.markdown()
    class CommittedTrace(tracecheck.CommittedTrace, unittest.TestCase):
        NAME = "lecture_x"                 # traces/lecture_x.json is current and valid

Line accuracy. Every frame of a step names a line, and that exact line must
hold the call that leads to the next frame:
  - an outer frame's line calls the next frame's function: its name followed
    by "(" is on that line (or a call through a function pointer is);
  - the innermost frame's line calls one of the runtime's step-making
    functions (note(), image(), ... or spawn(), whose note says which backend
    it chose), unless the step is an error, which can come from any line.
For a call spread over several lines GCC stamps the line that holds the
called function's name, so "the name is on the stamped line" holds for every
real step, and a stack shifted by one line almost never passes (the tests
measure that). Comments and the insides of string literals are blanked
before matching, so `note("call spawn() later")` or a comment naming a
function cannot make a wrong line pass.
"""
import glob
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA_PATH = os.path.join(ROOT, "docs", "trace.schema.json")
# The build folder the test runner names (scripts/test.sh sets LECTERN_BUILD:
# build, build-asan or build-cpu).
BUILD = os.path.join(ROOT, os.environ.get("LECTERN_BUILD", "build"))


def built(*parts):
    """A path inside the build folder: built("lectures", "lecture_00")."""
    return os.path.join(BUILD, *parts)


def lecture(name):
    """The binary of lectures/NAME.c; AssertionError when it is not built."""
    path = built("lectures", name)
    if not os.path.exists(path):
        raise AssertionError("%s is not built in %s (run make)" % (name, BUILD))
    return path


def fixture(name):
    """The binary of the fixture lecture tests/fixtures/NAME.c."""
    return built("tests", "fixtures", name)


def run(binary, out, *args, env=None, case=None, timeout=300):
    """Runs a lecture or fixture `binary` --quiet with its trace into `out`
    (then `args`), `env` added to this environment and LECTERN_FIXTURE_CASE
    set to `case` (or unset: a case never leaks in from the caller); returns
    the finished process, its output captured as text."""
    e = dict(os.environ)
    e.pop("LECTERN_FIXTURE_CASE", None)
    if case:
        e["LECTERN_FIXTURE_CASE"] = case
    e.update(env or {})
    return subprocess.run([binary, "--quiet", "--out", out, *args], env=e, capture_output=True, text=True,
                          timeout=timeout)


class Fixture:
    """A fixture lecture, tests/fixtures/NAME.c: its binary, its source (full
    path, and `rel` as a trace names it), the lines a test expects a step at,
    and a run."""

    def __init__(self, name):
        self.name = name
        self.binary = fixture(name)
        self.rel = "tests/fixtures/%s.c" % name
        self.source = os.path.join(ROOT, self.rel)

    def line_of(self, needle, nth=1, within=None):
        return line_of(self.source, needle, nth, within)

    def run(self, out, *args, **kwargs):
        return run(self.binary, out, *args, **kwargs)


def errors(trace):
    """Every error step of a trace as (step, its message), in order."""
    return [(s, r["data"]) for s in trace["steps"] for r in s["renderings"] if r["type"] == "error"]


def texts(trace):
    """The data of every text rendering of a trace (None: no trace), in order."""
    return [r["data"] for s in (trace or {}).get("steps", []) for r in s["renderings"] if r["type"] == "text"]


def troubles(trace):
    """The error and warning renderings of a trace, in order."""
    return [r for s in trace["steps"] for r in s["renderings"] if r["type"] in ("error", "warning")]


def last_line(p):
    """The last line a finished process printed on stderr."""
    return p.stderr.rstrip("\n").split("\n")[-1]


class CheckNames:
    """A homework's checks by name: a check's text starts with its name (one
    of `names`, the same in every run) and goes on with what was seen."""

    def __init__(self, graded, others=()):
        """graded: the names of the checks every run makes on each rank;
        others: the names of checks only some runs make."""
        self.graded = list(graded)
        self.names = sorted(self.graded + list(others), key=len, reverse=True)

    def name(self, what):
        """The check's name: the longest known name its text starts with."""
        return next((known for known in self.names if what.startswith(known)), what)

    def checks(self, trace):
        """Every check of the trace as (rank, name, passed), sorted."""
        return sorted((rank, self.name(what), passed) for rank, what, passed in check_passes(trace))

    def check_texts(self, trace, named):
        """The whole text of every check called `named`."""
        return [what for _, what, _ in check_passes(trace) if self.name(what) == named]


class FixtureTest(unittest.TestCase):
    """A TestCase that runs fixture lectures: a temp folder of its own per
    test (self.out) for their traces, and run_fixture()."""

    def setUp(self):
        self.out = tempfile.mkdtemp(prefix="lectern-test-")

    def tearDown(self):
        shutil.rmtree(self.out, ignore_errors=True)

    def run_traced(self, name, env, want_rc, ranks_gone=False):
        """Runs the fixture NAME (env added), which must exit want_rc; (its
        trace, NAME.json or NAME.failed.json as it failed, validated; its
        stderr). ranks_gone: its ranks must end too, within 5 s (the pool is
        killed a moment after the lecture writes its trace)."""
        rc, out, err = self.run_fixture(name, env)
        self.assertEqual(rc, want_rc, "%s: status %d\n%s" % (env, rc, err))
        t = validate(os.path.join(self.out, name + (".failed.json" if want_rc else ".json")))
        if ranks_gone:
            deadline = time.monotonic() + 5
            while rank_processes(fixture(name)) and time.monotonic() < deadline:
                time.sleep(0.1)
            self.assertEqual(rank_processes(fixture(name)), [], "ranks left running")
        return t, err

    def refused(self, name, env, words):
        """The fixture NAME run with a bad setting in env: it fails (exit
        status 1) saying `words` on stderr; its stderr."""
        rc, out, err = self.run_fixture(name, env)
        self.assertEqual(rc, 1, err)
        self.assertIn(words, err)
        return err

    def one_error(self, errs, rank, words, line):
        """The message of the one error in `errs` ((step, message) pairs) of
        `rank` (None: any rank) that holds `words`; its step must be stamped
        at `line`."""
        mine = [(s, m) for s, m in errs if rank in (None, s.get("rank")) and words in m]
        self.assertEqual(len(mine), 1, errs)
        step, msg = mine[0]
        self.assertEqual(step["stack"][-1]["line"], line, msg)
        return msg

    def run_fixture(self, name, env=None, timeout=120):
        """Runs tests/fixtures/NAME --quiet into self.out; (exit status,
        stdout, stderr), its seconds in self.seconds and its pid in self.pid
        (the ranks' parent: rank_processes() finds what it left)."""
        e = dict(os.environ)
        e.update(env or {})
        t0 = time.monotonic()
        p = subprocess.Popen([fixture(name), "--out", self.out, "--quiet"], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            raise
        self.seconds = time.monotonic() - t0
        self.pid = p.pid
        return p.returncode, stdout, stderr


class FixtureRun:
    """A mixin for a unittest.TestCase: runs the fixture FIXTURE (a Fixture)
    once for the class; each test asserts that run passed and reads its
    trace, validated (self.t: schema, .js twin, every step's line)."""
    FIXTURE = None

    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix="lectern-%s-" % cls.FIXTURE.name)
        cls.p = cls.FIXTURE.run(cls.out, timeout=180)
        cls.path = os.path.join(cls.out, cls.FIXTURE.name + ".json")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def setUp(self):
        self.assertEqual(self.p.returncode, 0, why(self.p))
        self.t = validate(self.path)


class HomeworkTest(FixtureTest):
    """A homework's test: HOMEWORK names it (lectures/HOMEWORK.c, its
    solution and wrong methods tests/fixtures/HOMEWORK_*.c)."""
    HOMEWORK = None
    NAMES = None      # a CheckNames of every check a run makes on each rank
    WORLD = 4
    REPEAT = int(os.environ.get("LECTERN_HOMEWORK_REPEAT", "1"))   # runs of each case (a soak)

    def wrong(self, which, says, status=1):
        """A method fails exactly the checks named by `says` on every rank,
        each failed text holding every string listed for it; nothing else
        fails and nothing goes wrong (REPEAT runs); (process, trace)."""
        for _ in range(self.REPEAT):
            p, t = self.outcome(which, status)
            want = sorted((r, w, w not in says) for r in range(self.WORLD) for w in self.NAMES.graded)
            self.assertEqual(self.NAMES.checks(t), want)
            for w in says:
                texts = self.NAMES.check_texts(t, w)
                self.assertEqual(len(texts), self.WORLD)
                for text in texts:
                    for part in says[w]:
                        self.assertIn(part, text)
            self.assertFalse(troubles(t))
        return p, t

    def starter_fails_every_check(self):
        """The starter (lectures/HOMEWORK) fails every graded check on every
        rank, says so in its last line, and nothing else goes wrong (no
        error step, no leak warning); (process, trace)."""
        p, t = self.outcome(lecture(self.HOMEWORK), 1)
        want = sorted((r, w, False) for r in range(self.WORLD) for w in self.NAMES.graded)
        self.assertEqual(self.NAMES.checks(t), want)
        self.assertEqual(last_line(p), "checks: 0 passed, %d failed, 0 not reached" % len(want))
        self.assertFalse(troubles(t))
        return p, t

    def solution_passes_every_check(self):
        """The instructor's solution (fixture HOMEWORK_solution) passes every
        graded check on every rank, says so in its last line, and nothing
        else goes wrong; (process, trace)."""
        p, t = self.outcome("solution", 0)
        want = sorted((r, w, True) for r in range(self.WORLD) for w in self.NAMES.graded)
        self.assertEqual(self.NAMES.checks(t), want)
        self.assertEqual(last_line(p), "checks: %d passed, 0 failed, 0 not reached" % len(want))
        self.assertFalse(troubles(t))
        return p, t

    def only_not_reached(self, p, t, missing):
        """The checks named in `missing` were not reached on any rank (an
        error stopped their exercise) and every other graded check passed,
        as the last line says; the checks that passed, by name."""
        others = [w for w in self.NAMES.graded if w not in missing]
        self.assertEqual(self.NAMES.checks(t), sorted((r, w, True) for r in range(self.WORLD) for w in others))
        self.assertEqual(last_line(p), "checks: %d passed, 0 failed, %d not reached" % (self.WORLD * len(others),
                                                                                        self.WORLD * len(missing)))
        return others

    def outcome(self, which, status, *args):
        """Runs the fixture HOMEWORK_`which` (or the binary at the absolute
        path `which`) with `args`; asserts its exit status; (process, trace)."""
        binary = which if os.path.isabs(which) else fixture(self.HOMEWORK + "_" + which)
        p = run(binary, self.out, *args)
        self.assertEqual(p.returncode, status, why(p))
        return p, validate(os.path.join(self.out, "%s%s.json" % (self.HOMEWORK, ".failed" if status else "")))


def rank_processes(binary):
    """Pids of ranks of `binary` still alive (their command line names the
    binary and the rank flag)."""
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(os.path.join(d, "cmdline"), "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].decode(errors="replace") == binary and b"--lectern-rank" in argv:
            pids.append(int(os.path.basename(d)))
    return pids


def links(binary, library):
    """True when `binary` needs a shared library whose name starts with
    `library` (readelf's NEEDED entries: what the build linked in)."""
    out = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True).stdout
    return re.search(r"\(NEEDED\).*\[%s[.-]" % re.escape(library), out) is not None


def machine_gpus():
    """GPUs this process may use, as the driver's nvidia-smi counts them
    (0 without a driver), narrowed by CUDA_VISIBLE_DEVICES when it is set."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    n = len([l for l in out.stdout.splitlines() if l.startswith("GPU ")]) if out.returncode == 0 else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        n = min(n, len([d for d in visible.split(",") if d.strip()]))
    return n


def line_of(path, needle, nth=1, within=None):
    """1-based line of the nth line of `path` (absolute, or relative to the
    repository) that contains `needle`; with `within`, only lines inside the
    definition of that C function count. AssertionError when there is none."""
    full = path if os.path.isabs(path) else os.path.join(ROOT, path)
    with open(full, encoding="utf-8") as f:
        lines = f.read().split("\n")
    inside = within is None
    seen = 0
    for i, text in enumerate(lines, 1):
        if within is not None and not inside:
            inside = re.match(r"(static )?[\w ]+\**\s*\**%s\(" % re.escape(within), text) is not None and \
                not text.rstrip().endswith(";")
            continue
        if within is not None and text.startswith("}"):
            break
        if needle in text:
            seen += 1
            if seen == nth:
                return i
    raise AssertionError("%r not found in %s%s" % (needle, path, " inside %s()" % within if within else ""))

# Calls of the runtime that make a step directly.
STEP_CALLS = ("note", "note_verbatim", "image", "see", "note_system", "plot", "check", "check_named", "check_close",
              "table_show", "chart_show", "inspect", "predict", "grade_leaderboard")
# spawn() (and spawn_expect_failure(), spawn_exercise()) notes which backend it chose, at its line.
SPAWN_CALLS = ("spawn", "spawn_expect_failure", "spawn_exercise")
RUNTIME_CALLS = STEP_CALLS + SPAWN_CALLS

_schema = None


def schema():
    global _schema
    if _schema is None:
        with open(SCHEMA_PATH) as f:
            _schema = json.load(f)
    return _schema


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_js_twin(path):
    """The .js twin of a .json trace, parsed back into the same object."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.match(r'^\(window\.lecternTraces = window\.lecternTraces \|\| \{\}\)\["([^"]+)"\] = (.*);\n?$',
                 text, re.S)
    assert m, "%s: not a lectern .js twin" % path
    return m.group(1), json.loads(m.group(2))


def code_only(text):
    """The source's lines with comments and the insides of string and
    character literals replaced by spaces (line numbers and columns kept)."""
    out = []
    i, n = 0, len(text)
    state = None   # None, "block" (/* */), "line" (//), '"' or "'"
    while i < n:
        c = text[i]
        if state is None:
            if c == "/" and text.startswith("/*", i):
                state = "block"
                out.append("  ")
                i += 2
                continue
            if c == "/" and text.startswith("//", i):
                state = "line"
                out.append("  ")
                i += 2
                continue
            if c in "\"'":
                state = c
            out.append(c)
        elif state == "block":
            if text.startswith("*/", i):
                state = None
                out.append("  ")
                i += 2
                continue
            out.append("\n" if c == "\n" else " ")
        elif state == "line":
            if c == "\n":
                state = None
                out.append(c)
            else:
                out.append(" ")
        else:   # inside a literal
            if c == "\\" and i + 1 < n:
                out.append("  " if text[i + 1] != "\n" else " \n")
                i += 2
                continue
            if c == state:
                state = None
                out.append(c)
            elif c == "\n":   # an unterminated literal ends at the line's end
                state = None
                out.append(c)
            else:
                out.append(" ")
        i += 1
    return "".join(out).split("\n")


def calls(text, name):
    """`text` calls `name`: the name, not part of a longer identifier nor a
    member (x.name, p->name), followed by "(" ."""
    return re.search(r"(?<![A-Za-z0-9_.>])%s\s*\(" % re.escape(name), text) is not None


def pointer_names(code):
    """Names declared in the file as pointers to functions: `void (*fn)(int)`
    or `spawn_fn fn`."""
    text = "\n".join(code)
    names = set(re.findall(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)\s*\(", text))
    names |= set(re.findall(r"\b\w+_fn\s+([A-Za-z_]\w*)\b", text))
    return names


def calls_through_pointer(line, pointers):
    """A call through a function pointer the file declares: `fn(...)`, or a
    struct member `x.fn(...)` / `p->fn(...)`."""
    return any(re.search(r"(?<![A-Za-z0-9_])%s\s*\(" % re.escape(p), line) for p in pointers)



# ---- what the call on a line would render ----

_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "a": b"\a", "b": b"\b", "f": b"\f",
            "v": b"\v", "\\": b"\\", "'": b"'", '"': b'"', "?": b"?"}


def skip_blank(src, pos):
    """The position of the first character at or after src[pos] that is not
    a blank or inside a comment."""
    n = len(src)
    while pos < n:
        if src[pos].isspace():
            pos += 1
        elif src.startswith("/*", pos):
            end = src.find("*/", pos + 2)
            pos = n if end < 0 else end + 2
        elif src.startswith("//", pos):
            end = src.find("\n", pos)
            pos = n if end < 0 else end
        else:
            break
    return pos


def _literal_at(src, pos):
    """The bytes of the string literal(s) starting at src[pos] (after blanks
    and comments; adjacent literals joined, as the compiler does), and the
    position after them; (None, pos) when the next token is not a literal."""
    out = b""
    found = False
    n = len(src)
    while True:
        pos = skip_blank(src, pos)
        if pos >= n or src[pos] != '"':
            return (out if found else None), pos
        found = True
        pos += 1
        while pos < n and src[pos] != '"':
            c = src[pos]
            if c == "\\" and pos + 1 < n:
                e = src[pos + 1]
                if e == "x":
                    m = re.match(r"[0-9a-fA-F]+", src[pos + 2:])
                    out += bytes([int(m.group(0), 16) & 0xFF])
                    pos += 2 + len(m.group(0))
                    continue
                if e in "01234567":
                    m = re.match(r"[0-7]{1,3}", src[pos + 1:])
                    out += bytes([int(m.group(0), 8) & 0xFF])
                    pos += 1 + len(m.group(0))
                    continue
                out += _ESCAPES.get(e, e.encode())
                pos += 2
                continue
            out += c.encode("utf-8")
            pos += 1
        pos += 1


_CONVERSION = re.compile(r"%([-+ #0]*)(\*|\d+)?(?:\.(\*|\d+))?(hh|h|ll|l|L|z|j|t)?([diouxXeEfFgGaAcspn%])")


def _text_pattern(text):
    """A regex for literal text that may have lost bytes to UTF-8 repair."""
    out = []
    for piece in re.split(r"([\x80-\xff]+)", text.decode("latin-1")):
        raw = piece.encode("latin-1")
        if raw and raw[0] >= 0x80:
            try:
                out.append(re.escape(raw.decode("utf-8")))
            except UnicodeDecodeError:
                out.append(".*?")   # invalid bytes: the runtime replaced them
        else:
            out.append(re.escape(piece))
    return "".join(out)


def format_regex(fmt):
    """A regex matching what printf(fmt, ...) can print."""
    parts, last = [], 0
    for m in _CONVERSION.finditer(fmt.decode("latin-1")):
        parts.append(_text_pattern(fmt[last:m.start()]))
        last = m.end()
        conv = m.group(5)
        if conv == "%":
            parts.append("%")
        elif conv in "diouxX":
            parts.append(r"\s*[-+]?\s*[0-9a-fA-Fx]+")
        elif conv in "eEfFgGaA":
            parts.append(r"\s*(?:[-+]?[0-9a-fA-Fx.]+(?:[eEpP][-+]?\d+)?|[-+]?(?:nan|inf|NAN|INF))")
        elif conv == "c":
            parts.append(r"(?:.|\s)")
        else:   # s, p, n: anything
            parts.append(r".*?")
    parts.append(_text_pattern(fmt[last:]))
    return re.compile("".join(parts), re.S)


# The rendering type each step-making call makes.
_RENDERING_TYPE = {"note": "markdown", "note_verbatim": "text", "image": "image", "see": "link",
                   "note_system": "text", "plot": "plot", "spawn": "markdown", "spawn_expect_failure": "markdown",
                   "spawn_exercise": "markdown", "check": "check", "check_named": "check", "check_close": "check", "table_show": "table", "chart_show": "plot",
                   "inspect": "inspect", "predict": "predict", "grade_leaderboard": "markdown"}

# What each step-making call's first argument must match in its rendering.
_FIRST_ARG_FIELD = {"note": ("data", True), "note_verbatim": ("data", True), "image": ("src", False),
                    "see": ("url", False), "note_system": ("command", False),
                    "predict": ("question", False)}


def rendered_by(raw_src_text, line_starts, line, rendering):
    """True if some step-making call whose name is on `line` (1-based) could
    have made `rendering`: its first argument, when a string literal, matches
    (a printf format for note() and note_verbatim(), the exact text for
    image(), see() and note_system()). Calls whose first argument is not a
    literal match anything: the name on the line is all that can be checked."""
    start = line_starts[line - 1]
    end = line_starts[line] if line < len(line_starts) else len(raw_src_text)
    code = code_only(raw_src_text[start:end])[0]
    # --inspect-collectives: a collective inspects its tensors at its own line,
    # named "t (before dist_all_reduce)".
    if rendering.get("type") == "inspect":
        m = re.fullmatch(r"\w+ \((?:before|after) (dist_\w+)\)", rendering.get("name", ""))
        if m and re.search(r"(?<![A-Za-z0-9_.>])%s\s*\(" % m.group(1), code):
            return True
    for name in RUNTIME_CALLS:
        for m in re.finditer(r"(?<![A-Za-z0-9_.>])%s\s*\(" % re.escape(name), code):
            if _RENDERING_TYPE.get(name, rendering.get("type")) != rendering.get("type"):
                continue
            if name not in _FIRST_ARG_FIELD:
                if name in SPAWN_CALLS:
                    if rendering.get("type") == "markdown" and rendering.get("data", "").startswith("spawn"):
                        return True
                    continue
                return True   # plot(), check(): no literal to compare
            field, is_format = _FIRST_ARG_FIELD[name]
            lit, _ = _literal_at(raw_src_text, start + m.end())
            if lit is None:
                if field in rendering:
                    return True
                continue
            value = rendering.get(field)
            if value is None:
                continue
            if is_format:
                if format_regex(lit).fullmatch(value):
                    return True
            elif re.fullmatch(_text_pattern(lit), value, re.S):
                return True
    return False


class _Files:
    """Code-only lines of each embedded file, made once per trace."""

    def __init__(self, trace):
        self.raw = {p: t.split("\n") for p, t in trace["files"].items()}
        self.code = {p: code_only(t) for p, t in trace["files"].items()}
        self.pointers = {p: pointer_names(c) for p, c in self.code.items()}
        self.text = dict(trace["files"])
        self.line_starts = {}
        for p, t in self.text.items():
            starts, pos = [], 0
            for l in t.split("\n"):
                starts.append(pos)
                pos += len(l) + 1
            self.line_starts[p] = starts


def _frame_problem(files, step, j):
    stack = step["stack"]
    frame = stack[j]
    path, line = frame["path"], frame["line"]
    if path not in files.code:
        return "%s is not embedded in files" % path
    code = files.code[path]
    if not 1 <= line <= len(code):
        return "%s:%d is past the end" % (path, line)
    text = code[line - 1]
    where = "frame %d (%s:%d %s)" % (j, path, line, frame["function"])
    if j + 1 < len(stack):
        nxt = stack[j + 1]["function"]
        if calls(text, nxt) or calls_through_pointer(text, files.pointers[path]):
            return None
        return "%s: does not call %s(): %r" % (where, nxt, files.raw[path][line - 1].strip())
    if any(r["type"] in ("error", "warning") for r in step["renderings"]):
        return None   # a crash or bad input can happen on any line
    if not any(calls(text, c) for c in RUNTIME_CALLS) and \
            not (step["renderings"][0]["type"] == "inspect" and re.search(r"\bdist_\w+\s*\(", text)):
        return "%s: no call that makes a step: %r" % (where, files.raw[path][line - 1].strip())
    first = step["renderings"][0]
    if not rendered_by(files.text[path], files.line_starts[path], line, first):
        return "%s: the call there cannot have made this %s rendering: %r" % (
            where, first.get("type"), files.raw[path][line - 1].strip())
    return None


def step_problem(trace, i, files=None):
    """Why step i's stack is not exact (a string), or None."""
    files = files or _Files(trace)
    step = trace["steps"][i]
    spawn_depth = _spawn_depths(trace).get(step.get("spawn"))
    for j in range(len(step["stack"])):
        frame = step["stack"][j]
        if spawn_depth is not None and j == spawn_depth - 1 and j + 1 < len(step["stack"]):
            # The parent's spawn() line: the next frame is the rank function.
            code = files.code.get(frame["path"])
            if code is None or not 1 <= frame["line"] <= len(code):
                return "step %d frame %d: %s:%d is not in the trace's files" % (i, j, frame["path"], frame["line"])
            if not any(calls(code[frame["line"] - 1], c) for c in SPAWN_CALLS):
                return "step %d frame %d (%s:%d): the spawn's line does not call spawn(): %r" % (
                    i, j, frame["path"], frame["line"], files.raw[frame["path"]][frame["line"] - 1].strip())
            continue
        p = _frame_problem(files, step, j)
        if p:
            return "step %d %s" % (i, p)
    return None


def _spawn_depths(trace):
    """spawn id -> number of parent frames (its recorded stack's length)."""
    return {s["id"]: len(s["stack"]) for s in trace.get("spawns", []) if "stack" in s}


def check_lines(trace):
    """Raises AssertionError naming the first step whose stack is not exact."""
    files = _Files(trace)
    for i in range(len(trace["steps"])):
        problem = step_problem(trace, i, files)
        assert problem is None, problem


def function_contains(trace, frame):
    """True if frame's line lies in the body of frame's function (roughly:
    at or after a line, starting in column 0, that defines it; a one-line
    definition counts)."""
    src = trace["files"][frame["path"]].split("\n")
    pat = re.compile(r"(?<![A-Za-z0-9_])%s\s*\([^;{]*(\)\s*\{|[^;]$)" % re.escape(frame["function"]))
    for k in range(frame["line"] - 1, -1, -1):
        if pat.search(src[k]) and not src[k].startswith((" ", "\t")):
            return True
    return False


def validate(path, lines=True):
    trace = load(path)
    jsonschema.validate(trace, schema())
    base = path[:-5] if path.endswith(".json") else path
    name, twin = load_js_twin(base + ".js")
    assert twin == trace, "%s.js does not hold the same trace as the .json" % base
    assert name == os.path.basename(base), "%s.js registers %r" % (base, name)
    if lines:
        check_lines(trace)
        for step in trace["steps"]:
            for frame in step["stack"]:
                assert function_contains(trace, frame), \
                    "%s:%d is not inside %s()" % (frame["path"], frame["line"], frame["function"])
    return trace


def shifted_rejections(trace, delta, innermost_only):
    """(rejected, total): how many steps the checker rejects once every frame
    (or only the innermost one) of every step is moved `delta` lines. Used by
    the tests to show that a stack off by one line does not pass."""
    import copy
    shifted = copy.deepcopy(trace)
    for step in shifted["steps"]:
        for frame in (step["stack"][-1:] if innermost_only else step["stack"]):
            frame["line"] += delta
    files = _Files(shifted)
    total = len(shifted["steps"])
    rejected = sum(1 for i in range(total) if step_problem(shifted, i, files) is not None)
    return rejected, total


# ---- why a run failed ----
#
# A test that fails because ranks never started, or because a run ran out of
# time, is not a wrong result: the runner counts the three kinds apart. The
# kind is a marker at the start of the failure's message.
LAUNCH = "[ranks did not start]"
TIMEOUT = "[timed out]"
WRONG = "[wrong result]"


def failure_kind(returncode, stderr):
    """LAUNCH, TIMEOUT or WRONG for a lecture run that ended with `returncode`
    (None: killed for running too long) and printed `stderr`."""
    if returncode is None or "TimeoutExpired" in stderr:
        return TIMEOUT
    if re.search(r"did not start (them|\d+ ranks?)|could not start them", stderr):
        return LAUNCH
    if re.search(r"made no progress for", stderr):
        return TIMEOUT
    return WRONG


def run_quick(binary, out_dir, env=None, timeout=600, args=()):
    """Runs a lecture `--quick --quiet` (and `args`) into out_dir; returns the
    finished process (returncode None and "TimeoutExpired" on stderr when it
    ran past `timeout`) and its trace, or None when it wrote none."""
    name = os.path.basename(binary)
    try:
        p = subprocess.run([binary, "--quick", "--quiet", "--out", out_dir] + list(args), env=env, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        p = subprocess.CompletedProcess(e.cmd, None, "", "TimeoutExpired after %d s" % timeout)
    path = os.path.join(out_dir, name + ".json")
    return p, (load(path) if os.path.exists(path) else None)


def why(p):
    """A failure message for the finished process p: its kind, its exit
    status, and the end of what it printed on stderr."""
    stderr = p.stderr or ""
    return "%s exit status %s\n%s" % (failure_kind(p.returncode, stderr), p.returncode, stderr[-3000:])


def check_passes(trace):
    """Every check of a trace as (rank, what, passed), a folded PASS
    (docs/trace-format.md: one step per place per spawn) unfolded into the
    passes it stands for (its "each")."""
    out = []
    for s in trace["steps"]:
        for r in s["renderings"]:
            if r["type"] != "check":
                continue
            for p in r.get("each", [{"rank": s.get("rank"), "what": r["what"]}]):
                out.append((p["rank"], p["what"], r["passed"]))
    return out


# ---- a lecture's test: running it once and reading its trace ----

# A number as a lecture prints it, as one regex group.
NUM = r"([-+0-9.eE]+|nan|inf)"
# Half the spacing of float32 numbers near 1: a float32 sum of n terms in any
# order is exact to n U of the terms' size.
U = 2.0 ** -24


def half_unit(printed):
    """Half of the last printed digit's unit: how far a rounded number may be
    from the value it stands for ("0.32" -> 0.005, "12" -> 0.5,
    "1.73e-07" -> 0.005e-07)."""
    mantissa, _, exponent = printed.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 0.5 * 10 ** -decimals * 10 ** int(exponent or 0)


ARGS_KEY = {"markdown": "args", "text": "args", "table": "caption_args", "plot": "title_args"}


# A number in a trace is what cJSON wrote: 15 significant digits where those
# read back within DBL_EPSILON (2^-52) of the double, relative, else 17. So a
# figure read from a trace is the lecture's double to 2^-52 relative, not to
# the bit; one recomputed here from such figures adds that much per figure
# read and half of it per rounding of its own.
TRACE_REL = 2.0 ** -52


def adamw_rounding_bound(lr, steps, beta1=0.9, beta2=0.999):
    """lectures/lib/mlp.h's adamw_rounding_bound, written again here: the
    sum over the steps t = 1 .. steps of 2 lr R_t, R_t the Cauchy-Schwarz
    bound on AdamW's update ratio (mlp.h derives it)."""
    total = 0.0
    for t in range(1, steps + 1):
        a = [(1 - beta1) * beta1 ** (t - i) for i in range(1, t + 1)]
        b = [(1 - beta2) * beta2 ** (t - i) for i in range(1, t + 1)]
        total += 2 * lr * math.sqrt(sum(x * x / y for x, y in zip(a, b))) * math.sqrt(sum(b)) / sum(a)
    return total


def same_double(a, b):
    """a and b are the same double as the lecture computed it: one read from
    a trace, the other from a trace or recomputed here from up to two figures
    read there in a few roundings (4 x 2^-52 relative covers 2 figures' 2^-52
    each, the written value's 2^-52 and the roundings' 2^-53 each)."""
    return math.isclose(a, b, rel_tol=4 * TRACE_REL, abs_tol=0.0)


def named(rendering):
    """A note's, a table caption's or a chart title's arguments by name
    (docs/trace-format.md, "args"): {expression as the lecture wrote it:
    value}, exact, as the lecture computed it."""
    return {a["expr"]: a.get("value") for a in rendering.get(ARGS_KEY[rendering["type"]]) or []}


def with_args(steps_renderings, *exprs):
    """(step, rendering, {expr: value}) of each rendering whose arguments
    include every one of exprs, in order."""
    found = []
    for s, r in steps_renderings:
        if r["type"] in ARGS_KEY:
            got = named(r)
            if all(e in got for e in exprs):
                found.append((s, r, got))
    return found


class LectureRun:
    """A mixin for a unittest.TestCase: runs build/lectures/NAME --quick once
    for the class (ENV added to the environment), fails each test when that
    run failed or wrote no trace, and reads the trace (self.trace, written to
    self.path)."""
    NAME = None
    ENV = {}

    @classmethod
    def setUpClass(cls):
        binary = lecture(cls.NAME)
        cls.out = tempfile.TemporaryDirectory()
        env = dict(os.environ)
        env.update(cls.ENV)
        cls.run_result, cls.trace = run_quick(binary, cls.out.name, env)
        cls.path = os.path.join(cls.out.name, cls.NAME + ".json")

    @classmethod
    def tearDownClass(cls):
        cls.out.cleanup()

    def setUp(self):
        self.assertEqual(self.run_result.returncode, 0, "%s --quick failed: %s" % (self.NAME, why(self.run_result)))
        self.assertIsNotNone(self.trace, "no trace written")

    # ---- finding steps ----

    def renderings(self, kind):
        """(step, rendering) of every rendering of type `kind`, in order."""
        return [(s, r) for s in self.trace["steps"] for r in s["renderings"] if r["type"] == kind]

    def texts(self, pattern="", world_size=None):
        """(step, match) of every text rendering the regex matches (searched),
        optionally only those of ranks of a spawn of `world_size`."""
        return [(s, m) for s, r in self.renderings("text")
                if world_size is None or s["world_size"] == world_size
                for m in [re.search(pattern, r["data"])] if m]

    def one(self, pattern):
        """The match of the one text rendering the regex matches."""
        found = self.texts(pattern)
        self.assertEqual(len(found), 1, pattern)
        return found[0][1]

    def per_rank(self, pattern, world):
        """One match per rank 0 .. world-1, each naming its own rank in group
        1, in rank order."""
        found = self.texts(pattern)
        self.assertEqual(sorted(s["rank"] for s, _ in found), list(range(world)), pattern)
        for s, m in found:
            self.assertEqual(int(m.group(1)), s["rank"])
        return [m for _, m in sorted(found, key=lambda x: x[0]["rank"])]

    def noted(self, *exprs, kind="markdown", spawn=None):
        """(step, rendering, {expr: value}) of every note (kind "table": table
        caption, "plot": chart title) whose arguments include all of exprs
        (the lecture's own expressions, docs/trace-format.md "args"),
        optionally only a spawn's: figures read by name, not from prose."""
        return [(s, r, a) for s, r, a in with_args(self.renderings(kind), *exprs) if spawn is None or s["spawn"] == spawn]

    def per_rank_noted(self, *exprs, world, where=None, unless=()):
        """{expr: value} of one rank line (note_verbatim) per rank 0 ..
        world-1, in rank order: those whose arguments include all of exprs,
        none of unless and, where given, have where's values ({expr: value}).
        Each line's "rank" argument, when it has one, is the rank that wrote
        it."""
        found = [(s, a) for s, _, a in self.noted(*exprs, kind="text")
                 if all(a.get(k) == v for k, v in (where or {}).items()) and not any(u in a for u in unless)]
        self.assertEqual(sorted(s["rank"] for s, _ in found), list(range(world)), (exprs, where))
        for s, a in found:
            self.assertEqual(a.get("rank", s["rank"]), s["rank"], (exprs, where))
        return [a for _, a in sorted(found, key=lambda x: x[0]["rank"])]

    def figures(self, *exprs, kind="markdown", spawn=None):
        """{expr: value} of the one note (or caption, title) whose arguments
        include all of exprs."""
        found = self.noted(*exprs, kind=kind, spawn=spawn)
        self.assertEqual(len(found), 1, exprs)
        return found[0][2]

    def markdown(self):
        """The text of every markdown rendering (note()), in order."""
        return [r["data"] for _, r in self.renderings("markdown")]

    def markdown_text(self):
        """All the notes' text, one string."""
        return "\n".join(self.markdown())

    # ---- reading tables ----

    def tables(self, caption):
        """(step, rendering) of every table whose caption the regex matches
        (searched): the values as the lecture computed them, not as its
        prose printed them."""
        return [(s, r) for s, r in self.renderings("table") if re.search(caption, r.get("caption") or "")]

    def table(self, caption):
        """The one table whose caption the regex matches (its rendering)."""
        found = self.tables(caption)
        self.assertEqual(len(found), 1, caption)
        return found[0][1]

    @staticmethod
    def columns(table):
        """A table's cells by column: {column name: [value of each row]}."""
        return {c["name"]: [row[k] for row in table["rows"]] for k, c in enumerate(table["columns"])}

    @staticmethod
    def row_dicts(table):
        """A table's cells by row: [{column name: value}] in row order."""
        names = [c["name"] for c in table["columns"]]
        return [dict(zip(names, row)) for row in table["rows"]]

    @staticmethod
    def rows_by_first(table):
        """{first cell: the rest of its row}: a table whose rows are named."""
        return {row[0]: row[1:] for row in table["rows"]}

    def one_plot(self):
        """The spec of the lecture's one plot (Vega-Lite v6)."""
        plots = [r["spec"] for _, r in self.renderings("plot")]
        self.assertEqual(len(plots), 1)
        self.assertIn("vega-lite/v6", plots[0]["$schema"])
        return plots[0]

    # ---- printed numbers ----

    def assert_scaled(self, printed, printed_base, factor, what):
        """The printed number `printed` is `factor` times `printed_base`, both
        rounded to their last printed digit: compared as intervals."""
        lo = (float(printed_base) - half_unit(printed_base)) * factor - half_unit(printed)
        hi = (float(printed_base) + half_unit(printed_base)) * factor + half_unit(printed)
        self.assertTrue(lo <= float(printed) <= hi, (what, printed, printed_base, factor))


class WholeTrace:
    """A mixin for a LectureRun test: the trace as a whole. SECTIONS: the
    headings (a note's first line) that must come, in that order."""
    SECTIONS = []

    def test_schema_and_line_accuracy(self):
        validate(self.path)
        self.assertEqual(self.trace["meta"]["status"], "ok")
        self.assertTrue(all(s["status"] == "ok" for s in self.trace["spawns"]))

    def test_checker_rejects_this_trace_shifted_by_one_line(self):
        # The line check above means something only if a stack that is one
        # line off fails it: shift every frame, then only the innermost.
        for innermost in (False, True):
            for delta in (1, -1):
                rejected, total = shifted_rejections(self.trace, delta, innermost)
                self.assertGreaterEqual(rejected, 0.98 * total, (innermost, delta, rejected, total))

    def test_sections_in_order(self):
        headings = [m.split("\n", 1)[0].strip() for m in self.markdown() if m.startswith("#")]
        pos = 0
        for section in self.SECTIONS:
            self.assertIn(section, headings[pos:], "missing or out of order: %r" % section)
            pos = headings.index(section, pos) + 1


class ValidTrace:
    """A mixin for a LectureRun test whose lecture has spawns meant to fail
    (WholeTrace's are all ok): the trace passes validate(), and its headings
    among SECTIONS are SECTIONS, each once and in that order."""
    SECTIONS = []

    def test_schema_and_line_accuracy(self):
        validate(self.path)

    def test_sections_in_order(self):
        heads = [r["data"].strip() for _, r in self.renderings("markdown") if r["data"].startswith("#")]
        self.assertEqual([h for h in heads if h in self.SECTIONS], self.SECTIONS)


class CommittedTrace:
    """A mixin for a unittest.TestCase: traces/NAME.json, the trace the
    repository ships, is valid and made from the current lectures/NAME.c
    (a class of its own in each test: a planted bug in the lecture makes it
    stale, which says nothing about whether the lecture's checks notice the
    bug)."""
    NAME = None

    def test_committed_trace_is_current_and_valid(self):
        path = os.path.join(ROOT, "traces", self.NAME + ".json")
        self.assertTrue(os.path.exists(path), "no committed traces/%s.json" % self.NAME)
        trace = validate(path)
        self.assertEqual(trace["meta"]["status"], "ok")
        source = "lectures/%s.c" % self.NAME
        self.assertIn(source, trace["files"])
        # Every file the trace carries, the lecture's lib code too: the text
        # is read when the trace is written and the lines come from the
        # binary's DWARF, so a binary built before an edit writes a trace
        # whose text is current and whose lines are not (validate() above
        # finds those only where a shifted line no longer makes its step).
        for name, text in sorted(trace["files"].items()):
            with open(os.path.join(ROOT, name), encoding="utf-8") as f:
                self.assertEqual(text, f.read(),
                                 "traces/%s.json was made from another version of %s: "
                                 "make, then build/lectures/%s --out traces" % (self.NAME, name, self.NAME))
