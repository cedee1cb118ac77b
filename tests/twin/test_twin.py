"""The run's twin (docs/twin.md): the record, the replay, and make twin's
missing-SimGrid path.

- --twin-record leaves the trace as it was: spawn_basic's trace with and
  without the flag is the same modulo times and the command line, and
  without the flag no NAME.events.json is written. With it, every rank of
  every spawn has its all-reduce, with its bytes.
- A hand-written 2-rank event file replayed on a one-link platform takes
  what the closed form says: latency + bytes / bandwidth per message, one
  after another.
- A planted change in the recorded bytes changes the simulated time by
  the change over the link's bandwidth, in the change's direction.
- make twin without the replay (LECTERN_TWIN_REPLAY pointing nowhere, as
  when SimGrid is missing) names what is missing, exits 3, and leaves the
  trace untouched.

The replay's cases are skipped, saying why, where the replay is not built
(no SimGrid).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
REPLAY = tracecheck.built("tools", "twin", "twin_replay")
TWIN_SH = os.path.join(ROOT, "scripts", "twin.sh")

# One link between two hosts: 10 us, 1 GB/s (SimGrid's GBps is 1e9 bytes/s).
LATENCY, BANDWIDTH = 10e-6, 1e9
ONE_LINK = """<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <config><prop id="network/model" value="CM02"/></config>
  <zone id="one-link" routing="Full">
    <prop id="compute" value="measured"/>
    <host id="a0" speed="1Gf"/>
    <host id="a1" speed="1Gf"/>
    <link id="wire" bandwidth="1GBps" latency="10us"/>
    <route src="a0" dst="a1"><link_ctn id="wire"/></route>
  </zone>
</platform>
"""
# SimGrid computes in doubles and rounds its clock to about 1e-9 s
# (surf/precision); the closed form is exact: 1e-9 s absolute covers it.
CLOCK_ATOL = 1e-9


def normalised(trace):
    """The trace without what differs between two runs of the same lecture:
    times, the command line, the host's load."""
    drop = {"time", "seconds", "startup_s", "start_time", "duration_s", "command", "start", "end"}

    def walk(x):
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items() if k not in drop}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x
    t = walk(trace)
    # Ranks' steps reach the trace in any order between ranks: each rank's
    # (and the lecture's) steps in their order, apart.
    by = {}
    for step in t.pop("steps"):
        by.setdefault("%s/%s" % (step["spawn"], step["rank"]), []).append(step)
    t["steps"] = by
    return t


def messages(sizes):
    """Rank 0 sends each size in turn to rank 1, which receives them."""
    r0 = [{"op": "send", "start": 0, "end": 0, "bytes": b, "peer": 1} for b in sizes]
    r1 = [{"op": "recv", "start": 0, "end": 0, "bytes": b, "peer": 0} for b in sizes]
    return {"version": 1, "lecture": "hand", "spawns": [{"id": 0, "world_size": 2, "ranks": [
        {"events": r0, "end": 0}, {"events": r1, "end": 0}]}]}


class TwinRecord(unittest.TestCase):
    def test_trace_unchanged_and_events_recorded(self):
        fx = tracecheck.Fixture("spawn_basic")
        with tempfile.TemporaryDirectory() as plain, tempfile.TemporaryDirectory() as rec:
            p = fx.run(plain)
            self.assertEqual(p.returncode, 0, p.stderr)
            r = fx.run(rec, "--twin-record")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertFalse(os.path.exists(os.path.join(plain, "spawn_basic.events.json")),
                             "an events file written without --twin-record")
            a = tracecheck.load(os.path.join(plain, "spawn_basic.json"))
            b = tracecheck.load(os.path.join(rec, "spawn_basic.json"))
            self.assertEqual(normalised(a), normalised(b), "--twin-record changed the trace")
            with open(os.path.join(rec, "spawn_basic.events.json")) as f:
                ev = json.load(f)
            # spawn_basic: spawns of 4, 1 and 3 ranks; the 4- and 3-rank
            # workers all-reduce 4 floats (16 bytes) each.
            self.assertEqual([s["world_size"] for s in ev["spawns"]], [4, 1, 3])
            for s in ev["spawns"]:
                for r, rank in enumerate(s["ranks"]):
                    self.assertIsNotNone(rank, "spawn %d rank %d sent no events" % (s["id"], r))
                    ops = [e for e in rank["events"] if e["op"] == "all_reduce"]
                    if s["world_size"] > 1:
                        self.assertEqual(len(ops), 1, (s["id"], r, rank["events"]))
                        self.assertEqual(ops[0]["bytes"], 16)
                    starts = [e["start"] for e in rank["events"]]
                    self.assertEqual(starts, sorted(starts), "events out of order")


@unittest.skipUnless(os.path.exists(REPLAY), "the twin's replay is not built (SimGrid missing: libsimgrid-dev)")
class TwinReplay(unittest.TestCase):
    def replay(self, events):
        with tempfile.TemporaryDirectory() as d:
            ev, xml, out = (os.path.join(d, n) for n in ("e.json", "p.xml", "o.json"))
            with open(ev, "w") as f:
                json.dump(events, f)
            with open(xml, "w") as f:
                f.write(ONE_LINK)
            p = subprocess.run([REPLAY, ev, xml, "--name", "one-link", "--out", out], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out) as f:
                return json.load(f)

    def test_closed_form(self):
        sizes = [4, 1 << 20, 3 << 20]
        got = self.replay(messages(sizes))
        s = got["spawns"][0]
        want = sum(LATENCY + b / BANDWIDTH for b in sizes)
        self.assertAlmostEqual(s["simulated_s"], want, delta=CLOCK_ATOL)
        self.assertEqual(got["platform"], "one-link")
        # Each message's span on rank 1 is its own closed form.
        spans = s["ranks"][1]
        for span, b in zip(spans, sizes):
            self.assertAlmostEqual(span["end"] - span["start"], LATENCY + b / BANDWIDTH, delta=CLOCK_ATOL)

    def test_planted_bytes(self):
        sizes = [1 << 20, 1 << 20]
        base = self.replay(messages(sizes))["spawns"][0]["simulated_s"]
        for delta in (1 << 20, -(1 << 19)):
            planted = messages(sizes)
            for r in planted["spawns"][0]["ranks"]:
                r["events"][1]["bytes"] += delta
            t = self.replay(planted)["spawns"][0]["simulated_s"]
            self.assertAlmostEqual(t - base, delta / BANDWIDTH, delta=CLOCK_ATOL)


class TwinMissing(unittest.TestCase):
    def test_missing_simgrid(self):
        fx = tracecheck.Fixture("spawn_basic")
        with tempfile.TemporaryDirectory() as out:
            p = fx.run(out)
            self.assertEqual(p.returncode, 0, p.stderr)
            path = os.path.join(out, "spawn_basic.json")
            with open(path, "rb") as f:
                before = f.read()
            env = dict(os.environ, LECTERN_TWIN_REPLAY=os.path.join(out, "no-such-replay"), LECTERN_OUT=out)
            r = subprocess.run(["bash", TWIN_SH, fx.binary, "this-machine", "--quiet"], env=env, capture_output=True,
                               text=True, timeout=120)
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn("SimGrid (libsimgrid-dev)", r.stderr)
            self.assertIn("no-such-replay", r.stderr)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), before, "the trace changed")
            self.assertFalse(os.path.exists(os.path.join(out, "spawn_basic.events.json")), "the lecture ran")


if __name__ == "__main__":
    unittest.main()
