"""Tensors of other dtypes (lectern.h, "Precision"), checked against models
written here, independent of the runtime's code:

- rounding: each format's every finite value enumerated from its bit
  patterns (sign, exponent, mantissa, by the format's definition), the
  nearest one picked for each input, ties to the even bit pattern; past the
  largest finite value: inf (bf16, fp16) or the largest value (fp8: OCP
  saturation); NaN stays NaN. fp16 also against Python's struct 'e', IEEE's
  own half conversion.
- bf16 matmul: a float64 triple loop over the exact bf16 inputs; the fp32
  sum of k exact products is within gamma_k * sum|a||b| of it (the standard
  bound for summation in any order, gamma_k = k u / (1 - k u), u = 2^-24).
- bf16 and fp16 all-reduce on 2-4 ranks: each rank's result is one of the
  values that adding the inputs pairwise in fp32 and rounding after every
  addition gives, over every order Open MPI's algorithm could use; bytes are
  2 per element (nominal all-reduce 2 (p - 1) / p * 2n; a send 2n).
- the other collective paths on bf16 and fp16 (2-4 ranks): AVG is one of
  the step-rounded sums divided by the world size in fp32 and rounded once
  more; MIN and MAX are the exact minimum and maximum (no rounding: every
  input is a value of the format); reduce-scatter gives each rank its piece
  of an allowed sum, all-gather every rank's inputs bit for bit, in rank
  order; an async all-reduce and one over a group (the ranks of one parity)
  an allowed sum of their ranks' inputs.
- refusals at their lines: gelu on bf16, fp8 all-reduce, bf16 sent to an
  fp32 receive (named at both ranks' lines).

    /usr/bin/python3 tests/tensor/test_dtype.py        (LECTERN_BUILD picks the build)
"""
import bisect
import itertools
import math
import os
import struct
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

BUILD = tracecheck.BUILD
TOOL = os.path.join(BUILD, "tests", "tools", "dtype_round")
FX = tracecheck.Fixture("dtype_fixture")

# (dtype number, exponent bits, mantissa bits, has inf, saturates)
FORMATS = {"bf16": (1, 8, 7, True, False), "fp16": (2, 5, 10, True, False),
           "e4m3": (3, 4, 3, False, True), "e5m2": (4, 5, 2, True, True)}


def decode(bits, eb, mb, has_inf):
    sign = -1.0 if bits >> (eb + mb) & 1 else 1.0
    e, m = bits >> mb & ((1 << eb) - 1), bits & ((1 << mb) - 1)
    bias = (1 << (eb - 1)) - 1
    if e == (1 << eb) - 1 and has_inf:
        return sign * math.inf if m == 0 else math.nan
    if e == (1 << eb) - 1 and m == (1 << mb) - 1:
        return math.nan  # E4M3's only NaN
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - mb)
    return sign * (1 + m / 2 ** mb) * 2.0 ** (e - bias)


def finite_values(eb, mb, has_inf):
    """Every finite non-negative value with its bit pattern, ascending."""
    out = []
    for bits in range(1 << (eb + mb)):
        v = decode(bits, eb, mb, has_inf)
        if math.isfinite(v):
            out.append((v, bits))
    return sorted(out)


def model(x, table, eb, mb, has_inf, saturates):
    """x (a float64 holding an fp32) rounded: nearest, ties to even bits."""
    signbit = 1 << (eb + mb)
    if math.isnan(x):
        return None
    neg = math.copysign(1.0, x) < 0
    a = abs(x)
    top = table[-1][0]
    if a == math.inf or a > top:
        if saturates:
            return table[-1][1] | (signbit if neg else 0)
        # past max: inf when the rounded value (unbounded exponent) exceeds max
        spacing = top - table[-2][0]
        if a == math.inf or a >= top + spacing / 2:
            return ((1 << eb) - 1) << mb | (signbit if neg else 0)
        return table[-1][1] | (signbit if neg else 0)
    k = bisect.bisect_right(table, (a, 1 << 20)) - 1  # the largest value <= a (both zeros sort first)
    lo = table[k]
    hi = table[k] if table[k][0] == a else table[k + 1]
    if a - lo[0] < hi[0] - a:
        pick = lo
    elif a - lo[0] > hi[0] - a:
        pick = hi
    else:
        pick = lo if lo[1] % 2 == 0 else hi
    return pick[1] | (signbit if neg else 0)


def f32(x):
    """x rounded to fp32 (struct rounds to nearest even); inf past fp32's range."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def probe_values(table):
    """Representable values, midpoints (ties), just either side of them,
    around max and the subnormals; as fp32, both signs; nan and infs."""
    xs = []
    vals = [v for v, _ in table]
    for i in range(len(vals) - 1):
        if len(vals) > 600 and i % 97 not in (0, 1) and i > 40 and i < len(vals) - 40:
            continue  # 16-bit formats: a sample of the middle binades, all of the edges
        m = (vals[i] + vals[i + 1]) / 2
        for v in (vals[i], m, m * (1 + 2 ** -20), m * (1 - 2 ** -20)):
            xs.append(f32(v))
    big = vals[-1]
    xs += [f32(big * 1.03), f32(big * 1.07), f32(big * 2), 3.0e38, 1e-45, 1e-41]
    xs = [x for x in xs if math.isfinite(x)]
    return xs + [-x for x in xs] + [math.inf, -math.inf, math.nan]


def run_tool(d, xs, scale=None):
    args = [TOOL, str(d)] + ([repr(scale)] if scale is not None else [])
    text = "".join(("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf") if math.isinf(x) else x.hex()) + "\n"
                   for x in xs)
    p = subprocess.run(args, input=text, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise AssertionError(p.stderr)
    out = []
    for line in p.stdout.split("\n"):
        if line:
            bits, back = line.split()[:2]
            out.append((int(bits, 16), hex_or_special(back)))
    return out


def hex_or_special(text):
    return float.fromhex(text) if "nan" not in text and "inf" not in text else float(text)


def run_tool_unscaled(d, xs, scale):
    """The tool's third column: each value rounded at `scale`, then read
    back with to_dtype_scaled(q, DTYPE_F32, 1 / scale)."""
    args = [TOOL, str(d), repr(scale)]
    text = "".join(x.hex() + "\n" for x in xs)
    p = subprocess.run(args, input=text, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise AssertionError(p.stderr)
    return [hex_or_special(line.split()[2]) for line in p.stdout.split("\n") if line]


class Rounding(unittest.TestCase):
    def check_format(self, name, scale=None):
        d, eb, mb, has_inf, sat = FORMATS[name]
        table = finite_values(eb, mb, has_inf)
        xs = probe_values(table)
        got = run_tool(d, xs, scale)
        self.assertEqual(len(got), len(xs))
        bad = []
        for x, (bits, back) in zip(xs, got):
            xx = x * scale if scale is not None else x
            want = model(xx, table, eb, mb, has_inf, sat)
            if want is None:
                if not math.isnan(decode(bits, eb, mb, has_inf)) or not math.isnan(back):
                    bad.append((x, hex(bits), "want NaN"))
                continue
            if bits != want:
                bad.append((x, hex(bits), hex(want)))
            dv = decode(want, eb, mb, has_inf)
            if not (back == dv or (back == 0 and dv == 0)):
                bad.append((x, "read back", back, dv))
        self.assertEqual(bad[:10], [], "%s: %d of %d wrong" % (name, len(bad), len(xs)))
        return xs, got

    def test_bf16(self):
        self.check_format("bf16")

    def test_fp16_and_struct_half(self):
        xs, got = self.check_format("fp16")
        for x, (bits, _) in zip(xs, got):  # IEEE's half via struct: overflow raises, so finite only
            try:
                want = struct.unpack("<H", struct.pack("<e", x))[0]
            except OverflowError:
                continue
            if not math.isnan(x):
                self.assertEqual(bits, want, x)

    def test_e4m3_saturates_to_448(self):
        xs, got = self.check_format("e4m3")
        self.assertEqual(got[xs.index(math.inf)][1], 448.0)
        self.assertEqual(got[xs.index(-math.inf)][1], -448.0)

    def test_e5m2_saturates_to_57344(self):
        xs, got = self.check_format("e5m2")
        self.assertEqual(got[xs.index(math.inf)][1], 57344.0)

    def test_scaled_fp8(self):
        # x * scale in double, rounded once: probes scaled by 1/64 land on the same points
        self.check_format("e4m3", scale=64.0)

    def test_scale_undone_on_the_way_back(self):
        # to_dtype_scaled(q, DTYPE_F32, 1 / scale): each stored value times
        # 1 / scale in double, rounded once to fp32. A scale of 3 is not a
        # power of two, so the rounding shows.
        d, eb, mb, has_inf, _ = FORMATS["e4m3"]
        xs = [f32(v / 3.0) for v, _ in finite_values(eb, mb, has_inf)[1:200:7]]
        got = run_tool(d, xs, 3.0)
        back = run_tool_unscaled(d, xs, 3.0)
        for x, (bits, stored), unscaled in zip(xs, got, back):
            self.assertEqual(unscaled, f32(stored * (1.0 / 3.0)), (x, hex(bits)))

    def test_ties_to_even_by_hand(self):
        # 1 + 2^-8 is halfway between bf16's 1 and 1 + 2^-7: even (1) wins;
        # 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even (1 + 2^-6) wins.
        got = run_tool(1, [1 + 2 ** -8, 1 + 3 * 2 ** -8])
        self.assertEqual([b for _, b in got], [1.0, 1 + 2 ** -6])


def notes(trace):
    return [(s, r["data"]) for s in trace["steps"] for r in s["renderings"] if r["type"] in ("note", "text", "markdown")
            or "data" in r]


def values(text):
    return [float.fromhex(v) for v in text.split(":", 1)[1].split()]


def to16(x, name):
    d, eb, mb, has_inf, sat = FORMATS[name]
    return decode(model(x, TABLES[name], eb, mb, has_inf, sat), eb, mb, has_inf)


TABLES = {k: finite_values(v[1], v[2], v[3]) for k, v in FORMATS.items() if k in ("bf16", "fp16")}


def step_sums(xs, name):
    """Every value adding xs pairwise (any tree, any order) gives when each
    addition is done in fp32 and rounded to the 16-bit format."""
    if len(xs) == 1:
        return {xs[0]}
    out = set()
    n = len(xs)
    for i, j in itertools.combinations(range(n), 2):
        s = to16(f32(xs[i] + xs[j]), name)
        rest = [xs[k] for k in range(n) if k not in (i, j)]
        out |= step_sums(rest + [s], name)
    return out


class Collectives(tracecheck.FixtureTest):
    def run_world(self, p):
        out = os.path.join(self.out, str(p))
        os.makedirs(out, exist_ok=True)
        r = FX.run(out, case="collectives", env={"LECTERN_FIXTURE_WORLD": str(p)}, timeout=180)
        self.assertEqual(r.returncode, 0, tracecheck.why(r))
        return tracecheck.validate(os.path.join(out, "dtype_fixture.json"))

    def test_all_reduce_rounds_per_step_and_moves_2_bytes(self):
        for p in (2, 3, 4):
            t = self.run_world(p)
            texts = [d for _, d in notes(t)]
            for name in ("bf16", "fp16"):
                ins = {r: values(next(x for x in texts if x.startswith("%s in %d:" % (name, r)))) for r in range(p)}
                n = len(ins[0])
                once_differs = 0
                for r in range(p):
                    out = values(next(x for x in texts if x.startswith("%s out %d:" % (name, r))))
                    for i in range(n):
                        col = [ins[q][i] for q in range(p)]
                        allowed = step_sums(col, name)
                        self.assertIn(out[i], allowed, (p, name, r, i, col))
                        if out[i] != to16(f32(math.fsum(col)), name):
                            once_differs += 1
                    nominal = int(next(x for x in texts if x.startswith("%s nominal %d:" % (name, r))).split(": ")[1])
                    self.assertEqual(nominal, 2 * (p - 1) * n * 2 // p, (p, name))  # 2 bytes per element
            p2p = {d.split(":")[0]: d for d in texts if d.startswith("p2p")}
            self.assertIn("sent %d received 0" % (2 * n), p2p["p2p 0"])
            self.assertIn("sent 0 received %d" % (2 * n), p2p["p2p 1"])

    def test_every_other_path_rounds_as_the_model(self):
        for p in (2, 3, 4):
            out = os.path.join(self.out, "more%d" % p)
            os.makedirs(out)
            r = FX.run(out, case="more", env={"LECTERN_FIXTURE_WORLD": str(p)}, timeout=180)
            self.assertEqual(r.returncode, 0, tracecheck.why(r))
            texts = [d for _, d in notes(tracecheck.validate(os.path.join(out, "dtype_fixture.json")))]

            def got(label):
                return values(next(x for x in texts if x.startswith(label + ":")))
            for name in ("bf16", "fp16"):
                ins = {q: got("%s in %d" % (name, q)) for q in range(p)}
                n = len(ins[0])
                sums = [step_sums([ins[q][i] for q in range(p)], name) for i in range(n)]
                for q in range(p):
                    where = (p, name, q)
                    # The world size divides in fp32: Python's correctly rounded double quotient, rounded to fp32,
                    # is fp32's correctly rounded quotient (53 >= 2 x 24 + 2 bits), then the format's rounding.
                    for i, v in enumerate(got("%s avg out %d" % (name, q))):
                        self.assertIn(v, {to16(f32(s / p), name) for s in sums[i]}, where + ("avg", i))
                    self.assertEqual(got("%s min out %d" % (name, q)), [min(ins[k][i] for k in range(p)) for i in range(n)])
                    self.assertEqual(got("%s max out %d" % (name, q)), [max(ins[k][i] for k in range(p)) for i in range(n)])
                    piece = n // p
                    for j, v in enumerate(got("%s rs out %d" % (name, q))):
                        self.assertIn(v, sums[q * piece + j], where + ("rs", j))
                    self.assertEqual(got("%s ag out %d" % (name, q)), [v for k in range(p) for v in ins[k]], where)
                    for i, v in enumerate(got("%s async out %d" % (name, q))):
                        self.assertIn(v, sums[i], where + ("async", i))
                    group = list(range(q % 2, p, 2))
                    for i, v in enumerate(got("%s group out %d" % (name, q))):
                        self.assertIn(v, step_sums([ins[k][i] for k in group], name), where + ("group", i))


class Matmul(tracecheck.FixtureTest):
    def test_bf16_matmul_against_float64(self):
        r = FX.run(self.out, case="matmul", timeout=120)
        self.assertEqual(r.returncode, 0, tracecheck.why(r))
        texts = [d for _, d in notes(tracecheck.validate(os.path.join(self.out, "dtype_fixture.json")))]
        a, b, c = (values(next(x for x in texts if x.startswith(k))) for k in ("a:", "b:", "c:"))
        self.assertIn("c dtype: float32", texts)
        m, k, n = 5, 33, 7
        for v, name in ((a, "bf16"), (b, "bf16")):
            for x in v:
                self.assertEqual(to16(x, name), x)  # the inputs really are bf16 values
        u = 2.0 ** -24
        gamma = k * u / (1 - k * u)
        for i in range(m):
            for j in range(n):
                exact = math.fsum(a[i * k + q] * b[q * n + j] for q in range(k))
                bound = gamma * math.fsum(abs(a[i * k + q] * b[q * n + j]) for q in range(k))
                self.assertLessEqual(abs(c[i * n + j] - exact), bound, (i, j))


class Refusals(tracecheck.FixtureTest):
    def error_lines(self, case):
        r = FX.run(self.out, case=case, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        return r.stdout + r.stderr

    def test_gelu_on_bf16_is_refused_at_its_line(self):
        text = self.error_lines("gelu")
        self.assertIn("%s:%d: gelu: x is bf16; to_dtype(x, DTYPE_F32) first" % (FX.rel, FX.line_of("gelu(x); /* refused")),
                      text)

    def test_fp8_all_reduce_is_refused(self):
        text = self.error_lines("fp8_collective")
        self.assertIn("%s:%d: dist_all_reduce(): the tensor is float8_e4m3fn" % (FX.rel, FX.line_of("fp8 refused")),
                      text)

    def test_bf16_sent_to_fp32_receive_named_at_both_lines(self):
        text = self.error_lines("mismatch")
        send, recv = FX.line_of("bf16 sent"), FX.line_of("fp32 received")
        self.assertIn("dist_send of 24 bfloat16 to rank 1 at %s:%d" % (FX.rel, send), text)
        self.assertIn("dist_recv of 24 floats from rank 0 at %s:%d" % (FX.rel, recv), text)


if __name__ == "__main__":
    unittest.main()
