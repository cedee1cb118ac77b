/*
 * pool.c: the lecture's pool of rank processes.
 *
 * At the first spawn() the lecture runs, once,
 *
 *     mpirun -np N --bind-to none ... THIS_PROGRAM --lectern-rank ADDRESS BOARD HOST
 *
 * and every spawn() after that reuses those N processes: a spawn of world
 * size w runs on pool ranks 0..w-1 (pool.c starts them, spawn.c hands them
 * work, spawn_rank.c is what they run). The lecture itself never joins MPI,
 * so nothing that happens to a rank can take it down with it.
 *
 * Why a pool started by mpirun, and not MPI_Comm_spawn once per spawn():
 * on Debian 12's Open MPI 4.1.4 / PMIx 4.2.2 repeated MPI_Comm_spawn calls
 * hang now and then (3 of 3 runs of 30 four-rank spawns), and each spawn
 * paid about 0.4 s of start-up. mpirun itself has not hung once in the
 * measurements of docs/design.md; starting it once per lecture pays that
 * start-up once.
 *
 *  - Sockets, not MPI, between the lecture and its ranks: the parent listens
 *    (wire.c), each rank connects and says hello, then "ready" once MPI is
 *    up. An idle rank blocks in read(): sixteen idle ranks on two cores cost
 *    nothing.
 *  - Open MPI's own messages (banners, "noticed that process rank ..."),
 *    which mpirun prints on its standard streams, are captured through a
 *    pipe and kept: they appear only to explain a failure (lx_pool_explain).
 *    On one machine a rank gets the lecture's stdout and stderr handed over
 *    the socket for the time its function runs, so a student's printf()
 *    goes straight to the console. Across machines (LECTERN_HOSTFILE) the
 *    ranks' output comes back through mpirun: its stdout goes to the
 *    lecture's stdout, its stderr through a filter that keeps back what is
 *    recognisably Open MPI's.
 *  - Inside a Slurm allocation (salloc, sbatch: SLURM_JOB_ID is set) the
 *    same mpirun line places the ranks on the allocation's nodes, as many
 *    per node as SLURM_TASKS_PER_NODE gives (Open MPI's ras/slurm), and
 *    starts them on other nodes through srun (plm/slurm): no hostfile. The
 *    pool is capped at the allocation's tasks, and ranks on other nodes
 *    connect back over TCP as with a hostfile (docs/multinode.md).
 *  - Failures are ours to handle: mpirun runs with recovery on, so the death
 *    of one rank does not make mpirun kill the others (with a SIGTERM that
 *    would hide which rank failed first). The parent kills the pool itself
 *    and the next spawn starts a fresh one.
 *  - Nothing outlives the lecture: mpirun gets SIGTERM when the lecture dies
 *    (PR_SET_PDEATHSIG), and stops its ranks; idle ranks also leave when
 *    their socket closes.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ranks/ranks.h"

extern char **environ;

/* A pool is started with at least this many ranks (LECTERN_POOL_MIN
 * overrides): spawns of 1, 2, 3 and 4 ranks then share one pool, and a
 * lecture that goes from 1 rank to 4 does not pay for a second start
 * (docs/design.md has the measurements). */
#define POOL_MIN_RANKS 4

int lx_pool_min_ranks(void) {
    const char *s = getenv("LECTERN_POOL_MIN");
    if (!s || !*s) return POOL_MIN_RANKS;
    char *end;
    long n = strtol(s, &end, 10);
    if (*end != '\0' || n < 1 || n > LECTERN_MAX_WORLD)
        lx_fatal("LECTERN_POOL_MIN='%s' is not a number of ranks from 1 to %d", s, LECTERN_MAX_WORLD);
    return (int)n;
}

/* ---- a Slurm allocation ---- */

int lx_slurm_count_tasks(const char *s) {
    if (!s || !*s) return -1;
    long total = 0;
    for (;;) {
        char *end;
        long n = strtol(s, &end, 10);
        if (end == s || n < 0) return -1;
        long times = 1;
        s = end;
        if (strncmp(s, "(x", 2) == 0) { /* "2(x3)": 2 tasks on each of 3 nodes */
            times = strtol(s + 2, &end, 10);
            if (end == s + 2 || *end != ')' || times < 1) return -1;
            s = end + 1;
        }
        total += n * times;
        if (total > 1000000) return -1;
        if (*s == '\0') return (int)total;
        if (*s++ != ',') return -1;
    }
}

int lx_pool_slurm(lx_slurm *a) {
    memset(a, 0, sizeof *a);
    const char *job = getenv("SLURM_JOB_ID");
    if (!job || !*job) job = getenv("SLURM_JOBID");
    if (!job || !*job) return 0;
    a->present = 1;
    snprintf(a->job, sizeof a->job, "%s", job);
    const char *nodes = getenv("SLURM_JOB_NODELIST");
    if (!nodes || !*nodes) nodes = getenv("SLURM_NODELIST");
    snprintf(a->nodes, sizeof a->nodes, "%s", nodes && *nodes ? nodes : "?");
    const char *n = getenv("SLURM_JOB_NUM_NODES");
    if (!n || !*n) n = getenv("SLURM_NNODES");
    a->n_nodes = n ? atoi(n) : 0;
    const char *tpn = getenv("SLURM_TASKS_PER_NODE");
    snprintf(a->tasks_per_node, sizeof a->tasks_per_node, "%s", tpn ? tpn : "");
    int tasks = lx_slurm_count_tasks(tpn);
    a->tasks = tasks > 0 ? tasks : 0;
    /* Slurm names a node by its short host name. */
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char *dot = strchr(host, '.');
    if (dot) *dot = '\0';
    a->here_only = a->n_nodes == 1 && strcmp(a->nodes, host) == 0;
    return 1;
}

/* What mpirun printed, kept for explanations: the last CAPTURE_MAX bytes. */
#define CAPTURE_MAX (64 * 1024)

typedef struct pool {
    int size;
    pid_t mpirun; /* 0 when none */
    int reaped;
    int listen_fd;
    int fd[LECTERN_MAX_WORLD];
    int pid[LECTERN_MAX_WORLD];        /* local ranks; 0 elsewhere */
    char host[LECTERN_MAX_WORLD][320]; /* "name (address)" of each rank's host */
    int tcp;
    char address[512];
    char board_name[64];
    board *board;
    int generation;
    /* mpirun's output */
    int out_fd;
    pthread_t reader;
    int reader_running;
    pthread_mutex_t lock;
    char *captured;
    size_t captured_len;
} pool;

static pool P = {.listen_fd = -1, .out_fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER};
static lx_pool_stats stats;

/* The pids the signal-handler path kills: plain ints, written before use. */
static volatile pid_t kill_list[LECTERN_MAX_WORLD + 1];

int lx_pool_size(void) { return P.mpirun ? P.size : 0; }
int lx_pool_fd(int rank) { return P.fd[rank]; }
int lx_pool_pid(int rank) { return P.pid[rank]; }
const char *lx_pool_host(int rank) { return P.host[rank]; }
board *lx_pool_board(void) { return P.board; }
lx_pool_stats lx_pool_get_stats(void) { return stats; }

/* ---- mpirun's output ---- */

/* A line of Open MPI's own: its boxed help texts, its "[host:pid] ..."
 * diagnostics, mpirun's notices. Used across machines, where ranks' stderr
 * comes through the same pipe and everything else is passed on. */
static int in_help_box;

static int is_open_mpi_line(const char *line) {
    size_t n = strlen(line);
    if (n >= 20 && strspn(line, "-") == n) { /* the rules around a help text */
        in_help_box = !in_help_box;
        return 1;
    }
    if (in_help_box) return 1;
    if (line[0] == '[' && strchr(line, ']') && strchr(line, ':') && strchr(line, ':') < strchr(line, ']')) return 1;
    /* ssh's complaints about a host are Open MPI's to report too: they go
     * into the error step (lx_pool_explain). */
    static const char *const starts[] = {"mpirun", "Primary job", "Child job", "ORTE", "PMIx",
                                         "PRTE",   "prterun",     "--------",  "ssh:"};
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++)
        if (strncmp(line, starts[i], strlen(starts[i])) == 0) return 1;
    return 0;
}

static void capture(const char *text, size_t n) {
    pthread_mutex_lock(&P.lock);
    if (!P.captured) P.captured = malloc(CAPTURE_MAX);
    if (P.captured) {
        if (n > CAPTURE_MAX) {
            text += n - CAPTURE_MAX;
            n = CAPTURE_MAX;
        }
        if (P.captured_len + n > CAPTURE_MAX) { /* keep the newest */
            size_t drop = P.captured_len + n - CAPTURE_MAX;
            memmove(P.captured, P.captured + drop, P.captured_len - drop);
            P.captured_len -= drop;
        }
        memcpy(P.captured + P.captured_len, text, n);
        P.captured_len += n;
    }
    pthread_mutex_unlock(&P.lock);
}

/* Reads mpirun's output until it closes. Across machines, lines that are
 * not Open MPI's (a rank's own stderr) are passed on to ours. */
static void *reader_main(void *arg) {
    int fd = (int)(intptr_t)arg;
    int forward = P.tcp;
    char buf[4096], line[4096];
    size_t used = 0;
    ssize_t r;
    in_help_box = 0;
    while ((r = read(fd, buf, sizeof buf)) != 0) {
        if (r < 0) {
            if (errno == EINTR) continue;
            break;
        }
        capture(buf, (size_t)r);
        if (!forward) continue;
        for (ssize_t i = 0; i < r; i++) {
            if (buf[i] != '\n' && used < sizeof line - 2) {
                line[used++] = buf[i];
                continue;
            }
            line[used] = '\0';
            if (!is_open_mpi_line(line)) {
                line[used++] = '\n';
                (void)!write(2, line, used);
            }
            used = 0;
        }
    }
    close(fd);
    return NULL;
}

/* The first line of `text` that starts with `prefix` or contains `needle`. */
static char *find_line(const char *text, const char *needle) {
    for (const char *p = text; *p;) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char *line = strndup(p, n);
        if (strstr(line, needle)) {
            /* ssh ends its messages with "\r\n" (a terminal's line end): no
             * carriage return in the middle of ours. */
            size_t len = strlen(line);
            while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
                line[--len] = '\0';
            return line;
        }
        free(line);
        p += n + (end ? 1 : 0);
    }
    return NULL;
}

/* The first paragraph of Open MPI's first help text, on one line. */
static char *first_help_paragraph(const char *text) {
    const char *rule = strstr(text, "\n-----");
    if (strncmp(text, "-----", 5) == 0) rule = text - 1;
    if (!rule) return NULL;
    const char *p = strchr(rule + 1, '\n');
    if (!p) return NULL;
    p++;
    lx_sb sb = {0};
    while (*p && *p != '\n' && strncmp(p, "-----", 5) != 0) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (sb.len) lx_sb_add(&sb, " ", 1);
        lx_sb_add(&sb, p, n);
        p += n + (end ? 1 : 0);
    }
    return sb.s;
}

char *lx_pool_explain(void) {
    pthread_mutex_lock(&P.lock);
    char *text = P.captured ? strndup(P.captured, P.captured_len) : NULL;
    pthread_mutex_unlock(&P.lock);
    if (!text) return NULL;
    char *found = NULL;
    /* ssh's own words say best why a host could not be reached. */
    static const char *const reach[] = {"ssh:",
                                        "Could not resolve",
                                        "Permission denied",
                                        "Host key verification failed",
                                        "Connection refused",
                                        "No route to host",
                                        "command not found"};
    for (size_t i = 0; !found && i < sizeof reach / sizeof reach[0]; i++)
        found = find_line(text, reach[i]);
    if (found) {
        char *msg = lx_fmt("a host of LECTERN_HOSTFILE could not be reached (%s); check that every host "
                           "there answers `ssh HOST true` without a password and has Open MPI installed",
                           found);
        free(found);
        free(text);
        return msg;
    }
    found = first_help_paragraph(text);
    if (!found) { /* the first line that says anything */
        for (const char *p = text; *p && !found;) {
            const char *end = strchr(p, '\n');
            size_t n = end ? (size_t)(end - p) : strlen(p);
            if (n > 0) found = strndup(p, n);
            p += n + (end ? 1 : 0);
        }
    }
    free(text);
    if (!found) return NULL;
    if (strlen(found) > 400) strcpy(found + 396, " ...");
    char *msg = lx_fmt("Open MPI says: %s", found);
    free(found);
    return msg;
}

/* ---- starting mpirun ---- */

/* Open MPI's mpirun on the PATH: under the names only Open MPI uses first
 * (Debian's alternatives may point plain mpirun at another MPI), then
 * mpirun and mpiexec. */
static char *find_launcher(void) {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    static const char *const names[] = {"mpirun.openmpi", "orterun", "mpirun", "mpiexec"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const char *p = path;
        while (*p) {
            const char *colon = strchr(p, ':');
            size_t n = colon ? (size_t)(colon - p) : strlen(p);
            char *candidate = lx_fmt("%.*s/%s", (int)n, n ? p : ".", names[k]);
            if (access(candidate, X_OK) == 0) return candidate;
            free(candidate);
            p += n + (colon ? 1 : 0);
        }
    }
    return NULL;
}

/* Our environment plus what Open MPI needs here, unless already set:
 * 16 ranks on 2 cores is the point of a lecture (oversubscribe); a rank
 * waiting inside an MPI call gives its core away (yield when idle) instead
 * of spinning on it while the rank it waits for needs that core: the full
 * lecture_08 took 108 and 155 s without it, 6.7 and 15.6 s with it, on a
 * loaded 2-core machine (docs/design.md); containers often run as root,
 * which Open MPI refuses by default; shared-memory transfers through the
 * kernel (CMA), with which a message moves while its sender computes, are
 * asked for only where a probe saw them work (cma.c) and every rank is on
 * this host: many containers refuse them and Open MPI then warns on every
 * run. Open MPI's monitoring pml counts the bytes each rank sends to
 * each peer, collectives' own messages included, for dist_traffic_now()
 * (runtime/comm/comm_pvars.c); OMPI_MCA_pml_monitoring_enable=0 turns it off
 * (the collectives' bytes are then not measured; docs/benchmarks.md
 * measures what it costs).
 *
 * Across hosts (`across`: the ranks reach the lecture over TCP) a waiting
 * rank spins instead (mpi_yield_when_idle=0, Open MPI's own default): a
 * thread that calls sched_yield() in a loop for seconds, as a rank waiting
 * for a TCP message does, kept this machine's kernel threads off its core
 * (Linux 6.18, PREEMPT_NONE, 2 vCPUs: "workqueue lockup ... stuck for 82s",
 * "rcu_preempt kthread starved") and with them the network's softirq work,
 * so the TCP traffic between the ranks stopped for 50-150 s until a kernel
 * watchdog fired; shared memory needs no kernel thread, TCP does. Spinning
 * ranks still stalled up to 11 s where they shared cores with ranks of
 * another session; each rank a session of its own (own_session() in
 * spawn_rank.c) ended that (docs/multinode.md, "The stall of async
 * all-reduces across hosts").
 *
 * Open MPI's hwloc, loading the machine's topology in mpirun and again in
 * every rank, read each PCI device's configuration space through sysfs; in
 * a VM every 4-byte read of it traps to the hypervisor, and those reads were
 * about 9% of the busy CPU time of a run of tests/ranks/test_spawn.py (perf,
 * system-wide). Nothing here uses the PCI part of the topology (ranks are
 * not bound, the transports are shared memory and TCP, NCCL reads its own),
 * so hwloc's PCI components are left out (tests/fixtures/spawn_basic, which starts a pool
 * of 4 and spawns on it: 0.98 s instead of 1.07, median of 8 runs each way,
 * alternated, 2-core VM). The lecture's own `lstopo-no-graphics` keeps them.
 *
 * On one host the ranks talk through shared memory (ob1 over vader), so the
 * point-to-point layers for networks, UCX's and the MTLs behind "cm"
 * (libfabric, PSM), are left out rather than opened and probed at every
 * rank's MPI_Init (spawn_basic: 0.76 s instead of 0.96, 6 runs each way;
 * leaving out the network BTLs or UCX's one-sided component instead changed
 * nothing). Both together, bench/bench_spawn (3 runs each way, alternated):
 * starting a pool of 4 took 0.35-0.39 s instead of 0.69-0.73, growing it to
 * 8 ranks 0.68-0.82 s instead of 1.16-1.22, to 16 1.52-1.84 s instead of
 * 1.95-2.15 (docs/benchmarks.md). Across hosts Open MPI chooses as it
 * would.
 *
 * When a spawn fails, the lecture kills the ranks itself (lx_pool_kill),
 * then sends mpirun SIGTERM; mpirun's own kill sequence then waited
 * odls_base_sigkill_timeout (1 s by default) after each of its signals to
 * ranks that were already gone: a failing lecture ended 1-2 s after its
 * error, every time (groups_fixture's "freed" case: 0.4 s with 0, 0.4,
 * 1.4 or 2.4 s without). With 0 mpirun sends SIGKILL right after SIGTERM:
 * nothing is left to stop gently by then. */
/* The single-copy mechanism the running pool's Open MPI was given ("cma",
 * "none", or what the user's environment set), for the trace. */
static char single_copy[32] = "none";

const char *lx_pool_single_copy(void) { return single_copy; }

static char **launch_environment(const char *token, int across) {
    static const char *const defaults[][2] = {
            {"OMPI_MCA_rmaps_base_oversubscribe", "1"},
            {"OMPI_MCA_mpi_yield_when_idle", "1"},
            {"OMPI_ALLOW_RUN_AS_ROOT", "1"},
            {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
            {"OMPI_MCA_pml_monitoring_enable", "1"},
            {"HWLOC_COMPONENTS", "-pci,-linuxpci"},
            {"OMPI_MCA_pml", "^ucx,cm"}, /* one host only */
            {"OMPI_MCA_odls_base_sigkill_timeout", "0"},
    };
    size_t n = 0;
    while (environ[n])
        n++;
    /* ours, the defaults, the copy mechanism, the token, NULL */
    char **env = calloc(n + sizeof defaults / sizeof defaults[0] + 3, sizeof *env);
    if (!env) lx_fatal("out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], POOL_TOKEN_ENV "=", strlen(POOL_TOKEN_ENV) + 1) != 0) env[k++] = environ[i];
    /* In a Slurm allocation its tasks are the slots, and more ranks than
     * those are not to be placed (spawn() refuses them first). */
    lx_slurm slurm;
    int in_allocation = lx_pool_slurm(&slurm);
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
        if (in_allocation && strcmp(defaults[i][0], "OMPI_MCA_rmaps_base_oversubscribe") == 0) continue;
        if (across && strcmp(defaults[i][0], "OMPI_MCA_pml") == 0) continue;
        const char *value = defaults[i][1];
        if (across && strcmp(defaults[i][0], "OMPI_MCA_mpi_yield_when_idle") == 0) value = "0";
        if (!getenv(defaults[i][0])) env[k++] = lx_fmt("%s=%s", defaults[i][0], value);
    }
    const char *copy = getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
    if (!copy) {
        copy = !getenv("LECTERN_HOSTFILE") && !in_allocation && lx_cma_works() ? "cma" : "none";
        env[k++] = lx_fmt("OMPI_MCA_btl_vader_single_copy_mechanism=%s", copy);
    }
    snprintf(single_copy, sizeof single_copy, "%s", copy);
    env[k++] = lx_fmt("%s=%s", POOL_TOKEN_ENV, token);
    env[k] = NULL;
    return env;
}

static void free_environment(char **env) {
    for (size_t i = 0; env[i]; i++) {
        int ours = 1;
        for (size_t j = 0; environ[j]; j++)
            if (env[i] == environ[j]) {
                ours = 0;
                break;
            }
        if (ours) free(env[i]);
    }
    free(env);
}

static void random_token(char *out, size_t size) {
    unsigned char raw[16];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        /* No entropy source: the token still tells our ranks from strays. */
        for (size_t i = 0; i < sizeof raw; i++)
            raw[i] = (unsigned char)(rand() ^ getpid() ^ (int)i);
    }
    size_t o = 0;
    for (size_t i = 0; i < sizeof raw && o + 3 <= size; i++)
        o += (size_t)snprintf(out + o, size - o, "%02x", raw[i]);
}

/* Forks mpirun. Its stdin is /dev/null (it would otherwise hand the
 * lecture's input to rank 0), its output goes to `out_w` (on one machine
 * both streams, across machines stderr only); it gets its own process group
 * (a Ctrl-C in the terminal reaches the lecture, which stops the pool), and
 * SIGTERM when the lecture dies. */
static pid_t fork_launcher(char *const argv[], char *const envp[], int out_w, int both) {
    pid_t parent = getpid();
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_t pid = fork();
    if (pid != 0) {
        if (devnull >= 0) close(devnull);
        return pid;
    }
    /* The child: async-signal-safe calls only, then exec. */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127); /* the lecture died already */
    if (devnull >= 0) dup2(devnull, 0);
    if (both) dup2(out_w, 1);
    dup2(out_w, 2);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(argv[0], argv, envp);
    _exit(127);
}

static void remember_pids_for_signals(void) {
    int k = 0;
    for (int r = 0; r < P.size; r++)
        if (P.pid[r] > 0) kill_list[k++] = P.pid[r];
    while (k < LECTERN_MAX_WORLD)
        kill_list[k++] = 0;
    kill_list[LECTERN_MAX_WORLD] = P.mpirun;
}

/* 1 once mpirun has exited (and is reaped), waiting up to `seconds` for it. */
static int reap(double seconds) {
    if (!P.mpirun || P.reaped) return 1;
    double t0 = now_seconds();
    for (;;) {
        int status;
        pid_t r = waitpid(P.mpirun, &status, WNOHANG);
        if (r == P.mpirun || (r < 0 && errno == ECHILD)) {
            P.reaped = 1;
            return 1;
        }
        if (now_seconds() - t0 >= seconds) return 0;
        lx_sleep_seconds(0.001);
    }
}

static void reset(void) {
    for (int r = 0; r < LECTERN_MAX_WORLD; r++) {
        if (P.fd[r] > 0) close(P.fd[r]);
        P.fd[r] = -1;
        P.pid[r] = 0;
    }
    if (P.listen_fd >= 0) close(P.listen_fd);
    P.listen_fd = -1;
    if (P.reader_running) {
        /* The reader ends when mpirun's output closes, which is when mpirun
         * has exited. Should some process still hold the pipe, it is left
         * to finish on its own rather than holding us up. */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 2;
        if (pthread_timedjoin_np(P.reader, NULL, &until) != 0) pthread_detach(P.reader);
    }
    P.reader_running = 0;
    if (P.board) munmap(P.board, sizeof(board));
    P.board = NULL;
    if (P.board_name[0]) shm_unlink(P.board_name);
    P.board_name[0] = '\0';
    P.mpirun = 0;
    P.reaped = 0;
    P.size = 0;
    for (int i = 0; i <= LECTERN_MAX_WORLD; i++)
        kill_list[i] = 0;
}

/* mpirun's descendants on this host (the ssh it runs to each other host,
 * in process groups of their own), found from /proc: up to `max`. */
static int descendants(pid_t root, pid_t *out, int max) {
    int n = 0;
    out[n++] = root;
    for (int i = 0; i < n; i++) { /* breadth first: children of out[i] */
        DIR *d = opendir("/proc");
        if (!d) break;
        struct dirent *e;
        while ((e = readdir(d)) && n < max) {
            char path[300], buf[512];
            if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
            snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
            FILE *f = fopen(path, "r");
            if (!f) continue;
            size_t got = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[got] = '\0';
            /* "pid (comm) state ppid ...": comm may hold spaces and ')' */
            char *close = strrchr(buf, ')');
            int ppid = 0;
            if (close && sscanf(close + 1, " %*c %d", &ppid) == 1 && ppid == out[i]) out[n++] = atoi(e->d_name);
        }
        closedir(d);
    }
    return n;
}

void lx_pool_kill(void) {
    if (!P.mpirun) return;
    for (int r = 0; r < P.size; r++)
        if (P.pid[r] > 0) kill(P.pid[r], SIGKILL);
    /* Taken before mpirun goes: its children are orphans after. An ssh to a
     * host that is gone waits for minutes, holding the lecture's stdout. */
    pid_t family[64];
    int n_family = descendants(P.mpirun, family, 64);
    if (!reap(0)) {
        kill(P.mpirun, SIGTERM); /* it stops the ranks on other hosts */
        if (!reap(3.0)) {
            kill(P.mpirun, SIGKILL);
            reap(3.0);
        }
    }
    for (int i = 1; i < n_family; i++)
        kill(family[i], SIGKILL);
    reset();
}

void lx_pool_kill_from_signal(void) {
    for (int i = 0; i < LECTERN_MAX_WORLD; i++)
        if (kill_list[i] > 0) kill(kill_list[i], SIGKILL);
    if (kill_list[LECTERN_MAX_WORLD] > 0) kill(kill_list[LECTERN_MAX_WORLD], SIGTERM);
    if (P.board_name[0]) shm_unlink(P.board_name); /* a crash while the pool starts */
}

void lx_pool_stop(void) {
    if (!P.mpirun) return;
    /* Closing the sockets is the ranks' signal to leave: each finalizes MPI
     * and exits, then mpirun does. */
    for (int r = 0; r < P.size; r++) {
        if (P.fd[r] >= 0) close(P.fd[r]);
        P.fd[r] = -1;
    }
    if (!reap(10.0)) { /* a sanitizer build's leak checks at exit take seconds */
        lx_pool_kill();
        return;
    }
    reset();
}

/* ---- the handshake ---- */

/* A rank maps the board before it says hello: once all have, the name can
 * go, the memory stays until the last unmap, and nothing is left in
 * /dev/shm whatever happens next (even a lecture killed by SIGKILL). */
static void unlink_board_name(void) {
    if (P.board_name[0]) shm_unlink(P.board_name);
    P.board_name[0] = '\0';
}


/* Reads a rank's hello on a fresh connection. Returns its pool rank, or -1
 * (the connection is then closed: a stranger, or a rank that died). */
static int take_hello(int fd, const char *token, const char *host) {
    /* A stranger that connects and says nothing must not hold us up. */
    struct timeval wait = {.tv_sec = 5, .tv_usec = 0}, forever = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    uint32_t type;
    char *body;
    size_t size;
    if (lx_wire_recv(fd, &type, &body, &size) != 0) return -1;
    pool_hello h;
    int rank = -1;
    if (type == MSG_HELLO && size == sizeof h) {
        memcpy(&h, body, sizeof h);
        h.token[sizeof h.token - 1] = '\0';
        h.host[sizeof h.host - 1] = '\0';
        if (strcmp(h.token, token) == 0 && h.pool_rank >= 0 && h.pool_rank < P.size && P.fd[h.pool_rank] < 0)
            rank = h.pool_rank;
    }
    free(body);
    if (rank < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &forever, sizeof forever);
    P.fd[rank] = fd;
    P.pid[rank] = (!P.tcp || strcmp(h.host, host) == 0) ? h.pid : 0;
    /* The name a host gives itself may mean nothing here (a container's, a
     * node's short name): the address it connected from names it too. */
    char addr[INET6_ADDRSTRLEN] = "";
    struct sockaddr_storage peer;
    socklen_t len = sizeof peer;
    if (P.tcp && getpeername(fd, (struct sockaddr *)&peer, &len) == 0)
        getnameinfo((struct sockaddr *)&peer, len, addr, sizeof addr, NULL, 0, NI_NUMERICHOST);
    const char *shown = strncmp(addr, "::ffff:", 7) == 0 ? addr + 7 : addr; /* IPv4 on an IPv6 socket */
    if (addr[0]) snprintf(P.host[rank], sizeof P.host[rank], "%s (%s)", h.host, shown);
    else snprintf(P.host[rank], sizeof P.host[rank], "%s", h.host);
    if (!P.tcp) { /* the lecture's stdout and stderr, for the rank's own output */
        int fds[2] = {1, 2}, devnull = -1;
        for (int i = 0; i < 2; i++) {
            if (fcntl(fds[i], F_GETFD) != -1) continue;
            /* The lecture runs with that stream closed: so do the ranks. */
            if (devnull < 0) devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
            fds[i] = devnull;
        }
        int rc = fds[0] >= 0 && fds[1] >= 0 ? lx_wire_send_fds(fd, fds, 2) : -1;
        if (devnull >= 0) close(devnull);
        if (rc != 0) return -1;
    }
    return rank;
}

/* Waits until every rank has said hello and then "ready". 0, or -1 with
 * *why set: "timeout", "mpirun" (it exited) or "rank" (one died starting). */
static int handshake(const char *token, double limit, const char **why) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    double t0 = now_seconds();
    int pend[LECTERN_MAX_WORLD * 2]; /* connected, hello not read yet */
    int n_pend = 0, ready = 0, hellos = 0;
    int is_ready[LECTERN_MAX_WORLD] = {0};
    while (ready < P.size) {
        if (now_seconds() - t0 > limit) *why = "timeout";
        else if (reap(0)) *why = "mpirun";
        if (**why) break;
        struct pollfd fds[1 + LECTERN_MAX_WORLD * 3];
        int nf = 0;
        fds[nf++] = (struct pollfd){.fd = P.listen_fd, .events = POLLIN};
        for (int i = 0; i < n_pend; i++)
            fds[nf++] = (struct pollfd){.fd = pend[i], .events = POLLIN};
        int first_rank = nf;
        for (int r = 0; r < P.size; r++)
            if (P.fd[r] >= 0 && !is_ready[r]) fds[nf++] = (struct pollfd){.fd = P.fd[r], .events = POLLIN};
        if (poll(fds, (nfds_t)nf, 20) <= 0) continue;
        int polled = n_pend; /* the connections fds[1..polled] stand for */
        if (fds[0].revents & POLLIN) {
            int c = accept4(P.listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0 && n_pend < (int)(sizeof pend / sizeof pend[0])) {
                if (P.tcp) {
                    int one = 1;
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                }
                pend[n_pend++] = c;
            } else if (c >= 0) {
                close(c);
            }
        }
        int k = 0;
        for (int i = 0; i < n_pend; i++) {
            if (i >= polled || !(fds[1 + i].revents & (POLLIN | POLLHUP | POLLERR))) {
                pend[k++] = pend[i];
                continue;
            }
            /* The hello is one small write right after connecting. */
            if (take_hello(pend[i], token, host) < 0) close(pend[i]);
            else if (++hellos == P.size) unlink_board_name();
        }
        n_pend = k;
        for (int i = first_rank; i < nf; i++) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int r;
            for (r = 0; r < P.size && P.fd[r] != fds[i].fd; r++) {}
            if (r == P.size) continue;
            uint32_t type;
            char *body;
            size_t size;
            if (lx_wire_recv(fds[i].fd, &type, &body, &size) != 0) {
                *why = "rank";
                break;
            }
            free(body);
            if (type == MSG_READY) {
                is_ready[r] = 1;
                ready++;
            }
        }
        if (**why) break;
    }
    for (int j = 0; j < n_pend; j++)
        close(pend[j]);
    return **why ? -1 : 0;
}

static int start(int size, double limit, char **error) {
    /* Before the fork, so nothing buffered is written twice; and before
     * anything is made, so a write that fails (a closed pipe) leaves nothing
     * behind. */
    fflush(NULL);
    reset();
    P.generation++;
    P.size = size;
    const char *hostfile = getenv("LECTERN_HOSTFILE");
    /* Inside a Slurm allocation mpirun finds its nodes itself; ranks on
     * nodes other than this one reach the lecture over TCP. */
    lx_slurm slurm;
    P.tcp = (hostfile && *hostfile) || (lx_pool_slurm(&slurm) && !slurm.here_only);
    if (hostfile && *hostfile && access(hostfile, R_OK) != 0) {
        *error = lx_fmt("LECTERN_HOSTFILE='%s' cannot be read: %s", hostfile, strerror(errno));
        return -1;
    }
    char *launcher = find_launcher();
    if (!launcher) {
        *error = lx_fmt("mpirun was not found on the PATH: install Open MPI (Debian: openmpi-bin)");
        return -1;
    }

    /* The board: one slot per pool rank, on this host. */
    snprintf(P.board_name, sizeof P.board_name, "/lectern-%d-%d", (int)getpid(), P.generation);
    shm_unlink(P.board_name); /* a leftover of a crashed run with our pid */
    P.board = lx_board_map(P.board_name, 1);
    if (!P.board)
        fprintf(stderr, "lectern: no status board in /dev/shm (%s): crashes will be found by the timeout only\n",
                strerror(errno));

    char tag[96];
    snprintf(tag, sizeof tag, "lectern-%d-%d", (int)getpid(), P.generation);
    P.listen_fd = lx_wire_listen(P.tcp, tag, P.address, sizeof P.address);
    if (P.listen_fd < 0) {
        free(launcher);
        *error = lx_fmt("cannot open a socket for the ranks: %s", strerror(errno));
        return -1;
    }
    char token[40];
    random_token(token, sizeof token);

    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) lx_fatal("cannot find this program's path (/proc/self/exe): %s", strerror(errno));
    exe[len] = '\0';
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char cwd[4096] = "/";
    if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "/");
    char np[16];
    snprintf(np, sizeof np, "%d", size);

    char *argv[40];
    int a = 0;
    argv[a++] = launcher;
    argv[a++] = "-np";
    argv[a++] = np;
    /* Ranks share the cores: OpenBLAS threads of a rank must not be pinned
     * to one core. */
    argv[a++] = "--bind-to";
    argv[a++] = "none";
    argv[a++] = "--stdin";
    argv[a++] = "none";
    /* The death of a rank is the lecture's to report, not a reason for
     * mpirun to kill the others (see the top of this file). */
    argv[a++] = "--enable-recovery";
    argv[a++] = "--mca";
    argv[a++] = "orte_abort_on_non_zero_status";
    argv[a++] = "0";
    argv[a++] = "-x";
    argv[a++] = POOL_TOKEN_ENV;
    argv[a++] = "--wdir";
    argv[a++] = cwd;
    if (hostfile && *hostfile) {
        argv[a++] = "--hostfile";
        argv[a++] = (char *)hostfile;
    }
    argv[a++] = exe;
    argv[a++] = RANK_FLAG;
    argv[a++] = P.address;
    argv[a++] = P.board_name;
    argv[a++] = host;
    argv[a] = NULL;

    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) lx_fatal("cannot make a pipe: %s", strerror(errno));
    char **env = launch_environment(token, P.tcp);
    P.mpirun = fork_launcher(argv, env, pipefd[1], !P.tcp);
    free_environment(env);
    free(launcher);
    close(pipefd[1]);
    if (P.mpirun < 0) {
        P.mpirun = 0;
        close(pipefd[0]);
        *error = lx_fmt("cannot start mpirun: %s", strerror(errno));
        return -1;
    }
    P.captured_len = 0;
    if (pthread_create(&P.reader, NULL, reader_main, (void *)(intptr_t)pipefd[0]) == 0) P.reader_running = 1;
    else close(pipefd[0]);
    stats.starts++;

    const char *why = "";
    if (handshake(token, limit, &why) != 0) {
        remember_pids_for_signals();
        if (strcmp(why, "timeout") == 0) {
            lx_pool_kill();
            *error = lx_fmt("Open MPI did not start %d rank%s within %g s", size, size == 1 ? "" : "s", limit);
            return -2; /* worth another try */
        }
        reap(2.0); /* mpirun's last words are in the pipe by now */
        lx_pool_kill();
        char *explain = lx_pool_explain();
        *error = lx_fmt("Open MPI could not start them%s%s", explain ? ": " : "", explain ? explain : "");
        free(explain);
        return -1;
    }
    remember_pids_for_signals();
    close(P.listen_fd);
    P.listen_fd = -1;
    return 0;
}

/* Is every rank of the pool still there? An idle rank never speaks
 * unasked, so a socket with something to read has closed: that rank died
 * between spawns (the out-of-memory killer, a kill from outside). */
static int healthy(void) {
    if (!P.mpirun || reap(0)) return 0;
    struct pollfd fds[LECTERN_MAX_WORLD];
    for (int r = 0; r < P.size; r++)
        fds[r] = (struct pollfd){.fd = P.fd[r], .events = POLLIN};
    int pr = poll(fds, (nfds_t)P.size, 0);
    if (pr != 0) return 0;
    for (int r = 0; r < P.size; r++)
        if (P.board && __atomic_load_n(&P.board->slot[r].state, __ATOMIC_ACQUIRE) == SLOT_FAILED) return 0;
    return 1;
}

int lx_pool_ensure(int world_size, double limit, int *started_now, char **error) {
    *started_now = 0;
    *error = NULL;
    if (P.mpirun && healthy() && P.size >= world_size) return 0;
    /* Too small, or broken: a clean stop of the old pool, then a new one. */
    if (P.mpirun) {
        if (healthy()) lx_pool_stop();
        else lx_pool_kill();
    }
    static int registered;
    if (!registered) { /* however the lecture ends, the pool ends with it */
        atexit(lx_pool_stop);
        registered = 1;
    }
    int min = lx_pool_min_ranks();
    int size = world_size < min ? min : world_size;
    /* In a Slurm allocation, never more ranks than its tasks (spawn()
     * refused a world larger than that already). */
    lx_slurm slurm;
    if (lx_pool_slurm(&slurm) && slurm.tasks > 0 && size > slurm.tasks)
        size = world_size > slurm.tasks ? world_size : slurm.tasks;
    *started_now = 1;
    for (int attempt = 0;; attempt++) {
        int rc = start(size, limit, error);
        if (rc == 0) return 0;
        if (rc != -2 || attempt == 2) {
            reset();
            return -1;
        }
        stats.retries++;
        fprintf(stderr, "lectern: %s; trying again\n", *error);
        free(*error);
        *error = NULL;
    }
}
