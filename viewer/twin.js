/* lectern viewer, twin: a spawn replayed on simulated platforms, drawn apart
 * from what the run measured.
 *
 * `make twin` (docs/twin.md) gives a spawn a "twin": per platform, each
 * rank's simulated timeline, the simulated and measured seconds, the busbw
 * per collective and size, or why the platform refused the spawn. Under the
 * spawn's ranks' output (never among them, never in place of a measured
 * chart) a panel, closed at first, whose button already says per platform
 * the simulated time beside the time measured here. Opened, per platform:
 *
 *   - a chart of each rank's simulated timeline (communication in blues,
 *     compute in orange, modelled compute pale with a dashed outline as in a
 *     measured chart), titled "simulated on PLATFORM";
 *   - its text alternative: a table of each rank's simulated end;
 *   - the busbw per collective and size, what nccl-tests would print;
 *   - or "not simulated on PLATFORM" with the replay's reason.
 *
 * Everything simulated sits in one frame, dashed and hatched, under a legend
 * that says "simulated": a reader never takes it for a measurement. Nothing
 * of it is built until the panel is opened, so a trace with twins opens as
 * fast as one without.
 */
(function () {
  'use strict';

  var L = window.lectern, S = L.S, esc = L.esc;

  // The calls the record knows (docs/twin.md): one colour family.
  var COMM = ['all_reduce', 'reduce_scatter', 'all_gather', 'broadcast', 'reduce', 'scatter', 'gather', 'all_to_all',
              'barrier', 'send', 'recv', 'sendrecv', 'wait'];
  var COMM_COLORS = ['#1d4ed8', '#0b6b85', '#6d28d9', '#2563eb', '#0e7490', '#4338ca', '#1e3a8a', '#155e75',
                     '#5b21b6', '#0369a1', '#3730a3', '#164e63', '#7c3aed'];
  var COMPUTE_COLOR = '#c2410c', OTHER_COLOR = '#6b7280';
  // Spans one chart draws at most (SVG, one element each); the table under
  // it has every rank's end whatever the chart leaves out.
  var MAX_SPANS = 4000;

  S.twinOpen = Object.create(null);   // spawn id -> true where the reader opened its twin

  function isNum(x) { return typeof x === 'number' && isFinite(x); }
  function isObj(x) { return !!x && typeof x === 'object' && !Array.isArray(x); }

  // Seconds to 4 significant digits, in the unit that puts them between 1
  // and 1000: "2.113 ms", "39.28 µs". The tests read these back.
  var UNITS = [{ f: 1, u: 's' }, { f: 1e-3, u: 'ms' }, { f: 1e-6, u: 'µs' }, { f: 1e-9, u: 'ns' }];
  function unitOf(s) {
    for (var k = 0; k < UNITS.length - 1; k++) if (Math.abs(s) >= UNITS[k].f) return UNITS[k];
    return UNITS[UNITS.length - 1];
  }
  L.fmtSim = function (s) {
    if (!isNum(s)) return '?';
    if (s === 0) return '0 s';
    var u = unitOf(s);
    return (s / u.f).toPrecision(4) + ' ' + u.u;
  };

  // The platforms of a spawn's twin, in the trace's order.
  function platforms(sp) {
    if (!sp || !isObj(sp.twin)) return [];
    return Object.keys(sp.twin).filter(function (n) { return isObj(sp.twin[n]); })
      .map(function (n) { return { name: n, t: sp.twin[n] }; });
  }
  function refused(t) { return typeof t.refused === 'string' || !Array.isArray(t.ranks); }

  // A rank's simulated end: the latest end of its timeline.
  function endOf(tl) {
    var e = null;
    if (Array.isArray(tl)) tl.forEach(function (x) { if (x && isNum(x.end) && (e === null || x.end > e)) e = x.end; });
    return e;
  }
  L.twinEnds = function (t) { return Array.isArray(t.ranks) ? t.ranks.map(endOf) : []; };

  function kindOf(op) {
    return COMM.indexOf(op) >= 0 ? 'communication' : op === 'compute' ? 'compute' : op === 'modelled' ? 'modelled compute' : 'other';
  }

  // ------------------------------------------------------------ the panel

  function summary(ps) {
    var sims = [], nots = [], measured = null;
    ps.forEach(function (p) {
      if (refused(p.t)) { nots.push(p.name); return; }
      sims.push(esc(L.fmtSim(p.t.simulated_s)) + ' on ' + esc(p.name));
      if (measured === null && isNum(p.t.measured_s)) measured = p.t.measured_s;
    });
    return (sims.length ? 'simulated ' + sims.join(', ') : '') +
      (measured !== null ? '; measured here ' + esc(L.fmtSim(measured)) : '') +
      (nots.length ? (sims.length ? ' · ' : '') + 'not simulated on ' + nots.map(esc).join(', ') : '');
  }

  // The panel under spawn k's output (ctx: 'S' in the source, 'R' in read
  // mode); '' for a spawn without a twin.
  L.twinHTML = function (k, ctx) {
    var ps = platforms(L.T.spawns[k]);
    if (!ps.length) return '';
    var id = 'twin-' + ctx + '-' + k, open = !!S.twinOpen[k];
    return '<div class="twin" data-spawn="' + k + '"><button type="button" class="twin-toggle" aria-expanded="' + open +
      '" aria-controls="' + id + '"><span class="twin-tag">simulated</span> Twin of this spawn: ' + summary(ps) +
      '</button><div class="twin-body" id="' + id + '"' + (open ? '>' + bodyHTML(k) : ' hidden>') + '</div></div>';
  };

  function bodyHTML(k) {
    var ps = platforms(L.T.spawns[k]), h = '<p class="twin-legend"><span class="twin-key" aria-hidden="true"></span>' +
      '<strong>Simulated</strong> (in this hatched, dashed frame): what each rank did in this run, replayed by the ' +
      'SimGrid simulator on the platform named (<code>make twin</code>). Not measured: the ranks\' measured output is ' +
      'above. Bars: communication in blue, compute in orange, modelled compute pale with a dashed outline.</p>';
    ps.forEach(function (p, i) { h += refused(p.t) ? refusedHTML(p) : platformHTML(k, p, i); });
    return h;
  }

  function refusedHTML(p) {
    return '<p class="twin-refused" data-platform="' + esc(p.name) + '"><span class="twin-tag">simulated</span> <strong>not ' +
      'simulated on ' + esc(p.name) + '</strong>: ' + esc(typeof p.t.refused === 'string' ? p.t.refused :
        'the twin has no timelines for it') + '</p>';
  }

  function platformHTML(k, p, i) {
    var t = p.t, ws = isNum(t.world_size) ? t.world_size : t.ranks.length;
    var facts = [ws + ' rank' + (ws === 1 ? '' : 's') + (isNum(t.recorded_ranks) ?
      ' (' + esc(t.rule || '') + ' rule, from the ' + t.recorded_ranks + ' recorded)' : '')];
    if (t.compute === 'work') facts.push('compute from its FLOPs and bytes');
    else if (t.compute === 'measured') facts.push('compute as measured here');
    if (typeof t.timelines_of === 'string') facts.push('timelines of ' + esc(t.timelines_of));
    var h = '<figure class="twin-plat" data-platform="' + esc(p.name) + '"><figcaption class="twin-cap">' +
      '<span class="twin-tag">simulated</span> <strong>simulated on ' + esc(p.name) + '</strong>: simulated ' +
      esc(L.fmtSim(t.simulated_s)) + ' on ' + esc(p.name) + '; measured here ' + esc(L.fmtSim(t.measured_s)) +
      ' · ' + facts.join(' · ') + '</figcaption>' +
      '<div class="twin-chart" data-spawn="' + k + '" data-p="' + i + '"><span class="plot-wait">simulated timeline</span></div>';
    // The chart's text alternative: every rank's simulated end.
    h += '<div class="r-table-wrap"><table class="r-table twin-table twin-ends"><caption>Simulated on ' + esc(p.name) +
      ': when each rank ends</caption><thead><tr><th scope="col">rank</th><th scope="col" class="num">simulated end</th>' +
      '</tr></thead><tbody>';
    L.twinEnds(t).forEach(function (e, r) {
      h += '<tr><td>rank ' + r + '</td><td class="num">' + esc(e === null ? 'no events' : L.fmtSim(e)) + '</td></tr>';
    });
    h += '</tbody></table></div>';
    if (Array.isArray(t.collectives) && t.collectives.length) h += busbwHTML(p);
    return h + '</figure>';
  }

  function bytesText(b) {
    if (!isNum(b)) return '?';
    var u = b >= 1 << 30 ? [1 << 30, 'GiB'] : b >= 1 << 20 ? [1 << 20, 'MiB'] : b >= 1 << 10 ? [1 << 10, 'KiB'] : [1, 'B'];
    return +(b / u[0]).toPrecision(4) + ' ' + u[1];
  }
  function gbps(x) { return isNum(x) ? (x >= 100 ? x.toFixed(0) : x.toPrecision(3)) : '?'; }

  // Per collective and size: the median simulated call, and the bandwidths
  // nccl-tests would print for it.
  function busbwHTML(p) {
    var h = '<div class="r-table-wrap"><table class="r-table twin-table twin-busbw"><caption>Simulated on ' + esc(p.name) +
      ': per collective and size</caption><thead><tr><th scope="col">collective</th><th scope="col" class="num">size</th>' +
      '<th scope="col" class="num">ranks</th><th scope="col" class="num">calls</th><th scope="col" class="num">time</th>' +
      '<th scope="col" class="num">algbw (GB/s)</th><th scope="col" class="num">busbw (GB/s)</th></tr></thead><tbody>';
    p.t.collectives.forEach(function (c) {
      if (!isObj(c)) return;
      h += '<tr><td>' + esc(String(c.op).replace(/_/g, '-')) + '</td><td class="num">' + esc(bytesText(c.bytes)) +
        '</td><td class="num">' + esc(c.ranks) + '</td><td class="num">' + esc(c.calls) + '</td><td class="num">' +
        esc(L.fmtSim(c.time_s)) + '</td><td class="num">' + esc(gbps(c.algbw_GBps)) + '</td><td class="num">' +
        esc(gbps(c.busbw_GBps)) + '</td></tr>';
    });
    return h + '</tbody></table></div>';
  }

  // A button opens or closes its panel; the panel is built the first time.
  L.toggleTwin = function (btn) {
    var box = btn.closest('.twin'), k = +box.getAttribute('data-spawn'), body = box.querySelector('.twin-body');
    var open = btn.getAttribute('aria-expanded') !== 'true';
    btn.setAttribute('aria-expanded', String(open));
    if (open) S.twinOpen[k] = true; else delete S.twinOpen[k];
    if (open && !body.firstChild) {
      body.innerHTML = bodyHTML(k);
      L.hydrate(body);
    }
    body.hidden = !open;
  };

  // ------------------------------------------------------------- the chart

  L.hydrateTwins = function (root) {
    var cs = root.querySelectorAll('.twin-chart:not([data-drawn])');
    for (var q = 0; q < cs.length; q++) drawChart(cs[q]);
  };

  L.twinSpec = function (name, t) {
    var u = unitOf(isNum(t.simulated_s) && t.simulated_s > 0 ? t.simulated_s : 1), vals = [], total = 0, ops = [], kinds = [];
    t.ranks.forEach(function (tl, r) {
      if (!Array.isArray(tl)) return;
      tl.forEach(function (e) {
        if (!isObj(e) || !isNum(e.start) || !isNum(e.end) || !(e.end > e.start)) return;   // nothing to draw
        total++;
        if (vals.length >= MAX_SPANS) return;
        var op = String(e.op), kind = kindOf(op);
        if (ops.indexOf(op) < 0) ops.push(op);
        if (kinds.indexOf(kind) < 0) kinds.push(kind);
        vals.push({ rank: r, op: op, kind: kind, start: e.start / u.f, end: e.end / u.f });
      });
    });
    var order = ['communication', 'compute', 'modelled compute', 'other'];
    ops.sort(function (a, b) { return (order.indexOf(kindOf(a)) - order.indexOf(kindOf(b))) || (a < b ? -1 : a > b ? 1 : 0); });
    kinds.sort(function (a, b) { return order.indexOf(a) - order.indexOf(b); });
    var comm = 0, colors = ops.map(function (op) {
      var kd = kindOf(op);
      return kd === 'communication' ? COMM_COLORS[comm++ % COMM_COLORS.length] : kd === 'other' ? OTHER_COLOR : COMPUTE_COLOR;
    });
    var range = { communication: [1, 0], compute: [1, 0], 'modelled compute': [4, 2], other: [1, 0] };
    var what = 'simulated ' + L.fmtSim(t.simulated_s) + ' on ' + name + '; measured here ' + L.fmtSim(t.measured_s);
    return {
      spec: {
        $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
        title: { text: 'simulated on ' + name, subtitle: what + (vals.length < total ? ' (the first ' + vals.length + ' of ' +
          total + ' spans drawn)' : '') },
        description: 'Simulated timeline on ' + name + ' (a SimGrid replay, not a measurement): ' + what +
          '. One row per rank; the table after the chart lists when each rank ends.',
        width: 520, height: { step: 18 },
        data: { values: vals },
        mark: { type: 'bar', stroke: '#333333', strokeWidth: 0.5 },
        encoding: {
          x: { field: 'start', type: 'quantitative', title: 'simulated time (' + u.u + ')' }, x2: { field: 'end' },
          y: { field: 'rank', type: 'ordinal', title: 'rank' },
          color: { field: 'op', type: 'nominal', title: 'simulated op', scale: { domain: ops, range: colors } },
          // Modelled compute as a measured chart draws it: pale, its outline dashed.
          opacity: { condition: { test: "datum.kind === 'modelled compute'", value: 0.4 }, value: 1 },
          strokeDash: { field: 'kind', type: 'ordinal', title: 'kind', scale: { domain: kinds, range: kinds.map(function (x) {
            return range[x]; }) }, legend: { symbolFillColor: '#ffffff', symbolStrokeColor: '#333333' } },
          tooltip: [{ field: 'rank' }, { field: 'op' }, { field: 'start', title: 'start (' + u.u + ')', format: '.4~g' },
                    { field: 'end', title: 'end (' + u.u + ')', format: '.4~g' }]
        }
      },
      drawn: vals.length, total: total
    };
  };

  function drawChart(el) {
    el.setAttribute('data-drawn', '');
    var k = +el.getAttribute('data-spawn'), p = platforms(L.T.spawns[k])[+el.getAttribute('data-p')];
    if (!p) return;
    var made = L.twinSpec(p.name, p.t);
    if (!made.total) { el.innerHTML = '<p class="twin-none">No span of this replay lasts long enough to draw.</p>'; return; }
    L.withVega(function (ok) {
      if (!ok) { el.innerHTML = '<p class="twin-none">The chart needs vega-embed (run npm ci); the table below has ' +
        'each rank\'s end.</p>'; return; }
      el.innerHTML = '';
      window.vegaEmbed(el, made.spec, L.plotOptions()).then(function () {
        var sm = el.querySelectorAll('summary');
        for (var q = 0; q < sm.length; q++) sm[q].setAttribute('aria-label', 'Save the simulated chart');
      }, function (e) { el.textContent = 'the simulated chart could not be drawn: ' + e.message; });
    });
  }
})();
