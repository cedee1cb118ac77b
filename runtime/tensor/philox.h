/*
 * philox.h: the random numbers behind randn(), written once for the host and
 * the GPU, so that both give the very same floats.
 *
 * Counter-based generation. Philox4x32-10 (Salmon, Moraes, Dror and Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC 2011) is a keyed
 * bijection of 128-bit counters: block b of the stream of seed s is
 * philox(counter = b, key = s), four 32-bit words, computed from b alone.
 * There is no state to carry from one number to the next, so a GPU thread
 * can make block b while another makes block b + 1, and the host, going
 * through the blocks one by one, gets the same words.
 *
 * Normals. Each block's four words become four standard normals by the
 * Box-Muller transform, words (0, 1) and (2, 3) each a pair of uniforms:
 *
 *     u1, u2 in (0, 1),  r = sqrt(-2 ln u1),  z0 = r cos(2 pi u2),  z1 = r sin(2 pi u2)
 *
 * Normal number i of seed s is word i % 4 of block i / 4: randn(3) then
 * randn(3) gives the numbers of randn(6).
 *
 * The same floats everywhere. The formulas use only +, -, *, / and sqrt in
 * double, which IEEE 754 rounds exactly the same on every CPU and GPU, and
 * never a library's log, sin or cos (those differ in their last bits between
 * glibc and CUDA, and between versions). ln, sin and cos are the short series
 * below, accurate to about 1e-16; the result is rounded to float once, at the
 * end. Two compiler habits would break this and are ruled out: fusing a
 * multiply and an add into one FMA (device code calls the explicitly rounded
 * __dmul_rn/__dadd_rn, and the host is compiled with -ffp-contract=off), and
 * x87 extended precision (the check below).
 *
 * Tests: tests/tensor/test_random.c checks the generator against the published
 * Random123 known-answer vectors, the series against the C library's log, sin
 * and cos, and, on a GPU, the device kernel against this host code bit for bit.
 */
#ifndef LECTERN_PHILOX_H
#define LECTERN_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define LX_RNG_FN static inline __host__ __device__
#else
#define LX_RNG_FN static inline
#endif

#if !defined(__CUDA_ARCH__) && defined(__FLT_EVAL_METHOD__) && __FLT_EVAL_METHOD__ != 0
#error "philox.h needs double arithmetic rounded to double (SSE2, not x87): build for x86-64 or add -mfpmath=sse"
#endif

/* Rounded-to-nearest double arithmetic that is never fused. */
#ifdef __CUDA_ARCH__
#define LX_ADD(a, b) __dadd_rn((a), (b))
#define LX_MUL(a, b) __dmul_rn((a), (b))
#define LX_DIV(a, b) __ddiv_rn((a), (b))
#define LX_SQRT(a) __dsqrt_rn(a)
#else
#define LX_ADD(a, b) ((a) + (b))
#define LX_MUL(a, b) ((a) * (b))
#define LX_DIV(a, b) ((a) / (b))
#define LX_SQRT(a) __builtin_sqrt(a) /* IEEE sqrt: one SSE2 instruction */
#endif

/* ---------------- Philox4x32-10 ---------------- */

#define LX_PHILOX_M0 0xD2511F53u /* round multipliers */
#define LX_PHILOX_M1 0xCD9E8D57u
#define LX_PHILOX_W0 0x9E3779B9u /* key increments: the golden ratio, sqrt(3) - 1 */
#define LX_PHILOX_W1 0xBB67AE85u

/* One round: two 32x32 -> 64-bit products, their halves crossed with the
 * other words and the round key. */
LX_RNG_FN void lx_philox_round(uint32_t ctr[4], const uint32_t key[2]) {
    uint64_t p0 = (uint64_t)LX_PHILOX_M0 * ctr[0];
    uint64_t p1 = (uint64_t)LX_PHILOX_M1 * ctr[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t c1 = ctr[1], c3 = ctr[3];
    ctr[0] = hi1 ^ c1 ^ key[0];
    ctr[1] = lo1;
    ctr[2] = hi0 ^ c3 ^ key[1];
    ctr[3] = lo0;
}

/* Ten rounds, the key bumped between them: out = philox4x32_10(ctr, key). */
LX_RNG_FN void lx_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4]) {
    uint32_t ctr[4] = {ctr_in[0], ctr_in[1], ctr_in[2], ctr_in[3]};
    uint32_t key[2] = {key_in[0], key_in[1]};
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            key[0] += LX_PHILOX_W0;
            key[1] += LX_PHILOX_W1;
        }
        lx_philox_round(ctr, key);
    }
    for (int i = 0; i < 4; i++)
        out[i] = ctr[i];
}

/* ---------------- ln, sin, cos from + - * / ---------------- */

/* Number of leading zero bits of a nonzero 64-bit word. */
LX_RNG_FN int lx_clz64(uint64_t x) {
#ifdef __CUDA_ARCH__
    return __clzll((long long)x);
#else
    return __builtin_clzll(x);
#endif
}

#define LX_LN2 0.69314718055994530942
#define LX_SQRT2 1.41421356237309504880
#define LX_PI_2 1.57079632679489661923

/* ln(y * 2^-33) for an integer 1 <= y < 2^33: the log of a uniform.
 * y = m 2^k exactly, with m in [sqrt(1/2), sqrt(2)); then
 * ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m - 1)/(m + 1),
 * |s| <= 0.172, so eleven terms leave an error below 1e-18. */
LX_RNG_FN double lx_ln_scaled(uint64_t y) {
    int k = 63 - lx_clz64(y);                          /* 2^k <= y < 2^(k+1) */
    double m = LX_DIV((double)y, (double)(1ull << k)); /* exact: y < 2^33, a power of 2 */
    if (m > LX_SQRT2) {
        m = LX_MUL(m, 0.5);
        k += 1;
    }
    double s = LX_DIV(LX_ADD(m, -1.0), LX_ADD(m, 1.0));
    double z = LX_MUL(s, s);
    /* 1/(2j+1), j = 10 down to 0, by Horner's rule in z */
    double sum = 0.047619047619047619048;                  /* 1/21 */
    sum = LX_ADD(LX_MUL(sum, z), 0.052631578947368421053); /* 1/19 */
    sum = LX_ADD(LX_MUL(sum, z), 0.058823529411764705882); /* 1/17 */
    sum = LX_ADD(LX_MUL(sum, z), 0.066666666666666666667); /* 1/15 */
    sum = LX_ADD(LX_MUL(sum, z), 0.076923076923076923077); /* 1/13 */
    sum = LX_ADD(LX_MUL(sum, z), 0.090909090909090909091); /* 1/11 */
    sum = LX_ADD(LX_MUL(sum, z), 0.11111111111111111111);  /* 1/9 */
    sum = LX_ADD(LX_MUL(sum, z), 0.14285714285714285714);  /* 1/7 */
    sum = LX_ADD(LX_MUL(sum, z), 0.2);                     /* 1/5 */
    sum = LX_ADD(LX_MUL(sum, z), 0.33333333333333333333);  /* 1/3 */
    sum = LX_ADD(LX_MUL(sum, z), 1.0);
    double ln_m = LX_MUL(LX_MUL(2.0, s), sum);
    return LX_ADD(LX_MUL((double)(k - 33), LX_LN2), ln_m);
}

/* sin and cos of a in [-pi/4, pi/4] by their Taylor series to a^17 and a^16:
 * the first term left out is below 5e-17. */
LX_RNG_FN void lx_sincos_small(double a, double *s, double *c) {
    double z = LX_MUL(a, a);
    double sp = 2.8114572543455207632e-15;                  /* 1/17! */
    sp = LX_ADD(LX_MUL(sp, z), -7.6471637318198164759e-13); /* -1/15! */
    sp = LX_ADD(LX_MUL(sp, z), 1.6059043836821614599e-10);  /* 1/13! */
    sp = LX_ADD(LX_MUL(sp, z), -2.5052108385441718775e-08); /* -1/11! */
    sp = LX_ADD(LX_MUL(sp, z), 2.7557319223985890653e-06);  /* 1/9! */
    sp = LX_ADD(LX_MUL(sp, z), -1.9841269841269841270e-04); /* -1/7! */
    sp = LX_ADD(LX_MUL(sp, z), 8.3333333333333333333e-03);  /* 1/5! */
    sp = LX_ADD(LX_MUL(sp, z), -1.6666666666666666667e-01); /* -1/3! */
    *s = LX_ADD(a, LX_MUL(LX_MUL(a, z), sp));
    double cp = 4.7794773323873852974e-14;                  /* 1/16! */
    cp = LX_ADD(LX_MUL(cp, z), -1.1470745597729724714e-11); /* -1/14! */
    cp = LX_ADD(LX_MUL(cp, z), 2.0876756987868098979e-09);  /* 1/12! */
    cp = LX_ADD(LX_MUL(cp, z), -2.7557319223985890653e-07); /* -1/10! */
    cp = LX_ADD(LX_MUL(cp, z), 2.4801587301587301587e-05);  /* 1/8! */
    cp = LX_ADD(LX_MUL(cp, z), -1.3888888888888888889e-03); /* -1/6! */
    cp = LX_ADD(LX_MUL(cp, z), 4.1666666666666666667e-02);  /* 1/4! */
    cp = LX_ADD(LX_MUL(cp, z), -0.5);                       /* -1/2! */
    *c = LX_ADD(1.0, LX_MUL(z, cp));
}

/* sin and cos of 2 pi u for the uniform u = (x + 1/2) 2^-32. With
 * 4u = q + f, q the nearest integer and f in [-1/2, 1/2] (both exact in
 * integer arithmetic), the angle is q quarter turns plus f pi/2, and a
 * quarter turn only swaps sin and cos and flips signs. */
LX_RNG_FN void lx_sincos_turn(uint32_t x, double *s, double *c) {
    int64_t twice = 2 * (int64_t)x + 1;                                          /* 4u = twice / 2^31 */
    int64_t q = (twice + (1ll << 30)) >> 31;                                     /* nearest integer to 4u, 0..4 */
    double f = LX_MUL((double)(twice - (q << 31)), 4.656612873077392578125e-10); /* 2^-31 */
    double sa, ca;
    lx_sincos_small(LX_MUL(f, LX_PI_2), &sa, &ca);
    switch (q & 3) {
    case 0:
        *s = sa;
        *c = ca;
        break;
    case 1:
        *s = ca;
        *c = -sa;
        break;
    case 2:
        *s = -sa;
        *c = -ca;
        break;
    default:
        *s = -ca;
        *c = sa;
        break;
    }
}

/* ---------------- normals ---------------- */

/* The four normals of block `block` of seed `seed`. */
LX_RNG_FN void lx_normal4(uint64_t seed, uint64_t block, float out[4]) {
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), 0u, 0u};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t w[4];
    lx_philox4x32_10(ctr, key, w);
    for (int pair = 0; pair < 2; pair++) {
        /* u1 = (w + 1/2) 2^-32 = (2w + 1) 2^-33: never 0, so ln u1 is finite */
        double ln_u1 = lx_ln_scaled(2 * (uint64_t)w[2 * pair] + 1);
        double r = LX_SQRT(LX_MUL(-2.0, ln_u1));
        double s, c;
        lx_sincos_turn(w[2 * pair + 1], &s, &c);
        out[2 * pair] = (float)LX_MUL(r, c);
        out[2 * pair + 1] = (float)LX_MUL(r, s);
    }
}

/* Normals number first .. first + n - 1 of seed `seed` into out[0 .. n). */
LX_RNG_FN void lx_normals(float *out, int64_t n, uint64_t seed, uint64_t first) {
    for (int64_t i = 0; i < n;) {
        uint64_t at = first + (uint64_t)i;
        float four[4];
        lx_normal4(seed, at / 4, four);
        for (unsigned j = (unsigned)(at % 4); j < 4 && i < n; j++)
            out[i++] = four[j];
    }
}

#endif /* LECTERN_PHILOX_H */
