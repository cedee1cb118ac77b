/*
 * test_mlp.c: the model every strategy of lecture_08 trains
 * (lectures/lib/mlp.c), checked against arithmetic that shares none of its
 * code (cmocka).
 *
 * The reference here is plain float64 loops: matrix products as triple
 * loops, GELU from its formula, the loss and every gradient by the chain
 * rule written out again. That reference is itself checked against central
 * finite differences of its own loss, on a model small enough to perturb
 * every weight. Then the float32 model (OpenBLAS or cuBLAS products, the
 * runtime's GELU and loss, mlp.c's backward pass) must agree with it within
 * the tolerances mlp.h states: a wrong gradient scale, a transposed product,
 * a missing GELU derivative or an off-by-one layer all fail here, even
 * though AdamW's normalisation would hide some of them from a comparison of
 * trained parameters.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lectern.h"
#include "lib/mlp.h"
#include "model64.h"

/* The reference model of `c`, run forward and backward: its gradients set. */
static model64 reference_with_gradients(const mlp_config *c) {
    model64 m = model64_of(c);
    model64_forward(&m);
    model64_backward(&m);
    return m;
}

/* ---------------- the reference against finite differences ---------------- */

static void reference_gradients_match_finite_differences(void **state) {
    (void)state;
    mlp_config c = {.batch = 5, .width = 6, .layers = 3, .steps = 1, .lr = 1e-3f};
    model64 m = reference_with_gradients(&c);
    /* Central differences: error O(h^2) from the step, O(eps / h) from
     * rounding; h = 1e-5 balances them near 1e-10 for these O(1) values. */
    const double h = 1e-5;
    double worst = 0, size = 0;
    for (int l = 0; l < c.layers; l++)
        for (int i = 0; i < c.width * c.width; i++) {
            double keep = m.w[l][i];
            m.w[l][i] = keep + h;
            double up = model64_forward(&m);
            m.w[l][i] = keep - h;
            double down = model64_forward(&m);
            m.w[l][i] = keep;
            double fd = (up - down) / (2 * h);
            worst = fmax(worst, fabs(fd - m.g[l][i]));
            size = fmax(size, fabs(m.g[l][i]));
        }
    model64_forward(&m);
    print_message("float64 chain rule vs finite differences: max %.3g, largest gradient %.3g\n", worst, size);
    assert_true(size > 0);
    assert_true(worst <= 1e-7 * size);
    model64_free(&m);
}

/* ---------------- the float32 model against the reference ---------------- */

static void check_model(const mlp_config *c, int device) {
    model64 ref = model64_of(c);
    double loss64 = model64_forward(&ref);
    model64_backward(&ref);

    tensor *x = make_data(c, device);
    tensor *w[MAX_LAYERS], *grads[MAX_LAYERS], *acts[MAX_LAYERS + 1], *pre[MAX_LAYERS];
    for (int l = 0; l < c->layers; l++) {
        w[l] = init_layer(c, l, device);
        grads[l] = empty(c->width, c->width, device);
    }
    forward(w, c->layers, x, acts, pre);
    double loss = mse_loss(acts[c->layers]);
    backward(w, c->layers, acts, pre, grads);

    double *out = model64_values(acts[c->layers]);
    double out_err = model64_relative_error(out, ref.a[c->layers], (size_t)c->batch * c->width);
    double grad_err = 0;
    for (int l = 0; l < c->layers; l++) {
        double *g = model64_values(grads[l]);
        grad_err = fmax(grad_err, model64_relative_error(g, ref.g[l], (size_t)c->width * c->width));
        free(g);
    }
    double loss_err = fabs(loss - loss64) / loss64;
    print_message("%dx%d, %d layers on %s: relative error of output %.3g (tolerance for two float32 "
                  "runs %.3g), gradients %.3g (%.3g), loss %.3g\n",
                  c->batch, c->width, c->layers, device < 0 ? "cpu" : "cuda:0", out_err, output_tolerance(c), grad_err,
                  gradient_tolerance(c), loss_err);
    /* One float32 run against the exact result may use up half of what two
     * float32 runs may differ by. */
    assert_true(out_err <= output_tolerance(c) / 2);
    assert_true(grad_err <= gradient_tolerance(c) / 2);
    assert_true(loss_err <= output_tolerance(c));

    free(out);
    free_saved(c->layers, acts, pre);
    for (int l = 0; l < c->layers; l++) {
        tensor_free(w[l]);
        tensor_free(grads[l]);
    }
    tensor_free(x);
    model64_free(&ref);
}

/* The size lecture_08 --quick trains, and a narrow deep one. */
static void float32_model_matches_float64(void **state) {
    (void)state;
    mlp_config quick = {.batch = 128, .width = 256, .layers = 4, .steps = 1, .lr = 1e-3f};
    check_model(&quick, -1);
    mlp_config deep = {.batch = 16, .width = 32, .layers = 8, .steps = 1, .lr = 1e-3f};
    check_model(&deep, -1);
}

static void float32_model_matches_float64_on_gpu(void **state) {
    (void)state;
    if (gpu_count() == 0) {
        print_message("no GPU visible: the model on cuda:0 is not checked here\n");
        skip();
    }
    mlp_config quick = {.batch = 128, .width = 256, .layers = 4, .steps = 1, .lr = 1e-3f};
    check_model(&quick, 0);
}

/* Gradient accumulation (beta = 1 in layer_backward) over two halves of the
 * batch gives the gradient of the sum of their losses. */
static void accumulation_adds_micro_batches(void **state) {
    (void)state;
    mlp_config c = {.batch = 8, .width = 16, .layers = 1, .steps = 1, .lr = 1e-3f};
    model64 ref = reference_with_gradients(&c);

    tensor *data = make_data(&c, -1), *w = init_layer(&c, 0, -1);
    tensor *dw = empty(c.width, c.width, -1);
    for (int half = 0; half < 2; half++) {
        tensor *x = row_slice(data, half * 4, half * 4 + 4), *h;
        tensor *y = layer_forward(x, w, &h);
        tensor *dy = mse_loss_backward(y);
        scale_(dy, 0.5f); /* mean over the whole batch: each half is half of it */
        layer_backward(x, h, w, dy, dw, NULL, half == 0 ? 0.0f : 1.0f);
        tensor_free(dy);
        tensor_free(y);
        tensor_free(h);
        tensor_free(x);
    }
    double *g = model64_values(dw);
    mlp_config one_layer = c;
    assert_true(model64_relative_error(g, ref.g[0], (size_t)c.width * c.width) <= gradient_tolerance(&one_layer) / 2);
    free(g);
    tensor_free(dw);
    tensor_free(w);
    tensor_free(data);
    model64_free(&ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(reference_gradients_match_finite_differences),
            cmocka_unit_test(float32_model_matches_float64),
            cmocka_unit_test(float32_model_matches_float64_on_gpu),
            cmocka_unit_test(accumulation_adds_micro_batches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
