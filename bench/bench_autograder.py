"""What grading one submission costs: scripts/run_autograder, whole (the
tamper check, the build of the submission, the run with --grade), on a solved
homework in Gradescope's layout under a temporary root standing for
/autograder, as tests/trace/test_grade.py lays it out.

Per run: the wall time; the peak of the memory every process of the run held
together (the resident set sizes of all processes of its session, summed,
sampled every 20 ms from /proc: the script, make and the compiler, the
lecture, mpirun and the ranks); the largest single process
(getrusage(RUSAGE_CHILDREN).ru_maxrss, which is a maximum over processes, not
a sum); and the lecture's own execution_time from results.json. Prints each
run and the medians; docs/homework.md quotes them.

    python3 bench/bench_autograder.py [--homework homework_08] [--runs 5] [--args --deadlock]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("LECTERN_BUILD", os.path.join(ROOT, "build"))
PAGE = os.sysconf("SC_PAGE_SIZE")


def layout(tmp, homework):
    """Gradescope's /autograder under tmp: source/ (this lectern, built),
    submission/HOMEWORK.c (the solution's exercises in the course's file),
    submission_metadata.json."""
    root = os.path.join(tmp, "autograder")
    source = os.path.join(root, "source")
    os.makedirs(os.path.join(source, "lectures"))
    os.makedirs(os.path.join(root, "submission"))
    for name in ("Makefile", "runtime", "scripts", os.path.basename(BUILD)):
        os.symlink(os.path.join(ROOT, name), os.path.join(source, name))
    os.symlink(os.path.join(ROOT, "lectures", "lib"), os.path.join(source, "lectures", "lib"))
    with open(os.path.join(ROOT, "lectures", homework + ".c")) as f:
        course = f.read()
    with open(os.path.join(source, "lectures", homework + ".c"), "w") as f:
        f.write(course)
    with open(os.path.join(ROOT, "tests", "fixtures", homework + "_solution.h")) as f:
        solved = "".join(line for line in f if not line.lstrip().startswith("#"))
    start = course.index("#ifndef HOMEWORK_SOLUTION\n") + len("#ifndef HOMEWORK_SOLUTION\n")
    end = course.index("#else\n", start)
    with open(os.path.join(root, "submission", homework + ".c"), "w") as f:
        f.write(course[:start] + solved + course[end:])
    with open(os.path.join(root, "submission_metadata.json"), "w") as f:
        json.dump({"id": 1, "assignment": {"id": 25828}, "users": [{"id": 1234, "email": "a@example.com"}]}, f)
    return root, source


def session_rss(sid):
    """Bytes resident in every process of session `sid` now."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) != sid:      # field 6 of stat, the session id
                continue
            with open("/proc/%s/statm" % pid) as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue                        # gone meanwhile
    return total


def one_run(homework, args):
    with tempfile.TemporaryDirectory() as tmp:
        root, source = layout(tmp, homework)
        env = dict(os.environ, AUTOGRADER=root, LECTERN_SOURCE=source, HOMEWORK=homework, HOMEWORK_ARGS=args)
        if BUILD != os.path.join(ROOT, "build"):
            env["BUILD"] = os.path.basename(BUILD)
        start = time.monotonic()
        p = subprocess.Popen(["bash", os.path.join(ROOT, "scripts", "run_autograder")], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        peak = 0
        while p.poll() is None:
            peak = max(peak, session_rss(p.pid))
            time.sleep(0.02)
        wall = time.monotonic() - start
        with open(os.path.join(root, "results", "results.json")) as f:
            r = json.load(f)
    return wall, peak, r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--homework", default="homework_08")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--args", default="--deadlock", help="HOMEWORK_ARGS (default --deadlock)")
    a = ap.parse_args()
    walls, peaks, lectures = [], [], []
    print("%-4s %8s %14s %16s %8s" % ("run", "wall s", "peak sum MiB", "lecture s", "score"))
    for i in range(a.runs):
        wall, peak, r = one_run(a.homework, a.args)
        walls.append(wall)
        peaks.append(peak)
        lectures.append(r["execution_time"])
        print("%-4d %8.2f %14.1f %16.2f %8s" % (i, wall, peak / 2**20, r["execution_time"],
                                                "%g/%g" % (r["score"], r.get("max_score", 0))))
        if r["score"] != r.get("max_score"):
            sys.exit("the solution did not score full marks: %s" % r["output"][:500])
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print("median over %d runs: wall %.2f s, peak memory of the whole run %.1f MiB (largest %.1f), lecture %.2f s; "
          "largest single process %.1f MiB; %d cores" % (a.runs, statistics.median(walls), statistics.median(peaks) / 2**20,
                                                         max(peaks) / 2**20, statistics.median(lectures), largest,
                                                         os.cpu_count()))


if __name__ == "__main__":
    main()
