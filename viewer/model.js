/* lectern viewer, model: indexes built once over the steps of a trace.
 *
 *   - per source line: the lecture's notes made there, the rank steps made
 *     there, the spawns made there, the first step passing through it;
 *   - per spawn: its steps rank by rank, and the "spawn: ..." note the
 *     runtime writes at the spawn() line (shown in the spawn's header, so
 *     the spawn() call itself stays visible);
 *   - per step: where step over, step out and their backward twins land;
 *   - the headings of the notes (outline, the lecture's title);
 *   - per note line, lazily: the last line of its statement, so that a note
 *     written over several lines replaces all of them.
 */
(function () {
  'use strict';

  var L = window.lectern;

  function perFile(map, path) { return map[path] || (map[path] = new Map()); }
  function push(map, path, line, i) {
    var m = perFile(map, path), a = m.get(line);
    if (a) a.push(i); else m.set(line, [i]);
  }

  function sameStack(a, b) {
    if (a.length !== b.length) return false;
    for (var d = 0; d < a.length; d++) {
      if (a[d].path !== b[d].path || a[d].line !== b[d].line || a[d].function !== b[d].function) return false;
    }
    return true;
  }

  // The runtime's note at a spawn() line: "spawn: 4 ranks, 0 GPUs: ...".
  function looksLikeSpawnNote(s) {
    var r = s.renderings;
    return r.length === 1 && r[0] && r[0].type === 'markdown' && typeof r[0].data === 'string' &&
      r[0].data.lastIndexOf('spawn: ', 0) === 0;
  }

  // Ranks run at once, and their steps reach the trace in the order they
  // happen to arrive (rank 0, 3, 2, 1). A run of consecutive steps that are
  // different ranks' output of one line of one spawn is put in rank order,
  // so stepping through it and reading it both go 0, 1, 2, 3. Returns where
  // each step of the file went (file index -> index here), or null when none
  // moved: the trace's own references to steps (a message's sides) are file
  // indices.
  function rankOrder(steps) {
    function at(s) { var f = s.stack[s.stack.length - 1]; return f.path + ':' + f.line; }
    var moved = null;
    for (var i = 0; i < steps.length;) {
      var s = steps[i], j = i + 1;
      if (s.rank != null) {
        var seen = Object.create(null), where = at(s);
        seen[s.rank] = true;
        while (j < steps.length && steps[j].rank != null && steps[j].spawn === s.spawn && !seen[steps[j].rank] &&
               at(steps[j]) === where) seen[steps[j++].rank] = true;
        if (j - i > 1) {
          var idx = [];
          for (var k = i; k < j; k++) idx.push(k);
          idx.sort(function (a, b) { return steps[a].rank - steps[b].rank; });
          var run = idx.map(function (a) { return steps[a]; });
          for (k = 0; k < run.length; k++) {
            if (idx[k] === i + k) continue;
            if (!moved) { moved = new Int32Array(steps.length); for (var q = 0; q < moved.length; q++) moved[q] = q; }
            moved[idx[k]] = i + k;
          }
          for (k = 0; k < run.length; k++) steps[i + k] = run[k];
        }
      }
      i = j;
    }
    return moved;
  }

  L.buildIndex = function (t) {
    var fileStep = rankOrder(t.steps);
    var n = t.steps.length;
    var ix = {
      n: n,
      fileStep: fileStep,              // the trace file's step index -> the index here (null: the same)
      depth: new Int32Array(n),
      spawnDepth: new Int32Array(n),   // frames of the parent in a rank step's stack; 0 for a lecture step
      own: Object.create(null),        // path -> Map(line -> lecture steps shown at that line)
      rankAt: Object.create(null),     // path -> Map(line -> rank steps made at that line of rank code)
      any: Object.create(null),        // path -> Map(line -> first step with a frame at that line)
      spawnAt: Object.create(null),    // path -> Map(line -> spawns made at that line)
      spawnRanks: [],                  // spawn -> rank -> [steps]
      spawnSteps: [],                  // spawn -> [steps], in order
      spawnNote: [],                   // spawn -> its note step, or -1
      noteSpawn: new Int32Array(n).fill(-1),   // step -> the spawn it announces, or -1
      errors: [], expected: [], warnings: [], checks: { passed: [], failed: [] }, ranks: [], files: [], headings: [], title: null,
      ends: Object.create(null)        // path -> statement-end cache (stmtEnd)
    };
    var spawns = t.spawns = Array.isArray(t.spawns) ? t.spawns : [];
    var files = Object.keys(t.files || {});
    var rankSeen = {}, maybeNotes = [];
    for (var k = 0; k < spawns.length; k++) {
      var sst = spawns[k].stack, top = sst[sst.length - 1];
      push(ix.spawnAt, top.path, top.line, k);
      ix.spawnRanks.push([]);
      ix.spawnSteps.push([]);
    }
    for (var i = 0; i < n; i++) {
      var s = t.steps[i], st = s.stack, depth = st.length, inner = st[depth - 1];
      ix.depth[i] = depth;
      for (var d = 0; d < depth; d++) {
        var anyF = perFile(ix.any, st[d].path);
        if (!anyF.has(st[d].line)) anyF.set(st[d].line, i);
      }
      if (s.rank == null) {
        // A step that could be a spawn's note waits until the spawns are known.
        if (spawns.length && looksLikeSpawnNote(s)) maybeNotes.push(i);
        else { push(ix.own, inner.path, inner.line, i); headings(s, i, ix); }
      } else {
        var sp = s.spawn;
        if (sp == null) sp = s.spawn = synthSpawn(t, ix, s);
        var D = spawns[sp].stack.length;
        ix.spawnDepth[i] = D;
        var byRank = ix.spawnRanks[sp];
        (byRank[s.rank] || (byRank[s.rank] = [])).push(i);
        ix.spawnSteps[sp].push(i);
        rankSeen[s.rank] = true;
        if (depth > D) push(ix.rankAt, inner.path, inner.line, i);
      }
      var rs = s.renderings;
      // An error a spawn_expect_failure() spawn was made to show is the
      // lesson, not a failure of the run: listed apart.
      for (var j = 0; j < rs.length; j++) if (rs[j] && rs[j].type === 'error') { (rs[j].expected === true ? ix.expected : ix.errors).push(i); break; }
      for (j = 0; j < rs.length; j++) if (rs[j] && rs[j].type === 'warning') { ix.warnings.push(i); break; }
      for (j = 0; j < rs.length; j++) if (rs[j] && rs[j].type === 'check') (rs[j].passed === true ? ix.checks.passed : ix.checks.failed).push(i);
    }
    spawnNotes(t, ix, maybeNotes);
    // The look-alikes that are no spawn's note are notes like any other.
    for (var q = 0; q < maybeNotes.length; q++) {
      var li = maybeNotes[q];
      if (ix.noteSpawn[li] >= 0) continue;
      var ls = t.steps[li].stack, lin = ls[ls.length - 1], at = perFile(ix.own, lin.path), a = at.get(lin.line);
      if (!a) at.set(lin.line, [li]); else a.splice(L.lowerBound(a, li), 0, li);
      headings(t.steps[li], li, ix);
    }
    if (maybeNotes.length) ix.headings.sort(function (a, b) { return a.step - b.step; });
    for (var h = 0; h < ix.headings.length && !ix.title; h++) if (ix.headings[h].level === 1) ix.title = ix.headings[h].text;
    ix.ranks = Object.keys(rankSeen).map(Number).sort(function (a, b) { return a - b; });
    navLinks(t, ix);
    // Files in the order the lecture first reaches them; files no stack names last.
    var order = [], seen = {};
    for (i = 0; i < n && order.length < files.length; i++) {
      var stk = t.steps[i].stack;
      for (d = 0; d < stk.length; d++) {
        var p = stk[d].path;
        if (!seen[p] && t.files[p] != null) { seen[p] = true; order.push(p); }
      }
    }
    files.forEach(function (f) { if (!seen[f]) order.push(f); });
    ix.files = order;
    return ix;
  };

  // Each spawn's note: a lecture step at exactly the spawn's stack, made
  // before the spawn's first rank step, matched in order.
  function spawnNotes(t, ix, cands) {
    var spawns = t.spawns, next = 0;
    for (var k = 0; k < spawns.length; k++) ix.spawnNote.push(-1);
    for (var q = 0; q < cands.length && next < spawns.length; q++) {
      var i = cands[q], s = t.steps[i];
      for (var k2 = next; k2 < spawns.length; k2++) {
        var first = ix.spawnSteps[k2].length ? ix.spawnSteps[k2][0] : Infinity;
        if (first > i && sameStack(s.stack, spawns[k2].stack)) {
          ix.spawnNote[k2] = i;
          ix.noteSpawn[i] = k2;
          next = k2 + 1;
          break;
        }
      }
    }
  }

  // ATX headings of a lecture note, for the outline and the title.
  var HEADING = /^(#{1,6})[ \t]+(.+?)[ \t#]*$/gm;
  function headings(step, i, ix) {
    var r = step.renderings;
    for (var j = 0; j < r.length; j++) {
      var d = r[j] && r[j].type === 'markdown' && r[j].data;
      if (typeof d !== 'string' || (d.charCodeAt(0) !== 35 && d.indexOf('\n#') < 0)) continue;
      HEADING.lastIndex = 0;
      var m;
      while ((m = HEADING.exec(d))) {
        var text = m[2].replace(/[*`]/g, '').trim();
        if (text) ix.headings.push({ step: i, level: m[1].length, text: text });
      }
    }
  }

  // A rank step that names no spawn: reuse a spawn whose stack is a prefix of
  // its own, else make one from everything but its innermost frame.
  function synthSpawn(t, ix, s) {
    for (var k = 0; k < t.spawns.length; k++) {
      var a = t.spawns[k].stack;
      if (a.length < s.stack.length && a.every(function (f, d) {
        return f.path === s.stack[d].path && f.line === s.stack[d].line;
      })) return k;
    }
    var stack = s.stack.slice(0, Math.max(1, s.stack.length - 1));
    t.spawns.push({ id: t.spawns.length, world_size: s.world_size, backend: null, stack: stack, synthetic: true });
    var top = stack[stack.length - 1];
    push(ix.spawnAt, top.path, top.line, t.spawns.length - 1);
    ix.spawnRanks.push([]);
    ix.spawnSteps.push([]);
    return t.spawns.length - 1;
  }

  // ------------------------------------------------------------ step over, out

  // How many levels of calls two stacks share: the same function at each
  // depth, called from the same line one level up. (Two calls of a function
  // from one line one after the other look like one call: the trace cannot
  // tell them apart.)
  function shared(a, b) {
    var n = a.length < b.length ? a.length : b.length, d = 0;
    for (; d < n; d++) {
      if (a[d].function !== b[d].function || a[d].path !== b[d].path) break;
      if (d > 0 && a[d - 1].line !== b[d - 1].line) break;
    }
    return d;
  }

  // Where step over, step out and their backward twins land, for every step,
  // in one pass per thread of execution:
  //   out     the first later step outside the current call (the call of the
  //           innermost function): the caller goes on;
  //   over    the next step, except that a call made from the current
  //           function runs through as one: the first step after it returns;
  //   backOut the step before the current call began;
  //   backOver the previous step, a call made from the current function
  //           skipped back over as one.
  // Threads: the lecture's, which takes in every step (a spawn's ranks run
  // inside the call that made the spawn), and one per rank of each spawn,
  // whose steps only look at their own rank; a rank that leaves its function
  // lands on the lecture's next step. -1: nowhere (the end, or the start).
  function navLinks(t, ix) {
    var steps = t.steps, n = steps.length, i;
    var out = ix.out = new Int32Array(n).fill(-1), over = ix.over = new Int32Array(n).fill(-1);
    var bOut = ix.backOut = new Int32Array(n).fill(-1), bOver = ix.backOver = new Int32Array(n).fill(-1);
    var nextLecture = new Int32Array(n), prevLecture = new Int32Array(n), at = -1;
    for (i = n - 1; i >= 0; i--) { nextLecture[i] = at; if (steps[i].rank == null) at = i; }
    at = -1;
    for (i = 0; i < n; i++) { prevLecture[i] = at; if (steps[i].rank == null) at = i; }

    sweep(null, true);
    ix.spawnRanks.forEach(function (byRank) {
      byRank.forEach(function (seq) { if (seq && seq.length) sweep(seq, false); });
    });

    // seq: the thread's steps in order (null: every step).
    function sweep(seq, lectureThread) {
      var len = seq ? seq.length : n;
      var pend = [], lvl = [], isOver = [];   // pending landings: step, level it waits to leave, which link
      var start = [];                         // start[d]: position in seq where the open call at depth d began
      // Before the first step of a rank: the lecture step before it (its spawn note).
      function at(pos) { return seq ? seq[pos] : pos; }
      function before(pos, j) { return pos > 0 ? at(pos - 1) : lectureThread ? -1 : prevLecture[j]; }
      for (var p = 0; p < len; p++) {
        var j = at(p), sj = steps[j].stack, nj = sj.length;
        var mine = !lectureThread || steps[j].rank == null;
        var s = 0, i = -1, ni = 0, iMine = false;
        if (p > 0) {
          i = at(p - 1);
          ni = steps[i].stack.length;
          iMine = !lectureThread || steps[i].rank == null;
          s = shared(steps[i].stack, sj);
          // Every call j is no longer in: those waiting to leave it land on j.
          while (lvl.length && lvl[lvl.length - 1] > s) {
            var m = pend.pop();
            (isOver.pop() ? over : out)[m] = j;
            lvl.pop();
          }
          if (iMine) {
            // j runs deeper inside i's function: step over i runs through that
            // call and lands on the first step after it.
            if (s >= ni && nj > ni) { pend.push(i); lvl.push(ni + 1); isOver.push(true); }
            else over[i] = j;
          }
        }
        var deeper = p > 0 && s >= nj && ni > nj;   // the step before ran inside a call made from j's function
        if (mine) bOver[j] = p === 0 ? before(0, j) : deeper ? before(start[nj], j) : i;
        for (var d = s; d < nj; d++) start[d] = p;
        if (mine) {
          bOut[j] = before(start[nj - 1], j);
          pend.push(j); lvl.push(nj); isOver.push(false);
        }
      }
      // Calls still open at the end of a rank's steps return to the lecture.
      for (var q = 0; q < pend.length; q++) (isOver[q] ? over : out)[pend[q]] = lectureThread ? -1 : nextLecture[pend[q]];
      var last = at(len - 1);
      if (!lectureThread) over[last] = over[last] >= 0 ? over[last] : nextLecture[last];
    }
  }

  // -------------------------------------------------------------- statements

  // The last line of the statement that starts on `line` of `path`: the
  // first ';' (or '{', '}') outside parentheses, strings and comments. A note
  // spread over several lines replaces all of them.
  L.stmtEnd = function (path, line) {
    var IX = L.IX, c = IX.ends[path];
    if (!c) {
      var text = L.T.files[path];
      if (typeof text !== 'string') return line;
      var starts = [0];
      for (var k = text.indexOf('\n'); k >= 0; k = text.indexOf('\n', k + 1)) starts.push(k + 1);
      c = IX.ends[path] = { text: text, starts: starts, memo: new Map() };
    }
    var e = c.memo.get(line);
    if (e === undefined) { e = scanEnd(c.text, c.starts, line); c.memo.set(line, e); }
    return e;
  };

  var MAX_STATEMENT = 400;   // lines; a statement longer than that is left as it is
  function scanEnd(text, starts, line) {
    if (line < 1 || line > starts.length) return line;
    var i = starts[line - 1], n = text.length, depth = 0, ln = line;
    while (i < n) {
      var c = text.charCodeAt(i);
      if (c === 10) {                                            // newline
        if (++ln > line + MAX_STATEMENT) return line;
        i++;
      } else if (c === 47 && text.charCodeAt(i + 1) === 47) {   // // comment
        while (i < n && text.charCodeAt(i) !== 10) i++;
      } else if (c === 47 && text.charCodeAt(i + 1) === 42) {   // /* comment */
        i += 2;
        while (i < n && !(text.charCodeAt(i) === 42 && text.charCodeAt(i + 1) === 47)) {
          if (text.charCodeAt(i) === 10) ln++;
          i++;
        }
        i += 2;
      } else if (c === 34 || c === 39) {                        // "string" or 'c'
        i++;
        while (i < n) {
          var q = text.charCodeAt(i);
          if (q === 92) { i += 2; continue; }
          if (q === 10) break;
          i++;
          if (q === c) break;
        }
      } else {
        if (c === 40 || c === 91) depth++;                      // ( [
        else if (c === 41 || c === 93) depth--;                 // ) ]
        else if (depth <= 0 && (c === 59 || c === 123 || c === 125)) return ln;   // ; { }
        i++;
      }
    }
    return line;
  }
})();
