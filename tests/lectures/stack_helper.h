/* A lecture helper in its own file: its frames name this header, and the
 * trace embeds it beside the lecture. */
#ifndef STACK_HELPER_H
#define STACK_HELPER_H
#include "lectern.h"

static void helper_note(int depth) { note("helper at depth %d", depth); }
#endif
