"""The progress thread's behaviour apart from its timing (runtime/comm/comm_progress.c,
runtime/ranks/pool.c): the settings the pool gives the ranks' transport, the
thread's priority, async calls in flight together; and timed regions that
skip the agreement check (runtime/comm/comm_agree.c). Nothing here bounds a
time, so scripts/test.sh runs it beside other suites; the overlap bounds
are tests/comm/test_progress.py's, run alone.

    /usr/bin/python3 tests/comm/test_async.py        (LECTERN_BUILD picks the build)
"""
import os
import unittest
import unittest.mock

from test_progress import NO_CMA, NUM, cma_works, line_of, result, result_text, run  # noqa: E402


class Progress(unittest.TestCase):
    @staticmethod
    def pool_settings(unset=None, env_extra=None):
        """What a rank sees of the settings the pool gives Open MPI and hwloc
        (the fixture's mechanism case), with `unset` removed from the
        lecture's environment and `env_extra` added to it."""
        env = {k: v for k, v in os.environ.items() if k != unset}
        with unittest.mock.patch.dict(os.environ, env, clear=True):
            _, trace, texts = run(["--case=mechanism"], env_extra=env_extra)
        mechanism, hwloc, pml, kill_wait = result_text(
            texts, r"result mechanism (\w+) hwloc (\S+) pml (\S+) kill_wait (\S+)")
        return {"mechanism": mechanism, "hwloc": hwloc, "pml": pml, "kill_wait": kill_wait,
                "traced": [s.get("single_copy") for s in trace["spawns"]]}

    def test_the_pool_asks_for_the_single_copy_path_where_it_works(self):
        # Where a process here can read a sibling's memory, the ranks run with
        # CMA; where it cannot (many containers), with none, so Open MPI does
        # not warn on every run. A hostfile (other hosts may refuse it) or a
        # value the user set keeps its own.
        got = self.pool_settings(unset="OMPI_MCA_btl_vader_single_copy_mechanism")
        self.assertEqual(got["mechanism"], "cma" if cma_works() else "none")
        # The trace says which path the ranks were given: what they saw.
        self.assertEqual(got["traced"], [got["mechanism"]])
        forced = self.pool_settings(env_extra=NO_CMA)
        self.assertEqual((forced["mechanism"], forced["traced"]), ("none", ["none"]))

    def test_the_pool_leaves_out_hwlocs_pci_discovery(self):
        # Reading every PCI device's configuration space at each rank's start
        # is slow in a VM and nothing uses it (runtime/ranks/pool.c); a value
        # the user set keeps its own.
        self.assertEqual(self.pool_settings(unset="HWLOC_COMPONENTS")["hwloc"], "-pci,-linuxpci")
        self.assertEqual(self.pool_settings(env_extra={"HWLOC_COMPONENTS": "-linuxio"})["hwloc"], "-linuxio")

    def test_one_host_leaves_out_the_network_pmls(self):
        # On one host the ranks use ob1 over shared memory; UCX's pml and
        # the MTLs behind cm are not opened and probed at each MPI_Init
        # (runtime/ranks/pool.c); a value the user set keeps its own.
        self.assertEqual(self.pool_settings(unset="OMPI_MCA_pml")["pml"], "^ucx,cm")
        self.assertEqual(self.pool_settings(env_extra={"OMPI_MCA_pml": "ob1"})["pml"], "ob1")

    def test_mpirun_kills_at_once_what_is_left(self):
        # After a failed spawn the lecture has killed the ranks; mpirun's
        # own kill sequence would wait a second after each signal to them
        # (runtime/ranks/pool.c); a value the user set keeps its own.
        self.assertEqual(self.pool_settings(unset="OMPI_MCA_odls_base_sigkill_timeout")["kill_wait"], "0")
        self.assertEqual(self.pool_settings(env_extra={"OMPI_MCA_odls_base_sigkill_timeout": "2"})["kill_wait"], "2")

    def test_the_progress_thread_runs_at_the_lowest_priority(self):
        # Read from the kernel (/proc/self/task/TID/stat) by the fixture while
        # a send is in flight: the progress thread, named lx-progress, at nice
        # 19 by default (a wake-up at the lecture's priority could take the
        # caller's core: runtime/comm/comm_progress.c), every other thread at
        # the rank's own; LECTERN_PROGRESS_NICE sets it; a bad value is said
        # and the default kept.
        def threads(env):
            _, _, texts = run(["--case=nice"], env_extra=env)
            (listed,) = result_text(texts, r"result threads (.*)")
            pairs = [x.rsplit(":", 1) for x in listed.split()]
            return [int(n) for name, n in pairs if name == "lx-progress"], [int(n) for name, n in pairs
                                                                              if name != "lx-progress"]
        base = os.nice(0)
        progress, others = threads({})
        self.assertEqual(progress, [max(19, base)])
        self.assertTrue(others and all(n == base for n in others), others)
        if base <= 7:
            progress, others = threads({"LECTERN_PROGRESS_NICE": "7"})
            self.assertEqual(progress, [7])
            self.assertTrue(all(n == base for n in others), others)
        p, _, texts = run(["--case=nice"], env_extra={"LECTERN_PROGRESS_NICE": "-3"})
        self.assertIn("LECTERN_PROGRESS_NICE=-3 is not a nice value from 0 to 19: using 19", p.stderr)
        (listed,) = result_text(texts, r"result threads (.*)")
        self.assertIn("lx-progress:19", listed.split())

    def test_async_calls_in_flight_together_give_the_right_sums(self):
        # 4 ranks: six all-reduces and an all-gather in flight at once, a
        # blocking all-reduce and a ring of sends between them, waited for out
        # of order; each result checked in the fixture against sums it works
        # out itself (check_close fails the run otherwise).
        for progress in (True, False):
            p, trace, _ = run(["--case=order", "--world=4"], progress=progress)
            checks = trace["meta"]["checks"]
            self.assertEqual(checks["failed"], 0)
            self.assertEqual(checks["passed"], 4 * (6 + 1 + 1 + 4))


class TimedRegion(unittest.TestCase):
    def test_repeated_calls_skip_the_check(self):
        # In the region: 50 all-reduces and 50 sends (rank 0) / receives
        # (rank 1) that repeat the warm-up's calls, and one all-reduce of a
        # new size. Only the new one is checked.
        _, _, texts = run(["--case=timed"])
        for rank in (0, 1):
            made, skipped = result(texts, r"result rank %d made %s skipped %s" % (rank, NUM, NUM))
            self.assertEqual(made, 1)
            self.assertEqual(skipped, 100)

    def test_a_mismatch_inside_the_region_is_named_at_its_end(self):
        p, trace, _ = run(["--case=timed_mismatch"], expect_ok=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        line = line_of("MISMATCH LINE")
        errors = [(s.get("rank"), s["stack"][-1]["line"], r["data"]) for s in trace["steps"]
                  for r in s["renderings"] if r["type"] == "error" and s.get("rank") is not None]
        ranks = {r for r, l, text in errors if l == line and "different collective calls inside the timed region" in text}
        self.assertEqual(ranks, {0, 1}, errors)


if __name__ == "__main__":
    unittest.main()
