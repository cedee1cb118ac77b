/* Fixture: process groups and all-to-all (tests/test_groups.py).
 *
 * GROUPS_CASE=values runs every group collective (blocking and async) on
 * world sizes 2 to 8 over several partitions of the ranks: the whole world,
 * singletons, pairs, a reversed list, and the rows and columns of a mesh
 * (each rank in two groups at once). Each rank writes what it got, one line
 * per call, to GROUPS_DIR/w<world>_r<rank>.txt:
 *
 *     <partition> <call> <group, comma-separated> <group rank> <values...>
 *
 * and the test computes every expected value itself from the inputs below.
 * The other cases are mistakes; the test finds each expected line by the
 * marker comment on it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

enum { N = 3, MAXW = 8 };

/* Rank r's i-th input: small integers, exact in float (the test has the same formula). */
static float input_value(int rank, int64_t i) { return (float)(((i * 7 + rank * 13) % 17) - 8); }

static tensor *inputs(int rank, int64_t n) {
    float v[MAXW * N * 64];
    for (int64_t i = 0; i < n; i++)
        v[i] = input_value(rank, i);
    return tensor_from(v, n, 0, get_device(rank));
}

static void save(FILE *f, const char *part, const char *call, const dist_group *g, const int *list, int n,
                 const tensor *t) {
    float v[MAXW * N * 64];
    tensor_to_host(t, v);
    fprintf(f, "%s %s ", part, call);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%d", i ? "," : "", list[i]);
    fprintf(f, " %d", dist_group_rank(g));
    for (int64_t i = 0; i < t->numel; i++)
        fprintf(f, " %.9g", v[i]);
    fprintf(f, "\n");
}

/* Every group call on group g (list: its ranks), blocking then async. */
static void run_group(FILE *f, const char *part, dist_group *g, const int *list, int n, int rank) {
    int p = dist_group_size(g);
    if (p != n) {
        fprintf(stderr, "dist_group_size says %d, the list has %d\n", p, n);
        exit(2);
    }
    static const dist_op ops[] = {DIST_SUM, DIST_AVG, DIST_MAX, DIST_MIN};
    static const char *const names[] = {"all_reduce_sum", "all_reduce_avg", "all_reduce_max", "all_reduce_min"};
    for (int k = 0; k < 4; k++) {
        tensor *t = inputs(rank, N);
        dist_all_reduce_in(g, t, ops[k]);
        save(f, part, names[k], g, list, n, t);
        tensor_free(t);
    }
    tensor *in = inputs(rank, (int64_t)p * N), *out = zeros(N, 0, get_device(rank));
    dist_reduce_scatter_in(g, out, in, DIST_SUM);
    save(f, part, "reduce_scatter_sum", g, list, n, out);
    tensor_free(out);
    tensor_free(in);
    in = inputs(rank, N);
    out = zeros((int64_t)p * N, 0, get_device(rank));
    dist_all_gather_in(g, out, in);
    save(f, part, "all_gather", g, list, n, out);
    tensor_free(out);
    tensor_free(in);
    tensor *t = inputs(rank, N);
    dist_broadcast_in(g, t, p - 1);
    save(f, part, "broadcast_last", g, list, n, t);
    tensor_free(t);
    in = inputs(rank, (int64_t)p * N);
    out = zeros((int64_t)p * N, 0, get_device(rank));
    dist_all_to_all_in(g, out, in);
    save(f, part, "all_to_all", g, list, n, out);
    tensor_free(out);
    tensor_free(in);

    /* The async forms, all in flight at once. */
    tensor *ar = inputs(rank, N), *rs_in = inputs(rank, (int64_t)p * N), *rs = zeros(N, 0, get_device(rank));
    tensor *ag_in = inputs(rank, N), *ag = zeros((int64_t)p * N, 0, get_device(rank)), *bc = inputs(rank, N);
    tensor *a2_in = inputs(rank, (int64_t)p * N), *a2 = zeros((int64_t)p * N, 0, get_device(rank));
    dist_request *r[5];
    r[0] = dist_all_reduce_in_async(g, ar, DIST_AVG);
    r[1] = dist_reduce_scatter_in_async(g, rs, rs_in, DIST_SUM);
    r[2] = dist_all_gather_in_async(g, ag, ag_in);
    r[3] = dist_broadcast_in_async(g, bc, 0);
    r[4] = dist_all_to_all_in_async(g, a2, a2_in);
    for (int i = 4; i >= 0; i--)
        dist_wait(r[i]);
    save(f, part, "async_all_reduce_avg", g, list, n, ar);
    save(f, part, "async_reduce_scatter_sum", g, list, n, rs);
    save(f, part, "async_all_gather", g, list, n, ag);
    save(f, part, "async_broadcast_first", g, list, n, bc);
    save(f, part, "async_all_to_all", g, list, n, a2);
    tensor *all[] = {ar, rs_in, rs, ag_in, ag, bc, a2_in, a2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tensor_free(all[i]);
}

static void values(int rank, int world_size, void *args) {
    char path[400];
    snprintf(path, sizeof path, "%s/w%d_r%d.txt", (const char *)args, world_size, rank);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(2);
    }
    int list[MAXW], n;

    /* The whole world, as a group and as NULL. */
    for (n = 0; n < world_size; n++)
        list[n] = n;
    dist_group *world = dist_new_group(list, n);
    run_group(f, "world", world, list, n, rank);
    run_group(f, "null", NULL, list, n, rank);
    dist_group_free(world);

    /* Each rank alone. */
    list[0] = rank;
    dist_group *self = dist_new_group(list, 1);
    run_group(f, "self", self, list, 1, rank);

    /* Pairs {0,1}, {2,3}, ... (the last rank alone when the world is odd), and
     * the same pairs reversed: group rank 0 is the higher world rank. */
    int first = rank - rank % 2;
    n = first + 1 < world_size ? 2 : 1;
    list[0] = first;
    list[1] = first + 1;
    dist_group *pair = dist_new_group(list, n);
    int rev[2] = {n == 2 ? first + 1 : first, first};
    dist_group *reversed = dist_new_group(rev, n);
    run_group(f, "pairs", pair, list, n, rank);
    run_group(f, "reversed", reversed, rev, n, rank);

    /* A mesh of 2 rows (world even): rows of world/2 ranks ("TP") and
     * columns of 2 ("DP"); every rank in one of each, used interleaved. */
    if (world_size % 2 == 0) {
        int w = world_size / 2, row[MAXW], col[2];
        for (int i = 0; i < w; i++)
            row[i] = (rank / w) * w + i;
        col[0] = rank % w;
        col[1] = rank % w + w;
        dist_group *tp = dist_new_group(row, w);
        dist_group *dp = dist_new_group(col, 2);
        run_group(f, "tp", tp, row, w, rank);
        run_group(f, "dp", dp, col, 2, rank);
        run_group(f, "tp2", tp, row, w, rank);
        dist_group_free(dp);
        dist_group_free(tp);
    }
    /* The world all-to-all, blocking and async, larger than the eager limit. */
    int64_t piece = 1 << 14;
    tensor *out = zeros(piece * world_size, 0, get_device(rank));
    float *h = malloc(sizeof(float) * (size_t)(piece * world_size));
    if (!h) exit(2);
    for (int64_t i = 0; i < piece * world_size; i++)
        h[i] = (float)(rank * 100000 + i);
    tensor *in = tensor_from(h, piece * world_size, 0, get_device(rank));
    dist_all_to_all(out, in);
    tensor_to_host(out, h);
    /* Piece j came from rank j: its piece `rank`, element i: j * 100000 + rank * piece + i. */
    int bad = 0;
    for (int j = 0; j < world_size; j++)
        for (int64_t i = 0; i < piece; i++)
            bad += h[j * piece + i] != (float)(j * 100000 + rank * piece + i);
    tensor_free(out);
    out = zeros(piece * world_size, 0, get_device(rank));
    dist_wait(dist_all_to_all_async(out, in));
    tensor_to_host(out, h);
    for (int j = 0; j < world_size; j++)
        for (int64_t i = 0; i < piece; i++)
            bad += h[j * piece + i] != (float)(j * 100000 + rank * piece + i);
    fprintf(f, "big all_to_all - 0 %d\n", bad);
    free(h);
    tensor_free(in);
    tensor_free(out);
    fclose(f);
    /* self, pair and reversed are left to the end of the spawn (freed there). */
}

/* dist_test: rank 1's receive is tested before rank 0 can have sent (rank 0
 * sends only after a barrier rank 1 reaches after its test), then polled
 * until it completes; an async all-reduce is polled the same way. */
static void test_requests(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    if (rank == 0) {
        float v[4] = {1, 2, 3, 4};
        tensor *s = tensor_from(v, 4, 0, get_device(rank));
        dist_barrier();
        dist_request *r = dist_isend(s, 1);
        long polls = 0;
        while (!dist_test(r))
            polls++;
        note("rank 0: isend done after %ld polls", polls);
        dist_wait(r);
        tensor_free(s);
    } else {
        dist_request *r = dist_irecv(t, 0);
        note("rank 1: test before the send %d", dist_test(r));
        dist_barrier();
        long polls = 0;
        while (!dist_test(r) && polls < 100000000L)
            polls++;
        note("rank 1: test after polling %d", dist_test(r));
        dist_wait(r);
        float got[4];
        tensor_to_host(t, got);
        note("rank 1: received %g %g %g %g", got[0], got[1], got[2], got[3]);
    }
    float one[3] = {(float)rank + 1, 10, -1};
    tensor *x = tensor_from(one, 3, 0, get_device(rank));
    dist_request *r = dist_all_reduce_async(x, DIST_SUM);
    long polls = 0;
    while (!dist_test(r) && polls < 100000000L)
        polls++;
    note("rank %d: all-reduce test %d", rank, dist_test(r));
    dist_wait(r);
    float got[3];
    tensor_to_host(x, got);
    note("rank %d: all-reduce %g %g %g", rank, got[0], got[1], got[2]);
    tensor_free(x);
    tensor_free(t);
}

/* A request tested after its wait. */
static void test_after_wait(int rank, int world_size, void *args) {
    tensor *t = zeros(4, 0, get_device(rank));
    dist_request *r = dist_all_reduce_async(t, DIST_SUM);
    dist_wait(r);
    note("test %d", dist_test(r)); /* MARK:tested */
    tensor_free(t);
}

int64_t lx_agree_checks_made(void); /* runtime/comm/comm_agree.h: not a lecture's API */
int64_t lx_agree_checks_skipped(void);

/* Timed regions skip a group call its ranks agreed on before, as the
 * world's: on 4 ranks, the rows {0,1}, {2,3} and columns {0,2}, {1,3} of a
 * 2 x 2 mesh (each rank in two groups) and a pair made and freed inside the
 * region. Warm-ups first (checked once each); in the region 10 all-to-alls
 * on the row, 10 all-reduces on the column, 10 world all-reduces, 5
 * all-reduces on the pair, all skipped, and one column all-reduce of a new
 * size, checked. Each rank notes what was made and skipped in the region,
 * and the sums of its last column all-reduce (the ranks' own values). */
static void timed(int rank, int world_size, void *args) {
    int row[2] = {rank - rank % 2, rank - rank % 2 + 1}, col[2] = {rank % 2, rank % 2 + 2};
    dist_group *r = dist_new_group(row, 2), *c = dist_new_group(col, 2);
    tensor *in = inputs(rank, 2 * N), *out = zeros(2 * N, 0, get_device(rank));
    tensor *t = inputs(rank, N), *w = inputs(rank, N), *wide = inputs(rank, 2 * N);
    dist_all_to_all_in(r, out, in);
    dist_all_reduce_in(c, t, DIST_SUM);
    dist_all_reduce(w, DIST_SUM);
    int64_t made = lx_agree_checks_made(), skipped = lx_agree_checks_skipped();
    dist_timed_begin();
    dist_group *pair = dist_new_group(col, 2);
    tensor *u = inputs(rank, N);
    dist_all_reduce_in(pair, u, DIST_MAX); /* new on this group: checked */
    for (int i = 0; i < 10; i++) {
        dist_all_to_all_in(r, out, in);
        dist_all_reduce_in(c, t, DIST_SUM);
        dist_all_reduce(w, DIST_SUM);
        if (i < 5) dist_all_reduce_in(pair, u, DIST_MAX);
    }
    dist_group_free(pair);                 /* what it skipped is compared here */
    dist_all_reduce_in(c, wide, DIST_SUM); /* not seen before: checked */
    int64_t in_made = lx_agree_checks_made() - made, in_skipped = lx_agree_checks_skipped() - skipped;
    dist_timed_end();
    float v[2 * N];
    tensor_to_host(wide, v);
    note_verbatim("result rank %d made %lld skipped %lld wide %g %g", rank, (long long)in_made, (long long)in_skipped,
                  v[0], v[2 * N - 1]);
    tensor_free(u);
    tensor_free(wide);
    tensor_free(w);
    tensor_free(t);
    tensor_free(out);
    tensor_free(in);
    dist_group_free(c);
    dist_group_free(r);
}

/* In a timed region, the column {0,2}'s ranks make calls each agreed on
 * before but different from each other (rank 0 sums, rank 2 takes the
 * maximum): named when the region ends, with the group. The column {1,3}
 * agrees. */
static void timed_mismatch(int rank, int world_size, void *args) {
    int col[2] = {rank % 2, rank % 2 + 2};
    dist_group *c = dist_new_group(col, 2);
    tensor *t = inputs(rank, N);
    dist_all_reduce_in(c, t, DIST_SUM);
    dist_all_reduce_in(c, t, DIST_MAX);
    dist_timed_begin();
    dist_all_reduce_in(c, t, rank == 2 ? DIST_MAX : DIST_SUM);
    dist_timed_end(); /* MARK:timed_end */
    note("rank %d left the region", rank);
    tensor_free(t);
}

/* The same mismatch on a group freed inside the region: named where it is
 * freed. */
static void freed_mismatch(int rank, int world_size, void *args) {
    int col[2] = {rank % 2, rank % 2 + 2};
    tensor *t = inputs(rank, N);
    dist_timed_begin();
    dist_group *c = dist_new_group(col, 2);
    dist_all_reduce_in(c, t, DIST_SUM);
    dist_all_reduce_in(c, t, DIST_MAX);
    dist_all_reduce_in(c, t, rank == 2 ? DIST_MAX : DIST_SUM);
    dist_group_free(c); /* MARK:free_in_region */
    dist_timed_end();
    note("rank %d left the region", rank);
    tensor_free(t);
}

/* ---- mistakes ---- */

static void disagree(int rank, int world_size, void *args) {
    static const int lists[4][2] = {{0, 2}, {0, 1}, {0, 2}, {3, 3}};
    dist_group *g = dist_new_group(lists[rank], rank == 3 ? 1 : 2); /* MARK:disagree */
    note("rank %d made a group of %d", rank, dist_group_size(g));
}

static void without_caller(int rank, int world_size, void *args) {
    int zero = 0;
    dist_group *g = dist_new_group(&zero, 1); /* MARK:without */
    note("rank %d made a group of %d", rank, dist_group_size(g));
}

static void twice(int rank, int world_size, void *args) {
    int l[3] = {0, 1, 2};
    if (rank == 1) l[2] = 1;
    dist_group *g = dist_new_group(l, 3); /* MARK:twice */
    note("rank %d made a group of %d", rank, dist_group_size(g));
}

static void out_of_range(int rank, int world_size, void *args) {
    int l[2] = {0, 1};
    if (rank == 0) l[1] = 5;
    dist_group *g = dist_new_group(l, 2); /* MARK:range */
    note("rank %d made a group of %d", rank, dist_group_size(g));
}

/* In the columns of a 2 x 2 mesh, rank 2 all-reduces 6 floats, rank 0 4. */
static void group_mismatch(int rank, int world_size, void *args) {
    int col[2] = {rank % 2, rank % 2 + 2};
    dist_group *dp = dist_new_group(col, 2);
    tensor *t = zeros(rank == 2 ? 6 : 4, 0, get_device(rank));
    if (rank == 2) dist_all_reduce_in(dp, t, DIST_SUM); /* MARK:g6 */
    else dist_all_reduce_in(dp, t, DIST_SUM);           /* MARK:g4 */
    note("rank %d has a result", rank);
    tensor_free(t);
}

static void freed(int rank, int world_size, void *args) {
    int l[2] = {0, 1};
    dist_group *g = dist_new_group(l, 2);
    dist_group_free(g);
    tensor *t = zeros(4, 0, get_device(rank));
    dist_all_reduce_in(g, t, DIST_SUM); /* MARK:freed */
    tensor_free(t);
}

/* Rank 0 waits in a group all-reduce that rank 1 never makes. */
static void group_waits(int rank, int world_size, void *args) {
    int l[2] = {0, 1};
    dist_group *g = dist_new_group(l, 2);
    tensor *t = zeros(4, 0, get_device(rank));
    if (rank == 0) dist_all_reduce_in(g, t, DIST_SUM); /* MARK:waits */
    tensor_free(t);
}

static void body(void) {
    const char *c = getenv("GROUPS_CASE");
    if (!c) c = "";
    if (strcmp(c, "values") == 0) {
        const char *dir = getenv("GROUPS_DIR");
        const char *worlds = getenv("GROUPS_WORLDS");
        if (!dir || !worlds) {
            fprintf(stderr, "GROUPS_DIR and GROUPS_WORLDS are needed\n");
            exit(2);
        }
        for (const char *w = worlds; *w;) {
            char *end;
            long n = strtol(w, &end, 10);
            if (end == w) break;
            spawn(values, (int)n, dir, strlen(dir) + 1);
            w = *end ? end + 1 : end;
        }
    } else if (strcmp(c, "disagree") == 0) spawn(disagree, 4, NULL, 0);
    else if (strcmp(c, "without") == 0) spawn(without_caller, 2, NULL, 0);
    else if (strcmp(c, "twice") == 0) spawn(twice, 3, NULL, 0);
    else if (strcmp(c, "range") == 0) spawn(out_of_range, 2, NULL, 0);
    else if (strcmp(c, "mismatch") == 0) spawn(group_mismatch, 4, NULL, 0);
    else if (strcmp(c, "freed") == 0) spawn(freed, 2, NULL, 0);
    else if (strcmp(c, "waits") == 0) spawn(group_waits, 2, NULL, 0);
    else if (strcmp(c, "test") == 0) spawn(test_requests, 2, NULL, 0);
    else if (strcmp(c, "tested") == 0) spawn(test_after_wait, 2, NULL, 0);
    else if (strcmp(c, "timed") == 0) spawn(timed, 4, NULL, 0);
    else if (strcmp(c, "timed_mismatch") == 0) spawn(timed_mismatch, 4, NULL, 0);
    else if (strcmp(c, "freed_mismatch") == 0) spawn(freed_mismatch, 4, NULL, 0);
    note("after the spawn");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
