"""lecture_precision (bf16, fp16 and fp8; master weights, loss scaling, a bf16
all-reduce, FP8 scales): run it with --quick and check its trace, then plant
one bug per lesson in copies of it and see the check that guards it fail.

Every figure is read back by name (a table's cells, a note's arguments, a
question's value) and recomputed here from something the lecture does not
use: the formats' facts from an enumeration of every bit pattern (fp16 and
fp32 also through struct's own 'e' and 'f'), bytes per parameter from the
element sizes, the vanished updates from the trace's own weights and
updates rounded to bf16 by a bit-level round-to-nearest-even written here,
the loss scale's history from GradScaler's rule replayed over the steps
the trace says it skipped, the all-reduce's bytes from the nominal formula
and the halving, the amax history from the table's own amax column.

    /usr/bin/python3 tests/lectures/test_lecture_precision.py     (LECTERN_BUILD picks the build)
"""
import math
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import planted  # noqa: E402
import tracecheck  # noqa: E402

WORLD = 4

SECTIONS = [
    "# Mixed precision",
    "## Five formats",
    "## Bytes per parameter",
    "## bf16 training and fp32 master weights",
    "### Updates that vanish",
    "## fp16 and loss scaling",
    "## A bf16 gradient all-reduce",
    "### Why the order of the sum matters more in bf16",
    "## FP8: per-tensor scales",
    "### Delayed scaling: an amax history",
    "## Summary",
]

# (exponent bits, mantissa bits, bias, has infinity): the formats' definitions
# (IEEE 754 binary32 and binary16, bfloat16, OCP FP8 E4M3 "fn" and E5M2).
FORMATS = {
    "float32": (8, 23, 127, True),
    "bfloat16": (8, 7, 127, True),
    "float16": (5, 10, 15, True),
    "float8_e4m3fn": (4, 3, 7, False),
    "float8_e5m2": (5, 2, 15, True),
}


def finite_values(ebits, mbits, bias, has_inf):
    """Every finite non-negative value of a format, decoded from its bit
    patterns in float64 (exact: at most 24 significant bits)."""
    top = (1 << ebits) - 1
    for field in range(1 << ebits):
        for mant in range(1 << mbits):
            if field == top and (has_inf or mant == (1 << mbits) - 1):
                continue  # infinity/NaN (IEEE), E4M3's one NaN
            if field == 0:
                yield math.ldexp(mant, 1 - bias - mbits)
            else:
                yield math.ldexp(mant + (1 << mbits), field - bias - mbits)


def facts(name):
    """(spacing above 1, largest, smallest normal, smallest subnormal)."""
    ebits, mbits, bias, has_inf = FORMATS[name]
    if name == "float32":
        # 2^32 patterns are too many to list; the same rules, and struct agrees
        largest = struct.unpack("<f", struct.pack("<I", 0x7f7fffff))[0]
        return (math.ldexp(1, -23), largest, math.ldexp(1, -126), math.ldexp(1, -149))
    values = sorted(finite_values(ebits, mbits, bias, has_inf))
    above_one = min(v for v in values if v > 1)
    normal = min(v for v in values if v >= math.ldexp(1, 1 - bias))
    return (above_one - 1, values[-1], normal, values[1])


def round_bf16(x):
    """x (a float32 value) rounded to bfloat16, to nearest, ties to even: on
    the bits, the way the format is defined (the top 16 bits of fp32)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits = (bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


class LecturePrecision(tracecheck.LectureRun, tracecheck.WholeTrace, unittest.TestCase):
    NAME = "lecture_precision"
    SECTIONS = SECTIONS

    def predicted(self, words):
        found = [r for _, r in self.renderings("predict") if words in r["question"]]
        self.assertEqual(len(found), 1, words)
        return found[0]["value"]

    # ---- 1. formats ----

    def test_formats_measured_match_the_definitions(self):
        rows = self.rows_by_first(self.table("^Each format, measured"))
        self.assertEqual(sorted(rows), sorted(FORMATS))
        for name, row in rows.items():
            ebits, mbits, _, _ = FORMATS[name]
            self.assertEqual(row[0], (1 + ebits + mbits) // 8, name)
            for got, want in zip(row[1:], facts(name)):
                self.assertTrue(tracecheck.same_double(got, want), (name, got, want))
        # struct's own IEEE half: its largest finite and smallest subnormal
        self.assertEqual(rows["float16"][2], struct.unpack("<e", b"\xff\x7b")[0])
        self.assertEqual(rows["float16"][4], struct.unpack("<e", b"\x01\x00")[0])
        self.assertEqual(rows["float8_e4m3fn"][2], 448)
        self.assertEqual(rows["float8_e5m2"][2], 57344)

    # ---- 2. bytes per parameter ----

    def test_bytes_per_parameter(self):
        table = self.table("^Model state per parameter, measured")
        self.assertEqual(tracecheck.named(table)["c.layers"], 4)
        rows = self.rows_by_first(table)
        # weights + gradients + master + two moments, in bytes per element
        mixed = 2 + 2 + 4 + 4 + 4
        expect = {
            "fp32": 4 + 4 + 4 + 4,
            "bf16 + fp32 master": mixed,
            "bf16 + fp32 master, fp32 gradients": 2 + 4 + 4 + 4 + 4,
            # ZeRO-1: whole bf16 weights and gradients, a quarter of the fp32 state
            "bf16 + fp32 master, ZeRO-1 on 4 ranks (rank 0)": 2 + 2 + (4 + 4 + 4) / WORLD,
            "bf16 + fp32 master, ZeRO-3 on 4 ranks (rank 0)": mixed / WORLD,
        }
        self.assertEqual(sorted(rows), sorted(expect))
        for name, want in expect.items():
            measured, formula, saved = rows[name]
            self.assertEqual(measured, want, name)
            self.assertEqual(formula, want, name)
            self.assertEqual(saved, mixed - want, name)
        self.assertEqual(self.predicted("ZeRO-3"), mixed - mixed / WORLD)

    # ---- 3. bf16 training ----

    def test_loss_curves_and_master_weights(self):
        [chart] = [r for _, r in self.renderings("plot") if r["spec"].get("title", "").startswith("The loss of")]
        lines = {}
        for p in chart["spec"]["data"]["values"]:
            lines.setdefault(p["series"], []).append(p["y"])
        runs = ["fp32", "bf16, fp32 master weights", "bf16, no master weights"]
        self.assertEqual(sorted(lines), sorted(runs))
        rows = self.rows_by_first(self.table("^fp32 and bf16 after 60 steps$"))
        for name in runs:
            first, last, drop, off = rows[name]
            self.assertEqual(len(lines[name]), 60)
            self.assertEqual((first, last), (lines[name][0], lines[name][-1]), name)
            self.assertAlmostEqual(drop, first - last, delta=1e-15)
        # the two bf16 runs start from the same bf16 weights: the same loss
        self.assertEqual(rows[runs[1]][0], rows[runs[2]][0])
        self.assertEqual(rows["fp32"][3], 0)
        self.assertGreaterEqual(rows[runs[1]][2], 0.9 * rows["fp32"][2])
        self.assertLess(rows[runs[2]][2], 0.9 * rows["fp32"][2])
        # without master weights the weights end further from fp32's
        self.assertGreater(rows[runs[2]][3], 2 * rows[runs[1]][3])

    def test_vanished_updates_recomputed_from_the_trace(self):
        sample = self.table("^The first 8 weights of layer 0")
        self.assertEqual(len(sample["rows"]), 8)
        kinds = set()
        for before, update, half_gap, after, said in sample["rows"]:
            intended = f32(before + update)   # the fp32 step's result (exact: within a factor 2)
            self.assertEqual(after, round_bf16(intended), (before, update))
            self.assertEqual(said, "vanished" if after == before else "kept")
            # half the gap from before to its bf16 neighbour on the update's side
            self.assertEqual(half_gap, self.half_gap(before, update))
            self.assertEqual(said == "vanished", abs(update) < half_gap)
            kinds.add(said)
        self.assertEqual(kinds, {"vanished", "kept"}, "the sample shows both")
        [[weights, moved, unchanged, vanished, below]] = self.table("^Every weight of the bf16-only")["rows"]
        self.assertEqual(weights, 4 * 64 * 64)
        self.assertEqual(vanished, below)
        self.assertLessEqual(vanished, unchanged)
        self.assertLessEqual(vanished, moved)
        self.assertGreater(vanished, moved / 2, "most updates vanish at lr 1e-4")

    @staticmethod
    def half_gap(w, d):
        """Half the distance from w (a bf16 value) to the next bf16 value on
        d's side, found by stepping the 16-bit pattern."""
        bits = struct.unpack("<I", struct.pack("<f", w))[0] >> 16
        away = (d > 0) == (w > 0)
        nb = bits + 1 if away else bits - 1
        other = struct.unpack("<f", struct.pack("<I", nb << 16))[0]
        return abs(other - w) / 2

    # ---- 4. fp16 and loss scaling ----

    def test_loss_scale_follows_gradscaler_rule(self):
        rows = self.row_dicts(self.table("^fp16 gradients, step by step"))
        self.assertEqual(len(rows), 60)
        scale, good = rows[0]["loss scale, log2"], 0
        self.assertEqual(scale, 24)
        interval = self.figures("SCALE_INTERVAL", "c.layers")["SCALE_INTERVAL"]
        skipped = 0
        for r in rows:
            self.assertEqual(r["loss scale, log2"], scale, r)
            top = r["largest gradient"] * 2.0 ** scale
            if r["update"] == "made":
                # fp16 rounds to infinity from 65520 (65504 + half its gap) on
                self.assertLess(top, 65520, r)
                good += 1
                if good == interval:
                    scale, good = scale + 1, 0
            else:
                self.assertEqual(r["update"], "skipped: overflow")
                self.assertGreaterEqual(top, 65504, r)
                scale, good, skipped = scale - 1, 0, skipped + 1
            self.assertLessEqual(r["0 in fp16, unscaled"], r["nonzero gradients"])
        self.assertGreater(skipped, 0)
        half = next(i for i, r in enumerate(rows) if 2 * r["0 in fp16, unscaled"] > r["nonzero gradients"])
        self.assertEqual(self.predicted("more than half of the nonzero gradients"), half)
        noted = self.figures("half", "lost_scaled", "lost_unscaled")
        self.assertEqual(noted["half"], half)
        self.assertEqual(noted["lost_unscaled"], sum(r["0 in fp16, unscaled"] for r in rows))
        self.assertEqual(noted["lost_scaled"], sum(r["0 in fp16, scaled"] for r in rows))
        self.assertLess(noted["lost_scaled"], 0.01 * noted["lost_unscaled"])
        after = self.rows_by_first(self.table("^fp32 and fp16 gradients after 60 steps$"))
        bar = 0.25 * after["fp32"][1]
        self.assertLess(after["fp16 gradients, dynamic loss scale"][2], bar)
        self.assertGreater(after["fp16 gradients, no loss scale"][2], bar)

    # ---- 5. bf16 all-reduce ----

    def test_all_reduce_bytes_and_error(self):
        n = self.figures("GRAD_ELEMENTS", "GRAD_SEED")["GRAD_ELEMENTS"]
        rows = self.table("^All-reduce of .* gradients on 4 ranks")["rows"]
        self.assertEqual([r[0] for r in rows], list(range(WORLD)))
        nominal32 = 2 * (WORLD - 1) * n * 4 // WORLD  # a bandwidth-optimal all-reduce's bytes per rank
        for rank, sent32, sent16, ratio, nom32, nom16 in rows:
            self.assertEqual(nom32, nominal32)
            self.assertEqual(nom16, nominal32 // 2)
            self.assertGreater(sent32, 0)
            self.assertEqual(sent16 * 2, sent32, rank)
            self.assertEqual(ratio, 0.5)
        u = 2.0 ** -8
        for rank, err, largest, of_bound in self.table("^The bf16 all-reduce against the fp32 one")["rows"]:
            self.assertLessEqual(of_bound, 1 + WORLD * u)
            self.assertGreater(err, 0, "bf16 must round somewhere")
            self.assertLess(err, WORLD * u * largest * 4)
        orders = self.rows_by_first(self.table("^The four gradients summed in two orders"))
        self.assertLess(orders["float32"][1] * 2 ** 10, orders["bfloat16"][1])
        # the textbook case, summed here with the bit-level bf16 rounding
        small = 2.0 ** -8
        large_first = round_bf16(round_bf16(round_bf16(1 + small) + small) + small)
        small_first = round_bf16(round_bf16(round_bf16(small + small) + small) + 1)
        case = self.rows_by_first(self.table("^1 and three times 2\\^-8"))
        self.assertEqual(case["large first"], [large_first, 1 + 3 * small])
        self.assertEqual(case["small first"], [small_first, 1 + 3 * small])
        self.assertNotEqual(large_first, small_first)

    # ---- 6. FP8 ----

    def test_fp8_products_and_delayed_scaling(self):
        rows = self.rows_by_first(self.table("^y = x w"))
        bf16 = rows["y, bf16 x bf16"]
        e4m3 = rows["y, E4M3 x E4M3, per-tensor scales"]
        grad = rows["dW, E4M3 x E5M2 (gradient), per-tensor scales"]
        for r in (bf16, e4m3, grad):
            self.assertLessEqual(r[1], 1)
            self.assertGreater(r[1], 0)
        # fewer mantissa bits, more error: 7 (bf16), 3 (E4M3), 2 and 3 (E5M2 x E4M3)
        self.assertLess(bf16[0] * 4, e4m3[0])
        self.assertLess(e4m3[0], 2 ** -3)
        # unscaled, a gradient of size 1e-6 is under half of E5M2's smallest
        # subnormal (2^-16 / 2 = 7.6e-6) everywhere: every element is lost
        lost = self.figures("vanish", "(long long)dy->numel")
        self.assertEqual(lost["vanish"], lost["(long long)dy->numel"])
        self.assertEqual(lost["vanish"], 64 * 64)
        delayed = self.row_dicts(self.table("^Delayed scaling"))
        depth = self.figures("AMAX_HISTORY", kind="table")["AMAX_HISTORY"]
        amax = [r["amax now"] for r in delayed]
        for s, r in enumerate(delayed):
            past = max(amax[max(0, s - depth):s]) if s else amax[0]
            self.assertEqual(r["amax of the history"], past)
            self.assertAlmostEqual(r["scale"], 448 / past, delta=448 / past * 1e-15)
            if amax[s] > past:
                self.assertGreater(r["elements saturated"], 0, s)
                self.assertGreater(r["largest |error| / largest |fp32|, delayed"],
                                   r["the same, scale from amax now"])
            else:
                self.assertEqual(r["elements saturated"], 0, s)
                self.assertEqual(r["largest |error| / largest |fp32|, delayed"], r["the same, scale from amax now"])
        self.assertIn("unverified", self.markdown_text())
        self.assertIn("emulation", self.markdown_text())


class PlantedBugs(planted.PlantedCase):
    """Each lesson's check can fail: a copy of the lecture with one bug
    (tests/lib/planted.py) must fail the check that guards it, and the run
    with it."""

    LECTURE = "lecture_precision"

    def test_unplanted_copy_passes(self):
        self.assert_unplanted_passes("static void summary(void) {")

    def test_formats_spacing_measured_wrong(self):
        self.assert_fails("spacing = ldexp(1.0, -(k + 1));", "spacing = ldexp(1.0, -(k + 2));",
                          "spacing above 1 is 2^-mantissa bits")

    def test_bf16_gradients_kept_in_fp32(self):
        self.assert_fails("s.gradients = r == RECIPE_BF16 ? to_dtype(g, DTYPE_BF16) : g;",
                          "s.gradients = r == RECIPE_BF16 ? to_dtype(g, DTYPE_F32) : g;",
                          "every recipe holds what its formula says")

    def test_master_weights_never_copied_to_bf16(self):
        self.assert_fails("tensor_copy(r->w[i], r->master[i]); /* rounds to bf16 */",
                          "(void)r->master[i]; /* rounds to bf16 */",
                          "bf16 with master weights trains as fp32 does")

    def test_half_gap_off_by_a_binade(self):
        self.assert_fails("double gap = ldexp(1.0, e - 8);", "double gap = ldexp(1.0, e - 9);",
                          "the updates that vanished are those under half")

    def test_fp16_gradients_not_unscaled(self):
        self.assert_fails("tensor *g = to_dtype_scaled(g16[i], DTYPE_F32, 1.0 / s->scale);",
                          "tensor *g = to_dtype_scaled(g16[i], DTYPE_F32, 1.0);",
                          "scaled fp16 ends near fp32")

    def test_bf16_all_reduce_averages(self):
        self.assert_fails("dist_all_reduce(g16, DIST_SUM);", "dist_all_reduce(g16, DIST_AVG);",
                          "every element of the bf16 all-reduce is within")

    def test_fp8_product_scaled_back_by_one_scale(self):
        self.assert_fails("scale_(y, (float)(1.0 / (sa * sb)));", "scale_(y, (float)(1.0 / sa));",
                          "every product within its rounding bound")

    def test_delayed_scaling_uses_the_current_amax(self):
        self.assert_fails("if (s == 0) past = now; /* the first step calibrates on itself */",
                          "past = now; /* the first step calibrates on itself */",
                          "delayed scaling saturated")


if __name__ == "__main__":
    unittest.main()
