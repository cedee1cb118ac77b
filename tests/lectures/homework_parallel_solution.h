/*
 * homework_parallel_solution.h: the instructor's solution of the three
 * exercises of lectures/homework_parallel.c, included after the homework by
 * homework_parallel_solution.c (every exercise solved) and by the
 * wrong-method fixtures (homework_parallel_wrong_*.c), each of which defines
 * OWN_<EXERCISE> and its own wrong version of that one exercise, so that
 * each fixture differs from the solution in exactly one method.
 */
#ifndef OWN_MEGATRON_BACKWARD
/* Exercise 1. z = gelu(hpre) is this rank's columns of the hidden
 * activation; y = sum over ranks of z b. So db = z^T dy and dz = dy b^T are
 * local; dh = gelu'(hpre) dz; da = x^T dh is local too; dx = dh a^T is this
 * rank's share of the sum over ranks: the one all-reduce. */
void megatron_backward(const tensor *x, const tensor *a, const tensor *b, const tensor *hpre, const tensor *dy,
                       tensor *da, tensor *db, tensor *dx) {
    tensor *z = gelu(hpre);
    matmul_into(db, z, dy, 1, 0, 1.0f, 0.0f);
    tensor *dz = empty(dy->shape[0], b->shape[0], dy->device);
    matmul_into(dz, dy, b, 0, 1, 1.0f, 0.0f);
    tensor *dh = gelu_backward(hpre, dz);
    matmul_into(da, x, dh, 1, 0, 1.0f, 0.0f);
    matmul_into(dx, dh, a, 0, 1, 1.0f, 0.0f);
    dist_all_reduce(dx, DIST_SUM);
    tensor_free(dh);
    tensor_free(dz);
    tensor_free(z);
}
#endif

#ifndef OWN_ONE_F_ONE_B
/* Exercise 2. Warm-up forwards, then one forward and one backward in turn,
 * then the backwards left. */
void one_f_one_b(int stage, int stages, int m, int *ops) {
    int warm = stages - stage - 1 < m ? stages - stage - 1 : m;
    int f = 0, b = 0, n = 0;
    while (f < warm)
        ops[n++] = FWD(f++);
    while (f < m) {
        ops[n++] = FWD(f++);
        ops[n++] = BWD(b++);
    }
    while (b < m)
        ops[n++] = BWD(b++);
}
#endif

#ifndef OWN_ZERO3_FORWARD
/* Exercise 3. Layer i's weight goes to full[i % 2]: layer i + 1's gather
 * writes the other buffer while layer i reads this one. */
tensor *zero3_forward(tensor *const *pieces, int layers, const tensor *x, tensor *const *full) {
    dist_request *next = dist_all_gather_async(full[0], pieces[0]);
    tensor *act = NULL;
    for (int i = 0; i < layers; i++) {
        dist_wait(next);
        next = i + 1 < layers ? dist_all_gather_async(full[(i + 1) % 2], pieces[i + 1]) : NULL;
        tensor *out = zero3_layer(i, full[i % 2], act ? act : x);
        if (act) tensor_free(act);
        act = out;
    }
    return act;
}
#endif
