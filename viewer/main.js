/* lectern viewer, main: starting, and everything a click or a drop does.
 *
 * At load: the trace the address names (?trace=), or a page that offers to
 * open one. Later: "Open trace…" or a .json file dropped on the page
 * replaces what is shown. Clicks are handled once, here, for the whole
 * page; keys in nav.js.
 */
(function () {
  'use strict';

  var L = window.lectern, S = L.S, $ = L.$, esc = L.esc;

  // ----------------------------------------------------------- errors

  // A trace that cannot be shown says what is wrong, never leaves the page
  // blank: everything that can fail ends up here.
  var OPEN_HINT = '<div class="err-open"><button type="button" class="open-trace">Open trace…</button> ' +
    '<span>or drop a <code>.json</code> trace on this page. This is the safe way to open a trace from someone ' +
    'else: the file is read as data, never run.</span></div>';

  L.fail = function (file, what, details) {
    L.api.error = (file ? file + ': ' : '') + what;
    document.body.classList.remove('loading');
    document.body.classList.add('failed-load');
    $('title').textContent = S.name ? S.name : 'lectern';
    var box = $('error-box');
    var html = '<h2>' + (file || S.name ? 'This trace cannot be shown' : 'No trace to show') + '</h2>';
    if (file) html += '<p class="err-file">File: <code>' + esc(file) + '</code></p>';
    html += '<p class="err-what">' + esc(what) + '</p>';
    if (details && details.length) {
      html += '<ul class="err-list">';
      for (var i = 0; i < details.length; i++) html += '<li>' + esc(details[i]) + '</li>';
      html += '</ul>';
    }
    html += '<p class="err-hint">A lecture writes its trace with <code>make run LECTURE=name</code>; ' +
      'open <code>viewer/index.html?trace=name</code>. The trace format is described in <code>docs/trace-format.md</code>.</p>' +
      OPEN_HINT;
    box.innerHTML = html;
    box.hidden = false;
    $('step-view').hidden = true;
    $('read').hidden = true;
    document.querySelector('.controls').hidden = true;
    document.querySelector('.top-actions').hidden = true;
  };

  // ---------------------------------------------------------- showing

  // A trace read (or why it could not be): check it, index it, draw it at
  // the step (rank, mode) p names.
  L.show = function (trace, file, problem, p) {
    var t1 = performance.now();
    if (!trace) return L.fail(file, problem);
    var errs;
    try { errs = L.validate(trace); } catch (e) { errs = ['validation failed: ' + e.message]; }
    if (errs.length) return L.fail(file, 'The file is not a lectern trace the viewer can read:', errs);
    if (!trace.steps.length) return L.fail(file, 'The trace holds no steps' +
      (trace.meta && trace.meta.status === 'failed' ? ' (the run failed before its first note).' : '.'));
    if (p.diffFile != null) {
      if (!p.diffTrace) return L.fail(p.diffFile, 'The trace to compare with cannot be shown: ' + p.diffProblem);
      var derrs = L.diffProblems();
      if (derrs) return L.fail(p.diffFile, 'The trace to compare with is not a lectern trace the viewer can read:', derrs);
    }
    try {
      L.T = trace;
      L.IX = L.buildIndex(trace);
      L.api.timings.index_ms = performance.now() - t1;
      L.diffInit();   // diff.js: only with a trace to compare with
      L.api.via = S.via;
      document.body.classList.remove('loading');
      L.drawHeader();
      var rk = p.rank != null && p.rank !== '' ? +p.rank : null;
      if (rk != null && L.IX.ranks.indexOf(rk) >= 0) {
        S.rank = rk;
        $('rank-filter').value = String(rk);
        document.body.classList.add('rank-filtered');
      }
      if (p.code === 'raw') { S.raw = true; $('btn-raw').setAttribute('aria-pressed', 'true'); document.body.classList.add('raw'); }
      if (p.live === '1') { S.live = true; $('btn-live').setAttribute('aria-pressed', 'true'); }
      var st = parseInt(p.step, 10);
      S.cur = isFinite(st) ? Math.max(0, Math.min(trace.steps.length - 1, st - 1)) : 0;
      if (!L.visible(S.cur)) S.cur = Math.max(0, L.navTarget('next', S.cur));
      if (p.mode === 'read') L.setMode('read'); else L.go(S.cur);
      L.writeUrlNow();
      L.api.timings.ready_ms = performance.now();
      L.api.ready = true;
      if (performance.mark) performance.mark('lectern-ready');
    } catch (e) {
      L.fail(file, 'The viewer could not show this trace: ' + e.message, e.stack ? [String(e.stack).split('\n')[1] || ''] : []);
      if (window.console) console.error(e);
    }
  };

  // Back to an empty page before another trace is shown.
  function reset() {
    for (var p in L.views) if (L.views[p].observer) L.views[p].observer.disconnect();
    L.resetRead();
    L.resetRanks();
    L.resetOutline();
    L.resetHistory();
    L.resetDiff();
    L.resetMoment();
    L.clearMarks();
    L.T = null;
    L.IX = null;
    L.views = Object.create(null);
    L.lists = Object.create(null);
    S.cur = 0; S.rank = null; S.raw = false; S.mode = 'step'; S.live = false; S.file = null; S.frameSel = null;
    S.via = null; S.name = null; S.spawnView = {};
    var api = L.api;
    api.ready = false; api.error = null; api.via = null; api.timings = {};
    var body = document.body;
    ['failed-load', 'mode-read', 'raw', 'rank-filtered'].forEach(function (c) { body.classList.remove(c); });
    body.classList.add('loading');
    $('source').innerHTML = '<p class="placeholder">Loading trace…</p>';
    ['file-tabs', 'stack', 'spawn-info', 'run-info', 'read', 'error-box', 'outline'].forEach(function (id) { $(id).innerHTML = ''; });
    $('read').hidden = true;
    $('step-view').hidden = false;
    ['error-box', 'banner', 'notice', 'status-badge', 'rank-filter-wrap', 'spawn-panel', 'outline-panel']
      .forEach(function (id) { $(id).hidden = true; });
    $('meta').textContent = '';
    $('lecture-name').textContent = '';
    var sel = $('rank-filter');
    while (sel.options.length > 1) sel.remove(1);
    sel.value = '';
    ['btn-raw', 'btn-live', 'btn-mode-read'].forEach(function (id) { $(id).setAttribute('aria-pressed', 'false'); });
    $('btn-mode-step').setAttribute('aria-pressed', 'true');
    document.querySelector('.controls').hidden = false;
    document.querySelector('.top-actions').hidden = false;
  }

  // A .json trace from this computer, picked or dropped.
  function openFile(f) {
    if (!f) return;
    reset();
    var t0 = performance.now();
    L.readTraceFile(f, function (trace, file, problem) {
      L.api.timings.load_ms = performance.now() - t0;
      L.show(trace, file, problem, {});
    });
  }

  // Two .json files from the "Compare…" dialog: A shown, compared with B.
  function compareFiles(fa, fb) {
    reset();
    var t0 = performance.now();
    L.readTraceFile(fb, function (tb, fileB, problemB) {
      L.readTraceFile(fa, function (ta, fileA, problemA) {
        L.api.timings.load_ms = performance.now() - t0;
        L.diffPrepare(tb, fileB);
        L.show(ta, fileA, problemA, { diffTrace: tb, diffFile: fileB, diffProblem: problemB });
      });
    });
  }

  function bindCompare() {
    $('compare-go').addEventListener('click', function (e) {
      var fa = $('compare-a').files[0], fb = $('compare-b').files[0];
      if (!fa || !fb) {
        e.preventDefault();
        $('compare-msg').textContent = 'Choose two .json traces: run A and run B.';
        return;
      }
      compareFiles(fa, fb);
    });
  }

  L.pickFile = function () {
    var inp = $('open-file');
    inp.value = '';
    inp.click();
  };

  // A file dragged over the page: say where it goes; dropped: open it. The
  // browser's own handling (navigating to the file) is always prevented.
  function bindDrop() {
    var depth = 0, zone = $('drop');
    function files(e) {
      var ty = e.dataTransfer && e.dataTransfer.types;
      return !!ty && Array.prototype.indexOf.call(ty, 'Files') >= 0;
    }
    document.addEventListener('dragenter', function (e) {
      if (!files(e)) return;
      e.preventDefault();
      depth++;
      zone.hidden = false;
    });
    document.addEventListener('dragover', function (e) {
      if (!files(e)) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = 'copy';
    });
    document.addEventListener('dragleave', function (e) {
      if (!files(e)) return;
      if (--depth <= 0) { depth = 0; zone.hidden = true; }
    });
    document.addEventListener('drop', function (e) {
      if (!files(e)) return;
      e.preventDefault();
      depth = 0;
      zone.hidden = true;
      openFile(e.dataTransfer.files[0]);
    });
  }

  // ---------------------------------------------------------- clicks

  // After a mouse click on a control, the keys go back to the lecture (a
  // focused select or tab would otherwise keep the arrows).
  function refocus(e, el) {
    if (e.detail > 0 && el && el.blur && (el.tagName === 'SELECT' || el.getAttribute('role') === 'tab')) {
      $('source').focus({ preventScroll: true });
    }
  }

  function onClick(e) {
    var t = e.target;
    if (!t.closest) return;
    var b = t.closest('button');
    if (b) return onButton(e, b);
    if (t.closest('a')) return;
    if (S.mode !== 'step') return;
    var sel = window.getSelection && String(window.getSelection());
    if (sel) return;
    var item = t.closest('.item[data-step]');
    if (item && $('source').contains(item)) return L.go(+item.getAttribute('data-step'));
    var ln = t.closest('.ln');
    if (ln && ln.classList.contains('hit')) {
      var f = ln.closest('.file');
      L.goLine(f.getAttribute('data-path'), +ln.getAttribute('data-line'));
    }
  }

  function onButton(e, b) {
    var c = b.classList;
    if (c.contains('open-trace')) return L.pickFile();
    if (c.contains('more')) {
      L.moreList(b.getAttribute('data-list'), b.getAttribute('data-dir') === 'up', b.closest('.list'));
      return L.applyMarks();
    }
    if (c.contains('more-rows')) {
      L.moreRows(b.closest('.spawn'), b.getAttribute('data-key'), b.getAttribute('data-dir') === 'up');
      return S.mode === 'read' ? L.readMark(false) : L.applyMarks();
    }
    if (c.contains('sp-view-b')) {
      L.setSpawnView(b.closest('.spawn'), b.getAttribute('data-view'));
      return S.mode === 'read' ? L.readMark(false) : L.applyMarks();
    }
    if (c.contains('tsort')) return L.sortTable(b);
    if (c.contains('twin-toggle')) return L.toggleTwin(b);
    if (c.contains('zoom')) return L.zoom(b.querySelector('img'));
    if (c.contains('load-img')) {
      var img = document.createElement('img');
      img.src = b.getAttribute('data-src');
      img.alt = b.getAttribute('data-alt');
      img.style.width = b.getAttribute('data-width');
      img.setAttribute('data-remote', b.getAttribute('data-src'));
      b.parentNode.appendChild(img);
      b.remove();
      return;
    }
    if (c.contains('frame') || c.contains('to-line')) {
      if (S.mode === 'read') L.setMode('step');
      // The reader chose a line: the current step no longer pulls the
      // source back to itself (it keeps doing so for a moment after a jump).
      L.stopSettling();
      return L.showFrame(b.getAttribute('data-path'), +b.getAttribute('data-line'));
    }
    if (c.contains('to-step')) {
      if (S.mode === 'read') L.setMode('step');
      return L.go(+b.getAttribute('data-step'));
    }
    if (c.contains('tab')) { L.showFrame(b.getAttribute('data-path'), 1); return refocus(e, b); }
    if (c.contains('rank-b')) {
      var r = +b.getAttribute('data-rank');
      return L.setRank(S.rank === r ? null : r);
    }
    if (b.id === 'outline-toggle') return L.toggleOutline(b);
  }

  // Figures that cannot be loaded say so instead of showing a broken icon.
  function onImageError(e) {
    var img = e.target;
    if (!img || img.tagName !== 'IMG' || !img.closest('.r-img') || img.getAttribute('data-broken')) return;
    img.setAttribute('data-broken', '');
    var p = document.createElement('p');
    p.className = 'img-missing';
    var remote = img.getAttribute('data-remote');
    p.textContent = remote ? 'The figure could not be loaded from ' + (new URL(remote).host) +
      ' (offline?); the link above opens it.' : 'image not found: ' + (img.getAttribute('data-path') || img.src);
    var fig = img.closest('.r-img');
    fig.appendChild(p);
    img.hidden = true;
    var z = img.closest('.zoom');
    if (z) z.hidden = true;
  }

  function bind() {
    document.addEventListener('keydown', L.onKey);
    document.addEventListener('click', onClick);
    document.addEventListener('error', onImageError, true);
    window.addEventListener('popstate', L.onPopState);
    $('btn-first').onclick = function () { L.go(L.navTarget('first')); };
    $('btn-last').onclick = function () { L.go(L.navTarget('last')); };
    $('btn-prev').onclick = function () { L.move('prev'); };
    $('btn-next').onclick = function () { L.move('next'); };
    $('btn-over').onclick = function () { L.move('over'); };
    $('btn-out').onclick = function () { L.move('out'); };
    $('btn-raw').onclick = function () { L.setRaw(!S.raw); };
    $('btn-live').onclick = function () { L.setLive(!S.live); };
    $('btn-help').onclick = L.openHelp;
    $('btn-open').onclick = L.pickFile;
    $('btn-compare').onclick = L.openCompare;
    bindCompare();
    $('open-file').addEventListener('change', function () { if (this.files && this.files[0]) openFile(this.files[0]); });
    bindDrop();
    $('btn-mode-step').onclick = function () { if (S.mode !== 'step') L.setMode('step'); };
    $('btn-mode-read').onclick = function () { if (S.mode !== 'read') L.setMode('read'); };
    // Dragging the scrubber moves through steps; the history gets the step
    // it stops on.
    $('scrub').addEventListener('input', function () { L.go(+this.value - 1); });
    $('rank-filter').addEventListener('change', function (e) {
      L.setRank(this.value === '' ? null : +this.value);
      $('source').focus({ preventScroll: true });
      void e;
    });
    $('file-tabs').addEventListener('keydown', function (e) {
      if (e.key !== 'ArrowRight' && e.key !== 'ArrowLeft') return;
      var tabs = Array.prototype.slice.call(this.children), k = tabs.indexOf(document.activeElement);
      if (k < 0) return;
      e.stopPropagation();
      e.preventDefault();
      var nk = (k + (e.key === 'ArrowRight' ? 1 : -1) + tabs.length) % tabs.length;
      tabs[nk].focus();
      L.showFrame(tabs[nk].getAttribute('data-path'), 1);
    });
    ['wheel', 'touchstart', 'mousedown'].forEach(function (ev) {
      $('source').addEventListener(ev, L.stopSettling, { passive: true });
    });
    $('source').addEventListener('keydown', function (e) {   // the source pane scrolled by its keys
      if (/^(PageUp|PageDown|ArrowUp|ArrowDown| |Home|End)$/.test(e.key)) L.stopSettling();
    });
    $('zoom').addEventListener('click', function (e) { if (e.target === this || e.target.id === 'zoom-img') this.close(); });
    window.addEventListener('beforeprint', function () { if (S.mode === 'read') L.readAll(); });
  }

  // ------------------------------------------------------------ start

  function start() {
    var t0 = performance.now();
    bind();
    var p = L.params();
    if (!p.trace) {
      // The list of lectures; without one, say how to name a trace.
      return L.showIndex(function () {
        L.fail(null, 'No trace named in the address, and no lecture index in traces/.', ['Open this page as ' +
          'viewer/index.html?trace=lecture_08 (the name of a file in traces/, without .js), or ' +
          '?trace=path/to/trace.js. `make run` writes traces/index.js, the list of lectures.']);
      });
    }
    L.loadTrace(p.trace, function (trace, file, problem) {
      if (!p.diff) {
        L.api.timings.load_ms = performance.now() - t0;
        return L.show(trace, file, problem, p);
      }
      // ?diff=B: read like ?trace=, then A is shown compared with it.
      L.loadDiffTrace(p.diff, function (tb, fileB, problemB) {
        L.api.timings.load_ms = performance.now() - t0;
        p.diffTrace = tb; p.diffFile = fileB; p.diffProblem = problemB;
        if (tb) L.diffPrepare(tb, fileB, p.rtol != null ? Number(p.rtol) : undefined);
        L.show(trace, file, problem, p);
      });
    });
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
