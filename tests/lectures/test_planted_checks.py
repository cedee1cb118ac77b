"""Every check of lecture_gpu and lecture_collectives can fail: plant the bug
each one is there to catch, in a copy of the lecture (tests/lib/planted.py),
run the copy with --quick, and see that check fail, while the same copy
built without a plant passes every check (so a failure is the plant's, not
the build's).

    /usr/bin/python3 -m unittest tests.test_planted_checks
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import planted  # noqa: E402


class LectureGpu(planted.PlantedCase):
    LECTURE = "lecture_gpu"

    def test_unplanted_copy_passes(self):
        # a plant that changes nothing: the helper's build alone
        checks = self.assert_unplanted_passes("static double add_flops(double n) { return n; }")
        self.assertGreater(len(checks), 5)

    def test_vector_add_max_instead_of_sum(self):
        self.assert_fails("        out[i] = x[i] + y[i];", "        out[i] = fmaxf(x[i], y[i]);",
                          "the CPU loop vs the runtime's add_()")

    def test_naive_matmul_drops_the_last_term(self):
        # one product of two standard normals missing: about 1 off, against a
        # tolerance of 2 gamma_n S (about 0.002 at n = 128)
        self.assert_fails("            for (int k = 0; k < n; k++)\n                acc +=",
                          "            for (int k = 1; k < n; k++)\n                acc +=",
                          "the naive loop vs matmul() (OpenBLAS)")

    def test_tiled_matmul_skips_the_last_k_tile(self):
        self.assert_fails("        for (int k0 = 0; k0 < n; k0 += CPU_TILE)",
                          "        for (int k0 = 0; k0 < n - CPU_TILE; k0 += CPU_TILE)",
                          "the tiled loop vs matmul() (OpenBLAS)")

    def test_fsdp_sums_instead_of_averaging(self):
        # AdamW's first step divides the gradient's scale away, so the weights
        # agree; the gradient check is the one that must see the factor N
        self.assert_fails("dist_reduce_scatter(gs[i], dw, DIST_AVG);",
                          "dist_reduce_scatter(gs[i], dw, DIST_SUM);",
                          "rank 0: FSDP's gradient shards equal DDP's")

    def test_fsdp_skips_a_layers_update(self):
        self.assert_fails("    for (int i = 0; i < c->layers; i++)\n        adamw_step(opt[i], ws[i], gs[i]);",
                          "    for (int i = 1; i < c->layers; i++)\n        adamw_step(opt[i], ws[i], gs[i]);",
                          "rank 0: FSDP's weight shards equal DDP's")

    def test_fsdp_gathers_once(self):
        # the backward reuses nothing: an empty tensor instead of the second
        # gather changes both the bytes sent and the gradients
        self.assert_fails("    for (int i = c->layers - 1; i >= 0; i--) {\n        tensor *full = gather_layer(c, ws[i]);",
                          "    for (int i = c->layers - 1; i >= 0; i--) {\n        tensor *full = "
                          "empty(c->width, c->width, x->device);",
                          "FSDP sent 3(N-1)/N")

    def test_ddp_skips_layer_0s_all_reduce(self):
        self.assert_fails("        dist_all_reduce(g[i], DIST_AVG);\n        adamw_step(opt[i], w[i], g[i]);",
                          "        if (i) dist_all_reduce(g[i], DIST_AVG);\n        adamw_step(opt[i], w[i], g[i]);",
                          "DDP sent 2(N-1)/N")

    def test_kernel_markers_not_found(self):
        self.assert_fails('    snprintf(start, sizeof start, "/* lecture: %s */\\n", name);',
                          '    snprintf(start, sizeof start, "/* lecture %s */\\n", name);',
                          "the kernel `vector_add` is in")


class LectureCollectives(planted.PlantedCase):
    LECTURE = "lecture_collectives"

    def test_unplanted_copy_passes(self):
        checks = self.assert_unplanted_passes("return lecture_main(argc, argv, lecture_collectives);")
        self.assertEqual(len(checks), 4)   # one per hand-built all-reduce

    def test_ring_overwrites_the_partial_sum(self):
        self.assert_fails("    counted_sendrecv(out, (rank + 1) % n, got, (rank - 1 + n) % n);\n    add_(in, got);",
                          "    counted_sendrecv(out, (rank + 1) % n, got, (rank - 1 + n) % n);\n    tensor_copy(in, got);",
                          "ring: every rank's result equals dist_all_reduce's")

    def test_tree_skips_a_child(self):
        self.assert_fails("    for (mask = 1; mask < n; mask <<= 1) {",
                          "    for (mask = 2; mask < n; mask <<= 1) {", "tree: every rank's result")

    def test_everyone_to_everyone_keeps_the_last_tensor(self):
        self.assert_fails("        add_(sum, got);\n", "        tensor_copy(sum, got);\n",
                          "everyone to everyone: every rank's result")

    def test_root_keeps_the_last_tensor_instead_of_the_sum(self):
        self.assert_fails("            counted_recv(got, src);\n            add_(x, got);",
                          "            counted_recv(got, src);\n            tensor_copy(x, got);",
                          "reduce + broadcast: every rank's result")


if __name__ == "__main__":
    unittest.main()
