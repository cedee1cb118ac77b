/*
 * stack.c: the real call stack of lecture frames, symbolized from DWARF.
 *
 * Lecture code needs no macro at each note(): we walk the machine stack
 * (its frame-pointer chain, or backtrace() where that chain breaks), then ask libdw (elfutils) which source file, line and function
 * each return address belongs to. Only frames of lecture sources are kept:
 * the runtime's own files, libc, MPI and CUDA are dropped. The walk stops at
 * the root function (the lecture's body, or the function a spawned rank
 * runs), so a stack reads like the reference's: lecture_08 -> hardware.
 *
 * Two details make the lines exact:
 *  - a return address points after the call instruction, often on the next
 *    line; looking up pc - 1 lands inside the call, on the call's line;
 *  - lectures are built with -fno-inline and no sibling calls, so every
 *    source function keeps its own frame.
 *
 * A cold lookup costs about 0.1 ms; a note() runs the same pcs again and
 * again, so symbols are cached by pc and a warm capture costs microseconds.
 */
#include <elfutils/libdwfl.h>
#include <execinfo.h>
#include <stdio.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "trace/trace.h"

#ifndef LECTERN_ROOT
#define LECTERN_ROOT "."
#endif

/* What we know of one pc, computed once. */
typedef struct sym_entry {
    uintptr_t pc;         /* the looked-up address (already pc - 1 for return addresses) */
    const char *path;     /* repo-relative, interned; NULL when unknown */
    const char *function; /* interned; NULL when unknown */
    uintptr_t func_start; /* address of the function's first instruction */
    int line;
    int lecture; /* a frame of a lecture source file */
    int used;
} sym_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Dwfl *dwfl;
static Dwfl_Module *main_module; /* the lecture executable: lectures and runtime live here */
static sym_entry *cache;
static size_t cache_cap, cache_len;
static uintptr_t root_fn;

/* ---- interned strings: a small hash set that lives as long as the process ---- */

typedef struct intern_node {
    struct intern_node *next;
    char s[];
} intern_node;
static intern_node *intern_table[1024];

static const char *intern(const char *s) {
    size_t h = 5381;
    for (const char *p = s; *p; p++)
        h = h * 33 + (unsigned char)*p;
    h %= sizeof intern_table / sizeof intern_table[0];
    for (intern_node *n = intern_table[h]; n; n = n->next)
        if (strcmp(n->s, s) == 0) return n->s;
    size_t len = strlen(s);
    intern_node *n = malloc(sizeof *n + len + 1);
    if (!n) abort();
    memcpy(n->s, s, len + 1);
    n->next = intern_table[h];
    intern_table[h] = n;
    return n->s;
}

/* ---- the repo root ---- */

static int is_repo(const char *dir) {
    char *probe = lx_fmt("%s/runtime/lectern.h", dir);
    int yes = access(probe, R_OK) == 0;
    free(probe);
    return yes;
}

static char *root_dir;
static pthread_once_t root_once = PTHREAD_ONCE_INIT;

/* The first folder above the running binary that holds runtime/lectern.h
 * (build/lectures/x -> the repo), or NULL. */
static char *root_above_binary(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = '\0';
    for (char *slash = strrchr(exe, '/'); slash && slash != exe; slash = strrchr(exe, '/')) {
        *slash = '\0';
        if (is_repo(exe)) return strdup(exe);
    }
    return NULL;
}

/* Where lectures/, runtime/, assets/ and traces/ are, found once: LECTERN_ROOT_DIR
 * when set; else the folder above the running binary that holds the sources
 * (so a build carried to another folder or machine, beside its sources, finds
 * them); else the folder it was built in (LECTERN_ROOT); else ".". */
static void find_root(void) {
    const char *env = getenv("LECTERN_ROOT_DIR");
    if (env && *env) root_dir = strdup(env);
    else if (!(root_dir = root_above_binary())) root_dir = strdup(is_repo(LECTERN_ROOT) ? LECTERN_ROOT : ".");
    if (!root_dir) abort();
}

const char *lx_repo_root(void) {
    pthread_once(&root_once, find_root);
    return root_dir;
}

const char *lecture_root(void) { return lx_repo_root(); }

int lx_is_lecture_path(const char *path) {
    if (!path || path[0] == '/' || path[0] == '\0') return 0; /* outside the repo */
    if (strncmp(path, "runtime/", 8) == 0) return 0;
    size_t n = strlen(path);
    return (n > 2 && strcmp(path + n - 2, ".c") == 0) || (n > 2 && strcmp(path + n - 2, ".h") == 0);
}

/* "/repo/lectures/x.c" -> "lectures/x.c"; "./lectures/x.c" -> "lectures/x.c".
 * The debug info names files under the folder the binary was built in
 * (LECTERN_ROOT), which is not the run-time root when the build was moved. */
const char *lx_repo_relative(const char *path) {
    const char *roots[2] = {LECTERN_ROOT, lx_repo_root()};
    for (int i = 0; i < 2; i++) {
        size_t rn = strlen(roots[i]);
        if (strncmp(path, roots[i], rn) == 0 && path[rn] == '/') {
            path += rn + 1;
            break;
        }
    }
    while (strncmp(path, "./", 2) == 0)
        path += 2;
    return path;
}

/* ---- libdw session over our own process ---- */

static const Dwfl_Callbacks callbacks = {
        .find_elf = dwfl_linux_proc_find_elf,
        .find_debuginfo = dwfl_standard_find_debuginfo,
};

static int dwfl_open(void) {
    if (dwfl) return 0;
    dwfl = dwfl_begin(&callbacks);
    if (!dwfl) return -1;
    dwfl_report_begin(dwfl);
    if (dwfl_linux_proc_report(dwfl, getpid()) != 0 || dwfl_report_end(dwfl, NULL, NULL) != 0) {
        dwfl_end(dwfl);
        dwfl = NULL;
        return -1;
    }
    main_module = dwfl_addrmodule(dwfl, (Dwarf_Addr)(uintptr_t)&lx_stack_capture);
    return 0;
}

struct Dwfl_Module *lx_main_module(void) {
    pthread_mutex_lock(&lock);
    Dwfl_Module *m = dwfl_open() == 0 ? main_module : NULL;
    pthread_mutex_unlock(&lock);
    return m;
}

/* ---- the pc cache: open addressing, grows at half full ---- */

static sym_entry *cache_slot(uintptr_t pc) {
    size_t i = (pc * 0x9E3779B97F4A7C15ull) >> 20;
    for (;; i++) {
        sym_entry *e = &cache[i & (cache_cap - 1)];
        if (!e->used || e->pc == pc) return e;
    }
}

static void cache_grow(void) {
    sym_entry *old = cache;
    size_t old_cap = cache_cap;
    cache_cap = cache_cap ? cache_cap * 2 : 1024;
    cache = calloc(cache_cap, sizeof *cache);
    if (!cache) abort();
    cache_len = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].used) {
            *cache_slot(old[i].pc) = old[i];
            cache_len++;
        }
    free(old);
}

static void symbolize(sym_entry *e) {
    e->path = NULL;
    e->function = NULL;
    e->line = 0;
    e->lecture = 0;
    e->func_start = 0;
    if (dwfl_open() != 0) return;
    Dwfl_Module *mod = dwfl_addrmodule(dwfl, e->pc);
    if (!mod || mod != main_module) return; /* libc, MPI, CUDA: never lecture frames */

    GElf_Off offset = 0;
    GElf_Sym sym;
    const char *name = dwfl_module_addrinfo(mod, e->pc, &offset, &sym, NULL, NULL, NULL);
    if (name) {
        /* GCC may name a specialised copy "f.constprop.0"; the reader knows it as f. */
        char buf[256];
        snprintf(buf, sizeof buf, "%s", name);
        char *dot = strchr(buf, '.');
        if (dot) *dot = '\0';
        e->function = intern(buf);
        e->func_start = e->pc - offset;
    }
    Dwfl_Line *dl = dwfl_module_getsrc(mod, e->pc);
    if (dl) {
        int line = 0;
        const char *file = dwfl_lineinfo(dl, NULL, &line, NULL, NULL, NULL);
        if (file) {
            e->path = intern(lx_repo_relative(file));
            e->line = line;
        }
    }
    e->lecture = e->path && e->function && e->line > 0 && lx_is_lecture_path(e->path);
}

static const sym_entry *lookup(uintptr_t pc) {
    if (cache_len * 2 >= cache_cap) cache_grow();
    sym_entry *e = cache_slot(pc);
    if (!e->used) {
        e->used = 1;
        e->pc = pc;
        cache_len++;
        symbolize(e);
    }
    return e;
}

void lx_stack_set_root(const void *fn) { root_fn = (uintptr_t)fn; }

/* Turns raw pcs (innermost first) into lecture frames (outermost first).
 * `exact_pc` is a pc that is not a return address (the faulting instruction
 * in a signal handler), looked up as is. */
static int frames_from_pcs(void **pcs, int npcs, uintptr_t exact_pc, lx_frame *out, int max, int *reached,
                           int own_thread) {
    lx_frame tmp[LX_MAX_FRAMES];
    int n = 0, found_root = 0, found_main = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < npcs && n < LX_MAX_FRAMES; i++) {
        uintptr_t pc = (uintptr_t)pcs[i];
        if (pc == 0) continue;
        const sym_entry *e = lookup(pc == exact_pc ? pc : pc - 1);
        if (!e->lecture) continue;
        tmp[n].path = e->path;
        tmp[n].line = e->line;
        tmp[n].function = e->function;
        n++;
        if (root_fn && e->func_start == root_fn) {
            found_root = 1;
            break;
        } /* the outermost frame we keep */
        if (strcmp(e->function, "main") == 0) {
            found_main = 1;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    if (reached) *reached = found_root || found_main;
    /* A rank's lecture code is its spawned function: outside it (setting up
     * a spawn, tearing one down) no lecture line is running, whatever
     * main() the walk would reach. A thread the lecture's code started
     * (own_thread) is the exception: its outermost lecture frame is its
     * thread function, which no root is above. */
    if (lx_in_rank() && !found_root && !own_thread) n = 0;
    if (n > max) n = max;
    for (int i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i]; /* outermost first */
    return n;
}

/* ---- the walk ----
 *
 * backtrace() unwinds with the DWARF call-frame tables: about 1.4 us for a
 * rank's stack of a dozen frames, paid by every collective (the board says
 * where each rank waits) and every note(). The lecture and the runtime are
 * built with frame pointers (-fno-omit-frame-pointer), so the frames between
 * a runtime call and the root function form a chain: each frame's saved
 * frame pointer and return address, two words at the frame pointer. Walking
 * it costs nanoseconds. The chain is trusted only while each link points
 * further up this thread's stack; a walk that does not reach the root (a
 * frame of code built without frame pointers in between: a library's
 * callback into lecture code) is thrown away and backtrace() runs instead,
 * so the frames are the same either way (test_trace.c checks that they are). */

static __thread uintptr_t stack_lo, stack_hi; /* this thread's stack, once known */

static int thread_stack(void) {
    if (stack_hi) return 1;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
    void *addr = NULL;
    size_t size = 0;
    int ok = pthread_attr_getstack(&attr, &addr, &size) == 0;
    pthread_attr_destroy(&attr);
    if (!ok || !addr || !size) return 0;
    stack_lo = (uintptr_t)addr;
    stack_hi = stack_lo + size;
    return 1;
}

/* Return addresses along the frame-pointer chain, innermost first. */
__attribute__((noinline)) static int frame_pointer_walk(void **pcs, int max) {
    if (!thread_stack()) return 0;
    const uintptr_t *fp = __builtin_frame_address(0);
    int n = 0;
    while (n < max) {
        uintptr_t at = (uintptr_t)fp;
        if (at < stack_lo || at + 2 * sizeof(uintptr_t) > stack_hi || at % sizeof(uintptr_t)) break;
        uintptr_t next = fp[0], ret = fp[1];
        if (!ret) break;
        pcs[n++] = (void *)ret;
        if (next <= at) break; /* the chain only goes up the stack */
        fp = (const uintptr_t *)next;
    }
    return n;
}

int lx_stack_capture_by(lx_stack_walk how, lx_frame *frames, int max) {
    void *pcs[128];
    if (how != LX_WALK_BACKTRACE) {
        int reached = 0;
        int npcs = frame_pointer_walk(pcs, 128);
        int n = frames_from_pcs(pcs, npcs, 0, frames, max, &reached, 0);
        if (reached) return n;
        if (how == LX_WALK_FRAME_POINTERS) return -1;
    }
    int npcs = backtrace(pcs, 128);
    return frames_from_pcs(pcs, npcs, 0, frames, max, NULL, 0);
}

int lx_stack_capture(lx_frame *frames, int max) { return lx_stack_capture_by(LX_WALK_ANY, frames, max); }

int lx_stack_capture_signal(lx_frame *frames, int max, void *ucontext) {
    void *pcs[128];
    int npcs = backtrace(pcs, 128);
    uintptr_t fault_pc = 0;
#if defined(__x86_64__)
    if (ucontext) fault_pc = (uintptr_t)((ucontext_t *)ucontext)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    if (ucontext) fault_pc = (uintptr_t)((ucontext_t *)ucontext)->uc_mcontext.pc;
#endif
    /* A signal on a thread other than the process's first (a thread a
     * rank's code started, writing a file beside its training, say): the
     * frames of that thread, which is where the fault is. */
    int own_thread = (pid_t)syscall(SYS_gettid) != getpid();
    return frames_from_pcs(pcs, npcs, fault_pc, frames, max, NULL, own_thread);
}

/* The source file that defines `fn` (repo-relative), or NULL. Used to name a
 * lecture after its file. */
const char *lx_function_path(const void *fn) {
    pthread_mutex_lock(&lock);
    const sym_entry *e = lookup((uintptr_t)fn);
    const char *path = e->path;
    pthread_mutex_unlock(&lock);
    return path;
}

const char *lx_function_name(const void *fn) {
    pthread_mutex_lock(&lock);
    const sym_entry *e = lookup((uintptr_t)fn);
    const char *name = e->function ? e->function : "?";
    pthread_mutex_unlock(&lock);
    return name;
}

/* Every lecture source file the executable was built from: each lecture
 * compile unit and the lecture headers it includes (lectures/lib/mlp.c and
 * mlp.h, say), read from the DWARF line tables. A file whose functions never
 * call note() appears in no stack, yet the reader should be able to open it. */
void lx_lecture_sources(void (*add)(const char *path, void *ctx), void *ctx) {
    Dwfl_Module *mod = lx_main_module();
    Dwarf_Addr bias;
    if (!mod || !dwfl_module_getdwarf(mod, &bias)) return;
    Dwarf_Die *cu = NULL;
    while ((cu = dwfl_module_nextcu(mod, cu, &bias)) != NULL) {
        Dwarf_Files *files;
        size_t n;
        if (dwarf_getsrcfiles(cu, &files, &n) != 0) continue;
        const char *const *dirs;
        size_t ndirs;
        if (dwarf_getsrcdirs(files, &dirs, &ndirs) != 0 || ndirs == 0) continue;
        for (size_t i = 0; i < n; i++) {
            const char *name = dwarf_filesrc(files, i, NULL, NULL);
            if (!name) continue;
            char buf[4096];
            if (name[0] != '/' && dirs[0]) { /* relative to the compile directory */
                snprintf(buf, sizeof buf, "%s/%s", dirs[0], name);
                name = buf;
            }
            const char *path = lx_repo_relative(name);
            if (lx_is_lecture_path(path)) add(path, ctx);
        }
    }
}

cJSON *lx_stack_to_json(const lx_frame *frames, int n) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "path", frames[i].path);
        cJSON_AddNumberToObject(f, "line", frames[i].line);
        cJSON_AddStringToObject(f, "function", frames[i].function);
        cJSON_AddItemToArray(arr, f);
    }
    return arr;
}
