/*
 * events.cpp: reads NAME.events.json (written by the runtime's
 * twin_record.c with --twin-record) with cJSON.
 */
#include "events.hpp"

#include <cjson/cJSON.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace twin {

bool Spawn::complete() const {
    if ((int)ranks.size() != world_size) return false;
    for (const Rank &r : ranks)
        if (!r.present) return false;
    return true;
}

double Spawn::measured_s() const {
    double first = 1e300, last = -1e300;
    for (const Rank &r : ranks) {
        if (!r.present) continue;
        if (!r.events.empty()) first = std::min(first, r.events.front().start);
        last = std::max(last, r.end);
    }
    return last > first ? last - first : 0;
}

static double num(const cJSON *o, const char *key, double fallback) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

static Event read_event(const cJSON *o, const std::string &where) {
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(o, "op");
    if (!cJSON_IsString(op)) throw std::runtime_error(where + ": an event without \"op\"");
    Event e;
    e.op = op->valuestring;
    e.start = num(o, "start", 0);
    e.end = num(o, "end", e.start);
    e.flops = num(o, "flops", 0);
    e.bytes = num(o, "bytes", 0);
    e.recv_bytes = num(o, "recv_bytes", 0);
    e.ms = num(o, "ms", 0);
    e.peer = (int)num(o, "peer", -1);
    e.src = (int)num(o, "src", -1);
    e.req = (int)num(o, "req", 0);
    if (e.bytes < 0 || e.flops < 0 || e.ms < 0) throw std::runtime_error(where + ": a negative size or time");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "group"), *it;
    cJSON_ArrayForEach(it, g) e.group.push_back(it->valueint);
    return e;
}

Run read_events(const std::string &path) {
    std::ifstream f(path);
    if (!f) throw std::runtime_error(path + ": cannot open (run the lecture with --twin-record first)");
    std::stringstream ss;
    ss << f.rdbuf();
    cJSON *root = cJSON_Parse(ss.str().c_str());
    if (!root) throw std::runtime_error(path + ": not JSON");
    Run run;
    const cJSON *lecture = cJSON_GetObjectItemCaseSensitive(root, "lecture");
    if (cJSON_IsString(lecture)) run.lecture = lecture->valuestring;
    const cJSON *spawns = cJSON_GetObjectItemCaseSensitive(root, "spawns"), *s;
    if (!cJSON_IsArray(spawns)) {
        cJSON_Delete(root);
        throw std::runtime_error(path + ": no \"spawns\" array");
    }
    try {
        cJSON_ArrayForEach(s, spawns) {
            Spawn sp;
            sp.id = (int)num(s, "id", -1);
            sp.world_size = (int)num(s, "world_size", 0);
            const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(s, "ranks"), *r;
            int k = 0;
            cJSON_ArrayForEach(r, ranks) {
                Rank rank;
                std::string where = path + ": spawn " + std::to_string(sp.id) + " rank " + std::to_string(k++);
                if (cJSON_IsObject(r)) {
                    rank.present = true;
                    rank.end = num(r, "end", 0);
                    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(r, "events"), *e;
                    cJSON_ArrayForEach(e, ev) rank.events.push_back(read_event(e, where));
                }
                sp.ranks.push_back(rank);
            }
            run.spawns.push_back(sp);
        }
    } catch (...) {
        cJSON_Delete(root);
        throw;
    }
    cJSON_Delete(root);
    return run;
}

static cJSON *event_json(const Event &e) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", e.op.c_str());
    cJSON_AddNumberToObject(o, "start", e.start);
    cJSON_AddNumberToObject(o, "end", e.end);
    if (e.flops) cJSON_AddNumberToObject(o, "flops", e.flops);
    if (e.bytes) cJSON_AddNumberToObject(o, "bytes", e.bytes);
    if (e.recv_bytes) cJSON_AddNumberToObject(o, "recv_bytes", e.recv_bytes);
    if (e.ms) cJSON_AddNumberToObject(o, "ms", e.ms);
    if (e.peer >= 0) cJSON_AddNumberToObject(o, "peer", e.peer);
    if (e.src >= 0) cJSON_AddNumberToObject(o, "src", e.src);
    if (e.req) cJSON_AddNumberToObject(o, "req", e.req);
    if (!e.group.empty()) cJSON_AddItemToObject(o, "group", cJSON_CreateIntArray(e.group.data(), (int)e.group.size()));
    return o;
}

void write_events(const Run &run, const std::string &path) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "lecture", run.lecture.c_str());
    cJSON *spawns = cJSON_AddArrayToObject(root, "spawns");
    for (const Spawn &sp : run.spawns) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "id", sp.id);
        cJSON_AddNumberToObject(s, "world_size", sp.world_size);
        cJSON *ranks = cJSON_AddArrayToObject(s, "ranks");
        for (const Rank &r : sp.ranks) {
            if (!r.present) {
                cJSON_AddItemToArray(ranks, cJSON_CreateNull());
                continue;
            }
            cJSON *o = cJSON_CreateObject(), *ev = cJSON_AddArrayToObject(o, "events");
            for (const Event &e : r.events)
                cJSON_AddItemToArray(ev, event_json(e));
            cJSON_AddNumberToObject(o, "end", r.end);
            cJSON_AddItemToArray(ranks, o);
        }
        cJSON_AddItemToArray(spawns, s);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    FILE *f = text ? fopen(path.c_str(), "w") : nullptr;
    bool ok = f && fputs(text, f) >= 0;
    if (f) ok = fclose(f) == 0 && ok;
    free(text);
    if (!ok) throw std::runtime_error(path + ": cannot write");
}

} // namespace twin
