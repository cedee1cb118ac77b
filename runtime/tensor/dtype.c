/*
 * dtype.c: the element types and the conversions between them.
 *
 * Every format here is a binary floating-point format: a sign bit, E
 * exponent bits with a bias, M mantissa bits, subnormals where the exponent
 * field is 0. They differ only in those numbers, their largest finite value
 * and what the all-ones exponent means (infinity and NaN for IEEE-like
 * formats; E4M3 keeps it for numbers and has one NaN mantissa). So one
 * encoder and one decoder, driven by a table, serve all four, written with
 * frexp/ldexp/rint in double rather than bit tricks, so that it reads as the
 * definition of rounding:
 *
 *   - find the binade of |x| (never below the smallest normal's: there the
 *     spacing stops shrinking, which is what subnormals are);
 *   - the spacing there is q = 2^(exponent - M); x / q rounded to an
 *     integer, ties to even (rint in the default rounding mode), times q is
 *     the nearest representable value (a carry into the next binade is
 *     still right: it is a power of two);
 *   - past the largest finite value: infinity, or that value when the format
 *     saturates (FP8 here).
 *
 * Every value of these formats is an fp32 value, so decoding is exact.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lectern.h"
#include "tensor/tensor.h"

typedef struct format {
    int ebits, mbits, bias;
    double max;    /* largest finite value */
    int has_inf;   /* all-ones exponent, mantissa 0: infinity (else numbers, E4M3) */
    int saturates; /* conversion beyond max gives max, not infinity */
    uint32_t nan;  /* the NaN this encoder writes (positive) */
    const char *name;
} format;

static const format formats[] = {
        [DTYPE_F32] = {8, 23, 127, 0x1.fffffep127, 1, 0, 0x7fc00000u, "float32"},
        [DTYPE_BF16] = {8, 7, 127, 0x1.fep127, 1, 0, 0x7fc0u, "bfloat16"},
        [DTYPE_F16] = {5, 10, 15, 65504.0, 1, 0, 0x7e00u, "float16"},
        [DTYPE_F8_E4M3] = {4, 3, 7, 448.0, 0, 1, 0x7fu, "float8_e4m3fn"},
        [DTYPE_F8_E5M2] = {5, 2, 15, 57344.0, 1, 1, 0x7fu, "float8_e5m2"},
};

static const format *format_of(dtype d) {
    if ((unsigned)d > DTYPE_F8_E5M2) lx_fatal("dtype %d does not exist (DTYPE_F32 .. DTYPE_F8_E5M2)", (int)d);
    return &formats[d];
}

size_t dtype_size(dtype d) { return (size_t)(1 + format_of(d)->ebits + format_of(d)->mbits) / 8; }
const char *dtype_name(dtype d) { return format_of(d)->name; }

/* The bits of x rounded to format f (not fp32: that is a cast). */
static uint32_t encode(const format *f, double x) {
    uint32_t sign = signbit(x) ? 1u << (f->ebits + f->mbits) : 0;
    uint32_t all_ones = (1u << f->ebits) - 1;
    if (isnan(x)) return f->nan;
    double a = fabs(x), r;
    if (isinf(a)) {
        r = INFINITY;
    } else {
        int e;
        frexp(a, &e); /* a = m 2^e, m in [0.5, 1): the binade's exponent is e - 1 */
        int emin = 1 - f->bias;
        int binade = e - 1 > emin ? e - 1 : emin;
        double q = ldexp(1.0, binade - f->mbits);
        r = rint(a / q) * q;
    }
    if (r > f->max) {
        if (!f->saturates) return sign | all_ones << f->mbits; /* infinity */
        r = f->max;
    }
    int emin = 1 - f->bias;
    if (r < ldexp(1.0, emin)) /* subnormal (or zero): exponent field 0 */
        return sign | (uint32_t)ldexp(r, f->mbits - emin);
    int e;
    frexp(r, &e);
    uint32_t field = (uint32_t)(e - 1 + f->bias);
    uint32_t mant = (uint32_t)(ldexp(r, f->mbits - (e - 1)) - ldexp(1.0, f->mbits));
    return sign | field << f->mbits | mant;
}

static float decode(const format *f, uint32_t bits) {
    uint32_t mmask = (1u << f->mbits) - 1, all_ones = (1u << f->ebits) - 1;
    uint32_t field = (bits >> f->mbits) & all_ones, mant = bits & mmask;
    int negative = (bits >> (f->ebits + f->mbits)) & 1;
    double v;
    if (field == all_ones && f->has_inf) v = mant ? NAN : INFINITY;
    else if (field == all_ones && mant == mmask) v = NAN; /* E4M3's only NaN */
    else if (field == 0) v = ldexp((double)mant, 1 - f->bias - f->mbits);
    else v = ldexp((double)(mant | (mmask + 1)), (int)field - f->bias - f->mbits);
    return (float)(negative ? -v : v);
}

/* bf16 is fp32's top 16 bits, so on the bits rounding to nearest even is
 * one add: 0x7fff, plus 1 when the kept part is odd, carries into bit 16
 * exactly when the dropped half is above the midpoint, or at it with an odd
 * kept part (a carry out of the mantissa is the next binade, or infinity:
 * right either way). Widening is a shift. The same bits as encode() and
 * decode() give (tests/tensor/test_dtype.py's rounding tests go through
 * here), at a few nanoseconds an element instead of about a hundred: a
 * bf16 all-reduce widens and narrows every element at every step. */
static uint16_t bf16_bits(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint16_t rounded = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    return (b & 0x7fffffffu) > 0x7f800000u ? 0x7fc0 : rounded; /* NaN: the encoder's NaN */
}

static float bf16_value(uint16_t bits) {
    uint32_t b = (uint32_t)bits << 16;
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* In blocks of 16 with a fixed trip count, which gcc -O2 turns into vector
 * code (its cheapest cost model leaves a loop of unknown length scalar):
 * 1.2 ns an element instead of 3.6 on the 2-core VM, and the MPI sum of
 * bf16 calls these on every 512 elements of every step. */
static void bf16_narrow(uint16_t *out, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++)
            out[i + j] = bf16_bits(src[i + j]);
    for (; i < n; i++)
        out[i] = bf16_bits(src[i]);
}

static void bf16_widen(float *out, const uint16_t *src, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++)
            out[i + j] = bf16_value(src[i + j]);
    for (; i < n; i++)
        out[i] = bf16_value(src[i]);
}

/* n values of src (fp32), each times scale, into dst in dtype d. */
void lx_dtype_narrow(dtype d, void *dst, const float *src, int64_t n, double scale) {
    const format *f = format_of(d);
    if (d == DTYPE_BF16 && scale == 1.0) {
        bf16_narrow(dst, src, n);
        return;
    }
    if (d == DTYPE_F32) {
        float *out = dst;
        for (int64_t i = 0; i < n; i++)
            out[i] = (float)((double)src[i] * scale);
        return;
    }
    if (dtype_size(d) == 2) {
        uint16_t *out = dst;
        for (int64_t i = 0; i < n; i++)
            out[i] = (uint16_t)encode(f, (double)src[i] * scale);
    } else {
        uint8_t *out = dst;
        for (int64_t i = 0; i < n; i++)
            out[i] = (uint8_t)encode(f, (double)src[i] * scale);
    }
}

/* n values of src in dtype d into dst as fp32, each times scale (1: exact). */
void lx_dtype_widen(dtype d, float *dst, const void *src, int64_t n, double scale) {
    const format *f = format_of(d);
    if (d == DTYPE_BF16 && scale == 1.0) {
        bf16_widen(dst, src, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float v;
        if (d == DTYPE_F32) v = ((const float *)src)[i];
        else if (dtype_size(d) == 2) v = decode(f, ((const uint16_t *)src)[i]);
        else v = decode(f, ((const uint8_t *)src)[i]);
        dst[i] = scale == 1.0 ? v : (float)((double)v * scale);
    }
}
