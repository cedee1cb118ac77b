/*
 * spawn.c: spawn(), spawn_exercise() and spawn_expect_failure() in the
 * lecture (the parent). Checks the call, picks the backend and says why in a
 * note (spawn_backend.c), makes sure the pool of ranks is up (pool.c), hands
 * pool ranks 0..world_size-1 the spawn description and the args (wire.c),
 * then waits until every rank's function has returned: the ranks' messages
 * go into the trace (spawn_relay.c) while the board is watched for what
 * must stop the spawn (spawn_watch.c). A failed spawn ends the lecture with
 * status 1 and its trace written, unless it was expected to fail.
 * docs/design.md ("The design: a pool started once by mpirun") says why.
 */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace/trace.h"
#include "ranks/ranks.h"
#include "ranks/spawn_run.h"

static int used_mpi, used_nccl;

volatile int lx_spawn_waiting, lx_spawn_interrupt;

void lx_spawn_shutdown(void) { lx_pool_stop(); }

static double timeout_seconds(void) {
    const char *s = getenv("LECTERN_TIMEOUT");
    if (s && *s) {
        char *end;
        double t = strtod(s, &end);
        if (*end == '\0' && t > 0) return t;
        lx_fatal("LECTERN_TIMEOUT='%s' is not a positive number of seconds", s);
    }
    return 120.0;
}

/* LECTERN_NCCL_EMULATE: 1 runs a spawn forced to NCCL on the CPU emulator
 * (docs/gpu.md); unset, empty or 0 does not; anything else is an error. */
static int nccl_emulate(void) {
    const char *s = getenv("LECTERN_NCCL_EMULATE");
    if (!s || !*s || strcmp(s, "0") == 0) return 0;
    if (strcmp(s, "1") == 0) return 1;
    lx_fatal("LECTERN_NCCL_EMULATE='%s': expected 0 or 1", s);
}

/* LECTERN_SHARED_IPC is not 0: ranks sharing a GPU try the shared-GPU
 * protocol on the device (comm/shared_ipc.c), and the note says so and what
 * runs where its probe fails (a rank's step then says why). Under the test
 * hooks LECTERN_STAGE_TEST=1 and LECTERN_SHARED_IPC_CPU=1 the protocol runs
 * over shared memory on host tensors. */
static int env_switch(const char *name, int unset) {
    const char *s = getenv(name);
    if (!s || !*s) return unset;
    if (strcmp(s, "0") == 0 || strcmp(s, "1") == 0) return s[0] == '1';
    lx_fatal("%s='%s': expected 0 or 1", name, s);
}

static int note_shared_ipc(lx_backend b, char **reason) {
    int cpu = env_switch("LECTERN_SHARED_IPC_CPU", 0);
    if (!env_switch("LECTERN_SHARED_IPC", 1)) return LX_SHARED_IPC_OFF;
    char *r = NULL;
    int mode = LX_SHARED_IPC_OFF;
    if (b == LX_BACKEND_STAGED_HOST && cpu) {
        mode = LX_SHARED_IPC_SHM;
        r = lx_fmt("%s, through the shared-GPU protocol over shared memory (LECTERN_SHARED_IPC_CPU)", *reason);
    } else if (b == LX_BACKEND_SHARED || b == LX_BACKEND_SHARED_CUDA_AWARE) {
        const char *at = strstr(*reason, "collectives through ");
        if (!at) return LX_SHARED_IPC_OFF;
        mode = LX_SHARED_IPC_DEVICE;
        const char *path = at + strlen("collectives through ");
        const char *paths[] = {"Open MPI via host memory", "CUDA-aware Open MPI"};
        for (int i = 0; i < 2 && !r; i++)
            if (strncmp(path, paths[i], strlen(paths[i])) == 0)
                r = lx_fmt("%.*scollectives through CUDA IPC on the device (%s where its probe fails)%s",
                           (int)(at - *reason), *reason, paths[i], path + strlen(paths[i]));
    }
    if (!r) return LX_SHARED_IPC_OFF;
    free(*reason);
    *reason = r;
    return mode;
}

/* The backend for this spawn, from the machine's facts (spawn_backend.c). */
static lx_backend choose_backend(int world_size, char **reason, int *shared_ipc) {
    const char *hostfile = getenv("LECTERN_HOSTFILE");
    const char *stage_test = getenv("LECTERN_STAGE_TEST");
    const char *forced = getenv("LECTERN_BACKEND");
    lx_slurm slurm;
    /* Ranks may run on other machines: a hostfile, or an allocation with
     * nodes other than this one. */
    int elsewhere = (hostfile && *hostfile) || (lx_pool_slurm(&slurm) && !slurm.here_only);
    int gpus = gpu_count(), emulate = nccl_emulate();
    /* NCCL is loaded (dlopen) only where this spawn would run on it: never
     * on a machine without GPUs. One that cannot be loaded, or is too old,
     * is named: an error when forced, else the note's reason. */
    int nccl = LECTERN_NCCL;
    char why[512] = "";
    int wants = !emulate && ((forced && strcmp(forced, "nccl") == 0) || (!(forced && *forced) && gpus >= world_size));
    if (nccl && wants && !lx_ranks_comm()->nccl_usable(why, sizeof why)) {
        if (forced && *forced) lx_fatal("LECTERN_BACKEND=nccl, but %s", why);
        nccl = -1;
    }
    lx_backend b = lx_choose_backend(world_size, gpus, gpus > 0 ? lx_gpu_compute_mode() : 0, lx_gpu_held_here(), forced,
                                     nccl, elsewhere, stage_test && strcmp(stage_test, "1") == 0,
                                     lx_ranks_comm()->mpi_cuda_aware_built(), emulate, reason);
    if (nccl < 0) {
        char *r = lx_fmt("%s: %s", *reason, why);
        free(*reason);
        *reason = r;
    }
    *shared_ipc = note_shared_ipc(b, reason);
    return b;
}

/* ---- spawn() ---- */

/* `call`: "spawn" or "spawn_expect_failure", as the lecture wrote it. */
static void check_arguments(const char *call, spawn_fn fn, int world_size, const void *args, size_t args_size) {
    if (lx_in_rank()) lx_fatal("%s() inside a spawned rank: ranks cannot start ranks of their own", call);
    if (!fn) lx_fatal("%s(): the function to run is NULL", call);
    if (world_size <= 0 || world_size > LECTERN_MAX_WORLD)
        lx_fatal("%s(): world_size %d is out of range: 1 to %d ranks (LECTERN_MAX_WORLD)", call, world_size,
                 LECTERN_MAX_WORLD);
    lx_slurm slurm;
    if (lx_pool_slurm(&slurm) && slurm.tasks > 0 && world_size > slurm.tasks)
        lx_fatal("%s(): world_size %d is more than the %d task%s of Slurm job %s's allocation "
                 "(SLURM_TASKS_PER_NODE=%s on %s); ask Slurm for at least %d (salloc -n %d, sbatch -n %d) "
                 "or spawn fewer ranks",
                 call, world_size, slurm.tasks, lx_plural(slurm.tasks), slurm.job, slurm.tasks_per_node, slurm.nodes,
                 world_size, world_size, world_size);
    if (args_size > LECTERN_MAX_SPAWN_ARGS)
        lx_fatal("%s(): args of %zu bytes exceed the limit of %u bytes (LECTERN_MAX_SPAWN_ARGS); "
                 "pass sizes and let each rank make its data",
                 call, args_size, (unsigned)LECTERN_MAX_SPAWN_ARGS);
    if (!args && args_size > 0) lx_fatal("%s(): args is NULL but args_size is %zu", call, args_size);
}

static void record_backend(lx_backend backend) {
    if (lx_backend_is_nccl(backend)) used_nccl = 1;
    else used_mpi = 1;
    const char *all = used_nccl && used_mpi ? "nccl+mpi" : used_nccl ? "nccl" : "mpi";
    lx_trace_meta("backend", cJSON_CreateString(all));
}

/* Hands the spawn to pool ranks 0..world_size-1. */
static void hand_out(spawn_run *run, spawn_fn fn, const void *args, size_t args_size) {
    spawn_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.fn_offset = (int64_t)((uintptr_t)(void *)fn - (uintptr_t)(void *)&lx_spawn_child_entry);
    desc.spawn_id = run->id;
    desc.world_size = run->world_size;
    desc.backend = run->backend;
    desc.quick = lecture_quick();
    desc.quiet = lx_quiet();
    desc.expect_failure = run->expect_failure;
    desc.shared_ipc = run->shared_ipc;
    desc.clock_zero = now_seconds() - lx_elapsed();
    desc.args_size = args_size;
    snprintf(desc.lecture, sizeof desc.lecture, "%s", lx_lecture_name());
    if (!getcwd(desc.cwd, sizeof desc.cwd)) desc.cwd[0] = '\0';
    char *options = lx_options_text();
    if (strlen(options) >= sizeof desc.options)
        lx_fatal("spawn(): the lecture's options take %zu bytes, more than the %zu its ranks can be sent",
                 strlen(options), sizeof desc.options - 1);
    snprintf(desc.options, sizeof desc.options, "%s", options);
    free(options);
    char *visibility = lx_grade_visibility_text();
    if (strlen(visibility) >= sizeof desc.visibility)
        lx_fatal("spawn(): the lecture's grade_visibility prefixes take %zu bytes, more than the %zu its ranks can "
                 "be sent",
                 strlen(visibility), sizeof desc.visibility - 1);
    snprintf(desc.visibility, sizeof desc.visibility, "%s", visibility);
    free(visibility);
    for (int r = 0; r < run->world_size; r++) {
        if (run->board) lx_board_slot_reset(&run->board->slot[r]);
        if (lx_wire_send(lx_pool_fd(r), MSG_SPAWN, &desc, sizeof desc, args, args_size) != 0) {
            run->gone[r] = 1;
            run->gone_at[r] = now_seconds();
        }
    }
}

/* Where the ranks run, when that is more than one host: the spawn's
 * "hosts", rank r's at index r (the viewer's rank headers show them). */
static void record_hosts(spawn_run *run) {
    int many = 0;
    for (int r = 1; r < run->world_size; r++)
        many |= strcmp(lx_pool_host(r), lx_pool_host(0)) != 0;
    if (!many) return;
    cJSON *hosts = cJSON_AddArrayToObject(run->entry, "hosts");
    for (int r = 0; r < run->world_size; r++)
        cJSON_AddItemToArray(hosts, cJSON_CreateString(lx_pool_host(r)));
}

/* Ctrl-C (or SIGTERM) while the ranks run: where each rank is, written
 * (spawn_watch.c), then the signal raised again: crash.c adds the lecture's
 * own step and writes the trace. */
static void __attribute__((noreturn)) interrupted(spawn_run *run, int sig) {
    lx_spawn_report_interrupted(run, sig);
    lx_spawn_free_run(run);
    lx_spawn_waiting = 0;
    raise(sig);
    _exit(128 + sig); /* not reached: the handler re-raises with the default action */
}

/* Runs one spawn to its end. Returns NULL when every rank's function
 * returned, else why the spawn failed (malloc'd): the error steps are in
 * the trace by then, and the pool is stopped. `deadlock_timeout`: seconds
 * every rank may wait without progress; `exercise` and `limit`: those of
 * spawn_exercise() (NULL and 0 otherwise). */
static char *run_spawn(spawn_fn fn, int world_size, const void *args, size_t args_size, int expect_failure,
                       double deadlock_timeout, const char *exercise, double limit) {
    double timeout = deadlock_timeout;
    spawn_run *run = calloc(1, sizeof *run);
    if (!run) lx_fatal("out of memory");
    run->world_size = world_size;
    run->expect_failure = expect_failure;
    run->exercise = exercise;
    run->limit = limit;
    lx_spawn_results_clear(world_size);
    run->started = now_seconds();
    run->n_parent = lx_stack_capture(run->parent, LX_MAX_FRAMES);
    char *reason = NULL;
    run->backend = choose_backend(world_size, &reason, &run->shared_ipc);
    lx_slurm slurm;
    if (lx_pool_slurm(&slurm)) { /* where: the allocation's nodes, as mpirun places them */
        char *where = lx_fmt("%s; in Slurm job %s's allocation: %d task%s on %s (SLURM_TASKS_PER_NODE=%s), "
                             "placed by mpirun%s",
                             reason, slurm.job, slurm.tasks, lx_plural(slurm.tasks), slurm.nodes, slurm.tasks_per_node,
                             getenv("LECTERN_HOSTFILE") && *getenv("LECTERN_HOSTFILE") ? " within LECTERN_HOSTFILE"
                                                                                       : ", no hostfile");
        free(reason);
        reason = where;
    }

    /* The trace says which backend and why, before any rank speaks. */
    note("spawn: %s", reason);
    progress("spawn %d rank%s (%s)", world_size, lx_plural(world_size),
             lx_backend_is_nccl(run->backend) ? "NCCL" : "Open MPI");
    cJSON *spawns = lx_trace_spawns();
    run->id = cJSON_GetArraySize(spawns);
    run->entry = cJSON_CreateObject();
    cJSON_AddNumberToObject(run->entry, "id", run->id);
    cJSON_AddNumberToObject(run->entry, "world_size", world_size);
    cJSON_AddStringToObject(run->entry, "backend", lx_backend_is_nccl(run->backend) ? "nccl" : "mpi");
    cJSON_AddStringToObject(run->entry, "reason", reason);
    cJSON_AddItemToObject(run->entry, "stack", lx_stack_to_json(run->parent, run->n_parent));
    cJSON_AddStringToObject(run->entry, "status", "running");
    if (expect_failure) cJSON_AddTrueToObject(run->entry, "expect_failure");
    if (exercise) cJSON_AddStringToObject(run->entry, "exercise", exercise);
    if (limit > 0) cJSON_AddNumberToObject(run->entry, "time_limit_s", limit);
    if (slurm.present) {
        cJSON *alloc = cJSON_AddObjectToObject(run->entry, "slurm");
        cJSON_AddStringToObject(alloc, "job_id", slurm.job);
        cJSON_AddStringToObject(alloc, "nodes", slurm.nodes);
        cJSON_AddStringToObject(alloc, "tasks_per_node", slurm.tasks_per_node);
        cJSON_AddNumberToObject(alloc, "tasks", slurm.tasks);
    }
    cJSON_AddNumberToObject(run->entry, "seconds", 0);
    cJSON_AddItemToArray(spawns, run->entry);
    record_backend(run->backend);
    free(reason);

    /* A pool's normal start: well under a second per rank even on 2 busy
     * cores. LECTERN_TIMEOUT bounds it too; the short timeout of an
     * expected failure does not (it is about the ranks' waits, not their
     * start). */
    double start_limit = 15.0 + 2.0 * world_size;
    if (start_limit > timeout_seconds()) start_limit = timeout_seconds();
    int started_pool = 0;
    char *error = NULL;
    if (lx_pool_ensure(world_size, start_limit, &started_pool, &error) != 0) {
        lx_spawn_finish_entry(run, "failed");
        lx_spawn_free_run(run);
        lx_fatal("spawn of %d rank%s failed: %s", world_size, lx_plural(world_size), error);
    }
    run->board = lx_pool_board();
    hand_out(run, fn, args, args_size);
    for (int r = 0; r < world_size; r++)
        run->heard[r] = now_seconds();
    record_hosts(run);
    /* Start-up: from spawn() until every rank has its work (a pool started
     * on the way included). */
    lx_json_set(run->entry, "startup_s", cJSON_CreateNumber(lx_round_us(now_seconds() - run->started)));
    if (run->backend != LX_BACKEND_NCCL) cJSON_AddStringToObject(run->entry, "single_copy", lx_pool_single_copy());

    /* Wait for "done" from every rank, forwarding steps as they come. */
    run->last_progress = run->work_started = now_seconds();
    for (int r = 0; r < world_size; r++)
        run->moved_at[r] = run->work_started;
    double last_board = 0;
    lx_spawn_interrupt = 0;
    lx_spawn_waiting = 1;
    while (run->n_done < world_size && !run->failure) {
        if (lx_spawn_interrupt) interrupted(run, lx_spawn_interrupt);
        double now = now_seconds();
        if (lx_spawn_drain(run, 20) > 0) run->last_progress = now_seconds();
        now = now_seconds();
        int failed = lx_spawn_first_failure(run);
        if (failed >= 0) {
            lx_spawn_fail_rank(run, failed);
            break;
        }
        if (now - last_board >= 0.02) {
            last_board = now;
            lx_spawn_note_moves(run, now);
            lx_spawn_watch_board(run, now);
            if (run->failure) break;
        }
        if (now - run->last_progress > timeout) lx_spawn_fail_deadlock(run, timeout);
        else if (run->limit > 0 && now - run->work_started > run->limit) lx_spawn_fail_time_limit(run, now);
    }

    lx_spawn_waiting = 0;
    /* A signal that came as the loop ended: handled as outside a spawn. */
    if (lx_spawn_interrupt) raise(lx_spawn_interrupt);
    char *failure = run->failure;
    run->failure = NULL;
    if (!failure) {
        lx_spawn_release(run, 1);
        lx_spawn_finish_entry(run, "ok");
    }
    lx_spawn_free_run(run);
    return failure;
}

void spawn(spawn_fn fn, int world_size, const void *args, size_t args_size) {
    check_arguments("spawn", fn, world_size, args, args_size);
    double timeout = timeout_seconds();
    lx_pool_min_ranks(); /* a bad setting fails here, before anything starts */
    char *failure = run_spawn(fn, world_size, args, args_size, 0, timeout, NULL, 0);
    if (failure) lx_fatal("%s", failure);
}

int spawn_exercise(const char *exercise, double seconds, spawn_fn fn, int world_size, const void *args,
                   size_t args_size) {
    check_arguments("spawn_exercise", fn, world_size, args, args_size);
    if (!(seconds >= 0) || isinf(seconds))
        lx_fatal("spawn_exercise(): the time limit must be a finite number of seconds >= 0 (0: none), not %g", seconds);
    if (!exercise)
        lx_fatal("spawn_exercise(): the exercise is NULL: give the prefix grade_exercise() declared for it "
                 "(\"exercise 1:\")");
    if (lx_grade_begin(exercise) != 0)
        lx_fatal("spawn_exercise(\"%s\"): no exercise has that prefix: declare it first with grade_exercise()",
                 exercise);
    double timeout = timeout_seconds();
    lx_pool_min_ranks();
    char *failure = run_spawn(fn, world_size, args, args_size, 0, timeout, exercise, seconds);
    lx_grade_end();
    if (!failure) return 1;
    /* Said as the error steps were, and the run is failed by them; the
     * lecture goes on to its next exercise. */
    fprintf(stderr, "lectern: %s %s; the lecture goes on\n", exercise, failure);
    free(failure);
    return 0;
}

/* The deadlock timeout of an expected failure: LECTERN_EXPECT_TIMEOUT, else
 * 3 s; never longer than LECTERN_TIMEOUT. 3 s is far above any wait of a
 * working program on a busy machine (a working rank is progress anyway),
 * and short enough for a lecture to show a deadlock without a pause. */
static double expect_timeout_seconds(void) {
    double t = 3.0;
    const char *s = getenv("LECTERN_EXPECT_TIMEOUT");
    if (s && *s) {
        char *end;
        t = strtod(s, &end);
        if (*end != '\0' || !(t > 0)) lx_fatal("LECTERN_EXPECT_TIMEOUT='%s' is not a positive number of seconds", s);
    }
    double limit = timeout_seconds();
    return t < limit ? t : limit;
}

int spawn_expect_failure(spawn_fn fn, int world_size, const void *args, size_t args_size) {
    check_arguments("spawn_expect_failure", fn, world_size, args, args_size);
    double timeout = expect_timeout_seconds();
    lx_pool_min_ranks();
    char *failure = run_spawn(fn, world_size, args, args_size, 1, timeout, NULL, 0);
    if (!failure) {
        /* The lesson did not happen: the lecture is wrong, say where. */
        lx_error("spawn_expect_failure(): the spawn of %d rank%s succeeded, but it was expected to fail "
                 "(a deadlock, a crash, ranks that disagree)",
                 world_size, lx_plural(world_size));
        return 0;
    }
    if (!lx_quiet()) fprintf(stderr, "lectern: caught, as expected: %s\n", failure);
    free(failure);
    return 1;
}
