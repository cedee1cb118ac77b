/*
 * inspect.c: the rendering of inspect(x), a variable's name and value at
 * this step (lectern.h, section 1).
 *
 * The trace layer knows numbers, not tensors: tensor/tensor_inspect.c
 * checks a tensor, copies its values to the host and hands them here as
 * plain floats with their shape. This file decides what the trace keeps:
 *
 *  - a number: its value (a JSON number; null when NaN or infinite, the
 *    text in "data" saying which);
 *  - a tensor of up to LX_INSPECT_WHOLE elements: every value, row-major;
 *  - a larger one: min, max, mean and norm, and a picture of
 *    LX_INSPECT_PICTURE x LX_INSPECT_PICTURE block means (2-D) or
 *    LX_INSPECT_PICTURE_1D bucket means (1-D), each to 4 significant
 *    digits, so that inspecting a 1024 x 1024 weight costs about as much
 *    as a 16 x 16 one.
 *
 * Values are written in the fewest digits that give the same float back
 * (%.6g, then more only when needed): a float32 printed as a double
 * ("0.30000001192092896") would triple the size of a trace for no
 * information.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

/* The shortest text that reads back as the same float (or double). */
static void shortest(char buf[40], double v, int is_float) {
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, 40, "%.*g", digits, v);
        double back = strtod(buf, NULL);
        if (is_float ? (float)back == (float)v : back == v) return;
    }
}

/* A JSON number in the fewest digits, or null when not finite. */
static cJSON *number(double v, int is_float) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char buf[40];
    shortest(buf, v, is_float);
    return cJSON_CreateRaw(buf);
}

/* A picture's cell: four significant digits are all a shade can show, and
 * half the bytes of a float's shortest text. */
static cJSON *cell(double v) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char buf[40];
    snprintf(buf, sizeof buf, "%.4g", v);
    return cJSON_CreateRaw(buf);
}

/* "nan", "inf", "-inf" or the shortest digits. */
static void number_text(char buf[40], double v, int is_float) {
    if (isnan(v)) snprintf(buf, 40, "nan");
    else if (isinf(v)) snprintf(buf, 40, "%sinf", v < 0 ? "-" : "");
    else shortest(buf, v, is_float);
}

static cJSON *start(const char *name, const char *kind) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "inspect");
    lx_add_text(r, "name", name);
    cJSON_AddStringToObject(r, "kind", kind);
    return r;
}

cJSON *lx_inspect_integer(const char *name, const char *kind, int64_t v) {
    cJSON *r = start(name, kind);
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    /* Exact in the trace's text even past 2^53 (JSON numbers have no limit;
     * a reader in JavaScript rounds, and "data" keeps the digits). */
    cJSON_AddItemToObject(r, "value", cJSON_CreateRaw(buf));
    char *data = lx_fmt("%s = %s", name, buf);
    lx_add_text(r, "data", data);
    free(data);
    return r;
}

cJSON *lx_inspect_real(const char *name, const char *kind, double v) {
    int is_float = strcmp(kind, "float") == 0;
    cJSON *r = start(name, kind);
    cJSON_AddItemToObject(r, "value", number(v, is_float));
    char buf[40];
    number_text(buf, v, is_float);
    char *data = lx_fmt("%s = %s", name, buf);
    lx_add_text(r, "data", data);
    free(data);
    return r;
}

/* Block means of the rows x cols matrix v into pr x pc cells: cell (i, j)
 * averages rows [i*rows/pr, (i+1)*rows/pr) and the same for columns, so
 * every element lands in exactly one cell. Non-finite elements are left
 * out of their cell's mean (a cell of only those is null). */
static cJSON *picture(const float *v, int64_t rows, int64_t cols, int64_t pr, int64_t pc) {
    cJSON *vals = cJSON_CreateArray();
    for (int64_t i = 0; i < pr; i++) {
        int64_t r0 = i * rows / pr, r1 = (i + 1) * rows / pr;
        for (int64_t j = 0; j < pc; j++) {
            int64_t c0 = j * cols / pc, c1 = (j + 1) * cols / pc;
            double s = 0;
            int64_t n = 0;
            for (int64_t a = r0; a < r1; a++)
                for (int64_t b = c0; b < c1; b++) {
                    double x = v[a * cols + b];
                    if (isfinite(x)) {
                        s += x;
                        n++;
                    }
                }
            cJSON_AddItemToArray(vals, n ? cell(s / (double)n) : cJSON_CreateNull());
        }
    }
    return vals;
}

cJSON *lx_inspect_floats(const char *name, const int64_t *shape, int ndim, int device, const char *dtype,
                         const float *v, int64_t numel) {
    cJSON *r = start(name, "tensor");
    cJSON *sh = cJSON_CreateArray();
    char shape_txt[128] = "";
    size_t used = 0;
    for (int d = 0; d < ndim; d++) {
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[d]));
        int w = snprintf(shape_txt + used, sizeof shape_txt - used, "%s%" PRId64, d ? "x" : "", shape[d]);
        if (w > 0 && (size_t)w < sizeof shape_txt - used) used += (size_t)w;
    }
    cJSON_AddItemToObject(r, "shape", sh);
    char dev[64];
    if (device < 0) snprintf(dev, sizeof dev, "cpu");
    else snprintf(dev, sizeof dev, "cuda:%d", device);
    cJSON_AddStringToObject(r, "device", dev);
    cJSON_AddStringToObject(r, "dtype", dtype);
    cJSON_AddNumberToObject(r, "numel", (double)numel);
    /* "on cpu" or "on cpu, bfloat16": the dtype is said where it is not fp32. */
    if (strcmp(dtype, "float32") != 0) {
        size_t len = strlen(dev);
        snprintf(dev + len, sizeof dev - len, ", %s", dtype);
    }

    if (numel <= LX_INSPECT_WHOLE) {
        cJSON *vals = cJSON_CreateArray();
        for (int64_t i = 0; i < numel; i++)
            cJSON_AddItemToArray(vals, number(v[i], 1));
        cJSON_AddItemToObject(r, "values", vals);
        char *data = lx_fmt("%s = tensor %s on %s", name, shape_txt, dev);
        lx_add_text(r, "data", data);
        free(data);
        return r;
    }

    /* Summary over the finite elements, in double. */
    double mn = INFINITY, mx = -INFINITY, sum = 0, sumsq = 0;
    int64_t finite = 0;
    for (int64_t i = 0; i < numel; i++) {
        double x = v[i];
        if (!isfinite(x)) continue;
        if (x < mn) mn = x;
        if (x > mx) mx = x;
        sum += x;
        sumsq += x * x;
        finite++;
    }
    double mean = finite ? sum / (double)finite : NAN;
    if (!finite) mn = mx = NAN;
    cJSON_AddItemToObject(r, "min", number(mn, 1));
    cJSON_AddItemToObject(r, "max", number(mx, 1));
    cJSON_AddItemToObject(r, "mean", number(mean, 0));
    cJSON_AddItemToObject(r, "norm", number(sqrt(sumsq), 0));
    if (finite < numel) cJSON_AddNumberToObject(r, "nonfinite", (double)(numel - finite));

    /* The picture: 2-D (and more, rows by the rest) as a heatmap, 1-D as a strip. */
    int64_t rows = ndim >= 2 ? shape[0] : 1, cols = rows ? numel / rows : 0;
    int64_t pr = rows < LX_INSPECT_PICTURE ? rows : LX_INSPECT_PICTURE;
    int64_t pc_max = ndim >= 2 ? LX_INSPECT_PICTURE : LX_INSPECT_PICTURE_1D;
    int64_t pc = cols < pc_max ? cols : pc_max;
    cJSON *pic = cJSON_CreateObject();
    cJSON *psh = cJSON_CreateArray();
    if (ndim >= 2) cJSON_AddItemToArray(psh, cJSON_CreateNumber((double)pr));
    cJSON_AddItemToArray(psh, cJSON_CreateNumber((double)pc));
    cJSON_AddItemToObject(pic, "shape", psh);
    cJSON_AddItemToObject(pic, "values", picture(v, rows, cols, pr, pc));
    cJSON_AddItemToObject(r, "picture", pic);

    /* Four significant digits: the line is for reading; the numbers above are exact. */
    char *data = lx_fmt("%s = tensor %s on %s: min %.4g, max %.4g, mean %.4g, norm %.4g", name, shape_txt, dev, mn, mx,
                        mean, sqrt(sumsq));
    lx_add_text(r, "data", data);
    free(data);
    return r;
}
