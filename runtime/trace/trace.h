/*
 * trace/trace.h: the trace layer's contract, the lowest layer of the runtime.
 * Not for lectures.
 *
 * The trace layer is the lecture's record: steps and their renderings
 * (trace.c, note.c, markdown.c), the lecture stacks they carry (stack.c),
 * check() and the check tally (check.c), --grade's results (grade.c), the
 * lecture's own options and --quick/--quiet (options.c), what a failing
 * MPI_CHECK/CUDA_CHECK does (backend_error.c, check.h), which rank this
 * process is (identity.c) and strings (strbuf.c).
 * It calls no other layer of the runtime (make check-layers): every layer
 * above calls it. Where it must hear from above, the layer above registers
 * a function here: the step sink (lx_set_step_sink, set by a rank's
 * spawn_rank.c) and whether a rank runs a spawn (lx_backend_error_set_rank_active,
 * set by the comm layer's lx_comm_start). Inside it, files call one way too:
 * trace.c calls nothing above it (check.c and grade.c listen to its steps,
 * lx_trace_listen); strbuf.c and identity.c call nothing of the runtime.
 *
 * Flow of one note():
 *   note()  -> lx_emit(rendering)             note.c
 *           -> lx_stack_capture()             stack.c  (lecture frames, outermost first)
 *           -> step = {stack, rank, ..., renderings}
 *           -> the step sink                  trace.c keeps it (parent process);
 *                                             spawn_rank.c sends it to the parent (a rank)
 */
#ifndef LECTERN_TRACE_LAYER_H
#define LECTERN_TRACE_LAYER_H

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lectern.h"

/* LECTERN_NCCL is 1 when this build has NCCL (the Makefile passes
 * -DLECTERN_NCCL=0 or 1): without it a CUDA build still uses the GPU, and
 * every spawn's collectives run on Open MPI. */
#ifndef LECTERN_NCCL
#define LECTERN_NCCL 0
#endif

/* ---------------- stack.c ---------------- */

typedef struct lx_frame {
    const char *path;     /* relative to the repo root, interned (never freed) */
    int line;             /* line being executed; the call site for outer frames */
    const char *function; /* interned */
} lx_frame;

#define LX_MAX_FRAMES 64

/* The function whose frame is the outermost one kept: the body given to
 * lecture_main in the parent, the spawned fn in a rank. */
void lx_stack_set_root(const void *fn);

/* Captures the lecture frames of the calling thread, outermost first, into
 * frames[0..n). Runtime, libc and MPI frames are left out. Returns n. */
int lx_stack_capture(lx_frame *frames, int max);

/* How lx_stack_capture walks: the frame-pointer chain, falling back to
 * backtrace() when the chain does not reach the root (ANY, what it does);
 * only the chain (-1 when it does not reach); only backtrace(). The last two
 * exist so tests can check that both walks give the same frames. */
typedef enum { LX_WALK_ANY, LX_WALK_FRAME_POINTERS, LX_WALK_BACKTRACE } lx_stack_walk;
int lx_stack_capture_by(lx_stack_walk how, lx_frame *frames, int max);

/* As lx_stack_capture, from a signal handler's context (the faulting pc
 * included). On a thread other than the process's first (one a rank's code
 * started), that thread's lecture frames, outermost its thread function,
 * though no spawned function is above them. */
int lx_stack_capture_signal(lx_frame *frames, int max, void *ucontext);

/* The repo root the paths are relative to (where lectures/ and runtime/ are),
 * found at run time: LECTERN_ROOT_DIR, else the folder above the binary that
 * holds runtime/lectern.h, else the folder it was built in. */
const char *lx_repo_root(void);

/* "/repo/lectures/x.c" -> "lectures/x.c"; "./lectures/x.c" -> "lectures/x.c";
 * a path outside the repo is returned as it is. */
const char *lx_repo_relative(const char *path);

/* The libdw module of the lecture executable (lectures and the runtime live
 * there), for globals.c. NULL when the debug information cannot be read. */
struct Dwfl_Module *lx_main_module(void);

/* 1 when `path` (repo-relative) is a lecture source file (not runtime/). */
int lx_is_lecture_path(const char *path);

/* Calls add(path) for every lecture source file (repo-relative, .c or .h,
 * not runtime/) the executable was built from, a file possibly more than once. */
void lx_lecture_sources(void (*add)(const char *path, void *ctx), void *ctx);

cJSON *lx_stack_to_json(const lx_frame *frames, int n);

/* The repo-relative source file that defines the function at `fn`, or NULL. */
const char *lx_function_path(const void *fn);
/* The name of the function at `fn` ("?" when unknown); interned. */
const char *lx_function_name(const void *fn);

/* ---------------- trace.c ---------------- */

/* Where finished steps go. The default sink appends to this process's trace.
 * spawn_rank.c installs one in each rank that sends the step to the parent. The
 * sink takes ownership of `step`. */
typedef void (*lx_step_sink)(cJSON *step);
void lx_set_step_sink(lx_step_sink sink);

/* Who hears of the record. trace.c keeps the steps and writes them; what
 * they mean is judged above it in this folder: check.c counts the checks,
 * grade.c grades them and writes --grade's file. Each registers a listener
 * here (lx_check_listen, lx_grade_listen: lecture_main calls both), the way
 * the step sink inverts a rank's path, so trace.c calls nothing above it.
 * Registering the same listener again does nothing; any member may be NULL.
 * Listeners are called in the order registered. */
typedef struct lx_trace_listener {
    /* A step reached this process's trace: appended (lx_trace_append) or
     * only tallied (lx_trace_tally). Under the trace's lock. */
    void (*step)(const cJSON *step);
    /* The trace is being written: add to its meta (lx_trace_write, under
     * the trace's lock, right after meta.status). */
    void (*meta)(cJSON *meta);
    /* The lecture process (not a rank) wrote its trace (lx_trace_write). */
    void (*written)(void);
    /* lx_fatal ends the lecture process, its trace written: last words. */
    void (*fatal)(void);
} lx_trace_listener;
void lx_trace_listen(const lx_trace_listener *listener);

/* Starts a new, empty trace for lecture `name`, to be written into `dir`. */
void lx_trace_init(const char *name, const char *dir);
void lx_trace_free(void);
const char *lx_out_dir(void);
int lx_trace_step_count(void);

/* "<dir>/<name>.<ext>", or "<dir>/<name>.failed.<ext>" once the run failed.
 * Caller frees. */
char *lx_trace_path(const char *ext);

/* Adds `s` to obj under key, made valid UTF-8 first. */
void lx_add_text(cJSON *obj, const char *key, const char *s);
/* obj[key] = value (owned), replacing what was there. */
void lx_json_set(cJSON *obj, const char *key, cJSON *value);

/* markdown.c: CommonMark + GitHub extensions to HTML (md4c). Caller frees. */
char *lx_markdown_to_html(const char *md);

/* As lx_emit, with frames already captured. */
void lx_emit_frames(const lx_frame *frames, int n, cJSON *rendering);

/* Builds a step from the current lecture stack and `rendering` (owned), and
 * hands it to the sink. The building block of note(), image(), ... */
void lx_emit(cJSON *rendering);

/* Appends a finished step to this process's trace (takes ownership). Used by
 * spawn_relay.c for steps received from ranks (after it prefixed the parent's
 * frames and set rank / world_size / spawn). Thread-safe. Returns the step's
 * index in the trace's steps (what message links name, links_match.c). */
int lx_trace_append(cJSON *step);
/* Counts and grades a step's checks without appending it: a rank's passing
 * check folded into an earlier step of its site (ranks/spawn_relay.c). */
void lx_trace_tally(const cJSON *step);

/* Trace metadata: lx_trace_meta("backend", cJSON_CreateString("mpi")) sets
 * meta.backend (replacing). lx_trace_spawns() is the "spawns" array (append
 * one object per spawn; owned by the trace). */
void lx_trace_meta(const char *key, cJSON *value);
cJSON *lx_trace_spawns(void);

/* Renderings. */
cJSON *lx_rendering_markdown(const char *md);
/* note_args.c: a note's arguments as source text (lectern.h's note() macro)
 * beside their values: [{"expr", "quoted", "value", "printed"}] in the
 * format's order, or NULL when the format is not one it reads. ap is
 * copied, not consumed. */
cJSON *lx_note_args(const char *args_text, const char *fmt, va_list ap);
cJSON *lx_rendering_text(const char *text);
cJSON *lx_rendering_error(const char *message);

/* An error step at the current lecture stack ("message" rendered as type
 * error, with "file:line: " prefixed where a lecture line is known); marks
 * the lecture failed. Printed on stderr too. */
void lx_error(const char *fmt, ...) LECTERN_PRINTF(1, 2);

/* As lx_error, then writes the trace and exits 1: for errors that make going
 * on meaningless (bad spawn arguments, a rank crash). */
void lx_fatal(const char *fmt, ...) LECTERN_PRINTF(1, 2) __attribute__((noreturn));
/* As lx_fatal, located at `frames` (outermost first, n of them) instead of
 * where the lecture is: an error in code the student did not write named
 * at the student's call of it. */
void lx_fatal_at(const lx_frame *frames, int n, const char *fmt, ...) LECTERN_PRINTF(3, 4) __attribute__((noreturn));
/* The frames lx_fatal or lx_fatal_at put its error at (0 before either):
 * where a rank that exits through it stopped, for its exit hook. */
int lx_fatal_frames(lx_frame *frames, int max);

/* Marks the lecture failed (exit status 1 at the end). */
void lx_mark_failed(void);
int lx_failed(void);

/* Writes the trace atomically; a failed run writes <name>.failed.json/.js
 * and leaves the last good <name>.json alone. Returns 0 or -1. */
int lx_trace_write(void);

/* The lecture's name. */
const char *lx_lecture_name(void);
/* Writes parts[] to `path` through a temporary file in its folder and a
 * rename: a reader never sees half a file. 0, or -1 with a message. */
int lx_write_atomic(const char *path, const char *const *parts, int nparts);

/* In a rank: what the parent knows that the rank needs for progress lines,
 * step times and lecture_quick(): the lecture's name, the parent's
 * CLOCK_MONOTONIC reading (seconds) at lecture start, --quick and --quiet. */
void lx_rank_init(const char *lecture, double clock_zero, int quick, int quiet);
/* The lecture process: --quick and --quiet as lecture_main read them. */
void lx_set_run_flags(int quick, int quiet);
/* In a rank of a spawn_expect_failure() spawn: its errors say so on the console. */
void lx_rank_errors_expected(int expected);
int lx_quiet(void);
void lx_trace_rank_init(const char *lecture, double clock_zero);

/* Seconds since the lecture started (monotonic). */
double lx_elapsed(void);

/* ---------------- identity.c (the lecture, or a rank) ---------------- */

int lx_in_rank(void);                          /* 1 inside a spawned rank */
void lx_set_in_rank(int rank, int world_size); /* a rank, once, before its function runs */
void lx_set_in_lecture(void);                  /* back to the lecture (lx_trace_free) */
int lx_rank(void);                             /* this rank's number, -1 outside ranks */
int lx_world_size(void);                       /* its spawn's world size, -1 outside ranks */

/* ---------------- strbuf.c (strings; calls nothing else here) ---------------- */

/* A new formatted string (free it); dies cleanly on out-of-memory. */
char *lx_vfmt(const char *fmt, va_list ap);
char *lx_fmt(const char *fmt, ...) LECTERN_PRINTF(1, 2);

/* A growing string; zero-initialise, add, free(b.s). */
typedef struct lx_sb {
    char *s;
    size_t len, cap;
} lx_sb;
void lx_sb_add(lx_sb *b, const char *s, size_t n);
void lx_sb_str(lx_sb *b, const char *s);
void lx_sb_printf(lx_sb *b, const char *fmt, ...) LECTERN_PRINTF(2, 3);

/* Makes `s` valid UTF-8 in place-or-copy: invalid bytes become U+FFFD.
 * Returns a new string (caller frees). */
char *lx_utf8_repair(const char *s);

/* ---------------- modelled.c (model_compute's spans) ---------------- */

/* A span of modelled compute: time model_compute() said the device was busy,
 * recorded apart from the steps so nobody takes it for measured arithmetic.
 * lx_modelled_record builds it ({"spawn", "rank", "start", "end", "ms",
 * "device", "path", "line", "function"}: start and end in seconds since the
 * lecture started, ms what was asked, device "cpu" or "cuda:N", the innermost
 * lecture frame of the calling thread; spawn and rank null) and hands it to
 * the modelled sink: by default lx_trace_modelled_append, in a rank
 * spawn_rank.c's, which sends it to the lecture (the sink takes ownership). */
typedef void (*lx_modelled_sink)(cJSON *span);
void lx_set_modelled_sink(lx_modelled_sink sink);
void lx_modelled_record(double start, double end, double ms, int device);
/* trace.c: appends a span (owned) to the trace's "modelled" array; from then
 * on meta.modelled_compute is true. Of each spawn (and of the lecture's own
 * process) the first LX_MODELLED_PER_SPAWN spans are kept, and the rest only
 * counted in meta.modelled_dropped: a timing loop of thousands of spans
 * would otherwise double a trace's size (lecture_ddp's 91 KB became 1.3 MB)
 * for spans no reader looks at one by one; a pipeline's 2 m p spans a pass
 * fit, and so do lecture_scaling's ZeRO-3 prefetch steps (704: 4 ranks of 11
 * steps of 16 spans). Thread-safe. */
#define LX_MODELLED_PER_SPAWN 1024
void lx_trace_modelled_append(cJSON *span);

/* ---------------- options.c (a lecture's own options) ---------------- */

/* Takes one command-line argument that is not one of lecture_main's own:
 * NULL when it is a declared option (remembered), else a message saying
 * what is wrong (caller frees). */
char *lx_option_accept(const char *arg);
/* The lecture's declared options for --help (nothing when it has none). */
void lx_options_usage(FILE *f);
/* What was given as "name[=value]\n" lines (caller frees), and a rank's
 * way to take the same in. */
char *lx_options_text(void);
void lx_options_load(const char *text);
void lx_options_free(void);

/* ---------------- inspect.c (inspect(x): a variable at this step) ---------------- */

/* Tensors of up to LX_INSPECT_WHOLE elements are kept whole; larger ones as
 * a summary and a picture of at most LX_INSPECT_PICTURE x LX_INSPECT_PICTURE
 * block means (2-D) or LX_INSPECT_PICTURE_1D bucket means (1-D). */
#define LX_INSPECT_WHOLE 256
#define LX_INSPECT_PICTURE 16
#define LX_INSPECT_PICTURE_1D 64

/* The "inspect" renderings (docs/trace-format.md), to give to lx_emit: an
 * integer (kind "int" or "int64"), a float or double (kind "float" or
 * "double"), and a tensor's host copy (numel floats, row-major; device -1
 * for the CPU; dtype: the tensor's, dtype_name's spelling, its values widened
 * exactly to fp32), made by tensor/tensor_inspect.c. */
cJSON *lx_inspect_integer(const char *name, const char *kind, int64_t v);
cJSON *lx_inspect_real(const char *name, const char *kind, double v);
cJSON *lx_inspect_floats(const char *name, const int64_t *shape, int ndim, int device, const char *dtype,
                         const float *v, int64_t numel);

/* options.c: 1 when the lecture was started with --inspect-collectives (in
 * its ranks too): the collectives of comm.c and comm_groups.c then inspect their tensors
 * before and after, as "t (before dist_all_reduce)". */
#define LX_INSPECT_COLLECTIVES "inspect-collectives"
int lx_inspect_collectives(void);
/* options.c: 1 when the lecture was started with --twin-record (in its
 * ranks too): twin_record.c records what each rank does. */
#define LX_TWIN_RECORD "twin-record"
int lx_twin_recording(void);
int lx_twin_record_given(void); /* --twin-record itself, not twin_record(1) */
/* options.c: the value of a built-in option given as --name=VALUE (the
 * last one), NULL when it was not given; lives until lx_options_free. */
const char *lx_option_given(const char *name);

/* ---------------- variant.c (--variant SEED: variant_int) ---------------- */

/* --variant=SEED travels to the ranks with the lecture's options. */
#define LX_VARIANT "variant"
#define LX_VARIANT_MAX 4294967295u
/* NULL when `text` is a seed (0 to LX_VARIANT_MAX, digits only; stored in
 * *seed when seed is not NULL), else what is wrong (caller frees). */
char *lx_variant_parse(const char *text, uint64_t *seed);
/* {"seed": S, "values": {name: value}} of the lecture's variant_int calls,
 * NULL without --variant (caller deletes). */
cJSON *lx_variant_record(void);
/* "Variant 7: ring chunk = 312, micro-batches = 3" for --grade's output,
 * NULL without --variant (caller frees). */
char *lx_variant_text(void);
void lx_variant_free(void);
void lx_twin_request(int on); /* twin_record(on): record without the option */

/* ---------------- twin_record.c (what each rank did, for a replay) ---------------- */

/* With --twin-record, each rank of a spawn records in order its compute
 * (time between calls, and the work the tensor ops counted), its modelled
 * spans and its calls; the lecture writes them to NAME.events.json beside
 * the trace (docs/twin.md). Every function is a no-op outside a rank or
 * without the flag. */
#define LX_TWIN_MAX_EVENTS (1 << 20) /* per rank and spawn; beyond, counted in "dropped" */

/* A call, described by the comm layer where every call passes (comm_stats.c). */
typedef struct lx_twin_call_desc {
    const char *name;       /* dist_call_name's spelling, static: "all_reduce" */
    int64_t bytes;          /* docs/twin.md: the call's size as nccl-tests counts it */
    int64_t recv_bytes;     /* sendrecv: what it receives */
    int peer, src;          /* dst, src or root as a world rank, -1 none; sendrecv's src */
    const int *group_ranks; /* a group call: its world ranks in group order; NULL the world */
    int group_size;
    const void *backend_request; /* an async call's request (its wait names it), else NULL */
    double start, end;           /* lx_elapsed() around the call */
} lx_twin_call_desc;

/* A rank's spawn starts: its record emptied, the clock of compute started. */
void lx_twin_begin(void);
/* Work a tensor op did on this rank: FLOPs, bytes read and written. */
void lx_twin_work(double flops, double bytes);
/* A call (returns its request number for an async one, else 0), the wait
 * of an async one, a model_compute() span. */
int lx_twin_call(const lx_twin_call_desc *c);
void lx_twin_wait(const void *backend_request, double start, double end);
void lx_twin_modelled(double start, double end, double ms);
/* The spawn's end: the rank's record as JSON text ({"events": [...], "end"}),
 * for the lecture (caller frees). */
char *lx_twin_rank_text(void);
/* The lecture: rank `rank` of spawn `spawn_id` sent `text`. Kept until the
 * trace is written; NAME.events.json is written with a good trace. */
void lx_twin_add_rank(int spawn_id, int rank, int world_size, const char *text);
/* The recorded events of spawn `id` ({"id", "world_size", "ranks"}), or NULL
 * when none were recorded; owned by twin_record.c. */
cJSON *lx_twin_spawn_events(int id);

/* ---------------- links_record.c, links_match.c (who talked to whom) ---------------- */

/* Always on: each rank records every point-to-point call and collective
 * (the description the comm layer gives the twin, plus the lecture line
 * that made it and the rank's step at that moment), and sends the record to
 * the lecture at its function's end. The lecture matches them: the k-th
 * send from A to B with the k-th receive at B from A (MPI's non-overtaking
 * order; the runtime has no tags), a collective's k-th call on a group
 * across its members; spawns[i].messages and .collectives in the trace
 * (docs/trace-format.md). Cost: one fixed-size record per call, no
 * allocation after the first; at most LX_LINKS_MAX_CALLS per rank and
 * spawn, the rest counted as dropped. */
#define LX_LINKS_MAX_CALLS 4096

/* A rank's spawn starts: its record and its count of steps emptied. */
void lx_links_begin(void);
/* The rank sent a step to the lecture (spawn_rank.c): its steps are
 * numbered 0, 1, ... per spawn; a call names the last one before it. */
void lx_links_step_sent(void);
/* A call, made at `site` (the lecture frame the call's step would have at
 * its top; NULL unknown), entered at `enter` (lx_elapsed(): before any
 * waiting, the agreement check's included). An async call's end is set by
 * lx_links_wait when its request completes. */
void lx_links_call(const lx_twin_call_desc *c, const lx_frame *site, double enter);
void lx_links_wait(const void *backend_request, double end);
/* The spawn's end: the rank's record as JSON text (caller frees). */
char *lx_links_rank_text(void);

/* The lecture, at a spawn's end: matches the ranks' records (`texts[r]`,
 * NULL for a rank that sent none: it died or was stopped) and writes
 * "messages" and "collectives" into `entry` (the spawn's object in the
 * trace), with "links_unmatched" and "links_dropped" when some calls found
 * no partner or were not recorded. step_of(ctx, rank, k) gives the trace's
 * index of rank's k-th step of the spawn (-1 unknown). */
void lx_links_match(cJSON *entry, char *const *texts, int world_size, int (*step_of)(void *ctx, int rank, int k),
                    void *ctx);

/* ---------------- check.c (check, check_close) ---------------- */

/* Counts the check renderings of a step that reaches this process's trace
 * (the lecture's own, or one a rank sent); a failed one marks the lecture
 * failed. lx_check_listen registers it as a step listener of trace.c. */
void lx_check_tally(const cJSON *step);
void lx_check_listen(void);
/* The totals so far. */
void lx_check_counts(int *passed, int *failed);
/* The pieces of a check step, for check() here and check_close()
 * (tensor/tensor_check.c): a "check" rendering (passed, what); the step
 * emitted at the lecture's line with `summary` as its data, a failure said on
 * stderr too (returns ok); a failed check without numbers, `why` its reason
 * (returns 0). */
cJSON *lx_check_rendering(int ok, const char *what);
int lx_check_emit(cJSON *r, int ok, const char *summary);
int lx_check_refused(const char *what, const char *why);

/* ---------------- grade.c (--grade FILE) ---------------- */

/* --grade FILE: 0 when FILE can be written (it is then written at the end,
 * and the tail of stdout and stderr is kept for it), -1 when not (errno
 * says why). */
int lx_grade_open(const char *file);
/* Called for every step that reaches the lecture's trace (a listener of
 * trace.c): its checks and errors. Without --grade it only counts each
 * exercise's checks. */
void lx_grade_step(const cJSON *step);
/* Registers grade.c with trace.c: lx_grade_step for each step, meta.checks
 * as the trace is written, lx_grade_write after it, the verdict line
 * (lx_check_summary_print) when lx_fatal ends the lecture. */
void lx_grade_listen(void);
/* "checks: N passed, M failed[, K not reached]" (malloc'd), NULL when no
 * check ran and no exercise was declared; _print says it on stderr. */
char *lx_check_summary(void);
void lx_check_summary_print(void);
/* The exercise `prefix` (declared with grade_exercise) runs from now to
 * lx_grade_end: the errors between are its own reasons (spawn_exercise).
 * -1 when no exercise has that prefix. */
int lx_grade_begin(const char *prefix);
void lx_grade_end(void);
/* Checks the declared exercises did not reach so far (their counts less
 * the checks made); -1 when the lecture declared none. */
int lx_grade_not_reached(void);
/* Writes the results file (Gradescope's results.json) from what the run did
 * so far; nothing without --grade. Called after lx_trace_write (a listener)
 * and at exit. */
void lx_grade_write(void);

/* ---------------- grade_visibility.c (grade_visibility) ---------------- */

/* The visibility of the check named `name`: the longest grade_visibility
 * prefix it starts with decides; "visible" when none does. */
const char *lx_grade_visibility_of(const char *name);
/* grade_exercise declared an exercise: a grade_visibility prefix may
 * start with its prefix from now on. */
void lx_grade_visibility_exercise(const char *prefix);
/* The table as text for a spawn's ranks (caller frees), and loaded there. */
char *lx_grade_visibility_text(void);
void lx_grade_visibility_load(const char *text);
/* For a check rendering `r` about to be emitted: NULL when its check is
 * visible (nothing changes); else `r` keeps its type, passed, name and
 * `what` (the name alone), gains "visibility" and "withheld" (the whole
 * rendering with `summary` as its data, heard by the listeners, never
 * written to the trace), and the line to show in place of `summary` is
 * returned (caller frees). */
char *lx_check_withhold(cJSON *r, int ok, const char *summary);

/* ---------------- leaderboard.c (grade_leaderboard) ---------------- */

/* Called for every step that reaches the lecture's trace (by grade.c): a
 * leaderboard note's entry is kept, the last of one name replacing an
 * earlier one. */
void lx_leaderboard_step(const cJSON *step);
/* results.json's "leaderboard" list, NULL when there is no entry. */
cJSON *lx_leaderboard_json(void);

/* ---------------- backend_error.c (MPI_CHECK and the like, check.h) ---------------- */

/* lx_backend_error (check.h) writes an error step where there is a trace to
 * write to: the lecture process, or a rank while it runs a spawned function.
 * This layer cannot see the latter, so the comm layer tells it: lx_comm_start
 * registers `active` (lx_comm_active), called only inside a rank. */
void lx_backend_error_set_rank_active(int (*active)(void));

/* ---------------- coverage ---------------- */

/* A coverage build (make coverage) writes its gcov counters before a
 * process dies of a signal or leaves through _exit, which skip the exit
 * handlers that would write them; elsewhere nothing. */
#ifdef LECTERN_COVERAGE
void __gcov_dump(void);
#define LX_COVERAGE_FLUSH() __gcov_dump()
#else
#define LX_COVERAGE_FLUSH() ((void)0)
#endif

#endif /* LECTERN_TRACE_LAYER_H */
