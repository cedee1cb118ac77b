/*
 * links_match.c: the lecture's side of "who talked to whom" (trace.h,
 * docs/trace-format.md): at a spawn's end, the ranks' records of their
 * calls (links_record.c) become the spawn's "messages" and "collectives".
 *
 * Matching follows the rules the library itself follows, so it needs no
 * message identity:
 *  - point to point: MPI does not let two messages from one sender to one
 *    receiver overtake each other (and the runtime has no tags), so the
 *    k-th send from A to B is the one the k-th receive at B from A got.
 *    dist_sendrecv is a send to its dst and a receive from its src.
 *  - collectives: every member of a communicator makes its collectives in
 *    the same order, so the k-th collective a rank makes on a group (the
 *    world, or one group's ranks) is the same call as every other member's
 *    k-th there.
 * A call left over (its partner never made it, or its rank died before
 * sending its record) is listed in "links_unmatched" with the reason: a
 * failed spawn keeps every link that did match.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

enum { SEND, RECV, COLLECTIVE };

/* A rank's calls, parsed. */
typedef struct rank_calls {
    cJSON *root;  /* the parsed record, NULL when none came */
    cJSON **call; /* its calls in order */
    int n;
} rank_calls;

static const char *call_name(const cJSON *c) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "call"));
    return s ? s : "?";
}

static int is(const cJSON *c, const char *a, const char *b) {
    const char *s = call_name(c);
    return strcmp(s, a) == 0 || strcmp(s, b) == 0;
}

static int kind_of(const cJSON *c) {
    if (is(c, "send", "isend")) return SEND;
    if (is(c, "recv", "irecv")) return RECV;
    return COLLECTIVE; /* sendrecv is both a send and a receive: handled by name */
}

static int num(const cJSON *o, const char *key, int otherwise) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valueint : otherwise;
}

static double real(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* The peer a call sends to (-1: it sends nothing) and receives from. */
static int sends_to(const cJSON *c) {
    return kind_of(c) == SEND || is(c, "sendrecv", "sendrecv") ? num(c, "peer", -1) : -1;
}
static int receives_from(const cJSON *c) {
    if (kind_of(c) == RECV) return num(c, "peer", -1);
    return is(c, "sendrecv", "sendrecv") ? num(c, "src", -1) : -1;
}

typedef struct matcher {
    rank_calls *ranks;
    int world_size;
    int (*step_of)(void *ctx, int rank, int k);
    void *ctx;
    cJSON *unmatched;
} matcher;

/* One side of a link: the rank, its call, its line and step, its clock.
 * `t0`/`t1` name the clock: start/end for a message, arrive/leave for a
 * collective. */
static cJSON *side(const matcher *m, int rank, const cJSON *c, const char *t0, const char *t1) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rank", rank);
    cJSON_AddStringToObject(o, "call", call_name(c));
    const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "path"));
    if (path) {
        cJSON_AddStringToObject(o, "path", path);
        cJSON_AddNumberToObject(o, "line", num(c, "line", 0));
        const char *fn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "function"));
        if (fn) cJSON_AddStringToObject(o, "function", fn);
    }
    int k = num(c, "step", -1);
    int step = k >= 0 ? m->step_of(m->ctx, rank, k) : -1;
    if (step >= 0) cJSON_AddNumberToObject(o, "step", step);
    else cJSON_AddNullToObject(o, "step");
    cJSON_AddNumberToObject(o, t0, real(c, "start"));
    cJSON_AddNumberToObject(o, t1, real(c, "end"));
    return o;
}

static void unmatched(matcher *m, int rank, const cJSON *c, char *why) {
    cJSON *o = side(m, rank, c, "start", "end");
    cJSON_AddStringToObject(o, "why", why);
    cJSON_AddItemToArray(m->unmatched, o);
    free(why);
}

/* ---- point to point ---- */

/* Rank a's calls that send to b (or receive from b): their indices, in order. */
static int *calls_with(const rank_calls *r, int peer, int sending, int *n) {
    int *out = malloc(sizeof *out * (size_t)(r->n + 1));
    if (!out) lx_fatal("out of memory matching messages");
    *n = 0;
    for (int i = 0; i < r->n; i++)
        if ((sending ? sends_to(r->call[i]) : receives_from(r->call[i])) == peer) out[(*n)++] = i;
    return out;
}

typedef struct timed {
    double t;
    cJSON *item;
} timed;

static int by_t(const void *a, const void *b) {
    const timed *x = a, *y = b;
    return x->t < y->t ? -1 : x->t > y->t;
}

/* Appends `list` to `out` ordered by time (and frees it). */
static void add_sorted(cJSON *out, timed *list, int n) {
    qsort(list, (size_t)n, sizeof *list, by_t);
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(out, list[i].item);
    free(list);
}

static void grow(timed **list, int *n, int *cap) {
    if (*n < *cap) return;
    *cap = *cap ? 2 * *cap : 64;
    timed *more = realloc(*list, sizeof *more * (size_t)*cap);
    if (!more) lx_fatal("out of memory matching messages");
    *list = more;
}

static cJSON *match_messages(matcher *m) {
    timed *list = NULL;
    int n = 0, cap = 0;
    for (int a = 0; a < m->world_size; a++)
        for (int b = 0; b < m->world_size; b++) {
            const rank_calls *ra = &m->ranks[a], *rb = &m->ranks[b];
            int ns = 0, nr = 0;
            int *s = calls_with(ra, b, 1, &ns);
            int *r = calls_with(rb, a, 0, &nr);
            int both = ns < nr ? ns : nr;
            for (int k = 0; k < both; k++) {
                const cJSON *sc = ra->call[s[k]], *rc = rb->call[r[k]];
                cJSON *msg = cJSON_CreateObject();
                cJSON_AddStringToObject(msg, "kind", call_name(sc));
                cJSON_AddNumberToObject(msg, "bytes", real(sc, "bytes"));
                cJSON_AddItemToObject(msg, "from", side(m, a, sc, "start", "end"));
                cJSON_AddItemToObject(msg, "to", side(m, b, rc, "start", "end"));
                grow(&list, &n, &cap);
                list[n++] = (timed){real(sc, "start"), msg};
            }
            /* What is left over on either side. A rank whose record never
             * came has no calls here: its partners' calls are left over. */
            for (int k = both; k < ns; k++)
                unmatched(m, a, ra->call[s[k]],
                          rb->root ? lx_fmt("its send number %d to rank %d has no receive: rank %d received %d "
                                            "message%s from rank %d",
                                            k + 1, b, b, nr, nr == 1 ? "" : "s", a)
                                   : lx_fmt("rank %d's calls were not recorded: it did not finish", b));
            for (int k = both; k < nr; k++)
                unmatched(m, b, rb->call[r[k]],
                          ra->root ? lx_fmt("its receive number %d from rank %d has no send: rank %d sent %d "
                                            "message%s to rank %d",
                                            k + 1, a, a, ns, ns == 1 ? "" : "s", b)
                                   : lx_fmt("rank %d's calls were not recorded: it did not finish", a));
            free(s);
            free(r);
        }
    cJSON *out = cJSON_CreateArray();
    add_sorted(out, list, n);
    return out;
}

/* ---- collectives ---- */

/* The group a collective ran on: its ranks, or the world's. */
static int group_of(const matcher *m, const cJSON *c, int *ranks) {
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(c, "group");
    if (!cJSON_IsArray(g)) {
        for (int r = 0; r < m->world_size; r++)
            ranks[r] = r;
        return m->world_size;
    }
    int n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, g) if (n < LECTERN_MAX_WORLD) ranks[n++] = x->valueint;
    return n;
}

static int same_group(const cJSON *a, const cJSON *b) {
    const cJSON *ga = cJSON_GetObjectItemCaseSensitive(a, "group"), *gb = cJSON_GetObjectItemCaseSensitive(b, "group");
    if (!ga || !gb) return !ga && !gb;
    return cJSON_Compare(ga, gb, 1);
}

/* The k-th collective rank r made on the group of `like` (NULL: none). */
static const cJSON *kth_on(const rank_calls *r, const cJSON *like, int k) {
    for (int i = 0; i < r->n; i++) {
        const cJSON *c = r->call[i];
        if (kind_of(c) != COLLECTIVE || is(c, "sendrecv", "sendrecv") || !same_group(c, like)) continue;
        if (k-- == 0) return c;
    }
    return NULL;
}

static cJSON *match_collectives(matcher *m) {
    timed *list = NULL;
    int n = 0, cap = 0;
    /* Each collective is taken up from its lowest member: rank r's k-th call
     * on a group whose lowest member is r opens the entry. */
    for (int r = 0; r < m->world_size; r++) {
        const rank_calls *rr = &m->ranks[r];
        int k_on_group = 0;
        for (int i = 0; i < rr->n; i++) {
            const cJSON *c = rr->call[i];
            if (kind_of(c) != COLLECTIVE || is(c, "sendrecv", "sendrecv")) continue;
            int members[LECTERN_MAX_WORLD];
            int size = group_of(m, c, members);
            int lowest = members[0];
            for (int j = 1; j < size; j++)
                if (members[j] < lowest) lowest = members[j];
            if (lowest != r) continue;
            /* Its number among r's calls on this group. */
            k_on_group = 0;
            for (int j = 0; j < i; j++) {
                const cJSON *d = rr->call[j];
                if (kind_of(d) == COLLECTIVE && !is(d, "sendrecv", "sendrecv") && same_group(d, c)) k_on_group++;
            }
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "op", call_name(c));
            cJSON_AddItemToObject(e, "group", cJSON_CreateIntArray(members, size));
            if (!cJSON_GetObjectItemCaseSensitive(c, "group")) cJSON_AddTrueToObject(e, "world");
            cJSON_AddNumberToObject(e, "bytes", real(c, "bytes"));
            cJSON *calls = cJSON_AddArrayToObject(e, "calls");
            double first = 0, last = 0;
            int last_rank = -1, got = 0;
            for (int j = 0; j < size; j++) {
                int q = members[j];
                const cJSON *qc = q >= 0 && q < m->world_size ? kth_on(&m->ranks[q], c, k_on_group) : NULL;
                if (!qc) continue;
                cJSON_AddItemToArray(calls, side(m, q, qc, "arrive", "leave"));
                double t = real(qc, "start");
                if (!got || t < first) first = t;
                if (!got || t > last) last = t, last_rank = q;
                got++;
            }
            if (got == size) {
                cJSON_AddNumberToObject(e, "last", last_rank);
                cJSON_AddNumberToObject(e, "spread_s", (double)(long long)((last - first) * 1e6 + 0.5) / 1e6);
            } else {
                cJSON_AddTrueToObject(e, "incomplete");
                for (int j = 0; j < size; j++) {
                    int q = members[j];
                    if (q < 0 || q >= m->world_size || kth_on(&m->ranks[q], c, k_on_group)) continue;
                    unmatched(
                            m, r, c,
                            m->ranks[q].root
                                    ? lx_fmt("collective number %d on its group: rank %d made no such call",
                                             k_on_group + 1, q)
                                    : lx_fmt("collective number %d on its group: rank %d's calls were not recorded: it "
                                             "did not finish",
                                             k_on_group + 1, q));
                }
            }
            grow(&list, &n, &cap);
            list[n++] = (timed){first, e};
        }
    }
    /* A member that made more calls on a group than its lowest member: no
     * entry opened them (the lowest member's record is what numbers them). */
    for (int q = 0; q < m->world_size; q++) {
        const rank_calls *rq = &m->ranks[q];
        for (int i = 0; i < rq->n; i++) {
            const cJSON *c = rq->call[i];
            if (kind_of(c) != COLLECTIVE || is(c, "sendrecv", "sendrecv")) continue;
            int members[LECTERN_MAX_WORLD];
            int size = group_of(m, c, members);
            int lowest = members[0];
            for (int j = 1; j < size; j++)
                if (members[j] < lowest) lowest = members[j];
            if (lowest == q || lowest < 0 || lowest >= m->world_size) continue;
            int k = 0;
            for (int j = 0; j < i; j++) {
                const cJSON *d = rq->call[j];
                if (kind_of(d) == COLLECTIVE && !is(d, "sendrecv", "sendrecv") && same_group(d, c)) k++;
            }
            if (kth_on(&m->ranks[lowest], c, k)) continue;
            unmatched(m, q, c,
                      m->ranks[lowest].root
                              ? lx_fmt("collective number %d on its group: rank %d made no such call", k + 1, lowest)
                              : lx_fmt("collective number %d on its group: rank %d's calls were not recorded: it did "
                                       "not finish",
                                       k + 1, lowest));
        }
    }
    cJSON *out = cJSON_CreateArray();
    add_sorted(out, list, n);
    return out;
}

void lx_links_match(cJSON *entry, char *const *texts, int world_size, int (*step_of)(void *ctx, int rank, int k),
                    void *ctx) {
    rank_calls *ranks = calloc((size_t)world_size, sizeof *ranks);
    if (!ranks) lx_fatal("out of memory matching messages");
    cJSON *missing = cJSON_CreateArray(), *dropped = cJSON_CreateArray();
    int any_dropped = 0;
    for (int r = 0; r < world_size; r++) {
        ranks[r].root = texts[r] ? cJSON_Parse(texts[r]) : NULL;
        cJSON *list = cJSON_GetObjectItemCaseSensitive(ranks[r].root, "calls");
        int n = cJSON_GetArraySize(list);
        ranks[r].call = malloc(sizeof(cJSON *) * (size_t)(n + 1));
        if (!ranks[r].call) lx_fatal("out of memory matching messages");
        cJSON *c;
        cJSON_ArrayForEach(c, list) ranks[r].call[ranks[r].n++] = c;
        int d = num(ranks[r].root, "dropped", 0);
        any_dropped |= d > 0;
        cJSON_AddItemToArray(dropped, cJSON_CreateNumber(d));
        if (!ranks[r].root) cJSON_AddItemToArray(missing, cJSON_CreateNumber(r));
    }
    matcher m = {ranks, world_size, step_of, ctx, cJSON_CreateArray()};
    lx_json_set(entry, "messages", match_messages(&m));
    lx_json_set(entry, "collectives", match_collectives(&m));
    if (cJSON_GetArraySize(m.unmatched) > 0) lx_json_set(entry, "links_unmatched", m.unmatched);
    else cJSON_Delete(m.unmatched);
    if (any_dropped) lx_json_set(entry, "links_dropped", dropped);
    else cJSON_Delete(dropped);
    if (cJSON_GetArraySize(missing) > 0) lx_json_set(entry, "links_missing", missing);
    else cJSON_Delete(missing);
    for (int r = 0; r < world_size; r++) {
        cJSON_Delete(ranks[r].root);
        free(ranks[r].call);
    }
    free(ranks);
}
