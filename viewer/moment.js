/* lectern viewer, moment: every rank of a spawn at one moment.
 *
 * "As it happened" moves through steps; this moves through wall-clock time.
 * The panel "Every rank at one moment" (shown on a spawn's steps, closed
 * until opened) has a slider over the spawn's event times (docs/trace-
 * format.md: the ranks' steps' `time`, each message's and collective's
 * start and end, each model_compute span's start and end, all on the one
 * clock of the lecture), a lane per rank with the recorded intervals and a
 * cursor at the moment, and each rank's state and line at that moment.
 * Arrow keys move the slider to the next or previous event time, Home and
 * End to the first and last; a click or drag on the lanes picks the nearest
 * event. The state of every rank is said in one sentence to a screen reader
 * once the slider rests. Nothing is built until the panel is opened: opening
 * a trace costs nothing more.
 */
(function () {
  'use strict';

  var L = window.lectern, S = L.S, $ = L.$, esc = L.esc;

  var forT = null;     // the trace the models below were made for
  var models = [];     // spawn -> its model, made when first shown
  var open = false;    // the panel's content shown
  var shownK = -1;     // the spawn the panel shows
  var at = 0;          // the moment: an index in models[shownK].times
  var keepTime = false;   // a step chosen from the panel: the moment stays
  var laidFor = null;  // the rank filter the lanes were drawn for
  var marked = [];     // cells marked as a rank's step at the moment
  var MAX_BARS = 4000; // intervals the lanes draw at most (one SVG element each)

  // A call that returns before its transfer is done (isend, irecv,
  // all_reduce_async, ...): its recorded end is when its wait returned.
  function isAsync(call) { return /^i(send|recv)$|_async$/.test(call || ''); }

  // ------------------------------------------------------------ the model

  // Each rank's steps (by time) and intervals; every event time, sorted.
  function build(k) {
    var T = L.T, sp = T.spawns[k], byRank = L.IX.spawnRanks[k] || [];
    var ws = Math.max(sp.world_size || 0, byRank.length), ranks = [], all = [];
    for (var r = 0; r < ws; r++) {
      var steps = (byRank[r] || []).filter(function (i) { return typeof T.steps[i].time === 'number'; });
      steps.sort(function (a, b) { return T.steps[a].time - T.steps[b].time || a - b; });
      ranks.push({ steps: steps, times: steps.map(function (i) { return T.steps[i].time; }), calls: [], last: -Infinity });
      steps.forEach(function (i) { all.push(T.steps[i].time); });
    }
    function site(x) { return (x[1] != null && sp.link_sites && sp.link_sites[x[1]]) || {}; }
    function ok(x) { return Array.isArray(x) && ranks[x[0]] && typeof x[3] === 'number' && typeof x[4] === 'number'; }
    function add(r, c) { ranks[r].calls.push(c); all.push(c.start, c.end); }
    (sp.messages || []).forEach(function (m) {
      if (!ok(m.from) || !ok(m.to)) return;
      var a = m.from, b = m.to, sa = site(a), sb = site(b);
      add(a[0], { kind: 'send', call: sa.call, line: sa.line, start: a[3], end: a[4], peer: b[0], peerStart: b[3] });
      add(b[0], { kind: 'recv', call: sb.call, line: sb.line, start: b[3], end: b[4], peer: a[0], peerStart: a[3] });
    });
    (sp.collectives || []).forEach(function (c) {
      if (!Array.isArray(c.calls)) return;
      var calls = c.calls.filter(ok);
      calls.forEach(function (x) {
        var s = site(x);
        add(x[0], { kind: 'coll', call: s.call || c.op, line: s.line, start: x[3], end: x[4], others: calls });
      });
    });
    (T.modelled || []).forEach(function (m) {
      if (m && m.spawn === k && ranks[m.rank] && typeof m.start === 'number' && typeof m.end === 'number')
        add(m.rank, { kind: 'model', call: 'model_compute', line: m.line, start: m.start, end: m.end, ms: m.ms });
    });
    ranks.forEach(function (x) {
      x.calls.sort(function (a, b) { return a.start - b.start; });
      var lt = x.times.length ? x.times[x.times.length - 1] : -Infinity;
      x.calls.forEach(function (c) { if (c.end > lt) lt = c.end; });
      x.last = lt;
    });
    all.sort(function (a, b) { return a - b; });
    var times = [];
    all.forEach(function (t) { if (!times.length || t > times[times.length - 1]) times.push(t); });
    return { k: k, ranks: ranks, times: times };
  }

  function model(k) {
    if (forT !== L.T) { forT = L.T; models = []; open = false; shownK = -1; }
    return models[k] || (models[k] = build(k));
  }

  // ------------------------------------------------------------ the rule

  // Rank r's state at time t, from the recorded intervals only:
  //   1. before its first event (step or call): "starting, nothing recorded
  //      yet" (the trace has no rank's start time);
  //   2. inside a blocking call, start <= t < end (send, recv, sendrecv's
  //      two sides, a collective): a receive whose sender had not yet
  //      entered its send, "waiting for rank k"; a send whose receiver had
  //      not yet entered its receive, "sending to rank k, not yet
  //      receiving"; a collective some member had not yet entered, "in
  //      all_reduce, waiting for ranks a, b"; else "receiving from rank k",
  //      "sending to rank k", "in all_reduce" (the partners are all in: data
  //      moves). Of two such (sendrecv), a waiting one is said;
  //   3. inside a model_compute span: "computing (modelled)";
  //   4. at or after its last event (its last step, its last call's end):
  //      "done" (the trace has no rank's return time; nothing later was
  //      recorded);
  //   5. otherwise "computing": running its own code between calls. An
  //      async call in flight is named beside it; its interval ends when its
  //      wait returned and the trace does not say when the wait was entered,
  //      so a rank blocked in dist_wait is said to be computing.
  // Its line: the call's line when inside a call, else its last step at or
  // before t (never the next one).
  function stateAt(m, r, t) {
    var R = m.ranks[r], p = L.lowerBound(R.times, t + 1e-12) - 1;
    var st = { r: r, step: p >= 0 ? R.steps[p] : -1, word: '', line: null, call: null, inflight: [] };
    if (p >= 0) {
      var f = L.T.steps[st.step].stack;
      st.line = f[f.length - 1].line;
    }
    var best = null, bestPri = 0, modelled = null;
    for (var q = 0; q < R.calls.length; q++) {
      var c = R.calls[q];
      if (c.start > t) break;
      if (t >= c.end) continue;
      if (c.kind === 'model') { modelled = c; continue; }
      if (isAsync(c.call)) { st.inflight.push(c); continue; }
      var w = callWord(c, t), pri = w.waiting ? 2 : 1;
      if (pri > bestPri) { best = { c: c, word: w.word }; bestPri = pri; }
    }
    var first = R.times.length ? R.times[0] : Infinity;
    if (R.calls.length && R.calls[0].start < first) first = R.calls[0].start;
    if (best) { st.word = best.word; st.call = best.c; }
    else if (modelled) { st.word = 'computing (modelled)'; st.call = modelled; }
    else if (t < first) st.word = 'starting, nothing recorded yet';
    else if (t >= R.last) st.word = 'done';
    else st.word = 'computing';
    if (st.call && st.call.line) st.line = st.call.line;
    return st;
  }

  function callWord(c, t) {
    if (c.kind === 'recv')
      return c.peerStart > t ? { word: 'waiting for rank ' + c.peer, waiting: true } : { word: 'receiving from rank ' + c.peer };
    if (c.kind === 'send')
      return c.peerStart > t ? { word: 'sending to rank ' + c.peer + ', not yet receiving', waiting: true } :
        { word: 'sending to rank ' + c.peer };
    var late = c.others.filter(function (x) { return x[3] > t; }).map(function (x) { return x[0]; });
    var op = c.call || 'collective';
    return late.length ? { word: 'in ' + op + ', waiting for rank' + (late.length > 1 ? 's ' : ' ') + late.join(', '), waiting: true } :
      { word: 'in ' + op };
  }

  function inflightWords(st) {
    return st.inflight.map(function (c) {
      return c.call + (c.kind === 'send' ? ' to rank ' + c.peer : c.kind === 'recv' ? ' from rank ' + c.peer : '') + ' in flight';
    });
  }

  // ------------------------------------------------------------ drawing

  // The spawn the current step belongs to (a rank's step, or its note).
  function spawnOfCur() {
    var s = L.T.steps[S.cur];
    return s.rank != null ? s.spawn : L.IX.noteSpawn[S.cur];
  }

  function shownRanks(m) {
    var rs = [];
    for (var r = 0; r < m.ranks.length; r++) if (S.rank == null || S.rank === r) rs.push(r);
    return rs;
  }

  function rel(m, t) { return L.fmtSeconds(t - m.times[0]); }

  L.drawMoment = function () {
    var panel = $('moment-panel');
    if (!panel || !L.T) return;
    if (forT !== L.T) { forT = L.T; models = []; open = false; shownK = -1; }
    var k = S.mode === 'read' ? -1 : spawnOfCur();
    panel.hidden = k == null || k < 0;
    if (panel.hidden) { unmarkCells(); return; }
    $('moment-toggle').setAttribute('aria-expanded', String(open));
    $('moment').hidden = !open;
    if (!open) return;
    var m = model(k), keep = keepTime && k === shownK;
    keepTime = false;
    if (!m.times.length) { shownK = k; $('moment').innerHTML = '<p>This spawn recorded no times.</p>'; return; }
    if (!keep) at = nearest(m, L.T.steps[S.cur].time);
    at = Math.min(at, limit(m));
    if (k !== shownK || !$('mo-t') || laidFor !== S.rank) { shownK = k; laidFor = S.rank; layout(m); }
    update(false);
  };

  function nearest(m, t) {
    if (typeof t !== 'number') return 0;
    var p = L.lowerBound(m.times, t);
    if (p >= m.times.length) return m.times.length - 1;
    if (p > 0 && t - m.times[p - 1] < m.times[p] - t) return p - 1;
    return p;
  }

  // The slider, the lanes and the list of ranks, drawn when the spawn (or
  // the rank filter) changes; update() moves the cursor and the words.
  function layout(m) {
    var n = m.times.length, rs = shownRanks(m), t0 = m.times[0], span = Math.max(m.times[n - 1] - t0, 1e-9);
    var h = '<p class="mo-when" id="mo-when"></p>' +
      '<input type="range" id="mo-t" min="0" max="' + (n - 1) + '" step="1" value="' + at + '" aria-label="Moment in spawn ' +
      (m.k + 1) + ': its ' + n + ' event times">';
    var LANE = 14, H = rs.length * LANE, bars = 0, svg = '';
    rs.forEach(function (r, row) {
      var y = row * LANE;
      svg += '<rect class="mo-lane" x="0" y="' + (y + 2) + '" width="1000" height="' + (LANE - 4) + '"></rect>';
      m.ranks[r].calls.forEach(function (c) {
        if (bars >= MAX_BARS) return;
        var x0 = (c.start - t0) / span * 1000, x1 = (c.end - t0) / span * 1000;
        // A blocking call's waiting part (its partner not yet in) apart from the rest.
        var wait = c.kind === 'coll' ? Math.max.apply(null, c.others.map(function (x) { return x[3]; })) :
          c.kind === 'model' || isAsync(c.call) ? c.start : Math.max(c.start, c.peerStart);
        var xw = (Math.min(wait, c.end) - t0) / span * 1000;
        var cls = c.kind === 'model' ? 'mo-model' : isAsync(c.call) ? 'mo-async' : 'mo-call';
        if (cls === 'mo-call' && xw > x0) {
          svg += '<rect class="mo-wait" x="' + x0.toFixed(1) + '" y="' + (y + 2) + '" width="' + Math.max(xw - x0, 0.5).toFixed(1) +
            '" height="' + (LANE - 4) + '"></rect>';
          bars++;
          x0 = xw;
        }
        svg += '<rect class="' + cls + '" x="' + x0.toFixed(1) + '" y="' + (y + (cls === 'mo-async' ? 6 : 2)) + '" width="' +
          Math.max(x1 - x0, 0.5).toFixed(1) + '" height="' + (cls === 'mo-async' ? 2 : LANE - 4) + '"></rect>';
        bars++;
      });
    });
    svg += '<line id="mo-cursor" class="mo-cursor" x1="0" x2="0" y1="0" y2="' + H + '"></line>';
    h += '<div class="mo-lanes-wrap"><div class="mo-lane-names" aria-hidden="true">' + rs.map(function (r) {
      return '<span style="--rc:' + L.rankColor(r) + '">' + r + '</span>';
    }).join('') + '</div><svg class="mo-lanes" id="mo-lanes" viewBox="0 0 1000 ' + H + '" preserveAspectRatio="none" ' +
      'style="height:' + H + 'px" role="img" aria-label="Each rank\'s recorded calls over the spawn\'s time; the line is the moment. ' +
      'Click to move it.">' + svg + '</svg></div>' +
      '<p class="mo-legend"><span class="sw mo-wait"></span> waiting for a partner <span class="sw mo-call"></span> in a call, ' +
      'partners in <span class="sw mo-model"></span> modelled compute <span class="sw mo-async"></span> async call in flight' +
      (bars >= MAX_BARS ? ' (the first ' + MAX_BARS + ' intervals drawn)' : '') + '</p>' +
      '<ul class="mo-ranks" id="mo-ranks">' + rs.map(function (r) {
        return '<li data-r="' + r + '" style="--rc:' + L.rankColor(r) + '"></li>';
      }).join('') + '</ul>';
    $('moment').innerHTML = h;
    bindSlider(m);
  }

  function update(say) {
    var m = models[shownK];
    if (!m || !$('mo-t')) return;
    var t = m.times[at], n = m.times.length, rs = shownRanks(m), when = 't = ' + L.fmtSeconds(t) + ' (+' + rel(m, t) + ')';
    var sl = $('mo-t');
    sl.max = limit(m);
    sl.value = at;
    sl.setAttribute('aria-valuetext', when + ', event ' + (at + 1) + ' of ' + n);
    $('mo-when').textContent = 'Spawn ' + (m.k + 1) + ' at ' + when + ', event ' + (at + 1) + ' of ' + n;
    var x = (t - m.times[0]) / Math.max(m.times[n - 1] - m.times[0], 1e-9) * 1000;
    var cur = $('mo-cursor');
    cur.setAttribute('x1', x.toFixed(1));
    cur.setAttribute('x2', x.toFixed(1));
    var sentence = [], steps = [];
    rs.forEach(function (r) {
      var st = stateAt(m, r, t), li = $('mo-ranks').querySelector('li[data-r="' + r + '"]');
      var extra = inflightWords(st), line = st.line != null ? 'line ' + st.line : '';
      var call = st.call ? ' (' + st.call.call + ')' : '';
      li.setAttribute('data-state', st.word);
      li.innerHTML = '<span class="chip" style="--rc:' + L.rankColor(r) + '">rank ' + r + '</span> <strong class="mo-state">' +
        esc(st.word) + '</strong>' + (extra.length ? ', ' + esc(extra.join(', ')) : '') + (line ? ' · ' + esc(line + call) : '') +
        (st.step >= 0 ? ' <button type="button" class="mo-go" data-step="' + st.step + '" aria-label="Go to rank ' + r +
          '\'s step ' + (st.step + 1) + ', its last before this moment">step ' + (st.step + 1) + '</button>' : '');
      sentence.push('rank ' + r + ' ' + st.word + (line ? ' at ' + line : ''));
      if (st.step >= 0) steps.push(st.step);
    });
    markCells(steps);
    if (say) L.announce('At ' + when + ': ' + sentence.join('; ') + '.');
  }

  // The ranks' steps at the moment, marked in the spawn's columns too.
  function unmarkCells() {
    marked.forEach(function (e) { e.classList.remove('mo-at'); });
    marked = [];
  }
  function markCells(steps) {
    unmarkCells();
    steps.forEach(function (i) {
      var es = document.querySelectorAll('.spawn .cell .item[data-step="' + i + '"]');
      for (var q = 0; q < es.length; q++) { es[q].classList.add('mo-at'); marked.push(es[q]); }
    });
  }

  // The last moment one may go to: "as it happened" shows nothing after the
  // current step, so the moment stops at its time.
  function limit(m) {
    var t = L.T.steps[S.cur].time;
    if (!S.live || typeof t !== 'number') return m.times.length - 1;
    return Math.max(0, L.lowerBound(m.times, t + 1e-12) - 1);
  }

  function moveTo(p) {
    var m = models[shownK];
    p = Math.max(0, Math.min(limit(m), p | 0));
    if (p === at) return;
    at = p;
    update(true);
  }

  function bindSlider(m) {
    var sl = $('mo-t');
    sl.addEventListener('input', function () { moveTo(+this.value); if (+this.value !== at) this.value = at; });
    // The slider's keys are its own: the page's keys (arrows move steps,
    // Home and End go to the first and last) must not act as well.
    sl.addEventListener('keydown', function (e) {
      if (/^(Arrow(Left|Right|Up|Down)|Home|End|PageUp|PageDown)$/.test(e.key)) e.stopPropagation();
    });
    // The lanes by mouse: the nearest event to the pointer, while pressed.
    var svg = $('mo-lanes'), down = false;
    function pick(e) {
      var b = svg.getBoundingClientRect(), f = Math.max(0, Math.min(1, (e.clientX - b.left) / Math.max(b.width, 1)));
      moveTo(nearest(m, m.times[0] + f * (m.times[m.times.length - 1] - m.times[0])));
    }
    svg.addEventListener('pointerdown', function (e) { down = true; if (svg.setPointerCapture) svg.setPointerCapture(e.pointerId); pick(e); });
    svg.addEventListener('pointermove', function (e) { if (down) pick(e); });
    svg.addEventListener('pointerup', function () { down = false; });
  }

  L.toggleMoment = function () {
    open = !open;
    shownK = -1;
    if (!open) unmarkCells();
    L.drawMoment();
    if (open && $('mo-t')) $('mo-t').focus();
  };

  // A rank's step chosen from the panel: go there, the moment kept.
  document.addEventListener('click', function (e) {
    var b = e.target.closest && e.target.closest('#moment-toggle, .mo-go');
    if (!b) return;
    if (b.id === 'moment-toggle') return L.toggleMoment();
    keepTime = true;
    L.go(+b.getAttribute('data-step'));
  });

  L.resetMoment = function () { forT = null; models = []; open = false; shownK = -1; marked = []; };

  // What the tests read: the state of rank r at the moment shown.
  L.api.moment = function () {
    var m = models[shownK];
    return m && open ? { spawn: m.k, t: m.times[at], index: at, n: m.times.length } : null;
  };
})();
