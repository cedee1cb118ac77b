/*
 * configure.h: choosing a configuration. The lecture's formulas (memory per
 * rank, bytes per link, the pipeline bubble, an alpha-beta step time, all
 * modelled) applied to two published training runs and the configurations
 * around them, in the three steps of choosing one: fit in memory, reach the
 * global batch, maximise throughput.
 */
#ifndef LECTERN_CONFIGURE_H
#define LECTERN_CONFIGURE_H

/* The section "Choosing a configuration": notes, the predict(), the tables. */
void configuration_section(void);

#endif
