r"""The sentence guard: a note's numbers against the trace's own figures.

A lecture's prose quotes what it measured. The rules below make a sentence
that disagrees with the numbers beside it fail a test instead of reaching a
reader. They read only the trace: its steps and its copy of every source
file, so they run on any trace, committed or fresh.

    import sentences
    for step, message in sentences.problems(trace):
        ...

What a note printed. A note()'s markdown is matched against the format
string at its line in the trace's copy of the source; each printf
conversion is paired with the argument the call passes for it. So the
guard knows, for every number in a note, whether the author wrote it into
the text (a constant, not checked) or the program printed it, with which
conversion ("%.2f"), from which expression.

The section. Everything from one heading of the lecture's own process (a
note starting with "#") to the next; the ranks' steps in between belong to
it. A section's *figures* are the numbers of its structured renderings:
every number of every `table` row (and the total of each numeric column),
every number of a chart's data (`spec.data.values`), every `predict` value;
and, as text, the numbers in its tables' captions, column names and
displayed cells and its charts' titles.

The rules:

1. Quotes. An argument written `quoted(x)` (lectern.h: x itself, a mark for
   this guard) declares that the number is one of the section's figures. The
   text the conversion printed must be what that conversion prints for one
   of the figures ("%.1f" of 217.93 is "217.9"), or a number of the
   section's captions, column names or chart titles, as written there.
2. Measured sentences. In a sentence holding the word "measured" (sentences
   end at ". ", "! ", "? " and line ends), every number a conversion prints
   must be a figure, marked quoted or not (as rule 1 reads it). A number
   the author wrote into the text is a constant and needs nothing; each
   number inside a "%s" conversion's text must be a figure too, at the
   digits it is written with.
3. Questions. A `predict()` value must be one of its section's figures
   (table or chart, to 1e-9 of it: cJSON may write a double one unit in the
   last place off), so a question asks what the lecture then shows. When
   that figure sits in a table row with a column whose name holds "calls",
   the question must count the calls it describes ("4 all-gathers forward,
   3 backward and 4 reduce-scatters": numbers followed by a collective's or
   a call's name) and the counts must add up to that row's calls: a
   question that misdescribes the code then disagrees with the runtime's
   count.

Numbers in a note that no rule covers (constants, formulas, accounting) are
not checked here; the lecture's own test reads those.
"""
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracecheck  # noqa: E402

_CONVERSION = tracecheck._CONVERSION

# What a printf numeric conversion prints (and what a number in text is).
_NUMBER = r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"

# Names that count calls in a question (rule 3).
_CALL_WORDS = (r"all-gathers?|reduce-scatters?|all-reduces?|all-to-alls?|broadcasts?|reduces?|gathers?|scatters?|"
               r"sends?|receives?|recvs?|sendrecvs?|calls?|collectives?")


# ---- the source of a call ----

_skip_blank = tracecheck.skip_blank


def _arguments(src, pos):
    """The source text of each argument of a call, from src[pos] (just after
    the comma that ends the first argument, or at the closing parenthesis)
    to the call's closing parenthesis: top-level commas split them."""
    args, depth, start, i, n = [], 0, pos, pos, len(src)
    while i < n:
        c = src[i]
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            i = j + 1
            continue
        if src.startswith("/*", i):
            i = src.find("*/", i + 2) + 2
            continue
        if src.startswith("//", i):
            i = src.find("\n", i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                last = src[start:i].strip()
                if last:
                    args.append(last)
                return args
            depth -= 1
        elif c == "," and depth == 0:
            args.append(src[start:i].strip())
            start = i + 1
        i += 1
    return args


def note_call(trace, step):
    """(format string, [argument source, ...]) of the note() call at the
    step's innermost line whose format matches the step's markdown, or
    None (a note the runtime made, as a spawn's, or a format that is not a
    literal)."""
    frame = step["stack"][-1]
    src = trace["files"].get(frame["path"])
    if src is None:
        return None
    starts = [0]
    for m in re.finditer("\n", src):
        starts.append(m.end())
    if frame["line"] > len(starts):
        return None
    begin = starts[frame["line"] - 1]
    end = starts[frame["line"]] if frame["line"] < len(starts) else len(src)
    code = tracecheck.code_only(src[begin:end])[0]
    data = step["renderings"][0]["data"]
    for m in re.finditer(r"(?<![A-Za-z0-9_.>])note\s*\(", code):
        lit, pos = tracecheck._literal_at(src, begin + m.end())
        if lit is None:
            continue
        fmt = lit.decode("utf-8", "replace")
        if not tracecheck.format_regex(lit).fullmatch(data):
            continue
        pos = _skip_blank(src, pos)
        args = _arguments(src, pos + 1) if pos < len(src) and src[pos] == "," else []
        return fmt, args
    return None


# ---- what each conversion printed ----

class Printed:
    """One conversion of a note: its spec ("%.2f"), the argument's source,
    the text it printed and where (start, end) in the markdown."""

    def __init__(self, spec, arg, text, start, end):
        self.spec, self.arg, self.text, self.start, self.end = spec, arg, text, start, end

    @property
    def numeric(self):
        return self.spec[-1] in "diouxXeEfFgG"

    @property
    def quoted(self):
        return re.match(r"quoted\s*\(", self.arg or "") is not None

    def __repr__(self):
        return "Printed(%r, %r, %r)" % (self.spec, self.arg, self.text)


def printed(fmt, args, data):
    """Each conversion of `fmt` (but %%) as printed in `data`, paired with its
    argument (a * width or precision takes one too); None when `data` does
    not match the format."""
    parts, convs, k, last = [], [], 0, 0
    for m in _CONVERSION.finditer(fmt):
        parts.append(tracecheck._text_pattern(fmt[last:m.start()].encode("utf-8")))
        last = m.end()
        conv = m.group(5)
        if conv == "%":
            parts.append("%")
            continue
        k += (m.group(2) == "*") + (m.group(3) == "*")
        arg = args[k] if k < len(args) else None
        k += 1
        spec = "%" + (m.group(1) or "") + (m.group(2) or "") + ("." + m.group(3) if m.group(3) is not None else "") + \
            conv
        convs.append((spec, arg))
        if conv in "diouxXeEfFgG":
            parts.append(r"\s*(%s)" % _NUMBER)
        else:
            parts.append(r"(.*?)")
    parts.append(tracecheck._text_pattern(fmt[last:].encode("utf-8")))
    m = re.compile("".join(parts), re.S).fullmatch(data)
    if not m:
        return None
    return [Printed(spec, arg, m.group(i + 1), m.start(i + 1), m.end(i + 1)) for i, (spec, arg) in enumerate(convs)]


def sentences(text):
    """(start, end) of each sentence: they end at '. ', '! ', '? ' and at
    line ends."""
    spans, start = [], 0
    for m in re.finditer(r"(?<=[.!?])\s+|\n+", text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    return spans


# ---- a section's figures ----

def _numbers_in(value, out):
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        if math.isfinite(value):
            out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _numbers_in(v, out)
    elif isinstance(value, list):
        for v in value:
            _numbers_in(v, out)


class Section:
    """The figures of one section: numbers (tables, charts, predicts), words
    (the numbers written in captions, column names and chart titles), and
    the tables themselves."""

    def __init__(self, heading):
        self.heading = heading
        self.numbers = []
        self.words = set()
        self.shown = set()   # the numbers the tables display, as displayed
        self.tables = []   # (step index, rendering)
        self.notes = []    # step indices
        self.predicts = []  # (step index, rendering)

    def add_words(self, text):
        for w in re.findall(_NUMBER, text or ""):
            self.words.add(w)

    def add(self, i, r):
        kind = r["type"]
        if kind == "table":
            self.tables.append((i, r))
            _numbers_in(r["rows"], self.numbers)
            for k, c in enumerate(r["columns"]):   # a column's total ("... bytes in all")
                if c.get("kind") == "number":
                    column = [row[k] for row in r["rows"] if isinstance(row[k], (int, float))]
                    if len(column) > 1:
                        self.numbers.append(sum(column))
            self.add_words(r.get("caption"))
            for c in r["columns"]:
                self.add_words(c["name"])
            for row in r.get("display", []):
                for cell in row:
                    self.shown.update(re.findall(_NUMBER, str(cell)))
        elif kind == "plot":
            spec = r.get("spec", {})
            data = spec.get("data", {})
            _numbers_in(data.get("values", []) if isinstance(data, dict) else [], self.numbers)
            title = spec.get("title")
            self.add_words(title if isinstance(title, str) else json.dumps(title))
            self.add_words(spec.get("description"))
        elif kind == "predict":
            self.predicts.append((i, r))
        elif kind == "markdown":
            self.notes.append(i)


def section_of(trace):
    """The sections of a trace, in order."""
    out = [Section("")]
    for i, s in enumerate(trace["steps"]):
        for r in s["renderings"]:
            if r["type"] == "markdown" and s["rank"] is None and r["data"].startswith("#"):
                out.append(Section(r["data"].split("\n", 1)[0]))
            out[-1].add(i, r)
    return out


def c_format(spec, value):
    """What C's printf prints for `value` with `spec` (the length modifier
    dropped), or None when the conversion cannot print it (a fraction for
    %d)."""
    conv = spec[-1]
    if conv in "diouxX":
        if float(value) != int(value):
            return None
        return (spec.replace("i", "d")) % int(value)
    return spec % float(value)


def _spec_of(text):
    """The conversion that prints a number as `text` is written: "%.2f" for
    "15.46", "%.0f" for "4096" (a number inside a "%s" argument, or printed
    with a * precision)."""
    if re.search(r"[eE]", text):
        return "%g"
    return "%%.%df" % (len(text.split(".")[1]) if "." in text else 0)


def backed(p, section):
    """The printed number is a figure of the section, as its conversion
    prints it, or a number the section's captions and titles write."""
    if p.text in section.words or p.text in section.shown:
        return True
    if "*" in p.spec:
        p = Printed(_spec_of(p.text), p.arg, p.text, p.start, p.end)
    for v in section.numbers:
        try:
            if c_format(p.spec, v) == p.text:
                return True
        except (ValueError, OverflowError, TypeError):
            continue
    return False


# ---- the rules ----

def _note_problems(trace, i, section):
    step = trace["steps"][i]
    call = note_call(trace, step)
    if call is None:
        return []
    fmt, args = call
    data = step["renderings"][0]["data"]
    ps = printed(fmt, args, data)
    if ps is None:
        return ["the note does not match its format %r" % fmt[:80]]
    out = []
    for p in ps:
        if p.quoted and p.numeric and not backed(p, section):
            out.append("%s printed %s for %s, which is none of the figures of section %r" %
                       (p.spec, p.text, p.arg, section.heading))
    for a, b in sentences(data):
        if not re.search(r"\bmeasured\b", data[a:b], re.I):
            continue
        for p in ps:
            if not a <= p.start < b:
                continue
            if p.numeric and not p.quoted and not backed(p, section):
                out.append("the measured sentence %r prints %s for %s, which is none of the figures of section %r" %
                           (data[a:b][:120], p.text, p.arg, section.heading))
            if not p.numeric:   # text: each number in it must be a figure too
                for w in re.findall(_NUMBER, p.text):
                    if re.search(r"\d", w) and not backed(Printed(_spec_of(w), p.arg, w, 0, 0), section):
                        out.append("the measured sentence %r prints %s (in %s), which no table or caption of "
                                   "section %r shows" % (data[a:b][:120], w, p.arg, section.heading))
    return out


def _close(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b)) or a == b


def _predict_problems(trace, i, r, section):
    value = r["value"]
    homes = []   # (table rendering, row) holding the value
    for _, t in section.tables:
        for row in t["rows"]:
            if any(isinstance(v, (int, float)) and not isinstance(v, bool) and _close(v, value) for v in row):
                homes.append((t, row))
    in_chart = any(_close(v, value) for v in section.numbers)
    if not homes and not in_chart:
        return ["the question's value %r is none of the figures of section %r: a question asks what the "
                "lecture then shows" % (value, section.heading)]
    out = []
    counts = [int(n) for n, _ in re.findall(r"\b(\d+) (?:[\w-]+ )?(%s)\b" % _CALL_WORDS, r["question"])]
    for t, row in homes:
        calls = [k for k, c in enumerate(t["columns"]) if "calls" in c["name"]]
        if not calls:
            continue
        want = row[calls[0]]
        if not counts:
            out.append("the question's value sits in a row whose %r is %s, but the question counts no calls "
                       "(say how many of each call the code makes)" % (t["columns"][calls[0]]["name"], want))
        elif sum(counts) != want:
            out.append("the question counts %s = %d calls; the row that holds its value says %r = %s" %
                       (" + ".join(map(str, counts)), sum(counts), t["columns"][calls[0]]["name"], want))
        break
    return out


def problems(trace):
    """[(step index, message), ...]: every sentence that breaks a rule."""
    out = []
    for section in section_of(trace):
        for i in section.notes:
            out += [(i, m) for m in _note_problems(trace, i, section)]
        for i, r in section.predicts:
            out += [(i, m) for m in _predict_problems(trace, i, r, section)]
    return sorted(out)


def report(trace, found):
    """The problems as lines that name each step's lecture line."""
    lines = []
    for i, m in found:
        f = trace["steps"][i]["stack"][-1]
        lines.append("%s:%d (step %d): %s" % (f["path"], f["line"], i, m))
    return "\n".join(lines)
