/*
 * homework_08_solution.h: the instructor's solution of the four exercises of
 * lectures/homework_08.c, included after the homework by
 * homework_08_solution.c (every exercise solved) and by the wrong-method
 * fixtures (homework_08_wrong_*.c), each of which defines OWN_<EXERCISE> and
 * its own wrong version of that one exercise, so that each fixture differs
 * from the solution in exactly one method.
 */
#ifndef OWN_RING_ALL_REDUCE
/* Exercise 1. Step s of the reduce-scatter: send chunk (rank - s), receive
 * chunk (rank - s - 1) from the previous rank and add it; after w - 1 steps
 * chunk (rank + 1) holds the full sum. The all-gather then passes finished
 * chunks round: send chunk (rank + 1 - s), receive chunk (rank - s). Sends
 * are non-blocking so that no rank waits for its neighbour to receive. */
void ring_all_reduce(tensor *t) {
    int rank = dist_rank(), w = dist_world_size();
    int64_t c = t->numel / w;
    int next = (rank + 1) % w, prev = (rank + w - 1) % w;
    tensor *incoming = empty(c, 0, t->device);
    for (int s = 0; s < w - 1; s++) {
        tensor *out = tensor_view(t, ((rank - s + w) % w) * c, c, 0);
        tensor *in = tensor_view(t, ((rank - s - 1 + 2 * w) % w) * c, c, 0);
        dist_request *req = dist_isend(out, next);
        dist_recv(incoming, prev);
        dist_wait(req);
        add_(in, incoming);
        tensor_free(out);
        tensor_free(in);
    }
    for (int s = 0; s < w - 1; s++) {
        tensor *out = tensor_view(t, ((rank + 1 - s + w) % w) * c, c, 0);
        tensor *in = tensor_view(t, ((rank - s + w) % w) * c, c, 0);
        dist_request *req = dist_isend(out, next);
        dist_recv(in, prev);
        dist_wait(req);
        tensor_free(out);
        tensor_free(in);
    }
    tensor_free(incoming);
}
#endif


#ifndef OWN_DDP_SYNC
/* Exercise 2: one all-reduce for all the gradients. */
void ddp_sync(tensor **grads, int n, tensor *bucket, int accum) {
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        tensor *place = tensor_view(bucket, at, grads[i]->shape[0], grads[i]->ndim == 2 ? grads[i]->shape[1] : 0);
        tensor_copy(place, grads[i]);
        tensor_free(place);
        at += grads[i]->numel;
    }
    dist_all_reduce(bucket, DIST_SUM);
    scale_(bucket, 1.0f / (float)(dist_world_size() * accum));
    at = 0;
    for (int i = 0; i < n; i++) {
        tensor *place = tensor_view(bucket, at, grads[i]->shape[0], grads[i]->ndim == 2 ? grads[i]->shape[1] : 0);
        tensor_copy(grads[i], place);
        tensor_free(place);
        at += grads[i]->numel;
    }
}
#endif


#ifndef OWN_ZERO1_STEP
/* Exercise 3: reduce-scatter the gradient, step the shard, all-gather. */
void zero1_step(tensor *param, tensor *grad, adamw *opt) {
    int rank = dist_rank(), w = dist_world_size();
    int64_t c = param->numel / w;
    tensor *grad_shard = empty(c, 0, param->device);
    dist_reduce_scatter(grad_shard, grad, DIST_AVG);
    tensor *shard = tensor_view(param, rank * c, c, 0);
    adamw_step(opt, shard, grad_shard);
    tensor *mine = to_device(shard, param->device); /* all_gather's input may not be its output */
    dist_all_gather(param, mine);
    tensor_free(mine);
    tensor_free(shard);
    tensor_free(grad_shard);
}
#endif


#ifndef OWN_EXCHANGE
/* Exercise 4: post the receive before waiting on the send. */
void exchange(tensor *mine, tensor *theirs) {
    int peer = dist_rank() ^ 1;
    dist_request *recv = dist_irecv(theirs, peer);
    dist_send(mine, peer);
    dist_wait(recv);
}
#endif
