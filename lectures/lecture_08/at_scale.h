/*
 * at_scale.h: lecture_08's simulated sections (at_scale.c).
 */
#ifndef LECTERN_AT_SCALE_H
#define LECTERN_AT_SCALE_H

#include "lectern.h"
#include "train.h"

/* One DDP step with modelled compute recorded on 4 ranks, replayed on the
 * simulated cluster `scaled` at 8, 64 and 512 GPUs, all-reduces after
 * backward and during it: a predict(), a table and a note. */
void ddp_at_scale(void);
/* The modelled GPipe schedule (8 micro-batches) recorded on 4 stages by
 * `schedule` (a rank function running it once, with messages between
 * neighbouring stages only), replayed on `scaled` at 4, 8 and 16 stages. */
void pipeline_at_scale(spawn_fn schedule, const mlp_config *cfg);

#endif
