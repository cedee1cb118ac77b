/* lectern viewer, base: the shared namespace, the state, small helpers.
 *
 * The viewer is a handful of classic scripts (no modules, no build step), so
 * that viewer/index.html works when opened straight from disk: Chromium
 * refuses ES modules and fetch() on file://. Each script adds its part to one
 * namespace, window.lectern (L below); index.html loads them in this order:
 *
 *   safe.js     everything a trace carries enters the page as data
 *   base.js     this file: state, helpers, messages
 *   trace.js    reading a trace (by name, by path, from a file) and checking it
 *   model.js    indexes over the steps: notes per line, spawns, statements,
 *               step over / step out, headings
 *   render.js   one rendering as HTML: notes, text, images, links, plots
 *   source.js   the source view: lines drawn in chunks, notes in place of
 *               the statement that made them
 *   ranks.js    a spawn's output: its ranks side by side, by line or in time
 *   twin.js     a spawn replayed on simulated platforms (make twin), apart from
 *               what was measured
 *   nav.js      the current step: moving, marking, scrolling, keys, history
 *   panels.js   header, call stack, outline, spawns, run facts
 *   read.js     read mode: the lecture as one document
 *   vars.js     inspect(x)'s values, and the variables panel beside the call stack
 *   predict.js  predict()'s questions: an answer field, the value on Reveal
 *   diff.js     two runs compared (?trace=A&diff=B): steps paired, what differs
 *   links.js    who talked to whom: a step's messages and collectives, their
 *               partners' steps (f follows, b comes back)
 *   moment.js   every rank of a spawn at one moment: a slider over its event
 *               times, each rank's state and line, measured
 *   lectures.js the index page: every lecture with a trace, when none is named
 *   main.js     starting: the trace the address names, or one opened by hand
 *
 * The page is organised around one number, the current step (S.cur).
 * Everything else is derived from it in L.go(). Traces can hold 100,000
 * steps, so nothing is rendered per step up front: the steps are indexed
 * once, and the source is drawn in chunks of lines as they scroll into view.
 */
(function () {
  'use strict';

  var L = window.lectern = window.lectern || {};

  L.ROOT = '../';            // the repository root, seen from viewer/

  // ------------------------------------------------------------------ state

  L.T = null;                // the trace
  L.IX = null;               // indexes built from it (model.js)
  L.S = {
    cur: 0,                  // current step
    rank: null,              // rank filter (null: all ranks)
    raw: false,              // raw code instead of notes
    mode: 'step',            // 'step' or 'read'
    live: false,             // "as it happened": nothing after the current step is shown
    file: null,              // path shown in the source pane
    frameSel: null,          // {path, line} picked in the call stack panel
    via: null,               // how the trace was read: 'script', 'json' or 'file'
    name: null,              // the trace's name (file name without .js/.json)
    spawnView: {}            // spawn id -> 'line' or 'time', where the reader chose
  };

  // Exposed for the browser tests and the benchmark.
  L.api = window.lecternViewer = {
    ready: false, error: null, via: null, timings: {},
    go: function (i) { L.go(i); },
    cur: function () { return L.S.cur; },
    total: function () { return L.T ? L.T.steps.length : 0; },
    // Where a move would land from step i (-1: nowhere), without moving.
    target: function (kind, i) { return L.navTarget(kind, i); },
    // The viewer's index of the trace file's step i (model.js puts runs of
    // ranks' steps at one line in rank order).
    fileStep: function (i) { return L.IX && L.IX.fileStep ? L.IX.fileStep[i] : i; },
    state: L.S
  };

  // ---------------------------------------------------------------- helpers

  L.$ = function (id) { return document.getElementById(id); };
  L.esc = window.lecternSafe.esc;

  L.basename = function (p) {
    var s = String(p), i = s.lastIndexOf('/');
    return i < 0 ? s : s.slice(i + 1);
  };

  L.isInt = function (x) { return typeof x === 'number' && isFinite(x) && Math.floor(x) === x; };

  // First index in the sorted array a whose value is >= x.
  L.lowerBound = function (a, x) {
    var lo = 0, hi = a.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (a[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  };

  L.fmtSeconds = function (s) {
    if (typeof s !== 'number' || !isFinite(s)) return '';
    if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 2 : 0) + ' ms';
    if (s < 120) return s.toFixed(2) + ' s';
    return Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
  };

  L.loc = function (frame) { return frame.path + ':' + frame.line; };

  L.uniq = function (a) { return a.filter(function (x, k) { return a.indexOf(x) === k; }); };

  L.cssEsc = function (s) { return window.CSS && CSS.escape ? CSS.escape(s) : String(s).replace(/["\\]/g, '\\$&'); };

  // Rank colours, dark enough for text on white and on their own tint.
  var RANK_COLORS = ['#1d4ed8', '#b4410b', '#04724f', '#b0175a', '#6d28d9', '#0b6b85', '#4a7a0c', '#8f3d0b'];
  L.rankColor = function (r) {
    if (r < RANK_COLORS.length) return RANK_COLORS[r];
    return 'hsl(' + Math.round((r * 137.508) % 360) + ' 70% 32%)';
  };

  L.loadScript = function (src, onload, onerror) {
    var s = document.createElement('script');
    s.src = src;
    s.onload = onload;
    s.onerror = onerror;
    document.head.appendChild(s);
    return s;
  };

  // A step is shown unless the rank filter hides it. A PASS folded from
  // several ranks' checks (its check rendering's "ranks") is each of theirs.
  L.visible = function (i) {
    var r = L.S.rank, s = L.T.steps[i];
    if (r == null || s.rank == null || s.rank === r) return true;
    var rs = s.renderings || [];
    for (var k = 0; k < rs.length; k++)
      if (rs[k] && rs[k].type === 'check' && Array.isArray(rs[k].ranks) && rs[k].ranks.indexOf(r) >= 0) return true;
    return false;
  };

  // ...and, "as it happened", unless it comes after the current step.
  L.shown = function (i) {
    return L.visible(i) && (!L.S.live || i <= L.S.cur);
  };

  // --------------------------------------------------------------- messages

  // announce(): for screen readers only (every step says where it is).
  // tell(): shown on the page as well, for a few seconds ("no next step").
  var sayTimer = 0, toastTimer = 0;
  L.announce = function (msg) {
    clearTimeout(sayTimer);
    sayTimer = setTimeout(function () { L.$('live').textContent = msg; }, 150);
  };

  L.tell = function (msg) {
    var t = L.$('toast');
    t.textContent = msg;
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(function () { t.hidden = true; }, 3500);
  };
})();
