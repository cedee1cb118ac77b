#!/usr/bin/python3
"""Writes the viewer's fixture traces (tests/viewer/fixtures/*.json and .js).

The traces are made by hand from the C sources in fixtures/src/: every stack
frame names a line found by searching that source for a snippet, so the
fixtures stay true to their sources when these are edited.

    /usr/bin/python3 tests/viewer/make_fixtures.py [OUT_DIR]
"""
import copy
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "fixtures", "src")
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import tracecheck  # noqa: E402


def source(path):
    with open(os.path.join(SRC, path), encoding="utf-8") as f:
        return f.read()


def line_of(path, snippet, nth=1):
    """1-based line of the nth line of `path` (below fixtures/src) containing `snippet`."""
    return tracecheck.line_of(os.path.join(SRC, path), snippet, nth)


def frame(path, function, snippet, nth=1):
    return {"path": path, "line": line_of(path, snippet, nth), "function": function}


def md(data, html):
    return {"type": "markdown", "data": data, "html": html}


def text(data, **extra):
    return dict({"type": "text", "data": data}, **extra)


class Trace:
    def __init__(self, lecture, files, backend="none", status="ok"):
        self.t = {
            "version": 1,
            "lecture": lecture,
            "meta": {"start_time": "2026-11-22T10:00:00Z", "host": "testbox", "gpus": 0, "gpu_names": [],
                     "backend": backend, "status": status, "duration_s": 1.25,
                     "command": f"build/lectures/{lecture}"},
            "files": {f: source(f) for f in files},
            "spawns": [],
            "steps": [],
        }
        self.clock = 0.0

    def step(self, stack, *renderings, rank=None, world_size=None, spawn=None):
        self.clock += 0.0125
        self.t["steps"].append({"stack": stack, "rank": rank, "world_size": world_size, "spawn": spawn,
                                "time": round(self.clock, 4), "renderings": list(renderings)})

    def spawn(self, stack, world_size, backend, reason, status="ok", seconds=0.36):
        self.t["spawns"].append({"id": len(self.t["spawns"]), "world_size": world_size, "backend": backend,
                                 "reason": reason, "stack": stack, "status": status, "seconds": seconds})
        return len(self.t["spawns"]) - 1


def demo():
    p = "lectures/demo.c"
    tr = Trace("demo", [p])
    top = lambda snip: frame(p, "body", snip)
    tr.step([top('note("# Demo lecture")')], md("# Demo lecture", "<h1>Demo lecture</h1>\n"))
    tr.step([top('note("This lecture shows')],
            md("This lecture shows each rendering the viewer knows: ...",
               "<p>This lecture shows each rendering the viewer knows:</p>\n<ul>\n<li>markdown</li>\n<li>text</li>\n"
               "<li>images, links, plots</li>\n<li>errors</li>\n</ul>\n"))
    hw = [top("hardware();")]
    f = lambda snip: hw + [frame(p, "hardware", snip)]
    tr.step(f('note("## One GPU")'), md("## One GPU", "<h2>One GPU</h2>\n"))
    tr.step(f('note("A GPU reads'), md("A GPU reads its own memory at about **3.35 TB/s** (H100 SXM, HBM3).",
                                       "<p>A GPU reads its own memory at about <strong>3.35 TB/s</strong> "
                                       "(H100 SXM, HBM3). See <a href=\"https://example.org/hbm\">HBM</a>.</p>\n"))
    tr.step(f("image(\"tests/viewer"), {"type": "image", "src": "tests/viewer/fixtures/ring.svg", "width": 0.3,
                                        "remote": False})
    tr.step(f("see(\"https://www.nvidia"), {"type": "link", "url": "https://www.nvidia.com/en-us/data-center/h100/"})
    tr.step(f('note_system("nproc")'), text("2\n", command="nproc", exit_status=0))
    sq = [top("squares();")]
    tr.step(sq + [frame(p, "squares", 'note("## A loop")')], md("## A loop", "<h2>A loop</h2>\n"))
    for i in range(5):
        tr.step(sq + [frame(p, "squares", "note_verbatim(\"i = %d")], text(f"i = {i}, i*i = {i * i}"))
    bw = [top("bandwidth();")]
    tr.step(bw + [frame(p, "bandwidth", 'note("## Bandwidth")')], md("## Bandwidth", "<h2>Bandwidth</h2>\n"))
    spec = {"title": "all-reduce bus bandwidth",
            "width": 360, "height": 180,
            "data": {"values": [{"MB": m, "GB/s": g} for m, g in [(1, 0.4), (4, 0.9), (16, 1.3), (64, 1.6)]]},
            "mark": {"type": "line", "point": True},
            "encoding": {"x": {"field": "MB", "type": "quantitative", "scale": {"type": "log"}},
                         "y": {"field": "GB/s", "type": "quantitative"}}}
    tr.step(bw + [frame(p, "bandwidth", "plot(")], {"type": "plot", "spec": spec})
    tr.step(bw + [frame(p, "bandwidth", 'image("https://example.org')],
            {"type": "image", "src": "https://example.org/figures/nvlink.png", "width": 0.5, "remote": True})
    br = [top("broken();")]
    tr.step(br + [frame(p, "broken", 'note("## When something')], md("## When something goes wrong",
                                                                    "<h2>When something goes wrong</h2>\n"))
    tr.step(br + [frame(p, "broken", 'image("assets/missing.png"')],
            {"type": "error", "data": "image: assets/missing.png does not exist"})
    tr.step([top('note("That is all')], md("That is all for today.", "<p>That is all for today.</p>\n"))
    return tr.t


def multi():
    p, h = "lectures/multi.c", "lectures/multi_helper.c"
    tr = Trace("multi", [p, h], backend="mpi")
    top = lambda snip: frame(p, "body", snip)
    tr.step([top('note("# Multi-rank')], md("# Multi-rank lecture", "<h1>Multi-rank lecture</h1>\n"))
    co = [top("collectives();")]
    c = lambda snip: co + [frame(p, "collectives", snip)]
    tr.step(c('note("## All-reduce on 4'), md("## All-reduce on 4 ranks", "<h2>All-reduce on 4 ranks</h2>\n"))
    tr.step(c('note("Each rank starts'), md("Each rank starts with ...",
                                           "<p>Each rank starts with <code>[0, 1, 2, 3] + rank</code>; after the "
                                           "all-reduce every rank holds the sum.</p>\n"))
    at = c("spawn(all_reduce_demo")
    k = tr.spawn(at, 4, "mpi", "4 ranks, 0 GPUs: Open MPI on host memory")
    w = lambda snip: at + [frame(h, "all_reduce_demo", snip)]
    for r in range(4):
        v = ", ".join(f"{x + r}." for x in range(4))
        tr.step(w("[before all-reduce]"), text(f"Rank {r} [before all-reduce]: tensor([{v}], device='cpu')"),
                rank=r, world_size=4, spawn=k)
    for r in range(4):
        tr.step(w("[after all-reduce]"), text(f"Rank {r} [after all-reduce]: tensor([ 6., 10., 14., 18.], device='cpu')"),
                rank=r, world_size=4, spawn=k)
    tr.step(w("check_sum(rank, t);") + [frame(h, "check_sum", 'note("Rank 0 checks')],
            md("Rank 0 checks the sum: **[6, 10, 14, 18]**.",
               "<p>Rank 0 checks the sum: <strong>[6, 10, 14, 18]</strong>.</p>\n"), rank=0, world_size=4, spawn=k)
    tr.step(c('note("Every rank ended'), md("Every rank ended with the same tensor.",
                                           "<p>Every rank ended with the same tensor.</p>\n"))
    pa = [top("pairs();")]
    tr.step(pa + [frame(p, "pairs", 'note("## Two ranks')], md("## Two ranks say hello", "<h2>Two ranks say hello</h2>\n"))
    at2 = pa + [frame(p, "pairs", "spawn(greet")]
    k2 = tr.spawn(at2, 2, "mpi", "2 ranks, 0 GPUs: Open MPI on host memory", seconds=0.28)
    for r in range(2):
        tr.step(at2 + [frame(p, "greet", "note_verbatim(\"hello")], text(f"hello from rank {r} of 2"),
                rank=r, world_size=2, spawn=k2)
    tr.step([top('note("Done.")')], md("Done.", "<p>Done.</p>\n"))
    return tr.t


def multi_failed(t):
    """The same lecture, run until rank 2 crashed in the all-reduce."""
    t = copy.deepcopy(t)
    t["meta"]["status"] = "failed"
    keep = [s for s in t["steps"] if s["spawn"] in (None, 0)][:5]
    h = "lectures/multi_helper.c"
    crash = copy.deepcopy(keep[-1])
    crash["rank"], crash["world_size"], crash["spawn"] = 2, 4, 0
    crash["stack"][-1] = frame(h, "all_reduce_demo", "all_reduce(t, DIST_SUM);")
    crash["renderings"] = [{"type": "error", "data": f"rank 2 died with SIGSEGV at {h}:"
                                                     f"{crash['stack'][-1]['line']} (all_reduce_demo)"}]
    crash["time"] = 0.3
    t["steps"] = keep + [crash]
    t["spawns"] = t["spawns"][:1]
    t["spawns"][0]["status"] = "failed"
    return t


def media():
    p = "lectures/media.c"
    tr = Trace("media", [p])
    top = lambda snip: frame(p, "body", snip)
    tr.step([top('note("# Figures')], md("# Figures and links", "<h1>Figures and links</h1>\n"))
    tr.step([top('image("tests/viewer')], {"type": "image", "src": "tests/viewer/fixtures/wide.svg", "width": 0.3,
                                            "remote": False})
    tr.step([top('see("https://example.org/papers')], {"type": "link", "url": "https://example.org/papers/ring-allreduce.pdf",
                                                        "title": "Ring all-reduce, the paper"})
    tr.step([top('see("https://docs.example')], {"type": "link", "url": "https://docs.example.org/guide/usage/collectives.html"})
    tr.step([top('image("https://example')], {"type": "image", "src": "https://example.org/figures/nvlink-generations.png",
                                               "width": 0.5, "remote": True})
    tr.step([top('note("The end')], md("The end.", "<p>The end.</p>\n"))
    return tr.t


def tables():
    p = "lectures/tables.c"
    tr = Trace("tables", [p])
    top = lambda snip: frame(p, "body", snip)
    tr.step([top('note("# A table")')], md("# A table", "<h1>A table</h1>\n"))
    rows = [["all-reduce", 4, 2.5], ["broadcast", 16, 10.25], ["reduce-scatter", 1, 0.75]]
    tr.step([top("table_show(t);")], {
        "type": "table", "caption": "all-reduce on 4 ranks",
        "columns": [{"name": "operation", "format": "%s", "kind": "text"},
                    {"name": "size", "unit": "MiB", "format": "%g", "kind": "number"},
                    {"name": "busbw", "unit": "GB/s", "format": "%.2f", "kind": "number"}],
        "rows": rows, "display": [[r[0], "%g" % r[1], "%.2f" % r[2]] for r in rows]})
    tr.step([top("chart_show(c);")], {"type": "plot", "spec": modelled_chart()})
    tr.step([top('note("The end')], md("The end.", "<p>The end.</p>\n"))
    # The run called model_compute() twice (in the lecture), as the chart's
    # modelled bar says it stood for.
    tr.t["meta"]["modelled_compute"] = True
    tr.t["modelled"] = [
        {"spawn": None, "rank": None, "start": 0.5, "end": 0.520113, "ms": 20, "device": "cpu", "path": p,
         "line": line_of(p, "chart_span_modelled("), "function": "body"},
        {"spawn": None, "rank": None, "start": 0.6, "end": 0.620087, "ms": 20, "device": "cpu", "path": p,
         "line": line_of(p, "chart_span_modelled("), "function": "body"}]
    return tr.t


def modelled_chart():
    """What chart_show() writes for a chart with a measured and a modelled
    span (runtime/trace/charts.c; tests/trace/test_table.py pins it)."""
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "title": "one forward, real and modelled", "width": 480, "height": 120,
        "data": {"values": [
            {"series": "forward", "row": "real: stage 0", "label": "micro-batch 0", "start": 0, "end": 3.5,
             "compute": "measured"},
            {"series": "forward", "row": "modelled: stage 0", "label": "micro-batch 0", "start": 0, "end": 20,
             "modelled": True, "compute": "modelled"}]},
        "encoding": {
            "x": {"field": "start", "type": "quantitative", "title": "time (ms)"}, "x2": {"field": "end"},
            "y": {"field": "row", "type": "ordinal", "title": "stage"},
            "color": {"field": "series", "type": "nominal"},
            "tooltip": [{"field": f} for f in ("row", "series", "label", "start", "end", "compute")],
            "opacity": {"field": "compute", "type": "ordinal", "title": "compute",
                        "scale": {"domain": ["measured", "modelled"], "range": [1, 0.4]}},
            "strokeDash": {"field": "compute", "type": "ordinal", "title": "compute",
                           "scale": {"domain": ["measured", "modelled"], "range": [[1, 0], [4, 2]]}}},
        "mark": {"type": "bar", "stroke": "#333333", "strokeWidth": 1},
        "description": "Pale bars with dashed outlines are modelled compute: time the lecture said a device "
                       "computed (model_compute), not arithmetic that was measured."}


# What a hostile trace tries to run: it renames the page, counts itself in a
# global and calls alert(). The tests watch all three.
PAY = "document.title='PWNED';top.__pwned=(top.__pwned||0)+1;alert('PWNED')"
# Harmless text next to each payload: it must still show.
SAFE = "SAFE-%s"


def hostile():
    """A trace anyone could write by hand, with every payload in the places a
    trace carries HTML, addresses or text. Each step also holds plain text
    (SAFE-...) that must still be shown."""
    p = "lectures/hostile.c"
    tr = Trace("hostile", [p])
    top = lambda snip: frame(p, "body", snip)
    h = lambda snip, html, data=None: tr.step([top(snip)], md(data or snip, html))
    tr.step([top('note("# A hostile')], md("# A hostile trace", "<h1>A hostile trace</h1>\n"))
    h('note("handlers: onerror")',
      f'<p>{SAFE % "onerror"} before</p><img src="x" onerror="{PAY}"><p>after <strong>{SAFE % "onerror-after"}</strong></p>\n')
    h('note("handlers: onload")',
      f'<p>{SAFE % "onload"}</p><svg onload="{PAY}"></svg><img src="tests/viewer/fixtures/ring.svg" onload="{PAY}" '
      f'alt="ring"><details open ontoggle="{PAY}"><summary>x</summary>y</details>'
      f'<p onmouseover="{PAY}" onclick="{PAY}">{SAFE % "onload-after"}</p>\n')
    h('note("script element")', f'<p>{SAFE % "script"}</p><script>{PAY}</script><p>{SAFE % "script-after"}</p>\n')
    # md4c itself writes javascript: links from [text](javascript:...).
    h('note("javascript: links in markdown")',
      f'<p><a href="javascript:{PAY}">{SAFE % "jslink"}</a> <a href="JaVaScRiPt:{PAY}">upper</a> '
      f'<a href="java&#x09;script:{PAY}">tab</a> <a href=" &#x0A;javascript:{PAY}">space</a> '
      f'<a href="data:text/html,&lt;script&gt;{PAY}&lt;/script&gt;">data</a> '
      f'<a href="vbscript:msgbox(1)">vb</a> <a href="//evil.example/x">other host</a> '
      f'<a href="https://example.org/ok">{SAFE % "httplink"}</a></p>\n')
    tr.step([top('see("javascript: link')], {"type": "link", "url": f"javascript:{PAY}"},
            md("x", f"<p>{SAFE % 'see-js'}</p>\n"))
    tr.step([top('see("data: link')], {"type": "link", "url": f"data:text/html,<script>{PAY}</script>",
                                       "title": "<img src=x onerror=\"" + PAY + "\">"},
            md("x", f"<p>{SAFE % 'see-data'}</p>\n"))
    h('note("iframes")', f'<p>{SAFE % "iframe"}</p><iframe src="javascript:{PAY}"></iframe>'
                          f'<iframe srcdoc="&lt;script&gt;{PAY}&lt;/script&gt;"></iframe><p>{SAFE % "iframe-after"}</p>\n')
    h('note("svg with script")',
      f'<svg xmlns="http://www.w3.org/2000/svg"><script>{PAY}</script><a xlink:href="javascript:{PAY}"><text>t</text></a>'
      f'<animate onbegin="{PAY}" attributeName="x" dur="1s"/></svg><p>{SAFE % "svg"}</p>\n')
    h('note("a style that hides',
      f'<style>body, #main, #read {{ display: none !important; }}</style>'
      f'<p style="position:fixed;inset:0;background:#fff;z-index:9999">{SAFE % "style"}</p>'
      f'<div class="error-box sr-only">{SAFE % "style-class"}</div>\n')
    # The mXSS patterns confuse the parser on purpose: what follows them in the
    # same note may go with them, so more harmless text is a rendering of its own.
    tr.step([top('note("object, embed')], md("x",
      f'<p>{SAFE % "mixed"}</p><object data="javascript:{PAY}"></object><embed src="javascript:{PAY}">'
      f'<form action="javascript:{PAY}"><button formaction="javascript:{PAY}">{SAFE % "form"}</button></form>'
      f'<base href="javascript:{PAY}//"><meta http-equiv="refresh" content="0;url=javascript:{PAY}">'
      f'<link rel="stylesheet" href="data:text/css,body{{display:none}}">'
      f'<math><mtext><table><mglyph><style><img src=x onerror="{PAY}"></style></mglyph></table></mtext></math>'
      f'<noscript><p title="</noscript><img src=x onerror=\"{PAY}\">"></noscript>\n'),
      md("x", f"<p>{SAFE % 'mixed-after'}</p>\n"))
    tr.step([top('note_verbatim("text stays')], text(f'<img src=x onerror="{PAY}"> {SAFE % "text"}'))
    tr.step([top('image("javascript: image')],
            {"type": "image", "src": f"javascript:{PAY}", "width": 0.5, "remote": False},
            md("x", f"<p>{SAFE % 'image-js'}</p>\n"))
    tr.step([top('image("quote in an image')],
            {"type": "image", "src": f'x" onerror="{PAY}', "width": 0.5, "remote": False},
            {"type": "image", "src": f"https://example.org/a.png\" onerror=\"{PAY}", "width": 0.5, "remote": True},
            md("x", f"<p>{SAFE % 'image-quote'}</p>\n"))
    h('note("images in markdown")',
      f'<p><img src="javascript:{PAY}" alt="js image"> <img src="data:image/svg+xml,&lt;svg xmlns=&quot;http://www.w3.org/2000/svg&quot; '
      f'onload=&quot;{PAY}&quot;/&gt;" alt="data image"> {SAFE % "mdimg"}</p>\n')
    tr.step([top('note("error text")')], {"type": "error", "data": f'<img src=x onerror="{PAY}"> {SAFE % "error"}'})
    spec = {"data": {"values": [{"a": 1, "b": 2}, {"a": 2, "b": 3}]}, "mark": "point",
            "encoding": {"x": {"field": "a", "type": "quantitative"}, "y": {"field": "b", "type": "quantitative"},
                         "href": {"value": f"javascript:{PAY}"}},
            "title": f"<img src=x onerror=\"{PAY}\">",
            "usermeta": {"embedOptions": {"actions": {"source": True, "editor": True},
                                          "sourceHeader": f"<script>{PAY}</script>", "ast": False,
                                          "editorUrl": f"javascript:{PAY}"}}}
    tr.step([top('plot("a plot whose')], {"type": "plot", "spec": spec}, md("x", f"<p>{SAFE % 'plot'}</p>\n"))
    at = [top("spawn(rank_part")]
    k = tr.spawn(at, 2, "mpi", f'<img src=x onerror="{PAY}"> two ranks')
    for r in range(2):
        tr.step(at + [{"path": p, "line": line_of(p, 'note_verbatim("rank %d'),
                       "function": f'rank_part<img src=x onerror="{PAY}">'}],
                text(f'rank {r} <img src=x onerror="{PAY}"> {SAFE % "rank"}'), rank=r, world_size=2, spawn=k)
    tr.step([top('note("The end')], md("The end", f"<p>The end: {SAFE % 'end'}</p>\n"))
    tr.t["meta"]["host"] = f'<img src=x onerror="{PAY}">'
    tr.t["meta"]["command"] = f'<script>{PAY}</script>'
    return tr.t


def checks():
    """check() and check_close() steps, passed and failed, in the lecture and
    in ranks; the ranks' output arrives in the order 0, 3, 2, 1."""
    p = "lectures/checks.c"
    tr = Trace("checks", [p], backend="mpi", status="failed")
    top = lambda snip: frame(p, "body", snip)
    tr.step([top('note("# Checks")')], md("# Checks", "<h1>Checks</h1>\n"))
    tr.step([top('"outputs")')], {"type": "check", "passed": True, "what": "outputs", "rtol": 1e-5, "atol": 1e-8,
                                   "numel": 6, "bad": 0, "max_abs": 0, "max_abs_at": [0], "max_rel": 0,
                                   "max_rel_at": [1], "data": "PASS: outputs"})
    tr.step([top('"gradients")')], {"type": "check", "passed": False, "what": "gradients", "rtol": 1e-5, "atol": 1e-8,
                                     "numel": 6, "bad": 6, "max_abs": 0.5, "max_abs_at": [0], "max_rel": 0.5,
                                     "max_rel_at": [1], "first_bad_at": [0],
                                     "actual_at_max": 1.5, "expected_at_max": 1, "bad_ranges": [[0, 5]], "bad_runs": 1,
                                     "data": "FAIL: gradients: max abs diff 0.5 at [0]"})
    tr.step([top('check(2 + 2')], {"type": "check", "passed": True, "what": "two and two make 4",
                                    "data": "PASS: two and two make 4"})
    at = [top("spawn(ranks")]
    k = tr.spawn(at, 4, "mpi", "4 ranks, 0 GPUs: Open MPI on host memory")
    for r in (0, 3, 2, 1):
        tr.step(at + [frame(p, "ranks", 'note_verbatim("rank')], text(f"rank {r} of 4"), rank=r, world_size=4, spawn=k)
    for r in (2, 0, 1, 3):
        ok = r != 3
        tr.step(at + [frame(p, "ranks", "check_close(t, want")],
                {"type": "check", "passed": ok, "what": "arange against itself", "rtol": 0, "atol": 0, "numel": 4,
                 "bad": 0 if ok else 1, "max_abs": 0 if ok else 1, "max_abs_at": [0 if ok else 2],
                 "data": "PASS" if ok else "FAIL"}, rank=r, world_size=4, spawn=k)
    tr.step([top('note("The end.")')], md("The end.", "<p>The end.</p>\n"))
    tr.t["meta"]["checks"] = {"passed": 5, "failed": 2}
    return tr.t


def homework():
    """A homework of three spawn_exercise() spawns: exercise 1's passes
    folded as the runtime folds them (one step per place and turn, in rank
    0's column, standing for the four ranks), exercise 2 run to its end with
    a failed check on every rank, exercise 3 stopped by a crash before its
    checks. The run's counts (meta.checks) are what the console said."""
    p = "lectures/homework.c"
    tr = Trace("homework", [p], backend="mpi", status="failed")
    top = lambda snip: frame(p, "body", snip)
    tr.step([top('note("# Homework")')], md("# Homework", "<h1>Homework</h1>\n"))
    reason = "4 ranks, 0 GPUs: Open MPI on host memory"
    at = [top('spawn_exercise("exercise 1:"')]
    k = tr.spawn(at, 4, "mpi", reason)
    tr.t["spawns"][k].update({"exercise": "exercise 1:", "time_limit_s": 30, "checks": {"passed": 8, "failed": 0}})
    tr.step(at, md("spawn: " + reason, "<p>spawn: " + reason + "</p>\n"))
    for part in range(2):
        what = "exercise 1: part %d" % part
        tr.step(at + [frame(p, "exercise_1", "check_close(t, t")],
                {"type": "check", "passed": True, "what": what, "rtol": 0, "atol": 0, "numel": 4, "bad": 0,
                 "max_abs": 0, "max_abs_at": [0], "data": "PASS on 4 ranks: " + what, "ranks": [0, 2, 1, 3],
                 "folded": 4, "each": [{"rank": r, "what": what} for r in (0, 2, 1, 3)]},
                rank=0, world_size=4, spawn=k)
    at = [top('spawn_exercise("exercise 2:"')]
    k = tr.spawn(at, 4, "mpi", reason)
    tr.t["spawns"][k].update({"exercise": "exercise 2:", "time_limit_s": 30, "checks": {"passed": 0, "failed": 4}})
    tr.step(at, md("spawn: " + reason, "<p>spawn: " + reason + "</p>\n"))
    for r in range(4):
        tr.step(at + [frame(p, "exercise_2", "check_named(rank < 0")],
                {"type": "check", "passed": False, "name": "exercise 2: one all-reduce",
                 "what": "exercise 2: one all-reduce: made 2 calls",
                 "data": "FAIL: exercise 2: one all-reduce: made 2 calls"}, rank=r, world_size=4, spawn=k)
    at = [top('spawn_exercise("exercise 3:"')]
    k = tr.spawn(at, 4, "mpi", reason, status="failed", seconds=0.41)
    tr.t["spawns"][k].update({"exercise": "exercise 3:", "time_limit_s": 30})
    tr.step(at, md("spawn: " + reason, "<p>spawn: " + reason + "</p>\n"))
    crash = at + [frame(p, "exercise_3", "*(volatile int *)0")]
    tr.step(crash, {"type": "error", "data": "lectures/homework.c:%d: rank 1 of 4 died with SIGSEGV, in exercise_3()"
                                             % crash[-1]["line"]}, rank=1, world_size=4, spawn=k)
    tr.t["meta"]["checks"] = {"passed": 8, "failed": 4, "not_reached": 4}
    return tr.t


def expected():
    """A spawn_expect_failure() spawn: its error steps are expected (the
    lesson, not a failure of the run); then a spawn of 4 ranks. Both spawn
    calls are long, so their headers wrap in a narrow pane."""
    p = "lectures/expected.c"
    tr = Trace("expected", [p], backend="mpi")
    top = lambda snip: frame(p, "body", snip)
    tr.step([top('note("# Expected')], md("# Expected failures", "<h1>Expected failures</h1>\n"))
    tr.step([top('note("Every rank sends')], md("Every rank sends first, and none receives:",
                                                "<p>Every rank sends first, and none receives:</p>\n"))
    at = [top("spawn_expect_failure(")]
    k = tr.spawn(at, 4, "mpi", "4 ranks, 0 GPUs: Open MPI on host memory", status="failed", seconds=3.4)
    tr.t["spawns"][k]["expect_failure"] = True
    tr.step(at, md("spawn: 4 ranks, 0 GPUs: Open MPI on host memory",
                   "<p>spawn: 4 ranks, 0 GPUs: Open MPI on host memory</p>\n"))
    fn = "both_ranks_send_first_and_wait_for_each_other"
    for r in range(4):
        tr.step(at + [frame(p, fn, 'note_verbatim("rank %d sends')], text(f"rank {r} sends first"),
                rank=r, world_size=4, spawn=k)
    send = at + [frame(p, fn, "dist_send(mine")]
    line = send[-1]["line"]
    for r in range(4):
        tr.step(send, {"type": "error", "expected": True,
                       "data": f"lectures/expected.c:{line}: rank {r} of 4 made no progress for 3 s, last in "
                               f"dist_send, in {fn}() (a deadlock? each rank waiting for another)"},
                rank=r, world_size=4, spawn=k)
    tr.step([top('note("The runtime caught')], md("The runtime caught it; the lecture goes on.",
                                                  "<p>The runtime caught it; the lecture goes on.</p>\n"))
    tr.step([top('note("Now an all-reduce')], md("Now an all-reduce that works:",
                                                 "<p>Now an all-reduce that works:</p>\n"))
    at = [top("spawn(every_rank")]
    k = tr.spawn(at, 4, "mpi", "4 ranks, 0 GPUs: Open MPI on host memory")
    tr.step(at, md("spawn: 4 ranks, 0 GPUs: Open MPI on host memory",
                   "<p>spawn: 4 ranks, 0 GPUs: Open MPI on host memory</p>\n"))
    fn = "every_rank_reports_what_it_has_after_the_all_reduce"
    for when, vals in (("before", "[0., 1., 2., 3.]"), ("after", "[ 0.,  4.,  8., 12.]")):
        for r in range(4):
            tr.step(at + [frame(p, fn, 'note_verbatim("rank %d ' + when)],
                    text(f"rank {r} {when}:\ntensor({vals}, device='cpu')"), rank=r, world_size=4, spawn=k)
    for i in range(12):
        tr.step([top("A paragraph after the spawns")], md(f"A paragraph after the spawns, number {i}.",
                                                          f"<p>A paragraph after the spawns, number {i}.</p>\n"))
    return tr.t


# Traces a real run wrote, committed as they came (not made here): copied
# into OUT_DIR beside the others. twin_view_fixture: the fixture lecture
# tests/fixtures/twin_view_fixture.c run by make twin's recipe with its
# twins on two platforms, one refusing a spawn (the command is in its source).
RECORDED = ["twin_view_fixture"]


def copy_recorded(out):
    here = os.path.join(HERE, "fixtures")
    if os.path.abspath(out) == os.path.abspath(here):
        return
    for key in RECORDED:
        for ext in (".json", ".js"):
            shutil.copyfile(os.path.join(here, key + ext), os.path.join(out, key + ext))


def write(out, key, t):
    os.makedirs(out, exist_ok=True)
    body = json.dumps(t, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(out, key + ".json"), "w", encoding="utf-8") as f:
        f.write(body + "\n")
    with open(os.path.join(out, key + ".js"), "w", encoding="utf-8") as f:
        f.write('(window.lecternTraces = window.lecternTraces || {})["' + key + '"] = ' + body + ";\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "fixtures")
    write(out, "demo", demo())
    m = multi()
    write(out, "multi", m)
    write(out, "multi.failed", multi_failed(m))
    write(out, "hostile", hostile())
    write(out, "media", media())
    write(out, "tables", tables())
    write(out, "checks", checks())
    write(out, "expected", expected())
    write(out, "homework", homework())
    # Broken traces: each must give a clear message in the page.
    with open(os.path.join(out, "broken_syntax.js"), "w") as f:
        f.write('(window.lecternTraces = window.lecternTraces || {})["broken_syntax"] = {"version": 1, "steps": [,;\n')
    bad = multi()
    bad["steps"][3]["stack"][1]["line"] = "forty"
    write(out, "broken_schema", bad)
    newer = demo()   # sound in every way but its version
    newer["version"] = 2
    write(out, "broken_version", newer)
    with open(os.path.join(out, "broken_empty.js"), "w") as f:
        f.write("/* a trace file that defines nothing */\nvar nothing = 1;\n")
    copy_recorded(out)


if __name__ == "__main__":
    main()
