/*
 * test_cublas_lazy.c: cuBLAS is loaded on first use, and the calls that go
 * through runtime/tensor/cublas_lazy.c reach the real library (cmocka).
 *
 * No GPU is needed: cublasGetStatusString works anywhere, and cublasCreate
 * answers with an error status when there is no device to create it on.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "lectern.h"

#ifdef LECTERN_CUDA
#include <cublas_v2.h>

/* 1 if a mapping of this process comes from a file whose name holds `lib`. */
static int mapped(const char *lib) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, lib)) found = 1;
    if (f) fclose(f);
    return found;
}

static void not_loaded_until_first_call(void **state) {
    (void)state;
    assert_false(mapped("libcublas"));
    /* The library's own words (they vary by version): two statuses, two texts. */
    const char *ok = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
    const char *bad = cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED);
    assert_true(mapped("libcublas.so"));
    assert_non_null(ok);
    assert_non_null(bad);
    assert_true(strlen(ok) > 0);
    assert_string_not_equal(ok, bad);
}

static void create_reaches_the_real_library(void **state) {
    (void)state;
    cublasHandle_t h = NULL;
    cublasStatus_t st = cublasCreate(&h);
    if (gpu_count() == 0) {
        assert_int_not_equal(st, CUBLAS_STATUS_SUCCESS); /* no device: the library says so */
    } else {
        assert_int_equal(st, CUBLAS_STATUS_SUCCESS);
        assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    }
}
#else
static void not_loaded_until_first_call(void **state) {
    (void)state;
    skip(); /* a CPU-only build has no cuBLAS */
}
static void create_reaches_the_real_library(void **state) {
    (void)state;
    skip();
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(not_loaded_until_first_call),
            cmocka_unit_test(create_reaches_the_real_library),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
