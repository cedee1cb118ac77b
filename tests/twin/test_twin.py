"""The run's twin (docs/twin.md): the record, the replay, and make twin's
missing-SimGrid path.

- --twin-record leaves the trace as it was: spawn_basic's trace with and
  without the flag is the same modulo times and the command line, and
  without the flag no NAME.events.json is written. With it, every rank of
  every spawn has its all-reduce, with its bytes.
- A hand-written 2-rank event file replayed on a one-link platform takes
  what the closed form says: latency + bytes / bandwidth per message, one
  after another.
- A planted change in the recorded bytes gives the simulated time the
  closed form of the planted sizes (latency + bytes / bandwidth each), so
  a replay that added or dropped bytes of its own would fail it, and moves
  it by the change over the link's bandwidth.
- The H100 platforms: the committed files are what fabric.py writes; the
  h100-node replay of a recorded 4-rank all-reduce benchmark gives the
  ring's closed-form busbw (derived here from the platform file's NVLink
  numbers), within a stated band of the link rate; a recorded 2-rank DDP
  step replayed at 8, 64 and 512 ranks on scaled takes its compute (the
  roofline of its counted work) plus 2 (P - 1) ring steps of the slowest
  hop's latency and b / P bytes (and at 32 on 4x8-ib), so its bandwidth
  share grows as
  (P - 1) / P, and rings beyond a node played in steady state take what
  every step played message by message takes; a pipeline extended to 8 stages computes 3/8 of a recorded
  stage's work per stage; a spawn whose first rank sends to its last, and
  a pipeline that is neither GPipe nor 1F1B (its stages' warm-ups differ), are refused, naming
  the spawn and why.
- The mesh's rule: a 2 x 2 data x tensor mesh at 8, 16 and 64 ranks, its
  groups against the test's own construction, its step's time against the
  rings' closed forms (tensor parallelism inside a node); 1F1B's rule: the
  extended orders against the schedule's rules and the simulated bubble
  against (P - 1) / (m + P - 1).
- make twin without the replay (LECTERN_TWIN_REPLAY pointing nowhere, as
  when SimGrid is missing) names what is missing, exits 3, and leaves the
  trace untouched.

The replay's cases are skipped, saying why, where the replay is not built
(no SimGrid).
"""
import json
import os
import re
import xml.etree.ElementTree as ET
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
REPLAY = tracecheck.built("tools", "twin", "twin_replay")
TWIN_SH = os.path.join(ROOT, "scripts", "twin.sh")
PLATFORMS = os.path.join(ROOT, "tools", "twin", "platforms")

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
    drop = {"time", "seconds", "startup_s", "start_time", "duration_s", "command", "start", "end", "last"}
    # A message link names the trace's step index, which the ranks'
    # interleaving moves: name it as (spawn/rank, its place among that
    # rank's steps) instead; its times zeroed, its lists (ordered by time)
    # sorted, and its sites (numbered as first met) named.
    place = {}
    seen = {}
    for i, step in enumerate(trace["steps"]):
        key = "%s/%s" % (step["spawn"], step["rank"])
        place[i] = (key, seen.get(key, 0))
        seen[key] = seen.get(key, 0) + 1
    for sp in trace["spawns"]:
        sides = [m[k] for m in sp.get("messages", []) for k in ("from", "to")]
        sides += [c for col in sp.get("collectives", []) for c in col["calls"]]
        for side in sides:  # [rank, site, step, start, end]
            side[2] = list(place[side[2]]) if side[2] is not None else None
            side[3] = side[4] = 0

    def walk(x):
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items() if k not in drop}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x
    t = walk(trace)
    for sp in t["spawns"]:
        sites = sp.pop("link_sites", [])
        for side in [m[k] for m in sp.get("messages", []) for k in ("from", "to")] + \
                [c for col in sp.get("collectives", []) for c in col["calls"]]:
            side[1] = sites[side[1]] if side[1] is not None else None
        for k in ("messages", "collectives"):
            if k in sp:
                sp[k] = sorted(sp[k], key=lambda x: json.dumps(x, sort_keys=True))
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
            # Against the bandwidth-implied time of the planted sizes, not
            # only the base run's: bytes the replay itself added to (or took
            # from) every message would cancel out of the difference alone.
            want = sum(LATENCY + b / BANDWIDTH for b in (sizes[0], sizes[1] + delta))
            self.assertAlmostEqual(t, want, delta=CLOCK_ATOL)
            self.assertAlmostEqual(t - base, delta / BANDWIDTH, delta=CLOCK_ATOL)

    def test_many_calls_each_counted(self):
        # More calls on one group than the replay's mailboxes cycle through
        # (1024): each still its own in the busbw rows. 2 ranks on the one
        # shared link: each of the ring's 2 steps sends b / 2 both ways at
        # half the rate, latency + b / bandwidth a step.
        n, b = 1100, 4096
        ev = {"version": 1, "lecture": "hand", "spawns": [{"id": 0, "world_size": 2, "ranks": [
            {"events": [{"op": "all_reduce", "start": 0, "end": 0, "bytes": b}] * n, "end": 0}] * 2}]}
        (row,) = self.replay(ev)["spawns"][0]["collectives"]
        self.assertEqual((row["op"], row["bytes"], row["calls"]), ("all_reduce", b, n))
        self.assertAlmostEqual(row["time_s"], 2 * (LATENCY + b / BANDWIDTH), delta=CLOCK_ATOL)

    def test_deadlock_is_an_error(self):
        # Both ranks receive first: the replay cannot finish that spawn.
        ev = messages([4])
        for r in ev["spawns"][0]["ranks"]:
            r["events"][0]["op"] = "recv"
        with tempfile.TemporaryDirectory() as d:
            path, xml = os.path.join(d, "e.json"), os.path.join(d, "p.xml")
            with open(path, "w") as f:
                json.dump(ev, f)
            with open(xml, "w") as f:
                f.write(ONE_LINK)
            p = subprocess.run([REPLAY, path, xml, "--out", os.path.join(d, "o.json")], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("spawn 0 never finishes in the replay", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "o.json")), "figures written for a replay that hung")


UNITS = {"GBps": 1e9, "Tf": 1e12, "us": 1e-6, "s": 1.0}


def quantity(text):
    """SimGrid's "450GBps", "0.5us", "989Tf" as a number in SI units."""
    m = re.fullmatch(r"([0-9.eE+-]+)([A-Za-z]*)", text)
    return float(m.group(1)) * UNITS[m.group(2)]


class Fabric:
    """A platform file read with ElementTree: its links, host speed and
    memory bandwidth, for closed forms independent of the replay."""

    def __init__(self, name):
        self.path = os.path.join(PLATFORMS, name + ".xml")
        zone = ET.parse(self.path).getroot().find("zone")
        self.links = {l.get("id"): (quantity(l.get("bandwidth")), quantity(l.get("latency")))
                      for l in zone.iter("link")}
        self.speed = quantity(zone.find("host").get("speed"))
        self.memory_bw = float({p.get("id"): p.get("value") for p in zone.findall("prop")}["memory_bw"])

    def path_of(self, links):
        """(latency, bandwidth) of a route through these links: latencies
        add, the slowest link sets the rate (CM02)."""
        return sum(self.links[l][1] for l in links), min(self.links[l][0] for l in links)

    def hop(self, a, b):
        """GPU a to GPU b: the same node through NVLink; the same leaf (32
        GPUs) through PCIe, InfiniBand and the leaf; else over a spine."""
        if a // 8 == b // 8:
            return self.path_of(["nvl%d" % a, "nvl%d" % b])
        ends = ["pcie%d" % a, "ib%d" % a, "ib%d" % b, "pcie%d" % b]
        if a // 32 == b // 32:
            return self.path_of(ends)
        return self.path_of(ends + ["up%d-0" % (a // 32), "up%d-0" % (b // 32)])

    def ring(self, p, nbytes):
        """A ring all-reduce of nbytes over GPUs 0..p-1: 2 (p - 1) steps,
        each as long as the ring's slowest hop takes for nbytes / p (every
        hop moves its piece at once, on links of its own)."""
        step = max(lat + nbytes / p / bw for lat, bw in (self.hop(r, (r + 1) % p) for r in range(p)))
        return 2 * (p - 1) * step, step

    def ring_over(self, gpus, nbytes):
        """A ring all-reduce of nbytes over these GPUs, in this order: as
        ring(), each hop from one to the next."""
        n = len(gpus)
        step = max(lat + nbytes / n / bw for lat, bw in (self.hop(a, b) for a, b in zip(gpus, gpus[1:] + gpus[:1])))
        return 2 * (n - 1) * step

    def work(self, e):
        """A compute event as work: the roofline, max(FLOPs / speed, bytes / memory bandwidth)."""
        return max(e.get("flops", 0) / self.speed, e.get("bytes", 0) / self.memory_bw)


# The replay's clock against the closed forms: SimGrid sums in doubles and
# rounds completion dates to its precision (1e-9 s, surf/precision) once
# per event; a 512-rank ring has 1022 steps in sequence, so 1022 roundings:
# 2e-6 s absolute covers them with room, 1e-6 relative the rest.
RING_ATOL, REL = 2e-6, 1e-6


@unittest.skipUnless(os.path.exists(REPLAY), "the twin's replay is not built (SimGrid missing: libsimgrid-dev)")
class TwinPlatforms(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        p = tracecheck.Fixture("twin_fixture").run(cls.tmp.name, "--twin-record")
        assert p.returncode == 0, p.stderr
        cls.events = os.path.join(cls.tmp.name, "twin_fixture.events.json")
        with open(cls.events) as f:
            cls.recorded = {s["id"]: s for s in json.load(f)["spawns"]}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def replay(self, platform, *args, rc=0):
        out = os.path.join(self.tmp.name, "out.json")
        p = subprocess.run([REPLAY, self.events, os.path.join(PLATFORMS, platform + ".xml"), "--name", platform,
                            "--out", out, *args], capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, rc, p.stderr)
        if rc:
            return p
        with open(out) as f:
            return {s["id"]: s for s in json.load(f)["spawns"]}

    def test_files_are_what_fabric_writes(self):
        sys.path.insert(0, PLATFORMS)
        import fabric
        for name, (what, nodes) in fabric.PLATFORMS.items():
            with open(os.path.join(PLATFORMS, name + ".xml")) as f:
                self.assertEqual(f.read(), fabric.platform(name, what, nodes),
                                 "%s.xml is not what fabric.py writes: python3 tools/twin/platforms/fabric.py" % name)

    def test_busbw_on_h100_node(self):
        fab = Fabric("h100-node")
        got = self.replay("h100-node")[0]["collectives"]
        recorded = sorted({e["bytes"] for e in self.recorded[0]["ranks"][0]["events"] if e["op"] == "all_reduce"})
        self.assertEqual([c["bytes"] for c in got], recorded)
        link_bw = fab.links["nvl0"][0]
        for c in got:
            p, b = c["ranks"], c["bytes"]
            self.assertEqual((c["op"], p), ("all_reduce", 4))
            t, _ = fab.ring(p, b)
            busbw = b / t * 2 * (p - 1) / p
            self.assertAlmostEqual(c["time_s"], t, delta=RING_ATOL)
            self.assertAlmostEqual(c["busbw_GBps"] * 1e9 / busbw, 1, delta=REL)
            self.assertLess(c["busbw_GBps"] * 1e9, link_bw)
        # The band: a ring's busbw is the link rate less each step's latency
        # share, b/p / (b/p + latency * rate). 16 MiB over 4 ranks: 4 MiB
        # pieces against 1 us * 450 GB/s = 450 KB, so within 10% of 450 GB/s.
        big = got[-1]
        self.assertEqual(big["bytes"], 16 << 20)
        self.assertGreater(big["busbw_GBps"] * 1e9, 0.9 * link_bw)
        self.assertEqual([c["busbw_GBps"] for c in got], sorted(c["busbw_GBps"] for c in got), "busbw falls with size")

    def test_ddp_at_scale(self):
        fab = Fabric("scaled")  # the same GPU on every platform: compute as work is the same
        rec = self.recorded[1]
        self.assertEqual(rec["world_size"], 2)
        ev = rec["ranks"][0]["events"]
        compute = sum(fab.work(e) for e in ev if e["op"] == "compute")
        (b,) = [e["bytes"] for e in ev if e["op"] == "all_reduce"]
        for platform, P in (("scaled", 8), ("scaled", 64), ("scaled", 512), ("4x8-ib", 32)):
            fab = Fabric(platform)
            s = self.replay(platform, "--spawn", "1", "--ranks", str(P))[1]
            self.assertEqual((s["world_size"], s["rule"], s["recorded_ranks"]), (P, "ddp", 2))
            ring, step = fab.ring(P, b)
            self.assertAlmostEqual(s["simulated_s"], compute + ring, delta=RING_ATOL + REL * ring)
            # The rule itself: less the 2 (P - 1) latencies, each rank's link
            # carries 2 (P - 1) / P of the gradient: the (P - 1) / P growth.
            lat, bw = max((fab.hop(r, (r + 1) % P) for r in range(P)), key=lambda h: h[0] + b / P / h[1])
            carried = (s["simulated_s"] - compute - 2 * (P - 1) * lat) * bw / b
            self.assertAlmostEqual(carried, 2 * (P - 1) / P, delta=1e-4)

    def test_steady_state_ring(self):
        # Rings beyond one node are played in steady state (one step, then
        # the rest as long: the slowest hop's time per step). Played step by
        # step in lockstep (--full-rings 1) each step also waits for the
        # ranks' faster hops, so per call: steady <= lockstep <= steady plus
        # one fast (NVLink) hop's time, latency and piece, per step.
        fab = Fabric("scaled")
        nvl_lat, nvl_bw = fab.hop(0, 1)
        for spawn in ("0", "1"):
            fast = self.replay("scaled", "--spawn", spawn, "--ranks", "64")[int(spawn)]
            full = self.replay("scaled", "--spawn", spawn, "--ranks", "64", "--full-rings", "1")[int(spawn)]
            self.assertEqual([c["bytes"] for c in fast["collectives"]], [c["bytes"] for c in full["collectives"]])
            for a, b in zip(fast["collectives"], full["collectives"]):
                self.assertAlmostEqual(a["time_s"], fab.ring(64, a["bytes"])[0], delta=RING_ATOL)
                slack = 2 * 63 * (nvl_lat + a["bytes"] / 64 / nvl_bw)
                self.assertGreaterEqual(b["time_s"], a["time_s"] - RING_ATOL)
                self.assertLessEqual(b["time_s"], a["time_s"] + slack, (a["bytes"], b["time_s"] / a["time_s"]))

    def test_pipeline_more_stages(self):
        fab = Fabric("scaled")
        s = self.replay("scaled", "--spawn", "2", "--ranks", "8")[2]
        self.assertEqual((s["world_size"], s["rule"], s["recorded_ranks"]), (8, "pipeline", 3))
        # A middle stage repeats recorded rank 1 with its compute scaled by 3/8.
        want = 3 / 8 * sum(fab.work(e) for e in self.recorded[2]["ranks"][1]["events"] if e["op"] == "compute")
        for r in range(1, 7):
            got = sum(x["end"] - x["start"] for x in s["ranks"][r] if x["op"] == "compute")
            self.assertAlmostEqual(got, want, delta=1e-9 * 20)  # 20 compute events, each rounded once
        self.assertTrue(all("barrier" in [x["op"] for x in r] for r in s["ranks"]), "the barrier is not over all 8")
        self.assertEqual([x["op"] for x in s["ranks"][4] if x["op"] in ("send", "recv")],
                         [x["op"] for x in self.recorded[2]["ranks"][1]["events"] if x["op"] in ("send", "recv")])

    def test_make_twin_attaches(self):
        # scripts/twin.sh (make twin's recipe) with a plain and an extended
        # platform: each spawn of the trace gets both, the trace stays valid
        # (schema, .js twin, lines), the refused spawn says why.
        out = os.path.join(self.tmp.name, "make-twin")
        env = dict(os.environ, LECTERN_TWIN_REPLAY=REPLAY, LECTERN_OUT=out)
        fx = tracecheck.Fixture("twin_fixture")
        r = subprocess.run(["bash", TWIN_SH, fx.binary, "h100-node,scaled@8", "--quiet"], env=env, capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        trace = tracecheck.validate(os.path.join(out, "twin_fixture.json"))
        twins = [s["twin"] for s in trace["spawns"]]
        self.assertEqual([t["h100-node"]["label"] for t in twins], ["simulated on h100-node"] * 4)
        self.assertEqual([t["scaled@8"].get("rule") for t in twins], ["ddp", "ddp", "pipeline", None])
        self.assertEqual(twins[1]["scaled@8"]["world_size"], 8)
        self.assertIn("not a neighbour", twins[3]["scaled@8"]["refused"])
        self.assertEqual(twins[3]["scaled@8"]["label"], "not simulated on scaled@8")
        bench = twins[0]["h100-node"]["collectives"]
        self.assertEqual([c["bytes"] for c in bench], [1 << 20, 4 << 20, 16 << 20])
        bad = subprocess.run(["bash", TWIN_SH, fx.binary, "scaled@x"], env=env, capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("'scaled@x': the ranks after @ must be a positive number", bad.stderr)

    def test_1f1b_refused(self):
        # Three 1F1B-like stages: stage 0 sends 2 micro-batches on before its
        # first gradient, stage 1 one. No one stage repeats at 8 stages.
        def ev(op, peer):
            return {"op": op, "start": 0, "end": 0, "bytes": 64, "peer": peer}
        ranks = [[ev("send", 1), ev("send", 1), ev("recv", 1), ev("recv", 1)],
                 [ev("recv", 0), ev("send", 2), ev("recv", 0), ev("recv", 2), ev("send", 0), ev("send", 2),
                  ev("recv", 2), ev("send", 0)],
                 [ev("recv", 1), ev("send", 1), ev("recv", 1), ev("send", 1)]]
        path = os.path.join(self.tmp.name, "1f1b.json")
        with open(path, "w") as f:
            json.dump({"version": 1, "lecture": "hand", "spawns": [{"id": 0, "world_size": 3, "ranks": [
                {"events": r, "end": 0} for r in ranks]}]}, f)
        p = subprocess.run([REPLAY, path, os.path.join(PLATFORMS, "scaled.xml"), "--spawn", "0", "--ranks", "8"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("its stages warm up differently (rank 0 sends 2 micro-batches on before its first gradient, "
                      "rank 1 1)", p.stderr)

    def test_refused(self):
        why = "spawn 3 (3 ranks): no rule extends it to 8 ranks: rank 0's send with rank 2, not a neighbour"
        p = self.replay("scaled", "--spawn", "3", "--ranks", "8", rc=2)
        self.assertIn(why, p.stderr)
        # Without --spawn the others replay and the refused one says why.
        got = self.replay("h100-node", "--ranks", "8")
        self.assertIn(why, got[3]["refused"])
        self.assertEqual([got[i]["rule"] for i in (0, 1, 2)], ["ddp", "ddp", "pipeline"])


def mesh_events(T=2, D=2, tp_bytes=4 << 20, dp_bytes=16 << 20, flops=None):
    """A hand-made D x T mesh step, lecture_scaling's shape (rank = T d +
    t): compute, an all-reduce in the tensor-parallel group (T neighbouring
    ranks), compute, two all-reduces in the data-parallel group (every T-th
    rank). Rank r computes flops(r): which recorded rank a replayed one
    repeats shows in its compute."""
    flops = flops or (lambda r: 1e12)
    ranks = []
    for r in range(T * D):
        d, t = divmod(r, T)
        tp, dp = list(range(T * d, T * d + T)), list(range(t, T * D, T))
        ev = [{"op": "compute", "start": 0, "end": 0, "flops": flops(r)},
              {"op": "all_reduce", "start": 0, "end": 0, "bytes": tp_bytes, "group": tp},
              {"op": "compute", "start": 0, "end": 0, "flops": 2 * flops(r)},
              {"op": "all_reduce", "start": 0, "end": 0, "bytes": dp_bytes, "group": dp},
              {"op": "all_reduce", "start": 0, "end": 0, "bytes": dp_bytes, "group": dp}]
        ranks.append({"events": ev, "end": 0})
    return {"version": 1, "lecture": "hand", "spawns": [{"id": 0, "world_size": T * D, "ranks": ranks}]}


@unittest.skipUnless(os.path.exists(REPLAY), "the twin's replay is not built (SimGrid missing: libsimgrid-dev)")
class TwinMesh(unittest.TestCase):
    """The mesh's extension rule (tools/twin/extend.cpp): a 2 x 2 data x
    tensor mesh grown to P = P/2 x 2 ranks, tensor-parallel groups kept 2
    wide inside a node, data-parallel groups grown across nodes."""

    def replay(self, events, platform, P, rc=0):
        with tempfile.TemporaryDirectory() as d:
            ev, out, ext = (os.path.join(d, n) for n in ("e.json", "o.json", "x.json"))
            with open(ev, "w") as f:
                json.dump(events, f)
            p = subprocess.run([REPLAY, ev, os.path.join(PLATFORMS, platform + ".xml"), "--spawn", "0", "--ranks",
                                str(P), "--out", out, "--events-out", ext], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(p.returncode, rc, p.stderr)
            if rc:
                return p
            with open(out) as f, open(ext) as g:
                return json.load(f)["spawns"][0], json.load(g)["spawns"][0]

    def test_layout_against_the_mesh(self):
        # Independently: at P = D' x 2, rank 2 d' + t's tensor-parallel group
        # is {2 d', 2 d' + 1}, its data-parallel group {t, t + 2, ..., P - 2
        # + t}, and it repeats recorded rank 2 (d' mod 2) + t, whose compute
        # (1 + r) TFLOP marks it.
        rec = mesh_events(flops=lambda r: (1 + r) * 1e12)
        for P in (8, 16):
            s, ext = self.replay(rec, "scaled", P)
            self.assertEqual((s["rule"], s["recorded_ranks"], ext["world_size"]), ("mesh", 4, P))
            for r, rank in enumerate(ext["ranks"]):
                d, t = divmod(r, 2)
                src = rec["spawns"][0]["ranks"][2 * (d % 2) + t]["events"]
                want = [dict(e) for e in src]
                want[1]["group"] = [2 * d, 2 * d + 1]
                want[3]["group"] = want[4]["group"] = list(range(t, P, 2))
                got = [{k: v for k, v in e.items()} for e in rank["events"]]
                self.assertEqual(got, want, "rank %d of %d" % (r, P))

    def test_time_tensor_parallel_inside_a_node(self):
        # Every rank the same work, so the ranks move together: the step is
        # the compute, the tensor-parallel ring over two GPUs of one node
        # (NVLink), the compute again, and two rings over the data-parallel
        # group, which crosses nodes. Built with the tensor-parallel groups
        # across nodes instead, its ring would cross InfiniBand and the time
        # would not match.
        fab = Fabric("scaled")
        rec = mesh_events()
        compute = sum(fab.work(e) for e in rec["spawns"][0]["ranks"][0]["events"] if e["op"] == "compute")
        for P in (8, 64):
            s, _ = self.replay(rec, "scaled", P)
            tp = fab.ring_over([0, 1], 4 << 20)
            dp = max(fab.ring_over(list(range(t, P, 2)), 16 << 20) for t in (0, 1))
            want = compute + tp + 2 * dp
            self.assertAlmostEqual(s["simulated_s"], want, delta=RING_ATOL + REL * want, msg=P)
            rows = {(c["ranks"], c["bytes"]): c for c in s["collectives"]}
            self.assertEqual(sorted(rows), [(2, 4 << 20), (P // 2, 16 << 20)])
            self.assertAlmostEqual(rows[(2, 4 << 20)]["time_s"], tp, delta=RING_ATOL)

    def test_tensor_parallel_across_nodes_costs(self):
        # --placement tp-across: the same mesh, each tensor-parallel pair on
        # GPUs d and P/2 + d (other nodes), each data-parallel group packed.
        # Its tensor-parallel ring now crosses the spine (closed form), and
        # at these sizes (4 MiB of activations, 2 x 16 MiB of gradients) the
        # step is slower than with the pair inside a node: the mistake.
        fab = Fabric("scaled")
        rec = mesh_events()
        compute = sum(fab.work(e) for e in rec["spawns"][0]["ranks"][0]["events"] if e["op"] == "compute")
        P = 64
        good, _ = self.replay(rec, "scaled", P)
        with tempfile.TemporaryDirectory() as d:
            ev, out = os.path.join(d, "e.json"), os.path.join(d, "o.json")
            with open(ev, "w") as f:
                json.dump(rec, f)
            p = subprocess.run([REPLAY, ev, os.path.join(PLATFORMS, "scaled.xml"), "--spawn", "0", "--ranks", str(P),
                                "--placement", "tp-across", "--out", out], capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out) as f:
                bad = json.load(f)["spawns"][0]
        # Each pair's ring crosses from leaf 0 (GPUs 0-31) to leaf 1 and
        # back, all P / 2 pairs at once over the one route between the two
        # leaves (SimGrid has no ECMP, docs/twin.md): each flow gets the
        # leaf's uplink over P / 2 if that is less than its own path's rate.
        lat, bw = fab.hop(0, P // 2)
        bw = min(bw, fab.links["up0-0"][0] / (P // 2))
        tp = 2 * (lat + (4 << 20) / 2 / bw)
        dp = max(fab.ring_over(list(range(t * P // 2, (t + 1) * P // 2)), 16 << 20) for t in (0, 1))
        want = compute + tp + 2 * dp
        self.assertAlmostEqual(bad["simulated_s"], want, delta=RING_ATOL + REL * want)
        self.assertGreater(bad["simulated_s"], good["simulated_s"])

    def test_not_a_mesh_refused(self):
        rec = mesh_events()
        for r in (0, 3):  # {0, 3}: neither neighbours nor every 2nd rank
            rec["spawns"][0]["ranks"][r]["events"][1]["group"] = [0, 3]
        p = self.replay(rec, "scaled", 8, rc=2)
        self.assertIn("rank 0's all_reduce is over a group that is no axis of a mesh", p.stderr)
        p = self.replay(mesh_events(), "scaled", 9, rc=2)
        self.assertIn("its mesh's inner axis is 2 ranks wide, which does not divide 9", p.stderr)


def one_f_one_b_record(p=3, m=6, f_ms=1.0, b_ms=2.0, nbytes=64 << 10):
    """A p-stage 1F1B pass recorded as lecture_08's run_schedule runs it
    (warm-up min(p - s - 1, m) forwards; a forward: receive from the stage
    before, modelled compute, send on without waiting; a backward: receive
    the gradient from the stage after, modelled compute, send back without
    waiting; the sends waited for at the end), with modelled compute."""
    ranks = []
    for s in range(p):
        ev, reqs = [], []

        def step(kind, k):
            other, to = (s - 1, s + 1) if kind == "F" else (s + 1, s - 1)
            if 0 <= other < p:
                ev.append({"op": "recv", "start": 0, "end": 0, "bytes": nbytes, "peer": other})
            ev.append({"op": "modelled", "start": 0, "end": 0, "ms": f_ms if kind == "F" else b_ms})
            if 0 <= to < p:
                reqs.append(len(reqs) + 1)
                ev.append({"op": "send", "start": 0, "end": 0, "bytes": nbytes, "peer": to, "req": reqs[-1]})
        w = min(p - s - 1, m)
        for k in range(w):
            step("F", k)
        for k in range(w, m):
            step("F", k)
            step("B", k - w)
        for k in range(m - w, m):
            step("B", k)
        ev += [{"op": "wait", "start": 0, "end": 0, "req": r} for r in reqs]
        ranks.append({"events": ev, "end": 0})
    return {"version": 1, "lecture": "hand", "spawns": [{"id": 0, "world_size": p, "ranks": ranks}]}


def operations(events, s, P):
    """A stage's extended events read back as its operations, in order:
    ("F", k) for each forward (a modelled span that follows a receive from
    the stage before, or starts a first stage's forward), ("B", k) for each
    backward; k counted per kind, as micro-batches go through a stage in
    order. Messages say which: what precedes a modelled span."""
    ops, n, last = [], {"F": 0, "B": 0}, None
    for e in events:
        if e["op"] == "recv":
            last = "F" if e["peer"] == s - 1 else "B"
        elif e["op"] == "send":
            last = None
        elif e["op"] == "modelled":
            if last is None:  # no receive before it: stage 0's forward or the last stage's backward
                last = "F" if s == 0 else "B"
            ops.append((last, n[last]))
            n[last] += 1
            last = None
    return ops


@unittest.skipUnless(os.path.exists(REPLAY), "the twin's replay is not built (SimGrid missing: libsimgrid-dev)")
class TwinOneFOneB(unittest.TestCase):
    """1F1B's extension rule (tools/twin/extend.cpp): the same schedule over
    P stages, every stage's order generated by the rule, checked here against
    the schedule's own rules and its bubble against (P - 1) / (m + P - 1)."""

    replay = TwinMesh.replay

    def test_order_follows_the_schedule(self):
        # homework_parallel's checker's rules, independently of the rule's
        # code: each forward and backward once per stage; forward k on stage s
        # after forward k on s - 1, backward k after backward k on s + 1 and
        # after its own forward; and 1F1B's order: stage s runs min(P - s - 1,
        # m) forwards, then one forward and one backward in turn, so it never
        # holds more than P - s micro-batches' activations.
        m = 6
        for P in (8, 16):
            s_out, ext = self.replay(one_f_one_b_record(m=m), "scaled", P)
            self.assertEqual((s_out["rule"], s_out["recorded_ranks"]), ("1f1b", 3))
            stages = [operations(r["events"], s, P) for s, r in enumerate(ext["ranks"])]
            for s, ops in enumerate(stages):
                self.assertEqual(sorted(ops), sorted([("F", k) for k in range(m)] + [("B", k) for k in range(m)]), s)
                held = peak = 0
                for kind, _ in ops:
                    held += 1 if kind == "F" else -1
                    peak = max(peak, held)
                self.assertEqual(peak, min(P - s, m), "stage %d holds %d micro-batches" % (s, peak))
                w = min(P - s - 1, m)
                self.assertEqual(ops[:w], [("F", k) for k in range(w)], s)
                self.assertEqual(ops[w:w + 2], [("F", w), ("B", 0)] if w < m else [("B", 0), ("B", 1)], s)
                # each message to a neighbour, none beyond the pipeline's ends
                peers = {e["peer"] for e in ext["ranks"][s]["events"] if "peer" in e}
                self.assertLessEqual(peers, {s - 1, s + 1} & set(range(P)), s)
            # Dependencies: play the stages' orders as a dataflow; each
            # operation runs once what it needs has run. All must finish.
            done, pos = set(), [0] * P
            progress = True
            while progress:
                progress = False
                for s in range(P):
                    while pos[s] < len(stages[s]):
                        kind, k = stages[s][pos[s]]
                        need = [("F", s - 1, k)] if kind == "F" and s > 0 else []
                        if kind == "B":
                            need = [("F", s, k)] + ([("B", s + 1, k)] if s < P - 1 else [])
                        if not all(n in done for n in need):
                            break
                        done.add((kind, s, k))
                        pos[s] += 1
                        progress = True
            self.assertEqual(pos, [2 * m] * P, "the stages' orders deadlock")

    def test_bubble_against_the_formula(self):
        # Modelled compute, the same on every stage (the recorded ms times 3 /
        # P): the pass takes (m + P - 1) (t_F + t_B) and the busiest stage
        # computes m (t_F + t_B), a bubble of (P - 1) / (m + P - 1). The
        # messages add to it: at most one each way per slot of the schedule's
        # critical path, 2 (m + P - 1) in all, each at most the slowest hop's
        # latency and 64 KiB over its rate.
        fab = Fabric("scaled")
        m = 6
        for P in (4, 8, 16):
            s_out, _ = self.replay(one_f_one_b_record(m=m), "scaled", P)
            busy = m * (1.0 + 2.0) * 1e-3 * 3 / P
            total = s_out["simulated_s"]
            spans = [sum(x["end"] - x["start"] for x in r if x["op"] == "modelled") for r in s_out["ranks"]]
            self.assertAlmostEqual(max(spans), busy, delta=1e-9 * 2 * m)  # one clock rounding per span
            slowest = max(lat + (64 << 10) / bw for lat, bw in (fab.hop(r, r + 1) for r in range(P - 1)))
            extra = 2 * (m + P - 1) * slowest
            formula = (P - 1) / (m + P - 1)
            ideal = busy / (1 - formula)
            self.assertGreaterEqual(total, ideal - 1e-9 * 4 * (m + P))
            self.assertLessEqual(total, ideal + extra, P)
            bubble = 1 - busy / total
            self.assertAlmostEqual(bubble, formula, delta=extra / ideal, msg=P)


class TwinAtRunTime(unittest.TestCase):
    """twin_last_spawn() from a lecture (tests/fixtures/twin_run_fixture.c):
    each bad input an error step at its own line with the words the result's
    why carries, the run going on; a recorded spawn replayed as it ran and at
    8 ranks, the figures equal to the standalone replay of the same spawn's
    recorded events; a spawn no rule extends refused at its line; with
    LECTERN_TWIN=0 no error, no simulation, and the reason given."""

    FX = tracecheck.Fixture("twin_run_fixture")

    def results(self, trace):
        """{what: the note's named values} of each twin_last_spawn call."""
        return {a["what"]: a for _, _, a in tracecheck.with_args(
            [(s, r) for s in trace["steps"] for r in s["renderings"]], "what", "ran", "t->why")}

    def run_fixture(self, out, env=None, *args, case=None):
        p = self.FX.run(out, *args, env=env, case=case)
        failed = os.path.join(out, "twin_run_fixture.failed.json")
        return p, tracecheck.validate(failed if os.path.exists(failed) else os.path.join(out, "twin_run_fixture.json"))

    def test_bad_input_named_at_its_line(self):
        with tempfile.TemporaryDirectory() as out:
            p, t = self.run_fixture(out, {"LECTERN_TWIN": "0"})
            self.assertEqual(p.returncode, 1, p.stderr)      # its error steps fail the run
            got = self.results(t)
            bad = {"before any spawn": ("/* no spawn yet */", "no spawn yet: call it after the spawn()"),
                   "unrecorded": ("/* not recorded */", "the last spawn (spawn 0) was not recorded: call "
                                                        "twin_record(1) before it"),
                   "unknown platform": ('"no-such-platform"', "no platform 'no-such-platform' "
                                                              "(tools/twin/platforms/no-such-platform.xml does not exist)"),
                   "ranks in the name": ('"h100-node@8"', "ranks go in the second argument"),
                   "negative ranks": ('"h100-node", -1', "ranks is -1")}
            errors = {s["stack"][-1]["line"]: msg for s, msg in tracecheck.errors(t)}
            for what, (needle, words) in bad.items():
                line = self.FX.line_of(needle)
                self.assertEqual(got[what]["ran"], 0, what)
                self.assertIn(words, got[what]["t->why"], what)
                self.assertIn(line, errors, "%s: no error step at line %d" % (what, line))
                self.assertEqual(errors[line], "%s:%d: twin_last_spawn: %s" % (self.FX.rel, line, got[what]["t->why"]))
            # LECTERN_TWIN=0: the good calls return 0, say why, and are no error.
            self.assertEqual(sorted(errors), sorted(self.FX.line_of(n) for n, _ in bad.values()))
            for what in ("as it ran", "at 8 ranks", "not extendable"):
                self.assertEqual((got[what]["ran"], got[what]["t->why"]), (0, "LECTERN_TWIN=0 turns the simulation off"))
            self.assertTrue(all("twin" not in s for s in t["spawns"]), "a twin in the trace with LECTERN_TWIN=0")

    @unittest.skipUnless(os.path.exists(REPLAY), "the twin's replay is not built (SimGrid missing: libsimgrid-dev)")
    def test_replayed_as_the_standalone_replay_does(self):
        with tempfile.TemporaryDirectory() as out:
            p, t = self.run_fixture(out, None, "--twin-record", case="good")
            self.assertEqual(p.returncode, 0, p.stderr)
            got = self.results(t)
            self.assertEqual((got["as it ran"]["ran"], got["as it ran"]["t->ranks"]), (1, 2))
            self.assertEqual((got["at 8 ranks"]["ran"], got["at 8 ranks"]["t->ranks"]), (1, 8))
            self.assertEqual(sorted(t["spawns"][0]["twin"]), ["h100-node", "scaled@8"])
            # The same spawn's recorded events through the replay's own command line.
            events = os.path.join(out, "twin_run_fixture.events.json")
            for what, platform, extra in (("as it ran", "h100-node", []), ("at 8 ranks", "scaled", ["--ranks", "8"])):
                res = os.path.join(out, platform + ".json")
                r = subprocess.run([REPLAY, events, os.path.join(PLATFORMS, platform + ".xml"), "--name", platform,
                                    "--out", res, "--spawn", "0", *extra], capture_output=True, text=True, timeout=120)
                self.assertEqual(r.returncode, 0, r.stderr)
                with open(res) as f:
                    want = json.load(f)["spawns"][0]["simulated_s"]
                self.assertGreater(want, 0)
                self.assertTrue(tracecheck.same_double(got[what]["t->simulated_s"], want), (what, want))
                self.assertEqual(t["spawns"][0]["twin"][platform if not extra else "scaled@8"]["simulated_s"],
                                 got[what]["t->simulated_s"])

    @unittest.skipUnless(os.path.exists(REPLAY), "the twin's replay is not built (SimGrid missing: libsimgrid-dev)")
    def test_spawn_no_rule_extends_refused_at_its_line(self):
        with tempfile.TemporaryDirectory() as out:
            p, t = self.run_fixture(out)
            self.assertEqual(p.returncode, 1, p.stderr)
            got = self.results(t)
            self.assertEqual(got["at 8 ranks"]["ran"], 1)
            line = self.FX.line_of("/* no rule */")
            self.assertEqual(got["not extendable"]["ran"], 0)
            self.assertIn("no rule extends it to 8 ranks: rank 0's send with rank 2, not a neighbour",
                          got["not extendable"]["t->why"])
            self.assertIn((line, "%s:%d: twin_last_spawn: %s" % (self.FX.rel, line, got["not extendable"]["t->why"])),
                          [(s["stack"][-1]["line"], msg) for s, msg in tracecheck.errors(t)])

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
