/*
 * comm_pvars.c: Open MPI's own count of the bytes this process sent to each
 * peer, read through MPI_T performance variables.
 *
 * A collective's traffic is the library's business: Open MPI picks a ring,
 * a tree or recursive doubling by size and world, and splits the data in
 * messages of its own. Only the library knows what it moved. Open MPI's
 * "monitoring" pml sits between the MPI layer and the real transport (ob1)
 * and adds up every message it passes on, per destination, collectives'
 * internal messages included; the pool turns it on for its ranks
 * (OMPI_MCA_pml_monitoring_enable=1 in mpirun's environment, runtime/ranks/pool.c).
 * Its MPI_T variable pml_monitoring_messages_size is an array: entry q is
 * the bytes sent so far to rank q of the communicator the handle is bound to.
 * The handle is bound to MPI_COMM_WORLD, the pool: a spawn of w ranks runs
 * on pool ranks 0 .. w-1 in order (spawn_rank.c, comm_for), so entry q is
 * spawn rank q. (Bound to the spawn's own communicator, made by
 * MPI_Comm_create_group, Open MPI 4.1.4 refuses every read: error 72.)
 *
 * A wrinkle of Open MPI 4.1: the monitoring pml takes over the selected pml
 * by pretending to close, and closing unregisters its variables, so
 * MPI_T does not list them although the counting goes on (a test run with
 * pml_monitoring_enable_output=1 prints the counts at MPI_Finalize). Open
 * MPI's own registration function, mca_common_monitoring_register(), found in
 * the already loaded libmca_common_monitoring, registers them again; it is
 * called only when the monitoring is on (its flag says so) and the
 * variable is missing. Where none of this is there (another MPI, monitoring
 * off), lx_pvars_open() says no and the collectives' bytes are not measured.
 *
 * Reading costs one copy of an array of world-size numbers: small next to
 * any collective.
 */
#include <dlfcn.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "trace/trace.h"
#include "ranks/ranks.h"

#define PVAR_NAME "pml_monitoring_messages_size"

static int state; /* 0 not tried, 1 available, -1 not available */
static MPI_T_pvar_session session;
static MPI_T_pvar_handle handle;
static int n_values;       /* the world communicator's size */
static int value_bytes;    /* 4 or 8: the variable's datatype */
static unsigned char *raw; /* one read, as the library writes it */
static const char *why_not = "not tried";

/* Open MPI 4.1's monitoring variables unregistered at its take-over: put
 * them back with Open MPI's own function (see the comment at the top). */
static void register_again(void) {
    const char *libs[] = {"libmca_common_monitoring.so.50", "libmca_common_monitoring.so"};
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        void *lib = dlopen(libs[i], RTLD_LAZY | RTLD_NOLOAD);
        if (!lib) continue;
        int *enabled = (int *)dlsym(lib, "mca_common_monitoring_enabled");
        void (*reg)(void *) = (void (*)(void *))dlsym(lib, "mca_common_monitoring_register");
        if (enabled && *enabled && reg) reg(NULL);
        dlclose(lib);
        return;
    }
}

static int find_variable(int *index) {
    return MPI_T_pvar_get_index(PVAR_NAME, MPI_T_PVAR_CLASS_SIZE, index) == MPI_SUCCESS;
}

int lx_pvars_open(void) {
    if (state) return state > 0;
    state = -1;
    int provided;
    if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        why_not = "MPI_T could not start";
        return 0;
    }
    int index;
    if (!find_variable(&index)) {
        register_again();
        if (!find_variable(&index)) {
            why_not = "Open MPI's pml monitoring is off or missing (" PVAR_NAME " is not an MPI_T variable)";
            return 0;
        }
    }
    char name[128], desc[256];
    int name_len = sizeof name, desc_len = sizeof desc, verbosity, var_class, bind, readonly, continuous, atomic;
    MPI_Datatype type;
    MPI_T_enum enumtype;
    if (MPI_T_pvar_get_info(index, name, &name_len, &verbosity, &var_class, &type, &enumtype, desc, &desc_len, &bind,
                            &readonly, &continuous, &atomic) != MPI_SUCCESS ||
        bind != MPI_T_BIND_MPI_COMM) {
        why_not = PVAR_NAME " is not a per-communicator variable here";
        return 0;
    }
    int size;
    MPI_Type_size(type, &size);
    if (size != 4 && size != 8) {
        why_not = PVAR_NAME " has an unexpected type";
        return 0;
    }
    value_bytes = size;
    MPI_Comm world = MPI_COMM_WORLD;
    if (MPI_T_pvar_session_create(&session) != MPI_SUCCESS ||
        MPI_T_pvar_handle_alloc(session, index, &world, &handle, &n_values) != MPI_SUCCESS || n_values < 1) {
        why_not = "MPI_T refused a handle on " PVAR_NAME;
        return 0;
    }
    if (!continuous) MPI_T_pvar_start(session, handle);
    raw = calloc((size_t)n_values, (size_t)value_bytes);
    if (!raw) lx_fatal("out of memory");
    state = 1;
    why_not = NULL;
    return 1;
}

const char *lx_pvars_why_not(void) { return why_not; }

/* Bytes sent so far to world ranks 0 .. n - 1 (a pool rank's spawn rank is
 * its world rank), into sent[]; entries past the world's size are 0. */
int lx_pvars_read(uint64_t *sent, int n) {
    if (state <= 0) return 0;
    if (MPI_T_pvar_read(session, handle, raw) != MPI_SUCCESS) return 0;
    for (int i = 0; i < n; i++) {
        if (i >= n_values) {
            sent[i] = 0;
            continue;
        }
        if (value_bytes == 8) {
            uint64_t v;
            memcpy(&v, raw + (size_t)i * 8, 8);
            sent[i] = v;
        } else {
            uint32_t v;
            memcpy(&v, raw + (size_t)i * 4, 4);
            sent[i] = v;
        }
    }
    return 1;
}
