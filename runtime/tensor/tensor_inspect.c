/*
 * tensor_inspect.c: inspect(x) (lectern.h, section 3b). The tensor-reading
 * half: the checks (a NULL tensor, a freed one) and the copy to the host;
 * what the trace keeps of the values is trace/inspect.c's to decide.
 */
#include <stdlib.h>

#include "tensor/tensor.h"
#include "trace/trace.h"

void lx_inspect(const char *name, lx_inspect_kind kind, const tensor *t, int64_t i, double d) {
    if (!name) {
        lx_error("inspect: the name is NULL (inspect(x) passes x as written)");
        return;
    }
    switch (kind) {
    case LX_INSPECT_INT: lx_emit(lx_inspect_integer(name, "int", i)); return;
    case LX_INSPECT_INT64: lx_emit(lx_inspect_integer(name, "int64", i)); return;
    case LX_INSPECT_FLOAT: lx_emit(lx_inspect_real(name, "float", d)); return;
    case LX_INSPECT_DOUBLE: lx_emit(lx_inspect_real(name, "double", d)); return;
    case LX_INSPECT_TENSOR: break;
    default: lx_error("inspect: %s: unknown kind %d", name, (int)kind); return;
    }
    if (!t) {
        lx_error("inspect: %s is NULL (no tensor to show)", name);
        return;
    }
    /* A freed tensor (or one a request is still writing) stops here, the
     * message naming where it was made and freed. */
    lx_tensor_read(t, "inspect");
    float *host = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof *host);
    if (!host) lx_fatal("inspect: out of memory for %s's %lld values", name, (long long)t->numel);
    tensor_to_host(t, host);
    lx_emit(lx_inspect_floats(name, t->shape, t->ndim, t->device, dtype_name(t->dt), host, t->numel));
    free(host);
}
