/*
 * dtype_round: lectern's conversions, value by value, for
 * tests/tensor/test_dtype_rounding.py to compare with its own model.
 *
 *     dtype_round DTYPE [SCALE] < values
 *
 * DTYPE is 1 (bf16), 2 (fp16), 3 (fp8 e4m3) or 4 (fp8 e5m2), the enum's
 * numbers. Each input line is one fp32 value in C's hex float notation
 * (or "nan", "inf", "-inf"); each output line is the stored bits in hex,
 * then the value read back to fp32 (to_dtype(q, DTYPE_F32)) in hex float:
 * the conversion goes through to_dtype_scaled(t, d, SCALE) on one tensor
 * of all the values, as a lecture would call it. Given a SCALE, a third
 * column: the value read back scaled by 1 / SCALE
 * (to_dtype_scaled(q, DTYPE_F32, 1 / SCALE), how FP8's scale is undone).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: dtype_round DTYPE [SCALE] < values\n");
        return 2;
    }
    dtype d = (dtype)atoi(argv[1]);
    double scale = argc > 2 ? strtod(argv[2], NULL) : 1.0;
    size_t cap = 1024, n = 0;
    float *v = malloc(cap * sizeof *v);
    char line[128];
    while (v && fgets(line, sizeof line, stdin)) {
        if (n == cap) v = realloc(v, (cap *= 2) * sizeof *v);
        if (v) v[n++] = strtof(line, NULL);
    }
    if (!v || n == 0) return 2;
    tensor *t = tensor_from(v, (int64_t)n, 0, -1);
    tensor *q = to_dtype_scaled(t, d, scale);
    tensor *back = to_dtype(q, DTYPE_F32);
    tensor *unscaled = argc > 2 ? to_dtype_scaled(q, DTYPE_F32, 1.0 / scale) : NULL;
    size_t size = dtype_size(d);
    for (size_t i = 0; i < n; i++) {
        unsigned bits = 0;
        memcpy(&bits, (const char *)q->raw + i * size, size); /* little-endian x86-64 */
        printf("%x %a", bits, (double)tensor_item(back, (int64_t)i));
        if (unscaled) printf(" %a", (double)tensor_item(unscaled, (int64_t)i));
        printf("\n");
    }
    if (unscaled) tensor_free(unscaled);
    tensor_free(t);
    tensor_free(q);
    tensor_free(back);
    free(v);
    return 0;
}
