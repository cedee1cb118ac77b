/* Fixture: a kernel that faults (tests/test_cuda_sync.py, on a GPU).
 *
 * The runtime's add-a-scalar kernel is launched on an address no
 * allocation has, so its first store faults. The launch itself succeeds: a
 * fault is found only when something waits for the GPU. With
 * LECTERN_CUDA_SYNC=1 that is the launch's own check (KERNEL_CHECK in
 * runtime/tensor/tensor_cuda.cu); without it, the next call that waits, the
 * tensor_sum below. Without a GPU it notes so and returns. */
#include <stdint.h>

#include "lectern.h"
#include "tensor/tensor.h"

static void body(void) {
    if (gpu_count() == 0) {
        note("no GPU: nothing to fault");
        return;
    }
#ifdef LECTERN_CUDA
    lx_cuda_add_scalar(0, (float *)(uintptr_t)0x1000, 1 << 20, 1.0f); /* MARK:launch */
    tensor *t = zeros(4, 0, 0);
    note("after the launch: %g", tensor_sum(t)); /* MARK:next-wait */
    tensor_free(t);
#endif
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
