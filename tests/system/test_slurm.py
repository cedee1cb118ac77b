"""A lecture inside a Slurm allocation, on a two-node cluster the test makes.

The test starts a Slurm cluster of its own on this machine: a munge key it
makes, munged on a socket in a temp folder, and slurmctld and slurmd in the
foreground with a slurm.conf written there (its own ports, state and spool
folders; two nodes, both this machine: NODE under its short host name and
NODE_B, whose slurmd runs in a UTS namespace of its own under that host name,
8 CPUs declared on each so that 4 tasks fit on 2 cores). Nothing in /etc is
read or changed: every Slurm command gets SLURM_CONF, and slurm.conf names
the munge socket.

Checks (tests/fixtures/slurm_fixture.c spawns 2 ranks, then
SLURM_FIXTURE_WORLD):
- `salloc -n 4`: 4 ranks all-reduce to the right sum, each in the allocation's
  job (its SLURM_JOB_ID), the spawn's note and its "slurm" entry name the job
  and its 4 tasks. Oversubscription is off in this run (the test removes
  OMPI_MCA_rmaps_base_oversubscribe, and lectern does not set it inside an
  allocation), so 4 ranks on this 2-core machine start only because mpirun
  took its slots from the allocation;
- `sbatch -n 3` with a spawn of 3: the pool, 4 ranks elsewhere, is
  capped at the allocation's 3 tasks (mpirun would refuse a fourth) and the
  batch job's lecture passes;
- `salloc -N 2 --ntasks-per-node=2`: mpirun starts its daemon on NODE_B
  through srun; 2 ranks on each host name, right sums, the spawn's hosts;
- `salloc -n 2` with a spawn of 4: the lecture stops at the spawn() line with
  an error naming the allocation's 2 tasks, its job and the spawn's size,
  exit 1, the steps before kept in its .failed.json.

Needs root and Debian's slurmctld, slurmd, slurm-client and munge
(`scripts/setup.sh test` installs them); skips saying what is missing. It
kills every process it started (and any left with its slurm.conf in their
environment) and removes its temp folder even when a check fails; at its
start it removes what a crashed earlier run left. Alone:
    python3 tests/system/test_slurm.py -v
"""
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tracecheck  # noqa: E402

ROOT = tracecheck.ROOT
FIXTURE = tracecheck.built("tests", "fixtures", "slurm_fixture")
FIXTURE_SRC = os.path.join(ROOT, "tests", "fixtures", "slurm_fixture.c")
PREFIX = "lectern-test-slurm-"
NODE = socket.gethostname().split(".")[0]
NODE_B = "lxslurm-b-%d" % os.getpid()   # the second node: this machine under another host name
NOTE = re.compile(r"rank (\d+)/(\d+) on (\S+) in job (\S+): sum (\S+) (\S+) (\S+) (\S+)")
TOOLS = {"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "salloc": "slurm-client",
         "sbatch": "slurm-client", "sinfo": "slurm-client", "scontrol": "slurm-client", "unshare": "util-linux"}


def why_not():
    """Why this machine cannot run the cluster, or None."""
    if os.geteuid() != 0:
        return "needs root (slurmd runs jobs as their user; the test's cluster runs as root)"
    missing = sorted({pkg for tool, pkg in TOOLS.items()
                      if not shutil.which(tool) and not os.access("/usr/sbin/" + tool, os.X_OK)})
    if missing:
        return "needs Debian's %s (scripts/setup.sh test installs them)" % " ".join(missing)
    if not os.path.exists(FIXTURE):
        return "%s is not built (make)" % FIXTURE
    return None


def tool(name):
    return shutil.which(name) or "/usr/sbin/" + name


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_naming(folder):
    """Pids of the processes whose command line or environment names
    `folder` (the daemons, and through SLURM_CONF every job and rank)."""
    found = []
    needle = folder.encode()
    for d in glob.glob("/proc/[0-9]*"):
        pid = int(os.path.basename(d))
        if pid == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                with open(os.path.join(d, part), "rb") as f:
                    if needle in f.read():
                        found.append(pid)
                        break
            except OSError:
                pass
    return found


def kill_processes_naming(folder):
    for _ in range(3):   # a job step may start a child while we kill
        pids = processes_naming(folder)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def remove_stale_runs():
    """Folders (and processes) of an earlier run that died before cleaning up."""
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), PREFIX + "*")):
        m = re.match(re.escape(PREFIX) + r"(\d+)-", os.path.basename(folder))
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            kill_processes_naming(folder)
            shutil.rmtree(folder, ignore_errors=True)


class Slurm(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = why_not()
        if reason:
            raise unittest.SkipTest(reason)
        remove_stale_runs()
        cls.tmp = tempfile.mkdtemp(prefix="%s%d-" % (PREFIX, os.getpid()))
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        # Everything that names the folder goes, last in first out: before
        # the folder is removed, after the daemons are stopped.
        cls.addClassCleanup(kill_processes_naming, cls.tmp)
        for sub in ("munge", "state", "log"):
            os.makedirs(os.path.join(cls.tmp, sub), mode=0o700)
        key = os.path.join(cls.tmp, "munge", "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(os.urandom(128))
        cls.sock = os.path.join(cls.tmp, "munge", "socket")
        cls.daemons = []
        cls.start_daemon("munged", [tool("munged"), "-F", "-f", "--key-file=" + key, "--socket=" + cls.sock,
                                    "--pid-file=" + os.path.join(cls.tmp, "munge", "pid"),
                                    "--log-file=" + os.path.join(cls.tmp, "log", "munged.log"),
                                    "--seed-file=" + os.path.join(cls.tmp, "munge", "seed")])
        cls.wait_for(lambda: os.path.exists(cls.sock), "munged's socket")
        cls.conf = os.path.join(cls.tmp, "slurm.conf")
        with open(cls.conf, "w") as f:
            f.write(slurm_conf(cls.tmp, cls.sock, free_port(), free_port(), free_port()))
        cls.env = {k: v for k, v in os.environ.items()
                   if not k.startswith("SLURM_") and k != "OMPI_MCA_rmaps_base_oversubscribe"}
        cls.env["SLURM_CONF"] = cls.conf
        cls.start_daemon("slurmctld", [tool("slurmctld"), "-D", "-i", "-f", cls.conf])
        cls.start_daemon("slurmd", [tool("slurmd"), "-D", "-N", NODE, "-f", cls.conf])
        # The second node's slurmd in a UTS namespace of its own, whose host
        # name is NODE_B: what it starts (mpirun's daemon, through srun) and
        # the ranks that daemon starts see another machine.
        cls.start_daemon("slurmd-b", [tool("unshare"), "--uts", "sh", "-c", 'hostname "$0" && exec "$1" -D -N "$0" -f "$2"',
                                      NODE_B, tool("slurmd"), cls.conf])

        def idle():
            p = subprocess.run([tool("sinfo"), "-h", "-N", "-o", "%N %T"], env=cls.env,
                               capture_output=True, text=True, timeout=20)
            return p.returncode == 0 and sorted(p.stdout.split()) == sorted([NODE, "idle", NODE_B, "idle"])
        cls.wait_for(idle, "both nodes to be idle in sinfo")

    @classmethod
    def start_daemon(cls, name, argv):
        log = open(os.path.join(cls.tmp, "log", name + ".out"), "w")
        cls.addClassCleanup(log.close)
        env = dict(os.environ, SLURM_CONF=os.path.join(cls.tmp, "slurm.conf"))
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        cls.daemons.append((name, p))
        cls.addClassCleanup(stop, p)

    @classmethod
    def wait_for(cls, ready, what, seconds=30):
        deadline = time.monotonic() + seconds
        while not ready():
            dead = [name for name, p in cls.daemons if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError("waiting for %s: %s\n%s" % (
                    what, "%s exited" % ", ".join(dead) if dead else "no luck in %d s" % seconds, cls.logs()))
            time.sleep(0.1)

    @classmethod
    def logs(cls):
        text = []
        for path in sorted(glob.glob(os.path.join(cls.tmp, "log", "*"))):
            with open(path, errors="replace") as f:
                text.append("== %s\n%s" % (os.path.basename(path), f.read()[-3000:]))
        return "\n".join(text)

    def setUp(self):
        self.out = tempfile.mkdtemp(prefix="out-", dir=self.tmp)

    def run_in(self, command, world, timeout=120):
        """`command` (salloc/sbatch arguments) running the fixture."""
        env = dict(self.env, SLURM_FIXTURE_WORLD=str(world))
        t0 = time.monotonic()
        try:
            p = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_processes_naming(self.out)
            raise
        self.seconds = time.monotonic() - t0
        return p

    def fixture_argv(self):
        return [FIXTURE, "--out", self.out, "--quiet"]

    def check_spawns(self, trace, world, tasks):
        job = None
        notes = [NOTE.search(r.get("data") or "") for s in trace["steps"] for r in s["renderings"]]
        notes = [m for m in notes if m]
        self.assertEqual(sorted((int(m.group(2)), int(m.group(1))) for m in notes),
                         sorted([(2, r) for r in range(2)] + [(world, r) for r in range(world)]))
        for m in notes:
            n = int(m.group(2))
            self.assertEqual([float(m.group(i)) for i in range(5, 9)], [n * (n + 1) / 2] * 4, m.group(0))
            self.assertEqual(m.group(3), socket.gethostname())
            job = job or m.group(4)
            self.assertEqual(m.group(4), job, "every rank in the same job")
        self.assertRegex(job, r"^\d+$", "the ranks ran in a Slurm job")
        self.assertEqual(len(trace["spawns"]), 2)
        for spawn in trace["spawns"]:
            self.assertEqual(spawn["status"], "ok")
            self.assertEqual(spawn["slurm"], {"job_id": job, "nodes": NODE, "tasks_per_node": str(tasks),
                                              "tasks": tasks})
            self.assertIn("in Slurm job %s's allocation: %d tasks on %s (SLURM_TASKS_PER_NODE=%d), placed by "
                          "mpirun, no hostfile" % (job, tasks, NODE, tasks), spawn["reason"])
        spawn_notes = [r["data"] for s in trace["steps"] for r in s["renderings"]
                       if (r.get("data") or "").startswith("spawn: ")]
        self.assertEqual(len(spawn_notes), 2)
        for text in spawn_notes:
            self.assertIn("Slurm job %s's allocation: %d tasks on %s" % (job, tasks, NODE), text)
        return job

    def test_1_salloc_four_ranks(self):
        p = self.run_in([tool("salloc"), "-n", "4", "-w", NODE, "--immediate=30", "-J", "lectern-test"] +
                        self.fixture_argv(), 4)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr + self.logs())
        trace = tracecheck.validate(os.path.join(self.out, "slurm_fixture.json"))
        job = self.check_spawns(trace, 4, 4)
        self.assertIn("Granted job allocation %s" % job, p.stderr)
        sys.stderr.write("[salloc -n 4: %.1f s] " % self.seconds)

    def test_2_sbatch_caps_the_pool_at_the_tasks(self):
        log = os.path.join(self.out, "job.out")
        # sbatch --wait polls every 2 s and more; scontrol, every 0.1 s.
        t0 = time.monotonic()
        p = self.run_in([tool("sbatch"), "--parsable", "-n", "3", "-w", NODE, "-J", "lectern-test", "-o", log,
                         "--chdir", ROOT,
                         "--wrap", " ".join(self.fixture_argv())], 3)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr + self.logs())
        submitted = p.stdout.strip().split(";")[0]
        state = ""
        while time.monotonic() - t0 < 120:
            q = subprocess.run([tool("scontrol"), "show", "job", "-o", submitted], env=self.env,
                               capture_output=True, text=True, timeout=20)
            state = q.stdout
            if re.search(r"JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)", state):
                break
            time.sleep(0.1)
        seconds = time.monotonic() - t0
        job_out = ""
        if os.path.exists(log):
            with open(log) as f:
                job_out = f.read()
        self.assertIn("JobState=COMPLETED", state, state + job_out + self.logs())
        self.assertIn("ExitCode=0:0", state)
        trace = tracecheck.validate(os.path.join(self.out, "slurm_fixture.json"))
        job = self.check_spawns(trace, 3, 3)
        self.assertEqual(job, submitted)
        sys.stderr.write("[sbatch -n 3: %.1f s] " % seconds)

    def test_4_two_nodes(self):
        # 2 tasks on each node: mpirun starts its daemon on NODE_B with srun,
        # and the ranks there reach the lecture over TCP.
        p = self.run_in([tool("salloc"), "-N", "2", "--ntasks-per-node=2", "--immediate=30", "-J", "lectern-test"] +
                        self.fixture_argv(), 4)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr + self.logs())
        trace = tracecheck.validate(os.path.join(self.out, "slurm_fixture.json"))
        notes = [NOTE.search(r.get("data") or "") for s in trace["steps"] for r in s["renderings"]]
        notes = [m for m in notes if m]
        self.assertEqual(len(notes), 6)
        job = notes[0].group(4)
        host_of = {}
        for m in notes:
            n = int(m.group(2))
            self.assertEqual([float(m.group(i)) for i in range(5, 9)], [n * (n + 1) / 2] * 4, m.group(0))
            self.assertEqual(m.group(4), job)
            if n == 4:
                host_of[int(m.group(1))] = m.group(3)
        # By slot, the node mpirun runs on (the lecture's) first.
        self.assertEqual([host_of[r] for r in range(4)], [socket.gethostname()] * 2 + [NODE_B] * 2, host_of)
        second = trace["spawns"][1]
        nodes = second["slurm"]["nodes"]   # Slurm's order
        self.assertEqual(sorted(nodes.split(",")), sorted([NODE, NODE_B]))
        self.assertEqual(second["slurm"], {"job_id": job, "nodes": nodes, "tasks_per_node": "2(x2)", "tasks": 4})
        self.assertIn("in Slurm job %s's allocation: 4 tasks on %s (SLURM_TASKS_PER_NODE=2(x2))" % (job, nodes),
                      second["reason"])
        # The spawn's hosts: each rank's as it named itself, with the address it connected from.
        self.assertEqual([h.split(" (")[0] for h in second["hosts"]], [host_of[r] for r in range(4)])
        sys.stderr.write("[salloc -N 2: %.1f s] " % self.seconds)

    def test_3_a_spawn_larger_than_the_allocation(self):
        p = self.run_in([tool("salloc"), "-n", "2", "-w", NODE, "--immediate=30", "-J", "lectern-test"] +
                        self.fixture_argv(), 4)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        trace = tracecheck.validate(os.path.join(self.out, "slurm_fixture.failed.json"))
        job = re.search(r"Granted job allocation (\d+)", p.stderr).group(1)
        errors = [(s, r["data"]) for s in trace["steps"] for r in s["renderings"] if r["type"] == "error"]
        self.assertEqual(len(errors), 1, errors)
        step, msg = errors[0]
        line = tracecheck.line_of(FIXTURE_SRC, "MARK:second")
        self.assertEqual(step["stack"][-1]["line"], line)
        self.assertTrue(msg.startswith("tests/fixtures/slurm_fixture.c:%d: " % line), msg)
        self.assertIn("spawn(): world_size 4 is more than the 2 tasks of Slurm job %s's allocation "
                      "(SLURM_TASKS_PER_NODE=2 on %s)" % (job, NODE), msg)
        # The first spawn (2 ranks) ran and is kept; the second never started.
        self.assertEqual([s["status"] for s in trace["spawns"]], ["ok"])
        texts = [r.get("data") for s in trace["steps"] for r in s["renderings"]]
        self.assertIn("before the spawns", texts)
        self.assertEqual(len([t for t in texts if t and NOTE.search(t)]), 2)


class AllocationRead(unittest.TestCase):
    """SLURM_TASKS_PER_NODE read as Open MPI reads it, without a cluster: an
    allocation's variables set by hand, a spawn larger than its tasks refused
    before anything starts."""

    def refused(self, tasks_per_node, nodes, world):
        if not os.path.exists(FIXTURE):
            self.skipTest("%s is not built (make)" % FIXTURE)
        out = tempfile.mkdtemp(prefix=PREFIX + "read-")
        self.addCleanup(shutil.rmtree, out, ignore_errors=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="node[1-%d]" % nodes, SLURM_JOB_NUM_NODES=str(nodes),
                   SLURM_TASKS_PER_NODE=tasks_per_node, SLURM_FIXTURE_ONE="1", SLURM_FIXTURE_WORLD=str(world))
        p = subprocess.run([FIXTURE, "--out", out, "--quiet"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        trace = tracecheck.validate(os.path.join(out, "slurm_fixture.failed.json"))
        self.assertEqual(trace["spawns"], [])
        return [r["data"] for s in trace["steps"] for r in s["renderings"] if r["type"] == "error"][-1]

    def test_repeated_counts(self):
        msg = self.refused("2(x3),1", 4, 8)
        self.assertIn("world_size 8 is more than the 7 tasks of Slurm job 4242's allocation "
                      "(SLURM_TASKS_PER_NODE=2(x3),1 on node[1-4])", msg)

    def test_plain_counts(self):
        msg = self.refused("3,1", 2, 5)
        self.assertIn("world_size 5 is more than the 4 tasks of Slurm job 4242's allocation", msg)
        self.assertIn("ask Slurm for at least 5 (salloc -n 5, sbatch -n 5)", msg)


def stop(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def slurm_conf(folder, munge_socket, ctld_port, port_a, port_b):
    """Two nodes, both this machine (NODE_B under another host name, its
    slurmd on another port); root runs everything; no cgroups, no accounting."""
    return "\n".join([
        "ClusterName=lxtest",
        "SlurmctldHost=%s(127.0.0.1)" % NODE,
        "SlurmctldPort=%d" % ctld_port,
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "AuthInfo=socket=%s" % munge_socket,
        "SlurmUser=root",
        "SlurmdUser=root",
        "StateSaveLocation=%s/state" % folder,
        "SlurmdSpoolDir=%s/spool-%%n" % folder,
        "SlurmctldPidFile=%s/slurmctld.pid" % folder,
        "SlurmdPidFile=%s/slurmd-%%n.pid" % folder,
        "SlurmctldLogFile=%s/log/slurmctld.log" % folder,
        "SlurmdLogFile=%s/log/slurmd-%%n.log" % folder,
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/builtin",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "ReturnToService=2",
        # 8 CPUs declared on 2: slurmd takes the declared count.
        "SlurmdParameters=config_overrides",
        "NodeName=%s NodeAddr=127.0.0.1 Port=%d CPUs=8 State=UNKNOWN" % (NODE, port_a),
        "NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=8 State=UNKNOWN" % (NODE_B, NODE_B, port_b),
        "PartitionName=lx Nodes=%s,%s Default=YES MaxTime=INFINITE State=UP" % (NODE, NODE_B),
        ""])


if __name__ == "__main__":
    unittest.main()
