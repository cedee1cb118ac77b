/*
 * spawn_board.c: the status board, one slot per pool rank in shared memory
 * on the lecture's host.
 *
 * Before each call that can block, and at each step, a rank writes where it
 * is into its slot; its signal handler and exit hook write how it died.
 * Writing to memory is safe in a signal handler, where sending a message
 * is not, and the parent can read a slot even when the rank is stuck or
 * gone. Stacks are kept as plain text in the slot,
 * "line<TAB>path<TAB>function<NEWLINE>" per frame, outermost first. The
 * parent clears a rank's slot before each spawn it hands that rank.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trace/trace.h"
#include "ranks/ranks.h"

void lx_sleep_seconds(double s) {
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

board *lx_board_map(const char *name, int create) {
    int fd = shm_open(name, create ? (O_RDWR | O_CREAT | O_EXCL) : O_RDWR, 0600);
    if (fd < 0) return NULL;
    if (create && ftruncate(fd, sizeof(board)) != 0) {
        close(fd);
        shm_unlink(name);
        return NULL;
    }
    void *p = mmap(NULL, sizeof(board), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : (board *)p;
}

void lx_board_slot_reset(board_slot *s) {
    __atomic_store_n(&s->progress, 0, __ATOMIC_RELEASE);
    s->failed_at = 0;
    s->operation[0] = '\0';
    s->waiting = 0;
    s->peer = -1;
    s->where[0] = '\0';
    s->failure[0] = '\0';
    s->failure_frames[0] = '\0';
    s->version = 0;
    memset(s->sends_to, 0, sizeof s->sends_to);
    memset(s->recvs_from, 0, sizeof s->recvs_from);
    s->collectives = 0;
    s->sampled = 0;
    s->sample[0] = '\0';
    for (int i = 0; i < 2; i++)
        s->need_kind[i] = LX_NEED_NONE;
    __atomic_store_n(&s->state, SLOT_IDLE, __ATOMIC_RELEASE);
}

/* Writes frames as text into `out` (cut short rather than overflowing). */
void lx_frames_to_text(const lx_frame *frames, int n, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        int w = snprintf(out + used, size - used, "%d\t%s\t%s\n", frames[i].line, frames[i].path ? frames[i].path : "?",
                         frames[i].function ? frames[i].function : "?");
        if (w < 0 || (size_t)w >= size - used) {
            out[used] = '\0';
            return;
        }
        used += (size_t)w;
    }
}

/* The inverse, as the stack JSON of a step: [{"path","line","function"}...]. */
cJSON *lx_frames_text_to_json(const char *text) {
    cJSON *stack = cJSON_CreateArray();
    const char *p = text;
    while (*p) {
        const char *end = strchr(p, '\n');
        if (!end) break;
        char *line = strndup(p, (size_t)(end - p));
        char *tab1 = strchr(line, '\t');
        char *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
        if (tab2) {
            *tab1 = *tab2 = '\0';
            cJSON *f = cJSON_CreateObject();
            cJSON_AddStringToObject(f, "path", tab1 + 1);
            cJSON_AddNumberToObject(f, "line", atoi(line));
            cJSON_AddStringToObject(f, "function", tab2 + 1);
            cJSON_AddItemToArray(stack, f);
        }
        free(line);
        p = end + 1;
    }
    return stack;
}

/* The innermost frame of a frames text: where the rank was. */
place lx_innermost(const char *text) {
    place pl;
    memset(&pl, 0, sizeof pl);
    const char *last = NULL;
    for (const char *p = text; *p;) {
        const char *end = strchr(p, '\n');
        if (!end) break;
        last = p;
        p = end + 1;
    }
    if (!last) return pl;
    const char *path = strchr(last, '\t');
    const char *fn = path ? strchr(path + 1, '\t') : NULL;
    const char *end = fn ? strchr(fn + 1, '\n') : NULL;
    if (!end) return pl;
    pl.known = 1;
    pl.line = atoi(last);
    snprintf(pl.path, sizeof pl.path, "%.*s", (int)(fn - path - 1), path + 1);
    snprintf(pl.function, sizeof pl.function, "%.*s", (int)(end - fn - 1), fn + 1);
    return pl;
}
