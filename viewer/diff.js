/* lectern viewer, diff: two runs side by side (?trace=A&diff=B).
 *
 * A student's homework against the solution, a CPU run against a GPU run,
 * this machine's run against the committed trace: trace A is shown as
 * always, and every step of it is paired with its counterpart in trace B.
 *
 * Pairing. A step's key is its rank and its whole stack of (path, line,
 * function): the k-th step of A with a key is paired with the k-th step of
 * B with the same key; a step with no partner is "only in A" or "only in
 * B". A PASS folded from several ranks (its check's "ranks") stands for
 * each of them: it is paired once per rank, so a starter's four failing
 * ranks meet the solution's one folded pass four times. Counts are of these
 * pairs ("steps", a folded pass once per rank it stands for).
 *
 * What differs in a pair, by kind:
 *   note    a rendering's text differs once its numbers are set aside, or
 *           the renderings are of other types or other counts
 *   number  a number differs beyond the relative tolerance: a note's args
 *           by expression where both carry them, else the numbers found in
 *           the text, in order; inspect() values; predict() values
 *   check   the check passes in one run and fails in the other
 *   table   a table's shape or a cell differs (numbers beyond the tolerance)
 * Numbers a and b are the same when |a - b| <= rtol * max(|a|, |b|).
 * Checks are compared by outcome only: their lines carry a run's own
 * figures. Plots are not compared.
 *
 * Communication: spawns are paired by stack and order and compared by
 * their ranks, backend and status; a spawn present in one run only is a
 * difference of its own (its calls are not listed). In a pair, each
 * spawn's traffic (docs/trace-format.md) is summed by channel:
 *   a point-to-point channel is a sender and a receiver rank (from -> to),
 *     whatever the calls (send, isend, a sendrecv's half): its matched
 *     messages, and the bytes they carried;
 *   a collective channel is an op on a group (all_reduce on [0,1,2,3]):
 *     its calls, and the bytes of each call summed.
 * A channel differs when its calls or its bytes differ (exact: both are
 * counts), a channel of one side only counting as none on the other. Each
 * differing channel is one communication difference, said in words with
 * both sides ("rank 0 -> rank 1: 3 messages, 12 KiB in A; none in B").
 * Calls left unmatched (links_unmatched) are not in any channel. A timed
 * loop that runs until a budget is spent makes a run's count of calls a
 * timing: the same code can differ here, and the page says what it saw.
 *
 * Nothing here runs without ?diff=: a trace opened alone costs nothing.
 * The comparison itself is L.diffCompare(A, B, rtol), a pure function.
 */
(function () {
  'use strict';

  var L = window.lectern, S = L.S, $ = L.$, esc = L.esc;

  var KINDS = ['note', 'number', 'check', 'table'];
  var KIND_WORDS = { note: 'text', number: 'numbers', check: 'check flips', table: 'table' };

  // ------------------------------------------------------------ comparing

  // A path as one file: "tests/fixtures/../../lectures/x.c" (a fixture that
  // includes a lecture) is "lectures/x.c".
  function normPath(p) {
    var out = [];
    String(p).split('/').forEach(function (x) {
      if (x === '.' || x === '') return;
      if (x === '..' && out.length && out[out.length - 1] !== '..') out.pop(); else out.push(x);
    });
    return out.join('/');
  }

  function stackKey(s) {
    var k = s.rank == null ? '-' : String(s.rank);
    for (var d = 0; d < s.stack.length; d++) {
      var f = s.stack[d];
      k += '\u0001' + normPath(f.path) + ':' + f.line + ':' + (f.function || '');
    }
    return k;
  }

  function foldedCheck(s) {
    var rs = s.renderings;
    for (var j = 0; j < rs.length; j++)
      if (rs[j] && rs[j].type === 'check' && Array.isArray(rs[j].ranks) && rs[j].ranks.length) return rs[j];
    return null;
  }

  // Each step as the units it stands for: {step, rank, key}, in order.
  function units(t) {
    var out = [];
    for (var i = 0; i < t.steps.length; i++) {
      var s = t.steps[i], fc = s.rank != null ? foldedCheck(s) : null;
      if (!fc) { out.push({ step: i, rank: s.rank, key: stackKey(s) }); continue; }
      for (var q = 0; q < fc.ranks.length; q++) {
        var r = fc.ranks[q];
        out.push({ step: i, rank: r, key: stackKey({ rank: r, stack: s.stack }) });
      }
    }
    return out;
  }

  L.diffNumbersSame = function (a, b, rtol) {
    if (a === b) return true;
    if (typeof a !== 'number' || typeof b !== 'number' || !isFinite(a) || !isFinite(b)) return false;
    return Math.abs(a - b) <= rtol * Math.max(Math.abs(a), Math.abs(b));
  };
  var same = L.diffNumbersSame;

  var NUM = /[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?/g;
  function skeleton(text) { return String(text == null ? '' : text).replace(NUM, '#'); }
  function numbersIn(text) { return (String(text == null ? '' : text).match(NUM) || []).map(Number); }

  function argValues(r) {
    if (!Array.isArray(r.args)) return null;
    var m = Object.create(null);
    for (var k = 0; k < r.args.length; k++) {
      var a = r.args[k];
      if (a && typeof a.expr === 'string' && typeof a.value === 'number') m[a.expr] = a.value;
    }
    return m;
  }

  // The text of a rendering that is compared with its twin's, numbers and all.
  function textOf(r) {
    switch (r.type) {
      case 'markdown': case 'text': case 'error': case 'warning': case 'inspect': return r.data;
      case 'predict': return r.question;
      case 'image': return r.src;
      case 'link': return r.url + ' ' + (r.title || '');
      case 'check': return r.name || r.what || '';
      case 'table': return (r.caption || '') + ' | ' + (r.columns || []).map(function (c) { return c && c.name; }).join(' | ');
      default: return '';
    }
  }

  function checkPassed(r, rank) {
    if (Array.isArray(r.ranks) && rank != null) return r.passed === true && r.ranks.indexOf(rank) >= 0;
    return r.passed === true;
  }

  // Numbers of two renderings beyond rtol: [{what, a, b}].
  function numberDiffs(ra, rb, rtol) {
    var out = [], ma = argValues(ra), mb = argValues(rb), k;
    if (ra.type === 'inspect' || ra.type === 'predict') {
      if (!same(ra.value == null ? null : ra.value, rb.value == null ? null : rb.value, rtol))
        out.push({ what: ra.name || 'value', a: ra.value, b: rb.value });
      var va = Array.isArray(ra.values) ? ra.values : [], vb = Array.isArray(rb.values) ? rb.values : [];
      for (k = 0; k < Math.min(va.length, vb.length); k++)
        if (!same(va[k], vb[k], rtol)) out.push({ what: (ra.name || 'values') + '[' + k + ']', a: va[k], b: vb[k] });
      return out;
    }
    if (ma && mb) {
      for (var e in ma)
        if (e in mb && !same(ma[e], mb[e], rtol)) out.push({ what: e, a: ma[e], b: mb[e] });
      return out;
    }
    var na = numbersIn(textOf(ra)), nb = numbersIn(textOf(rb));
    for (k = 0; k < Math.min(na.length, nb.length); k++)
      if (!same(na[k], nb[k], rtol)) out.push({ what: 'number ' + (k + 1) + ' of the text', a: na[k], b: nb[k] });
    return out;
  }

  // Cells of two tables that differ: [{row, col, a, b}]; null when the
  // tables' shapes differ (then the whole table differs).
  function cellDiffs(ra, rb, rtol) {
    var A = Array.isArray(ra.rows) ? ra.rows : [], B = Array.isArray(rb.rows) ? rb.rows : [];
    if (A.length !== B.length) return null;
    var out = [];
    for (var i = 0; i < A.length; i++) {
      var x = A[i] || [], y = B[i] || [];
      if (x.length !== y.length) return null;
      for (var c = 0; c < x.length; c++) {
        var bad = typeof x[c] === 'number' || typeof y[c] === 'number' ? !same(x[c], y[c], rtol) : x[c] !== y[c];
        if (bad) out.push({ row: i, col: c, a: x[c], b: y[c] });
      }
    }
    return out;
  }

  // What differs between step sa (of A) and step sb (of B), for one rank.
  function comparePair(sa, sb, rank, rtol) {
    var d = { kinds: [], numbers: [], cells: [], check: null, texts: [] };
    function kind(k) { if (d.kinds.indexOf(k) < 0) d.kinds.push(k); }
    var A = sa.renderings, B = sb.renderings;
    if (A.length !== B.length) kind('note');
    for (var j = 0; j < Math.min(A.length, B.length); j++) {
      var ra = A[j] || {}, rb = B[j] || {};
      if (ra.type !== rb.type) { kind('note'); d.texts.push({ a: textOf(ra), b: textOf(rb) }); continue; }
      if (ra.type === 'check') {
        var pa = checkPassed(ra, rank), pb = checkPassed(rb, rank);
        if (pa !== pb) { kind('check'); d.check = { a: pa, b: pb, what: ra.name || ra.what || rb.what || '' }; }
        continue;
      }
      if (ra.type === 'plot') continue;
      var ta = textOf(ra), tb = textOf(rb);
      if (skeleton(ta) !== skeleton(tb)) { kind('note'); d.texts.push({ a: ta, b: tb }); }
      else {
        var nd = numberDiffs(ra, rb, rtol);
        if (nd.length) { kind('number'); d.numbers = d.numbers.concat(nd); d.texts.push({ a: ta, b: tb }); }
      }
      if (ra.type === 'table') {
        var cd = cellDiffs(ra, rb, rtol);
        if (cd === null) { kind('table'); d.tableShape = true; }
        else if (cd.length) { kind('table'); d.cells = d.cells.concat(cd); }
      }
    }
    return d;
  }

  function spawnKey(sp) {
    return (sp.stack || []).map(function (f) { return normPath(f.path) + ':' + f.line + ':' + (f.function || ''); }).join('\u0001');
  }

  // A spawn's traffic by channel: key -> {label, calls, bytes}, keys in the
  // order first seen (point-to-point first, then collectives).
  function channels(sp) {
    var out = Object.create(null), order = [];
    function add(key, label, bytes) {
      var c = out[key];
      if (!c) { c = out[key] = { key: key, label: label, calls: 0, bytes: 0 }; order.push(key); }
      c.calls++;
      c.bytes += bytes;
    }
    (sp.messages || []).forEach(function (m) {
      add('p ' + m.from[0] + ' ' + m.to[0], 'rank ' + m.from[0] + ' -> rank ' + m.to[0], m.bytes);
    });
    (sp.collectives || []).forEach(function (c) {
      var g = '[' + (c.group || []).join(',') + ']';
      add('c ' + c.op + ' ' + g, c.op + ' on ' + g, c.bytes);
    });
    return { map: out, order: order };
  }

  // The channels whose calls or bytes differ between two paired spawns:
  // [{key, label, a: {calls, bytes}, b: {calls, bytes}}], A's order first.
  function compareTraffic(sa, sb) {
    var A = channels(sa), B = channels(sb), out = [], none = { calls: 0, bytes: 0 };
    var keys = A.order.concat(B.order.filter(function (k) { return !A.map[k]; }));
    keys.forEach(function (k) {
      var a = A.map[k] || none, b = B.map[k] || none;
      if (a.calls !== b.calls || a.bytes !== b.bytes)
        out.push({ key: k, label: (A.map[k] || B.map[k]).label, a: { calls: a.calls, bytes: a.bytes },
          b: { calls: b.calls, bytes: b.bytes } });
    });
    return out;
  }

  // Spawns paired by stack and order; what differs in each pair.
  function compareSpawns(A, B) {
    var out = [], queue = Object.create(null), SA = A.spawns || [], SB = B.spawns || [], k;
    for (k = 0; k < SB.length; k++) (queue[spawnKey(SB[k])] = queue[spawnKey(SB[k])] || []).push(k);
    var used = {};
    for (k = 0; k < SA.length; k++) {
      var q = queue[spawnKey(SA[k])], j = q && q.length ? q.shift() : -1;
      if (j < 0) { out.push({ a: k, b: -1, what: ['only in A'], comm: [] }); continue; }
      used[j] = true;
      var what = [];
      ['world_size', 'backend', 'status'].forEach(function (f) {
        if (SA[k][f] !== SB[j][f]) what.push(f.replace('_', ' ') + ' ' + SA[k][f] + ' in A, ' + SB[j][f] + ' in B');
      });
      out.push({ a: k, b: j, what: what, comm: compareTraffic(SA[k], SB[j]) });
    }
    for (k = 0; k < SB.length; k++) if (!used[k]) out.push({ a: -1, b: k, what: ['only in B'], comm: [] });
    return out;
  }

  // Pairs units of A with units of B that have the same key, the k-th with
  // the k-th; units already paired (doneA, doneB) and those without a key
  // (null) are left out. Returns, for each unit of A, its partner in B or -1.
  function pairUp(ua, ub, keyOf, doneA, doneB, A, B) {
    var queue = Object.create(null), out = new Int32Array(ua.length).fill(-1), k, key;
    for (k = 0; k < ub.length; k++) {
      if (doneB && doneB[k] >= 0) continue;
      key = keyOf(ub[k], B);
      if (key != null) (queue[key] = queue[key] || []).push(k);
    }
    for (k = 0; k < ua.length; k++) {
      if (doneA && doneA[k] >= 0) continue;
      key = keyOf(ua[k], A);
      var q = key != null ? queue[key] : null;
      if (q && q.length) out[k] = q.shift();
    }
    return out;
  }

  // A check_named() check's key for the second pass: its rank, its stack
  // without the innermost line, its name.
  function namedCheckKey(s, rank) {
    var r = s.renderings[0];
    if (!r || r.type !== 'check' || typeof r.name !== 'string') return null;
    var inner = s.stack[s.stack.length - 1];
    return stackKey({ rank: rank, stack: s.stack.slice(0, -1) }) + '\u0001' + normPath(inner.path) + ':?:' +
      (inner.function || '') + '\u0002' + r.name;
  }

  // The whole comparison: entries in reading order (A's order, a step only
  // in B after the A step its predecessor in B was paired with), the
  // differences among them, the counts.
  L.diffCompare = function (A, B, rtol) {
    var ua = units(A), ub = units(B), k, j;
    var pairOfA = pairUp(ua, ub, function (u) { return u.key; }, null, null);
    var pairOfB = new Int32Array(ub.length).fill(-1);
    for (k = 0; k < ua.length; k++) if (pairOfA[k] >= 0) pairOfB[pairOfA[k]] = k;
    // A named check made at another line of the same function (a pass and
    // a fail reported by two calls) is still the same check.
    var second = pairUp(ua, ub, function (u, t) { return namedCheckKey(t.steps[u.step], u.rank); }, pairOfA, pairOfB, A, B);
    for (k = 0; k < ua.length; k++) if (second[k] >= 0) { pairOfA[k] = second[k]; pairOfB[second[k]] = k; }
    var entries = [], aEntries = [], c = {
      same: 0, differ: 0, onlyA: 0, onlyB: 0, flips: 0, numbers: 0, cells: 0,
      kinds: { note: 0, number: 0, check: 0, table: 0 }
    };
    for (k = 0; k < ua.length; k++) {
      var e;
      j = pairOfA[k];
      if (j < 0) { e = { a: ua[k].step, b: -1, rank: ua[k].rank, kinds: ['onlyA'] }; c.onlyA++; }
      else {
        var d = comparePair(A.steps[ua[k].step], B.steps[ub[j].step], ua[k].rank, rtol);
        e = { a: ua[k].step, b: ub[j].step, rank: ua[k].rank, kinds: d.kinds, d: d };
        if (!d.kinds.length) c.same++;
        else {
          c.differ++;
          d.kinds.forEach(function (x) { c.kinds[x]++; });
          if (d.check) c.flips++;
          c.numbers += d.numbers.length;
          c.cells += d.cells.length;
        }
      }
      aEntries.push(e);
    }
    // Steps only in B, each after the A entry its nearest paired
    // predecessor in B belongs to (-1: before everything).
    var after = Object.create(null), last = -1;
    for (k = 0; k < ub.length; k++) {
      if (pairOfB[k] >= 0) { last = pairOfB[k]; continue; }
      (after[last] = after[last] || []).push({ a: -1, b: ub[k].step, rank: ub[k].rank, kinds: ['onlyB'],
        anchor: last >= 0 ? aEntries[last].a : -1 });
      c.onlyB++;
    }
    function flush(x) { if (after[x]) entries.push.apply(entries, after[x]); }
    flush(-1);
    for (k = 0; k < aEntries.length; k++) { entries.push(aEntries[k]); flush(k); }
    var diffs = [];
    for (k = 0; k < entries.length; k++) if (entries[k].kinds.length) diffs.push(k);
    var spawns = compareSpawns(A, B);
    c.spawns = spawns.filter(function (s) { return s.what.length || s.comm.length; }).length;
    c.comm = spawns.reduce(function (n, s) { return n + s.comm.length; }, 0);
    return { entries: entries, diffs: diffs, counts: c, spawns: spawns, rtol: rtol };
  };

  // ------------------------------------------------------------ the page

  // D.B: the other trace; D.res: the comparison; D.pos: the current
  // difference (an index into D.res.diffs, -1 none); D.byStep: A step ->
  // the entries of its pairs.
  var D = null;
  var PANEL_MAX = 30;        // differences listed at once in the side panel
  var DEFAULT_RTOL = 1e-6;

  L.diffActive = function () { return !!(D && D.res); };

  // Before L.show(A): the trace to compare A with, and its file's name.
  L.diffPrepare = function (B, fileB, rtol) {
    D = { B: B, fileB: fileB, rtol: rtol > 0 || rtol === 0 ? rtol : DEFAULT_RTOL, res: null, pos: -1, byStep: null };
  };

  L.resetDiff = function () {
    D = null;
    document.body.classList.remove('diffing');
    var bar = $('diff-bar');
    if (bar) { bar.hidden = true; bar.innerHTML = ''; }
    var p = $('diff-panel');
    if (p) p.hidden = true;
  };

  // Why B cannot be compared, or null.
  L.diffProblems = function () {
    if (!D) return null;
    var errs = L.validate(D.B);
    return errs.length ? errs : null;
  };

  function compute() {
    var t0 = performance.now();
    D.res = L.diffCompare(L.T, D.B, D.rtol);
    D.byStep = new Map();
    D.res.entries.forEach(function (e, k) {
      var i = e.a >= 0 ? e.a : e.anchor;
      if (i < 0) i = 0;
      if (!D.byStep.has(i)) D.byStep.set(i, []);
      D.byStep.get(i).push(k);
    });
    D.pos = -1;
    L.api.timings.diff_ms = performance.now() - t0;
  }

  // After A is indexed (main.js): compare, draw the bar.
  L.diffInit = function () {
    if (!D) return;
    compute();
    document.body.classList.add('diffing');
    drawBar();
  };

  function nameOf(file) { return L.basename(String(file || '')).replace(/\.(js|json)$/i, ''); }

  // The bar is drawn once per comparison; a new tolerance redraws only its
  // counts (the field keeps its focus).
  function drawBar() {
    var bar = $('diff-bar');
    bar.innerHTML =
      '<h2 id="diff-h" class="diff-h">Compared with <span class="diff-name">' + esc(nameOf(D.fileB) || 'B') + '</span></h2>' +
      '<p class="diff-sum"></p><div class="diff-comm"></div>' +
      '<div class="diff-tools">' +
        '<button type="button" id="diff-prev" title="Previous difference (Shift+d)">previous difference</button> ' +
        '<button type="button" id="diff-next" title="Next difference (d)">next difference</button> ' +
        '<span id="diff-pos" class="diff-pos"></span> ' +
        '<label class="diff-tol">relative tolerance <input type="text" inputmode="decimal" id="diff-rtol" size="7" value="' +
          esc(String(D.rtol)) + '"></label>' +
      '</div>' +
      '<div id="diff-live" class="sr-only" role="status" aria-live="polite" aria-atomic="true"></div>';
    bar.hidden = false;
    $('diff-prev').onclick = function () { L.diffMove(-1); };
    $('diff-next').onclick = function () { L.diffMove(1); };
    var rtol = $('diff-rtol');
    rtol.addEventListener('keydown', function (e) { if (e.key === 'Enter') { e.preventDefault(); setTolerance.call(this); } });
    rtol.addEventListener('change', setTolerance);
    function setTolerance() {
      if (this.value.trim() === '') return;   // being typed: the last tolerance stays
      var v = Number(this.value);
      if (!(v >= 0) || !isFinite(v)) {
        L.tell('The tolerance is a number >= 0 (1e-6, say); kept ' + D.rtol + '.');
        this.value = D.rtol;
        return;
      }
      if (v === D.rtol) return;
      D.rtol = v;
      compute();
      drawCounts();
      L.redrawAll();
      if (S.mode === 'read') L.buildRead();
      L.go(S.cur, { noScroll: true });
      say(D.res.counts.differ + ' steps differ at a relative tolerance of ' + v + '.');
    }
    drawCounts();
  }

  function drawCounts() {
    var c = D.res.counts, bar = $('diff-bar');
    var kinds = KINDS.filter(function (k) { return c.kinds[k]; }).map(function (k) {
      return '<span class="diff-k" data-kind="' + k + '">' + c.kinds[k] + ' ' + KIND_WORDS[k] + '</span>';
    }).join(', ');
    var sum = bar.querySelector('.diff-sum');
    [['same', c.same], ['differ', c.differ], ['only-a', c.onlyA], ['only-b', c.onlyB], ['flips', c.flips],
     ['numbers', c.numbers], ['cells', c.cells]].forEach(function (x) { sum.setAttribute('data-' + x[0], x[1]); });
    sum.innerHTML =
      '<span class="diff-same">' + c.same + ' steps the same</span>, ' +
      '<span class="diff-differ">' + c.differ + ' differ</span>' + (kinds ? ' (' + kinds + ')' : '') + ', ' +
      '<span class="diff-only-a">' + c.onlyA + ' only in A</span>, ' +
      '<span class="diff-only-b">' + c.onlyB + ' only in B</span>. ' +
      '<span class="diff-flips">' + c.flips + ' checks flip</span>; ' +
      '<span class="diff-numbers">' + c.numbers + ' numbers</span> and <span class="diff-cells">' + c.cells +
      ' table cells</span> differ beyond the tolerance.';
    drawComm();
    drawPos();
  }

  // A byte count in words; exact when the rounded words of two different
  // counts would read the same.
  function bytesText(b, other) {
    var u = b >= 1 << 30 ? [1 << 30, 'GiB'] : b >= 1 << 20 ? [1 << 20, 'MiB'] : b >= 1 << 10 ? [1 << 10, 'KiB'] : [1, 'B'];
    var t = +(b / u[0]).toPrecision(4) + ' ' + u[1];
    return other !== undefined && other !== b && t === bytesText(other) ? b + ' B' : t;
  }

  // One side of a channel: "3 messages, 12 KiB" or "none".
  function sideText(x, other, p2p) {
    if (!x.calls) return 'none';
    var what = p2p ? (x.calls === 1 ? 'message' : 'messages') : (x.calls === 1 ? 'call' : 'calls');
    return x.calls + ' ' + what + ', ' + bytesText(x.bytes, other.bytes);
  }

  // The spawns' differences, each in words: what differs in the pair, then
  // one item per channel whose calls or bytes differ (both sides said).
  function drawComm() {
    var c = D.res.counts, el = $('diff-bar').querySelector('.diff-comm');
    var differ = D.res.spawns.filter(function (s) { return s.what.length || s.comm.length; });
    el.setAttribute('data-comm', c.comm);
    el.setAttribute('data-spawns', c.spawns);
    var head = 'Communication: spawns are compared by ranks, backend, outcome, and calls and bytes per channel ' +
      '(sender -> receiver; a collective on its group). ';
    if (!differ.length) {
      el.innerHTML = '<p>' + esc(head + 'The same in both (' + (L.T.spawns || []).length + ' spawns).') + '</p>';
      return;
    }
    var items = differ.map(function (s) {
      var where = s.a >= 0 ? L.T.spawns[s.a].stack : D.B.spawns[s.b].stack, f = where[where.length - 1];
      var chans = s.comm.map(function (x) {
        var p2p = x.key.charAt(0) === 'p';
        return '<li class="diff-chan" data-chan="' + esc(x.key) + '" data-a-calls="' + x.a.calls + '" data-a-bytes="' +
          x.a.bytes + '" data-b-calls="' + x.b.calls + '" data-b-bytes="' + x.b.bytes + '">' +
          esc(x.label + ': ' + sideText(x.a, x.b, p2p) + ' in A; ' + sideText(x.b, x.a, p2p) + ' in B') + '</li>';
      }).join('');
      return '<li class="diff-spawn" data-a="' + s.a + '" data-b="' + s.b + '">' +
        esc('spawn at ' + L.basename(f.path) + ':' + f.line + ': ' +
          (s.what.length ? s.what.join(', ') : 'same ranks, backend and outcome') +
          (s.comm.length ? '; ' + s.comm.length + ' channel' + (s.comm.length === 1 ? '' : 's') + ' differ' : '')) +
        (chans ? '<ul>' + chans + '</ul>' : '') + '</li>';
    }).join('');
    el.innerHTML = '<p>' + esc(head) + '</p><details><summary>' +
      esc(c.comm + ' communication difference' + (c.comm === 1 ? '' : 's') + ' (calls or bytes of a channel), ' +
        c.spawns + ' spawn' + (c.spawns === 1 ? '' : 's') + ' differ') + '</summary><ul>' + items + '</ul></details>';
  }

  function drawPos() {
    var n = D.res.diffs.length;
    $('diff-pos').textContent = D.pos >= 0 ? 'difference ' + (D.pos + 1) + ' of ' + n : n + ' differences';
  }

  function say(msg) {
    var live = $('diff-live');
    if (live) { live.textContent = ''; setTimeout(function () { live.textContent = msg; }, 30); }
  }

  // The A step an entry is shown at.
  function stepOf(e) { return e.a >= 0 ? e.a : Math.max(0, e.anchor); }

  function entryVisible(e) {
    if (e.a >= 0) return L.visible(e.a);
    return S.rank == null || e.rank == null || e.rank === S.rank;
  }

  // Next (dir 1) or previous (-1) difference from where the reader is.
  L.diffMove = function (dir) {
    if (!L.diffActive()) return;
    var ds = D.res.diffs, es = D.res.entries, k;
    var at = D.pos >= 0 && stepOf(es[ds[D.pos]]) === S.cur ? D.pos : -1;
    if (at >= 0) k = at + dir;
    // From no difference: the first one at this step or after it.
    else if (dir > 0) { k = 0; while (k < ds.length && stepOf(es[ds[k]]) < S.cur) k++; }
    else { k = ds.length - 1; while (k >= 0 && stepOf(es[ds[k]]) >= S.cur) k--; }
    while (k >= 0 && k < ds.length && !entryVisible(es[ds[k]])) k += dir;
    if (k < 0 || k >= ds.length) {
      var msg = dir > 0 ? 'No difference after this step.' : 'No difference before this step.';
      L.tell(msg);
      return say(msg);
    }
    D.pos = k;
    L.go(stepOf(es[ds[k]]));
    drawPos();
    say('Difference ' + (k + 1) + ' of ' + ds.length + ': ' + describe(es[ds[k]]));
  };

  function whereB(e) {
    var s = D.B.steps[e.b], f = s.stack[s.stack.length - 1];
    return L.basename(f.path) + ' line ' + f.line;
  }

  // One sentence for a difference, for the screen reader and the panel.
  function describe(e) {
    var r = e.rank != null ? 'rank ' + e.rank + ', ' : '';
    if (e.kinds[0] === 'onlyA') {
      var s = L.T.steps[e.a], f = s.stack[s.stack.length - 1];
      return r + L.basename(f.path) + ' line ' + f.line + ': only in A';
    }
    if (e.kinds[0] === 'onlyB') return r + whereB(e) + ': only in B';
    var words = e.kinds.map(function (k) {
      if (k === 'check') return 'the check ' + (e.d.check.a ? 'passes in A and fails in B' : 'fails in A and passes in B');
      if (k === 'number') return e.d.numbers.length + (e.d.numbers.length === 1 ? ' number differs' : ' numbers differ');
      if (k === 'table') return e.d.tableShape ? 'the table differs in shape' : e.d.cells.length + ' table cells differ';
      return 'the text differs';
    });
    return r + whereB(e) + ': ' + words.join(', ');
  }

  // ------------------------------------------------- marks on A's steps

  // The kinds of difference at step i of A (its pairs' and its own), or null.
  L.diffKinds = function (i) {
    if (!L.diffActive()) return null;
    var ks = D.byStep.get(i);
    if (!ks) return null;
    var out = [];
    for (var q = 0; q < ks.length; q++) {
      var e = D.res.entries[ks[q]];
      if (e.a !== i) continue;
      e.kinds.forEach(function (k) { if (out.indexOf(k) < 0) out.push(k); });
    }
    return out.length ? out : null;
  };

  var TAG_WORDS = { note: 'text', number: 'numbers', check: 'check', table: 'table', onlyA: 'only in A', onlyB: 'only in B' };
  L.diffTag = function (i) {
    var ks = L.diffKinds(i);
    if (!ks) return '';
    return '<span class="diff-tag">differs from B: ' + ks.map(function (k) { return TAG_WORDS[k]; }).join(', ') + '</span>';
  };

  // ---------------------------------------------- the current step's pairs

  // Where two texts differ: the longest common start and end (by words)
  // kept plain, the middle marked.
  function marked(a, b) {
    var ta = String(a == null ? '' : a).split(/(\s+)/), tb = String(b == null ? '' : b).split(/(\s+)/);
    var p = 0;
    while (p < ta.length && p < tb.length && ta[p] === tb[p]) p++;
    var s = 0;
    while (s < ta.length - p && s < tb.length - p && ta[ta.length - 1 - s] === tb[tb.length - 1 - s]) s++;
    function side(t) {
      var mid = t.slice(p, t.length - s).join('');
      return esc(t.slice(0, p).join('')) + (mid ? '<mark>' + esc(mid) + '</mark>' : '') + esc(t.slice(t.length - s).join(''));
    }
    return { a: side(ta), b: side(tb) };
  }

  function fmtNum(x) { return typeof x === 'number' ? String(x) : x == null ? 'none' : String(x); }

  function entryHTML(e) {
    var h = '<li class="diff-entry' + (D.res.diffs.indexOf(D.res.entries.indexOf(e)) === D.pos ? ' diff-cur' : '') + '">' +
      '<p class="diff-what">' + esc(describe(e)) + '</p>';
    if (e.kinds[0] === 'onlyB') {
      var rs = D.B.steps[e.b].renderings;
      h += '<p class="diff-side"><span class="diff-label">B</span> ' + esc(rs.map(textOf).join(' ')) + '</p>';
    } else if (e.d) {
      e.d.texts.forEach(function (t) {
        var m = marked(t.a, t.b);
        h += '<p class="diff-side"><span class="diff-label">A</span> ' + m.a + '</p>' +
          '<p class="diff-side"><span class="diff-label">B</span> ' + m.b + '</p>';
      });
      if (e.d.numbers.length) {
        h += '<ul class="diff-nums">' + e.d.numbers.slice(0, 20).map(function (n) {
          return '<li><code>' + esc(n.what) + '</code>: ' + esc(fmtNum(n.a)) + ' in A, ' + esc(fmtNum(n.b)) + ' in B</li>';
        }).join('') + '</ul>';
      }
      if (e.d.cells.length) {
        h += '<ul class="diff-nums">' + e.d.cells.slice(0, 20).map(function (x) {
          return '<li>row ' + (x.row + 1) + ', column ' + (x.col + 1) + ': ' + esc(fmtNum(x.a)) + ' in A, ' +
            esc(fmtNum(x.b)) + ' in B</li>';
        }).join('') + '</ul>';
      }
    }
    return h + '</li>';
  }

  // The side panel: what differs at the current step, or that nothing does.
  L.drawDiffPanel = function () {
    var p = $('diff-panel');
    if (!L.diffActive()) { if (p) p.hidden = true; return; }
    p.hidden = false;
    var ks = D.byStep.get(S.cur) || [], h = '';
    var shown = ks.map(function (k) { return D.res.entries[k]; }).filter(function (e) { return e.kinds.length; });
    if (!shown.length) {
      var paired = ks.some(function (k) { return D.res.entries[k].a === S.cur; });
      h = '<p class="diff-none">' + (paired ? 'The same in B.' : 'Not compared.') + '</p>';
    } else {
      // Every difference at this step, up to PANEL_MAX (B's steps with no
      // partner can gather at one step of A).
      var cur = D.pos >= 0 ? D.res.entries[D.res.diffs[D.pos]] : null, at = shown.indexOf(cur);
      var from = at >= PANEL_MAX ? at - PANEL_MAX + 1 : 0;
      h = '<ul class="diff-list">' + shown.slice(from, from + PANEL_MAX).map(entryHTML).join('') + '</ul>' +
        (shown.length > PANEL_MAX ? '<p class="diff-none">' + (shown.length - PANEL_MAX) + ' more differences here: ' +
        'd and Shift+d show each.</p>' : '');
    }
    $('diff-info').innerHTML = h;
  };

  // ------------------------------------------------------------ loading

  // ?diff=NAME: read like ?trace= (traces/local/ first, then traces/; the
  // same rules for what may be read), without changing what the page
  // remembers about A.
  L.loadDiffTrace = function (arg, done) {
    var keep = { name: S.name, via: S.via, goodFile: S.goodFile };
    L.loadTrace(arg, function (t, file, problem) {
      S.name = keep.name; S.via = keep.via; S.goodFile = keep.goodFile;
      done(t, file, problem);
    });
  };

  // The "Compare…" dialog: two .json files, read as data.
  L.openCompare = function () {
    var dlg = $('compare');
    $('compare-a').value = '';
    $('compare-b').value = '';
    $('compare-msg').textContent = '';
    dlg.showModal();
  };
})();
