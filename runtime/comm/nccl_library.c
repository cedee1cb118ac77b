/*
 * nccl_library.c: the table of nccl_api.h over the real NCCL and the CUDA
 * runtime's streams and events.
 *
 * NCCL is loaded, not linked: a binary linked with libnccl fails before
 * main() wherever no libnccl can be found, a lecture that never uses a GPU
 * included; and libnccl is over 200 MB of code to map into every rank. So
 * the first NCCL spawn opens it with dlopen() (LECTERN_NCCL_LIBRARY names
 * the file, default libnccl.so.2, looked up as the loader looks up
 * libraries, the binary's rpath included), asks ncclGetVersion, refuses a
 * version older than LX_NCCL_VERSION_FLOOR (ncclCommSplit came in 2.18)
 * and finds each function with dlsym(). Each pointer below has the type of
 * nccl.h's own declaration, so the compiler checks every call against
 * the header this was built with, as cublas_lazy.c does for cuBLAS.
 *
 * Built where CUDA and NCCL's header are (make print-nccl); elsewhere
 * lx_nccl_library says the build has no NCCL.
 */
#include <stdio.h>
#include <string.h>

#include "comm/nccl_api.h"

const char *lx_nccl_version_text(int code, char *buf, size_t size) {
    /* From 2.9 on, major * 10000 + minor * 100 + patch; before, major * 1000 + minor * 100 + patch. */
    int major = code >= 10000 ? code / 10000 : code / 1000;
    int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
    snprintf(buf, size, "%d.%d.%d", major, minor, code % 100);
    return buf;
}

#if defined(LECTERN_CUDA) && LECTERN_NCCL

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>

/* The table passes NCCL's and CUDA's codes through: the numbers nccl_api.h
 * names must be theirs. */
_Static_assert(LX_NCCL_OK == (int)ncclSuccess, "ncclSuccess");
_Static_assert(LX_NCCL_SYSTEM_ERROR == (int)ncclSystemError, "ncclSystemError");
_Static_assert(LX_NCCL_INVALID_USAGE == (int)ncclInvalidUsage, "ncclInvalidUsage");
_Static_assert(LX_NCCL_REMOTE_ERROR == (int)ncclRemoteError, "ncclRemoteError");
_Static_assert(LX_NCCL_IN_PROGRESS == (int)ncclInProgress, "ncclInProgress");
_Static_assert(LX_DEVICE_OK == (int)cudaSuccess, "cudaSuccess");
_Static_assert(LX_DEVICE_NOT_READY == (int)cudaErrorNotReady, "cudaErrorNotReady");
_Static_assert(LX_NCCL_SPLIT_NOCOLOR == NCCL_SPLIT_NOCOLOR, "NCCL_SPLIT_NOCOLOR");
_Static_assert(sizeof(lx_nccl_id) == sizeof(ncclUniqueId), "ncclUniqueId");

/* The functions used, as X(name). */
#define NCCL_FUNCTIONS(X)    \
    X(ncclGetVersion)        \
    X(ncclGetUniqueId)       \
    X(ncclCommInitRank)      \
    X(ncclCommSplit)         \
    X(ncclCommDestroy)       \
    X(ncclCommAbort)         \
    X(ncclCommGetAsyncError) \
    X(ncclGetErrorString)    \
    X(ncclGetLastError)      \
    X(ncclGroupStart)        \
    X(ncclGroupEnd)          \
    X(ncclSend)              \
    X(ncclRecv)              \
    X(ncclAllReduce)         \
    X(ncclReduce)            \
    X(ncclBroadcast)         \
    X(ncclReduceScatter)     \
    X(ncclAllGather)

#define POINTER(name) __typeof__(name) *name;
static struct { NCCL_FUNCTIONS(POINTER) } nccl;

static void *library;
static const lx_nccl_api *loaded; /* NULL when it could not be */
static char why_not[512];
static char name[600];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static ncclComm_t C(lx_nccl_comm c) { return (ncclComm_t)(void *)c; }
static cudaStream_t S(lx_nccl_stream s) { return (cudaStream_t)(void *)s; }
static cudaEvent_t E(lx_nccl_event e) { return (cudaEvent_t)(void *)e; }

static ncclRedOp_t red_op(dist_op op) {
    switch (op) {
    case DIST_AVG: return ncclAvg;
    case DIST_MIN: return ncclMin;
    case DIST_MAX: return ncclMax;
    default: return ncclSum;
    }
}

/* NCCL's element type for a tensor's dtype: comm_calls.c lets only these
 * three reach a backend (fp8 is refused there). */
static ncclDataType_t nccl_type(dtype dt) {
    switch (dt) {
    case DTYPE_BF16: return ncclBfloat16;
    case DTYPE_F16: return ncclFloat16;
    default: return ncclFloat;
    }
}

static int get_unique_id(lx_nccl_id *id) { return nccl.ncclGetUniqueId((ncclUniqueId *)(void *)id); }

static int comm_init_rank(lx_nccl_comm *comm, int nranks, const lx_nccl_id *id, int rank) {
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t c = NULL;
    int rc = nccl.ncclCommInitRank(&c, nranks, u, rank);
    *comm = (lx_nccl_comm)(void *)c;
    return rc;
}

static int comm_split(lx_nccl_comm comm, int color, int key, lx_nccl_comm *out) {
    ncclComm_t c = NULL;
    int rc = nccl.ncclCommSplit(C(comm), color, key, &c, NULL);
    *out = (lx_nccl_comm)(void *)c;
    return rc;
}

static int comm_destroy(lx_nccl_comm comm) { return nccl.ncclCommDestroy(C(comm)); }
static int comm_abort(lx_nccl_comm comm) { return nccl.ncclCommAbort(C(comm)); }

static int comm_async_error(lx_nccl_comm comm, int *error) {
    ncclResult_t e = ncclSuccess;
    int rc = nccl.ncclCommGetAsyncError(C(comm), &e);
    *error = (int)e;
    return rc;
}

static const char *error_string(int status) { return nccl.ncclGetErrorString((ncclResult_t)status); }
static const char *last_error(lx_nccl_comm comm) { return nccl.ncclGetLastError(C(comm)); }
static int group_start(void) { return nccl.ncclGroupStart(); }
static int group_end(void) { return nccl.ncclGroupEnd(); }

static int lib_send(const void *buf, size_t count, dtype dt, int peer, lx_nccl_comm comm, lx_nccl_stream stream) {
    return nccl.ncclSend(buf, count, nccl_type(dt), peer, C(comm), S(stream));
}

static int lib_recv(void *buf, size_t count, dtype dt, int peer, lx_nccl_comm comm, lx_nccl_stream stream) {
    return nccl.ncclRecv(buf, count, nccl_type(dt), peer, C(comm), S(stream));
}

static int all_reduce(const void *in, void *out, size_t count, dtype dt, dist_op op, lx_nccl_comm comm,
                      lx_nccl_stream stream) {
    return nccl.ncclAllReduce(in, out, count, nccl_type(dt), red_op(op), C(comm), S(stream));
}

static int reduce(const void *in, void *out, size_t count, dtype dt, dist_op op, int root, lx_nccl_comm comm,
                  lx_nccl_stream stream) {
    return nccl.ncclReduce(in, out, count, nccl_type(dt), red_op(op), root, C(comm), S(stream));
}

static int broadcast(const void *in, void *out, size_t count, dtype dt, int root, lx_nccl_comm comm,
                     lx_nccl_stream stream) {
    return nccl.ncclBroadcast(in, out, count, nccl_type(dt), root, C(comm), S(stream));
}

static int reduce_scatter(const void *in, void *out, size_t count, dtype dt, dist_op op, lx_nccl_comm comm,
                          lx_nccl_stream stream) {
    return nccl.ncclReduceScatter(in, out, count, nccl_type(dt), red_op(op), C(comm), S(stream));
}

static int all_gather(const void *in, void *out, size_t count, dtype dt, lx_nccl_comm comm, lx_nccl_stream stream) {
    return nccl.ncclAllGather(in, out, count, nccl_type(dt), C(comm), S(stream));
}

static int set_device(int device) { return cudaSetDevice(device); }

/* Non-blocking: no implicit order with the legacy default stream. */
static int stream_create(lx_nccl_stream *stream) {
    cudaStream_t s = NULL;
    int rc = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    *stream = (lx_nccl_stream)(void *)s;
    return rc;
}

static int stream_destroy(lx_nccl_stream stream) { return cudaStreamDestroy(S(stream)); }

static int event_create(lx_nccl_event *event) {
    cudaEvent_t e = NULL;
    int rc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    *event = (lx_nccl_event)(void *)e;
    return rc;
}

static int event_destroy(lx_nccl_event event) { return cudaEventDestroy(E(event)); }
static int event_record(lx_nccl_event event, lx_nccl_stream stream) { return cudaEventRecord(E(event), S(stream)); }
static int event_query(lx_nccl_event event) { return cudaEventQuery(E(event)); }

static int stream_wait_event(lx_nccl_stream stream, lx_nccl_event event) {
    return cudaStreamWaitEvent(S(stream), E(event), 0);
}

static int alloc(void **p, size_t bytes) { return cudaMalloc(p, bytes); }
static int release(void *p) { return cudaFree(p); }
static int zero(void *p, size_t bytes) { return cudaMemset(p, 0, bytes); }

static int copy(void *dst, const void *src, size_t bytes, lx_nccl_stream stream) {
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, S(stream));
}

static const char *device_error_string(int status) { return cudaGetErrorString((cudaError_t)status); }

static lx_nccl_api table = {
        .emulated = 0,
        .get_unique_id = get_unique_id,
        .comm_init_rank = comm_init_rank,
        .comm_split = comm_split,
        .comm_destroy = comm_destroy,
        .comm_abort = comm_abort,
        .comm_async_error = comm_async_error,
        .error_string = error_string,
        .last_error = last_error,
        .group_start = group_start,
        .group_end = group_end,
        .send = lib_send,
        .recv = lib_recv,
        .all_reduce = all_reduce,
        .reduce = reduce,
        .broadcast = broadcast,
        .reduce_scatter = reduce_scatter,
        .all_gather = all_gather,
        .set_device = set_device,
        .stream_create = stream_create,
        .stream_destroy = stream_destroy,
        .event_create = event_create,
        .event_destroy = event_destroy,
        .event_record = event_record,
        .event_query = event_query,
        .stream_wait_event = stream_wait_event,
        .alloc = alloc,
        .release = release,
        .zero = zero,
        .copy = copy,
        .device_error_string = device_error_string,
};

/* The file the loader found, for messages. */
static const char *where(const char *asked) {
    struct link_map *map = NULL;
    if (library && dlinfo(library, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
        return map->l_name;
    return asked;
}

static void load(void) {
    const char *file = getenv("LECTERN_NCCL_LIBRARY");
    if (!file || !*file) file = "libnccl.so.2";
    library = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        snprintf(why_not, sizeof why_not,
                 "NCCL cannot be loaded (%s): %s. Put NCCL's lib folder on LD_LIBRARY_PATH or name the file in "
                 "LECTERN_NCCL_LIBRARY",
                 file, dlerror());
        return;
    }
    /* The version first: a library too old to have ncclCommSplit is named by its version. */
    nccl.ncclGetVersion = (__typeof__(ncclGetVersion) *)dlsym(library, "ncclGetVersion");
    int version = 0;
    char v[32];
    if (!nccl.ncclGetVersion || nccl.ncclGetVersion(&version) != ncclSuccess) {
        snprintf(why_not, sizeof why_not, "%s has no working ncclGetVersion: not an NCCL library?", where(file));
        return;
    }
    lx_nccl_version_text(version, v, sizeof v);
    if (version < LX_NCCL_VERSION_FLOOR) {
        char floor[32];
        snprintf(why_not, sizeof why_not,
                 "NCCL %s (%s) is older than %s, the oldest lectern runs on (it needs ncclCommSplit); install a newer "
                 "NCCL or name one in LECTERN_NCCL_LIBRARY",
                 v, where(file), lx_nccl_version_text(LX_NCCL_VERSION_FLOOR, floor, sizeof floor));
        return;
    }
#define FIND(fn)                                                                                               \
    nccl.fn = (__typeof__(fn) *)dlsym(library, #fn);                                                           \
    if (!nccl.fn) {                                                                                            \
        snprintf(why_not, sizeof why_not, "NCCL %s (%s) has no %s, which lectern calls", v, where(file), #fn); \
        return;                                                                                                \
    }
    NCCL_FUNCTIONS(FIND)
#undef FIND
    snprintf(name, sizeof name, "NCCL %s (%s)", v, where(file));
    table.name = name;
    table.version = version;
    loaded = &table;
}

const lx_nccl_api *lx_nccl_library(char *why, size_t why_size) {
    pthread_once(&once, load);
    if (!loaded && why) snprintf(why, why_size, "%s", why_not);
    return loaded;
}

#else /* no NCCL support built */

const lx_nccl_api *lx_nccl_library(char *why, size_t why_size) {
    if (why)
        snprintf(why, why_size,
                 "this build has no NCCL support (built without CUDA, or without NCCL's header: see `make "
                 "print-nccl`)");
    return NULL;
}

#endif
