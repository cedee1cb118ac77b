/*
 * events.hpp: a run's events file (NAME.events.json, docs/twin.md) read
 * into memory: per spawn, per rank, the ordered list of what the rank did.
 */
#ifndef LECTERN_TWIN_EVENTS_HPP
#define LECTERN_TWIN_EVENTS_HPP

#include <cstdint>
#include <string>
#include <vector>

namespace twin {

struct Event {
    std::string op;          /* "compute", "modelled", "wait", or a call: "all_reduce", "send", ... */
    double start = 0, end = 0; /* measured, seconds since the lecture started */
    double flops = 0;        /* compute: FLOPs counted */
    double bytes = 0;        /* compute: bytes moved; a call: its size (docs/twin.md) */
    double recv_bytes = 0;   /* sendrecv */
    double ms = 0;           /* modelled */
    int peer = -1, src = -1; /* world ranks */
    int req = 0;             /* an async call's request number; a wait's */
    std::vector<int> group;  /* a group call's world ranks; empty: the world */
};

struct Rank {
    bool present = false; /* false: the rank sent nothing (it died, or the spawn failed) */
    std::vector<Event> events;
    double end = 0;
};

struct Spawn {
    int id = 0, world_size = 0;
    std::vector<Rank> ranks;
    std::vector<int> hosts; /* the platform host each rank runs on; empty: rank r on host r */
    bool complete() const;
    double measured_s() const; /* first event's start to the last rank's end */
};

struct Run {
    std::string lecture;
    std::vector<Spawn> spawns;
};

/* Reads `path`; throws std::runtime_error naming the file and what is wrong. */
Run read_events(const std::string &path);

/* Writes `run` in the same format (the replay's --events-out: what an
 * extension rule made, for a reader or a test to check); throws
 * std::runtime_error when it cannot. */
void write_events(const Run &run, const std::string &path);

} // namespace twin

#endif
