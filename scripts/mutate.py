#!/usr/bin/env python3
"""make mutate: plant bugs one at a time and check that the tests notice.

Each mutant below changes one small thing in runtime/, lectures/ or viewer/
(a sign, an index, a forgotten check) the way a real slip would. The script
copies the working tree to a temporary folder, builds it once there, and
for each mutant: applies it, rebuilds, runs the tests that should notice,
and puts the line back. A mutant is *noticed* when one of those tests fails
(or times out, or the build refuses it); it *survives* when all pass.

    python3 scripts/mutate.py              every mutant
    python3 scripts/mutate.py -k adamw     those whose name contains "adamw"
    python3 scripts/mutate.py --list       the mutants, without running them
    python3 scripts/mutate.py --check      each mutant's text is found once

Prints a line per mutant and the score; the report is also written to
build/mutate-report.txt. Survivors that
are accepted are listed, with the reason, in docs/testing.md.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = "build-mutate"

# The tests each kind of mutant should trip. Commands run in the copy's root.
C_TENSOR = ["%s/tests/tensor/test_tensor" % BUILD]
C_MLP = ["%s/tests/lectures/test_mlp" % BUILD]
C_COMM = ["%s/tests/comm/test_comm" % BUILD]
C_COMM_STATS = ["%s/tests/comm/test_comm_stats" % BUILD]
C_COMM_STAGED = ["%s/tests/comm/test_comm_staged" % BUILD]
C_TRACE = ["%s/tests/trace/test_trace" % BUILD]
C_GPU_COUNT = ["%s/tests/tensor/test_gpu_count" % BUILD]
C_RANDOM = ["%s/tests/tensor/test_random" % BUILD]
C_NCCL_EMU = ["%s/tests/comm/test_nccl_emu" % BUILD]
PY = "/usr/bin/python3"
# A planted deadlock costs the suite's LECTERN_TIMEOUT (60 s) per case it
# hangs: one test, stopped at its first failure.
NCCL_EMU_RING = [PY, "tests/comm/test_nccl_emu.py", "-f", "EmulatedP2P.test_ring_steps"]
NCCL_EMU_SENDRECV = [PY, "tests/comm/test_nccl_emu.py", "-f", "EmulatedP2P.test_sendrecv_ring"]
FOUNDATION = [PY, "tests/trace/test_foundation.py"]
SPAWN = [PY, "tests/ranks/test_spawn.py"]
MISUSE_OPTIONS = [PY, "tests/system/test_misuse.py", "OptionsAndReturns"]
MISUSE_COLLECTIVES = [PY, "tests/system/test_misuse.py", "CollectiveMisuse"]
COMM_CHECKS = [PY, "tests/comm/test_comm_checks.py"]
SPAWN_EXPECT = [PY, "tests/ranks/test_spawn_expect.py"]
LECTURE_08 = [PY, "tests/lectures/test_lecture_08.py"]
LECTURE_COLLECTIVES = [PY, "tests/lectures/test_lecture_collectives.py"]
LECTURE_DDP = [PY, "tests/lectures/test_lecture_ddp.py", "LectureDDP"]   # not the committed trace: any edit makes it stale
LECTURE_GPU = [PY, "tests/lectures/test_lecture_gpu.py"]
VIEWER = ["bash", "tests/viewer/run.sh"]
CHECKS = [PY, "tests/trace/test_checks.py"]
LEAKS = [PY, "tests/tensor/test_leaks.py"]
HOMEWORK = [PY, "tests/lectures/test_homework.py"]
HOMEWORK_SCALING = [PY, "tests/lectures/test_homework_scaling.py"]
SLURM = [PY, "tests/system/test_slurm.py"]
GROUPS = [PY, "tests/comm/test_groups.py"]
DTYPE_PATHS = [PY, "tests/comm/test_dtype_paths.py", "-f", "EmulatedNccl16.test_2_ranks", "EmulatedNccl16.test_3_ranks"]


def m(name, path, find, replace, *tests):
    return {"name": name, "path": path, "find": find, "replace": replace, "tests": list(tests)}


MUTANTS = [
    # ---- NCCL: the backend's ordering (comm_nccl.c, run on the emulator) and the emulator's rules ----
    m("nccl-p2p-on-the-collectives-stream", "runtime/comm/comm_nccl.c",
      "    lane *l = is_send ? &w->to[peer] : &w->from[peer];\n    begin(l);\n"
      "    if (is_send) NCCL_TRY(api->send(buf, count, dt(), 1, l->comm, l->stream));\n"
      "    else NCCL_TRY(api->recv((float *)buf, count, dt(), 0, l->comm, l->stream));",
      "    lane *l = &w->world;\n    begin(l);\n"
      "    if (is_send) NCCL_TRY(api->send(buf, count, dt(), peer, l->comm, l->stream));\n"
      "    else NCCL_TRY(api->recv((float *)buf, count, dt(), peer, l->comm, l->stream));", NCCL_EMU_RING),
    m("nccl-sendrecv-waits-for-its-send-first", "runtime/comm/comm_nccl.c",
      "    request *s = p2p(1, send, send_count, dst);\n    request *r = p2p(0, recv, recv_count, src);\n"
      "    complete(s, lx_calls[LX_SENDRECV].name);\n",
      "    request *s = p2p(1, send, send_count, dst);\n    complete(s, lx_calls[LX_SENDRECV].name);\n"
      "    request *r = p2p(0, recv, recv_count, src);\n", NCCL_EMU_SENDRECV),
    # ---- NCCL on bf16 and fp16 (run on the emulator) ----
    m("nccl-16-bit-pieces-counted-in-floats", "runtime/comm/comm_nccl.c",
      "return (const char *)base + index * count * dtype_size(dt());",
      "return (const char *)base + index * count * sizeof(float);", DTYPE_PATHS),
    m("nccl-emulator-16-bit-as-fp32", "runtime/comm/nccl_emu.c", "MPI_Datatype type = lx_mpi_type_as(o->dt);",
      "MPI_Datatype type = MPI_FLOAT;", DTYPE_PATHS),
    m("nccl-emulator-avg-scalar-unrounded", "runtime/comm/nccl_emu.c",
      "    lx_dtype_widen(o->dt, one_over, &scalar, 1, 1.0);\n", "", DTYPE_PATHS),
    m("nccl-emulator-buffers-sends", "runtime/comm/nccl_emu.c", "case SEND: return MPI_Issend(",
      "case SEND: return MPI_Isend(", C_NCCL_EMU),
    m("nccl-emulator-runs-a-communicator-out-of-order", "runtime/comm/nccl_emu.c",
      "        if (g->comms[i]->ended != g->turns[i]) return 0;", "", C_NCCL_EMU),
    m("nccl-emulator-ignores-groups", "runtime/comm/nccl_emu.c",
      "    if (group_depth++ == 0) open_group = new_group();\n    return LX_NCCL_OK;\n}\n\n"
      "static int emu_group_end(void) {\n    if (group_depth == 0) return LX_NCCL_INVALID_USAGE;",
      "    return LX_NCCL_OK;\n}\n\nstatic int emu_group_end(void) {\n    if (group_depth == 0) return LX_NCCL_OK;",
      C_NCCL_EMU),
    # ---- ranks that share a GPU: the staging pipeline and the choice ----
    m("staged-pieces-forget-chunk-offset", "runtime/comm/comm_staged.c",
      "p->in + (size_t)r * p->count + lo, n);", "p->in + (size_t)r * p->count, n);", C_COMM_STAGED),
    m("staged-async-average-not-divided", "runtime/comm/comm_staged.c",
      "    if (r->op == DIST_AVG) lx_mpi_average(r->host_out, r->average_count, DIST_AVG, r->size);\n", "", C_COMM_STAGED),
    m("staged-last-chunk-short-by-one", "runtime/comm/comm_staged.c",
      "(total - lo < p->clen ? total - lo : p->clen)", "(total - lo < p->clen ? total - lo - 1 : p->clen)",
      C_COMM_STAGED),
    m("choice-shares-an-exclusive-gpu", "runtime/ranks/spawn_backend.c",
      "    if (exclusive) {", "    if (0) {", C_COMM_STAGED),
    # ---- the traffic counter ----
    m("comm-stats-all-reduce-counts-once", "runtime/comm/comm_stats.c", "2 * share(count));\n    inner->all_reduce",
      "share(count));\n    inner->all_reduce", C_COMM_STATS),
    m("comm-stats-async-not-counted", "runtime/comm/comm_stats.c",
      "    if (ops->iall_reduce) counted.iall_reduce = c_iall_reduce;\n", "", C_COMM_STATS),
    m("comm-stats-all-gather-counts-the-piece", "runtime/comm/comm_stats.c",
      "share(count * (size_t)lx_current_size()));\n    inner->all_gather", "share(count));\n    inner->all_gather",
      C_COMM_STATS),
    m("comm-stats-isend-wait-not-counted", "runtime/comm/comm_stats.c",
      "keep_p2p(inner->isend(buf, count, peer), DIST_CALL_SEND)", "inner->isend(buf, count, peer)", C_COMM_STATS),
    # ---- homework_scaling's method checks ----
    m("homework-scaling-ring-wait-at-once-allowed", "lectures/homework_scaling.c",
      "else if (!last && (e->sends_open < 1 || e->recvs_open < 1))", "else if (0)", HOMEWORK_SCALING),
    m("homework-scaling-ring-issued-after-compute-allowed", "lectures/homework_scaling.c",
      "if (!last && (e->sent < want || e->asked < want))", "if (0)", HOMEWORK_SCALING),
    m("homework-scaling-sp-counts-only-the-all-gather", "lectures/homework_scaling.c",
      'check_named(two && sizes, "exercise 1', 'check_named(d.calls[DIST_CALL_ALL_GATHER] == 1, "exercise 1',
      HOMEWORK_SCALING),
    m("homework-scaling-moe-payload-bytes-unchecked", "lectures/homework_scaling.c",
      "check_named(two && d.nominal_sent[DIST_CALL_ALL_TO_ALL] == want_bytes,", "check_named(two,", HOMEWORK_SCALING),
    m("ddp-buckets-all-reduce-every-micro-batch", "lectures/lecture_08.c",
      "            int sync = k == k_micro - 1;", "            int sync = 1;", LECTURE_08),
    m("lecture08-work-not-divided-goes-on", "lectures/lecture_08.c",
      "    if (world_size > 0 && n % world_size == 0) return;", "    return;", LECTURE_08),
    m("lecture08-overlap-speed-up-inverted", "lectures/lib/buckets.c",
      "v[t] = ms[t][AFTER_BACKWARD] / ms[t][DURING_BACKWARD];", "v[t] = ms[t][DURING_BACKWARD] / ms[t][AFTER_BACKWARD];",
      LECTURE_08),
    m("megatron-skips-forward-all-reduce", "lectures/lecture_08.c",
      "        dist_all_reduce(pre[i + 1], DIST_SUM);               /* x A B, whole */", "", LECTURE_08),
    m("zero3-sums-gradients-instead-of-averaging", "lectures/lecture_08.c",
      "dist_reduce_scatter(grad_piece[i], grad, DIST_AVG);", "dist_reduce_scatter(grad_piece[i], grad, DIST_SUM);",
      LECTURE_08),
    m("trace-forgets-library-sources", "runtime/trace/trace.c",
      "    lx_lecture_sources(embed_file, files);", "", LECTURE_08),
    # ---- the authoring API and the trace ----
    m("image-allows-climbing-out-of-assets", "runtime/trace/note.c",
      'strncmp(src, "assets/", 7) != 0 || strstr(src, "..")', 'strncmp(src, "assets/", 7) != 0', FOUNDATION),
    m("image-width-up-to-2", "runtime/trace/note.c", "width <= 1.0", "width <= 2.0", FOUNDATION),
    m("note-system-returns-raw-wait-status", "runtime/trace/note.c", "    return status;\n}", "    return raw;\n}",
      MISUSE_OPTIONS),
    m("note-system-ignores-command-not-found", "runtime/trace/note.c", "if (status == 127)", "if (status == 12700)",
      FOUNDATION),
    m("ansi-escape-keeps-final-byte", "runtime/trace/note.c", "            if (*p) p++;\n        } else if (*p == ']')",
      "        } else if (*p == ']')", FOUNDATION),
    m("markdown-lets-raw-html-through", "runtime/trace/markdown.c", "MD_DIALECT_GITHUB | MD_FLAG_NOHTML",
      "MD_DIALECT_GITHUB", C_TRACE, FOUNDATION),
    m("good-run-keeps-stale-failure", "runtime/trace/trace.c", "    if (rc == 0 && !failed) {",
      "    if (rc == 0 && failed) {", FOUNDATION),
    m("failed-run-overwrites-good-trace", "runtime/trace/trace.c",
      'lx_fmt("%s/%s%s.%s", out_dir ? out_dir : ".", lx_lecture_name(), failed ? ".failed" : "", ext)',
      'lx_fmt("%s/%s%s.%s", out_dir ? out_dir : ".", lx_lecture_name(), "", ext)', FOUNDATION),
    m("stack-lines-off-by-one", "runtime/trace/stack.c", "lookup(pc == exact_pc ? pc : pc - 1)", "lookup(pc)",
      FOUNDATION),
    m("quiet-ignored", "runtime/lecture/main.c", "            quiet = 1;", "            quiet = 0;", MISUSE_OPTIONS),
    m("gpu-count-not-cached", "runtime/tensor/device.c", "    if (count < 0) {", "    if (1) {", C_GPU_COUNT),
    # ---- checks, tensor tracking ----
    m("check-close-tolerance-ignores-expected", "runtime/tensor/tensor_check.c", "ok = d <= atol + rtol * fabs(y);",
      "ok = d <= atol + rtol;", CHECKS),
    m("failed-check-does-not-fail-the-run", "runtime/trace/check.c", "            failed_count++;\n            lx_mark_failed();",
      "            failed_count++;", CHECKS, HOMEWORK),
    m("check-close-nan-matches", "runtime/tensor/tensor_check.c", "ok = !isnan(x) && !isnan(y) && x == y;", "ok = 1;", CHECKS),
    m("double-free-not-noticed", "runtime/tensor/tensor_track.c", "    rec *r = (rec *)t;\n    if (r->magic == MAGIC_FREED) {",
      "    rec *r = (rec *)t;\n    if (0) {", LEAKS),
    m("leaks-not-reported", "runtime/tensor/tensor_track.c", "    if (total == 0) {", "    if (1) {", LEAKS),
    # ---- tensors ----
    m("max-abs-diff-skips-nan", "runtime/tensor/tensor.c", "        if (isnan(d)) {\n            worst = NAN;\n            break;\n        }\n",
      "", C_TENSOR),
    m("add-scalar-subtracts", "runtime/tensor/tensor.c", "        t->data[i] += s;", "        t->data[i] -= s;", C_TENSOR),
    m("scale-flips-sign", "runtime/tensor/tensor.c", "cblas_sscal(n, s, t->data, 1)", "cblas_sscal(n, -s, t->data, 1)",
      C_TENSOR),
    m("matmul-transposes-a-for-b", "runtime/tensor/tensor.c", "cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans",
      "cblas_sgemm(CblasRowMajor, trans_b ? CblasTrans", C_TENSOR, C_MLP),
    m("gelu-tanh-form-on-logistic", "runtime/tensor/tensor.c", "        y->data[i] = v * s;",
      "        y->data[i] = 0.5f * v * (1.0f + s);", C_TENSOR, C_MLP),
    m("gelu-backward-sign", "runtime/tensor/tensor.c", "(s + 2.0f * v * s * (1.0f - s) * du)",
      "(s + 2.0f * v * s * (1.0f + s) * du)", C_TENSOR, C_MLP),
    m("mse-backward-half-scale", "runtime/tensor/tensor.c", "scale_(dx, (float)(2.0 / (double)x->numel));",
      "scale_(dx, (float)(1.0 / (double)x->numel));", C_MLP),
    m("mse-loss-n-minus-1", "runtime/tensor/tensor.c", "    return (float)(sum / n);", "    return (float)(sum / (n - 1));",
      C_TENSOR, C_MLP),
    m("adamw-no-bias-correction", "runtime/tensor/tensor.c", "(float)(opt->lr / (1.0 - pow(opt->beta1, opt->step)))",
      "(float)(opt->lr)", C_TENSOR),
    m("adamw-no-weight-decay", "runtime/tensor/tensor.c", "(float)(1.0 - (double)opt->lr * opt->weight_decay)", "1.0f",
      C_TENSOR),
    m("row-slice-offset-in-elements", "runtime/tensor/tensor.c", "v->raw = v->numel ? (char *)t->raw + start * row * (int64_t)dtype_size(t->dt) : NULL",
      "v->raw = v->numel ? (char *)t->raw + start * (int64_t)dtype_size(t->dt) : NULL", C_TENSOR),
    m("col-slice-from-column-0", "runtime/tensor/tensor.c",
      "out->raw, end - start, element(t, start), t->shape[1]",
      "out->raw, end - start, element(t, 0), t->shape[1]", C_TENSOR),
    m("randn-restarts-stream", "runtime/tensor/tensor.c", "    rng_drawn += (uint64_t)t->numel;", "", C_TENSOR),
    m("philox-nine-rounds", "runtime/tensor/philox.h", "for (int round = 0; round < 10; round++)",
      "for (int round = 0; round < 9; round++)", C_RANDOM),
    m("philox-key-not-bumped", "runtime/tensor/philox.h", "            key[1] += LX_PHILOX_W1;\n", "", C_RANDOM),
    m("matmul-accepts-mismatched-shapes", "runtime/tensor/tensor.c", "    if (a->shape[1] != b->shape[0])",
      "    if (a->shape[1] < 0)", C_TENSOR),
    # ---- collectives ----
    m("avg-divides-by-two", "runtime/comm/comm_mpi.c", "x[i] /= (float)world_size;", "x[i] /= 2.0f;", C_COMM),
    m("min-is-max", "runtime/comm/comm_mpi.c", "    case DIST_MIN: return MPI_MIN;", "    case DIST_MIN: return MPI_MAX;",
      C_COMM),
    m("reduce-always-to-rank-0", "runtime/comm/comm_mpi.c",
      "MPI_Reduce(buf, NULL, (int)count, mpi_type(), mpi_op(op), root, mpi_comm)",
      "MPI_Reduce(buf, NULL, (int)count, mpi_type(), mpi_op(op), 0, mpi_comm)", C_COMM),
    m("scatter-from-rank-0", "runtime/comm/comm_mpi.c", "MPI_Scatter(in, (int)count, mpi_type(), out, (int)count, mpi_type(), root, mpi_comm)",
      "MPI_Scatter(in, (int)count, mpi_type(), out, (int)count, mpi_type(), 0, mpi_comm)", C_COMM),
    m("send-to-self-allowed", "runtime/comm/comm_calls.c", "if (!allow_self && peer == lx_the_world.rank)", "if (0 && peer == lx_the_world.rank)",
      MISUSE_COLLECTIVES),
    m("reduce-scatter-size-unchecked", "runtime/comm/comm_calls.c", "    if (in_n != out_n * (size_t)p)\n        lx_fatal(\"%s(): input has",
      "    if (in_n < out_n)\n        lx_fatal(\"%s(): input has", MISUSE_COLLECTIVES),
    m("gather-output-checked-on-rank-0", "runtime/comm/comm.c", "    float *out = NULL;\n    if (lx_the_world.rank == dst) {",
      "    float *out = NULL;\n    if (lx_the_world.rank == 0) {", MISUSE_COLLECTIVES, C_COMM),
    m("async-avg-not-divided", "runtime/comm/comm_mpi.c", "    if (r->average) lx_mpi_average_as(r->dt, r->average, r->count, DIST_AVG, r->size);\n",
      "", C_COMM),
    m("async-all-reduce-is-a-broadcast", "runtime/comm/comm_mpi.c",
      "MPI_Iallreduce(MPI_IN_PLACE, r->out, (int)r->count, r->type, r->op, r->comm, &r->req)",
      "MPI_Ibcast(r->out, (int)r->count, r->type, 0, r->comm, &r->req)", C_COMM),
    m("sendrecv-receives-from-dst", "runtime/comm/comm_mpi.c", "(int)recv_count, mpi_type(), src,",
      "(int)recv_count, mpi_type(), dst,", C_COMM),
    # ---- process groups and all-to-all ----
    m("group-all-reduce-on-the-world", "runtime/comm/comm_groups.c",
      "    lx_use_group(g);\n    lx_ops->all_reduce(t->raw, n, op);", "    lx_ops->all_reduce(t->raw, n, op);", GROUPS),
    m("group-rank-out-of-list-order", "runtime/comm/comm_groups.c",
      "MPI_Comm_split(lx_the_world.comm, color, g->rank, &g->comm)",
      "MPI_Comm_split(lx_the_world.comm, color, me, &g->comm)", GROUPS),
    m("all-to-all-pieces-not-moved", "runtime/comm/comm_mpi.c",
      "MPI_Alltoall(in, (int)count, mpi_type(), out, (int)count, mpi_type(), mpi_comm)",
      "MPI_Allgather(in, (int)count, mpi_type(), out, (int)count, mpi_type(), mpi_comm)", GROUPS),
    m("group-lists-not-compared", "runtime/comm/comm_groups.c", "            if (same_list(mine, theirs)) continue;",
      "            continue;", GROUPS),
    m("group-timed-region-not-compared", "runtime/comm/comm_groups.c",
      "    if (lx_ops && lx_agree_timed_end()) settle_groups(groups);", "    if (lx_ops) lx_agree_timed_end();", GROUPS),
    m("group-freed-in-region-not-compared", "runtime/comm/comm_groups.c",
      "    lx_agree_group_settle(g); /* freed inside", "    if (0) lx_agree_group_settle(g); /* freed inside",
      GROUPS),
    m("group-agreed-call-not-remembered", "runtime/comm/comm_agree.c",
      "        remember(s->calls, &s->n, a);\n        return;", "        return;", GROUPS),
    # ---- agreement checks, forgotten requests, stragglers ----
    m("agreement-check-skipped", "runtime/comm/comm_agree.c",
      "        if (v[i] != -v[i + 5]) return 0;", "        if (0) return 0;",
      COMM_CHECKS),
    m("agreement-ignores-count", "runtime/comm/comm_agree.c",
      "        if (v[i] != -v[i + 5]) return 0;",
      "        if (i != 1 && v[i] != -v[i + 5]) return 0; /* the count (v[1]) left out */", COMM_CHECKS),
    m("agreement-ignores-root", "runtime/comm/comm_agree.c",
      "        if (v[i] != -v[i + 5]) return 0;",
      "        if (i != 3 && v[i] != -v[i + 5]) return 0; /* the root (v[3]) left out */", COMM_CHECKS),
    m("mismatched-sender-gets-no-step", "runtime/comm/comm_agree.c",
      "        lx_rank_error_for(d->src, d->desc.frames, located);\n", "", COMM_CHECKS),
    m("wrapped-spawn-header-sticks-whole", "viewer/source.js",
      "      head.parentNode.classList.toggle('tall-head', tall);\n", "", VIEWER),
    m("sticky-header-padding-ignored", "viewer/source.js",
      "sticky = (parseFloat(getComputedStyle(box).paddingTop) || 0) + stuck", "sticky = stuck", VIEWER),
    m("expected-error-shown-as-failure", "viewer/render.js", "        if (r.expected === true)\n",
      "        if (false)\n", VIEWER),
    m("spawn-results-not-cleared", "runtime/ranks/spawn.c", "    lx_spawn_results_clear(world_size);\n", "",
      [PY, "tests/ranks/test_spawn_result.py"]),
    m("send-recv-size-unchecked", "runtime/comm/comm_agree.c", "    if (d->desc.count != count || d->desc.dt != lx_current_dtype()) {",
      "    if (d->desc.dt != lx_current_dtype()) {",
      COMM_CHECKS),
    m("forgotten-request-no-error-step", "runtime/comm/comm_requests.c",
      "        lx_emit_frames(req->site.frames, req->site.n, lx_rendering_error(msg));\n", "", COMM_CHECKS),
    m("straggler-not-detected", "runtime/ranks/spawn_watch.c",
      "        if (!run->done[q] || (peer >= 0 && q != peer)) continue;\n        int one_host",
      "        if (!run->done[q] || peer < 0 || q != peer) continue;\n        int one_host", COMM_CHECKS),
    m("working-rank-called-deadlocked", "runtime/ranks/spawn_watch.c", "        if (working) run->last_progress = now;\n", "",
      COMM_CHECKS),
    m("backend-error-not-traced", "runtime/trace/backend_error.c", "    if (!dying && traced) {", "    if (0) {", COMM_CHECKS),
    m("busy-tensor-change-allowed", "runtime/tensor/tensor_track.c", "    if (r->busy > 0) busy_error(r, op, \"changes\");",
      "    (void)r;", COMM_CHECKS + ["-k", "before_wait"]),
    m("isend-hash-not-compared", "runtime/comm/comm_requests.c", "        if (req->hashed[i] && hash_values(req->uses[i]) != req->sum[i]) {",
      "        if (0) {", COMM_CHECKS + ["-k", "through_data"]),
    # ---- spawn and the pool of ranks ----
    m("rank-steps-stamped-rank-0", "runtime/ranks/spawn_relay.c", '    lx_json_set(step, "rank", cJSON_CreateNumber(rank));',
      '    lx_json_set(step, "rank", cJSON_CreateNumber(0));', SPAWN),
    m("rank-steps-newest-first", "runtime/ranks/spawn_relay.c", "if (x->time != y->time) return x->time < y->time ? -1 : 1;",
      "if (x->time != y->time) return x->time > y->time ? -1 : 1;", SPAWN),
    m("globals-not-restored", "runtime/ranks/spawn_rank.c", "    lx_globals_restore();\n    lx_tensor_reset_rng();",
      "    lx_tensor_reset_rng();", SPAWN),
    m("rng-not-reset-between-spawns", "runtime/ranks/spawn_rank.c", "    lx_globals_restore();\n    lx_tensor_reset_rng();",
      "    lx_globals_restore();", SPAWN),
    m("expected-error-fails-the-run", "runtime/ranks/spawn_relay.c", "        else lx_mark_failed(); /* lx_error in a rank",
      "        lx_mark_failed(); /* lx_error in a rank", SPAWN_EXPECT),
    m("expected-error-not-marked", "runtime/ranks/spawn_relay.c", "    if (run->expect_failure) {\n        mark_expected(step);",
      "    if (run->expect_failure) {\n        (void)mark_expected;", SPAWN_EXPECT),
    m("unexpected-success-not-an-error", "runtime/ranks/spawn.c", "    if (!failure) {\n        /* The lesson did not happen",
      "    if (0) {\n        /* The lesson did not happen", SPAWN_EXPECT),
    m("forced-nccl-not-checked", "runtime/ranks/spawn_backend.c", "            if (gpus < world_size)\n",
      "            if (0)\n", SPAWN),
    m("lecture-crash-exits-by-signal", "runtime/ranks/crash.c", "        LX_COVERAGE_FLUSH();\n        _exit(1);",
      "        LX_COVERAGE_FLUSH();", FOUNDATION),
    # ---- the lecture's model (lectures/lib/mlp.c) ----
    m("accumulation-overwrites", "lectures/lib/mlp.c", "matmul_into(dw, x, dh, 1, 0, 1.0f, beta);",
      "matmul_into(dw, x, dh, 1, 0, 1.0f, 0.0f);", C_MLP),
    m("input-gradient-not-transposed", "lectures/lib/mlp.c", "matmul_into(*dx, dh, w, 0, 1, 1.0f, 0.0f);",
      "matmul_into(*dx, dh, w, 0, 0, 1.0f, 0.0f);", C_MLP),
    m("init-scaled-by-width", "lectures/lib/mlp.c", "scale_(w, 1.0f / sqrtf((float)c->width));",
      "scale_(w, 1.0f / (float)c->width);", LECTURE_08),
    m("gradient-tolerance-100x", "lectures/lib/mlp.c", "return 2.0 * (c->layers + 1) * longest_sum(c)",
      "return 200.0 * (c->layers + 1) * longest_sum(c)", LECTURE_08),
    # ---- lecture_08's strategies ----
    m("ddp-sums-instead-of-averaging", "lectures/lecture_08.c",
      "dist_all_reduce(grads[i], DIST_AVG);", "dist_all_reduce(grads[i], DIST_SUM);", LECTURE_08),
    m("ddp-no-all-reduce", "lectures/lecture_08.c",
      "            dist_all_reduce(grads[i], DIST_AVG);",
      "            (void)grads[i];", LECTURE_08),
    m("zero3-skips-layer-0", "lectures/lecture_08.c", "        for (int i = c->layers - 1; i >= 0; i--) {\n            tensor *w = i > 0",
      "        for (int i = c->layers - 1; i > 0; i--) {\n            tensor *w = i > 0", LECTURE_08),
    m("tp-partial-input-gradients-not-summed", "lectures/lecture_08.c",
      "        if (dx) dist_all_reduce(dx, DIST_SUM); /* partial input gradients add up */", "", LECTURE_08),
    m("pp-micro-batch-gradient-not-scaled", "lectures/lecture_08/pipeline.c", "        scale_(dy, 1.0f / s->m); /* d(mean over micro-batches) */",
      "", LECTURE_08),
    # ---- lecture_collectives' hand-built all-reduces and its model ----
    m("ring-overwrites-the-partial-sum", "lectures/lecture_collectives.c",
      "    counted_sendrecv(out, (rank + 1) % n, got, (rank - 1 + n) % n);\n    add_(in, got);",
      "    counted_sendrecv(out, (rank + 1) % n, got, (rank - 1 + n) % n);\n    tensor_copy(in, got);",
      LECTURE_COLLECTIVES),
    m("tree-skips-a-child", "lectures/lecture_collectives.c", "    for (mask = 1; mask < n; mask <<= 1) {",
      "    for (mask = 2; mask < n; mask <<= 1) {", LECTURE_COLLECTIVES),
    m("sendrecv-steps-not-counted", "lectures/lecture_collectives.c",
      "    dist_sendrecv(send, dst, recv, src);\n    mine.steps++;\n",
      "    dist_sendrecv(send, dst, recv, src);\n", LECTURE_COLLECTIVES),
    m("crossover-forgets-the-tree-steps", "lectures/lecture_collectives.c",
      "    return alpha * (n - 1 - l) / (beta * (l - (double)(n - 1) / n));",
      "    return alpha * (n - 1) / (beta * (l - (double)(n - 1) / n));", LECTURE_COLLECTIVES),
    # ---- lecture_ddp ----
    m("ddp-lecture-averaging-sums", "lectures/lecture_ddp.c",
      "for (int i = 0; i < layers; i++)\n        dist_all_reduce(ts[i], DIST_AVG);",
      "for (int i = 0; i < layers; i++)\n        dist_all_reduce(ts[i], DIST_SUM);", LECTURE_DDP),
    m("ddp-lecture-buckets-in-forward-order", "lectures/lecture_ddp.c",
      "{ return m->cfg.layers - 1 - layer; }", "{ return layer; }", LECTURE_DDP),
    m("ddp-lecture-no-sync-ignored", "lectures/lecture_ddp.c",
      "if (--m->pending[b] > 0 || !m->sync) return;", "if (--m->pending[b] > 0) return;", LECTURE_DDP),
    m("ddp-lecture-accumulation-not-scaled", "lectures/lecture_ddp.c",
      "    scale_(m->flat, 1.0f / MICRO_BATCHES);\n", "", LECTURE_DDP),
    m("ddp-lecture-no-broadcast", "lectures/lecture_ddp.c",
      "for (int i = 0; i < c->layers; i++)\n        dist_broadcast(m->w[i], 0);", "", LECTURE_DDP),
    m("ddp-lecture-straggler-never-sleeps", "lectures/lecture_ddp.c",
      "if (rank == STRAGGLER) sleep_ms(a->delay_ms);", "if (rank == -1) sleep_ms(a->delay_ms);", LECTURE_DDP),
    # ---- lecture_gpu ----
    m("gpu-lecture-tiled-loop-skips-last-k-tile", "lectures/lecture_gpu.c",
      "        for (int k0 = 0; k0 < n; k0 += CPU_TILE)", "        for (int k0 = 0; k0 < n - CPU_TILE; k0 += CPU_TILE)",
      LECTURE_GPU),
    m("gpu-lecture-matmul-bytes-count-one-matrix-less", "lectures/lecture_gpu.c",
      "static double mm_bytes(double n) { return 3 * 4 * n * n; }",
      "static double mm_bytes(double n) { return 2 * 4 * n * n; }", LECTURE_GPU),
    m("gpu-lecture-roof-ignores-bandwidth", "lectures/lecture_gpu.c",
      "    return mem < peak ? mem : peak;", "    return peak;", LECTURE_GPU),
    m("gpu-lecture-fsdp-sums-gradients", "lectures/lecture_gpu.c",
      "dist_reduce_scatter(gs[i], dw, DIST_AVG);", "dist_reduce_scatter(gs[i], dw, DIST_SUM);", LECTURE_GPU),
    m("gpu-lecture-fsdp-gathers-once", "lectures/lecture_gpu.c",
      "    for (int i = c->layers - 1; i >= 0; i--) {\n        tensor *full = gather_layer(c, ws[i]);",
      "    for (int i = c->layers - 1; i >= 0; i--) {\n        tensor *full = empty(c->width, c->width, x->device);",
      LECTURE_GPU),
    # ---- the viewer (each runs the browser tests that should notice) ----
    m("viewer-note-html-unsanitized", "viewer/safe.js", "    return p.sanitize(String(s));", "    return String(s);",
      VIEWER + ["test_hostile.TestHostileTrace"]),
    m("viewer-url-keeps-any-scheme", "viewer/safe.js", "    if (SCHEME.test(v)) return null;\n", "",
      VIEWER + ["test_hostile.TestHostileTrace"]),
    m("viewer-esc-leaves-quotes", "viewer/safe.js", "replace(/[&<>\"']/g", "replace(/[&<>]/g",
      VIEWER + ["test_hostile.TestHostileTrace"]),
    m("viewer-any-version-accepted", "viewer/trace.js", "if (t.version !== 1)", "if (false)",
      VIEWER + ["test_viewer.TestViewer.test_broken_traces_explain_themselves"]),
    m("viewer-step-out-ignores-call-site", "viewer/model.js",
      "      if (d > 0 && a[d - 1].line !== b[d - 1].line) break;\n", "",
      VIEWER + ["test_lectures.TestNavigation.test_step_out_and_over_land_outside_the_call",
      "test_viewer.TestViewer.test_step_over_and_out"]),
    m("viewer-statement-ends-inside-parentheses", "viewer/model.js",
      "else if (depth <= 0 && (c === 59", "else if ((c === 59",
      VIEWER + ["test_lectures.TestNotesAndSpawns.test_multiline_note_replaces_its_statement"]),
    m("viewer-history-never-pushes", "viewer/nav.js",
      "var newEntry = push && histStep >= 0 && histStep !== S.cur;", "var newEntry = false;",
      VIEWER + ["test_lectures.TestNavigation.test_history_back_and_forward"]),
    m("viewer-as-it-happened-shows-the-future", "viewer/base.js",
      "return L.visible(i) && (!L.S.live || i <= L.S.cur);", "return L.visible(i);",
      VIEWER + ["test_lectures.TestNotesAndSpawns.test_as_it_happened"]),
    m("viewer-figures-shrink-below-natural-width", "viewer/render.js",
      "      if (w) box.style.minWidth = 'min(100%, ' + w + 'px)';\n", "",
      VIEWER + ["test_lectures.TestMedia.test_figures_and_links"]),
    # ---- inside a Slurm allocation ----
    m("slurm-pool-not-capped-at-the-tasks", "runtime/ranks/pool.c",
      "    if (lx_pool_slurm(&slurm) && slurm.tasks > 0 && size > slurm.tasks)\n",
      "    if (0 && lx_pool_slurm(&slurm) && slurm.tasks > 0 && size > slurm.tasks)\n", SLURM),
    m("slurm-spawn-larger-than-the-allocation-let-through", "runtime/ranks/spawn.c",
      "    if (lx_pool_slurm(&slurm) && slurm.tasks > 0 && world_size > slurm.tasks)\n",
      "    if (0 && lx_pool_slurm(&slurm) && slurm.tasks > 0 && world_size > slurm.tasks)\n", SLURM),
    m("slurm-repeated-task-counts-counted-once", "runtime/ranks/pool.c", "        total += n * times;",
      "        total += n;", SLURM),
]


def copy_tree(dest):
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        src = os.path.join(ROOT.encode(), f)
        if not os.path.isfile(src):
            continue   # a deleted file not yet committed
        dst = os.path.join(dest.encode(), f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)
    if os.path.isdir(os.path.join(ROOT, "node_modules")):
        os.symlink(os.path.join(ROOT, "node_modules"), os.path.join(dest, "node_modules"))


def build(tree):
    p = subprocess.run(["make", "--no-print-directory", "BUILD=" + BUILD, "all"], cwd=tree, capture_output=True,
                       text=True)
    return p.returncode == 0, p.stdout + p.stderr


def run_tests(tree, tests, timeout):
    env = dict(os.environ, LECTERN_BUILD=BUILD, LECTERN_OTHER_KERNELS="0", LECTERN_TIMEOUT="30",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", LECTERN_ROOT_DIR=tree)
    for cmd in tests:
        try:
            p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timed out: " + " ".join(cmd)
        if p.returncode != 0:
            out = p.stdout + p.stderr
            first = re.search(r"^(?:FAIL|ERROR): (\w+)|^\[  FAILED  \] (\w+)", out, re.M)
            name = " ".join(os.path.basename(c) for c in cmd)
            return "failed: %s%s" % (name, " (%s)" % (first.group(1) or first.group(2)) if first else "")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", help="only mutants whose name contains this (several: comma-separated, any of them)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the copy of the tree")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per test command")
    args = ap.parse_args()
    picks = [k for k in (args.k or "").split(",") if k]
    mutants = [x for x in MUTANTS if not picks or any(k in x["name"] for k in picks)]

    problems = 0
    for x in mutants:
        with open(os.path.join(ROOT, x["path"])) as f:
            n = f.read().count(x["find"])
        if n != 1:
            print("mutant %s: its text occurs %d times in %s (must be once)" % (x["name"], n, x["path"]))
            problems += 1
    if args.list:
        for x in mutants:
            print("%-45s %-28s %s" % (x["name"], x["path"], ", ".join(os.path.basename(t[-1]) for t in x["tests"])))
    if args.list or args.check or problems:
        return 1 if problems else 0

    tree = tempfile.mkdtemp(prefix="lectern-mutate-")
    print("copy of the tree: %s" % tree, flush=True)
    copy_tree(tree)
    ok, log = build(tree)
    if not ok:
        print(log[-3000:])
        print("mutate: the unchanged tree does not build")
        return 1
    for cmd in sorted({tuple(t) for x in mutants for t in x["tests"]}):
        why = run_tests(tree, [list(cmd)], args.timeout)
        if why:
            print("mutate: the unchanged tree fails a test (%s); fix that first" % why)
            return 1
    print("the unchanged tree builds and passes the tests; planting %d bugs" % len(mutants), flush=True)

    rows, noticed = [], 0
    for i, x in enumerate(mutants, 1):
        path = os.path.join(tree, x["path"])
        with open(path) as f:
            original = f.read()
        t0 = time.monotonic()
        try:
            with open(path, "w") as f:
                f.write(original.replace(x["find"], x["replace"], 1))
            ok, log = build(tree)
            why = "the build refused it" if not ok else run_tests(tree, x["tests"], args.timeout)
        finally:
            with open(path, "w") as f:
                f.write(original)
            os.utime(path)   # newer than the mutant's objects: rebuilt next time
        noticed += why is not None
        verdict = "noticed" if why else "SURVIVED"
        rows.append((x["name"], verdict, why or "every test passed"))
        print("[%2d/%d] %-45s %-9s %5.0fs  %s" % (i, len(mutants), x["name"], verdict, time.monotonic() - t0,
                                                why or ""), flush=True)
    build(tree)

    score = "%d of %d mutants noticed (%.0f%%)" % (noticed, len(mutants), 100.0 * noticed / len(mutants))
    os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
    report = os.path.join(ROOT, "build", "mutate-report.txt")
    with open(report, "w") as f:
        for r in rows:
            f.write("%-45s %-9s %s\n" % r)
        f.write(score + "\n")
    survivors = [r[0] for r in rows if r[1] == "SURVIVED"]
    print()
    if survivors:
        print("survived: " + ", ".join(survivors))
    print(score)
    print("report: %s" % report)
    if not args.keep:
        shutil.rmtree(tree, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
