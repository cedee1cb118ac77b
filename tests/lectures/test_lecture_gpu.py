"""lecture_gpu: run it with --quick and check its numbers from the trace.

Every check of the lecture must pass; the arithmetic intensities must be the
formulas' (worked out here from n); the roofline's roofs must come from
measurements of their own (STREAM's copy and triad; the BLAS at sizes no point
has), the roof of each point must be the lower of the measured peak and the
measured bandwidth times its intensity, and each share of the roof must be the
point over that roof, with the points above it counted by the lecture (or
not); the DDP and FSDP memory and traffic must be what the model's sizes give;
where the machine has no GPU, the lecture must say the GPU part did not run and
show the kernels' source exactly as lectures/lecture_gpu_kernels.cu holds it.
The trace must validate against the schema with every stack line accurate.

    /usr/bin/python3 tests/lectures/test_lecture_gpu.py
"""
import json
import math
import os
import re
import shutil
import sys
import tempfile
import unittest
import xml.dom.minidom

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT

NAME = "lecture_gpu"
KERNELS = os.path.join(ROOT, "lectures", "lecture_gpu_kernels.cu")

SECTIONS = [
    "# GPUs: one, then many",
    "## Why GPUs",
    "## Latency and throughput",
    "## The memory hierarchy",
    "## A first kernel: vector add",
    "## Matrix multiply: tiles and shared memory",
    "## Arithmetic intensity",
    "## The roofline",
    "## Many GPUs: DDP and FSDP",
    "## M machines x N GPUs",
    "## Summary",
]

U = 2.0 ** -24   # float32's unit roundoff


def binary():
    return tracecheck.lecture(NAME)


half_unit = tracecheck.half_unit


class LectureGpu(tracecheck.LectureRun, tracecheck.ValidTrace, unittest.TestCase):
    NAME = NAME
    SECTIONS = SECTIONS

    def renderings(self, kind):
        return [(s, r) for s in self.trace["steps"] for r in s["renderings"] if r["type"] == kind]

    def markdown(self, pattern):
        """Every match of `pattern` in a note, in order."""
        out = []
        for _, r in self.renderings("markdown"):
            m = re.search(pattern, r["data"], re.S)
            if m:
                out.append(m)
        return out

    def one(self, pattern):
        found = self.markdown(pattern)
        self.assertEqual(len(found), 1, "%r: %d notes match" % (pattern, len(found)))
        return found[0]

    def tables(self, caption):
        """The table() renderings whose caption matches."""
        return [r for _, r in self.renderings("table") if re.search(caption, r.get("caption", ""))]

    def table(self, caption):
        found = self.tables(caption)
        self.assertEqual(len(found), 1, "%r: %d tables match" % (caption, len(found)))
        return found[0]

    def printed(self, *exprs):
        """{expr: what it printed} of the one note whose arguments include
        exprs: a figure by name, as the note rounded it (for comparing with
        a table's display, rounded too)."""
        found = self.noted(*exprs)
        self.assertEqual(len(found), 1, exprs)
        return {a["expr"]: a.get("printed") for a in found[0][1]["args"]}

    def noted_at(self, function, text, *exprs):
        """{expr: value} of the notes made at the source line in `function`
        that holds `text`: which of a lecture's sentences was said, read
        from where it was said."""
        line = tracecheck.line_of(os.path.join(ROOT, "lectures", NAME + ".c"), text, within=function)
        return [a for s, _, a in self.noted(*exprs) if s["stack"][-1]["line"] == line]

    def checks(self):
        return [r for _, r in self.renderings("check")]

    def gpus(self):
        return self.trace["meta"]["gpus"]

    def test_every_check_passed_and_the_expected_ones_ran(self):
        checks = self.checks()
        self.assertEqual([c["data"] for c in checks if not c["passed"]], [])
        # a rank's passes at one place are one folded step (docs/trace-format.md): unfold them
        passes = tracecheck.check_passes(self.trace)
        self.assertEqual(self.trace["meta"]["checks"], {"passed": len(passes), "failed": 0})
        whats = [what for _, what, _ in passes]
        expected = ["the CPU loop vs the runtime's add_()", "the naive loop vs matmul() (OpenBLAS)",
                    "the tiled loop vs matmul() (OpenBLAS)"]
        if self.gpus() > 0:
            expected += ["vector_add kernel vs add_() on the GPU", "vector_add kernel on the GPU vs the CPU loop",
                         "tiled_matmul kernel vs matmul() (cuBLAS)"]
        for what in expected:
            self.assertIn(what, whats)
        for rank in range(4):
            for claim in ("FSDP's gradient shards equal DDP's", "FSDP's weight shards equal DDP's"):
                self.assertEqual(len([w for w in whats if w.startswith("rank %d: %s" % (rank, claim))]), 1,
                                 (rank, claim))

    def test_matmul_sizes_that_are_not_multiples_of_the_tile(self):
        """The tiles section at sizes the tiles do not divide (the CPU's 32 and
        the kernel's 16): the edge tiles are partial, and every product is
        still checked against matmul() within its rounding bound. The
        kernel's check runs where there is a GPU."""
        for n in (1, 100, 257):
            with self.subTest(n=n), tempfile.TemporaryDirectory() as out:
                p, trace = tracecheck.run_quick(binary(), out, args=["--matmul-n=%d" % n])
                self.assertEqual(p.returncode, 0, tracecheck.why(p))
                checks = [r for s in trace["steps"] for r in s["renderings"] if r["type"] == "check"]
                whats = {c["what"]: c["passed"] for c in checks}
                self.assertIs(whats.get("the tiled loop vs matmul() (OpenBLAS)"), True, whats)
                if self.gpus() > 0:
                    self.assertIs(whats.get("tiled_matmul kernel vs matmul() (cuBLAS)"), True, whats)
                text = " ".join(r.get("data") or "" for s in trace["steps"] for r in s["renderings"])
                self.assertIn("two %d x %d matrices" % (n, n), text)

    def test_matmul_size_out_of_range_is_an_error(self):
        for bad in ("0", "2049", "12x"):
            with self.subTest(n=bad), tempfile.TemporaryDirectory() as out:
                p, _ = tracecheck.run_quick(binary(), out, args=["--matmul-n=" + bad])
                self.assertNotEqual(p.returncode, 0)
                self.assertIn("--matmul-n %s: give a whole number from 1 to 2048" % bad, p.stderr)

    def test_vector_add_is_exact(self):
        adds = [c for c in self.checks() if "rtol" in c and ("vector_add" in c["what"] or "add_()" in c["what"])]
        self.assertEqual(len(adds), 3 if self.gpus() > 0 else 1)
        for c in adds:
                # one float addition of the same two floats: IEEE 754 rounds it
                # one way everywhere, so no tolerance at all
                self.assertEqual((c["rtol"], c["atol"], c["max_abs"]), (0, 0, 0), c["what"])

    def test_matmul_tolerance_follows_from_its_formula(self):
        f = self.figures("n", "CPU_TILE", "tol", "s_max")
        n, tol, s = f["n"], f["tol"], f["s_max"]
        gamma = n * U / (1 - n * U)
        # the formula on the lecture's own S: the same double (same_double)
        self.assertTrue(tracecheck.same_double(tol, 2 * gamma * s), f)
        # S is a sum of n products |a||b| of standard normals, each 2/pi on
        # average; the largest of n^2 such sums lies within a factor 2 of the
        # mean n 2/pi for any seed at n >= 64 (a check whose tolerance were
        # much larger would let real mistakes through)
        self.assertTrue(n * 2 / 3.14159 / 2 < s < n * 2 / 3.14159 * 2, s)
        mm = [c for c in self.checks() if "matmul()" in c["what"]]
        self.assertGreaterEqual(len(mm), 2)
        for c in mm:
            self.assertEqual(c["rtol"], 0)
            self.assertTrue(tracecheck.same_double(c["atol"], tol), (c["atol"], tol))   # the check's own tolerance
            self.assertLessEqual(c["max_abs"], c["atol"])
            # a skipped tile or a wrong index is off by a whole product
            # (about 1 here); the tolerance must be far below that
            self.assertLess(c["atol"], 0.05)

    def test_intensity_table_is_the_formulas(self):
        rows = self.table(r"^Arithmetic intensity of a vector add")["rows"]
        self.assertGreaterEqual(len(rows), 3)
        for n, af, ab, ai, mf, mb, mi in rows:
            self.assertEqual((af, ab), (n, 12 * n))
            self.assertTrue(tracecheck.same_double(ai, 1 / 12), ai)
            self.assertEqual((mf, mb), (2 * n ** 3, 12 * n ** 2))
            self.assertTrue(tracecheck.same_double(mi, n / 6), mi)

    def roofline(self):
        """(floats per array, copy, triad), (peak, its n), rows: the STREAM
        table's figures (GB/s as STREAM counts), the compute roof as its note
        prints it, and the roofline table's rows as displayed."""
        (_, stream, caption), = self.noted("mib", "STREAM_RUNS", kind="table")
        copy, triad = stream["rows"]
        self.assertEqual((copy[0], triad[0]), ("copy: c = a", "triad: a = b + s c"))
        peak = self.printed("peak", "roof_n")
        table = self.table(r"^Every kernel against the roofs")
        rows = [[str(c) for c in row] for row in table["display"]]
        return ((round(caption["mib"] * (1 << 20)) // 4, stream["display"][0][1], stream["display"][1][1]),
                (peak["peak"], peak["roof_n"]), rows)

    @staticmethod
    def intensity(kernel, n):
        """FLOP per byte by the formulas of the intensity section: an add moves
        12 bytes per FLOP, an n x n product 12 n^2 bytes for 2 n^3 FLOPs."""
        return 1 / 12 if "add" in kernel else n / 6

    def test_roofs_are_measured_apart_from_the_points(self):
        (n_s, copy_s, triad_s), (peak_s, peak_n_s), rows = self.roofline()
        matmuls = [r for r in rows if r[0] == "matmul()"]
        self.assertGreaterEqual(len(matmuls), 3)
        # the compute roof came from a product of its own size, not from the
        # best of the points placed under it
        self.assertNotIn(int(peak_n_s), [int(r[1]) for r in matmuls])
        self.assertGreater(int(peak_n_s), 256)
        # the vector adds are placed over arrays of the STREAM size, but
        # their rates are their own: none is the roof's own figure times
        # its intensity by construction (the table's roof column is)
        adds = [r for r in rows if "add" in r[0]]
        self.assertEqual(len(adds), 3 if self.gpus() == 0 else 2)
        for r in adds:
            self.assertEqual(int(r[1]), int(n_s))
        # plausible bounds, with room for any x86-64 machine: memory
        # bandwidth above 1 GB/s (one channel of DDR3 gives 12.8 GB/s) and
        # below 2000 GB/s (a two-socket server of 12 DDR5 channels each is
        # under 1000; a GPU's HBM is the exception, hence the GPU's 20000)
        bw = max(float(copy_s), float(triad_s))
        self.assertGreater(bw, 1.0)
        self.assertLess(bw, 20000.0 if self.gpus() > 0 else 2000.0)
        # peak above 1 GFLOP/s (one SSE core at 1 GHz does 8) and below
        # 100 TFLOP/s for a CPU (the largest do about 10) or 2 PFLOP/s for a GPU
        self.assertGreater(float(peak_s), 1.0)
        self.assertLess(float(peak_s), 2e6 if self.gpus() > 0 else 1e5)

    def test_every_point_is_a_share_of_its_roof(self):
        (n_s, copy_s, triad_s), (peak_s, _), rows = self.roofline()
        bw = max(float(copy_s), float(triad_s))
        bw_err = half_unit(copy_s) if float(copy_s) >= float(triad_s) else half_unit(triad_s)
        peak = float(peak_s)
        above = maybe = 0
        for kernel, n_s, i_s, g_s, roof_s, share_s in rows:
            n = int(n_s)
            intensity = self.intensity(kernel, n)
            self.assertAlmostEqual(float(i_s), intensity, delta=half_unit(i_s))
            # the roof from the printed peak and bandwidth: their rounding
            # (and the roof's own) is all the room there is
            roof = min(peak, bw * intensity)
            room = max(half_unit(peak_s), bw_err * intensity) + half_unit(roof_s)
            self.assertAlmostEqual(float(roof_s), roof, delta=room, msg=(kernel, n))
            # the share is the point over its roof, from the two printed
            # numbers: their rounding moves it by at most this much
            g, r = float(g_s), float(roof_s)
            share = 100 * g / r
            slack = 100 * (half_unit(g_s) / r + g * half_unit(roof_s) / r ** 2) + 0.5
            self.assertAlmostEqual(float(share_s.rstrip("%")), share, delta=slack, msg=(kernel, n))
            # above its roof for sure, or perhaps: the lecture compares the
            # unrounded numbers, so a point printed equal to its roof (or
            # within their rounding) may count either way (an ASan run
            # said "1 of the 8" where the printed numbers were level)
            room = half_unit(g_s) + half_unit(roof_s)
            above += g - r > room
            maybe += g - r >= -room
        named = self.noted("over", "count", "100 * most")
        if named:
            self.assertEqual(len(named), 1, named)
            n, total = named[0][2]["over"], named[0][2]["count"]
            self.assertEqual(total, len(rows))
            self.assertTrue(max(above, 1) <= n <= maybe, (n, above, maybe))
        else:
            self.assertEqual(above, 0)
        # the sentence on the adds quotes the table's shares
        # (the shares as the table and the notes print them, both %.0f of
        # the same double)
        m = self.printed("100 * v_share", "100 * a_share")
        adds = [r for r in rows if "add" in r[0]]
        self.assertEqual([m["100 * v_share"], m["100 * a_share"]], [r[5].rstrip("%") for r in adds[:2]])
        # ... and the one on matmul() its lowest and highest
        f = self.figures("100 * lo", "n_lo", "100 * hi", "n_hi")
        m = self.printed("100 * lo", "n_lo", "100 * hi", "n_hi")
        shares = {int(r[1]): r[5].rstrip("%") for r in rows if r[0] == "matmul()"}
        self.assertEqual(m["100 * lo"], shares[f["n_lo"]])
        self.assertEqual(m["100 * hi"], shares[f["n_hi"]])
        self.assertEqual(int(m["100 * lo"]), min(int(v) for v in shares.values()))
        self.assertEqual(int(m["100 * hi"]), max(int(v) for v in shares.values()))

    def test_predictions_hold_what_follows(self):
        """Two questions (predict()), each asked before the table that holds
        its value: how much longer add_() takes on many elements than on one
        (the latency table's own ratio), and the vector add's roof (the
        roofline table's, and bandwidth x 1/12 recomputed here from the
        roofs the lecture stated, when memory is the lower roof)."""
        asked = self.renderings("predict")
        self.assertEqual(len(asked), 2, [r["question"] for _, r in asked])
        steps = self.trace["steps"]
        (s_add, add), (s_roof, roof) = asked
        placed = lambda caption: [(s, r) for s, r in self.renderings("table") if re.search(caption, r["caption"])]
        (s_table, table), = placed(r"^add_\(\) on one element and on many")
        one, many = self.row_dicts(table)
        self.assertEqual(one["elements"], 1)
        self.assertGreater(many["elements"], 1)
        # a table's number is cJSON's 15 digits when they read back within its 2^-52 (same_double)
        self.assertEqual(add["unit"], "")
        self.assertTrue(tracecheck.same_double(add["value"], many["time / time of 1 element"]), add)
        # the ratio of the two times in the table (each printed from the same two medians)
        self.assertTrue(math.isclose(add["value"], many["time"] / one["time"], rel_tol=1e-12), add)
        self.assertIn("%d elements" % many["elements"], add["question"])
        self.assertLess(steps.index(s_add), steps.index(s_table))
        (s_table, table), = placed(r"^Every kernel against the roofs")
        vadd = self.row_dicts(table)[0]
        self.assertIn("vector add", vadd["kernel"])
        self.assertEqual(roof["unit"], "GFLOP/s")
        self.assertTrue(tracecheck.same_double(roof["value"], vadd["roof"]), (roof["value"], vadd["roof"]))
        # the question gives the two roofs as printed; memory x 1/12 from them, to their rounding (0.05 each)
        bw, peak = [float(x) for x in re.findall(r"moves ([0-9.]+) GB/s and \w+'s product reaches ([0-9.]+) GFLOP/s",
                                                  roof["question"])[0]]
        expected = min(peak, bw / 12)
        self.assertLessEqual(abs(roof["value"] - expected), 0.05 / 12 + 1e-12, (roof["value"], bw, peak))
        self.assertLess(steps.index(s_roof), steps.index(s_table))

    def test_the_arrays_against_the_cache(self):
        """STREAM's arrays are checked against the last-level cache this
        machine's system reports (read here from sysfs, apart from the
        lecture), and the sentence says whether the rule of 4 holds."""
        if self.gpus() > 0:
            return
        level, size = 0, 0
        base = "/sys/devices/system/cpu/cpu0/cache"
        for d in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            if not d.startswith("index"):
                continue
            with open(os.path.join(base, d, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(base, d, "level")) as f:
                lv = int(f.read())
            with open(os.path.join(base, d, "size")) as f:
                text = f.read().strip()
            if kind != "Instruction" and lv >= level:
                level, size = lv, int(text.rstrip("KM")) * (1024 if text.endswith("K") else 1 << 20)
        (array, cache, cache_level, ratio, _), = self.table(r"^The arrays against the last-level cache$")["rows"]
        n, _, _ = self.roofline()[0]
        self.assertEqual(array, n * 4 / (1 << 20))
        self.assertEqual((cache_level, cache), (level, size / (1 << 20)))
        self.assertAlmostEqual(ratio, n * 4 / size, delta=1e-9)
        # --quick keeps 32 MiB arrays; a full run takes 4 times the cache, 64 to 256 MiB
        self.assertEqual(n, 8 << 20)
        held = self.noted("ratio", "m->cache_level", "mib")
        self.assertEqual(len(held), 1)
        f = held[0][2]
        # the table's ratio, level and size are the note's doubles
        self.assertTrue(tracecheck.same_double(f["ratio"], ratio), (f, ratio))
        self.assertEqual((f["m->cache_level"], f["mib"]), (cache_level, cache))
        # which sentence: STREAM's rule kept, or not (and why not)
        kept = self.noted_at("cache_sentence", "note(\"Each array is %.2f times", "ratio")
        self.assertEqual(len(kept), 1 if ratio >= 4 else 0)
        if ratio < 4:
            self.assertIn("--quick keeps the arrays small", f.values())

    def test_an_in_place_update_above_the_roof_is_explained(self):
        """An in-place point above STREAM's roof gets the note on what an
        in-place update moves, judged from the STREAM table's bytes moved
        (with write-allocate), and the closing sentence no longer says a
        point above its roof measures how much the roof was slowed."""
        if self.gpus() > 0:
            return
        stream = self.table(r"^The memory roof: STREAM")["rows"]
        for name, named, moved in stream:
            self.assertAlmostEqual(moved, named * (1.5 if name.startswith("copy") else 4 / 3), delta=1e-9 * moved)
        moved = max(r[2] for r in stream)
        rows = self.table(r"^Every kernel against the roofs")["rows"]
        in_place = {r[0]: r for r in rows if r[0].startswith("add_()") or r[0].startswith("in-place")}
        self.assertEqual(len(in_place), 2)
        above = [r for r in in_place.values() if r[5] > 100]
        within = self.noted("moved", "add_gbs", "loop_gbs")   # within a tenth of what STREAM moved
        beyond = self.noted("top", "moved")                   # above even that
        self.assertEqual(len(within) + len(beyond), 1 if above else 0)
        if above:
            top = max(r[3] / r[2] for r in in_place.values())   # GB/s: GFLOP/s over FLOP/byte
            self.assertEqual(len(within), 1 if top <= 1.1 * moved else 0)
            # the note's "moved" is the table's largest
            (_, _, f), = within or beyond
            self.assertTrue(math.isclose(f["moved"], moved, rel_tol=1e-12), (f, moved))
        self.assertNotIn("by how much the roof was", " ".join(r["data"] for _, r in self.renderings("markdown")))

    def test_roofline_plot(self):
        spec = self.one_plot()
        (_, copy_s, triad_s), (peak_s, _), rows = self.roofline()
        bw, peak = max(float(copy_s), float(triad_s)), float(peak_s)
        values = spec["data"]["values"]
        roof = [v for v in values if v["series"] == "roof (measured)"]
        self.assertGreaterEqual(len(roof), 3)
        for v in roof:
            # the plot holds 6 digits of unrounded values; the peak and
            # bandwidth here are the note's 1 decimal
            want = min(peak, bw * v["intensity"])
            self.assertAlmostEqual(v["gflops"], want, delta=0.05 * max(1, v["intensity"]) + 1e-5 * want)
        points = [v for v in values if v["series"] != "roof (measured)"]
        self.assertEqual(sorted((v["series"], v["n"]) for v in points), sorted((r[0], int(r[1])) for r in rows))
        for v in points:
            row = [r for r in rows if (r[0], int(r[1])) == (v["series"], v["n"])][0]
            self.assertAlmostEqual(v["gflops"], float(row[3]), delta=half_unit(row[3]) + 1e-5 * v["gflops"])

    def test_gpu_part_or_the_reason_it_did_not_run(self):
        with open(KERNELS) as f:
            source = f.read()
        blocks = [m.group(1) for m in self.markdown(r"^```cuda\n(.*)```$")]
        self.assertEqual(len(blocks), 2)
        for block, marker in zip(blocks, ("vector_add", "tiled_matmul")):
            # exactly the file's text between its markers
            self.assertIn("/* lecture: %s */\n%s/* lecture: end */" % (marker, block), source)
            self.assertIn("__global__ void %s(" % marker, block)
        self.assertIn("__shared__", blocks[1])
        # the two "The GPU part did not run" notes, by their reason (in_place_sentence's
        # "why", a clause beside "top", is another)
        notes = [n for n in self.noted("why") if "top" not in n[2]]
        if self.gpus() == 0:
            self.assertEqual(len(notes), 2)
            for _, _, f in notes:
                self.assertRegex(f["why"], r"finds no GPU on this machine \(gpu_count\(\) is 0\)|this build has no CUDA")
        else:
            self.assertEqual(notes, [])
            self.one(r"^\| on the GPU \| time \(ms\) \| GFLOP/s \|")

    def test_kernel_source_read_from_lecture_root(self):
        # lecture_root() honours LECTERN_ROOT_DIR: a copy of the repository's
        # lectures/ and assets/ whose kernel file differs must be what is shown
        # (and not a path fixed at build time, nor one relative to the cwd)
        with tempfile.TemporaryDirectory() as root:
            for d in ("lectures", "assets"):
                shutil.copytree(os.path.join(ROOT, d), os.path.join(root, d))
            with open(KERNELS) as f:
                source = f.read()
            planted = "    /* planted by the test */\n"
            source = source.replace("/* lecture: vector_add */\n", "/* lecture: vector_add */\n" + planted)
            with open(os.path.join(root, "lectures", "lecture_gpu_kernels.cu"), "w") as f:
                f.write(source)
            out = os.path.join(root, "out")
            env = dict(os.environ, LECTERN_ROOT_DIR=root)
            p, trace = tracecheck.run_quick(binary(), out, env=env)
            self.assertEqual(p.returncode, 0, tracecheck.why(p))
            blocks = [r["data"] for s in trace["steps"] for r in s["renderings"]
                      if r["type"] == "markdown" and r["data"].startswith("```cuda")]
            self.assertTrue(blocks[0].startswith("```cuda\n" + planted), blocks[0][:200])

    def test_ddp_and_fsdp_memory_and_traffic(self):
        f = self.figures("a.cfg.layers", "a.cfg.width", "a.cfg.layers * a.cfg.width * a.cfg.width", "WORLD")
        layers, w, p, n = f["a.cfg.layers"], f["a.cfg.width"], f["a.cfg.layers * a.cfg.width * a.cfg.width"], f["WORLD"]
        self.assertEqual(p, layers * w * w)
        mem = self.table(r"^Memory per rank \(MB\)$")["rows"]
        got = {r[0]: (r[1], r[2]) for r in mem}
        b = 4   # float32
        want = {
            "parameters": (b * p, b * p / n),
            "gradients": (b * p, b * p / n),
            "optimizer state (AdamW m, v)": (2 * b * p, 2 * b * p / n),
            "total kept between steps": (4 * b * p, 4 * b * p / n),
            # FSDP's backward holds one full layer and its full gradient
            "full layers alive at once during a step": (0, 2 * b * w * w),
        }
        self.assertEqual(set(got), set(want))
        for k, (ddp, fsdp) in want.items():
            self.assertAlmostEqual(got[k][0], ddp / 1e6, delta=1e-12, msg=k)
            self.assertAlmostEqual(got[k][1], fsdp / 1e6, delta=1e-12, msg=k)
        steps = self.table(r"^One step on (\d+) ranks, per rank")
        (dn, dcalls, dbytes, *_), (fn, fcalls, fbytes, *_) = steps["rows"]
        share = (n - 1) / n
        self.assertEqual((dn, dcalls, dbytes), ("DDP", layers, round(2 * share * b * p)))   # an all-reduce per layer
        # gather, gather again, reduce-scatter: per layer
        self.assertEqual((fn, fcalls, fbytes), ("FSDP", 3 * layers, round(3 * share * b * p)))

    def test_fsdp_calls_against_bytes(self):
        """FSDP's extra cost of communication, split into the calls (the same
        calls with one float each) and the bytes, from the table's times; the
        closing clause says which was larger."""
        (_, _, _, d_step, d_alone, d_one, d_rate), (_, _, _, f_step, f_alone, f_one, f_rate) = \
            self.table(r"^One step on (\d+) ranks, per rank")["rows"]
        for v in (d_step, d_alone, d_one, f_step, f_alone, f_one):
            self.assertGreater(v, 0)
        (_, note, f), = self.noted("fsdp->step / ddp->step", "by_calls", "by_bytes")
        # the table's ms are the lecture's seconds times 1e3: the ratio is
        # the same to a few roundings (1e-12 relative); the differences are
        # of ms-sized numbers, so the same to 1e-12 of the largest of them
        self.assertTrue(math.isclose(f["fsdp->step / ddp->step"], f_step / d_step, rel_tol=1e-12), f)
        calls, bytes_ = f_one - d_one, (f_alone - d_alone) - (f_one - d_one)
        room = 1e-12 * max(f_alone, d_alone, f_one, d_one)
        self.assertLessEqual(abs(f["by_calls"] - calls), room, f)
        self.assertLessEqual(abs(f["by_bytes"] - bytes_), room, f)
        (which,) = [v for e, v in f.items() if e.startswith("by_calls > by_bytes ?")]
        self.assertTrue(which.startswith("Here the calls cost more than the bytes" if f["by_calls"] > f["by_bytes"]
                                         else "Here the bytes cost more than the calls"), which)
        self.assertNotIn("mostly the cost of each collective call", note["data"])

    def test_hostfile_and_rank_placement(self):
        texts = [r["data"] for _, r in self.renderings("text") if "LECTERN_HOSTFILE" in r["data"]]
        self.assertEqual(len(texts), 1)
        hosts = re.findall(r"^(node\d+) slots=(\d+)$", texts[0], re.M)
        self.assertEqual(len(hosts), 2)
        per = int(hosts[0][1])
        table = self.table(r"^Where each rank runs")
        self.assertEqual([c["name"] for c in table["columns"]], ["rank", "machine", "GPU on that machine"])
        self.assertEqual(len(table["rows"]), len(hosts) * per)
        for (rank, _, _), (_, machine, gpu) in zip(table["rows"], table["display"]):
            self.assertEqual((machine, gpu), (hosts[rank // per][0], "cuda:%d" % (rank % per)))

    def test_memory_diagram(self):
        srcs = [r.get("src") for _, r in self.renderings("image")]
        self.assertIn("assets/lecture_gpu_memory.svg", srcs)
        doc = xml.dom.minidom.parse(os.path.join(ROOT, "assets", "lecture_gpu_memory.svg"))
        text = " ".join(t.firstChild.data for t in doc.getElementsByTagName("text") if t.firstChild)
        for level in ("registers", "shared mem", "L2 cache", "HBM", "host (CPU) memory", "PCIe"):
            self.assertIn(level, text)


if __name__ == "__main__":
    unittest.main()
