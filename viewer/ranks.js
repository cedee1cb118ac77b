/* lectern viewer, ranks: what a spawn's ranks wrote, side by side.
 *
 * Under a spawn() line, one block per spawn: a table with one column per
 * rank, in compact monospace, so that "before all-reduce" on four ranks
 * reads across one row. Two ways to lay the rows out:
 *
 *   by line   rows aligned by source line: the n-th output of a line on one
 *             rank beside the n-th output of that line on the others;
 *   in time   rows in the order the steps happened, a row holding steps of
 *             different ranks made at one line one after the other: for
 *             spawns whose interleaving is the point (a pipeline).
 *
 * A spawn starts "in time" when laying it out by line would hide its order
 * (rows whose steps happened before those of the row above); the buttons in
 * its header switch. The header also holds the spawn's note ("spawn: 4
 * ranks, ..."), so the spawn() call itself stays visible. A line of rank
 * code shows which ranks ran it, counted spawn by spawn.
 */
(function () {
  'use strict';

  var L = window.lectern, S = L.S, esc = L.esc;

  var ROWS_CAP = 30;       // rows drawn around the current one
  var READ_ROWS = 2000;    // rows drawn in read mode (meant to be read, and printed)

  var cache = Object.create(null);   // spawn id -> {line: rows, time: rows, auto: view}
  var wins = Object.create(null);    // 'S|k' or 'R|k' -> {lo, hi} window of rows

  L.resetRanks = function () { cache = Object.create(null); wins = Object.create(null); };

  function inner(i) { var st = L.T.steps[i].stack; return st[st.length - 1]; }

  // ---------------------------------------------------------------- rows

  // By line: merge the ranks' sequences of (line, n-th time at that line).
  // At each row, take the key waiting at the head of some rank that no other
  // rank still has further down its sequence (so no rank's order is broken),
  // the earliest such; every rank whose head is that key fills the row.
  function byLine(k) {
    var byRank = L.IX.spawnRanks[k], ranks = [], keys = [], where = [];
    for (var r = 0; r < byRank.length; r++) {
      if (!byRank[r] || !byRank[r].length) continue;
      var occ = Object.create(null), ks = [], m = new Map();
      for (var p = 0; p < byRank[r].length; p++) {
        var f = inner(byRank[r][p]), b = f.path + ':' + f.line, n = occ[b] = (occ[b] || 0) + 1;
        ks.push(b + '#' + n);
        m.set(b + '#' + n, p);
      }
      ranks.push(r); keys.push(ks); where.push(m);
    }
    var head = ranks.map(function () { return 0; }), rows = [];
    for (;;) {
      var best = null, bestStep = Infinity, bestFree = false;
      for (var a = 0; a < ranks.length; a++) {
        if (head[a] >= keys[a].length) continue;
        var key = keys[a][head[a]], step = byRank[ranks[a]][head[a]], free = true;
        for (var c = 0; c < ranks.length && free; c++) {
          if (c === a) continue;
          var q = where[c].get(key);
          if (q !== undefined && q > head[c]) free = false;
        }
        if ((free && !bestFree) || (free === bestFree && step < bestStep)) { best = key; bestStep = step; bestFree = free; }
      }
      if (best === null) break;
      var row = { cells: Object.create(null), steps: [] };
      for (a = 0; a < ranks.length; a++) {
        if (head[a] < keys[a].length && keys[a][head[a]] === best) {
          var s = byRank[ranks[a]][head[a]++];
          row.cells[ranks[a]] = s;
          row.steps.push(s);
        }
      }
      label(row);
      rows.push(row);
    }
    return rows;
  }

  // In time: the spawn's steps by their time; a new row when a rank would
  // appear twice in it or the line changes.
  function inTime(k) {
    var T = L.T, steps = L.IX.spawnSteps[k].slice();
    steps.sort(function (a, b) { return (T.steps[a].time - T.steps[b].time) || (a - b); });
    var rows = [], row = null, t0 = steps.length ? T.steps[steps[0]].time : 0;
    for (var p = 0; p < steps.length; p++) {
      var i = steps[p], r = T.steps[i].rank, f = inner(i);
      if (!row || r in row.cells || row.path !== f.path || row.line !== f.line) {
        row = { cells: Object.create(null), steps: [], path: f.path, line: f.line, t: T.steps[i].time - t0 };
        rows.push(row);
      }
      row.cells[r] = i;
      row.steps.push(i);
    }
    rows.forEach(label);
    return rows;
  }

  function label(row) {
    var f = inner(row.steps[0]);
    row.path = f.path;
    row.line = f.line;
    row.first = Math.min.apply(null, row.steps);
  }

  function rowsOf(k, view) {
    var c = cache[k] || (cache[k] = {});
    return c[view] || (c[view] = view === 'time' ? inTime(k) : byLine(k));
  }

  // The layout a spawn starts with: in time when, laid out by line, at
  // least a quarter of the rows began before the row above had finished.
  function autoView(k) {
    var c = cache[k] || (cache[k] = {});
    if (c.auto) return c.auto;
    var T = L.T, rows = rowsOf(k, 'line'), late = 0;
    function times(row) { return row.steps.map(function (i) { return T.steps[i].time; }); }
    for (var j = 1; j < rows.length; j++) {
      if (Math.min.apply(null, times(rows[j])) < Math.max.apply(null, times(rows[j - 1]))) late++;
    }
    var ws = (L.IX.spawnRanks[k] || []).filter(Boolean).length;
    return (c.auto = ws > 1 && rows.length > 2 && late * 4 >= rows.length - 1 ? 'time' : 'line');
  }

  L.spawnView = function (k) { return S.spawnView[k] || autoView(k); };

  function shownRows(k, view) {
    var rows = rowsOf(k, view);
    if (S.rank == null && !S.live) return rows;
    return rows.filter(function (row) { return row.steps.some(L.shown); });
  }

  // ------------------------------------------------------------ the block

  function spawnCall(k) {
    var top = L.T.spawns[k].stack[L.T.spawns[k].stack.length - 1], text = L.T.files[top.path];
    var line = typeof text === 'string' ? (text.split('\n', top.line)[top.line - 1] || '') : '';
    line = line.trim().replace(/;\s*(\/\/.*|\/\*.*)?$/, '');
    return line || 'spawn()';
  }

  // A spawn's status in words: a spawn_expect_failure() spawn that failed
  // did what the lecture wanted, one that succeeded did not; a spawn whose
  // ranks all returned but made checks that failed is no green "ok".
  L.spawnStatus = function (sp) {
    if (!sp.status) return null;
    if (sp.expect_failure === true)
      return sp.status === 'failed' ? { text: 'caught, as expected', bad: false } :
        sp.status === 'ok' ? { text: 'succeeded, but a failure was expected', bad: true } : { text: sp.status, bad: false };
    var f = sp.checks && typeof sp.checks.failed === 'number' ? sp.checks.failed : 0;
    if (sp.status === 'ok' && f > 0) return { text: 'ran, ' + f + ' check' + (f > 1 ? 's' : '') + ' failed', bad: true };
    return { text: sp.status, bad: sp.status === 'failed' };
  };

  function hostCount(hosts) {
    var seen = {};
    hosts.forEach(function (x) { seen[String(x)] = 1; });
    return Object.keys(seen).length;
  }

  L.spawnHTML = function (k, ctx) {
    var T = L.T, IX = L.IX, sp = T.spawns[k], byRank = IX.spawnRanks[k] || [];
    var ws = sp.world_size != null ? sp.world_size : byRank.length;
    var st = L.spawnStatus(sp), failed = !!(st && st.bad), view = L.spawnView(k);
    // Every rank of the spawn has its column, also one that wrote nothing (a
    // rank killed when a sibling failed): an empty column says it ran.
    var cols = [], any = false;
    for (var r = 0; r < Math.max(ws, byRank.length); r++) {
      if (S.rank != null && r !== S.rank) continue;
      cols.push(r);
      if (byRank[r] && byRank[r].length) any = true;
    }
    var n = IX.spawnSteps[k].length, note = IX.spawnNote[k];
    var h = '<section class="spawn' + (failed ? ' failed' : '') + '" data-spawn="' + k + '" data-ctx="' + ctx +
      '" aria-label="output of spawn ' + (k + 1) + ', ' + esc(ws) + ' rank' + (ws == 1 ? '' : 's') + '">' +
      '<table class="rgrid' + (view === 'time' ? ' in-time' : '') + '"><colgroup><col class="c-rl">' +
      (cols.length ? '<col span="' + cols.length + '">' : '') + '</colgroup>' +
      '<thead><tr class="sp-cap"><th colspan="' + (cols.length + 1) + '"><div class="sp-cap-in">' +
      '<code class="spawn-call">' + esc(spawnCall(k)) + '</code> <span class="sp-facts">' +
      (sp.exercise ? '<span class="exercise">' + esc(String(sp.exercise).replace(/[:\s]+$/, '')) + '</span> · ' : '') +
      '<strong>' + esc(ws) + ' rank' +
      (ws == 1 ? '' : 's') + '</strong>' + (sp.backend ? ' · <span class="backend">' + esc(sp.backend) + '</span>' : '') +
      (sp.seconds != null ? ' · ' + esc(L.fmtSeconds(sp.seconds)) : '') +
      (Array.isArray(sp.hosts) ? ' · ' + esc(hostCount(sp.hosts)) + ' hosts' : '') +
      (st ? ' · <span class="st ' + (failed ? 'bad' : 'ok') + '">' + esc(st.text) + '</span>' : '') +
      ' · ' + n + ' step' + (n === 1 ? '' : 's') + '</span>' +
      '<span class="seg sp-view" role="group" aria-label="Lay out the ranks\' output">' +
      '<button type="button" class="sp-view-b" data-spawn="' + k + '" data-view="line" aria-pressed="' + (view === 'line') +
      '">by line</button><button type="button" class="sp-view-b" data-spawn="' + k + '" data-view="time" aria-pressed="' +
      (view === 'time') + '">in time</button></span></div>';
    if (note >= 0 && L.shown(note)) {
      var d = T.steps[note].renderings[0].data.replace(/^spawn: /, '');
      h += '<div class="item spawn-note' + (note === S.cur ? ' cur-item' : '') + '" data-step="' + note + '">' + esc(d) + '</div>';
    } else if (sp.reason) {
      h += '<div class="spawn-reason">' + esc(sp.reason) + '</div>';
    }
    h += '</th></tr>';
    if (!any) {
      return h + '</thead></table><p class="spawn-empty">' + (S.rank != null ? 'Rank ' + S.rank + ' wrote nothing here.' :
        'The ranks wrote nothing.') + '</p>' + twinHTML(k, ctx) + '</section>';
    }
    h += '<tr class="sp-cols"><th scope="col" class="rl-h">' + (view === 'time' ? 'time · line' : 'line') + '</th>';
    // Ranks over more than one host (the spawn's "hosts"): each header
    // names its rank's host, the address in its tooltip.
    var hosts = Array.isArray(sp.hosts) ? sp.hosts : null;
    cols.forEach(function (r) {
      var cnt = byRank[r] ? byRank[r].filter(L.shown).length : 0, host = hosts && hosts[r] ? String(hosts[r]) : '';
      h += '<th scope="col" class="rank-h" data-r="' + r + '" style="--rc:' + L.rankColor(r) + '">rank ' + r +
        ' <span class="cnt">' + cnt + '</span>' +
        (host ? '<span class="rank-host" title="' + esc(host) + '">' + esc(host.replace(/ \(.*\)$/, '')) + '</span>' : '') +
        '</th>';
    });
    h += '</tr></thead><tbody>' + bodyHTML(k, ctx, view, cols) + '</tbody></table>' + twinHTML(k, ctx) + '</section>';
    return h;
  };

  // The spawn replayed on simulated platforms (twin.js), under its output,
  // never among it.
  function twinHTML(k, ctx) { return L.twinHTML && L.T.spawns[k].twin ? L.twinHTML(k, ctx) : ''; }

  function bodyHTML(k, ctx, view, cols) {
    var rows = shownRows(k, view), key = ctx + '|' + k;
    var w = wins[key] || (wins[key] = { lo: 0, hi: ctx === 'R' ? READ_ROWS : ROWS_CAP });
    w.hi = Math.min(w.hi, rows.length);
    w.lo = Math.max(0, Math.min(w.lo, w.hi));
    var span = cols.length + 1, h = '';
    if (w.lo > 0) h += '<tr class="more-row"><td colspan="' + span + '"><button type="button" class="more-rows" data-key="' +
      key + '" data-dir="up">show ' + Math.min(w.lo, L.LIST_MORE) + ' earlier rows (' + w.lo + ' hidden)</button></td></tr>';
    for (var j = w.lo; j < w.hi; j++) h += rowHTML(rows[j], j, view, cols);
    if (w.hi < rows.length) h += '<tr class="more-row"><td colspan="' + span + '"><button type="button" class="more-rows" ' +
      'data-key="' + key + '" data-dir="down">show ' + Math.min(rows.length - w.hi, L.LIST_MORE) + ' more rows (' +
      (rows.length - w.hi) + ' hidden)</button></td></tr>';
    return h;
  }

  function rowHTML(row, j, view, cols) {
    var lines = L.T.files[row.path], code = '';
    if (typeof lines === 'string') code = (lines.split('\n', row.line)[row.line - 1] || '').trim();
    var lab = (view === 'time' ? '<span class="t">+' + esc(L.fmtSeconds(row.t)) + '</span> ' : '') +
      '<button type="button" class="to-line" data-path="' + esc(row.path) + '" data-line="' + row.line +
      '" title="show line ' + row.line + ' of ' + esc(row.path) + '">' + row.line + '</button>' +
      (view === 'time' ? '' : ' <code class="rl-code">' + esc(code) + '</code>');
    var h = '<tr data-row="' + j + '"><th scope="row" class="rl">' + lab + '</th>';
    cols.forEach(function (r) {
      var i = row.cells[r];
      if (i == null || !L.shown(i)) { h += '<td class="cell empty"></td>'; return; }
      h += '<td class="cell" style="--rc:' + L.rankColor(r) + '">' + L.itemHTML(i, 'cell-item') + '</td>';
    });
    return h + '</tr>';
  }

  // Draws a spawn block again (another layout, another window of rows).
  function redraw(sec) {
    var k = +sec.getAttribute('data-spawn'), ctx = sec.getAttribute('data-ctx');
    var tmp = document.createElement('div');
    tmp.innerHTML = L.spawnHTML(k, ctx);
    var fresh = tmp.firstChild;
    sec.parentNode.replaceChild(fresh, sec);
    L.hydrate(fresh);
    return fresh;
  }

  L.setSpawnView = function (sec, view) {
    S.spawnView[+sec.getAttribute('data-spawn')] = view;
    delete wins[sec.getAttribute('data-ctx') + '|' + sec.getAttribute('data-spawn')];
    redraw(sec);
  };

  L.moreRows = function (sec, key, up) {
    var w = wins[key];
    if (!w) return;
    if (up) w.lo = Math.max(0, w.lo - L.LIST_MORE); else w.hi += L.LIST_MORE;
    redraw(sec);
  };

  // The current step in a spawn block: its note, or its cell (the window of
  // rows moved to it); the row and the rank's column are marked as well.
  L.markSpawn = function (sec, k, i) {
    if (L.IX.spawnNote[k] === i) return sec.querySelector('.spawn-note');
    var view = L.spawnView(k), rows = shownRows(k, view), ctx = sec.getAttribute('data-ctx'), key = ctx + '|' + k;
    var j = -1;
    for (var p = 0; p < rows.length && j < 0; p++) if (rows[p].steps.indexOf(i) >= 0) j = p;
    if (j < 0) return null;
    var w = wins[key];
    if (w && (j < w.lo || j >= w.hi)) {
      w.lo = Math.max(0, j - (ROWS_CAP >> 2));
      w.hi = w.lo + ROWS_CAP;
      sec = redraw(sec);
    }
    var tr = sec.querySelector('tr[data-row="' + j + '"]');
    if (tr) tr.classList.add('cur-row');
    var col = sec.querySelector('.rank-h[data-r="' + L.T.steps[i].rank + '"]');
    if (col) col.classList.add('cur-col');
    return sec.querySelector('.cell .item[data-step="' + i + '"]');
  };

  L.unmarkSpawn = function (sec) {
    var e = sec.querySelectorAll('.cur-row, .cur-col');
    for (var k = 0; k < e.length; k++) e[k].classList.remove('cur-row', 'cur-col');
  };

  // ------------------------------------------------------- rank code lines

  // Which ranks ran a line, spawn by spawn: "4 ranks: 0 1 2 3, ×5 each".
  L.rankChips = function (steps) {
    var T = L.T, groups = [], byK = Object.create(null);
    for (var p = 0; p < steps.length; p++) {
      var i = steps[p];
      if (!L.shown(i)) continue;
      var s = T.steps[i], g = byK[s.spawn];
      if (!g) { g = byK[s.spawn] = { k: s.spawn, count: Object.create(null), ranks: [] }; groups.push(g); }
      if (!(s.rank in g.count)) { g.count[s.rank] = 0; g.ranks.push(s.rank); }
      g.count[s.rank]++;
    }
    if (!groups.length) return '';
    var wsSeen = {};
    groups.forEach(function (g) { var ws = T.spawns[g.k].world_size; wsSeen[ws] = (wsSeen[ws] || 0) + 1; });
    var h = '<div class="chips">';
    groups.forEach(function (g) {
      var ws = T.spawns[g.k].world_size, counts = g.ranks.map(function (r) { return g.count[r]; });
      var same = counts.every(function (c) { return c === counts[0]; });
      g.ranks.sort(function (a, b) { return a - b; });
      h += '<span class="chip-group" data-spawn="' + g.k + '"><span class="cg-label">' + esc(ws) + ' rank' + (ws == 1 ? '' : 's') +
        (wsSeen[ws] > 1 ? ' (spawn ' + (g.k + 1) + ')' : '') + ':</span>';
      g.ranks.forEach(function (r) {
        h += ' <span class="chip" data-spawn="' + g.k + '" data-r="' + r + '" style="--rc:' + L.rankColor(r) + '">' + r +
          (same ? '' : ' ×' + g.count[r]) + '</span>';
      });
      if (same && counts[0] > 1) h += ' <span class="cg-count">×' + counts[0] + (g.ranks.length > 1 ? ' each' : '') + '</span>';
      h += '</span>';
    });
    return h + '</div>';
  };
})();
