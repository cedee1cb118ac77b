"""spawn(): real ranks whose steps land in the trace, and failures that are loud.

Runs the fixture lectures tests/fixtures/spawn_basic.c and spawn_fail.c and
checks their traces: rank steps stamped with rank, world size and spawn, their
stacks starting with the parent's frames down to the spawn() line, in the
order they happened; a rank that crashes, exits or deadlocks stops the
lecture with an error step naming the rank, the signal or status and the
line, every earlier step kept, and no process left behind.

LECTERN_BUILD picks the build folder (build, or build-asan).
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
FAIL_SRC = os.path.join(ROOT, "tests", "fixtures", "spawn_fail.c")
BASIC_SRC = os.path.join(ROOT, "tests", "fixtures", "spawn_basic.c")
SPAWN_CASES = "tests/fixtures/spawn_cases.h"   # rank functions spawn_fail.c shares with spawn_expect.c

# What Open MPI and PMIx print of their own (banners, help texts, notices):
# none of it may reach a student's console.
OPEN_MPI_TEXT = re.compile(r"mpirun|ORTE|PMIx|PRTE|noticed that process|Child job|Primary job|"
                           r"^-{20,}|^\[[^\]]+:\d+\]", re.M)


fixture = tracecheck.fixture
line_of = tracecheck.line_of
rank_processes = tracecheck.rank_processes
links, machine_gpus = tracecheck.links, tracecheck.machine_gpus
Base = tracecheck.FixtureTest


class SpawnSteps(Base):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lectern-test-spawn-basic-")
        p = subprocess.run([fixture("spawn_basic"), "--out", cls.tmp, "--quiet"],
                           capture_output=True, text=True, timeout=120)
        cls.rc, cls.stderr = p.returncode, p.stderr
        cls.path = os.path.join(cls.tmp, "spawn_basic.json")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_runs_and_validates(self):
        self.assertEqual(self.rc, 0, self.stderr)
        # schema, .js twin, and every frame of every step on the right line
        tracecheck.validate(self.path)

    def test_spawns_and_backend_are_recorded(self):
        t = tracecheck.load(self.path)
        # What each spawn should have chosen, from the machine and the build,
        # not from the runtime: NCCL where the binary links NCCL and there is
        # a GPU for every rank (nvidia-smi's count), else Open MPI.
        binary = fixture("spawn_basic")
        gpus = machine_gpus() if links(binary, "libcudart") else 0
        self.assertEqual(t["meta"]["gpus"], gpus, "the trace's GPU count is the machine's")
        forced = os.environ.get("LECTERN_BACKEND")

        def expected(world):
            if forced:
                return forced
            return "nccl" if links(binary, "libnccl") and gpus >= world else "mpi"

        self.assertEqual([s["world_size"] for s in t["spawns"]], [4, 1, 3])
        used = [expected(s["world_size"]) for s in t["spawns"]]
        self.assertEqual(t["meta"]["backend"],
                         "nccl+mpi" if set(used) == {"nccl", "mpi"} else used[0])
        for i, s in enumerate(t["spawns"]):
            self.assertEqual(s["id"], i)
            self.assertEqual(s["backend"], used[i], s["reason"])
            self.assertEqual(s["status"], "ok")
            # Fewer GPUs than ranks (and at least one): the ranks share them.
            shared = not forced and used[i] == "mpi" and gpus > 0
            if shared:
                self.assertEqual(s["reason"], "%d ranks share %d GPU%s (%s); collectives through Open MPI via "
                                 "host memory" % (s["world_size"], gpus, "" if gpus == 1 else "s",
                                                  "cuda:0" if gpus == 1 else "cuda:0-%d" % (gpus - 1)))
            else:
                self.assertIn("NCCL on device memory" if used[i] == "nccl" else "Open MPI on host memory",
                              s["reason"])
            self.assertTrue(s["reason"].startswith("%d rank" % s["world_size"]), s["reason"])
            self.assertGreater(s["seconds"], 0)
            self.assertEqual(s["stack"][-1]["function"], "body")
        self.assertEqual(t["spawns"][0]["stack"][-1]["line"], line_of(BASIC_SRC, "spawn(worker, 4"))
        self.assertEqual(t["spawns"][2]["stack"][-1]["line"], line_of(BASIC_SRC, "spawn(worker, 3"))
        # A note at each spawn() line says which backend and why.
        notes = [(s["stack"][-1]["line"], r["data"]) for s in t["steps"] for r in s["renderings"]
                 if s["rank"] is None and r["data"].startswith("spawn: ")]
        self.assertEqual(notes, [(s["stack"][-1]["line"], "spawn: " + s["reason"]) for s in t["spawns"]])

    def test_rank_steps_are_stamped_and_nested_under_spawn(self):
        t = tracecheck.load(self.path)
        rank_steps = [s for s in t["steps"] if s["rank"] is not None]
        self.assertEqual(len(rank_steps), 4 * 3 + 3 * 3)
        for s in rank_steps:
            spawn = t["spawns"][s["spawn"]]
            self.assertEqual(s["world_size"], spawn["world_size"])
            self.assertTrue(0 <= s["rank"] < s["world_size"])
            n = len(spawn["stack"])
            self.assertEqual(s["stack"][:n], spawn["stack"], "a rank's stack starts with the parent's")
            self.assertEqual(s["stack"][n]["function"], "worker")
        # The quiet spawn made no steps.
        self.assertFalse([s for s in rank_steps if s["spawn"] == 1])

    def test_each_rank_says_its_lines_in_order(self):
        t = tracecheck.load(self.path)
        for spawn, world in ((0, 4), (2, 3)):
            for r in range(world):
                said = [s["renderings"][0]["data"] for s in t["steps"]
                        if s["spawn"] == spawn and s["rank"] == r]
                expect = ["rank %d round 0" % r, "rank %d round 1" % r]
                self.assertEqual(said[:2], expect)
                total = sum(range(4)) * world + 4 * sum(range(world))   # sum over ranks of [0,1,2,3]+rank
                self.assertRegex(said[2], r"^sum %d/%d: tensor\(\[" % (r, world))
                values = [float(v) for v in re.findall(r"-?\d+\.", said[2].split("[")[1])]
                self.assertEqual(sum(values), total)

    def test_steps_are_in_the_order_they_happened(self):
        t = tracecheck.load(self.path)
        times = [s["time"] for s in t["steps"]]
        self.assertEqual(times, sorted(times))
        texts = [r["data"] for s in t["steps"] for r in s["renderings"]]
        # Round 1 of any rank comes after round 0 of every rank: a barrier separates them.
        first = [i for i, x in enumerate(texts) if re.match(r"rank \d round 1", x)]
        zero = [i for i, x in enumerate(texts) if re.match(r"rank \d round 0", x)]
        self.assertLess(max(zero[:4]), min(first[:4]))
        self.assertLess(texts.index("before the spawns"), zero[0])
        self.assertLess(max(first[:4]), texts.index("between"))
        self.assertEqual(texts[-1], "after the spawns")


class RankFailures(Base):
    """Each case: the exit status, the failing rank, words of its error, and
    the marker of the line it must name."""

    def fail_case(self, case, env=None):
        e = {"SPAWN_FAIL": case}
        e.update(env or {})
        rc, out, err = self.run_fixture("spawn_fail", e)
        self.assertEqual(rc, 1, "case %s: status %d\n%s" % (case, rc, err))
        path = os.path.join(self.out, "spawn_fail.failed.json")
        self.assertTrue(os.path.exists(path), err)
        t = tracecheck.validate(path)
        self.assertEqual(t["meta"]["status"], "failed")
        self.assertEqual(self.leftovers(), [], "ranks left running after case %s" % case)
        self.assertEqual(glob.glob("/dev/shm/lectern-%d-*" % self.pid), [])
        self.assertNotRegex(out + err, OPEN_MPI_TEXT)
        return t, err

    def leftovers(self):
        binary = fixture("spawn_fail")
        deadline = time.monotonic() + 5
        while rank_processes(binary) and time.monotonic() < deadline:
            time.sleep(0.1)
        return rank_processes(binary)

    def rank_error(self, t, rank):
        errs = [(s, r["data"]) for s in t["steps"] for r in s["renderings"]
                if r["type"] == "error" and s["rank"] == rank]
        self.assertTrue(errs, "no error step for rank %d" % rank)
        return errs[-1]

    def check_rank_failure(self, case, world, rank, words, marker, env=None, where="tests/fixtures/spawn_fail.c"):
        t, err = self.fail_case(case, env)
        step, msg = self.rank_error(t, rank)
        line = line_of(os.path.join(ROOT, where), marker)
        self.assertEqual((step["stack"][-1]["path"], step["stack"][-1]["line"]), (where, line), msg)
        self.assertEqual(step["world_size"], world)
        self.assertEqual(step["spawn"], 0)
        self.assertIn(words, msg)
        self.assertTrue(msg.startswith("%s:%d: rank %d of %d" % (where, line, rank, world)), msg)
        self.assertEqual(t["spawns"][0]["status"], "failed")
        # Every rank's first step, made before the failure, is kept.
        starts = {s["rank"] for s in t["steps"] for r in s["renderings"]
                  if r["data"].startswith("rank %d of %d starts" % (s["rank"] or 0, world))}
        self.assertEqual(starts, set(range(world)))
        # The lecture stops at the spawn: nothing after it ran.
        texts = [r["data"] for s in t["steps"] for r in s["renderings"]]
        self.assertNotIn("after the spawn", texts)
        self.assertIn("rank %d" % rank, err)
        return t

    def test_segfault(self):
        t = self.check_rank_failure("segv", 4, 2, "died with SIGSEGV", "MARK:segv", where=SPAWN_CASES)
        texts = [r["data"] for s in t["steps"] for r in s["renderings"]]
        self.assertFalse([x for x in texts if "should not get here" in x])
        self.assertLess(self.seconds, 30)

    def test_exit_status(self):
        self.check_rank_failure("exit", 2, 1, "exited with status 3", "MARK:exit")

    def test_abort(self):
        self.check_rank_failure("abort", 2, 0, "died with SIGABRT", "MARK:abort")

    def test_killed_without_a_word(self):
        # SIGKILL cannot be caught: the line is the last one the rank reported.
        self.check_rank_failure("kill", 3, 0, "too abruptly to say how", "MARK:kill-barrier")

    def test_deadlock_is_named_long_before_the_timeout(self):
        t, err = self.fail_case("deadlock", {"LECTERN_TIMEOUT": "60"})
        line = line_of(os.path.join(ROOT, SPAWN_CASES), "MARK:deadlock")
        for rank in (0, 1):
            step, msg = self.rank_error(t, rank)
            self.assertEqual((step["stack"][-1]["path"], step["stack"][-1]["line"]), (SPAWN_CASES, line), msg)
            self.assertIn("deadlock: rank %d of 2 waits in dist_recv()" % rank, msg)
            self.assertNotIn("no progress", msg)
        texts = [r["data"] for s in t["steps"] for r in s["renderings"]]
        self.assertIn("rank 0 waits for the other", texts)
        self.assertIn("rank 1 waits for the other", texts)
        self.assertLess(self.seconds, 30)

    def test_collective_with_wrong_shapes_names_the_line(self):
        t, err = self.fail_case("shape")
        step, msg = self.rank_error(t, 0)
        self.assertEqual(step["stack"][-1]["line"], line_of(FAIL_SRC, "MARK:shape"))
        msgs = [r["data"] for s in t["steps"] for r in s["renderings"] if r["type"] == "error"]
        self.assertTrue([m for m in msgs if "input has 8 elements, output 3" in m], msgs)


class BadArguments(Base):
    def check(self, case, words, marker):
        rc, out, err = self.run_fixture("spawn_fail", {"SPAWN_FAIL": case})
        self.assertEqual(rc, 1, err)
        t = tracecheck.validate(os.path.join(self.out, "spawn_fail.failed.json"))
        errs = [(s, r["data"]) for s in t["steps"] for r in s["renderings"] if r["type"] == "error"]
        self.assertTrue(errs, err)
        step, msg = errs[-1]
        line = line_of(FAIL_SRC, marker)
        self.assertEqual(step["stack"][-1]["line"], line)
        self.assertTrue(msg.startswith("tests/fixtures/spawn_fail.c:%d: " % line), msg)
        self.assertIn(words, msg)
        return t

    def test_world_size_zero(self):
        t = self.check("world0", "world_size 0 is out of range", "MARK:world0")
        self.assertEqual(t["spawns"], [])   # refused before anything started

    def test_world_size_above_the_limit(self):
        self.check("world17", "world_size 65 is out of range: 1 to 64", "MARK:world17")

    def test_null_function(self):
        self.check("nullfn", "the function to run is NULL", "MARK:nullfn")

    def test_null_args_with_a_size(self):
        self.check("nullargs", "args is NULL but args_size is 8", "MARK:nullargs")

    def test_args_too_large(self):
        self.check("bigargs", "exceed the limit", "MARK:bigargs")

    def test_spawn_inside_a_rank(self):
        rc, out, err = self.run_fixture("spawn_fail", {"SPAWN_FAIL": "nested"})
        self.assertEqual(rc, 1, err)
        t = tracecheck.validate(os.path.join(self.out, "spawn_fail.failed.json"))
        line = line_of(FAIL_SRC, "MARK:nested")
        errs = [(s, r["data"]) for s in t["steps"] for r in s["renderings"]
                if r["type"] == "error" and s["rank"] == 0]
        self.assertTrue(errs, err)
        for step, msg in errs:   # the rank's own error, then how it ended: both at its line
            self.assertEqual(step["stack"][-1]["line"], line, msg)
        self.assertIn("spawn() inside a spawned rank", errs[0][1])
        self.assertIn("rank 0 of 1 exited with status 1", errs[-1][1])

    def test_bad_spawn_after_a_good_one(self):
        t = self.check("late", "world_size 65 is out of range", "MARK:late")
        self.assertEqual([s["status"] for s in t["spawns"]], ["ok"])

    def test_bad_pool_size_setting(self):
        self.refused("spawn_fail", {"SPAWN_FAIL": "ok", "LECTERN_POOL_MIN": "0"}, "LECTERN_POOL_MIN='0'")

    def test_bad_timeout_setting(self):
        self.refused("spawn_fail", {"SPAWN_FAIL": "ok", "LECTERN_TIMEOUT": "soon"}, "LECTERN_TIMEOUT='soon'")


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Pool(Base):
    """The ranks are a pool of processes reused from one spawn to the next
    (tests/fixtures/spawn_pool.c)."""

    def pool_case(self, case):
        rc, out, err = self.run_fixture("spawn_pool", {"SPAWN_POOL": case})
        self.assertEqual(rc, 0, err)
        self.assertNotRegex(out + err, OPEN_MPI_TEXT)
        return tracecheck.validate(os.path.join(self.out, "spawn_pool.json")), out, err

    def test_every_spawn_sees_the_globals_as_at_program_start(self):
        t, out, err = self.pool_case("globals")
        texts = [(s["rank"], s["spawn"], r["data"]) for s in t["steps"] for r in s["renderings"]]
        # The parent is a fresh process: its first rand() and randn() are what
        # a fresh rank must draw too (glibc's rand() starts from seed 1).
        parent = [x for r, _, x in texts if r is None and x.startswith("parent ")][0]
        fresh_draws = parent[len("parent "):]
        self.assertTrue(fresh_draws.startswith("rand=1804289383 "), parent)
        seen = [(sp, r, x) for r, sp, x in texts if r is not None]
        self.assertEqual(sorted((sp, r) for sp, r, _ in seen),
                         [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (2, 0)])
        for sp, r, x in seen:
            # Each spawn changed every one of these; the next saw them as the
            # source starts them (counter = 42 was the parent's own change).
            self.assertEqual(x, "rank %d sees counter=7 scale=1.5 label=start table=4 calls=1 "
                                "remembered=NULL %s" % (r, fresh_draws), "spawn %d" % sp)

    def test_a_ranks_printf_reaches_the_console(self):
        t, out, err = self.pool_case("printf")
        for world in (2, 3):
            for r in range(world):
                self.assertIn("printf from rank %d of %d\n" % (r, world), out)
                self.assertIn("stderr from rank %d of %d\n" % (r, world), err)

    def interactive(self, case, on_prompt):
        """Runs the fixture; at each prompt line on its stdout calls
        on_prompt(line, binary) and answers on its stdin."""
        e = dict(os.environ, SPAWN_POOL=case)
        binary = fixture("spawn_pool")
        p = subprocess.Popen([binary, "--out", self.out, "--quiet"], env=e, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            on_prompt(line.strip(), binary)
            p.stdin.write("go\n")
            p.stdin.flush()
            out, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 0, err)
        self.assertNotRegex(out + err, OPEN_MPI_TEXT)
        deadline = time.monotonic() + 5
        while rank_processes(binary) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(rank_processes(binary), [], "pool ranks left running")
        return tracecheck.validate(os.path.join(self.out, "spawn_pool.json"))

    # Under the sanitizers, make test's quick scope leaves this one to make
    # test-all: growing the pool is the code of the other Pool cases here
    # (which run), and sixteen sanitized ranks starting on two cores are a
    # sixth of that pass's time; its CPU bound is the normal build's to show.
    @unittest.skipIf(os.environ.get("LECTERN_BUILD") == "build-asan" and os.environ.get("LECTERN_TEST_SCOPE") == "quick",
                     "sixteen sanitized ranks: make test-all runs it")
    def test_sixteen_ranks_and_an_idle_pool_costs_nothing(self):
        used = {}

        def watch(line, binary):
            self.assertEqual(line, "idle")
            pids = rank_processes(binary)
            self.assertEqual(len(pids), 16, "the pool grew to 16 ranks")
            before = sum(cpu_seconds(pid) for pid in pids)
            time.sleep(1.0)
            used["cpu"] = sum(cpu_seconds(pid) for pid in pids) - before

        t = self.interactive("sixteen", watch)
        # 16 ranks spinning in MPI would burn the machine's 2 cores for the
        # whole second (about 2 s of CPU); idle ranks blocked in a read burn
        # none. 0.3 s leaves room for a loaded machine's accounting noise and
        # Open MPI's own housekeeping threads without letting a spinning pool
        # (or even one spinning rank, about 1 s) pass.
        self.assertLess(used["cpu"], 0.3)
        sums = {(s["world_size"], s["rank"]): s["renderings"][0]["data"] for s in t["steps"]
                if s["rank"] is not None}
        self.assertEqual(len([k for k in sums if k[0] == 16]), 16)
        for (world, rank), text in sums.items():
            self.assertEqual(text, "rank %d of %d: sum %d" % (rank, world, world * (world - 1) // 2))
        self.assertEqual([s["status"] for s in t["spawns"]], ["ok"] * 3)

    def test_a_rank_that_died_between_spawns_is_replaced(self):
        def kill_one(line, binary):
            self.assertEqual(line, "pool up")
            pids = rank_processes(binary)
            self.assertEqual(len(pids), 4)
            os.kill(pids[-1], signal.SIGKILL)
            # The kill lands when the kernel next runs the process, and its
            # socket closes when the last of its threads is gone: wait until
            # mpirun has reaped it before the lecture goes on.
            deadline = time.monotonic() + 10
            while os.path.exists("/proc/%d" % pids[-1]) and time.monotonic() < deadline:
                time.sleep(0.01)

        t = self.interactive("revive", kill_one)
        fours = [s["renderings"][0]["data"] for s in t["steps"] if s["world_size"] == 4]
        self.assertEqual(sorted(fours), ["rank %d of 4: sum 6" % r for r in range(4)])


class LectureCrash(Base):
    def test_a_crash_of_the_lecture_stops_its_pool(self):
        rc, out, err = self.run_fixture("crash_fixture", {"LECTERN_FIXTURE_CRASH": "segv",
                                                          "LECTERN_FIXTURE_SPAWN": "1"})
        self.assertEqual(rc, 1, err)
        t = tracecheck.validate(os.path.join(self.out, "crash_fixture.failed.json"))
        texts = [r["data"] for s in t["steps"] for r in s["renderings"]]
        self.assertIn("rank 1 of 2 is up", texts)
        self.assertIn("SIGSEGV", texts[-1])
        binary = fixture("crash_fixture")
        deadline = time.monotonic() + 5
        while rank_processes(binary) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(rank_processes(binary), [], "pool ranks outlived the lecture")
        self.assertNotRegex(out + err, OPEN_MPI_TEXT)


class ForcedBackend(Base):
    """LECTERN_BACKEND=nccl where it cannot work is an error at the spawn()
    line, naming what is missing."""

    def nccl_case(self, env):
        e = {"LECTERN_BACKEND": "nccl"}
        e.update(env)
        rc, out, err = self.run_fixture("spawn_basic", e)
        path = os.path.join(self.out, "spawn_basic.failed.json")
        if rc == 0:
            t = tracecheck.load(os.path.join(self.out, "spawn_basic.json"))
            if t["meta"]["gpus"] >= 4:
                self.skipTest("this machine has a GPU for each of 4 ranks")
        self.assertEqual(rc, 1, err)
        t = tracecheck.validate(path)
        errs = [(s, r["data"]) for s in t["steps"] for r in s["renderings"] if r["type"] == "error"]
        self.assertTrue(errs, err)
        self.assertNotRegex(out + err, OPEN_MPI_TEXT)
        return t, errs, err

    def test_without_a_gpu_per_rank_it_fails_before_any_rank_starts(self):
        t, errs, err = self.nccl_case({})
        line = line_of(BASIC_SRC, "spawn(worker, 4")
        step, msg = errs[-1]
        self.assertEqual(step["stack"][-1]["line"], line)
        self.assertIsNone(step["rank"])
        gpus = t["meta"]["gpus"]
        if "build with CUDA" not in msg:   # a CPU-only build says that instead
            self.assertTrue(msg.startswith("tests/fixtures/spawn_basic.c:%d: LECTERN_BACKEND=nccl needs one GPU "
                                           "per rank: 4 ranks, %d GPU%s" % (line, gpus, "" if gpus == 1 else "s")),
                            msg)
        self.assertEqual(t["spawns"], [])   # refused before anything started
        # Generous: the check itself takes milliseconds; 5 s is the promise.
        self.assertLess(self.seconds, 5)

    def test_a_gpu_a_rank_cannot_use_is_named(self):
        # With a hostfile the lecture cannot count the other hosts' GPUs, so
        # each rank checks its own: here (no GPU) every rank fails to get one.
        hosts = os.path.join(self.out, "hosts")
        with open(hosts, "w") as f:
            f.write("%s slots=4\n" % os.uname().nodename)
        t, errs, err = self.nccl_case({"LECTERN_HOSTFILE": hosts})
        line = line_of(BASIC_SRC, "spawn(worker, 4")
        msgs = [m for _, m in errs]
        if any("build with CUDA" in m for m in msgs):
            self.skipTest("a CPU-only build refuses NCCL in the lecture itself")
        named = [(s, m) for s, m in errs if re.match(r"rank (\d) of 4 cannot use cuda:\1: ", m)]
        self.assertTrue(named, msgs)
        for s, m in named:
            self.assertEqual(s["stack"][-1]["line"], line)   # at the spawn() line
        self.assertIn("spawn of 4 ranks failed", msgs[-1])


class Hostfile(Base):
    def test_a_hostfile_naming_this_machine(self):
        hosts = os.path.join(self.out, "hosts")
        with open(hosts, "w") as f:
            f.write("%s slots=4\n" % os.uname().nodename)
        rc, out, err = self.run_fixture("spawn_basic", {"LECTERN_HOSTFILE": hosts})
        self.assertEqual(rc, 0, err)
        t = tracecheck.load(os.path.join(self.out, "spawn_basic.json"))
        self.assertEqual(len([s for s in t["steps"] if s["rank"] is not None]), 21)
        # One host (over TCP all the same): no per-rank hosts for the viewer.
        self.assertTrue(all("hosts" not in s for s in t["spawns"]), t["spawns"])

    def test_a_host_that_does_not_exist_fails_cleanly(self):
        hosts = os.path.join(self.out, "hosts")
        with open(hosts, "w") as f:
            f.write("no-such-host.invalid slots=4\n")
        rc, out, err = self.run_fixture("spawn_basic", {"LECTERN_HOSTFILE": hosts}, timeout=120)
        self.assertEqual(rc, 1, err)
        self.assertIn("Open MPI could not start them", err)
        self.assertTrue(os.path.exists(os.path.join(self.out, "spawn_basic.failed.json")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
