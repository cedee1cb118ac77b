/*
 * test_random.c: randn's generator (runtime/tensor/philox.h) checked against things
 * that do not come from it:
 *
 *   - Philox4x32-10 against the known-answer vectors published with Random123
 *     (its tests/kat_vectors file, lines "philox4x32 10 ..."), the reference
 *     implementation of the paper that defined the generator;
 *   - the series for ln, sin and cos against the C library's long-double
 *     logl, sinl and cosl;
 *   - whole normals against Box-Muller computed in long double with the C
 *     library, rounded to float;
 *   - on a GPU, the device kernel against the host code, bit for bit
 *     (skipped, saying why, where no GPU is visible).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lectern.h"
#include "tensor/philox.h"

/* ---------------- the raw generator ---------------- */

static void test_philox_known_answers(void **state) {
    (void)state;
    /* counter[4] key[2] -> output[4], as Random123's kat_vectors lists them */
    static const uint32_t kat[3][10] = {
            {0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c,
             0x9b00dbd8},
            {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
             0x6d5451fd},
            {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
             0x24126ea1},
    };
    for (int v = 0; v < 3; v++) {
        uint32_t out[4];
        lx_philox4x32_10(kat[v], kat[v] + 4, out);
        for (int i = 0; i < 4; i++)
            if (out[i] != kat[v][6 + i])
                fail_msg("vector %d word %d: got %08x, expected %08x", v, i, out[i], kat[v][6 + i]);
    }
}

/* ---------------- the series against the C library ---------------- */

/* A small xorshift of our own to pick test inputs; any spread will do. */
static uint64_t pick_state = 88172645463325252ull;
static uint64_t pick(void) {
    pick_state ^= pick_state << 13;
    pick_state ^= pick_state >> 7;
    pick_state ^= pick_state << 17;
    return pick_state;
}

static void test_ln_matches_libm(void **state) {
    (void)state;
    /* Edges: the smallest and largest uniform, powers of two, both sides of
     * the sqrt(2) switch; then 100,000 random ones. */
    uint64_t edges[] = {1,
                        2,
                        3,
                        1ull << 16,
                        (1ull << 32) - 1,
                        1ull << 32,
                        (1ull << 32) + 1,
                        (1ull << 33) - 1,
                        6074001000ull,
                        6074000999ull,
                        12148001999ull};
    double worst = 0;
    for (int i = 0; i < 100000 + (int)(sizeof edges / sizeof edges[0]); i++) {
        uint64_t y = i < (int)(sizeof edges / sizeof edges[0]) ? edges[i] : 1 + pick() % ((1ull << 33) - 1);
        long double ref = logl((long double)y / 8589934592.0L); /* y 2^-33, exact */
        double got = lx_ln_scaled(y);
        double rel = (double)fabsl(((long double)got - ref) / ref);
        if (rel > worst) worst = rel;
    }
    /* A double holds 1.1e-16 relative; the series and the sum of k ln 2 and
     * ln m each round a few times: 1e-15 allows about 9 roundings, and still
     * fixes every float the normals are rounded to. */
    if (worst > 1e-15) fail_msg("ln: worst relative error %g", worst);
}

static void test_sincos_matches_libm(void **state) {
    (void)state;
    uint32_t edges[] = {0,        1,        (1u << 29) - 1, 1u << 29,    (1u << 30) - 1, 1u << 30, (1u << 31) - 1,
                        1u << 31, 3u << 30, 0xffffffffu,    0xfffffffeu, 0x7fffffffu};
    double worst = 0;
    for (int i = 0; i < 100000 + (int)(sizeof edges / sizeof edges[0]); i++) {
        uint32_t x = i < (int)(sizeof edges / sizeof edges[0]) ? edges[i] : (uint32_t)pick();
        /* the angle 2 pi (x + 1/2) 2^-32 in long double: 64-bit mantissa */
        long double angle = 2.0L * M_PIl * ((long double)x + 0.5L) / 4294967296.0L;
        double s, c;
        lx_sincos_turn(x, &s, &c);
        double ds = (double)fabsl((long double)s - sinl(angle));
        double dc = (double)fabsl((long double)c - cosl(angle));
        if (ds > worst) worst = ds;
        if (dc > worst) worst = dc;
    }
    /* Values are at most 1; a double's spacing near 1 is 2.2e-16; the series'
     * few roundings stay within 2 of those. */
    if (worst > 4.5e-16) fail_msg("sin/cos: worst absolute error %g", worst);
}

/* ---------------- whole normals ---------------- */

/* One ulp of float at x. */
static double float_ulp(float x) { return (double)(nextafterf(fabsf(x), INFINITY) - fabsf(x)); }

static void test_normals_match_box_muller(void **state) {
    (void)state;
    /* Box-Muller from the same Philox words, with the C library in long
     * double, rounded to float: ours must give the same float, except where
     * the exact value lies so close to halfway between two floats that ours
     * and the reference (errors near 1e-16 and 1e-19) round to different
     * sides: then they differ by one ulp, and that must be rare. */
    int off_by_one = 0, total = 0;
    const uint64_t seed = 20261122;
    for (uint64_t block = 0; block < 50000; block++) {
        uint64_t b = block < 25000 ? block : pick();
        float got[4];
        lx_normal4(seed, b, got);
        uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), 0, 0}, key[2] = {(uint32_t)seed, 0}, w[4];
        lx_philox4x32_10(ctr, key, w);
        for (int p = 0; p < 2; p++) {
            long double u1 = ((long double)w[2 * p] + 0.5L) / 4294967296.0L;
            long double u2 = ((long double)w[2 * p + 1] + 0.5L) / 4294967296.0L;
            long double r = sqrtl(-2.0L * logl(u1));
            float want[2] = {(float)(r * cosl(2.0L * M_PIl * u2)), (float)(r * sinl(2.0L * M_PIl * u2))};
            for (int j = 0; j < 2; j++) {
                float g = got[2 * p + j];
                total++;
                if (g == want[j]) continue;
                if (fabs((double)g - (double)want[j]) > float_ulp(want[j]))
                    fail_msg("block %llu normal %d: got %.9g, Box-Muller gives %.9g", (unsigned long long)b, 2 * p + j,
                             g, want[j]);
                off_by_one++;
            }
        }
    }
    /* A float has 2^-24 relative spacing and our value errs by about 1e-16,
     * so about 1e-16 / 6e-8 = 2e-9 of the values could round differently;
     * allow 1 in 10,000, far above that and far below anything systematic. */
    if (off_by_one * 10000 > total) fail_msg("%d of %d normals differ from Box-Muller by one ulp", off_by_one, total);
}

static void test_stream_continues_across_blocks(void **state) {
    (void)state;
    /* Normals i .. i + n - 1 are a window on one stream, wherever it starts
     * inside a block of four. */
    float all[64];
    lx_normals(all, 64, 7, 0);
    for (int first = 0; first < 9; first++)
        for (int n = 0; n + first <= 64 && n < 23; n++) {
            float part[64];
            lx_normals(part, n, 7, (uint64_t)first);
            if (n) assert_memory_equal(part, all + first, (size_t)n * sizeof(float));
        }
    /* randn draws follow the same stream */
    manual_seed(7);
    tensor *a = randn(5, 0, -1), *b = randn(2, 3, -1), *c = randn(53, 0, -1);
    assert_memory_equal(a->data, all, 5 * sizeof(float));
    assert_memory_equal(b->data, all + 5, 6 * sizeof(float));
    assert_memory_equal(c->data, all + 11, 53 * sizeof(float));
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
}

/* ---------------- the GPU kernel against the host ---------------- */

static void test_device_kernel_matches_host(void **state) {
    (void)state;
    if (gpu_count() == 0) {
#ifdef LECTERN_CUDA
        print_message("skipped: no GPU visible (gpu_count() is 0): the device kernel cannot run here\n");
#else
        print_message("skipped: this build has no CUDA (make CUDA=0 or no nvcc): no device kernel\n");
#endif
        skip();
    }
    /* Sizes and starting points that cut blocks of four at every place, and
     * one large enough that the grid-stride loop goes round several times. */
    const int64_t sizes[] = {1, 3, 4, 5, 1000, 4096 * 1024 + 3};
    const int64_t skips[] = {0, 1, 2, 3, 13};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (size_t s = 0; s < sizeof skips / sizeof skips[0]; s++) {
            manual_seed(1234 + k);
            tensor *skipped = randn(skips[s], 0, -1); /* moves the stream on */
            tensor *dev = randn(sizes[k], 0, 0);
            float *host = malloc((size_t)sizes[k] * sizeof(float));
            float *back = malloc((size_t)sizes[k] * sizeof(float));
            assert_non_null(host);
            assert_non_null(back);
            lx_normals(host, sizes[k], 1234 + k, (uint64_t)skips[s]);
            tensor_to_host(dev, back);
            if (memcmp(host, back, (size_t)sizes[k] * sizeof(float)) != 0) {
                for (int64_t i = 0; i < sizes[k]; i++)
                    if (memcmp(&host[i], &back[i], sizeof(float)) != 0)
                        fail_msg("size %lld after %lld: element %lld is %.9g on the GPU, %.9g on the host",
                                 (long long)sizes[k], (long long)skips[s], (long long)i, back[i], host[i]);
            }
            free(host);
            free(back);
            tensor_free(skipped);
            tensor_free(dev);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_philox_known_answers),
            cmocka_unit_test(test_ln_matches_libm),
            cmocka_unit_test(test_sincos_matches_libm),
            cmocka_unit_test(test_normals_match_box_muller),
            cmocka_unit_test(test_stream_continues_across_blocks),
            cmocka_unit_test(test_device_kernel_matches_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
