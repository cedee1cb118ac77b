#!/usr/bin/env python3
"""Checks that runtime/'s layer folders call each other one way only.

    python3 scripts/check_layers.py [--order trace,tensor,ranks,comm,lecture] OBJECT|FOLDER...
    python3 scripts/check_layers.py --nm-listing FILE [--order ...]

Reads `nm -A` of the objects given (a folder: every object under it, as
BUILD/runtime/<layer>/x.o; `make check-layers` names its runtime objects) or a listing
saved from it: lines "PATH:ADDR TYPE SYMBOL" or "PATH: TYPE SYMBOL"). Each
object belongs to the folder it was built in; a symbol it leaves undefined
(nm type U) and another object defines is a call (or a use of data) from its
folder to the defining one. The check fails, naming the files and symbols,
on a cycle between folders and on a use of a higher layer by a lower one,
the order given lowest first (the default is LAYERS below). Inside a folder
the files may call each other, one way only: over the objects of one folder,
A -> B when A uses a symbol B defines, and any cycle (a file-level circle)
fails too, naming its files and one symbol for each arrow. Exit status: 0
clean, 1 a violation, 2 bad input.
Run by `make check-layers`, which scripts/test.sh runs as one test.
"""
import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict

# The runtime's layers, lowest first: each may use those before it, never
# those after (docs/design.md, "Layers").
LAYERS = ["trace", "tensor", "ranks", "comm", "lecture"]

LINE = re.compile(r"^(?P<path>[^:]+\.o):\s*(?:[0-9a-fA-F]+\s+)?(?P<type>[A-Za-z?])\s+(?P<sym>\S+)\s*$")


def folder_of(path):
    """runtime/<folder>/x.o -> <folder>; the folder the object was built in."""
    parts = path.replace("\\", "/").split("/")
    if "runtime" in parts:
        i = len(parts) - 1 - parts[::-1].index("runtime")
        rest = parts[i + 1:]
        return rest[0] if len(rest) > 1 else "runtime"
    return parts[-2] if len(parts) > 1 else "."


def parse(lines):
    """-> (defined: sym -> [obj], undefined: obj -> [sym])"""
    defined = defaultdict(list)
    undefined = defaultdict(list)
    for raw in lines:
        raw = raw.rstrip("\n")
        if not raw.strip():
            continue
        m = LINE.match(raw)
        if not m:
            continue
        path, t, sym = m.group("path"), m.group("type"), m.group("sym")
        if t == "U":
            undefined[path].append(sym)
        elif t.isupper() and t not in "NU":
            defined[sym].append(path)
    return defined, undefined


def edges_of(defined, undefined):
    """-> {(from_folder, to_folder): [(obj, sym, defining_obj)]}"""
    edges = defaultdict(list)
    for obj, syms in sorted(undefined.items()):
        src = folder_of(obj)
        for sym in sorted(set(syms)):
            for dobj in defined.get(sym, []):
                dst = folder_of(dobj)
                if dst != src:
                    edges[(src, dst)].append((obj, sym, dobj))
    return edges


def file_edges_of(defined, undefined):
    """Inside each folder: -> {folder: {(obj, defining_obj): first symbol (by name)}}"""
    edges = defaultdict(dict)
    for obj, syms in sorted(undefined.items()):
        src = folder_of(obj)
        for sym in sorted(set(syms)):
            for dobj in defined.get(sym, []):
                if dobj != obj and folder_of(dobj) == src:
                    edges[src].setdefault((obj, dobj), sym)
    return edges


def find_cycles(folders, edges):
    """Strongly connected components of more than one node (Tarjan): the
    nodes are folders, or the objects of one folder."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(folders):
        if v not in index:
            visit(v)
    return out


def describe(edge, uses, limit=8):
    lines = ["  %s -> %s:" % edge]
    for obj, sym, dobj in uses[:limit]:
        lines.append("    %s uses %s (defined in %s)" % (obj, sym, dobj))
    if len(uses) > limit:
        lines.append("    ... and %d more" % (len(uses) - limit))
    return "\n".join(lines)


def check(lines, order):
    """-> (ok, report text)"""
    defined, undefined = parse(lines)
    folders = {folder_of(o) for o in undefined} | {folder_of(o) for objs in defined.values() for o in objs}
    if not folders:
        return False, "check_layers: no objects in the listing"
    edges = edges_of(defined, undefined)
    problems = []
    for comp in find_cycles(folders, edges):
        inside = [e for e in sorted(edges) if e[0] in comp and e[1] in comp]
        problems.append("cycle between folders %s:\n%s" % (
            ", ".join(comp), "\n".join(describe(e, edges[e]) for e in inside)))
    for folder, fedges in sorted(file_edges_of(defined, undefined).items()):
        objs = {o for edge in fedges for o in edge}
        for comp in find_cycles(objs, fedges):
            inside = [e for e in sorted(fedges) if e[0] in comp and e[1] in comp]
            problems.append("cycle between files of folder %s: %s\n%s" % (
                folder, ", ".join(comp), "\n".join("  %s -> %s: uses %s" % (a, b, fedges[(a, b)]) for a, b in inside)))
    rank = {name: i for i, name in enumerate(order)}
    for f in sorted(folders):
        if f not in rank:
            problems.append("folder %s is in no layer (add it to the order: %s)" % (f, ",".join(order)))
    for (a, b) in sorted(edges):
        if a in rank and b in rank and rank[a] < rank[b]:
            problems.append("lower layer %s uses higher layer %s:\n%s" % (a, b, describe((a, b), edges[(a, b)])))
    summary = "layers %s: %s" % (" < ".join(order), ", ".join(
        "%s->%s (%d)" % (a, b, len(edges[(a, b)])) for (a, b) in sorted(edges)) or "no calls between folders")
    if problems:
        return False, "\n".join(problems) + "\n" + summary
    return True, summary


def nm_listing(paths):
    objs = []
    for p in paths:
        if os.path.isdir(p):
            for dirpath, _, files in os.walk(p):
                objs += [os.path.join(dirpath, f) for f in files if f.endswith(".o")]
        elif os.path.exists(p):
            objs.append(p)
    if not objs:
        return None
    out = subprocess.run(["nm", "-A"] + sorted(objs), check=True, capture_output=True, text=True).stdout
    return out.splitlines()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--order", default=",".join(LAYERS), help="layers, lowest first, comma-separated")
    ap.add_argument("--nm-listing", help="read this saved `nm -A` output instead of running nm")
    ap.add_argument("paths", nargs="*", default=["build/runtime"], help="the runtime's objects, or folders of them")
    a = ap.parse_args(argv)
    order = [x for x in a.order.split(",") if x]
    if a.nm_listing:
        with open(a.nm_listing) as f:
            lines = f.readlines()
    else:
        lines = nm_listing(a.paths)
        if lines is None:
            print("check_layers: no objects in %s (build first)" % " ".join(a.paths), file=sys.stderr)
            return 2
    ok, text = check(lines, order)
    if ok:
        print("check_layers: OK, " + text)
        return 0
    print("check_layers: FAILED\n" + text, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
