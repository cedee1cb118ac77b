/*
 * replay.cpp: twin_replay, a run's events replayed on a simulated platform
 * (docs/twin.md).
 *
 *   twin_replay EVENTS.json PLATFORM.xml [--name NAME] [--out FILE]
 *               [--ranks P] [--spawn ID] [--full-rings 1] [--events-out FILE]
 *
 * --ranks P replays each spawn at P ranks by its strategy's extension rule
 * (extend.cpp); a spawn no rule covers is left out, with why. --spawn ID
 * replays that spawn only; then a refused extension is an error (exit 2).
 * --full-rings 1 plays every step of rings beyond one node (collectives.cpp).
 * --placement tp-across (with --ranks, a mesh): the mesh placed the wrong
 * way, tensor-parallel groups spread over nodes (extend.hpp), to show
 * what that costs.
 * --events-out FILE writes the events replayed, in the events file's format:
 * at --ranks P, the P ranks the extension rule made.
 *
 * SimGrid's S4U API: an actor per rank on the platform's hosts (rank r on
 * the r-th host, hosts in natural order of their names), replaying its
 * events in order; the spawns one after another, each from clock zero of
 * its own. What each event becomes:
 *
 *   compute    the platform's root zone says how (its property "compute"):
 *              "measured": the time it took here (a calibration platform,
 *              which describes the machine the run was on); "work": the
 *              work counted, max(FLOPs / host speed, bytes / "memory_bw"),
 *              the roofline of a device that does nothing else; the
 *              platform's speed is the one rate every counted FLOP runs
 *              at (the H100 platforms: dense BF16, which only matmuls
 *              reach; element-wise ops are bound by memory_bw at any
 *              rate, tools/twin/platforms/fabric.py says why)
 *   modelled   the ms the lecture asked for, on every platform: the lecture
 *              said the device computes that long. Not scaled to the
 *              platform: the output labels it so ("modelled")
 *   a call     its messages (collectives.cpp; point to point: a message on
 *              the mailbox "p2p/SRC/DST", which keeps MPI's order between a
 *              pair); an async one runs beside the rank (an actor for a
 *              collective, an async comm for a message) until its wait
 *
 * Writes JSON (stdout, or --out): per spawn, the simulated seconds, each
 * rank's simulated timeline, the measured seconds beside them, and per
 * collective size its simulated algbw and busbw (nccl-tests' definitions:
 * algbw = bytes / time; busbw = algbw * 2 (n - 1) / n for all-reduce,
 * (n - 1) / n for reduce-scatter, all-gather and all-to-all, 1 for
 * broadcast and reduce; time from the first rank's start of the call to the
 * last rank's end, the median over the calls of one size).
 * Exit status: 0, or 2 with a message naming the file and the problem.
 */
#include "collectives.hpp"
#include "events.hpp"
#include "extend.hpp"

#include <algorithm>
#include <cjson/cJSON.h>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <simgrid/s4u.hpp>
#include <stdexcept>
#include <tuple>
#include <xbt/log.h>

namespace s4u = simgrid::s4u;
using namespace twin;

struct Span {
    std::string op;
    double start, end;
};

struct Platform {
    bool measured = false; /* compute as measured here, else as work */
    double memory_bw = 0;  /* bytes/s, for compute as work */
    std::vector<s4u::Host *> hosts;
};

/* One collective call as all its ranks played it. */
struct CallSpan {
    std::string op;
    double bytes = 0;
    int ranks = 0;
    double start = 1e300, end = -1e300;
};

static Platform platform;
static const int CALLS_IN_FLIGHT = 1024;
static int playing = -1; /* the spawn being replayed; -2 once all are done */
static std::map<int, std::map<std::string, CallSpan>> calls; /* spawn id -> call key -> span */
static std::map<int, std::string> rules, refused;            /* --ranks: spawn id -> rule, or why none */
static std::map<int, double> spawn_seconds;          /* spawn id -> simulated s */
static std::map<int, std::vector<std::vector<Span>>> timelines; /* spawn id -> rank -> spans */

/* "n1-gpu10" after "n1-gpu9": numbers compared as numbers. */
static bool natural_less(const std::string &a, const std::string &b) {
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        if (isdigit((unsigned char)a[i]) && isdigit((unsigned char)b[j])) {
            size_t ei = i, ej = j;
            while (ei < a.size() && isdigit((unsigned char)a[ei])) ei++;
            while (ej < b.size() && isdigit((unsigned char)b[ej])) ej++;
            long x = std::stol(a.substr(i, ei - i)), y = std::stol(b.substr(j, ej - j));
            if (x != y) return x < y;
            i = ei, j = ej;
        } else {
            if (a[i] != b[j]) return a[i] < b[j];
            i++, j++;
        }
    }
    return a.size() - i < b.size() - j;
}

static double compute_seconds(const Event &e, s4u::Host *host) {
    if (platform.measured) return e.end - e.start;
    double t = e.flops / host->get_speed();
    if (platform.memory_bw > 0) t = std::max(t, e.bytes / platform.memory_bw);
    return t;
}

static void rank_actor(const Spawn *sp, int rank, std::vector<Span> *out) {
    double t0 = s4u::Engine::get_clock();
    s4u::Host *host = s4u::this_actor::get_host();
    std::map<std::string, int> seq;               /* per group: collectives so far */
    std::map<int, s4u::CommPtr> comms;            /* async messages by request */
    std::map<int, s4u::ActorPtr> helpers;          /* async collectives by request */
    static int payload, *received; /* the messages' contents: only sizes matter */
    for (const Event &e : sp->ranks[rank].events) {
        double start = s4u::Engine::get_clock() - t0;
        if (e.op == "compute") {
            double t = compute_seconds(e, host);
            if (platform.measured) s4u::this_actor::sleep_for(t);
            else s4u::this_actor::execute(t * host->get_speed());
        } else if (e.op == "modelled") {
            s4u::this_actor::sleep_for(e.ms * 1e-3);
        } else if (e.op == "wait") {
            if (comms.count(e.req)) comms[e.req]->wait(), comms.erase(e.req);
            else if (helpers.count(e.req)) helpers[e.req]->join(), helpers.erase(e.req);
        } else if (e.op == "send" || e.op == "recv" || e.op == "sendrecv") {
            auto to = [&](int src, int dst) {
                return s4u::Mailbox::by_name("p2p/" + std::to_string(src) + "/" + std::to_string(dst));
            };
            if (e.op == "sendrecv") {
                s4u::CommPtr out_comm = to(rank, e.peer)->put_async(&payload, (uint64_t)e.bytes);
                to(e.src, rank)->get<int>();
                out_comm->wait();
            } else {
                bool send = e.op == "send";
                s4u::CommPtr c;
                if (send) c = to(rank, e.peer)->put_async(&payload, (uint64_t)e.bytes);
                else c = to(e.peer, rank)->get_async<int>(&received);
                if (e.req) comms[e.req] = c;
                else c->wait();
            }
        } else {
            Collective c;
            c.op = e.op;
            if (e.group.empty())
                for (int q = 0; q < sp->world_size; q++) c.ranks.push_back(q);
            else c.ranks = e.group;
            auto me = std::find(c.ranks.begin(), c.ranks.end(), rank);
            if (me == c.ranks.end()) throw std::runtime_error("rank " + std::to_string(rank) + " outside its call's group");
            c.me = (int)(me - c.ranks.begin());
            if (e.peer >= 0) {
                auto root = std::find(c.ranks.begin(), c.ranks.end(), e.peer);
                c.root = root == c.ranks.end() ? 0 : (int)(root - c.ranks.begin());
            }
            c.bytes = e.bytes;
            std::string g;
            for (int q : c.ranks) g += std::to_string(q) + ",";
            /* The same on every rank of the call: its group and its number
             * among the group's calls, modulo CALLS_IN_FLIGHT (more than any
             * lecture has in flight at once), so mailboxes are reused. */
            static std::map<std::string, int> group_ids;
            int gid = group_ids.emplace(g, (int)group_ids.size()).first->second;
            int n = seq[g]++;
            c.key = "g" + std::to_string(gid) + "/" + std::to_string(n % CALLS_IN_FLIGHT);
            CallSpan *span = &calls[sp->id]["g" + std::to_string(gid) + "/" + std::to_string(n)]; /* this call's own */
            auto timed = [c, span]() {
                double t = s4u::Engine::get_clock();
                span->op = c.op, span->bytes = c.bytes, span->ranks = (int)c.ranks.size();
                span->start = std::min(span->start, t);
                play_collective(c);
                span->end = std::max(span->end, s4u::Engine::get_clock());
            };
            if (e.req) helpers[e.req] = s4u::Actor::create("async", host, timed);
            else timed();
        }
        out->push_back({e.op, start, s4u::Engine::get_clock() - t0});
    }
    for (auto &kv : comms) kv.second->wait(); /* never waited for: finish_requests did, at the end */
    for (auto &kv : helpers) kv.second->join();
}

/* The spawns one after another: each starts when the last one's ranks have all finished. */
static void conductor(const Run *run) {
    for (const Spawn &sp : run->spawns) {
        if (!sp.complete()) continue;
        if (sp.world_size > (int)platform.hosts.size())
            throw std::runtime_error("spawn " + std::to_string(sp.id) + " has " + std::to_string(sp.world_size) +
                                     " ranks; the platform has " + std::to_string(platform.hosts.size()) + " hosts");
        playing = sp.id;
        double t0 = s4u::Engine::get_clock();
        auto &tl = timelines[sp.id];
        tl.assign(sp.world_size, {});
        std::vector<s4u::ActorPtr> actors;
        for (int r = 0; r < sp.world_size; r++) {
            int host = sp.hosts.empty() ? r : sp.hosts[r];
            actors.push_back(s4u::Actor::create("rank" + std::to_string(r), platform.hosts[host],
                                                [&sp, r, &tl]() { rank_actor(&sp, r, &tl[r]); }));
        }
        for (auto &a : actors) a->join();
        spawn_seconds[sp.id] = s4u::Engine::get_clock() - t0;
    }
    playing = -2;
}

/* nccl-tests' bus bandwidth factor: what each rank's link carries over
 * what the call moves (its PERFORMANCE.md). 0: no bandwidth to speak of. */
static double busbw_factor(const std::string &op, int n) {
    if (op == "all_reduce") return 2.0 * (n - 1) / n;
    if (op == "reduce_scatter" || op == "all_gather" || op == "all_to_all") return (double)(n - 1) / n;
    if (op == "broadcast" || op == "reduce") return 1;
    return 0;
}

/* Per (op, bytes, ranks): the calls' median simulated time, algbw, busbw. */
static cJSON *bandwidths(int spawn) {
    std::map<std::tuple<std::string, double, int>, std::vector<double>> times;
    for (auto &kv : calls[spawn]) {
        const CallSpan &c = kv.second;
        if (busbw_factor(c.op, c.ranks) > 0 && c.bytes > 0 && c.end > c.start)
            times[{c.op, c.bytes, c.ranks}].push_back(c.end - c.start);
    }
    cJSON *list = cJSON_CreateArray();
    for (auto &kv : times) {
        auto &[op, bytes, n] = kv.first;
        std::vector<double> t = kv.second;
        std::sort(t.begin(), t.end());
        size_t k = t.size();
        double median = k % 2 ? t[k / 2] : (t[k / 2 - 1] + t[k / 2]) / 2;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", op.c_str());
        cJSON_AddNumberToObject(o, "bytes", bytes);
        cJSON_AddNumberToObject(o, "ranks", n);
        cJSON_AddNumberToObject(o, "calls", (double)k);
        cJSON_AddNumberToObject(o, "time_s", median);
        cJSON_AddNumberToObject(o, "algbw_GBps", bytes / median / 1e9);
        cJSON_AddNumberToObject(o, "busbw_GBps", bytes / median / 1e9 * busbw_factor(op, n));
        cJSON_AddItemToArray(list, o);
    }
    return list;
}

static cJSON *result(const Run &run, const std::string &name) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "lecture", run.lecture.c_str());
    cJSON_AddStringToObject(root, "platform", name.c_str());
    cJSON_AddStringToObject(root, "compute", platform.measured ? "measured" : "work");
    cJSON_AddStringToObject(root, "modelled", "model_compute spans replayed as the lecture's ms, unchanged");
    cJSON *list = cJSON_AddArrayToObject(root, "spawns");
    for (const Spawn &sp : run.spawns) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "id", sp.id);
        cJSON_AddNumberToObject(s, "world_size", timelines.count(sp.id) ? (int)timelines[sp.id].size() : sp.world_size);
        cJSON_AddNumberToObject(s, "measured_s", sp.measured_s());
        if (refused.count(sp.id)) {
            cJSON_AddStringToObject(s, "refused", refused[sp.id].c_str());
        } else if (!spawn_seconds.count(sp.id)) {
            cJSON_AddStringToObject(s, "skipped", "a rank sent no events (it failed, or the spawn was meant to fail)");
        } else {
            if (rules.count(sp.id)) {
                cJSON_AddNumberToObject(s, "recorded_ranks", sp.world_size);
                cJSON_AddStringToObject(s, "rule", rules[sp.id].c_str());
            }
            cJSON_AddItemToObject(s, "collectives", bandwidths(sp.id));
            cJSON_AddNumberToObject(s, "simulated_s", spawn_seconds[sp.id]);
            cJSON *ranks = cJSON_AddArrayToObject(s, "ranks");
            for (auto &spans : timelines[sp.id]) {
                cJSON *r = cJSON_CreateArray();
                for (auto &x : spans) {
                    cJSON *o = cJSON_CreateObject();
                    cJSON_AddStringToObject(o, "op", x.op.c_str());
                    cJSON_AddNumberToObject(o, "start", x.start);
                    cJSON_AddNumberToObject(o, "end", x.end);
                    cJSON_AddItemToArray(r, o);
                }
                cJSON_AddItemToArray(ranks, r);
            }
        }
        cJSON_AddItemToArray(list, s);
    }
    return root;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s EVENTS.json PLATFORM.xml [--name NAME] [--out FILE]\n", argv[0]);
        return 2;
    }
    std::string events = argv[1], xml = argv[2], name, out, events_out;
    int ranks = -1, only = -1; /* -1: not given */
    bool tp_across = false;
    for (int i = 3; i < argc; i += 2) {
        if (i + 1 >= argc) {
            fprintf(stderr, "twin_replay: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--name")) name = argv[i + 1];
        else if (!strcmp(argv[i], "--out")) out = argv[i + 1];
        else if (!strcmp(argv[i], "--ranks")) ranks = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--spawn")) only = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--events-out")) events_out = argv[i + 1];
        else if (!strcmp(argv[i], "--placement")) {
            if (strcmp(argv[i + 1], "tp-across")) {
                fprintf(stderr, "twin_replay: --placement %s: the one placement it takes is tp-across\n", argv[i + 1]);
                return 2;
            }
            tp_across = true;
        }
        else if (!strcmp(argv[i], "--full-rings")) play_full_rings(!strcmp(argv[i + 1], "1"));
        else {
            fprintf(stderr, "twin_replay: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (name.empty()) name = xml;
    if (ranks == 0 || ranks < -1) {
        fprintf(stderr, "twin_replay: --ranks must be a positive number of ranks\n");
        return 2;
    }
    try {
        Run run = read_events(events);
        if (only >= 0) {
            std::vector<Spawn> keep;
            for (const Spawn &sp : run.spawns)
                if (sp.id == only) keep.push_back(sp);
            if (keep.empty()) throw std::runtime_error(events + ": no spawn " + std::to_string(only));
            run.spawns = keep;
        }
        /* What is replayed: the run's spawns, or each extended to --ranks. */
        Run replayed = run;
        if (ranks > 0) {
            replayed.spawns.clear();
            for (const Spawn &sp : run.spawns) {
                if (!sp.complete()) continue;
                try {
                    Extended x = extend(sp, ranks, tp_across);
                    rules[sp.id] = x.rule;
                    replayed.spawns.push_back(x.spawn);
                } catch (const std::runtime_error &why) {
                    if (only >= 0) throw;
                    refused[sp.id] = why.what();
                    fprintf(stderr, "twin_replay: %s\n", why.what());
                }
            }
        }
        if (!events_out.empty()) write_events(replayed, events_out);
        /* SimGrid's log and its engine's own arguments: quiet unless asked. */
#ifdef __SANITIZE_ADDRESS__
        /* AddressSanitizer cannot follow SimGrid's own stack switching (its
         * "raw" contexts): under it, each actor is a thread instead. Chosen
         * as the engine starts, so on its command line. */
        char quiet[] = "--log=xbt_cfg.thresh:warning", factory[] = "--cfg=contexts/factory:thread";
        int sg_argc = 3;
        char *sg_argv[] = {argv[0], quiet, factory, nullptr};
#else
        int sg_argc = 1;
        char *sg_argv[] = {argv[0], nullptr};
#endif
        s4u::Engine e(&sg_argc, sg_argv);
        xbt_log_control_set("root.thresh:warning"); /* not the configuration's INFO lines */
        e.set_config("network/crosstraffic:0"); /* a message does not slow its reverse direction */
        if (!fopen(xml.c_str(), "r")) throw std::runtime_error(xml + ": cannot open the platform");
        e.load_platform(xml);
        const char *compute = e.get_netzone_root()->get_property("compute");
        platform.measured = compute && !strcmp(compute, "measured");
        const char *mbw = e.get_netzone_root()->get_property("memory_bw");
        platform.memory_bw = mbw ? atof(mbw) : 0;
        platform.hosts = e.get_all_hosts();
        std::sort(platform.hosts.begin(), platform.hosts.end(),
                  [](s4u::Host *a, s4u::Host *b) { return natural_less(a->get_name(), b->get_name()); });
        s4u::Actor::create("conductor", platform.hosts[0], [&replayed]() { conductor(&replayed); });
        e.run();
        /* SimGrid ends the run when no actor can move: a rank waiting for a
         * message no one sends. Then the events do not describe a run that
         * finished, and no figure is written. */
        if (playing != -2)
            throw std::runtime_error(events + ": spawn " + std::to_string(playing) +
                                     " never finishes in the replay: a rank waits for a message or a call "
                                     "its peers never make");
        cJSON *root = result(run, name);
        char *text = cJSON_Print(root);
        cJSON_Delete(root);
        FILE *f = out.empty() ? stdout : fopen(out.c_str(), "w");
        if (!f) throw std::runtime_error(out + ": cannot write");
        fputs(text, f);
        fputc('\n', f);
        if (f != stdout) fclose(f);
        free(text);
    } catch (const std::exception &ex) {
        fprintf(stderr, "twin_replay: %s\n", ex.what());
        return 2;
    }
    return 0;
}
