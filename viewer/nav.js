/* lectern viewer, nav: the current step and the ways to move it.
 *
 * go(i) makes step i current: the source view marks and scrolls to it, the
 * panels follow, the address bar gets a history entry (Back and Forward move
 * through the steps one stopped on). Moves: next and previous; step over (a
 * call made from the current function runs through as one step), step out
 * (to the first step after the current call returns), and their backward
 * twins; first and last. model.js works out where each lands.
 */
(function () {
  'use strict';

  var L = window.lectern, S = L.S, $ = L.$;

  // -------------------------------------------------------------- moving

  function nextVisible(from, dir) {
    for (var i = from + dir; i >= 0 && i < L.T.steps.length; i += dir) if (L.visible(i)) return i;
    return -1;
  }

  var LINKS = { over: 'over', out: 'out', backOver: 'backOver', backOut: 'backOut' };

  // Where a move from step i lands (-1: nowhere). With a rank filter, a
  // landing on a hidden step moves on to the next shown one.
  L.navTarget = function (kind, i) {
    var T = L.T;
    if (!T) return -1;
    if (i == null) i = S.cur;
    var n = T.steps.length;
    switch (kind) {
      case 'next': return nextVisible(i, 1);
      case 'prev': return nextVisible(i, -1);
      case 'first': return L.visible(0) ? 0 : nextVisible(0, 1);
      case 'last': return L.visible(n - 1) ? n - 1 : nextVisible(n - 1, -1);
    }
    var j = L.IX[LINKS[kind]][i], back = kind === 'backOver' || kind === 'backOut';
    if (j >= 0 && !L.visible(j)) j = nextVisible(j, back ? -1 : 1);
    return j;
  };

  var NAV_WORDS = {
    next: 'This is the last step.', prev: 'This is the first step.',
    over: 'No step after this one at this level: the lecture ends inside this call.',
    out: 'No step after this call returns: the lecture ends inside it.',
    backOver: 'No step before this one at this level.', backOut: 'No step before this call began.'
  };

  L.move = function (kind) {
    var i = L.navTarget(kind);
    if (i < 0) return L.tell(NAV_WORDS[kind] || 'Nowhere to go.');
    L.go(i);
  };

  // Makes step i current. opts.noScroll: leave the view where it is;
  // opts.history: false when Back or Forward brought us here.
  L.go = function (i, opts) {
    var T = L.T;
    if (!T || !T.steps.length) return;
    i = Math.max(0, Math.min(T.steps.length - 1, i | 0));
    opts = opts || {};
    var old = S.cur;
    S.cur = i;
    S.frameSel = null;
    if (S.live && old !== i) {
      if (S.mode === 'read') L.buildRead(); else L.liveRedraw(old, i);
    }
    if (S.mode === 'read') { L.readMark(true); L.syncUI(opts); return; }
    var t = L.stepTarget(i);
    L.showFile(t.path);
    L.applyMarks();
    if (!opts.noScroll) { L.scrollToCurrent(); settle(i); }
    L.syncUI(opts);
  };

  // Chunks of source near the view are drawn after the scroll (as they come
  // near it) and their real height replaces a guess; figures and plots take
  // their size when they have loaded, which on a busy machine can be long
  // after the move. So for a while after a move, whenever the source changes
  // size, bring the current step back to its place. Any scroll by hand
  // (wheel, touch, mouse, keys) stops this at once.
  var SETTLE_MS = 2500, settleUntil = 0, settleStep = -1;
  var resized = window.ResizeObserver ? new ResizeObserver(function () {
    if (S.cur !== settleStep || S.mode !== 'step' || performance.now() > settleUntil) return;
    L.scrollToCurrent();
  }) : null;
  function settle(i) {
    settleStep = i;
    settleUntil = performance.now() + SETTLE_MS;
    if (resized) {
      var files = document.querySelectorAll('#source .file');
      for (var k = 0; k < files.length; k++) resized.observe(files[k]);
    }
    requestAnimationFrame(function () { if (S.cur === i && performance.now() <= settleUntil) L.scrollToCurrent(); });
  }
  L.stopSettling = function () { settleUntil = 0; };

  // Click on a line: its next note (or rank step, or first step that passes
  // through it as a call site).
  L.goLine = function (path, ln) {
    var v = L.view(path), cands = v.own.get(ln) || v.rankAt.get(ln);
    if (cands) {
      var vis = cands.filter(L.visible);
      if (!vis.length) return L.tell('No step of rank ' + S.rank + ' at this line.');
      // At this line already: its next step (wrapping); else its first.
      var at = vis.indexOf(S.cur);
      return L.go(at >= 0 ? vis[(at + 1) % vis.length] : vis[0]);
    }
    if (v.any.has(ln)) {
      var j = v.any.get(ln);
      if (!L.visible(j)) j = nextVisible(j, 1);
      while (j >= 0 && !L.T.steps[j].stack.some(function (f) { return f.path === path && f.line === ln; })) j = nextVisible(j, 1);
      if (j >= 0) L.go(j);
    }
  };

  // Show a line of the source (a frame of the call stack, a grid row's
  // line) without moving the step.
  L.showFrame = function (path, ln) {
    var v = L.showFile(path);
    S.frameSel = { path: path, line: ln };
    L.applyMarks();
    var el = v.line(ln);
    if (!el) return;
    var box = $('source'), b = box.getBoundingClientRect(), r = el.getBoundingClientRect();
    if (r.top < b.top + 8 || r.top > b.top + box.clientHeight / 3) box.scrollTop += r.top - b.top - box.clientHeight * 0.2;
  };

  // ---------------------------------------------------------- the address

  // One history entry per step one stops on (a burst of key presses makes
  // one); the other settings replace the entry they change.
  var urlTimer = 0, histStep = -1;
  L.queueUrl = function (push) {
    clearTimeout(urlTimer);
    urlTimer = setTimeout(function () { writeUrl(push); }, 60);
  };

  function writeUrl(push) {
    if (!L.T) return;
    var p = new URLSearchParams(location.search);
    // A trace opened from a file has no address: the bar keeps only the step.
    if (S.via === 'file') { p.delete('trace'); p.delete('diff'); }
    p.set('step', S.cur + 1);
    if (S.rank != null) p.set('rank', S.rank); else p.delete('rank');
    if (S.mode === 'read') p.set('mode', 'read'); else p.delete('mode');
    if (S.raw) p.set('code', 'raw'); else p.delete('code');
    if (S.live) p.set('live', '1'); else p.delete('live');
    var q = '?' + p.toString().replace(/%2F/g, '/');
    var newEntry = push && histStep >= 0 && histStep !== S.cur;
    histStep = S.cur;
    if (q === location.search && !newEntry) return;
    try {
      if (newEntry) history.pushState({ lecternStep: S.cur }, '', q + location.hash);
      else history.replaceState({ lecternStep: S.cur }, '', q + location.hash);
    } catch (e) { /* some file:// setups refuse */ }
  }
  L.writeUrlNow = function () { clearTimeout(urlTimer); writeUrl(false); };
  L.resetHistory = function () { clearTimeout(urlTimer); histStep = -1; };

  // Back and Forward: the step (and view) the entry names.
  L.onPopState = function () {
    if (!L.T) return;
    var p = L.params(), st = parseInt(p.step, 10);
    if (!isFinite(st)) return;
    clearTimeout(urlTimer);
    histStep = st - 1;
    var mode = p.mode === 'read' ? 'read' : 'step';
    if (mode !== S.mode) L.setMode(mode, true);
    L.go(st - 1, { history: false });
  };

  // ------------------------------------------------------------ settings

  L.setRank = function (r) {
    if (r != null && L.IX.ranks.indexOf(r) < 0) return L.tell('There is no rank ' + r + '.');
    S.rank = r;
    $('rank-filter').value = r == null ? '' : String(r);
    document.body.classList.toggle('rank-filtered', r != null);
    // Spawn blocks, notes and chips depend on the filter: draw the sources again.
    L.redrawAll();
    if (!L.visible(S.cur)) {
      var j = nextVisible(S.cur, 1);
      if (j < 0) j = nextVisible(S.cur, -1);
      if (j >= 0) S.cur = j;
    }
    if (S.mode === 'read') L.buildRead();
    L.go(S.cur);
    L.tell(r == null ? 'Showing all ranks.' : 'Showing rank ' + r + ' only.');
  };

  L.setRaw = function (on) {
    S.raw = on;
    $('btn-raw').setAttribute('aria-pressed', on ? 'true' : 'false');
    document.body.classList.toggle('raw', on);
    L.redrawAll();
    L.go(S.cur);
  };

  // "As it happened": nothing after the current step is shown.
  L.setLive = function (on) {
    S.live = on;
    $('btn-live').setAttribute('aria-pressed', on ? 'true' : 'false');
    L.redrawAll();
    if (S.mode === 'read') L.buildRead();
    L.go(S.cur);
    L.tell(on ? 'As it happened: what comes after this step is hidden.' : 'Showing every step.');
  };

  L.setMode = function (m, fromHistory) {
    S.mode = m;
    $('btn-mode-step').setAttribute('aria-pressed', m === 'step' ? 'true' : 'false');
    $('btn-mode-read').setAttribute('aria-pressed', m === 'read' ? 'true' : 'false');
    document.body.classList.toggle('mode-read', m === 'read');
    $('step-view').hidden = m === 'read';
    $('read').hidden = m !== 'read';
    document.querySelector('.skip').setAttribute('href', m === 'read' ? '#read' : '#source');
    document.querySelector('.skip').textContent = m === 'read' ? 'Skip to the lecture' : 'Skip to the lecture source';
    if (m === 'read') { L.buildRead(); L.readMark(true); L.syncUI({ history: !fromHistory }); } else L.go(S.cur, { history: !fromHistory });
  };

  // --------------------------------------------------------------- keys

  // Keys work wherever the focus is, except where a control needs them:
  // a text field, an open menu of a select, the file tabs (arrows), a dialog.
  L.onKey = function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    var tag = e.target && e.target.tagName, k = e.key;
    if (tag === 'INPUT' && e.target.type !== 'range' || tag === 'TEXTAREA') return;
    if (tag === 'SELECT' && /^(ArrowUp|ArrowDown| |Enter)$/.test(k)) return;
    if (document.querySelector('dialog[open]')) return;
    if (k === 'o') { e.preventDefault(); return L.pickFile(); }
    if (!L.T || !L.T.steps.length) return;
    var did = true;
    if (k === 'ArrowRight' && e.shiftKey) L.move('over');
    else if (k === 'ArrowLeft' && e.shiftKey) L.move('backOver');
    else if (k === 'ArrowRight' || k === 'l') L.move('next');
    else if (k === 'ArrowLeft' || k === 'h') L.move('prev');
    else if (k === 'j') L.move('over');
    else if (k === 'k') L.move('backOver');
    else if (k === 'u') L.move('out');
    else if (k === 'U') L.move('backOut');
    else if (k === 'Home') L.go(L.navTarget('first'));
    else if (k === 'End') L.go(L.navTarget('last'));
    else if (k === 'c') L.setRaw(!S.raw);
    else if (k === 'm') L.setMode(S.mode === 'read' ? 'step' : 'read');
    else if (k === 't') L.setLive(!S.live);
    else if ((k === 'd' || k === 'D') && L.diffActive()) L.diffMove(k === 'd' ? 1 : -1);
    else if (k === 'f' && L.followLink) L.followLink();
    else if (k === 'b' && L.linkBack) L.linkBack();
    else if (k === '?') L.openHelp();
    else if (k === 'a' && S.rank != null) L.setRank(null);
    else if (/^[0-9]$/.test(k) && L.T.spawns.length) L.setRank(+k);
    else did = false;
    if (did) e.preventDefault();
  };
})();
