/*
 * layers.c: the helpers of layers.h.
 */
#include <stdio.h>

#include "layers.h"

const char *layer_range(int first, int last, char *buf, size_t size) {
    if (first == last) snprintf(buf, size, "layer %d", first);
    else snprintf(buf, size, "layers %d-%d", first, last);
    return buf;
}

void free_tensors(tensor **ts, int n) {
    for (int i = 0; i < n; i++)
        tensor_free(ts[i]);
}
