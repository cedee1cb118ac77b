/*
 * globals.c: every spawn sees the lecture's globals as at program start.
 *
 * When each spawn() started new processes, a rank saw the lecture's global
 * and static variables as the program starts with them: whatever an
 * earlier spawn's function did to them died with its processes. Pool ranks
 * live on from one spawn to the next, so this file keeps that promise by
 * hand: when the rank starts, before any lecture code ran, it copies the
 * bytes of every variable defined in a lecture source file, and before each
 * spawn's function it puts them back.
 *
 * Which variables: the binary's own DWARF says. For every compile unit
 * whose source is a lecture file (lx_is_lecture_path: not runtime/), every
 * DW_TAG_variable whose location is a plain address (DW_OP_addr): file-scope
 * globals and statics, and the static variables inside functions (found by
 * walking into subprograms and blocks). Locals, thread-locals and variables
 * the compiler dropped have no such address and are not touched; so are
 * variables a lecture file declares but a library defines (stdout). The
 * size is the size of the variable's type. Nothing of the runtime's own is
 * restored here: spawn_rank.c resets its per-spawn state itself.
 *
 * Only bytes are put back. A pointer a spawn stored in a global is reset to
 * its start value; the memory it pointed to is not freed (a process that
 * exited would have given it back): docs/authoring.md says so.
 */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"
#include "ranks/ranks.h"

typedef struct region {
    uintptr_t addr;
    size_t size;
    size_t offset; /* where its bytes are in `saved` */
} region;

static region *regions;
static int n_regions, cap_regions;
static unsigned char *saved;
static size_t saved_bytes;

static void add_region(uintptr_t addr, size_t size) {
    if (size == 0) return;
    if (n_regions == cap_regions) {
        cap_regions = cap_regions ? 2 * cap_regions : 64;
        region *r = realloc(regions, (size_t)cap_regions * sizeof *r);
        if (!r) lx_fatal("out of memory");
        regions = r;
    }
    regions[n_regions++] = (region){.addr = addr, .size = size, .offset = 0};
}

/* The repo-relative path of a source file named in the DWARF. */
static const char *source_path(const char *name, const char *comp_dir, char *buf, size_t size) {
    if (!name) return NULL;
    if (name[0] != '/' && comp_dir) {
        snprintf(buf, size, "%s/%s", comp_dir, name);
        name = buf;
    }
    return lx_repo_relative(name);
}

/* A variable with a fixed address and a known size: add it, if it is
 * defined in a lecture file (a header of the lecture counts; a system
 * header does not). */
static void consider_variable(Dwarf_Die *var, Dwarf_Addr bias, const char *comp_dir) {
    Dwarf_Attribute attr;
    if (!dwarf_attr(var, DW_AT_location, &attr)) return;
    Dwarf_Op *ops;
    size_t n_ops;
    if (dwarf_getlocation(&attr, &ops, &n_ops) != 0 || n_ops != 1 || ops[0].atom != DW_OP_addr) return;
    Dwarf_Attribute type_attr;
    Dwarf_Die type;
    if (!dwarf_attr_integrate(var, DW_AT_type, &type_attr) || !dwarf_formref_die(&type_attr, &type)) return;
    Dwarf_Word size;
    if (dwarf_aggregate_size(&type, &size) != 0) return;
    char buf[4096];
    const char *file = source_path(dwarf_decl_file(var), comp_dir, buf, sizeof buf);
    if (file && !lx_is_lecture_path(file)) return;
    add_region((uintptr_t)(ops[0].number + bias), (size_t)size);
}

/* Variables at this level, and inside functions and blocks below it. */
static void walk(Dwarf_Die *parent, Dwarf_Addr bias, const char *comp_dir) {
    Dwarf_Die child;
    if (dwarf_child(parent, &child) != 0) return;
    do {
        switch (dwarf_tag(&child)) {
        case DW_TAG_variable: consider_variable(&child, bias, comp_dir); break;
        case DW_TAG_subprogram:
        case DW_TAG_lexical_block:
        case DW_TAG_inlined_subroutine: walk(&child, bias, comp_dir); break;
        default: break;
        }
    } while (dwarf_siblingof(&child, &child) == 0);
}

static int by_address(const void *a, const void *b) {
    const region *x = a, *y = b;
    return (x->addr > y->addr) - (x->addr < y->addr);
}

/* One region per stretch of memory: a variable described twice (a
 * declaration and its definition, an abstract and a concrete copy of a
 * function) or overlapping another is kept once. */
static void merge_regions(void) {
    if (n_regions == 0) return;
    qsort(regions, (size_t)n_regions, sizeof *regions, by_address);
    int k = 0;
    for (int i = 1; i < n_regions; i++) {
        uintptr_t end = regions[k].addr + regions[k].size;
        if (regions[i].addr <= end) {
            uintptr_t e = regions[i].addr + regions[i].size;
            if (e > end) regions[k].size = e - regions[k].addr;
        } else {
            regions[++k] = regions[i];
        }
    }
    n_regions = k + 1;
}

int lx_globals_snapshot(void) {
    Dwfl_Module *mod = lx_main_module();
    if (!mod) return -1;
    Dwarf_Addr bias;
    if (!dwfl_module_getdwarf(mod, &bias)) return -1;
    Dwarf_Die *cu = NULL;
    Dwarf_Addr cu_bias;
    while ((cu = dwfl_module_nextcu(mod, cu, &cu_bias)) != NULL) {
        Dwarf_Attribute attr;
        const char *comp_dir = dwarf_formstring(dwarf_attr(cu, DW_AT_comp_dir, &attr));
        char buf[4096];
        const char *path = source_path(dwarf_diename(cu), comp_dir, buf, sizeof buf);
        if (!path || !lx_is_lecture_path(path)) continue; /* the runtime, libraries */
        walk(cu, cu_bias, comp_dir);
    }
    merge_regions();
    saved_bytes = 0;
    for (int i = 0; i < n_regions; i++) {
        regions[i].offset = saved_bytes;
        saved_bytes += regions[i].size;
    }
    saved = malloc(saved_bytes ? saved_bytes : 1);
    if (!saved) lx_fatal("out of memory for %zu bytes of the lecture's globals", saved_bytes);
    for (int i = 0; i < n_regions; i++)
        memcpy(saved + regions[i].offset, (const void *)regions[i].addr, regions[i].size);
    return n_regions;
}

void lx_globals_restore(void) {
    /* Only what changed is written: read-only data (a const table) never
     * changes, so it is never written to. */
    for (int i = 0; i < n_regions; i++) {
        void *at = (void *)regions[i].addr;
        const void *was = saved + regions[i].offset;
        if (memcmp(at, was, regions[i].size) != 0) memcpy(at, was, regions[i].size);
    }
}

size_t lx_globals_bytes(void) { return saved_bytes; }
