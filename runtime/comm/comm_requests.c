/*
 * comm_requests.c: the calls that return at once with a request (async_op=
 * True in torch): dist_isend, dist_irecv and the world's *_async
 * collectives, and dist_wait and dist_test, which complete it.
 *
 * A request keeps the line that made it and the tensors it uses: the
 * tensor operations refuse to change them until its wait, and a send's
 * buffer changed through ->data is caught at the wait. Each one not waited
 * for when the spawned function returns is an error step at the line that
 * made it (lx_comm_finish_requests). The group calls' requests
 * (comm_groups.c) are made here too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "comm/comm_calls.h"
#include "ranks/ranks.h"

/* The outstanding requests, newest first. */
static dist_request *outstanding;

dist_request *lx_request_new(const lx_call *c, int peer, int64_t count, const call_site *site) {
    dist_request *req = calloc(1, sizeof *req);
    if (!req) lx_fatal("out of memory");
    req->call = c;
    req->peer = peer;
    req->count = count;
    req->site = *site;
    req->next = outstanding;
    if (outstanding) outstanding->prev = req;
    outstanding = req;
    return req;
}

/* XXH3 (libxxhash): a send's buffer is hashed at the call and again at its
 * wait, on the lecture's thread, so its cost is on every message's path. A
 * byte-serial FNV-1a took ~45 us for a pipeline stage's 256 KiB activation
 * (one multiply's latency per 8 bytes), twice per message; XXH3 reads it at
 * memory speed (bench/bench_stage_msg.c). A change to the values goes
 * unnoticed but for 1 in 2^64. */
static uint64_t hash_values(const tensor *t) { return XXH3_64bits(t->raw, (size_t)t->numel * dtype_size(t->dt)); }

/* The request uses `t` until its wait: the tensor operations refuse to
 * change it (and, when the library writes into it, to read it) meanwhile
 * (tensor_track.c). A tensor the library only reads, on the host, is also
 * hashed now and again at the wait: a change through ->data, which no
 * tensor operation sees, is caught there. Not in a timed region, which
 * times the library without the runtime's checks: the two hashes read the
 * whole buffer on the lecture's thread, 0.4 to 2 ms for a 4 MiB isend on
 * the 2-core machine, time an overlap measurement would count as exposed
 * transfer (lecture_scaling's ring). */
void lx_request_uses(dist_request *req, const tensor *t, int library_writes) {
    /* Two views of one chunk in two requests, one of which the library
     * writes (a send and a receive of the same memory): the one would
     * overwrite the other in flight, and the hash at the wait could only
     * blame "->data". Named here, at the second call, with the first's line. */
    for (const dist_request *o = outstanding; o; o = o->next) {
        if (o == req) continue;
        for (int j = 0; j < o->n_uses; j++) {
            const tensor *u = o->uses[j];
            if (u == t || !(library_writes || o->writes[j]) || t->device != u->device || t->numel == 0 ||
                u->numel == 0 || !lx_overlap(t, u))
                continue;
            const lx_frame *at = o->site.n > 0 ? &o->site.frames[o->site.n - 1] : NULL;
            char *made = at ? lx_fmt("%s:%d", at->path, at->line) : strdup("an unknown line");
            lx_fatal("%s(): this tensor shares memory with the one %s at %s is still %s (two views of one "
                     "chunk): the %s would overwrite it in flight. Give %s a tensor of its own, or dist_wait "
                     "the first request before this call",
                     req->call->name, o->call->name, made, o->writes[j] ? "receiving into" : "sending",
                     library_writes ? "receive" : "earlier receive", library_writes ? "this call" : "one of them");
        }
    }
    int i = req->n_uses++;
    req->uses[i] = t;
    req->writes[i] = library_writes;
    const lx_frame *at = req->site.n > 0 ? &req->site.frames[req->site.n - 1] : NULL;
    lx_tensor_busy(t, req->call->name, at, library_writes);
    if (!library_writes && t->device < 0 && t->numel > 0 && !lx_agree_timed()) {
        req->sum[i] = hash_values(t);
        req->hashed[i] = 1;
    }
}

/* After the transfer: the tensors are the lecture's again. */
static void request_done(dist_request *req) {
    for (int i = 0; i < req->n_uses; i++) {
        lx_tensor_idle(req->uses[i], req->writes[i]);
        if (req->hashed[i] && hash_values(req->uses[i]) != req->sum[i]) {
            const lx_frame *at = req->site.n > 0 ? &req->site.frames[req->site.n - 1] : NULL;
            char *made = at ? lx_fmt("%s:%d", at->path, at->line) : strdup("an unknown line");
            lx_fatal("%s(): the tensor that %s at %s was sending changed before this wait "
                     "(through its ->data: no tensor operation did it): the receiver may have got the "
                     "old value, the new one, or a mix; change it only after dist_wait",
                     lx_calls[LX_WAIT].name, req->call->name, made);
        }
    }
}

static void unlink_request(dist_request *req) {
    if (req->prev) req->prev->next = req->next;
    else outstanding = req->next;
    if (req->next) req->next->prev = req->prev;
}

static int is_outstanding(const dist_request *req) {
    for (const dist_request *r = outstanding; r; r = r->next)
        if (r == req) return 1;
    return 0;
}

dist_request *dist_isend(const tensor *t, int dst) {
    const lx_call *c = &lx_calls[LX_ISEND];
    lx_need_rank(c);
    size_t n = lx_check_args(c, NULL, t, dst, DIST_SUM);
    call_site site;
    site.n = lx_stack_capture(site.frames, LX_MAX_FRAMES);
    lx_call_mark(&site);
    dist_request *req = lx_request_new(c, dst, (int64_t)n, &site);
    req->send_check = lx_agree_send(c, (int64_t)n, dst, site.frames, site.n);
    lx_request_uses(req, t, 0);
    req->backend_request = lx_ops->isend(t->raw, n, dst);
    return req;
}

dist_request *dist_irecv(tensor *t, int src) {
    const lx_call *c = &lx_calls[LX_IRECV];
    lx_need_rank(c);
    size_t n = lx_check_args(c, NULL, t, src, DIST_SUM);
    call_site site;
    site.n = lx_stack_capture(site.frames, LX_MAX_FRAMES);
    lx_call_mark(&site);
    dist_request *req = lx_request_new(c, src, (int64_t)n, &site);
    req->recv_check = lx_agree_recv_post(src, (int64_t)n);
    lx_request_uses(req, t, 1);
    req->backend_request = lx_ops->irecv(t->raw, n, src);
    return req;
}

/* The async collectives: the agreement check runs at the call (it needs
 * every rank to have made the call: a short wait), then the transfer is
 * started and the request returned. */
dist_request *lx_request_collective(call_site *site, const lx_call *c, size_t count, int op, int root) {
    lx_call_enter_collective(site, c, count, op, root);
    lx_call_leave();
    return lx_request_new(c, -1, (int64_t)count, site);
}

dist_request *dist_all_reduce_async(tensor *t, dist_op op) {
    const lx_call *c = &lx_calls[LX_ALL_REDUCE_ASYNC];
    lx_need_rank(c);
    size_t n = lx_check_args(c, NULL, t, -1, op);
    call_site site;
    dist_request *req = lx_request_collective(&site, c, n, op, -1);
    lx_request_uses(req, t, 1);
    req->backend_request = lx_ops->iall_reduce(t->raw, n, op);
    return req;
}

dist_request *dist_broadcast_async(tensor *t, int src) {
    const lx_call *c = &lx_calls[LX_BROADCAST_ASYNC];
    lx_need_rank(c);
    size_t n = lx_check_args(c, NULL, t, src, DIST_SUM);
    call_site site;
    dist_request *req = lx_request_collective(&site, c, n, -1, src);
    lx_request_uses(req, t, 1);
    req->backend_request = lx_ops->ibroadcast(t->raw, n, src);
    return req;
}

dist_request *dist_reduce_scatter_async(tensor *output, const tensor *input, dist_op op) {
    const lx_call *c = &lx_calls[LX_REDUCE_SCATTER_ASYNC];
    lx_need_rank(c);
    size_t out_n = lx_check_reduce_scatter(c->name, NULL, output, input, op);
    call_site site;
    dist_request *req = lx_request_collective(&site, c, out_n, op, -1);
    lx_request_uses(req, output, 1);
    lx_request_uses(req, input, 0);
    req->backend_request = lx_ops->ireduce_scatter(output->raw, input->raw, out_n, op);
    return req;
}

dist_request *dist_all_gather_async(tensor *output, const tensor *input) {
    const lx_call *c = &lx_calls[LX_ALL_GATHER_ASYNC];
    lx_need_rank(c);
    size_t in_n = lx_check_all_gather(c->name, NULL, output, input);
    call_site site;
    dist_request *req = lx_request_collective(&site, c, in_n, -1, -1);
    lx_request_uses(req, output, 1);
    lx_request_uses(req, input, 0);
    req->backend_request = lx_ops->iall_gather(output->raw, input->raw, in_n);
    return req;
}

/* Completes a request: the receive's check first (a mismatched size is
 * named before the backend could complain about it), then the transfer. */
static void complete(dist_request *req) {
    lx_agree_needs(req->send_check, req->recv_check);
    /* An isend's wait, like a blocking send, returns once its receive is posted. */
    if (req->send_check) lx_agree_send_posted(req->send_check);
    if (req->recv_check) lx_agree_recv_check(req->recv_check, req->call, req->count, req->site.frames, req->site.n);
    lx_ops->wait(req->backend_request);
    if (req->send_check) lx_agree_send_done(req->send_check);
    request_done(req);
}

void dist_wait(dist_request *req) {
    const lx_call *c = &lx_calls[LX_WAIT];
    lx_need_rank(c);
    if (!req) lx_fatal("%s(): the request is NULL", c->name);
    if (!is_outstanding(req))
        lx_fatal("%s(): this request is not one this spawn made, or it was waited for already", c->name);
    call_site site;
    lx_call_enter(&site, c->name, req->peer);
    unlink_request(req);
    complete(req);
    lx_call_leave();
    if (req->group) req->group->busy--;
    free(req);
}

/* Has the request completed? It stays the lecture's to dist_wait. */
int dist_test(dist_request *req) {
    const lx_call *c = &lx_calls[LX_TEST];
    lx_need_rank(c);
    if (!req) lx_fatal("%s(): the request is NULL", c->name);
    if (!is_outstanding(req))
        lx_fatal("%s(): this request is not one this spawn made, or it was waited for already", c->name);
    /* An isend is done once its receive is posted, as its wait says. */
    int done = lx_ops->test(req->backend_request);
    if (req->send_check && !lx_agree_send_test(req->send_check)) done = 0;
    return done;
}

/* When the function returns: each request never waited for is an error
 * step at the line that made it; it is then completed, so the other ranks
 * are not left waiting for its transfer. */
static void finish_forgotten(void) {
    /* Oldest first: the list holds the newest first. */
    dist_request *last = outstanding;
    while (last && last->next)
        last = last->next;
    for (dist_request *req = last; req; req = req->prev) {
        const lx_frame *at = req->site.n > 0 ? &req->site.frames[req->site.n - 1] : NULL;
        char *msg = at ? lx_fmt("%s:%d: the request of %s() was never waited for: call dist_wait() on it "
                                "before the spawned function returns",
                                at->path, at->line, req->call->name)
                       : lx_fmt("the request of %s() was never waited for", req->call->name);
        fprintf(stderr, "lectern: rank %d: error: %s\n", lx_the_world.rank, msg);
        lx_emit_frames(req->site.frames, req->site.n, lx_rendering_error(msg));
        lx_mark_failed();
        free(msg);
    }
    while (outstanding) {
        dist_request *req = outstanding;
        unlink_request(req);
        call_site site = req->site;
        lx_rank_enter(lx_calls[LX_WAIT].name, site.frames, site.n, req->peer);
        complete(req);
        lx_call_leave();
        if (req->group) req->group->busy--;
        free(req);
    }
}

/* A pool rank runs many spawns: after one, it is back to "outside spawn". */
void lx_comm_finish_requests(void) {
    if (lx_ops) finish_forgotten();
}
