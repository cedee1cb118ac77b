/*
 * collectives.cpp: each collective expanded into the point-to-point steps
 * NCCL's algorithms take (docs/twin.md), written once here with the rule
 * beside it. p ranks in the group, b the call's size in bytes:
 *
 *   all_reduce      ring: reduce-scatter then all-gather, 2 (p - 1) steps;
 *                   in each, every rank sends b / p to the next rank of the
 *                   ring and receives b / p from the previous one
 *   reduce_scatter  ring, p - 1 steps of b / p (b: the whole input)
 *   all_gather      ring, p - 1 steps of b / p (b: the whole output)
 *   broadcast       a chain from the root round the ring, pipelined in
 *                   chunks of CHAIN_CHUNK_BYTES: a rank passes chunk k on
 *                   as soon as it has it (NCCL's ring broadcast)
 *   reduce          the same chain run towards the root
 *   scatter         the root sends each rank its piece (b / p) directly
 *   gather          each rank sends the root its piece (b / p)
 *   all_to_all      each rank sends every other rank its piece (b / p), all
 *                   at once
 *   barrier         a SimGrid barrier over the group: no bytes
 *
 * The reduction's arithmetic is not timed (NCCL's kernels reduce as the
 * data arrives; at these sizes the link sets the time). Each message goes
 * to a mailbox named for the call (its key), the pattern and the receiver.
 * Within one call a ring's or a chain's receiver hears from one sender, in
 * step order, so SimGrid's first-come matching pairs each step right; the
 * direct patterns' pieces are all the same size. One mailbox per call and
 * receiver, not per step: SimGrid keeps every mailbox to the end, and a
 * 512-rank ring has 1022 steps.
 */
#include "collectives.hpp"

#include <simgrid/s4u.hpp>
#include <map>
#include <stdexcept>

namespace s4u = simgrid::s4u;

namespace twin {

static int payload; /* what the messages carry: only their size matters */

static s4u::Mailbox *box(const Collective &c, const std::string &pattern, int to_world_rank) {
    return s4u::Mailbox::by_name(c.key + "/" + pattern + "/" + std::to_string(to_world_rank));
}

/* One ring step: send `bytes` to the next rank, receive as much from the previous. */
static void ring_step(const Collective &c, double bytes) {
    int p = (int)c.ranks.size();
    int next = c.ranks[(c.me + 1) % p];
    s4u::CommPtr out = box(c, "r", next)->put_async(&payload, (uint64_t)bytes);
    box(c, "r", c.ranks[c.me])->get<int>();
    out->wait();
}

static void ring(const Collective &c, int steps, double bytes_per_step) {
    for (int s = 0; s < steps; s++)
        ring_step(c, bytes_per_step);
}

/* A chain through the ring starting at `first`, pipelined by chunks:
 * position 0 only sends, the last only receives. */
static void chain(const Collective &c, int first, int direction) {
    int p = (int)c.ranks.size();
    int pos = ((c.me - first) * direction % p + p) % p; /* my place along the chain */
    int chunks = c.bytes > CHAIN_CHUNK_BYTES ? (int)((c.bytes + CHAIN_CHUNK_BYTES - 1) / CHAIN_CHUNK_BYTES) : 1;
    double chunk = c.bytes / chunks;
    int next = c.ranks[((c.me + direction) % p + p) % p];
    std::vector<s4u::CommPtr> sent;
    for (int k = 0; k < chunks; k++) {
        if (pos > 0) box(c, "k", c.ranks[c.me])->get<int>();
        if (pos < p - 1) sent.push_back(box(c, "k", next)->put_async(&payload, (uint64_t)chunk));
    }
    for (auto &comm : sent)
        comm->wait();
}

static void barrier(const Collective &c) {
    static std::map<std::string, s4u::BarrierPtr> barriers; /* the actors run one at a time */
    auto it = barriers.find(c.key);
    if (it == barriers.end()) it = barriers.emplace(c.key, s4u::Barrier::create((unsigned)c.ranks.size())).first;
    s4u::BarrierPtr b = it->second;
    b->wait();
}

void play_collective(const Collective &c) {
    int p = (int)c.ranks.size();
    if (p <= 1) return;
    double piece = c.bytes / p;
    if (c.op == "all_reduce") ring(c, 2 * (p - 1), piece);
    else if (c.op == "reduce_scatter" || c.op == "all_gather") ring(c, p - 1, piece);
    else if (c.op == "broadcast") chain(c, c.root, +1);
    else if (c.op == "reduce") chain(c, (c.root + 1) % p, +1);
    else if (c.op == "scatter" || c.op == "gather") {
        bool to_root = c.op == "gather";
        if (c.me == c.root) {
            std::vector<s4u::CommPtr> comms;
            for (int q = 0; q < p; q++) {
                if (q == c.root) continue;
                if (to_root) box(c, "g", c.ranks[c.me])->get<int>();
                else comms.push_back(box(c, "s", c.ranks[q])->put_async(&payload, (uint64_t)piece));
            }
            for (auto &comm : comms)
                comm->wait();
        } else if (to_root) {
            box(c, "g", c.ranks[c.root])->put(&payload, (uint64_t)piece);
        } else {
            box(c, "s", c.ranks[c.me])->get<int>();
        }
    } else if (c.op == "all_to_all") {
        std::vector<s4u::CommPtr> comms;
        for (int q = 0; q < p; q++)
            if (q != c.me) comms.push_back(box(c, "a", c.ranks[q])->put_async(&payload, (uint64_t)piece));
        for (int q = 0; q < p - 1; q++)
            box(c, "a", c.ranks[c.me])->get<int>();
        for (auto &comm : comms)
            comm->wait();
    } else if (c.op == "barrier") {
        barrier(c);
    } else {
        throw std::runtime_error("unknown collective '" + c.op + "'");
    }
}

} // namespace twin
