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

/* A rank's calls, parsed, and indexed: by the peer they send to or receive
 * from, and by the group of a collective, each list in call order (a
 * compressed row: list[off[p]] .. list[off[p + 1] - 1]). */
typedef struct rank_calls {
    cJSON *root;  /* the parsed record, NULL when none came */
    cJSON **call; /* its calls in order */
    int n;
    int *to, *to_off;     /* sends, by peer */
    int *from, *from_off; /* receives, by peer */
    int *coll, *coll_off; /* collectives, by group (matcher.groups) */
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
    char **group_key; /* the groups collectives ran on: "world" or "[0,1,2]" */
    int n_groups;
    int (*step_of)(void *ctx, int rank, int k);
    void *ctx;
    cJSON *unmatched;
    cJSON *sites; /* link_sites */
} matcher;

/* The call sites of the spawn's links, each once: {"call", "path", "line",
 * "function"}. A link's side names its site by index (a lecture makes
 * thousands of calls from a few dozen lines: the trace stays small). */
static int site_of(matcher *m, const cJSON *c) {
    const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "path"));
    if (!path) return -1;
    const char *fn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "function"));
    const char *call = call_name(c);
    int line = num(c, "line", 0);
    int i = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, m->sites) {
        const char *sf = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "function"));
        if (num(s, "line", 0) == line &&
            strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "path")), path) == 0 &&
            strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "call")), call) == 0 &&
            (sf && fn ? strcmp(sf, fn) == 0 : sf == fn))
            return i;
        i++;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "call", call);
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddNumberToObject(o, "line", line);
    if (fn) cJSON_AddStringToObject(o, "function", fn);
    cJSON_AddItemToArray(m->sites, o);
    return i;
}

/* The trace's index of the rank's last step before the call, -1 none. */
static int step_at(const matcher *m, int rank, const cJSON *c) {
    int k = num(c, "step", -1);
    return k >= 0 ? m->step_of(m->ctx, rank, k) : -1;
}

static cJSON *int_or_null(int v) { return v >= 0 ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

/* One side of a link, compact: [rank, site, step, start, end] (a
 * collective's: [rank, site, step, arrive, leave]). */
static cJSON *side(matcher *m, int rank, const cJSON *c) {
    cJSON *o = cJSON_CreateArray();
    cJSON_AddItemToArray(o, cJSON_CreateNumber(rank));
    cJSON_AddItemToArray(o, int_or_null(site_of(m, c)));
    cJSON_AddItemToArray(o, int_or_null(step_at(m, rank, c)));
    cJSON_AddItemToArray(o, cJSON_CreateNumber(real(c, "start")));
    cJSON_AddItemToArray(o, cJSON_CreateNumber(real(c, "end")));
    return o;
}

/* A call left over, spelled out (they are few): its rank, call, line and
 * step, its clock and why. */
static cJSON *described(const matcher *m, int rank, const cJSON *c) {
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
    cJSON_AddItemToObject(o, "step", int_or_null(step_at(m, rank, c)));
    cJSON_AddNumberToObject(o, "start", real(c, "start"));
    cJSON_AddNumberToObject(o, "end", real(c, "end"));
    return o;
}

static void unmatched(matcher *m, int rank, const cJSON *c, char *why) {
    cJSON *o = described(m, rank, c);
    cJSON_AddStringToObject(o, "why", why);
    cJSON_AddItemToArray(m->unmatched, o);
    free(why);
}

/* ---- point to point ---- */

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
    if (n > 1) qsort(list, (size_t)n, sizeof *list, by_t); /* list is NULL when n is 0 */
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
            const int *s = ra->to + ra->to_off[b], *r = rb->from + rb->from_off[a];
            int ns = ra->to_off[b + 1] - ra->to_off[b], nr = rb->from_off[a + 1] - rb->from_off[a];
            int both = ns < nr ? ns : nr;
            for (int k = 0; k < both; k++) {
                const cJSON *sc = ra->call[s[k]], *rc = rb->call[r[k]];
                cJSON *msg = cJSON_CreateObject();
                cJSON_AddStringToObject(msg, "kind", call_name(sc));
                cJSON_AddNumberToObject(msg, "bytes", real(sc, "bytes"));
                cJSON_AddItemToObject(msg, "from", side(m, a, sc));
                cJSON_AddItemToObject(msg, "to", side(m, b, rc));
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
        }
    cJSON *out = cJSON_CreateArray();
    add_sorted(out, list, n);
    return out;
}

/* ---- collectives ---- */

/* A group's members, from its key's call (the world's: every rank). */
static int members_of(const matcher *m, const cJSON *c, int *ranks) {
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(c, "group");
    int n = 0;
    if (!cJSON_IsArray(g)) {
        for (int r = 0; r < m->world_size; r++)
            ranks[n++] = r;
        return n;
    }
    const cJSON *x;
    cJSON_ArrayForEach(x, g) if (n < LECTERN_MAX_WORLD) ranks[n++] = x->valueint;
    return n;
}

static int lowest(const int *ranks, int n) {
    int low = ranks[0];
    for (int j = 1; j < n; j++)
        if (ranks[j] < low) low = ranks[j];
    return low;
}

/* Rank q's k-th collective on group g, or NULL. */
static const cJSON *kth_on(const matcher *m, int q, int g, int k) {
    if (q < 0 || q >= m->world_size) return NULL;
    const rank_calls *rq = &m->ranks[q];
    if (k >= rq->coll_off[g + 1] - rq->coll_off[g]) return NULL;
    return rq->call[rq->coll[rq->coll_off[g] + k]];
}

static char *missing_call(const matcher *m, int q, int k) {
    return m->ranks[q].root ? lx_fmt("collective number %d on its group: rank %d made no such call", k + 1, q)
                            : lx_fmt("collective number %d on its group: rank %d's calls were not recorded: it did "
                                     "not finish",
                                     k + 1, q);
}

/* The k-th collective on group g, opened by its lowest member `low`. */
static cJSON *collective(matcher *m, int g, int low, int k, double *first) {
    const cJSON *c = kth_on(m, low, g, k);
    int members[LECTERN_MAX_WORLD];
    int size = members_of(m, c, members);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "op", call_name(c));
    cJSON_AddItemToObject(e, "group", cJSON_CreateIntArray(members, size));
    if (!cJSON_GetObjectItemCaseSensitive(c, "group")) cJSON_AddTrueToObject(e, "world");
    cJSON_AddNumberToObject(e, "bytes", real(c, "bytes"));
    cJSON *calls = cJSON_AddArrayToObject(e, "calls");
    double last = 0;
    int last_rank = -1, got = 0;
    for (int j = 0; j < size; j++) {
        const cJSON *qc = kth_on(m, members[j], g, k);
        if (!qc) continue;
        cJSON_AddItemToArray(calls, side(m, members[j], qc));
        double t = real(qc, "start");
        if (!got || t < *first) *first = t;
        if (!got || t > last) last = t, last_rank = members[j];
        got++;
    }
    if (got == size) {
        cJSON_AddNumberToObject(e, "last", last_rank);
        return e;
    }
    cJSON_AddTrueToObject(e, "incomplete");
    for (int j = 0; j < size; j++)
        if (members[j] >= 0 && members[j] < m->world_size && !kth_on(m, members[j], g, k))
            unmatched(m, low, c, missing_call(m, members[j], k));
    return e;
}

static cJSON *match_collectives(matcher *m) {
    timed *list = NULL;
    int n = 0, cap = 0;
    for (int g = 0; g < m->n_groups; g++) {
        /* The group's members, from any call on it. */
        const cJSON *any = NULL;
        for (int q = 0; q < m->world_size && !any; q++)
            any = kth_on(m, q, g, 0);
        int members[LECTERN_MAX_WORLD];
        int size = members_of(m, any, members);
        int low = lowest(members, size);
        /* Each call is opened by the group's lowest member: its k-th. */
        int made = low >= 0 && low < m->world_size ? m->ranks[low].coll_off[g + 1] - m->ranks[low].coll_off[g] : 0;
        for (int k = 0; k < made; k++) {
            double first = 0;
            cJSON *e = collective(m, g, low, k, &first);
            grow(&list, &n, &cap);
            list[n++] = (timed){first, e};
        }
        /* Calls past the lowest member's: nobody opened them. */
        for (int j = 0; j < size; j++) {
            int q = members[j];
            for (int k = made; q != low && kth_on(m, q, g, k); k++)
                unmatched(m, q, kth_on(m, q, g, k), missing_call(m, low, k));
        }
    }
    cJSON *out = cJSON_CreateArray();
    add_sorted(out, list, n);
    return out;
}

/* ---- indexing a rank's calls ---- */

static int group_id(matcher *m, const cJSON *c) {
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(c, "group");
    char *key = g ? cJSON_PrintUnformatted(g) : strdup("world");
    if (!key) lx_fatal("out of memory matching messages");
    for (int i = 0; i < m->n_groups; i++)
        if (strcmp(m->group_key[i], key) == 0) {
            free(key);
            return i;
        }
    char **more = realloc(m->group_key, sizeof *more * (size_t)(m->n_groups + 1));
    if (!more) lx_fatal("out of memory matching messages");
    m->group_key = more;
    m->group_key[m->n_groups] = key;
    return m->n_groups++;
}

/* A compressed row of `n` calls keyed 0..keys-1 (-1: none): off[keys + 1], list. */
static void index_by(const int *key, int n, int keys, int **list, int **off) {
    *off = calloc((size_t)keys + 2, sizeof **off);
    *list = malloc(sizeof **list * (size_t)(n + 1));
    if (!*off || !*list) lx_fatal("out of memory matching messages");
    for (int i = 0; i < n; i++)
        if (key[i] >= 0) (*off)[key[i] + 2]++;
    for (int p = 2; p <= keys + 1; p++)
        (*off)[p] += (*off)[p - 1];
    for (int i = 0; i < n; i++) /* off[p + 1] runs as the fill cursor of key p */
        if (key[i] >= 0) (*list)[(*off)[key[i] + 1]++] = i;
}

static void index_rank(matcher *m, rank_calls *r, int *group_of_call) {
    int *to = malloc(sizeof *to * (size_t)(r->n + 1)), *from = malloc(sizeof *from * (size_t)(r->n + 1));
    if (!to || !from) lx_fatal("out of memory matching messages");
    for (int i = 0; i < r->n; i++) {
        const cJSON *c = r->call[i];
        int t = sends_to(c), f = receives_from(c);
        to[i] = t < m->world_size ? t : -1;
        from[i] = f < m->world_size ? f : -1;
        group_of_call[i] = kind_of(c) == COLLECTIVE && !is(c, "sendrecv", "sendrecv") ? group_id(m, c) : -1;
    }
    index_by(to, r->n, m->world_size, &r->to, &r->to_off);
    index_by(from, r->n, m->world_size, &r->from, &r->from_off);
    free(to);
    free(from);
}

void lx_links_match(cJSON *entry, char *const *texts, int world_size, int (*step_of)(void *ctx, int rank, int k),
                    void *ctx) {
    rank_calls *ranks = calloc((size_t)world_size, sizeof *ranks);
    int **group_of_call = calloc((size_t)world_size, sizeof *group_of_call);
    if (!ranks || !group_of_call) lx_fatal("out of memory matching messages");
    matcher m = {ranks, world_size, NULL, 0, step_of, ctx, cJSON_CreateArray(), cJSON_CreateArray()};
    cJSON *missing = cJSON_CreateArray(), *dropped = cJSON_CreateArray();
    int any_dropped = 0;
    for (int r = 0; r < world_size; r++) {
        ranks[r].root = texts[r] ? cJSON_Parse(texts[r]) : NULL;
        cJSON *list = cJSON_GetObjectItemCaseSensitive(ranks[r].root, "calls");
        int n = cJSON_GetArraySize(list);
        ranks[r].call = malloc(sizeof(cJSON *) * (size_t)(n + 1));
        group_of_call[r] = malloc(sizeof(int) * (size_t)(n + 1));
        if (!ranks[r].call || !group_of_call[r]) lx_fatal("out of memory matching messages");
        cJSON *c;
        cJSON_ArrayForEach(c, list) ranks[r].call[ranks[r].n++] = c;
        index_rank(&m, &ranks[r], group_of_call[r]);
        int d = num(ranks[r].root, "dropped", 0);
        any_dropped |= d > 0;
        cJSON_AddItemToArray(dropped, cJSON_CreateNumber(d));
        if (!ranks[r].root) cJSON_AddItemToArray(missing, cJSON_CreateNumber(r));
    }
    /* The groups are known once every rank is read. */
    for (int r = 0; r < world_size; r++)
        index_by(group_of_call[r], ranks[r].n, m.n_groups, &ranks[r].coll, &ranks[r].coll_off);
    lx_json_set(entry, "messages", match_messages(&m));
    lx_json_set(entry, "collectives", match_collectives(&m));
    lx_json_set(entry, "link_sites", m.sites);
    if (cJSON_GetArraySize(m.unmatched) > 0) lx_json_set(entry, "links_unmatched", m.unmatched);
    else cJSON_Delete(m.unmatched);
    if (any_dropped) lx_json_set(entry, "links_dropped", dropped);
    else cJSON_Delete(dropped);
    if (cJSON_GetArraySize(missing) > 0) lx_json_set(entry, "links_missing", missing);
    else cJSON_Delete(missing);
    for (int r = 0; r < world_size; r++) {
        cJSON_Delete(ranks[r].root);
        free(ranks[r].call);
        free(ranks[r].to);
        free(ranks[r].to_off);
        free(ranks[r].from);
        free(ranks[r].from_off);
        free(ranks[r].coll);
        free(ranks[r].coll_off);
        free(group_of_call[r]);
    }
    for (int g = 0; g < m.n_groups; g++)
        free(m.group_key[g]);
    free(m.group_key);
    free(group_of_call);
    free(ranks);
}
