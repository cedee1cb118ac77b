/*
 * mesh.h: the lecture's last part. A 3-D mesh, data x pipeline x tensor
 * parallelism (2 x 2 x 2 on 8 ranks), trains lib/mlp's stack for a few
 * steps and is checked against one device.
 */
#ifndef LECTERN_MESH_H
#define LECTERN_MESH_H

/* The section "A 3-D mesh": notes, the spawn, the tables, the checks. */
void mesh_section(void);

#endif
