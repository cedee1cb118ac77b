/*
 * extend.hpp: a recorded spawn of p ranks replayed at P ranks, by the rule
 * its strategy follows (docs/twin.md, "The extension rule").
 */
#ifndef LECTERN_TWIN_EXTEND_HPP
#define LECTERN_TWIN_EXTEND_HPP

#include "events.hpp"

#include <string>

namespace twin {

struct Extended {
    Spawn spawn;      /* P ranks of events */
    std::string rule; /* "ddp", "pipeline", "1f1b" or "mesh": which rule made them */
};

/* The spawn as P ranks would have run it. tp_across (a mesh only): the
 * placement mistake, each tensor-parallel group spread over nodes (rank
 * T d + t on host t D' + d) and each data-parallel group packed. Throws std::runtime_error naming
 * the spawn and why where no rule applies. */
Extended extend(const Spawn &sp, int P, bool tp_across = false);

} // namespace twin

#endif
