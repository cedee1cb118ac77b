#!/usr/bin/env bash
# What Open MPI's pml monitoring costs (docs/benchmarks.md): the pool turns it
# on so that dist_traffic_now() can measure the collectives' bytes
# (runtime/comm/comm_pvars.c). Plain MPI programs, on and off
# (OMPI_MCA_pml_monitoring_enable=1 / 0), alternated ROUNDS times so both see
# the same machine: a 4-byte ping-pong (latency: where a per-message cost
# shows most) and a 1 MB MPI_Allreduce (the smallest size the all-reduce goal
# covers), each the median of many calls; then the median over the rounds.
# At a load that swings those timings by more than the effect, the
# per-message cost itself: one rank sending 4 bytes to itself (MPI_Sendrecv,
# 200000 times, no other rank to wait for), the fastest of the rounds (noise
# only adds time).
#
#   bash bench/bench_monitoring.sh [RANKS (2)] [ROUNDS (5)]
set -euo pipefail
ranks=${1:-2}
rounds=${2:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/m.c" <<'C'
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(double *v, int n) { qsort(v, n, sizeof *v, cmp); return v[n / 2]; }
int main(int argc, char **argv) {
    int provided, rank, world;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    enum { PINGS = 2001, REDUCES = 101 };
    static double t[PINGS];
    float word = 0;
    for (int i = 0; i < PINGS; i++) {   /* ranks 0 and 1 */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (rank == 0) { MPI_Send(&word, 1, MPI_FLOAT, 1, 0, MPI_COMM_WORLD); MPI_Recv(&word, 1, MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
        if (rank == 1) { MPI_Recv(&word, 1, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(&word, 1, MPI_FLOAT, 0, 0, MPI_COMM_WORLD); }
        t[i] = MPI_Wtime() - t0;
    }
    double ping = median(t, PINGS);
    int n = (1 << 20) / 4;
    float *buf = calloc(n, sizeof *buf);
    for (int i = 0; i < REDUCES; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double dt = MPI_Wtime() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[i] = dt;
    }
    double reduce = median(t, REDUCES);
    double t0 = MPI_Wtime();
    float back;
    for (int i = 0; i < 200000; i++)
        MPI_Sendrecv(&word, 1, MPI_FLOAT, rank, 1, &back, 1, MPI_FLOAT, rank, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    double self = (MPI_Wtime() - t0) / 200000;
    if (rank == 0) printf("%.3f %.1f %.4f\n", ping * 1e6, reduce * 1e6, self * 1e6);
    free(buf);
    MPI_Finalize();
    return 0;
}
C
mpicc -O2 "$tmp/m.c" -o "$tmp/m"
echo "ranks $ranks, rounds $rounds; per round: 4-byte ping-pong round trip (us), 1 MB MPI_Allreduce (us, slowest rank)"
for r in $(seq "$rounds"); do
    for on in 1 0; do
        printf '%s %s\n' "$on" "$(OMPI_MCA_pml_monitoring_enable=$on mpirun -np "$ranks" "$tmp/m")"
    done
done | tee "$tmp/all" | awk '{ printf "  monitoring %s: ping-pong %8.3f us, all-reduce %9.1f us, self send %7.4f us\n", $1 ? "on " : "off", $2, $3, $4 }'
python3 - "$tmp/all" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
on = [(float(p), float(a)) for m, p, a, _ in rows if m == "1"]
off = [(float(p), float(a)) for m, p, a, _ in rows if m == "0"]
son = min(float(s) for m, _, _, s in rows if m == "1")
soff = min(float(s) for m, _, _, s in rows if m == "0")
pm, am = statistics.median(p for p, _ in on), statistics.median(a for _, a in on)
po, ao = statistics.median(p for p, _ in off), statistics.median(a for _, a in off)
print("median: ping-pong %.3f us on, %.3f off (on/off %.3f); 1 MB all-reduce %.1f us on, %.1f off "
      "(off/on time, the ratio the goal reads: %.3f)" % (pm, po, pm / po, am, ao, ao / am))
print("fastest self send: %.4f us on, %.4f us off: %.4f us per message" % (son, soff, son - soff))
PY
