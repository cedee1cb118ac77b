/*
 * comm.c: the collectives a spawned function calls, torch.distributed style:
 * the world's blocking collectives and point to point, and what a rank asks
 * of its world (dist_rank, dist_world_size, dist_backend, get_device).
 *
 * Each call checks its arguments as its descriptor says (comm_calls.c) and
 * names the lecture line when they are wrong, checks that the ranks agree
 * on the call (comm_agree.c), then hands it to the backend's table (lx_ops,
 * set by comm_layer.c). The async calls are in comm_requests.c, the group
 * calls and all-to-all in comm_groups.c.
 *
 * Around each call that waits for other ranks we note where the lecture is
 * and whom it waits for (lx_rank_enter, lx_rank_leave): if the ranks
 * deadlock, one crashes or one waits for a rank that has returned, the
 * parent can say at which line each rank was.
 */
#include "comm/comm_calls.h"
#include "ranks/ranks.h"

int dist_rank(void) { return lx_the_world.rank; }
int dist_world_size(void) { return lx_the_world.size; }
const char *dist_backend(void) {
    if (!lx_ops) return "none";
    return lx_backend_is_nccl(lx_the_world.backend) ? "nccl" : "mpi";
}

/* Outside spawn: the first GPU if there is one. In a rank: its own GPU under
 * NCCL (its index among the ranks of its host, which is its rank on one
 * machine), cuda:(rank mod GPUs) on shared GPUs, the CPU under Open MPI and
 * on the NCCL emulator.
 * dist_backend() says "mpi" on shared GPUs: the collectives are Open MPI's;
 * get_device() says where the tensors live. */
int get_device(int rank) {
    if (!lx_ops) return gpu_count() > 0 ? 0 : -1;
    if (lx_the_world.backend == LX_BACKEND_SHARED || lx_the_world.backend == LX_BACKEND_SHARED_CUDA_AWARE)
        return rank == lx_the_world.rank ? lx_the_world.device : rank % gpu_count();
    if (lx_the_world.backend != LX_BACKEND_NCCL) return -1;
    return rank == lx_the_world.rank ? lx_the_world.device : rank;
}

/* ---- collectives ---- */

void dist_barrier(void) {
    const lx_call *c = &lx_calls[LX_BARRIER];
    lx_need_rank(c);
    call_site site;
    lx_call_enter_collective(&site, c, 0, -1, -1);
    lx_ops->barrier();
    lx_call_leave();
}

void dist_all_reduce(tensor *t, dist_op op) {
    const lx_call *c = &lx_calls[LX_ALL_REDUCE];
    lx_need_rank(c);
    size_t n = lx_check_args(c, NULL, t, -1, op);
    lx_call_show(c->name, "t", "before", t);
    call_site site;
    lx_call_enter_collective(&site, c, n, op, -1);
    lx_ops->all_reduce(t->raw, n, op);
    lx_call_leave();
    lx_call_show(c->name, "t", "after", t);
}

void dist_reduce(tensor *t, int dst, dist_op op) {
    const lx_call *c = &lx_calls[LX_REDUCE];
    lx_need_rank(c);
    size_t n = lx_check_args(c, NULL, t, dst, op);
    lx_call_show(c->name, "t", "before", t);
    call_site site;
    lx_call_enter_collective(&site, c, n, op, dst);
    lx_ops->reduce(t->raw, n, dst, op);
    lx_call_leave();
    lx_call_show(c->name, "t", "after", t);
}

void dist_broadcast(tensor *t, int src) {
    const lx_call *c = &lx_calls[LX_BROADCAST];
    lx_need_rank(c);
    size_t n = lx_check_args(c, NULL, t, src, DIST_SUM);
    lx_call_show(c->name, "t", "before", t);
    call_site site;
    lx_call_enter_collective(&site, c, n, -1, src);
    lx_ops->broadcast(t->raw, n, src);
    lx_call_leave();
    lx_call_show(c->name, "t", "after", t);
}

void dist_reduce_scatter(tensor *output, const tensor *input, dist_op op) {
    const lx_call *c = &lx_calls[LX_REDUCE_SCATTER];
    lx_need_rank(c);
    size_t out_n = lx_check_reduce_scatter(c->name, NULL, output, input, op);
    lx_call_show(c->name, "input", "before", input);
    call_site site;
    lx_call_enter_collective(&site, c, out_n, op, -1);
    lx_ops->reduce_scatter(output->raw, input->raw, out_n, op);
    lx_call_leave();
    lx_call_show(c->name, "output", "after", output);
}

void dist_all_gather(tensor *output, const tensor *input) {
    const lx_call *c = &lx_calls[LX_ALL_GATHER];
    lx_need_rank(c);
    size_t in_n = lx_check_all_gather(c->name, NULL, output, input);
    lx_call_show(c->name, "input", "before", input);
    call_site site;
    lx_call_enter_collective(&site, c, in_n, -1, -1);
    lx_ops->all_gather(output->raw, input->raw, in_n);
    lx_call_leave();
    lx_call_show(c->name, "output", "after", output);
}

void dist_scatter(tensor *output, const tensor *input, int src) {
    const lx_call *c = &lx_calls[LX_SCATTER];
    lx_need_rank(c);
    lx_check_peer(c->name, c->peer, src, 1);
    size_t out_n = lx_check_tensor(c->name, "output", output);
    const float *in = NULL;
    if (lx_the_world.rank == src) { /* only the source's input matters, as in torch */
        size_t in_n = lx_check_tensor(c->name, "input (on the src rank)", input);
        lx_check_same_dtype(c->name, "output", output, "input", input);
        if (in_n != out_n * (size_t)lx_the_world.size)
            lx_fatal("%s(): input has %zu elements, output %zu: input must be world_size (%d) times output", c->name,
                     in_n, out_n, lx_the_world.size);
        in = input->raw;
    }
    lx_call_show(c->name, "input", "before", lx_the_world.rank == src ? input : NULL);
    call_site site;
    lx_call_enter_collective(&site, c, out_n, -1, src);
    lx_ops->scatter(output->raw, in, out_n, src);
    lx_call_leave();
    lx_call_show(c->name, "output", "after", output);
}

void dist_gather(tensor *output, const tensor *input, int dst) {
    const lx_call *c = &lx_calls[LX_GATHER];
    lx_need_rank(c);
    lx_check_peer(c->name, c->peer, dst, 1);
    size_t in_n = lx_check_tensor(c->name, "input", input);
    float *out = NULL;
    if (lx_the_world.rank == dst) {
        size_t out_n = lx_check_tensor(c->name, "output (on the dst rank)", output);
        lx_check_same_dtype(c->name, "input", input, "output", output);
        if (out_n != in_n * (size_t)lx_the_world.size)
            lx_fatal("%s(): output has %zu elements, input %zu: output must be world_size (%d) times input", c->name,
                     out_n, in_n, lx_the_world.size);
        out = output->raw;
    }
    lx_call_show(c->name, "input", "before", input);
    call_site site;
    lx_call_enter_collective(&site, c, in_n, -1, dst);
    lx_ops->gather(out, input->raw, in_n, dst);
    lx_call_leave();
    lx_call_show(c->name, "output", "after", lx_the_world.rank == dst ? output : NULL);
}

/* ---- point to point ---- */

void dist_send(const tensor *t, int dst) {
    const lx_call *c = &lx_calls[LX_SEND];
    lx_need_rank(c);
    size_t n = lx_check_args(c, NULL, t, dst, DIST_SUM);
    call_site site;
    lx_call_enter(&site, c->name, dst);
    lx_agree_send_desc *d = lx_agree_send(c, (int64_t)n, dst, site.frames, site.n);
    /* Not before the receive is posted, whatever the transport buffers. */
    lx_agree_needs(d, NULL);
    lx_agree_send_posted(d);
    lx_ops->send(t->raw, n, dst);
    lx_agree_send_done(d);
    lx_call_leave();
}

void dist_recv(tensor *t, int src) {
    const lx_call *c = &lx_calls[LX_RECV];
    lx_need_rank(c);
    size_t n = lx_check_args(c, NULL, t, src, DIST_SUM);
    call_site site;
    lx_call_enter(&site, c->name, src);
    lx_agree_recv_desc *d = lx_agree_recv_post(src, (int64_t)n);
    lx_agree_needs(NULL, d);
    lx_agree_recv_check(d, c, (int64_t)n, site.frames, site.n);
    lx_ops->recv(t->raw, n, src);
    lx_call_leave();
}

void dist_sendrecv(const tensor *send, int dst, tensor *recv, int src) {
    const lx_call *c = &lx_calls[LX_SENDRECV];
    lx_need_rank(c);
    size_t sn = lx_check_tensor(c->name, "send", send);
    size_t rn = lx_check_tensor(c->name, "recv", recv);
    lx_check_same_dtype(c->name, "send", send, "recv", recv);
    lx_check_peer(c->name, "dst", dst, 0);
    lx_check_peer(c->name, "src", src, 0);
    if (send->raw == recv->raw && sn > 0 && rn > 0) lx_fatal("%s(): send and recv are the same memory", c->name);
    call_site site;
    lx_call_enter(&site, c->name, src);
    lx_agree_send_desc *sd = lx_agree_send(c, (int64_t)sn, dst, site.frames, site.n);
    lx_agree_recv_desc *rd = lx_agree_recv_post(src, (int64_t)rn);
    lx_agree_needs(sd, rd);
    lx_agree_recv_check(rd, c, (int64_t)rn, site.frames, site.n);
    lx_ops->sendrecv(send->raw, sn, dst, recv->raw, rn, src);
    lx_agree_send_done(sd);
    lx_call_leave();
}
