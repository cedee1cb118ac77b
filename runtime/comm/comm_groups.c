/*
 * comm_groups.c: process groups (dist_new_group), the calls on them (the
 * _in calls, blocking and async), all-to-all, and timed regions.
 *
 * A group is a communicator of its ranks (MPI_Comm_split of the spawn's,
 * ordered as the list), on which the agreement checks run, and the
 * backend's own communicators (group_new). A group call is the world call
 * with the backend switched to the group (lx_use_group) for its duration;
 * the world's calls are untouched. A NULL group is the world: each _in call
 * then is its world twin (comm.c, comm_requests.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm_calls.h"
#include "ranks/ranks.h"

static dist_group *groups; /* this spawn's, newest first */

/* "{0, 2}" */
static void list_text(char *buf, size_t size, const int *ranks, int n) {
    size_t at = 0;
    at += (size_t)snprintf(buf + at, size - at, "{");
    for (int i = 0; i < n && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%d", i ? ", " : "", ranks[i]);
    if (at < size) snprintf(buf + at, size - at, "}");
}

static void free_group(dist_group *g) {
    lx_ops->group_free(g->backend);
    MPI_CHECK(MPI_Comm_free(&g->comm));
    lx_agree_group_free(g->agreed);
    free(g);
}

/* A timed region ended: each group this rank is in compares what its ranks
 * skipped there, oldest group first. Every rank made every dist_new_group
 * call, so every rank holds its groups in the same order of making, and
 * the groups' comparisons cannot wait for one another in a circle. */
static void settle_groups(const dist_group *g) {
    if (!g) return;
    settle_groups(g->next); /* older ones first: the list is newest first */
    lx_agree_group_settle(g);
}

/* The spawned function has returned (its requests completed): the groups it left. */
void lx_comm_free_groups(void) {
    while (groups) {
        dist_group *g = groups;
        groups = g->next;
        free_group(g);
    }
}

/* g is NULL (the world) or a group of this spawn that this rank is in. */
static void check_group(const char *call, const dist_group *g) {
    if (!g) return;
    const dist_group *h = groups;
    while (h && h != g)
        h = h->next;
    if (!h)
        lx_fatal("%s(): this group is not one of this spawn's: it was freed (dist_group_free), or made in "
                 "another spawn (a group lives until its spawned function returns)",
                 call);
    int in = 0;
    for (int i = 0; i < g->size; i++)
        in |= g->ranks[i] == lx_the_world.rank;
    if (!in) lx_fatal("%s(): rank %d is not in group %s", call, lx_the_world.rank, g->name);
}

enum { ROW = 1 + LECTERN_MAX_WORLD }; /* one rank's call: n (-1: NULL list), then its ranks */

/* What is wrong with rank q's list, or NULL: the same text on every rank. */
static char *bad_list(const int *row, int q, int world) {
    int n = row[0];
    if (n < 0) return lx_fmt("rank %d passed NULL as its list of ranks", q);
    if (n < 1 || n > world) return lx_fmt("rank %d passed n = %d: a group has 1 to world_size (%d) ranks", q, n, world);
    char text[4 * ROW + 8];
    list_text(text, sizeof text, row + 1, n);
    for (int i = 0; i < n; i++) {
        int r = row[1 + i];
        if (r < 0 || r >= world)
            return lx_fmt("rank %d's list %s holds %d, which is not a rank of this world (0 to %d)", q, text, r,
                          world - 1);
        for (int j = 0; j < i; j++)
            if (row[1 + j] == r) return lx_fmt("rank %d's list %s holds rank %d twice", q, text, r);
    }
    for (int i = 0; i < n; i++)
        if (row[1 + i] == q) return NULL;
    return lx_fmt("rank %d's list %s does not hold rank %d: each rank passes the list of the group it belongs to", q,
                  text, q);
}

static int same_list(const int *a, const int *b) {
    if (a[0] != b[0]) return 0;
    for (int i = 0; i < a[0]; i++)
        if (a[1 + i] != b[1 + i]) return 0;
    return 1;
}

/* Every rank's list, checked alike on every rank: the first problem found,
 * or NULL. */
static char *check_lists(const int *all, int world) {
    for (int q = 0; q < world; q++) {
        char *bad = bad_list(all + (size_t)q * ROW, q, world);
        if (bad) return bad;
    }
    for (int q = 0; q < world; q++) {
        const int *mine = all + (size_t)q * ROW;
        for (int i = 0; i < mine[0]; i++) {
            int r = mine[1 + i];
            const int *theirs = all + (size_t)r * ROW;
            if (same_list(mine, theirs)) continue;
            char a[4 * ROW + 8], b[4 * ROW + 8];
            list_text(a, sizeof a, mine + 1, mine[0]);
            list_text(b, sizeof b, theirs + 1, theirs[0]);
            return lx_fmt("ranks %d and %d disagree: rank %d says its group is %s, rank %d says %s (the ranks of "
                          "a group pass the same list, in the same order)",
                          q, r, q, a, r, b);
        }
    }
    return NULL;
}

dist_group *dist_new_group(const int *ranks, int n) {
    const lx_call *c = &lx_calls[LX_NEW_GROUP];
    lx_need_rank(c);
    int world = lx_the_world.size, me = lx_the_world.rank;
    int row[ROW];
    memset(row, 0, sizeof row);
    row[0] = ranks ? n : -1;
    for (int i = 0; ranks && i < n && i < LECTERN_MAX_WORLD; i++)
        row[1 + i] = ranks[i];
    if (ranks && n > LECTERN_MAX_WORLD) row[0] = world + 1; /* too many: named below */
    call_site site;
    lx_call_enter(&site, c->name, -1);
    /* Every rank's list to every rank: each names the same problem, or none. */
    int *all = malloc(sizeof(int) * ROW * (size_t)world);
    if (!all) lx_fatal("out of memory");
    MPI_CHECK(MPI_Allgather(row, ROW, MPI_INT, all, ROW, MPI_INT, lx_the_world.comm));
    char *bad = check_lists(all, world);
    free(all);
    if (bad) {
        lx_error("%s(): %s", c->name, bad);
        free(bad);
        /* Every rank's error step is on its way before any rank exits. */
        MPI_CHECK(MPI_Barrier(lx_the_world.comm));
        exit(1);
    }
    dist_group *g = calloc(1, sizeof *g);
    if (!g) lx_fatal("out of memory");
    g->size = n;
    int color = ranks[0];
    for (int i = 0; i < n; i++) {
        g->ranks[i] = ranks[i];
        if (ranks[i] == me) g->rank = i;
        if (ranks[i] < color) color = ranks[i];
    }
    snprintf(g->name, sizeof g->name, "{");
    for (int i = 0; i < n; i++) {
        size_t at = strlen(g->name);
        snprintf(g->name + at, sizeof g->name - at, "%s%d", i ? "," : "", ranks[i]);
    }
    size_t at = strlen(g->name);
    if (at + 1 < sizeof g->name) snprintf(g->name + at, sizeof g->name - at, "}");
    /* The groups of one call are disjoint: the first rank of each colours it. */
    MPI_CHECK(MPI_Comm_split(lx_the_world.comm, color, g->rank, &g->comm));
    MPI_CHECK(MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN));
    g->check_comm = g->comm; /* the checks are the only calls made on it here */
    g->agreed = lx_agree_group_new();
    g->backend = lx_ops->group_new(g);
    g->next = groups;
    groups = g;
    lx_call_leave();
    return g;
}

int dist_group_rank(const dist_group *g) {
    if (!g) return dist_rank();
    const lx_call *c = &lx_calls[LX_GROUP_RANK];
    lx_need_rank(c);
    check_group(c->name, g);
    return g->rank;
}

int dist_group_size(const dist_group *g) {
    if (!g) return dist_world_size();
    const lx_call *c = &lx_calls[LX_GROUP_SIZE];
    lx_need_rank(c);
    check_group(c->name, g);
    return g->size;
}

void dist_group_free(dist_group *g) {
    const lx_call *c = &lx_calls[LX_GROUP_FREE];
    lx_need_rank(c);
    if (!g) lx_fatal("%s(): the group is NULL (NULL stands for all ranks, which are not freed)", c->name);
    check_group(c->name, g);
    if (g->busy)
        lx_fatal("%s(): %d request%s on group %s not waited for yet: dist_wait them first", c->name, g->busy,
                 g->busy == 1 ? " is" : "s are", g->name);
    lx_agree_group_settle(g); /* freed inside a timed region: what it skipped there, compared now */
    dist_group **p = &groups;
    while (*p != g)
        p = &(*p)->next;
    *p = g->next;
    free_group(g);
}

/* ---- timed regions ---- */

/* Inside, repeated calls skip the agreement check (comm_agree.c), the
 * world's and each group's. Outside a spawn there is nothing to check: both
 * do nothing. */
void dist_timed_begin(void) {
    if (lx_ops) lx_agree_timed_begin();
}

void dist_timed_end(void) {
    if (lx_ops && lx_agree_timed_end()) settle_groups(groups);
}

/* A group call: where it is (the board names the group), and the group's
 * ranks agree on it. */
static void enter_group(call_site *site, const dist_group *g, const lx_call *c, size_t count, int op, int root) {
    char what[48];
    snprintf(what, sizeof what, "%s(group %s)", c->name, g->name);
    lx_call_enter(site, what, -1);
    lx_agree_collective_in(g, c, (int64_t)count, op, root, site->frames, site->n);
}

void dist_all_reduce_in(dist_group *g, tensor *t, dist_op op) {
    if (!g) {
        dist_all_reduce(t, op);
        return;
    }
    const lx_call *c = &lx_calls[LX_ALL_REDUCE_IN];
    lx_need_rank(c);
    check_group(c->name, g);
    size_t n = lx_check_args(c, g, t, -1, op);
    lx_call_show(c->name, "t", "before", t);
    call_site site;
    enter_group(&site, g, c, n, op, -1);
    lx_use_group(g);
    lx_ops->all_reduce(t->raw, n, op);
    lx_use_group(NULL);
    lx_call_leave();
    lx_call_show(c->name, "t", "after", t);
}

void dist_broadcast_in(dist_group *g, tensor *t, int src) {
    if (!g) {
        dist_broadcast(t, src);
        return;
    }
    const lx_call *c = &lx_calls[LX_BROADCAST_IN];
    lx_need_rank(c);
    check_group(c->name, g);
    size_t n = lx_check_args(c, g, t, src, DIST_SUM);
    lx_call_show(c->name, "t", "before", t);
    call_site site;
    enter_group(&site, g, c, n, -1, src);
    lx_use_group(g);
    lx_ops->broadcast(t->raw, n, src);
    lx_use_group(NULL);
    lx_call_leave();
    lx_call_show(c->name, "t", "after", t);
}

void dist_reduce_scatter_in(dist_group *g, tensor *output, const tensor *input, dist_op op) {
    if (!g) {
        dist_reduce_scatter(output, input, op);
        return;
    }
    const lx_call *c = &lx_calls[LX_REDUCE_SCATTER_IN];
    lx_need_rank(c);
    check_group(c->name, g);
    size_t out_n = lx_check_reduce_scatter(c->name, g, output, input, op);
    lx_call_show(c->name, "input", "before", input);
    call_site site;
    enter_group(&site, g, c, out_n, op, -1);
    lx_use_group(g);
    lx_ops->reduce_scatter(output->raw, input->raw, out_n, op);
    lx_use_group(NULL);
    lx_call_leave();
    lx_call_show(c->name, "output", "after", output);
}

void dist_all_gather_in(dist_group *g, tensor *output, const tensor *input) {
    if (!g) {
        dist_all_gather(output, input);
        return;
    }
    const lx_call *c = &lx_calls[LX_ALL_GATHER_IN];
    lx_need_rank(c);
    check_group(c->name, g);
    size_t in_n = lx_check_all_gather(c->name, g, output, input);
    lx_call_show(c->name, "input", "before", input);
    call_site site;
    enter_group(&site, g, c, in_n, -1, -1);
    lx_use_group(g);
    lx_ops->all_gather(output->raw, input->raw, in_n);
    lx_use_group(NULL);
    lx_call_leave();
    lx_call_show(c->name, "output", "after", output);
}

void dist_all_to_all_in(dist_group *g, tensor *output, const tensor *input) {
    const lx_call *c = &lx_calls[g ? LX_ALL_TO_ALL_IN : LX_ALL_TO_ALL];
    lx_need_rank(c);
    check_group(c->name, g);
    size_t piece = lx_check_all_to_all(c->name, g, output, input);
    lx_call_show(c->name, "input", "before", input);
    call_site site;
    if (g) enter_group(&site, g, c, piece, -1, -1);
    else lx_call_enter_collective(&site, c, piece, -1, -1);
    if (g) lx_use_group(g);
    lx_ops->all_to_all(output->raw, input->raw, piece);
    if (g) lx_use_group(NULL);
    lx_call_leave();
    lx_call_show(c->name, "output", "after", output);
}

void dist_all_to_all(tensor *output, const tensor *input) { dist_all_to_all_in(NULL, output, input); }

/* A group's async call: checked like lx_request_collective, over the group. */
static dist_request *async_group(call_site *site, dist_group *g, const lx_call *c, size_t count, int op, int root) {
    enter_group(site, g, c, count, op, root);
    lx_call_leave();
    dist_request *req = lx_request_new(c, -1, (int64_t)count, site);
    req->group = g;
    g->busy++;
    return req;
}

dist_request *dist_all_reduce_in_async(dist_group *g, tensor *t, dist_op op) {
    if (!g) return dist_all_reduce_async(t, op);
    const lx_call *c = &lx_calls[LX_ALL_REDUCE_IN_ASYNC];
    lx_need_rank(c);
    check_group(c->name, g);
    size_t n = lx_check_args(c, g, t, -1, op);
    call_site site;
    dist_request *req = async_group(&site, g, c, n, op, -1);
    lx_request_uses(req, t, 1);
    lx_use_group(g);
    req->backend_request = lx_ops->iall_reduce(t->raw, n, op);
    lx_use_group(NULL);
    return req;
}

dist_request *dist_broadcast_in_async(dist_group *g, tensor *t, int src) {
    if (!g) return dist_broadcast_async(t, src);
    const lx_call *c = &lx_calls[LX_BROADCAST_IN_ASYNC];
    lx_need_rank(c);
    check_group(c->name, g);
    size_t n = lx_check_args(c, g, t, src, DIST_SUM);
    call_site site;
    dist_request *req = async_group(&site, g, c, n, -1, src);
    lx_request_uses(req, t, 1);
    lx_use_group(g);
    req->backend_request = lx_ops->ibroadcast(t->raw, n, src);
    lx_use_group(NULL);
    return req;
}

dist_request *dist_reduce_scatter_in_async(dist_group *g, tensor *output, const tensor *input, dist_op op) {
    if (!g) return dist_reduce_scatter_async(output, input, op);
    const lx_call *c = &lx_calls[LX_REDUCE_SCATTER_IN_ASYNC];
    lx_need_rank(c);
    check_group(c->name, g);
    size_t out_n = lx_check_reduce_scatter(c->name, g, output, input, op);
    call_site site;
    dist_request *req = async_group(&site, g, c, out_n, op, -1);
    lx_request_uses(req, output, 1);
    lx_request_uses(req, input, 0);
    lx_use_group(g);
    req->backend_request = lx_ops->ireduce_scatter(output->raw, input->raw, out_n, op);
    lx_use_group(NULL);
    return req;
}

dist_request *dist_all_gather_in_async(dist_group *g, tensor *output, const tensor *input) {
    if (!g) return dist_all_gather_async(output, input);
    const lx_call *c = &lx_calls[LX_ALL_GATHER_IN_ASYNC];
    lx_need_rank(c);
    check_group(c->name, g);
    size_t in_n = lx_check_all_gather(c->name, g, output, input);
    call_site site;
    dist_request *req = async_group(&site, g, c, in_n, -1, -1);
    lx_request_uses(req, output, 1);
    lx_request_uses(req, input, 0);
    lx_use_group(g);
    req->backend_request = lx_ops->iall_gather(output->raw, input->raw, in_n);
    lx_use_group(NULL);
    return req;
}

dist_request *dist_all_to_all_in_async(dist_group *g, tensor *output, const tensor *input) {
    const lx_call *c = &lx_calls[g ? LX_ALL_TO_ALL_IN_ASYNC : LX_ALL_TO_ALL_ASYNC];
    lx_need_rank(c);
    check_group(c->name, g);
    size_t piece = lx_check_all_to_all(c->name, g, output, input);
    call_site site;
    dist_request *req = g ? async_group(&site, g, c, piece, -1, -1) : lx_request_collective(&site, c, piece, -1, -1);
    lx_request_uses(req, output, 1);
    lx_request_uses(req, input, 0);
    if (g) lx_use_group(g);
    req->backend_request = lx_ops->iall_to_all(output->raw, input->raw, piece);
    if (g) lx_use_group(NULL);
    return req;
}

dist_request *dist_all_to_all_async(tensor *output, const tensor *input) {
    return dist_all_to_all_in_async(NULL, output, input);
}
