"""Two hosts on one machine: lectern across two network namespaces.

The test builds a second host here: two network namespaces joined by a veth
pair with private addresses (10.213.33.1 and .2, inside the namespaces only;
the machine's own addresses and routes are not touched), an sshd of the test's
own in the second one (its own config, host key and authorized key in a temp
folder, in a UTS namespace of its own so that it has another host name). The
lecture runs in the first namespace with a hostfile naming both addresses, so
Open MPI starts half the ranks through ssh on the "other machine" and those
ranks connect back to the lecture over TCP (docs/multinode.md).

Checks: 8 ranks, 4 on each host, all-reduce to the right sum; a host that
stopped answering makes the spawn fail within 30 s with an error naming it,
the trace until then kept; a connection to the lecture's port from the other
host with a forged hello (a wrong token) is closed and the spawn goes on; a
deadlock across the hosts, and a rank on the second host that returned
before the others' last collective, are named by the detector, not the
timeout; lecture_08's bucketed async all-reduces (a fixture, 20 rounds) and
lecture_08 --quick itself (not in make test's quick scope) pass across the
two hosts; a host whose link goes down while the pool is up is named within
30 s, one error step per rank there, the trace kept.

Needs root, `ip netns`, unshare and /usr/sbin/sshd (Debian: openssh-server);
skips saying which is missing otherwise. Alone:
    python3 tests/system/test_two_hosts.py -v
"""
import glob
import json
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

PREFIX = "lxt2h-"             # every namespace this test makes starts so
NS_A = "%sa-%d" % (PREFIX, os.getpid())
NS_B = "%sb-%d" % (PREFIX, os.getpid())
VETH_A = "l2ha%d" % (os.getpid() % 10**7)   # at most 15 characters
VETH_B = "l2hb%d" % (os.getpid() % 10**7)
ADDR_A = "10.213.33.1"
ADDR_B = "10.213.33.2"
HOST_B = "lectern-b-%d" % os.getpid()
FIXTURE = tracecheck.built("tests", "fixtures", "two_hosts_fixture")
NOTE = re.compile(r"rank (\d+)/(\d+) on (\S+): sum (\S+) (\S+) (\S+) (\S+)")


def sh(*argv, check=True, timeout=30):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=check)


def why_not():
    """Why this machine cannot build the two hosts, or None."""
    if os.geteuid() != 0:
        return "needs root (to make network namespaces)"
    for tool in ("ip", "unshare", "ssh", "ssh-keygen"):
        if not shutil.which(tool):
            return "needs %s on the PATH" % tool
    if not os.access("/usr/sbin/sshd", os.X_OK):
        return "needs /usr/sbin/sshd (Debian: openssh-server)"
    if not os.path.exists(FIXTURE):
        return "%s is not built (make)" % FIXTURE
    probe = "%sprobe-%d" % (PREFIX, os.getpid())
    p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if p.returncode != 0:
        return "`ip netns add` does not work here: %s" % p.stderr.strip()
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def kill_namespace(ns):
    """Kills every process in network namespace `ns` and deletes it (its
    veth end goes with it, and so does the peer)."""
    p = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    for pid in p.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def remove_stale_namespaces():
    """Namespaces (and the processes left in them) and temp folders of an
    earlier run of this test that died before cleaning up (its pid is gone)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(re.escape(PREFIX) + r"[a-z]+-(\d+)$", name)
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            kill_namespace(name)
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), "lectern-test-two-hosts-*")):
        m = re.match(r"lectern-test-two-hosts-(\d+)-", os.path.basename(folder))
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            shutil.rmtree(folder, ignore_errors=True)


class TwoHosts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = why_not()
        if reason:
            raise unittest.SkipTest(reason)
        remove_stale_namespaces()
        cls.tmp = tempfile.mkdtemp(prefix="lectern-test-two-hosts-%d-" % os.getpid())
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        # Namespaces and the veth pair; deleting the namespaces removes both ends.
        for ns in (NS_A, NS_B):
            sh("ip", "netns", "add", ns)
            cls.addClassCleanup(kill_namespace, ns)
        sh("ip", "link", "add", VETH_A, "type", "veth", "peer", "name", VETH_B)
        # Should a move below fail, the pair must not stay in the machine's namespace.
        cls.addClassCleanup(subprocess.run, ["ip", "link", "del", VETH_A], capture_output=True)
        sh("ip", "link", "set", VETH_A, "netns", NS_A)
        sh("ip", "link", "set", VETH_B, "netns", NS_B)
        for ns, dev, addr in ((NS_A, VETH_A, ADDR_A), (NS_B, VETH_B, ADDR_B)):
            sh("ip", "-n", ns, "addr", "add", addr + "/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", dev, "up")
        # Keys: the client's (authorized in B) and B's host key.
        cls.key = os.path.join(cls.tmp, "id")
        host_key = os.path.join(cls.tmp, "host_key")
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", cls.key)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key)
        shutil.copy(cls.key + ".pub", os.path.join(cls.tmp, "authorized_keys"))
        config = os.path.join(cls.tmp, "sshd_config")
        with open(config, "w") as f:
            f.write("ListenAddress %s\nPort 22\nHostKey %s\nAuthorizedKeysFile %s\n"
                    "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                    "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n"
                    "UseDNS no\nMaxStartups 100\nMaxSessions 100\n"
                    % (ADDR_B, host_key, os.path.join(cls.tmp, "authorized_keys")))
        os.makedirs("/run/sshd", exist_ok=True)   # sshd's privilege separation folder
        cls.sshd_log = open(os.path.join(cls.tmp, "sshd.log"), "w")
        cls.addClassCleanup(cls.sshd_log.close)
        cls.sshd = subprocess.Popen(
            ["ip", "netns", "exec", NS_B, "unshare", "--uts", "sh", "-c",
             'hostname "$0" && exec /usr/sbin/sshd -D -e -f "$1"', HOST_B, config],
            stdout=cls.sshd_log, stderr=subprocess.STDOUT, start_new_session=True)
        cls.addClassCleanup(cls.stop_sshd)
        cls.ssh_args = ("-i %s -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                        "-o BatchMode=yes -o LogLevel=ERROR -o ConnectTimeout=10" % cls.key)
        deadline = time.monotonic() + 30
        while True:
            p = subprocess.run(["ip", "netns", "exec", NS_A, "ssh"] + cls.ssh_args.split() +
                               ["root@" + ADDR_B, "hostname"], capture_output=True, text=True, timeout=60)
            if p.returncode == 0 and p.stdout.strip() == HOST_B:
                break
            if time.monotonic() > deadline or cls.sshd.poll() is not None:
                with open(os.path.join(cls.tmp, "sshd.log")) as f:
                    log = f.read()
                raise RuntimeError("ssh from %s to %s does not work: %s\nsshd: %s"
                                   % (NS_A, ADDR_B, p.stderr.strip(), log))
            time.sleep(0.2)
        cls.hosts = os.path.join(cls.tmp, "hosts")
        with open(cls.hosts, "w") as f:
            f.write("%s slots=4\n%s slots=4\n" % (ADDR_A, ADDR_B))

    @classmethod
    def stop_sshd(cls):
        if cls.sshd.poll() is None:
            os.killpg(cls.sshd.pid, signal.SIGKILL)
        cls.sshd.wait()

    def setUp(self):
        self.out = tempfile.mkdtemp(prefix="out-", dir=self.tmp)

    def start(self, extra=None):
        """The fixture in namespace A with the hostfile; a Popen."""
        env = dict(os.environ, LECTERN_HOSTFILE=self.hosts, LECTERN_LECTURE_HOST=ADDR_A,
                   OMPI_MCA_plm_rsh_agent="ssh", OMPI_MCA_plm_rsh_args=self.ssh_args)
        env.update(extra or {})
        return subprocess.Popen(["ip", "netns", "exec", NS_A, FIXTURE, "--out", self.out, "--quiet"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(self, p, timeout=180):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # mpirun has a process group of its own, and with a host gone it
            # can wait for minutes on its ssh: everything in A goes.
            p.kill()
            for pid in sh("ip", "netns", "pids", NS_A, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            p.communicate(timeout=30)
            raise
        return p.returncode, out, err

    def check_ranks(self, trace):
        notes = []
        for s in trace["steps"]:
            for r in s["renderings"]:
                m = NOTE.search(r.get("data") or "")
                if m:
                    notes.append(m)
        self.assertEqual(len(notes), 16, "8 ranks noted twice (two spawns)")
        where = {}
        for m in notes:
            self.assertEqual(m.group(2), "8")
            # rank r adds r+1: 1+2+...+8
            self.assertEqual([float(m.group(i)) for i in range(4, 8)], [36.0] * 4, m.group(0))
            where.setdefault(int(m.group(1)), set()).add(m.group(3))
        self.assertEqual(sorted(where), list(range(8)))
        hosts = {h for hs in where.values() for h in hs}
        self.assertEqual(hosts, {os.uname().nodename, HOST_B}, "ranks ran on both hosts")
        # The hostfile's order: the first 4 slots are A's.
        self.assertEqual({h for r in range(4) for h in where[r]}, {os.uname().nodename})
        self.assertEqual({h for r in range(4, 8) for h in where[r]}, {HOST_B})

    def test_1_eight_ranks_on_two_hosts(self):
        t0 = time.monotonic()
        rc, out, err = self.finish(self.start())
        seconds = time.monotonic() - t0
        self.assertEqual(rc, 0, err)
        path = os.path.join(self.out, "two_hosts_fixture.json")
        tracecheck.validate(path)
        trace = tracecheck.load(path)
        self.check_ranks(trace)
        for spawn in trace["spawns"]:   # each rank's host, for the viewer's rank headers
            hosts = spawn.get("hosts")
            self.assertIsNotNone(hosts, "a spawn over two hosts records them")
            self.assertEqual(len(hosts), 8)
            self.assertTrue(all(h.startswith(os.uname().nodename + " (" + ADDR_A + ")") for h in hosts[:4]), hosts)
            self.assertTrue(all(h == "%s (%s)" % (HOST_B, ADDR_B) for h in hosts[4:]), hosts)
        first = trace["spawns"][0]
        sys.stderr.write("[two hosts: lecture %.1f s; first spawn %.1f s (start-up %.1f s), second %.2f s] "
                         % (seconds, first["seconds"], first.get("startup_s", 0), trace["spawns"][1]["seconds"]))

    def test_2_a_stopped_host_fails_the_spawn(self):
        # The second machine "stops": its end of the wire goes down.
        sh("ip", "-n", NS_B, "link", "set", VETH_B, "down")
        self.addCleanup(sh, "ip", "-n", NS_B, "link", "set", VETH_B, "up")
        t0 = time.monotonic()
        rc, out, err = self.finish(self.start(), timeout=120)
        seconds = time.monotonic() - t0
        sys.stderr.write("[stopped host reported in %.1f s] " % seconds)
        self.assertNotEqual(rc, 0, err)
        self.assertLess(seconds, 30, err)
        self.assertIn("spawn of 8 ranks failed", err)
        self.assertIn(ADDR_B, err, "the error names the host")
        self.assertNotIn("\r", err, "ssh's line ends (\\r\\n) do not reach the message")
        failed = os.path.join(self.out, "two_hosts_fixture.failed.json")
        self.assertTrue(os.path.exists(failed), os.listdir(self.out))
        trace = tracecheck.load(failed)
        texts = [r.get("data") or "" for s in trace["steps"] for r in s["renderings"]]
        self.assertIn("before the first spawn", texts, "the steps before the spawn are kept")
        line = tracecheck.line_of(os.path.join(tracecheck.ROOT, "tests", "fixtures", "two_hosts_fixture.c"),
                                  "spawn(worker, 8")
        self.assertEqual(trace["steps"][-1]["stack"][-1]["line"], line, "stops at the spawn line")
        self.assertIn(ADDR_B, json.dumps(trace["steps"][-1]), "the error step names the host")

    def test_2b_a_host_stopped_while_the_pool_is_up(self):
        # The first spawn starts the pool on both hosts; B's wire goes down
        # before the second. Nothing closes the ranks' sockets then (TCP
        # keeps them for many minutes), and A's ranks wait in MPI for B's:
        # the lecture finds it by B's ranks falling silent (their board
        # relay, runtime/ranks/spawn_rank.c, speaks every 0.5 s while they
        # run; HOST_SILENCE is 10 s), not by its timeout (LECTERN_TIMEOUT,
        # set far above the 30 s allowed so that it cannot be what stops it).
        flag = os.path.join(self.out, "go")
        p = self.start({"TWO_HOSTS_PAUSE": flag, "LECTERN_TIMEOUT": "120"})
        t0 = time.monotonic()
        try:
            deadline = time.monotonic() + 90
            while not os.path.exists(flag + ".waiting") and time.monotonic() < deadline and p.poll() is None:
                time.sleep(0.05)
            self.assertTrue(os.path.exists(flag + ".waiting"), "the first spawn did not finish")
            sh("ip", "-n", NS_B, "link", "set", VETH_B, "down")
            self.addCleanup(sh, "ip", "-n", NS_B, "link", "set", VETH_B, "up")
            t0 = time.monotonic()
            open(flag, "w").close()
        finally:
            rc, out, err = self.finish(p, timeout=60)
        seconds = time.monotonic() - t0
        sys.stderr.write("[host stopped with the pool up: reported in %.1f s] " % seconds)
        self.assertNotEqual(rc, 0, err)
        self.assertLess(seconds, 30, err)
        self.assertIn("host " + HOST_B, err, "the error names the lost host")
        self.assertIn(ADDR_B, err, "and its address")
        self.assertNotIn("made no progress", err, "found as a lost host, not as a timeout")
        failed = os.path.join(self.out, "two_hosts_fixture.failed.json")
        self.assertTrue(os.path.exists(failed), os.listdir(self.out))
        trace = tracecheck.load(failed)
        texts = [r.get("data") or "" for s in trace["steps"] for r in s["renderings"]]
        self.assertIn("between the spawns", texts, "the steps before the spawn are kept")
        lost = [s for s in trace["steps"] if s.get("rank") is not None and "nothing heard from it" in json.dumps(s)]
        self.assertEqual(sorted(s["rank"] for s in lost), [4, 5, 6, 7], "one step per rank on the lost host")
        line = tracecheck.line_of(os.path.join(tracecheck.ROOT, "tests", "fixtures", "two_hosts_fixture.c"),
                                  "spawn(deadlock && ")
        self.assertEqual(trace["steps"][-1]["stack"][-1]["line"], line, "stops at the second spawn's line")

    def test_2c_a_deadlock_across_hosts_is_named(self):
        # Rank 0 (here) and rank 4 (on B) each receive from the other first.
        # The deadlock detector reads B's ranks from their relayed board
        # slots: it names both waits within its usual 2 s (plus relay
        # delay), long before LECTERN_TIMEOUT (120 s) would say "no progress".
        p = self.start({"TWO_HOSTS_DEADLOCK": "1", "LECTERN_TIMEOUT": "120"})
        t0 = time.monotonic()
        rc, out, err = self.finish(p, timeout=150)
        seconds = time.monotonic() - t0
        sys.stderr.write("[deadlock across hosts: lecture %.1f s] " % seconds)
        self.assertNotEqual(rc, 0, err)
        self.assertIn("deadlock", err)
        self.assertNotIn("made no progress", err, "named by the detector, not by the timeout")
        self.assertNotIn("nothing heard", err, "B's ranks keep reporting while they wait")
        failed = os.path.join(self.out, "two_hosts_fixture.failed.json")
        trace = tracecheck.load(failed)
        fixture = os.path.join(tracecheck.ROOT, "tests", "fixtures", "two_hosts_fixture.c")
        errors = {s["rank"]: s for s in trace["steps"] if s.get("rank") is not None and "deadlock" in json.dumps(s)}
        self.assertEqual(sorted(errors), [0, 4], "both waiting ranks named, the one on B too")
        self.assertEqual(errors[0]["stack"][-1]["line"], tracecheck.line_of(fixture, "dist_recv(t, 4)"))
        self.assertEqual(errors[4]["stack"][-1]["line"], tracecheck.line_of(fixture, "dist_recv(t, 0)"))
        self.assertLess(seconds - trace["spawns"][0]["seconds"], 60, err)

    def test_2d_a_rank_that_returned_early_across_hosts_is_named(self):
        # Rank 2 (the first on B) returns before the last round; ranks 0, 1
        # (here) and 3 (on B) wait for it in that round's first collective.
        # The detector compares each waiting rank's counters with rank 2's
        # final ones (its last relayed copy, sent just before "done"): the
        # others entered a collective rank 2 never did, so they are named at
        # once, not left to the timeout as waits for data on the wire are.
        hosts = os.path.join(self.out, "hosts2")
        with open(hosts, "w") as f:
            f.write("%s slots=2\n%s slots=2\n" % (ADDR_A, ADDR_B))
        binary = tracecheck.built("tests", "fixtures", "bucket_rounds_fixture")
        env = dict(os.environ, LECTERN_HOSTFILE=hosts, LECTERN_LECTURE_HOST=ADDR_A, LECTERN_TIMEOUT="120",
                   OMPI_MCA_plm_rsh_agent="ssh", OMPI_MCA_plm_rsh_args=self.ssh_args)
        p = subprocess.run(["ip", "netns", "exec", NS_A, binary, "--rounds=2", "--leave-early=2", "--quiet",
                            "--out", self.out], env=env, capture_output=True, text=True, timeout=300)
        self.assertNotEqual(p.returncode, 0, p.stderr)
        self.assertIn("rank 2 returned from the function while", p.stderr)
        self.assertNotIn("made no progress", p.stderr, "named by the detector, not by the timeout")
        self.assertNotIn("nothing heard", p.stderr)
        trace = tracecheck.load(os.path.join(self.out, "bucket_rounds_fixture.failed.json"))
        named = sorted(s["rank"] for s in trace["steps"]
                       if s.get("rank") is not None and "which returned from the spawned function" in json.dumps(s))
        self.assertEqual(named, [0, 1, 3], "every waiting rank named, rank 3 on B too")
        spawn = trace["spawns"][0]
        sys.stderr.write("[a rank returned early across hosts: spawn %.1f s] " % spawn["seconds"])
        # Two rounds take 1-3 s here; LECTERN_TIMEOUT would take 120.
        self.assertLess(spawn["seconds"], 60, p.stderr)

    def test_3_no_token_no_entry(self):
        p = self.start()
        outcomes = []
        try:
            # The port is open only while the ranks start (and again if the
            # start is retried): look for it, and try again when it closed
            # before the probe got there.
            deadline = time.monotonic() + 90
            while "closed" not in outcomes and time.monotonic() < deadline and p.poll() is None:
                port = lecture_port()
                if port is None:
                    time.sleep(0.02)
                    continue
                # From the other host: a hello of the right shape with a wrong token.
                forged = ("import socket, struct\n"
                          "try:\n"
                          "    s = socket.create_connection((%r, %d), timeout=20)\n"
                          "except ConnectionRefusedError:\n"
                          "    print('refused'); raise SystemExit\n"
                          "body = b'x' * 39 + b'\\0' + struct.pack('<ii', 0, 1) + b'h' * 255 + b'\\0'\n"
                          "s.sendall(struct.pack('<IIQ', 1, 0, len(body)) + body)\n"
                          "try:\n    got = s.recv(1)\nexcept ConnectionResetError:\n    got = b''\n"
                          "print('closed' if got == b'' else 'answered')\n" % (ADDR_A, port))
                probe = subprocess.run(["ip", "netns", "exec", NS_B, sys.executable, "-c", forged],
                                       capture_output=True, text=True, timeout=60)
                outcomes.append(probe.stdout.strip() or probe.stderr.strip())
        finally:
            rc, out, err = self.finish(p)
        self.assertIn("closed", outcomes, "a forged hello reached the lecture's port and was closed")
        self.assertNotIn("answered", outcomes)
        self.assertEqual(rc, 0, err)
        self.check_ranks(tracecheck.load(os.path.join(self.out, "two_hosts_fixture.json")))

    def test_3b_bucketed_async_all_reduces_across_hosts(self):
        # lecture_08's DDP with buckets, as a fixture: 4 ranks, 2 a host,
        # rounds of per-bucket async all-reduces started during a compute
        # loop, every third round timed with blocking ones. With ranks that
        # yield while they wait, about one run in two stalled 12-183 s or
        # failed with B's ranks silent for HOST_SILENCE: ranks calling
        # sched_yield() in a loop kept the kernel's threads, and the
        # network's softirq work with them, off their core. Spinning ranks
        # still stalled up to 11 s while B's ranks (in the session of the
        # ssh login) and A's (in the lecture's) shared the 2 cores: each
        # rank a session of its own ended that, and a rank that returned
        # while the others still receive its data is no longer taken for a
        # deadlock (docs/multinode.md). LECTERN_TWO_HOSTS_SOAK=N runs it N
        # times.
        hosts = os.path.join(self.out, "hosts2")
        with open(hosts, "w") as f:
            f.write("%s slots=2\n%s slots=2\n" % (ADDR_A, ADDR_B))
        binary = tracecheck.built("tests", "fixtures", "bucket_rounds_fixture")
        env = dict(os.environ, LECTERN_HOSTFILE=hosts, LECTERN_LECTURE_HOST=ADDR_A,
                   OMPI_MCA_plm_rsh_agent="ssh", OMPI_MCA_plm_rsh_args=self.ssh_args)
        env.pop("OMPI_MCA_mpi_yield_when_idle", None)   # the pool's own choice is what is tested
        runs = int(os.environ.get("LECTERN_TWO_HOSTS_SOAK", "1"))
        line = re.compile(r"rounds (\d+) slowest (\S+) s \(rank (\d+), round (\d+)\) spawn (\S+) s yield (\S+) "
                          r"own session (\S+)")
        for run in range(runs):
            out = os.path.join(self.out, "run%d" % run)
            t0 = time.monotonic()
            p = subprocess.run(["ip", "netns", "exec", NS_A, binary, "--rounds=20", "--quiet", "--out", out],
                               env=env, capture_output=True, text=True, timeout=600)
            seconds = time.monotonic() - t0
            m = line.search(p.stdout)
            sys.stderr.write("[bucketed all-reduces across the hosts, run %d: %.1f s, slowest round %s s, load %.1f] "
                             % (run, seconds, m.group(2) if m else "?", os.getloadavg()[0]))
            self.assertEqual(p.returncode, 0, tracecheck.why(p))
            self.assertIsNotNone(m, p.stdout)
            # Every rank, on both hosts, was started spinning, not yielding.
            self.assertEqual(m.group(6), "0,0,0,0", "OMPI_MCA_mpi_yield_when_idle of ranks 0-3")
            # Every rank, on both hosts, leads a session of its own.
            self.assertEqual(m.group(7), "1,1,1,1", "each of ranks 0-3 a session of its own")
            # A round is two 512 KiB all-reduces and 4 matmuls of 256 x 256:
            # at most 6.3 s in 40 runs with a session per rank (load 11-28 on
            # the 2-core machine), up to 11 s without; with yielding ranks the
            # stalls lasted until a kernel watchdog fired (30 s for the
            # workqueue's, 59 s for RCU's).
            self.assertLess(float(m.group(2)), 30.0, m.group(0))
            tracecheck.validate(os.path.join(out, "bucket_rounds_fixture.json"))

    @unittest.skipIf(os.environ.get("LECTERN_TEST_SCOPE") == "quick",
                     "lecture_08 across the two hosts (half a minute to minutes) runs in make test-all")
    def test_4_lecture_08_across_hosts(self):
        # Two slots a host: lecture_08's spawns of 4 ranks put 2 on each.
        hosts = os.path.join(self.out, "hosts2")
        with open(hosts, "w") as f:
            f.write("%s slots=2\n%s slots=2\n" % (ADDR_A, ADDR_B))
        binary = tracecheck.built("lectures", "lecture_08")
        env = dict(os.environ, LECTERN_HOSTFILE=hosts, LECTERN_LECTURE_HOST=ADDR_A,
                   OMPI_MCA_plm_rsh_agent="ssh", OMPI_MCA_plm_rsh_args=self.ssh_args)
        logins = sshd_logins(self.tmp)
        t0 = time.monotonic()
        p = subprocess.run(["ip", "netns", "exec", NS_A, binary, "--quick", "--quiet", "--out", self.out],
                           env=env, capture_output=True, text=True, timeout=900)
        sys.stderr.write("[lecture_08 --quick across the hosts: %.1f s] " % (time.monotonic() - t0))
        # Every check that the lecture computed right must pass. The modelled speed lessons' timing bounds
        # (checks named "modelled ...") may not: here the two hosts are network namespaces on one 2-core
        # machine and ranks across hosts spin in their waits (docs/multinode.md), so a rank whose device
        # "computes" shares its core with a spinning one, and the bounds measure this rig, not the lesson
        # (a CI run: the modelled DDP step 1.28 x faster against 1.3, after 3 rounds; 460 s in all).
        if p.returncode == 0:
            trace = tracecheck.validate(os.path.join(self.out, "lecture_08.json"))
        else:
            self.assertEqual(p.returncode, 1, tracecheck.why(p))
            trace = tracecheck.validate(os.path.join(self.out, "lecture_08.failed.json"))
            self.assertEqual([r["data"] for s in trace["steps"] for r in s["renderings"] if r["type"] == "error"], [])
        failed = [what for _, what, passed in tracecheck.check_passes(trace) if not passed]
        self.assertEqual([w for w in failed if not w.startswith("modelled ")], [], tracecheck.why(p))
        self.assertGreater(len(tracecheck.check_passes(trace)), 40)
        self.assertGreater(sshd_logins(self.tmp), logins, "mpirun logged in to the second host")


def sshd_logins(folder):
    """How many logins the second host's sshd has accepted (its log)."""
    with open(os.path.join(folder, "sshd.log")) as f:
        return f.read().count("Accepted publickey")


def lecture_port():
    """The port the lecture listens on for its ranks, from mpirun's command
    line (the address follows --lectern-rank), or None."""
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(os.path.join(d, "cmdline"), "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "--lectern-rank" in argv and FIXTURE in argv:
            i = argv.index("--lectern-rank")
            m = re.match(r"tcp:%s:(\d+)$" % re.escape(ADDR_A), argv[i + 1] if i + 1 < len(argv) else "")
            if m:
                return int(m.group(1))
    return None


if __name__ == "__main__":
    unittest.main(verbosity=2)
