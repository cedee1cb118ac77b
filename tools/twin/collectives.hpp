/*
 * collectives.hpp: a collective as the messages NCCL's algorithms send,
 * played on SimGrid mailboxes by the calling actor (one rank).
 */
#ifndef LECTERN_TWIN_COLLECTIVES_HPP
#define LECTERN_TWIN_COLLECTIVES_HPP

#include <string>
#include <vector>

namespace twin {

struct Collective {
    std::string op;          /* "all_reduce", "broadcast", ... (dist_call_name's spelling) */
    std::vector<int> ranks;  /* the world ranks taking part, in group order */
    int me = 0;              /* this rank's place in ranks */
    int root = 0;            /* broadcast, reduce, scatter, gather: the root's place in ranks */
    double bytes = 0;        /* the call's size (docs/twin.md) */
    std::string key;         /* the same on every rank for this call: names its mailboxes */
};

/* Plays c's messages for this rank; returns when this rank's part is done.
 * Throws std::runtime_error for an op it does not know. */
void play_collective(const Collective &c);

/* Rings of more ranks than this are played in steady state (collectives.cpp);
 * play_full_rings(true) plays every step of every ring, message by message. */
constexpr int FULL_RING_RANKS = 8;
void play_full_rings(bool on);

/* The chunk a pipelined chain (broadcast, reduce) moves at a time. */
constexpr double CHAIN_CHUNK_BYTES = 512.0 * 1024;

} // namespace twin

#endif
