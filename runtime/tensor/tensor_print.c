/*
 * tensor_print.c: tensors as text, in torch's format (tensor_str) and as a
 * short summary (summarize).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"
#include "lectern.h"
#include "tensor/tensor.h"

/*
 * torch prints float tensors so that a reader can compare them at a glance:
 *
 *   - one format for the whole tensor, chosen from its finite non-zero
 *     values (of the part shown): all integral -> "3." style; otherwise 4
 *     decimals; scientific "1.2346e+05" when the values span more than 1000x,
 *     exceed 1e8, or (non-integral) go below 1e-4;
 *   - every element right-aligned to the widest one;
 *   - lines of at most 80 characters, rows of a matrix one per line;
 *   - more than 1000 elements: only the first and last 3 of each dimension,
 *     with "..." between.
 *
 * We always add the device (torch leaves out 'cpu'): the lecture shows where
 * a number was computed.
 */
#define PRINT_PRECISION 4
#define PRINT_THRESHOLD 1000
#define PRINT_EDGE 3
#define PRINT_LINEWIDTH 80

static void sb_spaces(lx_sb *b, int n) {
    for (int i = 0; i < n; i++)
        lx_sb_add(b, " ", 1);
}

typedef struct number_format {
    int int_mode; /* every shown value integral: "3." */
    int sci_mode; /* "1.2346e+05" */
    int width;    /* every element right-aligned to this */
} number_format;

/* One value in the chosen format, unpadded; Python's spelling of nan/inf. */
static int format_bare(const number_format *f, double v, char out[64]) {
    if (isnan(v)) return snprintf(out, 64, "nan");
    if (isinf(v)) return snprintf(out, 64, v < 0 ? "-inf" : "inf");
    if (f->sci_mode) return snprintf(out, 64, "%.*e", PRINT_PRECISION, v);
    if (f->int_mode) return snprintf(out, 64, "%.0f.", v);
    return snprintf(out, 64, "%.*f", PRINT_PRECISION, v);
}

static void format_padded(const number_format *f, double v, char out[80]) {
    char bare[64];
    int n = format_bare(f, v, bare);
    int pad = f->width > n ? f->width - n : 0;
    snprintf(out, 80, "%*s%s", pad, "", bare);
}

/* The format for the values shown (torch decides from those alone). */
static number_format choose_format(const float *vals, int64_t n) {
    number_format f = {1, 0, 1};
    double lo = INFINITY, hi = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = vals[i];
        if (!isfinite(v) || v == 0.0) continue;
        count++;
        lo = fmin(lo, fabs(v));
        hi = fmax(hi, fabs(v));
        if (v != ceil(v)) f.int_mode = 0;
    }
    if (count == 0) return f; /* only zeros, nan, inf: "0." style, width 1 */
    f.sci_mode = hi / lo > 1000.0 || hi > 1.0e8 || (!f.int_mode && lo < 1.0e-4);
    for (int64_t i = 0; i < n; i++) {
        double v = vals[i];
        if (!isfinite(v) || v == 0.0) continue;
        char buf[64];
        int len = format_bare(&f, v, buf);
        if (len > f.width) f.width = len;
    }
    return f;
}

/* Whether index i of a dimension of size n is printed: all are, unless the
 * tensor is summarised and the dimension long, when only the first and last
 * PRINT_EDGE are. */
static int is_shown(int64_t i, int64_t n, int summarize) {
    return !summarize || n <= 2 * PRINT_EDGE || i < PRINT_EDGE || i >= n - PRINT_EDGE;
}

/* Appends one element of a row: ", " between elements, or ",\n" and the
 * indent after every per_line of them. */
static void add_element(lx_sb *b, const char *text, int *count, int per_line, int indent) {
    if (*count > 0) {
        if (*count % per_line == 0) {
            lx_sb_str(b, ",\n");
            sb_spaces(b, indent + 1);
        } else {
            lx_sb_str(b, ", ");
        }
    }
    lx_sb_str(b, text);
    (*count)++;
}

/* "[a, b, c]" for one row, wrapped to the line width; `indent` is the column
 * the row's "[" stands in. */
static void format_row(lx_sb *b, const float *row, int64_t n, int summarize, const number_format *f, int indent) {
    int per_line = (PRINT_LINEWIDTH - indent) / (f->width + 2);
    if (per_line < 1) per_line = 1;
    int count = 0;
    lx_sb_str(b, "[");
    for (int64_t i = 0; i < n; i++) {
        if (!is_shown(i, n, summarize)) {
            add_element(b, " ...", &count, per_line, indent);
            i = n - PRINT_EDGE; /* jump over the middle */
        }
        char text[80];
        format_padded(f, row[i], text);
        add_element(b, text, &count, per_line, indent);
    }
    lx_sb_str(b, "]");
}

/* The format is chosen from the values that will be shown: all of them, or
 * only the edges when the tensor is summarised. */
static number_format format_for(const tensor *t, const float *vals, int summarize) {
    if (!summarize) return choose_format(vals, t->numel);
    int64_t rows = t->ndim == 2 ? t->shape[0] : 1;
    int64_t cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
    /* At most 2 * PRINT_EDGE shown along each dimension. */
    float shown[4 * PRINT_EDGE * PRINT_EDGE];
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (t->ndim == 2 && !is_shown(r, rows, 1)) continue;
        for (int64_t c = 0; c < cols; c++)
            if (is_shown(c, cols, 1)) shown[n++] = vals[r * cols + c];
    }
    return choose_format(shown, n);
}

/* Python's str(float): the shortest digits that read back as the same
 * double, positional between 1e-4 and 1e16, scientific outside. */
static void python_float_str(double v, char *out, size_t cap) {
    if (isnan(v)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, v < 0 ? "-inf" : "inf");
        return;
    }
    if (v == 0.0) {
        snprintf(out, cap, signbit(v) ? "-0.0" : "0.0");
        return;
    }
    char sci[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(sci, sizeof sci, "%.*e", p - 1, v);
        if (strtod(sci, NULL) == v) break;
    }
    /* sci is "-d.ddde+XX": pull out the sign, the digits and the exponent. */
    const char *s = sci;
    int negative = *s == '-';
    if (negative) s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    int exp10 = atoi(s + 1);

    lx_sb b = {0};
    if (negative) lx_sb_str(&b, "-");
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            lx_sb_str(&b, "0.");
            for (int i = 0; i < -exp10 - 1; i++)
                lx_sb_str(&b, "0");
            lx_sb_str(&b, digits);
        } else {
            for (int i = 0; i <= exp10; i++)
                lx_sb_add(&b, i < nd ? &digits[i] : "0", 1);
            lx_sb_str(&b, ".");
            lx_sb_str(&b, nd > exp10 + 1 ? digits + exp10 + 1 : "0");
        }
    } else {
        lx_sb_add(&b, digits, 1);
        if (nd > 1) {
            lx_sb_str(&b, ".");
            lx_sb_str(&b, digits + 1);
        }
        lx_sb_printf(&b, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    snprintf(out, cap, "%s", b.s);
    free(b.s);
}

static void keep_string(tensor *t, lx_sb *b) {
    free(t->str);
    t->str = b->s;
}

const char *tensor_str(tensor *t) {
    if (!t) lx_fatal("tensor_str: t is NULL");
    lx_tensor_read(t, "tensor_str");
    static const char prefix[] = "tensor(";
    const int indent = (int)sizeof prefix - 1;
    lx_sb b = {0};
    lx_sb_str(&b, prefix);

    float *vals = lx_host_buffer(t->numel);
    tensor_to_host(t, vals);
    int summarize = t->numel > PRINT_THRESHOLD;

    if (t->numel == 0) {
        lx_sb_str(&b, "[]");
    } else if (t->ndim == 1) {
        number_format f = format_for(t, vals, summarize);
        format_row(&b, vals, t->numel, summarize, &f, indent);
    } else {
        /* A matrix: one row per line, each row indented under the first. */
        number_format f = format_for(t, vals, summarize);
        int64_t rows = t->shape[0], cols = t->shape[1];
        lx_sb_str(&b, "[");
        for (int64_t r = 0; r < rows; r++) {
            if (r > 0) {
                lx_sb_str(&b, ",\n");
                sb_spaces(&b, indent + 1);
            }
            if (!is_shown(r, rows, summarize)) {
                lx_sb_str(&b, "...,\n");
                sb_spaces(&b, indent + 1);
                r = rows - PRINT_EDGE; /* jump over the middle */
            }
            format_row(&b, vals + r * cols, cols, summarize, &f, indent + 1);
        }
        lx_sb_str(&b, "]");
    }
    free(vals);

    /* Suffixes, wrapped onto their own line the way torch decides it (its
     * estimate of the last line's length included). */
    char suffixes[3][64];
    int nsuffix = 0;
    char dev[32];
    snprintf(suffixes[nsuffix++], 64, "device='%s'", lx_device_name(t->device, dev));
    if (t->dt != DTYPE_F32) snprintf(suffixes[nsuffix++], 64, "dtype=torch.%s", dtype_name(t->dt));
    if (t->numel == 0 && t->ndim == 2)
        snprintf(suffixes[nsuffix++], 64, "size=(%" PRId64 ", %" PRId64 ")", t->shape[0], t->shape[1]);
    const char *nl = strrchr(b.s, '\n');
    long last_line = (long)b.len - (nl ? (long)(nl - b.s) : -1) + 1;
    for (int i = 0; i < nsuffix; i++) {
        long len = (long)strlen(suffixes[i]);
        if (last_line + len + 2 > PRINT_LINEWIDTH) {
            lx_sb_str(&b, ",\n");
            sb_spaces(&b, indent);
            last_line = indent + len;
        } else {
            lx_sb_str(&b, ", ");
            last_line += len + 2;
        }
        lx_sb_str(&b, suffixes[i]);
    }
    lx_sb_str(&b, ")");
    keep_string(t, &b);
    return t->str;
}

/* "1024x1024[-0.0239...]": the shape (then the dtype, when not fp32:
 * "1024x1024 bfloat16[...]"), then the first element rounded to 4
 * decimals and spelled as Python would (round(x, 4), then str()). */
const char *summarize(tensor *t) {
    if (!t) lx_fatal("summarize: t is NULL");
    lx_tensor_read(t, "summarize");
    lx_sb b = {0};
    lx_sb_printf(&b, "%" PRId64, t->shape[0]);
    if (t->ndim == 2) lx_sb_printf(&b, "x%" PRId64, t->shape[1]);
    if (t->dt != DTYPE_F32) lx_sb_printf(&b, " %s", dtype_name(t->dt));
    if (t->numel == 0) {
        lx_sb_str(&b, "[]");
    } else {
        /* Round to 4 decimals exactly (printf rounds the exact binary value,
         * ties to even, as Python's round does), read back, print shortest. */
        char fixed[64], text[64];
        double first = tensor_item(t, 0);
        snprintf(fixed, sizeof fixed, "%.4f", first);
        python_float_str(strtod(fixed, NULL), text, sizeof text);
        lx_sb_printf(&b, "[%s...]", text);
    }
    keep_string(t, &b);
    return t->str;
}
