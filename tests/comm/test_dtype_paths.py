"""bf16 and fp16 through the NCCL backend (runtime/comm/comm_nccl.c) on its
CPU emulator (runtime/comm/nccl_emu.c): LECTERN_BACKEND=nccl with
LECTERN_NCCL_EMULATE=1, on 1 to 4 ranks. tests/fixtures/dtype_paths_fixture.c
makes every call (all-reduce SUM/AVG/MIN/MAX and async, reduce SUM and AVG,
reduce-scatter SUM/AVG/async, all-gather and async, all-to-all and async,
scatter, gather, broadcast and async, the group forms, send/recv, sendrecv,
isend/irecv) on bf16, fp16 and fp32, and notes every result exactly.

The model, written here in float64 (tests/tensor/test_dtype.py's rounding
model, itself checked against every value of each format):

- NCCL's 16-bit sum adds two values and rounds to the type once per step of
  its algorithm, per element. Which partial sums meet is the algorithm's
  (a ring on NCCL, Open MPI's on the emulator), so a result must be one of
  the values that adding the inputs pairwise in any order, rounding after
  each addition, gives (test_dtype.step_sums); and, whatever the order, it
  lies within gamma_{p-1} * sum|x| of the exact sum (p - 1 additions, each
  off by at most u of its result: the standard bound for recursive
  summation; gamma_k = k u / (1 - k u), u = 2^-8 for bf16's 8 significant
  bits, 2^-11 for fp16's 11). On 2 ranks there is one addition: the result
  is the exact sum rounded once, nothing else.
- AVG is ncclAvg, "premultiply then sum": 1/p rounded to the type, each
  input times it rounded to the type (one rounding each), then summed as
  above. Within gamma_{p+1} * sum|x| / p of the exact mean: two roundings in
  each premultiplied term and p - 1 in the sum, and gamma_a + gamma_b +
  gamma_a gamma_b <= gamma_{a+b}. On 3 ranks (1/3 is inexact) this tells
  premultiplying from a sum divided at the end.
- MIN, MAX, broadcast, gathers, scatters, all-to-all, sends: the inputs bit
  for bit (no arithmetic); a reduce leaves non-root ranks' tensors unchanged.
- Bytes: every kind's nominal, sent and received bytes are exactly half of
  the same calls' on fp32 (2 bytes an element against 4), and the
  all-reduce's nominal is the textbook 2 (p - 1) / p * 2n per call.
- A rank sending bf16 to a rank receiving fp32 is named at both lines.

Ranks sharing a GPU (the staging pipeline, the shared-GPU protocol) still
refuse 16-bit tensors, at the call's line: checked here too.
"""
import math
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "tensor"))
import test_dtype as model  # noqa: E402
import tracecheck  # noqa: E402

EMULATED = {"LECTERN_BACKEND": "nccl", "LECTERN_NCCL_EMULATE": "1"}
FX = tracecheck.Fixture("dtype_paths_fixture")
N = 24
U = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}


def gamma(k, name):
    return k * U[name] / (1 - k * U[name])


def premultiplied(xs, name):
    """ncclAvg's terms: each x times 1/p (rounded to the type), rounded once
    (the product of two 16-bit values is exact in float64)."""
    s = model.to16(model.f32(1.0 / len(xs)), name)
    return [model.to16(x * s, name) for x in xs]


class EmulatedNccl16(tracecheck.FixtureTest):
    def run_world(self, p):
        out = os.path.join(self.out, str(p))
        os.makedirs(out)
        r = FX.run(out, env=dict(EMULATED, LECTERN_FIXTURE_WORLD=str(p)), timeout=180)
        self.assertEqual(r.returncode, 0, tracecheck.why(r))
        t = tracecheck.validate(os.path.join(out, "dtype_paths_fixture.json"))
        self.assertIn("NCCL emulator", t["spawns"][0]["reason"])
        texts = [d for _, d in model.notes(t)]

        def got(label):
            return model.values(next(x for x in texts if x.startswith(label + ":")))
        return texts, got

    def check_sum(self, v, col, name, where):
        self.assertIn(v, model.step_sums(col, name), where)
        exact = math.fsum(col)
        self.assertLessEqual(abs(v - exact), gamma(len(col) - 1, name) * math.fsum(abs(x) for x in col), where)

    def check_avg(self, v, col, name, where):
        self.assertIn(v, model.step_sums(premultiplied(col, name), name), where)
        m = len(col)
        self.assertLessEqual(abs(v - math.fsum(col) / m), gamma(m + 1, name) * math.fsum(abs(x) for x in col) / m,
                             where)

    def check_world(self, p):
        texts, got = self.run_world(p)
        for name in ("bf16", "fp16"):
            ins = {q: got("%s in %d" % (name, q)) for q in range(p)}
            col = [[ins[q][i] for q in range(p)] for i in range(N)]
            piece = N // p
            for q in range(p):
                w = (p, name, q)
                for call in ("sum", "sum_async"):
                    for i, v in enumerate(got("%s %s out %d" % (name, call, q))):
                        self.check_sum(v, col[i], name, w + (call, i))
                for i, v in enumerate(got("%s avg out %d" % (name, q))):
                    self.check_avg(v, col[i], name, w + ("avg", i))
                self.assertEqual(got("%s min out %d" % (name, q)), [min(c) for c in col], w)
                self.assertEqual(got("%s max out %d" % (name, q)), [max(c) for c in col], w)
                for call, check in (("reduce", self.check_sum), ("reduce_avg", self.check_avg)):
                    out = got("%s %s out %d" % (name, call, q))
                    if q == p - 1:
                        for i, v in enumerate(out):
                            check(v, col[i], name, w + (call, i))
                    else:
                        self.assertEqual(out, ins[q], w + (call, "a non-root rank's tensor changed"))
                for call, check in (("rs", self.check_sum), ("rs_async", self.check_sum), ("rs_avg", self.check_avg)):
                    for j, v in enumerate(got("%s %s out %d" % (name, call, q))):
                        check(v, col[q * piece + j], name, w + (call, j))
                every = [v for k in range(p) for v in ins[k]]
                self.assertEqual(got("%s ag out %d" % (name, q)), every, w)
                self.assertEqual(got("%s ag_async out %d" % (name, q)), every, w)
                mine = [v for k in range(p) for v in ins[k][q * piece:(q + 1) * piece]]
                self.assertEqual(got("%s a2a out %d" % (name, q)), mine, w)
                self.assertEqual(got("%s a2a_async out %d" % (name, q)), mine, w)
                self.assertEqual(got("%s scatter out %d" % (name, q)), ins[0][q * piece:(q + 1) * piece], w)
                if q == 0:
                    self.assertEqual(got("%s gather out 0" % name), ins[0], w)
                self.assertEqual(got("%s bcast out %d" % (name, q)), ins[p - 1], w)
                self.assertEqual(got("%s bcast_async out %d" % (name, q)), ins[0], w)
                self.check_group(got, ins, name, p, q)
                if p > 1:
                    self.check_p2p(got, ins, name, p, q)
            self.check_bytes(texts, name, p)

    def check_group(self, got, ins, name, p, q):
        group = list(range(q % 2, p, 2))
        m, at = len(group), group.index(q)
        gcol = [[ins[k][i] for k in group] for i in range(N)]
        w = (p, name, q, "group")
        for i, v in enumerate(got("%s group_ar out %d" % (name, q))):
            self.check_sum(v, gcol[i], name, w + ("ar", i))
        for i, v in enumerate(got("%s group_ar_avg out %d" % (name, q))):
            self.check_avg(v, gcol[i], name, w + ("ar_avg", i))
        piece = N // m
        for j, v in enumerate(got("%s group_rs out %d" % (name, q))):
            self.check_sum(v, gcol[at * piece + j], name, w + ("rs", j))
        self.assertEqual(got("%s group_ag out %d" % (name, q)), [v for k in group for v in ins[k]], w)
        self.assertEqual(got("%s group_a2a out %d" % (name, q)),
                         [v for k in group for v in ins[k][at * piece:(at + 1) * piece]], w)
        self.assertEqual(got("%s group_bcast out %d" % (name, q)), ins[group[0]], w)

    def check_p2p(self, got, ins, name, p, q):
        w = (p, name, q, "p2p")
        self.assertEqual(got("%s recv out %d" % (name, q)), ins[0] if q == 1 else ins[q], w)
        self.assertEqual(got("%s sendrecv out %d" % (name, q)), ins[(q + p - 1) % p], w)
        self.assertEqual(got("%s irecv out %d" % (name, q)), ins[(q + 1) % p], w)

    def check_bytes(self, texts, name, p):
        def traffic(dt, q):
            line = next(x for x in texts if x.startswith("%s traffic %d:" % (dt, q)))
            return [[int(n) for n in kind.split("/")] for kind in line.split(":", 1)[1].split()]
        for q in range(p):
            t16, t32 = traffic(name, q), traffic("fp32", q)
            self.assertEqual([[2 * n for n in kind] for kind in t16], t32, (p, name, q))
            # 5 all-reduces of the world, 2 of the rank's parity group (m ranks), n = N elements of 2 bytes
            m = len(range(q % 2, p, 2))
            self.assertEqual(t16[1][0], 5 * 2 * (p - 1) * 2 * N // p + 2 * 2 * (m - 1) * 2 * N // m, (p, name, q))
            if p > 1:  # rank 0 sends twice (send, isend), every other rank once (isend); 2 bytes an element
                self.assertEqual(t16[8][1], (2 if q == 0 else 1) * 2 * N, (p, name, q))
                self.assertEqual(t16[9][2], (2 if q == 1 else 1) * 2 * N, (p, name, q))

    def test_1_rank(self):
        self.check_world(1)

    def test_2_ranks(self):
        self.check_world(2)

    def test_3_ranks(self):
        self.check_world(3)

    def test_4_ranks(self):
        self.check_world(4)

    def test_bf16_sent_to_fp32_receive_named_at_both_lines(self):
        fx = tracecheck.Fixture("dtype_fixture")
        r = fx.run(self.out, case="mismatch", env=EMULATED, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        text = r.stdout + r.stderr
        send, recv = fx.line_of("bf16 sent"), fx.line_of("fp32 received")
        self.assertIn("dist_send of 24 bfloat16 to rank 1 at %s:%d" % (fx.rel, send), text)
        self.assertIn("dist_recv of 24 floats from rank 0 at %s:%d" % (fx.rel, recv), text)


class SharedGpuStillRefuses(tracecheck.FixtureTest):
    """The shared-GPU paths (the staging pipeline, the shared-GPU protocol)
    do not carry 16-bit tensors yet: the first bf16 collective is refused at
    its line, naming the backend and the conversion (LECTERN_STAGE_TEST=1
    runs the staged backend's front on host tensors)."""

    def test_bf16_all_reduce_refused_at_its_line(self):
        r = FX.run(self.out, env={"LECTERN_STAGE_TEST": "1", "LECTERN_FIXTURE_WORLD": "2"}, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("%s:%d: dist_all_reduce(): the tensor is bfloat16; on this spawn's backend (ranks sharing GPUs) "
                      "the collectives carry fp32 only: to_dtype(the tensor, DTYPE_F32) first"
                      % (FX.rel, FX.line_of("else dist_all_reduce(t, op);")), r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
