/*
 * twin_record.c: what each rank of a spawn did, in order, for a replay on a
 * simulated machine (docs/twin.md). Off unless the lecture runs with
 * --twin-record; then the run also writes NAME.events.json beside its trace.
 *
 * A replay needs, per rank, the sequence the rank went through:
 *
 *   compute   the time between two calls, measured here, and the work the
 *             tensor ops counted in it (FLOPs and bytes moved, where they
 *             ran: lx_twin_work from tensor.c)
 *   modelled  a model_compute(ms) span: the ms asked for
 *   a call    a collective or a message: its kind, bytes, peer or root,
 *             group; an async one its request number, its wait the same
 *
 * Cost when on: a fixed-size record appended to this rank's buffer per
 * call (no allocation but the buffer's doubling, no JSON), and at the
 * spawn's end one message to the lecture (spawn_rank.c sends the text
 * lx_twin_rank_text makes, before "done"). Off: one test of a flag per
 * call and per tensor op.
 *
 * Flow:
 *   rank:    lx_twin_begin (spawn start) -> lx_twin_call/_wait/_modelled/_work
 *            -> lx_twin_rank_text (spawn end) -> MSG_TWIN to the lecture
 *   lecture: spawn_relay.c -> lx_twin_add_rank -> this file keeps the arrays
 *            -> the trace written (a listener) -> NAME.events.json
 * The events file is written only with a good trace: a failed run leaves
 * the last good one alone, as it does the trace.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

/* ---------------- on or off ---------------- */

/* lx_twin_recording() (options.c): --twin-record was given, in the lecture
 * and so in its ranks. */

/* ---------------- the rank's side ---------------- */

typedef struct event {
    int op;             /* EV_* below */
    const char *name;   /* a call's kind as dist_call_name spells it ("all_reduce") */
    int async;          /* a call that returns a request */
    int req;            /* its request number; a wait's: the request it completes */
    int peer, src;      /* dst/src/root as a world rank (-1: none); sendrecv's src */
    int group;          /* index in groups[], -1 the world */
    int64_t bytes;      /* the call's size (docs/twin.md); a compute's bytes moved */
    int64_t recv_bytes; /* sendrecv: what it receives */
    double start, end;  /* lx_elapsed() */
    double flops, ms;   /* a compute's FLOPs; a modelled span's ms */
} event;

enum { EV_CALL, EV_COMPUTE, EV_MODELLED, EV_WAIT };

static event *events;
static int n_events, cap_events, dropped;
static double last_end; /* end of the last event: compute runs from here */
static double work_flops, work_bytes;
static int next_req;
static struct pending {
    const void *backend;
    int req;
} * pending; /* async requests not yet waited */
static int n_pending, cap_pending;
static int *groups, n_groups, cap_groups; /* groups' world ranks, each as size then ranks */
static int group_at[256];                 /* groups[] offset of group i */

void lx_twin_begin(void) {
    n_events = dropped = n_pending = n_groups = 0;
    work_flops = work_bytes = 0;
    next_req = 0;
    last_end = lx_elapsed();
}

static event *push(void) {
    if (n_events == cap_events) {
        if (cap_events >= LX_TWIN_MAX_EVENTS) {
            dropped++;
            return NULL;
        }
        int cap = cap_events ? cap_events * 2 : 1024;
        event *more = realloc(events, sizeof *more * (size_t)cap);
        if (!more) lx_fatal("out of memory for the twin's events");
        events = more;
        cap_events = cap;
    }
    event *e = &events[n_events++];
    memset(e, 0, sizeof *e);
    e->peer = e->src = e->group = -1;
    return e;
}

/* The time since the last event is compute: recorded before the event that
 * ends it, with the work counted meanwhile. */
static void close_compute(double now) {
    if (now > last_end || work_flops > 0 || work_bytes > 0) {
        event *e = push();
        if (e) {
            e->op = EV_COMPUTE;
            e->start = last_end;
            e->end = now > last_end ? now : last_end;
            e->flops = work_flops;
            e->bytes = (int64_t)llround(work_bytes);
        }
    }
    work_flops = work_bytes = 0;
}

void lx_twin_work(double flops, double bytes) {
    if (!lx_in_rank() || !lx_twin_recording()) return;
    work_flops += flops;
    work_bytes += bytes;
}

static int group_index(const int *ranks, int size) {
    if (!ranks) return -1;
    for (int g = 0; g < n_groups; g++) {
        const int *at = groups + group_at[g];
        if (at[0] == size && memcmp(at + 1, ranks, sizeof(int) * (size_t)size) == 0) return g;
    }
    if (n_groups == (int)(sizeof group_at / sizeof group_at[0])) return -1; /* more groups than any lecture makes */
    int need = n_groups ? group_at[n_groups - 1] + groups[group_at[n_groups - 1]] + 1 : 0;
    if (need + size + 1 > cap_groups) {
        int cap = (need + size + 1) * 2;
        int *more = realloc(groups, sizeof *more * (size_t)cap);
        if (!more) lx_fatal("out of memory for the twin's groups");
        groups = more;
        cap_groups = cap;
    }
    group_at[n_groups] = need;
    groups[need] = size;
    memcpy(groups + need + 1, ranks, sizeof(int) * (size_t)size);
    return n_groups++;
}

int lx_twin_call(const lx_twin_call_desc *c) {
    if (!lx_in_rank() || !lx_twin_recording()) return 0;
    close_compute(c->start);
    event *e = push();
    int req = 0;
    if (e) {
        e->op = EV_CALL;
        e->name = c->name;
        e->async = c->backend_request != NULL;
        e->peer = c->peer;
        e->src = c->src;
        e->group = group_index(c->group_ranks, c->group_size);
        e->bytes = c->bytes;
        e->recv_bytes = c->recv_bytes;
        e->start = c->start;
        e->end = c->end;
    }
    if (c->backend_request) {
        req = ++next_req;
        if (e) e->req = req;
        if (n_pending == cap_pending) {
            int cap = cap_pending ? cap_pending * 2 : 64;
            struct pending *more = realloc(pending, sizeof *more * (size_t)cap);
            if (!more) lx_fatal("out of memory for the twin's requests");
            pending = more;
            cap_pending = cap;
        }
        pending[n_pending].backend = c->backend_request;
        pending[n_pending].req = req;
        n_pending++;
    }
    last_end = c->end;
    return req;
}

void lx_twin_wait(const void *backend_request, double start, double end) {
    if (!lx_in_rank() || !lx_twin_recording()) return;
    int req = 0;
    for (int i = 0; i < n_pending; i++)
        if (pending[i].backend == backend_request) {
            req = pending[i].req;
            pending[i] = pending[--n_pending];
            break;
        }
    if (!req) return; /* a request started before recording began */
    close_compute(start);
    event *e = push();
    if (e) {
        e->op = EV_WAIT;
        e->req = req;
        e->start = start;
        e->end = end;
    }
    last_end = end;
}

void lx_twin_modelled(double start, double end, double ms) {
    if (!lx_in_rank() || !lx_twin_recording()) return;
    close_compute(start);
    event *e = push();
    if (e) {
        e->op = EV_MODELLED;
        e->start = start;
        e->end = end;
        e->ms = ms;
    }
    last_end = end;
}

/* Microseconds, as the trace's times. */
static double micro(double s) { return (double)llround(s * 1e6) / 1e6; }

static const char *op_name(const event *e) {
    switch (e->op) {
    case EV_COMPUTE: return "compute";
    case EV_MODELLED: return "modelled";
    case EV_WAIT: return "wait";
    default: return e->name;
    }
}

char *lx_twin_rank_text(void) {
    double end = lx_elapsed();
    close_compute(end);
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(root, "events");
    for (int i = 0; i < n_events; i++) {
        const event *e = &events[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", op_name(e));
        cJSON_AddNumberToObject(o, "start", micro(e->start));
        cJSON_AddNumberToObject(o, "end", micro(e->end));
        if (e->op == EV_COMPUTE) {
            cJSON_AddNumberToObject(o, "flops", e->flops);
            cJSON_AddNumberToObject(o, "bytes", (double)e->bytes);
        } else if (e->op == EV_MODELLED) {
            cJSON_AddNumberToObject(o, "ms", e->ms);
        } else if (e->op == EV_WAIT) {
            cJSON_AddNumberToObject(o, "req", e->req);
        } else {
            cJSON_AddNumberToObject(o, "bytes", (double)e->bytes);
            if (strcmp(e->name, "sendrecv") == 0) cJSON_AddNumberToObject(o, "recv_bytes", (double)e->recv_bytes);
            if (e->peer >= 0) cJSON_AddNumberToObject(o, "peer", e->peer);
            if (e->src >= 0) cJSON_AddNumberToObject(o, "src", e->src);
            if (e->group >= 0) {
                const int *at = groups + group_at[e->group];
                cJSON_AddItemToObject(o, "group", cJSON_CreateIntArray(at + 1, at[0]));
            }
            if (e->async) cJSON_AddNumberToObject(o, "req", e->req);
        }
        cJSON_AddItemToArray(list, o);
    }
    cJSON_AddNumberToObject(root, "end", micro(end));
    if (dropped) cJSON_AddNumberToObject(root, "dropped", dropped);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) lx_fatal("out of memory printing the twin's events");
    n_events = 0;
    return text;
}

/* ---------------- the lecture's side ---------------- */

static cJSON *spawns; /* [{"id", "world_size", "ranks": [...]}] */

static void write_events(void);
static const lx_trace_listener listener = {.written = write_events};

void lx_twin_add_rank(int spawn_id, int rank, int world_size, const char *text) {
    cJSON *got = cJSON_Parse(text);
    if (!got) {
        fprintf(stderr, "lectern: rank %d sent twin events that are not JSON; dropped\n", rank);
        return;
    }
    if (!spawns) {
        spawns = cJSON_CreateArray();
        lx_trace_listen(&listener);
    }
    cJSON *s = NULL, *it;
    cJSON_ArrayForEach(it, spawns) {
        if (cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "id")) == spawn_id) s = it;
    }
    if (!s) {
        s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "id", spawn_id);
        cJSON_AddNumberToObject(s, "world_size", world_size);
        cJSON *ranks = cJSON_AddArrayToObject(s, "ranks");
        for (int r = 0; r < world_size; r++)
            cJSON_AddItemToArray(ranks, cJSON_CreateNull());
        cJSON_AddItemToArray(spawns, s);
    }
    cJSON *ranks = cJSON_GetObjectItemCaseSensitive(s, "ranks");
    if (rank >= 0 && rank < cJSON_GetArraySize(ranks)) cJSON_ReplaceItemInArray(ranks, rank, got);
    else cJSON_Delete(got);
}

cJSON *lx_twin_spawn_events(int id) {
    cJSON *it;
    cJSON_ArrayForEach(it, spawns) {
        if (cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "id")) == id) return it;
    }
    return NULL;
}

/* NAME.events.json beside the trace, when the trace written was a good one
 * and the run was asked for it (--twin-record; twin_record(1) alone keeps the
 * events for twin_last_spawn and writes no file). */
static void write_events(void) {
    if (!spawns || lx_failed() || !lx_twin_record_given()) return;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "lecture", lx_lecture_name());
    cJSON_AddItemReferenceToObject(root, "spawns", spawns);
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) return;
    char *path = lx_trace_path("events.json");
    const char *parts[] = {json, "\n"};
    lx_write_atomic(path, parts, 2);
    free(path);
    cJSON_free(json);
}
