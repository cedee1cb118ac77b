/*
 * test_gpu_count.c: gpu_count() asks the CUDA runtime once and remembers
 * (cmocka).
 *
 * The question is not free: the first cudaGetDeviceCount of a process
 * starts the driver. So this program defines its own cudaGetDeviceCount,
 * which the linker prefers to libcudart's, counts the calls and answers
 * "3 GPUs": gpu_count() must say 3 however often it is asked, after one
 * call. Without CUDA in the build, gpu_count() is 0 and nothing is asked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "lectern.h"

#ifdef LECTERN_CUDA
#include <cuda_runtime_api.h>

static int asked;

cudaError_t cudaGetDeviceCount(int *count) {
    asked++;
    *count = 3;
    return cudaSuccess;
}

static void asks_once_and_remembers(void **state) {
    (void)state;
    assert_int_equal(asked, 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(gpu_count(), 3);
    assert_int_equal(asked, 1);
}
#else
static void asks_once_and_remembers(void **state) {
    (void)state;
    assert_int_equal(gpu_count(), 0);
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(asks_once_and_remembers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
