/*
 * layers.h: two small helpers for code that holds a stack of layers as
 * arrays of tensors (lectures/lib/buckets.c, lecture_08's strategies):
 * naming a run of layers in words, and freeing an array of tensors.
 */
#ifndef LECTERN_LAYERS_H
#define LECTERN_LAYERS_H

#include <stddef.h>

#include "lectern.h"

/* "layer 2" or "layers 0-1": layers first..last in words, in buf. */
const char *layer_range(int first, int last, char *buf, size_t size);

/* tensor_free of ts[0..n-1]. */
void free_tensors(tensor **ts, int n);

#endif /* LECTERN_LAYERS_H */
