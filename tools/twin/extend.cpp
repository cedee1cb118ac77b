/*
 * extend.cpp: the extension rule. A lecture runs a strategy on the few
 * ranks this machine has (2 to 4); the scaled platform asks what the same
 * program would take on P ranks (8 to 512). Nothing is re-run: the recorded
 * ranks' events are repeated by the rule the strategy follows.
 *
 *   DDP        a spawn whose calls are all collectives over the world (no
 *              group, no message): DDP, and as much of ZeRO and tensor
 *              parallelism as runs over the whole world. Every rank runs the same step on its own
 *              batch, so rank r at P replays recorded rank r mod p: the same
 *              compute, the same collectives with the same bytes per rank,
 *              now over P ranks. A ring all-reduce of b bytes then moves
 *              2 (P - 1) / P * b per rank: its bandwidth term grows by
 *              (P - 1) / P over (p - 1) / p, its latency term by the
 *              2 (P - 1) steps.
 *   pipeline   a spawn whose messages are all between neighbours (rank r
 *              with r - 1 and r + 1), and whose collectives, if any, are
 *              over the world (a barrier before a timed pass, the
 *              timings gathered at its end; replayed over all P ranks, as
 *              DDP's): the same schedule over P stages. The first stage
 *              replays recorded rank 0, the last recorded rank p - 1, every
 *              stage between them recorded rank 1 (p >= 3: a middle stage
 *              to repeat), its peers moved with it. That needs a schedule
 *              every stage runs alike (GPipe: all forwards, then all
 *              backwards). The model is the same, split finer:
 *              each stage's compute (measured, counted and modelled) is
 *              scaled by p / P. The lesson of more stages is the bubble,
 *              (P - 1) / (m + P - 1) of the time for m micro-batches, which
 *              only shows if the work to share stays fixed; the same
 *              compute per stage would be a model P / p times larger. The
 *              activations sent between stages keep their size (the
 *              micro-batch is the same).
 *
 *   1f1b       a pipeline whose stage s warms up with min(p - s, m) sends
 *              on before its first gradient (1F1B: the order depends on the
 *              stage's place, so no recorded stage repeats): every stage's
 *              order generated for P stages from recorded stage 1's
 *              forwards and backwards (one_f_one_b, below), the compute
 *              scaled by p / P as the pipeline rule scales it.
 *   mesh       a spawn whose collectives are over the groups of a 2-D mesh
 *              of p = D x T ranks, rank = T d + t (lecture_scaling's data x
 *              tensor mesh), beside collectives over the world, and no
 *              message. Each group is one of the mesh's two axes: the
 *              *inner* groups, T neighbouring ranks {T d, ..., T d + T - 1}
 *              (tensor parallelism: one batch slice, the weights cut T
 *              ways), and the *outer* groups, every T-th rank {t, T + t,
 *              ..., T (D - 1) + t} (data parallelism: one slice of the
 *              weights, D batch slices). At P = D' x T ranks the inner axis
 *              stays T wide and the outer one grows to D' = P / T: rank
 *              T d' + t replays recorded rank T (d' mod D) + t, the same
 *              compute and the same bytes per call (DDP's rule along the
 *              outer axis), its inner groups rebuilt as {T d', ...,
 *              T d' + T - 1} and its outer ones as {t, T + t, ...,
 *              T (D' - 1) + t}, by the same axis rule. Ranks fill the
 *              platform's hosts in order, so an inner group of T ranks,
 *              T dividing the 8 GPUs of a node, stays inside one node
 *              (tensor parallelism on NVLink) and the outer groups cross
 *              nodes. T is read from the groups (an inner group's size, an
 *              outer group's stride); groups that fit neither axis, or
 *              disagree on T, are refused, as is a P that T does not divide.
 *
 * Either rule keeps a barrier over the world (it lines the ranks up and
 * moves nothing): at P ranks it is a barrier over the P.
 *
 * Anything else (collectives over groups that are no mesh's axes, messages
 * beyond neighbours or beside group collectives: a ring of messages closed
 * from the last rank to the first) has no rule here and is refused, with
 * why.
 */
#include "extend.hpp"

#include <algorithm>
#include <stdexcept>

namespace twin {

static bool is_message(const std::string &op) { return op == "send" || op == "recv" || op == "sendrecv"; }
static bool is_local(const std::string &op) { return op == "compute" || op == "modelled" || op == "wait"; }

static std::runtime_error refuse(const Spawn &sp, int P, const std::string &why) {
    return std::runtime_error("spawn " + std::to_string(sp.id) + " (" + std::to_string(sp.world_size) +
                              " ranks): no rule extends it to " + std::to_string(P) + " ranks: " + why +
                              " (DDP's rule needs collectives over the world only, a pipeline's messages "
                              "between neighbouring ranks, beside collectives over the world, a mesh's collectives over the "
                              "groups of its two axes)");
}

/* A stage's warm-up: the micro-batches it sends on before it first hears
 * back from the next stage. GPipe's is m on every stage; 1F1B's is p - s on
 * stage s, a schedule that depends on the stage's place and the number of
 * stages, so repeating recorded stage 1 would not be 1F1B at P stages. */
static int warm_up(const Rank &rank, int r) {
    int sent = 0;
    for (const Event &e : rank.events) {
        if ((e.op == "recv" && e.peer == r + 1) || (e.op == "sendrecv" && e.src == r + 1)) break;
        if ((e.op == "send" || e.op == "sendrecv") && e.peer == r + 1) sent++;
    }
    return sent;
}

/* The micro-batches a pipeline rank sends on to the next stage in all. */
static int forwards(const Rank &rank, int r) {
    int sent = 0;
    for (const Event &e : rank.events)
        if ((e.op == "send" || e.op == "sendrecv") && e.peer == r + 1) sent++;
    return sent;
}

/* "gpipe": every stage warms up with all m micro-batches; "1f1b": stage s
 * sends min(p - s, m) on before its first gradient (p - s - 1 forwards of
 * warm-up, then the first of the steady one-forward-one-backward). Else
 * throws: no one schedule to extend. */
static std::string schedule(const Spawn &sp, int P) {
    int p = sp.world_size, m = forwards(sp.ranks[0], 0);
    bool gpipe = true, one_f_one_b = true;
    for (int r = 0; r + 1 < p; r++) {
        int w = warm_up(sp.ranks[r], r);
        gpipe = gpipe && w == m;
        one_f_one_b = one_f_one_b && w == std::min(p - r, m);
    }
    if (gpipe) return "gpipe";
    if (one_f_one_b) return "1f1b";
    int w0 = warm_up(sp.ranks[0], 0), w1 = warm_up(sp.ranks[1], 1);
    throw refuse(sp, P,
                 "its stages warm up differently (rank 0 sends " + std::to_string(w0) +
                     " micro-batches on before its first gradient, rank 1 " + std::to_string(w1) +
                     "): neither GPipe (every stage all " + std::to_string(m) + ") nor 1F1B (stage s min(p - s, " +
                     std::to_string(m) + "))");
}

/* A group's place in a mesh of p ranks with inner axis T: the T it says
 * (an inner group {T d, ..., T d + T - 1}: its size; an outer group {t,
 * T + t, ...}: its stride), or 0 when it is neither. */
static int axis_width(const std::vector<int> &g, int p) {
    int n = (int)g.size();
    if (n < 2 || n >= p || p % n) return 0;
    bool inner = g[0] % n == 0, outer = g[0] < p / n;
    for (int i = 0; i < n; i++) {
        inner = inner && g[i] == g[0] + i;
        outer = outer && g[i] == g[0] + i * (p / n);
    }
    return inner ? n : outer ? p / n : 0;
}

/* "ddp", "pipeline", "mesh", or throws naming the first event no rule covers. */
static std::string strategy(const Spawn &sp, int P, int *T) {
    bool collectives = false, messages = false, groups = false;
    *T = 0;
    for (int r = 0; r < sp.world_size; r++) {
        for (const Event &e : sp.ranks[r].events) {
            if (is_local(e.op)) continue;
            /* A barrier over the world only lines the ranks up (a pipeline's
             * stages before the clock matters): either rule keeps it, over
             * the P ranks. Over a group it is refused below like any call. */
            if (e.op == "barrier" && e.group.empty()) continue;
            std::string who = "rank " + std::to_string(r) + "'s " + e.op;
            if (is_message(e.op)) {
                messages = true;
                int peers[2] = {e.peer, e.op == "sendrecv" ? e.src : e.peer};
                for (int q : peers)
                    if (q != r - 1 && q != r + 1)
                        throw refuse(sp, P, who + " with rank " + std::to_string(q) + ", not a neighbour");
            } else {
                collectives = true;
                if (e.group.empty()) continue;
                groups = true;
                int t = axis_width(e.group, sp.world_size);
                if (!t) throw refuse(sp, P, who + " is over a group that is no axis of a mesh (neither neighbouring "
                                                  "ranks nor every T-th rank)");
                if (*T && t != *T)
                    throw refuse(sp, P, who + "'s group says a mesh " + std::to_string(t) + " ranks wide, another " +
                                            std::to_string(*T));
                *T = t;
            }
        }
    }
    if (groups && messages) throw refuse(sp, P, "it has both messages and collectives over groups");
    if (groups) {
        if (P % *T)
            throw refuse(sp, P, "its mesh's inner axis is " + std::to_string(*T) + " ranks wide, which does not divide " +
                                    std::to_string(P));
        return "mesh";
    }
    if (messages) return schedule(sp, P) == "1f1b" ? "1f1b" : "pipeline";
    if (collectives) return "ddp";
    throw refuse(sp, P, "it makes no calls, so nothing says which strategy it follows");
}

static Event scaled(Event e, double f) {
    e.end = e.start + (e.end - e.start) * f;
    e.flops *= f, e.bytes *= f, e.ms *= f;
    return e;
}

/* A group that lists every rank is the world: at P ranks, over the P. */
static Spawn world_groups_cleared(Spawn sp) {
    for (Rank &rank : sp.ranks)
        for (Event &e : rank.events)
            if ((int)e.group.size() == sp.world_size) e.group.clear();
    return sp;
}

/* A middle stage's run cut into its parts: what comes before the first
 * message, then per micro-batch a forward (from its receive from the stage
 * before, through its send on, and what follows up to the next message) and
 * a backward (from the gradient's receive from the stage after, through
 * its send back). The last backward keeps what ends the pass (the waits
 * for the sends, collectives over the world). */
struct Units {
    std::vector<Event> prefix;
    std::vector<std::vector<Event>> forward, backward;
};

static Units cut(const Spawn &sp, int P, int r) {
    Units u;
    std::vector<Event> *into = &u.prefix;
    for (const Event &e : sp.ranks[r].events) {
        if (e.op == "sendrecv") throw refuse(sp, P, "rank " + std::to_string(r) + "'s sendrecv: 1F1B's rule cuts sends and receives apart");
        if (e.op == "recv" && e.peer == r - 1) u.forward.emplace_back(), into = &u.forward.back();
        if (e.op == "recv" && e.peer == r + 1) u.backward.emplace_back(), into = &u.backward.back();
        into->push_back(e);
    }
    return u;
}

/* 1F1B over P stages: stage s warms up with w = min(P - s - 1, m) forwards,
 * then alternates a forward and a backward, then drains w backwards: the
 * order lecture_08 runs (lecture_08.c, run_schedule), generated here for
 * every stage. Every stage is built from recorded middle stage 1's
 * forwards and backwards (each stage's place changes its order, so no
 * recorded stage's order repeats): the first stage without the receive from
 * before and the send back, the last without the send on and the
 * gradient's receive; their own compute (the data, the loss) is that of a
 * middle stage, scaled as the pipeline rule scales it (p / P: the same
 * model split finer). The activations and gradients keep their size. */
static Extended one_f_one_b(const Spawn &sp, int P, Extended x) {
    int p = sp.world_size;
    Units u = cut(sp, P, 1);
    int m = (int)u.forward.size();
    if ((int)u.backward.size() != m)
        throw refuse(sp, P, "rank 1 has " + std::to_string(m) + " forwards and " + std::to_string(u.backward.size()) + " backwards");
    double f = (double)p / P;
    for (int s = 0; s < P; s++) {
        Rank rank = sp.ranks[1];
        rank.events = u.prefix;
        int w = std::min(P - s - 1, m);
        std::vector<const std::vector<Event> *> order;
        for (int k = 0; k < w; k++) order.push_back(&u.forward[k]);
        for (int k = w; k < m; k++) order.push_back(&u.forward[k]), order.push_back(&u.backward[k - w]);
        for (int k = m - w; k < m; k++) order.push_back(&u.backward[k]);
        std::vector<int> dropped; /* requests of sends this stage has no peer for */
        for (const std::vector<Event> *unit : order)
            for (Event e : *unit) {
                if (e.op == "compute" || e.op == "modelled") e = scaled(e, f);
                if (is_message(e.op)) {
                    e.peer = s + (e.peer - 1);
                    if (e.peer < 0 || e.peer >= P) {
                        if (e.req) dropped.push_back(e.req);
                        continue;
                    }
                }
                if (e.op == "wait" && std::find(dropped.begin(), dropped.end(), e.req) != dropped.end()) continue;
                rank.events.push_back(e);
            }
        x.spawn.ranks.push_back(rank);
    }
    return x;
}

Extended extend(const Spawn &recorded, int P, bool tp_across) {
    Spawn sp = world_groups_cleared(recorded);
    Extended x;
    int T;
    x.rule = strategy(sp, P, &T);
    x.spawn.id = sp.id;
    x.spawn.world_size = P;
    int p = sp.world_size;
    if (tp_across && x.rule != "mesh") throw refuse(sp, P, "tensor parallelism across nodes is a mesh's placement; this spawn is no mesh");
    if (P == p && !tp_across) { /* the run itself */
        x.spawn = sp;
        return x;
    }
    if (x.rule == "ddp") {
        for (int r = 0; r < P; r++)
            x.spawn.ranks.push_back(sp.ranks[r % p]);
        return x;
    }
    if (x.rule == "mesh") {
        int D = p / T, D2 = P / T;
        for (int r = 0; r < P; r++) {
            int d = r / T, t = r % T, from = T * (d % D) + t; /* the recorded rank this one repeats */
            Rank rank = sp.ranks[from];
            for (Event &e : rank.events) {
                if (e.group.empty()) continue; /* the world: over the P */
                bool inner = e.group[1] == e.group[0] + 1;
                int root = e.peer;
                e.group.clear();
                for (int i = 0; i < (inner ? T : D2); i++)
                    e.group.push_back(inner ? T * d + i : T * i + t);
                /* A rooted call keeps its root's place along the axis. */
                if (root >= 0) e.peer = inner ? T * d + root % T : T * (root / T) + t;
            }
            x.spawn.ranks.push_back(rank);
            if (tp_across) x.spawn.hosts.push_back(t * D2 + d); /* the mistake, on purpose */
        }
        return x;
    }
    if (x.rule == "1f1b") {
        if (p < 3) throw refuse(sp, P, "its messages pass between 2 ranks only: as a pipeline, it has no middle stage to repeat");
        return one_f_one_b(sp, P, x);
    }
    if (P > 2 && p < 3) throw refuse(sp, P, "its messages pass between 2 ranks only: as a pipeline, it has no middle stage to repeat");
    double f = (double)p / P;
    for (int s = 0; s < P; s++) {
        int t = s == 0 ? 0 : s == P - 1 ? p - 1 : 1; /* the recorded stage this one repeats */
        Rank rank = sp.ranks[t];
        for (Event &e : rank.events) {
            if (e.op == "compute" || e.op == "modelled") e = scaled(e, f);
            if (!is_message(e.op)) continue; /* a collective's root stays where it was */
            if (e.peer >= 0) e.peer = s + (e.peer - t);
            if (e.src >= 0) e.src = s + (e.src - t);
        }
        x.spawn.ranks.push_back(rank);
    }
    return x;
}

} // namespace twin
