/*
 * mlp_reference: lecture_08's training run again in float64 (tests/lib/
 * model64.c), for the tests to judge the lecture's float32 numbers against.
 *
 *   mlp_reference BATCH WIDTH LAYERS STEPS LR
 *
 * prints {"losses": [loss before step 0's update, step 1's, ...]} : the
 * whole-batch loss at each step, as the lecture's one-device run prints it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "model64.h"

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s BATCH WIDTH LAYERS STEPS LR\n", argv[0]);
        return 2;
    }
    mlp_config c = {.batch = atoi(argv[1]),
                    .width = atoi(argv[2]),
                    .layers = atoi(argv[3]),
                    .steps = atoi(argv[4]),
                    .lr = (float)atof(argv[5])};
    if (c.batch <= 0 || c.width <= 0 || c.layers <= 0 || c.layers > MAX_LAYERS || c.steps <= 0) {
        fprintf(stderr, "%s: bad configuration\n", argv[0]);
        return 2;
    }
    model64 m = model64_of(&c);
    printf("{\"losses\": [");
    for (int s = 0; s < c.steps; s++) {
        double loss = model64_forward(&m);
        model64_backward(&m);
        /* The learning rate the float32 run uses is a float: use that value. */
        model64_adamw_step(&m, (double)c.lr);
        printf("%s%.17g", s ? ", " : "", loss);
    }
    printf("]}\n");
    model64_free(&m);
    return 0;
}
