/*
 * links_record.c: a rank's side of "who talked to whom" (trace.h,
 * docs/trace-format.md, spawns[i].messages and .collectives).
 *
 * A reader stepping through rank 1's receive wants the send it matched:
 * which rank, which line, where that rank was. Each rank therefore keeps,
 * for every point-to-point call and collective it makes, one fixed-size
 * record: the call as the comm layer describes it (comm_stats.c, the same
 * description the twin gets), the lecture line that made it, the rank's
 * last step before it and the clock around it. At the function's end the
 * record goes to the lecture as JSON text (MSG_LINKS, spawn_rank.c), which
 * matches the ranks' records (links_match.c).
 *
 * Cost: always on, so it must be small. A call costs one record copied into
 * a buffer allocated once (LX_LINKS_MAX_CALLS records, about 100 bytes
 * each); a wait searches the records still in flight from the newest. No
 * JSON until the spawn's end. Beyond the cap a call is counted, not kept:
 * the trace says how many were dropped.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

typedef struct link_call {
    const char *name;   /* dist_call_name's spelling: "send", "all_reduce" */
    const void *req;    /* an async call's backend request until its wait; else NULL */
    int async;          /* made with isend/irecv/..._async */
    int peer, src;      /* world ranks: dst/src/root (-1 none); sendrecv's src */
    int group;          /* index in groups[], -1 the world */
    int64_t bytes;      /* as the twin counts them (docs/twin.md) */
    int64_t recv_bytes; /* sendrecv: what it receives */
    lx_frame site;      /* the lecture line that made the call (path NULL: unknown) */
    int step;           /* the rank's last step before the call, -1 none */
    double start, end;  /* lx_elapsed(): entered, returned (async: its wait returned) */
} link_call;

static link_call *calls;
static int n_calls, dropped;
static int steps_sent; /* this spawn's steps sent to the lecture so far */

/* A group's world ranks, kept once: a call names its group by index. */
#define MAX_GROUPS 256
static int *groups[MAX_GROUPS];
static int group_size[MAX_GROUPS];
static int n_groups;

void lx_links_begin(void) {
    n_calls = dropped = 0;
    __atomic_store_n(&steps_sent, 0, __ATOMIC_RELAXED);
    for (int g = 0; g < n_groups; g++)
        free(groups[g]);
    n_groups = 0;
}

/* Steps are sent by the rank's lecture thread and by its output relay. */
void lx_links_step_sent(void) { __atomic_add_fetch(&steps_sent, 1, __ATOMIC_RELAXED); }

/* -1: the world; -2: more groups than any lecture makes (the call is dropped). */
static int group_index(const int *ranks, int size) {
    if (!ranks) return -1;
    for (int g = 0; g < n_groups; g++)
        if (group_size[g] == size && memcmp(groups[g], ranks, sizeof(int) * (size_t)size) == 0) return g;
    if (n_groups == MAX_GROUPS) return -2;
    groups[n_groups] = malloc(sizeof(int) * (size_t)size);
    if (!groups[n_groups]) lx_fatal("out of memory for the message links' groups");
    memcpy(groups[n_groups], ranks, sizeof(int) * (size_t)size);
    group_size[n_groups] = size;
    return n_groups++;
}

void lx_links_call(const lx_twin_call_desc *c, const lx_frame *site, double enter) {
    if (!lx_in_rank()) return;
    if (!calls) {
        calls = malloc(sizeof *calls * LX_LINKS_MAX_CALLS);
        if (!calls) lx_fatal("out of memory for the message links");
    }
    int group = group_index(c->group_ranks, c->group_size);
    if (n_calls == LX_LINKS_MAX_CALLS || group == -2) {
        dropped++;
        return;
    }
    link_call *k = &calls[n_calls++];
    k->name = c->name;
    k->req = c->backend_request;
    k->async = c->backend_request != NULL;
    k->peer = c->peer;
    k->src = c->src;
    k->group = group;
    k->bytes = c->bytes;
    k->recv_bytes = c->recv_bytes;
    k->site = site ? *site : (lx_frame){0};
    k->step = __atomic_load_n(&steps_sent, __ATOMIC_RELAXED) - 1;
    k->start = enter;
    k->end = c->end;
}

/* The newest call still waiting on this request: a request's address can be
 * reused once its wait freed it, so older ones are already cleared. */
void lx_links_wait(const void *backend_request, double end) {
    if (!lx_in_rank() || !backend_request) return;
    for (int i = n_calls - 1; i >= 0; i--)
        if (calls[i].req == backend_request) {
            calls[i].req = NULL;
            calls[i].end = end;
            return;
        }
}

static double micro(double s) { return (double)llround(s * 1e6) / 1e6; }

/* The name the lecture wrote: dist_isend is "isend", dist_all_reduce_async
 * "all_reduce_async". */
static void add_call_name(cJSON *o, const link_call *k) {
    char name[48];
    if (!k->async) snprintf(name, sizeof name, "%s", k->name);
    else if (strcmp(k->name, "send") == 0 || strcmp(k->name, "recv") == 0) snprintf(name, sizeof name, "i%s", k->name);
    else snprintf(name, sizeof name, "%s_async", k->name);
    cJSON_AddStringToObject(o, "call", name);
}

char *lx_links_rank_text(void) {
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(root, "calls");
    for (int i = 0; i < n_calls; i++) {
        const link_call *k = &calls[i];
        cJSON *o = cJSON_CreateObject();
        add_call_name(o, k);
        cJSON_AddNumberToObject(o, "bytes", (double)k->bytes);
        if (strcmp(k->name, "sendrecv") == 0) cJSON_AddNumberToObject(o, "recv_bytes", (double)k->recv_bytes);
        if (k->peer >= 0) cJSON_AddNumberToObject(o, "peer", k->peer);
        if (k->src >= 0) cJSON_AddNumberToObject(o, "src", k->src);
        if (k->group >= 0)
            cJSON_AddItemToObject(o, "group", cJSON_CreateIntArray(groups[k->group], group_size[k->group]));
        if (k->site.path) {
            cJSON_AddStringToObject(o, "path", k->site.path);
            cJSON_AddNumberToObject(o, "line", k->site.line);
            if (k->site.function) cJSON_AddStringToObject(o, "function", k->site.function);
        }
        if (k->step >= 0) cJSON_AddNumberToObject(o, "step", k->step);
        cJSON_AddNumberToObject(o, "start", micro(k->start));
        cJSON_AddNumberToObject(o, "end", micro(k->end));
        if (k->req) cJSON_AddTrueToObject(o, "never_waited");
        cJSON_AddItemToArray(list, o);
    }
    if (dropped) cJSON_AddNumberToObject(root, "dropped", dropped);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) lx_fatal("out of memory printing the message links");
    return text;
}
