/* lectern viewer: replays a lecture trace beside the lecture's C source.
 *
 * Plain classic script (no modules, no build step) so that the page works
 * when opened straight from disk: Chromium refuses ES modules and fetch() on
 * file://, so a trace is loaded as traces/NAME.js, a script that stores the
 * trace in window.lecternTraces["NAME"]. Served over http(s) the page reads
 * traces/NAME.json instead.
 *
 * The page is organised around one number, the current step. Everything else
 * (highlighted line, call stack, progress, address bar) is derived from it in
 * setStep(). Traces can hold 100,000 steps, so nothing is rendered per step
 * up front: steps are indexed by source line once, the source is drawn in
 * chunks of lines as they scroll into view, and a line that produced many
 * renderings shows a window of them around the current one.
 */
(function () {
  'use strict';

  // ---------------------------------------------------------------- constants

  var ROOT = '../';               // the repository root, seen from viewer/
  var CHUNK = 20;                 // source lines drawn at a time
  var MAX_DRAWN = 30;             // chunks kept drawn per file; the oldest unseen go back to placeholders
  var LIST_CAP = 8;               // renderings shown per line before "show more"
  var LIST_MORE = 50;             // how many more a "show more" click adds
  var READ_BATCH = 400;           // read view entries appended at a time
  var LINE_PX = 21, ITEM_PX = 46; // height guesses for chunks not drawn yet
  var RANK_COLORS = ['#2563eb', '#c2410c', '#047857', '#be185d',
                     '#6d28d9', '#0e7490', '#4d7c0f', '#92400e'];
  var VEGA_SCRIPTS = ['vega/build/vega.min.js', 'vega-lite/build/vega-lite.min.js',
                      'vega-embed/build/vega-embed.min.js'];

  // ------------------------------------------------------------------ helpers

  function $(id) { return document.getElementById(id); }

  var ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  function esc(s) { return String(s).replace(/[&<>"']/g, function (c) { return ESC[c]; }); }

  function basename(p) { var i = String(p).lastIndexOf('/'); return i < 0 ? String(p) : String(p).slice(i + 1); }

  function rankColor(r) {
    if (r < RANK_COLORS.length) return RANK_COLORS[r];
    return 'hsl(' + Math.round((r * 137.508) % 360) + ' 62% 38%)';
  }

  function isInt(x) { return typeof x === 'number' && isFinite(x) && Math.floor(x) === x; }

  // First index in the sorted array a whose value is >= x.
  function lowerBound(a, x) {
    var lo = 0, hi = a.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (a[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }

  function fmtSeconds(s) {
    if (typeof s !== 'number' || !isFinite(s)) return '';
    if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 2 : 0) + ' ms';
    if (s < 120) return s.toFixed(2) + ' s';
    return Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
  }

  function loc(frame) { return frame.path + ':' + frame.line; }

  // ------------------------------------------------------------------- state

  var T = null;          // the trace
  var IX = null;         // indexes built from it (see buildIndex)
  var S = {
    cur: 0,              // current step
    rank: null,          // rank filter (null: all ranks)
    raw: false,          // raw code instead of notes
    mode: 'step',        // 'step' or 'read'
    file: null,          // path shown in the source pane
    frameSel: null,      // {path, line} picked in the call stack panel
    via: null,           // how the trace was loaded: 'script' or 'json'
    name: null
  };
  var views = {};        // path -> FileView
  var lists = {};        // list key -> {items, lo, hi}
  var marked = { line: null, items: [], onstack: [], echo: null, frame: null };

  // Exposed for the browser tests and the benchmark.
  var api = window.lecternViewer = {
    ready: false, error: null, via: null, timings: {},
    go: function (i) { go(i); },
    cur: function () { return S.cur; },
    total: function () { return T ? T.steps.length : 0; },
    state: S
  };

  // -------------------------------------------------------------- page errors

  // A missing or malformed trace must say what is wrong, never leave the page
  // blank: everything that can fail ends up here.
  function fail(file, what, details) {
    api.error = (file ? file + ': ' : '') + what;
    document.body.classList.remove('loading');
    document.body.classList.add('failed-load');
    $('title').textContent = S.name ? S.name : 'lectern';
    var box = $('error-box');
    var html = '<h2>This trace cannot be shown</h2>';
    if (file) html += '<p class="err-file">File: <code>' + esc(file) + '</code></p>';
    html += '<p class="err-what">' + esc(what) + '</p>';
    if (details && details.length) {
      html += '<ul class="err-list">';
      for (var i = 0; i < details.length; i++) html += '<li>' + esc(details[i]) + '</li>';
      html += '</ul>';
    }
    html += '<p class="err-hint">A lecture writes its trace with <code>make run LECTURE=name</code>; ' +
      'open <code>viewer/index.html?trace=name</code>. The trace format is described in <code>docs/trace-format.md</code>.</p>';
    box.innerHTML = html;
    box.hidden = false;
    $('main').hidden = true;
    $('read').hidden = true;
    document.querySelector('.controls').hidden = true;
    document.querySelector('.top-actions').hidden = true;
  }

  // ------------------------------------------------------------------ loading

  function params() {
    var p = new URLSearchParams(location.search);
    return {
      trace: p.get('trace'),
      step: p.get('step'),
      rank: p.get('rank'),
      mode: p.get('mode'),
      code: p.get('code')
    };
  }

  // ?trace=NAME reads ../traces/NAME.js (or .json over http); ?trace=path/x.js
  // or a URL ending in .js/.json reads that file.
  function traceSource(arg) {
    var isPath = /\.(js|json)$/i.test(arg) || arg.indexOf('/') >= 0;
    if (!isPath) return { key: arg, js: ROOT + 'traces/' + arg + '.js', json: ROOT + 'traces/' + arg + '.json' };
    var base = basename(arg).replace(/\.(js|json)$/i, '');
    if (/\.json$/i.test(arg)) return { key: base, js: null, json: arg };
    return { key: base, js: arg.replace(/\.js$/i, '') + '.js', json: null };
  }

  function loadScript(src, onload, onerror) {
    var s = document.createElement('script');
    s.src = src;
    s.onload = onload;
    s.onerror = onerror;
    document.head.appendChild(s);
    return s;
  }

  function loadViaScript(src, key, done) {
    var before = window.lecternTraces ? Object.keys(window.lecternTraces) : [];
    var syntaxError = null;
    // A syntax error in the script is reported to window.onerror, not to the
    // script element; catch it so the page can say what went wrong.
    // From file:// the browser hides the details ("Script error.", no file
    // name): say so, and how to see them.
    function onErr(ev) {
      if (ev.filename && ev.filename.indexOf(src.replace(/^(\.\.\/)+/, '')) >= 0) {
        syntaxError = ev.message + (ev.lineno ? ' (line ' + ev.lineno + ', column ' + ev.colno + ')' : '');
        ev.preventDefault();
      } else if (!ev.filename && /^Script error/.test(ev.message || '')) {
        syntaxError = 'the browser hides the details for pages opened from disk; `node --check` on the file shows them';
        ev.preventDefault();
      }
    }
    window.addEventListener('error', onErr);
    loadScript(src, function () {
      window.removeEventListener('error', onErr);
      if (syntaxError) return done(null, src, 'the file is not valid JavaScript: ' + syntaxError);
      var all = window.lecternTraces || {};
      if (Object.prototype.hasOwnProperty.call(all, key)) return done(all[key], src);
      var fresh = Object.keys(all).filter(function (k) { return before.indexOf(k) < 0; });
      if (fresh.length === 1) return done(all[fresh[0]], src);
      done(null, src, 'the file loaded but does not define the trace "' + key + '" ' +
        '(expected window.lecternTraces["' + key + '"] = {...}; found ' +
        (Object.keys(all).length ? Object.keys(all).map(function (k) { return '"' + k + '"'; }).join(', ') : 'nothing') + ')');
    }, function () {
      window.removeEventListener('error', onErr);
      done(null, src, 'the file could not be read: it is missing, or the path is wrong.');
    });
  }

  function loadTrace(arg, done) {
    var src = traceSource(arg);
    S.name = src.key;
    var http = /^https?:$/.test(location.protocol);
    if (src.json && (http || !src.js)) {
      if (!http && !src.js) return done(null, src.json, 'a .json trace cannot be read from file:// ' +
        '(the browser forbids it); open the .js twin instead, or serve the page with make view.');
      fetch(src.json, { cache: 'no-cache' }).then(function (res) {
        if (!res.ok) throw { status: res.status };
        return res.text();
      }).then(function (text) {
        var t;
        try { t = JSON.parse(text); } catch (e) {
          return done(null, src.json, 'the file is not valid JSON: ' + e.message);
        }
        S.via = 'json';
        done(t, src.json);
      }, function (e) {
        if (src.js) { S.via = 'script'; return loadViaScript(src.js, src.key, done); }
        done(null, src.json, 'the file could not be read' + (e && e.status ? ' (HTTP ' + e.status + ')' : '') + '.');
      });
      return;
    }
    S.via = 'script';
    loadViaScript(src.js, src.key, done);
  }

  // --------------------------------------------------------------- validation

  // Checks what the viewer relies on and names the first problems found.
  function validate(t) {
    var errs = [], more = 0;
    function err(m) { if (errs.length < 8) errs.push(m); else more++; }
    if (!t || typeof t !== 'object' || Array.isArray(t)) return ['the trace is not a JSON object'];
    if (t.version !== 1) err('"version" is ' + JSON.stringify(t.version) + ', this viewer reads version 1');
    if (!t.files || typeof t.files !== 'object') err('"files" (path -> source text) is missing');
    if (!Array.isArray(t.steps)) { err('"steps" is missing or not a list'); return errs; }
    if (t.spawns != null && !Array.isArray(t.spawns)) err('"spawns" is not a list');
    var nsp = Array.isArray(t.spawns) ? t.spawns.length : 0;
    for (var k = 0; k < nsp; k++) {
      var sp = t.spawns[k];
      if (!sp || !Array.isArray(sp.stack) || !sp.stack.length) err('spawns[' + k + '].stack is missing or empty');
    }
    for (var i = 0; i < t.steps.length && more < 1000; i++) {
      var s = t.steps[i];
      if (!s || typeof s !== 'object') { err('steps[' + i + '] is not an object'); continue; }
      if (!Array.isArray(s.stack) || !s.stack.length) { err('steps[' + i + '].stack is missing or empty'); continue; }
      for (var d = 0; d < s.stack.length; d++) {
        var f = s.stack[d];
        if (!f || typeof f.path !== 'string') { err('steps[' + i + '].stack[' + d + '].path is missing'); break; }
        if (!isInt(f.line) || f.line < 1) { err('steps[' + i + '].stack[' + d + '].line is not a positive integer'); break; }
      }
      if (!Array.isArray(s.renderings)) err('steps[' + i + '].renderings is missing or not a list');
      if (s.rank != null && (!isInt(s.rank) || s.rank < 0)) err('steps[' + i + '].rank is not a rank number');
      if (s.spawn != null && !(isInt(s.spawn) && s.spawn >= 0 && s.spawn < nsp))
        err('steps[' + i + '].spawn is ' + JSON.stringify(s.spawn) + ', not an index into "spawns" (' + nsp + ')');
    }
    if (more) errs.push('… and ' + (more >= 1000 ? 'at least ' : '') + more + ' more');
    return errs;
  }

  // ----------------------------------------------------------------- indexing

  // One pass over the steps. For every file: the steps whose innermost frame
  // is at a line (the notes shown there), the rank steps per line, the first
  // step passing through a line at any depth (to make call sites clickable).
  // For every spawn: its steps per rank.
  function buildIndex(t) {
    var ix = {
      depth: new Int32Array(t.steps.length),
      spawnDepth: new Int32Array(t.steps.length), // frames of the parent, 0 for a lecture step
      own: {}, rankAt: {}, any: {}, spawnAt: {},
      spawnRanks: [],   // spawn -> rank -> [steps]
      errors: [],       // steps with an error rendering
      ranks: [],        // every rank seen, sorted
      files: []
    };
    var spawns = t.spawns = Array.isArray(t.spawns) ? t.spawns : [];
    var files = Object.keys(t.files || {});
    function perFile(map, path) { return map[path] || (map[path] = new Map()); }
    function push(map, path, line, i) {
      var m = perFile(map, path), a = m.get(line);
      if (a) a.push(i); else m.set(line, [i]);
    }
    var rankSeen = {};
    for (var k = 0; k < spawns.length; k++) {
      var sst = spawns[k].stack, top = sst[sst.length - 1];
      push(ix.spawnAt, top.path, top.line, k);
      ix.spawnRanks.push([]);
    }
    for (var i = 0; i < t.steps.length; i++) {
      var s = t.steps[i], st = s.stack, n = st.length, inner = st[n - 1];
      ix.depth[i] = n;
      var anyF;
      for (var d = 0; d < n; d++) {
        anyF = perFile(ix.any, st[d].path);
        if (!anyF.has(st[d].line)) anyF.set(st[d].line, i);
      }
      if (s.rank == null) {
        push(ix.own, inner.path, inner.line, i);
      } else {
        var sp = s.spawn;
        if (sp == null) sp = s.spawn = synthSpawn(t, ix, s);
        var D = spawns[sp].stack.length;
        ix.spawnDepth[i] = D;
        var byRank = ix.spawnRanks[sp];
        (byRank[s.rank] || (byRank[s.rank] = [])).push(i);
        rankSeen[s.rank] = true;
        if (n > D) push(ix.rankAt, inner.path, inner.line, i);
      }
      var rs = s.renderings;
      for (var j = 0; j < rs.length; j++) if (rs[j] && rs[j].type === 'error') { ix.errors.push(i); break; }
    }
    ix.ranks = Object.keys(rankSeen).map(Number).sort(function (a, b) { return a - b; });
    depthLinks(ix);
    // Files in the order the lecture first reaches them; files no stack names last.
    var order = [], seen = {};
    for (i = 0; i < t.steps.length && order.length < files.length; i++) {
      var stk = t.steps[i].stack;
      for (d = 0; d < stk.length; d++) {
        var p = stk[d].path;
        if (!seen[p] && t.files[p] != null) { seen[p] = true; order.push(p); }
      }
    }
    files.forEach(function (f) { if (!seen[f]) order.push(f); });
    ix.files = order;
    return ix;
  }

  // For step over / out without scanning: for every step, the next (and the
  // previous) step at the same depth or shallower, and strictly shallower.
  // One pass each way with a stack ("next smaller element").
  function depthLinks(ix) {
    var d = ix.depth, n = d.length;
    ix.nextLE = new Int32Array(n); ix.nextLT = new Int32Array(n);
    ix.prevLE = new Int32Array(n); ix.prevLT = new Int32Array(n);
    function pass(from, to, dir, out, strict) {
      var st = new Int32Array(n), top = 0;
      for (var i = from; i !== to; i += dir) {
        while (top && (strict ? d[st[top - 1]] >= d[i] : d[st[top - 1]] > d[i])) top--;
        out[i] = top ? st[top - 1] : -1;
        st[top++] = i;
      }
    }
    pass(n - 1, -1, -1, ix.nextLE, false);
    pass(n - 1, -1, -1, ix.nextLT, true);
    pass(0, n, 1, ix.prevLE, false);
    pass(0, n, 1, ix.prevLT, true);
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
    var m = ix.spawnAt[top.path] || (ix.spawnAt[top.path] = new Map());
    (m.get(top.line) || (m.set(top.line, []), m.get(top.line))).push(t.spawns.length - 1);
    ix.spawnRanks.push([]);
    return t.spawns.length - 1;
  }

  function visible(i) {
    return S.rank == null || T.steps[i].rank == null || T.steps[i].rank === S.rank;
  }

  // ------------------------------------------------------- syntax highlighting

  // highlight.js colours a whole file at once (comments span lines); split its
  // HTML back into lines, closing the spans open at each newline and opening
  // them again on the next line.
  function highlightLines(text) {
    var hl = window.hljs;
    if (!hl || !hl.getLanguage || !hl.getLanguage('c')) return null;
    var html;
    try { html = hl.highlight(text, { language: 'c', ignoreIllegals: true }).value; } catch (e) { return null; }
    var out = [], cur = '', open = [], re = /(<span[^>]*>)|(<\/span>)|(\n)/g, last = 0, m;
    while ((m = re.exec(html))) {
      cur += html.slice(last, m.index);
      last = re.lastIndex;
      if (m[1]) { open.push(m[1]); cur += m[1]; }
      else if (m[2]) { open.pop(); cur += m[2]; }
      else { for (var k = 0; k < open.length; k++) cur += '</span>'; out.push(cur); cur = open.join(''); }
    }
    out.push(cur + html.slice(last));
    return out;
  }

  // -------------------------------------------------------------- renderings

  function imgWidth(w) {
    if (typeof w === 'number' && w > 0) return w <= 1 ? (w * 100) + '%' : w + 'px';
    if (typeof w === 'string' && /^\d+(\.\d+)?(%|px)$/.test(w)) return w;
    return '100%';
  }

  function prettyUrl(u) {
    try {
      var x = new URL(u);
      var p = x.pathname.length > 40 ? x.pathname.slice(0, 38) + '…' : x.pathname;
      return x.host + (p === '/' ? '' : p);
    } catch (e) { return u; }
  }

  function whereText(i) {
    var s = T.steps[i], f = s.stack[s.stack.length - 1];
    return (s.rank != null ? 'rank ' + s.rank + ' · ' : '') + loc(f) + (f.function ? ' (' + f.function + ')' : '');
  }

  function renderingHTML(r, i, j) {
    if (!r || typeof r !== 'object') return '<div class="r-unknown">rendering ' + j + ' is not an object</div>';
    switch (r.type) {
      case 'markdown':
        if (typeof r.html === 'string') return '<div class="r-md">' + r.html + '</div>';
        return '<div class="r-md r-plain">' + esc(r.data == null ? '' : r.data) + '</div>';
      case 'text':
        var pre = '<pre class="r-text">' + esc(r.data == null ? '' : r.data) + '</pre>';
        if (r.command == null) return pre;
        var bad = r.exit_status != null && r.exit_status !== 0;
        return '<div class="r-cmd"><div class="cmd-h"><span class="prompt" aria-hidden="true">$</span> <code>' +
          esc(r.command) + '</code>' + (r.exit_status != null ? ' <span class="exit' + (bad ? ' bad' : '') + '">exit ' +
          esc(r.exit_status) + '</span>' : '') + '</div>' + pre + '</div>';
      case 'image':
        var w = imgWidth(r.width), alt = r.alt || r.caption || basename(r.src || 'image');
        if (r.remote || /^[a-z][a-z0-9+.-]*:/i.test(r.src || '')) {
          return '<div class="r-img remote"><a href="' + esc(r.src) + '" target="_blank" rel="noopener noreferrer">' +
            '<span class="ext-tag">figure (external)</span> ' + esc(prettyUrl(r.src)) + '</a> ' +
            '<button type="button" class="load-img" data-src="' + esc(r.src) + '" data-width="' + esc(w) +
            '" data-alt="' + esc(alt) + '">load image</button></div>';
        }
        return '<figure class="r-img"><img src="' + esc(ROOT + r.src) + '" alt="' + esc(alt) + '" style="width:' +
          esc(w) + '" loading="lazy" data-path="' + esc(r.src) + '"></figure>';
      case 'link':
        return '<div class="r-link"><a href="' + esc(r.url) + '" target="_blank" rel="noopener noreferrer">' +
          '<span class="see">see</span> ' + esc(r.title || prettyUrl(r.url)) + ' <span aria-hidden="true">↗</span>' +
          '<span class="sr-only"> (opens in a new tab)</span></a></div>';
      case 'plot':
        var title = r.spec && (typeof r.spec.title === 'string' ? r.spec.title : r.spec.title && r.spec.title.text);
        return '<div class="r-plot" data-s="' + i + '" data-r="' + j + '" role="img" aria-label="plot' +
          (title ? ': ' + esc(title) : '') + '"><span class="plot-wait">plot</span></div>';
      case 'error':
        return '<div class="r-error"><div class="err-h"><strong>Error</strong> · ' + esc(whereText(i)) + '</div>' +
          '<pre>' + esc(r.data == null ? '' : r.data) + '</pre></div>';
      default:
        return '<div class="r-unknown">unknown rendering type ' + esc(JSON.stringify(r.type)) + '</div>';
    }
  }

  function itemHTML(i, cls) {
    var s = T.steps[i], rs = s.renderings, h = '';
    for (var j = 0; j < rs.length; j++) h += renderingHTML(rs[j], i, j);
    var err = IX.errors.length && rs.some(function (r) { return r && r.type === 'error'; });
    var style = s.rank != null ? ' style="--rc:' + rankColor(s.rank) + '"' : '';
    return '<div class="item' + (cls ? ' ' + cls : '') + (err ? ' has-error' : '') + (i === S.cur ? ' cur-item' : '') +
      '" data-step="' + i + '"' + style + '>' + h + '</div>';
  }

  // After HTML is inserted: links in notes open in a new tab, relative paths
  // in notes are relative to the repository root, plots are drawn.
  function hydrate(root) {
    var as = root.querySelectorAll('.r-md a[href], .r-md img[src]');
    for (var k = 0; k < as.length; k++) {
      var a = as[k], attr = a.tagName === 'A' ? 'href' : 'src', v = a.getAttribute(attr);
      var absolute = /^[a-z][a-z0-9+.-]*:/i.test(v) || v.charAt(0) === '#' || v.charAt(0) === '/';
      if (!absolute && !a.hasAttribute('data-fixed')) { a.setAttribute(attr, ROOT + v); a.setAttribute('data-fixed', ''); }
      if (attr === 'href' && v.charAt(0) !== '#') { a.target = '_blank'; a.rel = 'noopener noreferrer'; }
    }
    var plots = root.querySelectorAll('.r-plot:not([data-drawn])');
    for (k = 0; k < plots.length; k++) drawPlot(plots[k]);
  }

  var vegaState = null; // null, 'loading', 'ok', 'missing'
  var vegaWaiting = [];
  function withVega(cb) {
    if (vegaState === 'ok' || vegaState === 'missing') return cb(vegaState === 'ok');
    vegaWaiting.push(cb);
    if (vegaState === 'loading') return;
    vegaState = 'loading';
    var n = 0;
    (function next() {
      if (n === VEGA_SCRIPTS.length) return finish(typeof window.vegaEmbed === 'function');
      loadScript(ROOT + 'node_modules/' + VEGA_SCRIPTS[n++], next, function () { finish(false); });
    })();
    function finish(ok) {
      vegaState = ok ? 'ok' : 'missing';
      var w = vegaWaiting; vegaWaiting = [];
      w.forEach(function (f) { f(ok); });
    }
  }

  function drawPlot(el) {
    el.setAttribute('data-drawn', '');
    var r = T.steps[+el.getAttribute('data-s')].renderings[+el.getAttribute('data-r')];
    withVega(function (ok) {
      if (ok) {
        el.innerHTML = '';
        window.vegaEmbed(el, r.spec, { actions: { export: true, source: false, compiled: false, editor: false }, renderer: 'svg' })
          .catch(function (e) { plotFallback(el, r, 'the plot could not be drawn: ' + e.message); });
      } else {
        plotFallback(el, r, 'plots need vega-embed (run npm ci); its data:');
      }
    });
  }

  function plotFallback(el, r, why) {
    el.classList.add('plot-missing');
    el.innerHTML = '<p>' + esc(why) + '</p><pre class="r-text">' + esc(JSON.stringify(r.spec, null, 1)).slice(0, 4000) + '</pre>';
  }

  // ------------------------------------------------------ windows of renderings

  // A list is the steps shown in one place (a line's notes, one rank's output
  // under a spawn). Only a window [lo, hi) of it is in the page.
  function list(key, items) {
    var L = lists[key];
    if (!L) L = lists[key] = { items: items, lo: 0, hi: Math.min(items.length, LIST_CAP) };
    return L;
  }

  function listHTML(key, items, cls) {
    var L = list(key, items), n = items.length, h = '<div class="list" data-list="' + esc(key) + '">';
    if (L.lo > 0) h += '<button type="button" class="more" data-list="' + esc(key) + '" data-dir="up">show ' +
      Math.min(L.lo, LIST_MORE) + ' earlier (' + L.lo + ' hidden)</button>';
    for (var k = L.lo; k < L.hi; k++) h += itemHTML(items[k], cls);
    if (L.hi < n) h += '<button type="button" class="more" data-list="' + esc(key) + '" data-dir="down">show ' +
      Math.min(n - L.hi, LIST_MORE) + ' more (' + (n - L.hi) + ' hidden)</button>';
    return h + '</div>';
  }

  // Make sure step i is inside the window of list key; redraw it if needed.
  function listReveal(key, i, container) {
    var L = lists[key];
    if (!L) return;
    var p = lowerBound(L.items, i);
    if (p >= L.lo && p < L.hi) return;
    L.lo = Math.max(0, p - (LIST_CAP >> 1));
    L.hi = Math.min(L.items.length, L.lo + LIST_CAP);
    redrawList(key, container);
  }

  function redrawList(key, container) {
    var el = container && container.querySelector('.list[data-list="' + cssEsc(key) + '"]');
    if (!el) return;
    var L = lists[key];
    var tmp = document.createElement('div');
    tmp.innerHTML = listHTML(key, L.items, el.getAttribute('data-cls') || '');
    var fresh = tmp.firstChild;
    if (el.getAttribute('data-cls')) fresh.setAttribute('data-cls', el.getAttribute('data-cls'));
    el.parentNode.replaceChild(fresh, el);
    hydrate(fresh);
  }

  function cssEsc(s) { return window.CSS && CSS.escape ? CSS.escape(s) : s.replace(/["\\]/g, '\\$&'); }

  // ----------------------------------------------------------- source view

  // One lecture file drawn as lines. Lines are created in chunks of CHUNK as
  // they come near the visible area.
  function FileView(path) {
    this.path = path;
    var text = T.files[path];
    this.missing = text == null;
    if (this.missing) text = '';
    var lines = text.split('\n');
    if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
    this.lines = lines;
    this.hl = null;
    this.own = IX.own[path] || new Map();
    this.rankAt = IX.rankAt[path] || new Map();
    this.spawnAt = IX.spawnAt[path] || new Map();
    this.any = IX.any[path] || new Map();
    this.lineEl = new Array(lines.length + 1);
    this.el = document.createElement('div');
    this.el.className = 'file';
    this.el.setAttribute('data-path', path);
    this.chunks = [];
    this.build();
  }

  FileView.prototype.build = function () {
    var self = this;
    this.el.innerHTML = '';
    this.lineEl = new Array(this.lines.length + 1);
    this.chunks = [];
    if (this.missing) {
      this.el.innerHTML = '<p class="placeholder">The trace does not contain the source of <code>' + esc(this.path) + '</code>.</p>';
      return;
    }
    if (this.observer) this.observer.disconnect();
    this.observer = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) {
        var c = +e.target.getAttribute('data-chunk');
        self.chunks[c].near = e.isIntersecting;
        if (e.isIntersecting) self.draw(c);
      });
    }, { root: $('source'), rootMargin: '1200px 0px' });
    this.drawn = [];
    var n = this.lines.length;
    for (var c = 0; c * CHUNK < n; c++) {
      var div = document.createElement('div');
      div.className = 'chunk';
      div.setAttribute('data-chunk', c);
      var g = this.guess(c * CHUNK + 1, Math.min(n, (c + 1) * CHUNK));
      div.style.height = g + 'px';
      this.chunks.push({ el: div, drawn: false, near: false, guess: g });
      this.el.appendChild(div);
      this.observer.observe(div);
    }
  };

  FileView.prototype.guess = function (a, b) {
    var h = 0;
    for (var ln = a; ln <= b; ln++) {
      var o = !S.raw && this.own.get(ln);
      h += o ? Math.min(o.length, LIST_CAP) * ITEM_PX : LINE_PX;
      var sp = !S.raw && this.spawnAt.get(ln);
      if (sp) h += sp.length * 160;
    }
    return h;
  };

  FileView.prototype.codeHTML = function (ln) {
    if (this.hl === null) this.hl = highlightLines(this.lines.join('\n')) || false;
    var src = this.hl ? this.hl[ln - 1] : esc(this.lines[ln - 1]);
    return '<code class="code">' + (src === '' ? ' ' : src) + '</code>';
  };

  FileView.prototype.lineHTML = function (ln) {
    var own = this.own.get(ln), ranks = this.rankAt.get(ln), spawns = this.spawnAt.get(ln);
    var cls = 'ln', body = '', marks = '';
    var hit = own || ranks || this.any.has(ln);
    if (hit) cls += ' hit';
    if (own && !S.raw) {
      cls += ' notes';
      body += listHTML('L|' + this.path + '|' + ln, own, '');
    } else {
      body += this.codeHTML(ln);
      if (own) marks += '<span class="mark-notes" title="' + own.length + ' note' + (own.length > 1 ? 's' : '') + '">●</span>';
    }
    if (ranks) {
      cls += ' rankline';
      body += rankChips(ranks);
    }
    if (spawns && !S.raw) {
      cls += ' spawnline';
      for (var k = 0; k < spawns.length; k++) body += spawnHTML(spawns[k], 'S');
    } else if (spawns) {
      marks += '<span class="mark-spawn" title="spawn">⑂</span>';
    }
    return '<div class="' + cls + '" data-line="' + ln + '"><div class="gut"><span class="no">' + ln + '</span>' +
      marks + '</div><div class="body">' + body + '</div></div>';
  };

  // Small coloured chips on a line of a rank function: which ranks ran it, how often.
  function rankChips(steps) {
    var count = {}, order = [];
    for (var k = 0; k < steps.length; k++) {
      var r = T.steps[steps[k]].rank;
      if (!(r in count)) { count[r] = 0; order.push(r); }
      count[r]++;
    }
    order.sort(function (a, b) { return a - b; });
    var h = '<div class="chips" aria-label="ran on ' + order.length + ' rank' + (order.length > 1 ? 's' : '') + '">';
    var shown = order.slice(0, 16);
    shown.forEach(function (r) {
      if (S.rank != null && r !== S.rank) return;
      h += '<span class="chip" data-r="' + r + '" style="--rc:' + rankColor(r) + '">rank ' + r + (count[r] > 1 ? ' ×' + count[r] : '') + '</span>';
    });
    if (order.length > shown.length) h += '<span class="chip more-chip">+' + (order.length - shown.length) + ' ranks</span>';
    return h + '</div>';
  }

  function spawnHTML(k, prefix) {
    var sp = T.spawns[k], byRank = IX.spawnRanks[k] || [];
    var ws = sp.world_size != null ? sp.world_size : byRank.length;
    var failed = sp.status === 'failed';
    var h = '<section class="spawn' + (failed ? ' failed' : '') + '" data-spawn="' + k + '" aria-label="output of spawn ' + k + '">' +
      '<div class="spawn-h"><span class="spawn-tag">spawn</span> <strong>' + esc(ws) + ' rank' + (ws == 1 ? '' : 's') + '</strong>' +
      (sp.backend ? ' · <span class="backend">' + esc(sp.backend) + '</span>' : '') +
      (sp.seconds != null ? ' · ' + esc(fmtSeconds(sp.seconds)) : '') +
      (sp.status ? ' · <span class="st ' + (failed ? 'bad' : 'ok') + '">' + esc(sp.status) + '</span>' : '') +
      (sp.reason ? '<div class="reason">' + esc(sp.reason) + '</div>' : '') + '</div>';
    var any = false;
    for (var r = 0; r < byRank.length; r++) {
      if (!byRank[r]) continue;
      if (S.rank != null && r !== S.rank) continue;
      any = true;
      h += '<div class="rank-sec" data-rank="' + r + '" style="--rc:' + rankColor(r) + '">' +
        '<div class="rank-label">rank ' + r + '<span class="of"> of ' + esc(ws) + '</span></div>' +
        listHTML((prefix || 'S') + '|' + k + '|' + r, byRank[r], 'rank-item') + '</div>';
    }
    if (!any) h += '<p class="spawn-empty">' + (S.rank != null ? 'Rank ' + S.rank + ' wrote nothing here.' : 'The ranks wrote nothing.') + '</p>';
    return h + '</section>';
  }

  FileView.prototype.draw = function (c) {
    var ch = this.chunks[c];
    if (!ch || ch.drawn) return;
    ch.drawn = true;
    var a = c * CHUNK + 1, b = Math.min(this.lines.length, (c + 1) * CHUNK), h = '';
    for (var ln = a; ln <= b; ln++) h += this.lineHTML(ln);
    ch.el.innerHTML = h;
    ch.el.style.height = '';
    // Drawn chunks off screen skip style, layout and paint.
    ch.el.style.containIntrinsicSize = 'auto ' + ch.guess + 'px';
    ch.el.classList.add('drawn');
    var kids = ch.el.children;
    for (var k = 0; k < kids.length; k++) this.lineEl[a + k] = kids[k];
    hydrate(ch.el);
    this.drawn.push(c);
    if (this.drawn.length > MAX_DRAWN) this.evict();
    // Marks of the current step that fall in the new chunk (unless the chunk
    // is being drawn by applyMarks itself).
    if (S.file === this.path && !marking) applyMarks();
  };

  FileView.prototype.line = function (ln) {
    if (ln < 1 || ln > this.lines.length) return null;
    var c = ((ln - 1) / CHUNK) | 0;
    this.draw(c);
    // Recently used: move to the end of the eviction order.
    var p = this.drawn.lastIndexOf(c);
    if (p >= 0 && p !== this.drawn.length - 1) { this.drawn.splice(p, 1); this.drawn.push(c); }
    return this.lineEl[ln];
  };

  // Long walks through a big trace would otherwise leave every chunk drawn;
  // keep the DOM small by undrawing the least recently used chunks that are
  // not near the visible area and hold no mark of the current step.
  FileView.prototype.evict = function () {
    var keep = {};
    [marked.line, marked.frame].concat(marked.items, marked.onstack).forEach(function (e) {
      var ch = e && e.closest && e.closest('.chunk');
      if (ch) keep[ch.getAttribute('data-chunk')] = true;
    });
    for (var k = 0; k < this.drawn.length && this.drawn.length > MAX_DRAWN; k++) {
      var c = this.drawn[k], ch = this.chunks[c];
      if (ch.near || keep[c]) continue;
      // Back to the guessed height (measuring would force a layout); the
      // chunk is far from the visible area and scroll anchoring keeps the
      // view where it is.
      ch.el.innerHTML = '';
      ch.el.classList.remove('drawn');
      ch.el.style.containIntrinsicSize = '';
      ch.el.style.height = ch.guess + 'px';
      ch.drawn = false;
      for (var ln = c * CHUNK + 1; ln <= Math.min(this.lines.length, (c + 1) * CHUNK); ln++) this.lineEl[ln] = undefined;
      this.drawn.splice(k, 1);
      k--;
    }
  };

  FileView.prototype.redraw = function () {
    this.build();
  };

  function view(path) {
    return views[path] || (views[path] = new FileView(path));
  }

  function showFile(path) {
    if (S.file === path) return view(path);
    var v = view(path), src = $('source');
    if (!v.el.parentNode) src.appendChild(v.el);
    for (var p in views) views[p].el.hidden = p !== path;
    var ph = src.querySelector(':scope > .placeholder');
    if (ph) ph.remove();
    S.file = path;
    var tabs = $('file-tabs').children;
    for (var k = 0; k < tabs.length; k++) {
      var on = tabs[k].getAttribute('data-path') === path;
      tabs[k].setAttribute('aria-selected', on ? 'true' : 'false');
      tabs[k].tabIndex = on ? 0 : -1;
    }
    return v;
  }

  // ------------------------------------------------------------ current step

  function stepTarget(i) {
    var s = T.steps[i], st = s.stack, inner = st[st.length - 1];
    if (s.rank == null) return { path: inner.path, line: inner.line, key: 'L|' + inner.path + '|' + inner.line };
    var D = IX.spawnDepth[i], top = T.spawns[s.spawn].stack[D - 1];
    return {
      path: st.length > D ? inner.path : top.path,
      line: st.length > D ? inner.line : top.line,
      rankLine: st.length > D,
      spawnPath: top.path, spawnLine: top.line,
      key: 'S|' + s.spawn + '|' + s.rank
    };
  }

  function clearMarks() {
    if (marked.line) { marked.line.removeAttribute('aria-current'); marked.line.classList.remove('cur'); }
    marked.items.forEach(function (e) { e.classList.remove('cur-item'); });
    marked.onstack.forEach(function (e) { e.classList.remove('onstack'); });
    if (marked.echo && marked.echo.parentNode) marked.echo.parentNode.removeChild(marked.echo);
    if (marked.frame) marked.frame.classList.remove('frame-sel');
    if (marked.chip) marked.chip.classList.remove('now');
    marked = { line: null, items: [], onstack: [], echo: null, frame: null };
  }

  // Highlight the current step in the file on screen: its line, its item in a
  // list, the call sites of the outer frames, a rank line's echo.
  var marking = false;
  function applyMarks() {
    if (!views[S.file]) return;
    marking = true;
    try { markCurrent(); } finally { marking = false; }
  }

  function markCurrent() {
    var i = S.cur, t = stepTarget(i), s = T.steps[i], v = views[S.file];
    clearMarks();
    var le = t.path === S.file ? v.line(t.line) : null;
    if (le) {
      le.setAttribute('aria-current', 'step');
      le.classList.add('cur');
      marked.line = le;
      if (s.rank == null) {
        listReveal(t.key, i, le);
        var it = le.querySelector('.item[data-step="' + i + '"]');
        if (it) { it.classList.add('cur-item'); marked.items.push(it); }
      } else if (t.rankLine) {
        var chip = le.querySelector('.chips .chip[data-r="' + s.rank + '"]');
        if (chip) { chip.classList.add('now'); marked.chip = chip; }
      }
      if (s.rank != null && t.rankLine && !S.raw) {
        marked.echo = echoEl(i, t);
        le.querySelector('.body').appendChild(marked.echo);
        hydrate(marked.echo);
      }
    }
    // The spawn block of a rank step: reveal and mark its item there too.
    if (s.rank != null && t.spawnPath === S.file && !S.raw) {
      var se = v.line(t.spawnLine);
      if (se) {
        var sec = se.querySelector('.spawn[data-spawn="' + s.spawn + '"]');
        if (sec) {
          listReveal(t.key, i, sec);
          var si = sec.querySelector('.item[data-step="' + i + '"]');
          if (si) { si.classList.add('cur-item'); marked.items.push(si); }
        }
      }
    }
    // Call sites of the outer frames, like a debugger's stack.
    var st = s.stack;
    for (var d = 0; d < st.length - 1; d++) {
      if (st[d].path !== S.file) continue;
      var oe = v.line(st[d].line);
      if (oe && oe !== le) { oe.classList.add('onstack'); marked.onstack.push(oe); }
    }
    if (S.frameSel && S.frameSel.path === S.file) {
      var fe = v.line(S.frameSel.line);
      if (fe) { fe.classList.add('frame-sel'); marked.frame = fe; }
    }
  }

  function echoEl(i, t) {
    var s = T.steps[i], sp = T.spawns[s.spawn];
    var e = document.createElement('div');
    e.className = 'echo';
    e.style.setProperty('--rc', rankColor(s.rank));
    var ws = s.world_size != null ? s.world_size : sp.world_size;
    e.innerHTML = '<div class="echo-h"><span class="chip" style="--rc:' + rankColor(s.rank) + '">rank ' + s.rank +
      (ws != null ? ' of ' + esc(ws) : '') + '</span> ' +
      '<button type="button" class="to-spawn" data-path="' + esc(t.spawnPath) + '" data-line="' + t.spawnLine + '">' +
      'from spawn() at ' + esc(basename(t.spawnPath)) + ':' + t.spawnLine + ' ↑</button></div>' + itemHTML(i, 'rank-item cur-item');
    return e;
  }

  function inView(el, box) {
    var r = el.getBoundingClientRect(), b = box.getBoundingClientRect();
    return r.top >= b.top + 8 && r.bottom <= b.bottom - 8;
  }

  function scrollToCurrent() {
    var target = marked.items[0] && marked.line && marked.line.contains(marked.items[0]) ? marked.items[0] :
      (marked.echo || marked.line || marked.items[0]);
    if (!target) return;
    var box = $('source');
    if (!inView(target, box)) {
      var big = target.getBoundingClientRect().height > box.clientHeight * 0.8;
      target.scrollIntoView({ block: big ? 'start' : 'center' });
    }
  }

  function go(i, opts) {
    if (!T || !T.steps.length) return;
    i = Math.max(0, Math.min(T.steps.length - 1, i | 0));
    opts = opts || {};
    S.cur = i;
    S.frameSel = null;
    if (S.mode === 'read') { readMark(true); syncUI(); return; }
    var t = stepTarget(i);
    showFile(t.path);
    applyMarks();
    if (!opts.noScroll) scrollToCurrent();
    syncUI();
  }

  // ------------------------------------------------------------- navigation

  function nextWhere(from, dir, ok) {
    for (var i = from + dir; i >= 0 && i < T.steps.length; i += dir) if (visible(i) && ok(i)) return i;
    return -1;
  }

  // With every rank shown the precomputed links answer at once; with a rank
  // filter, walk the steps.
  function byDepth(link, dir, ok) {
    if (S.rank == null) return IX[link][S.cur];
    var d = IX.depth[S.cur];
    return nextWhere(S.cur, dir, function (i) { return ok(IX.depth[i], d); });
  }
  function le(a, b) { return a <= b; }
  function lt(a, b) { return a < b; }

  var nav = {
    next: function () { return nextWhere(S.cur, 1, function () { return true; }); },
    prev: function () { return nextWhere(S.cur, -1, function () { return true; }); },
    over: function () { return byDepth('nextLE', 1, le); },
    backOver: function () { return byDepth('prevLE', -1, le); },
    out: function () { return byDepth('nextLT', 1, lt); },
    backOut: function () { return byDepth('prevLT', -1, lt); },
    first: function () { return visible(0) ? 0 : nextWhere(0, 1, function () { return true; }); },
    last: function () { var n = T.steps.length - 1; return visible(n) ? n : nextWhere(n, -1, function () { return true; }); }
  };

  var NAV_WORDS = { next: 'no next step', prev: 'this is the first step', over: 'no later step at this depth',
    backOver: 'no earlier step at this depth', out: 'the lecture ends in this function', backOut: 'no earlier step outside this function' };

  function move(kind) {
    var i = nav[kind]();
    if (i < 0) { say(NAV_WORDS[kind] || 'nowhere to go'); return; }
    go(i);
  }

  // Click on a line: its next note (or rank step, or first step that passes
  // through it as a call site).
  function goLine(path, ln) {
    var v = view(path), cands = v.own.get(ln) || v.rankAt.get(ln);
    if (cands) {
      var vis = cands.filter(visible);
      if (!vis.length) return say('no step of rank ' + S.rank + ' at this line');
      // At this line already: its next step (wrapping); else its first.
      var at = vis.indexOf(S.cur);
      return go(at >= 0 ? vis[(at + 1) % vis.length] : vis[0]);
    }
    if (v.any.has(ln)) {
      var j = v.any.get(ln);
      if (!visible(j)) j = nextWhere(j, 1, function (i) {
        return T.steps[i].stack.some(function (f) { return f.path === path && f.line === ln; });
      });
      if (j >= 0) go(j);
    }
  }

  // Show a frame of the call stack without moving the step.
  function showFrame(path, ln) {
    var v = showFile(path);
    S.frameSel = { path: path, line: ln };
    applyMarks();
    var el = v.line(ln);
    if (!el) return;
    var sp = el.querySelector('.spawn .cur-item');
    var target = sp || el;
    if (!inView(target, $('source'))) target.scrollIntoView({ block: 'center' });
  }

  // ------------------------------------------------------- panels and status

  var urlTimer = 0;
  function syncUI() {
    var i = S.cur, s = T.steps[i], n = T.steps.length;
    $('pos').textContent = 'step ' + (i + 1) + ' / ' + n;
    var sc = $('scrub');
    sc.value = i + 1;
    sc.setAttribute('aria-valuetext', 'step ' + (i + 1) + ' of ' + n);
    sc.style.setProperty('--p', (n > 1 ? (i / (n - 1)) * 100 : 100) + '%');
    $('time').textContent = typeof s.time === 'number' ? 't = ' + fmtSeconds(s.time) : '';
    drawStack();
    drawRankInfo();
    $('btn-prev').disabled = $('btn-first').disabled = nav.prev() < 0;
    $('btn-next').disabled = $('btn-last').disabled = nav.next() < 0;
    $('btn-over').disabled = nav.over() < 0;
    $('btn-out').disabled = nav.out() < 0;
    var f = s.stack[s.stack.length - 1];
    say('Step ' + (i + 1) + ' of ' + n + (s.rank != null ? ', rank ' + s.rank : '') + ', ' + basename(f.path) +
      ' line ' + f.line + (f.function ? ', in ' + f.function : ''));
    clearTimeout(urlTimer);
    urlTimer = setTimeout(writeUrl, 60);
  }

  var sayTimer = 0;
  function say(msg) {
    clearTimeout(sayTimer);
    sayTimer = setTimeout(function () { $('live').textContent = msg; }, 150);
  }

  function writeUrl() {
    var p = new URLSearchParams(location.search);
    p.set('step', S.cur + 1);
    if (S.rank != null) p.set('rank', S.rank); else p.delete('rank');
    if (S.mode === 'read') p.set('mode', 'read'); else p.delete('mode');
    if (S.raw) p.set('code', 'raw'); else p.delete('code');
    var q = '?' + p.toString().replace(/%2F/g, '/');
    if (q !== location.search) {
      try { history.replaceState(null, '', q + location.hash); } catch (e) { /* some file:// setups refuse */ }
    }
  }

  function drawStack() {
    var s = T.steps[S.cur], st = s.stack, D = s.rank != null ? IX.spawnDepth[S.cur] : 0, h = '';
    for (var d = st.length - 1; d >= 0; d--) {
      var f = st[d], isRank = s.rank != null && d >= D;
      h += '<li class="frame-li' + (d === st.length - 1 ? ' inner' : '') + (isRank ? ' in-rank' : '') + '"' +
        (isRank ? ' style="--rc:' + rankColor(s.rank) + '"' : '') + '>' +
        '<button type="button" class="frame" data-path="' + esc(f.path) + '" data-line="' + f.line + '" title="' +
        esc(loc(f)) + '"><span class="fn">' + esc(f.function || '?') + '</span> <span class="where">' +
        esc(basename(f.path)) + ':' + f.line + '</span></button></li>';
      if (s.rank != null && d === D) {
        var sp = T.spawns[s.spawn];
        h += '<li class="spawn-sep" style="--rc:' + rankColor(s.rank) + '"><span class="chip" style="--rc:' +
          rankColor(s.rank) + '">rank ' + s.rank + '</span> spawned · ' +
          esc(s.world_size != null ? s.world_size : sp.world_size) + ' ranks' + (sp.backend ? ' · ' + esc(sp.backend) : '') + '</li>';
      }
    }
    $('stack').innerHTML = h;
  }

  function drawRankInfo() {
    if (!T.spawns.length) return;
    var s = T.steps[S.cur], h = '';
    var curSpawn = s.rank != null ? s.spawn : -1;
    h += '<ul class="spawn-list">';
    T.spawns.forEach(function (sp, k) {
      var top = sp.stack[sp.stack.length - 1];
      var ws = sp.world_size != null ? sp.world_size : (IX.spawnRanks[k] || []).length;
      h += '<li class="' + (k === curSpawn ? 'cur' : '') + '"><button type="button" class="frame" data-path="' + esc(top.path) +
        '" data-line="' + top.line + '"><span class="fn">' + esc(top.function || 'spawn') + '</span> <span class="where">' +
        esc(basename(top.path)) + ':' + top.line + '</span></button><div class="sp-facts">world size <b>' + esc(ws) +
        '</b> · backend <b>' + esc(sp.backend || (T.meta && T.meta.backend) || '?') + '</b>' +
        (sp.status ? ' · ' + esc(sp.status) : '') + '</div></li>';
    });
    h += '</ul><div class="legend">';
    IX.ranks.forEach(function (r) {
      h += '<button type="button" class="chip' + (S.rank === r ? ' on' : '') + '" data-rank="' + r + '" style="--rc:' +
        rankColor(r) + '" aria-pressed="' + (S.rank === r) + '" title="show only rank ' + r + '">rank ' + r + '</button>';
    });
    h += '</div>';
    $('rank-info').innerHTML = h;
  }

  function setRank(r) {
    if (r != null && IX.ranks.indexOf(r) < 0) return say('there is no rank ' + r);
    S.rank = r;
    $('rank-filter').value = r == null ? '' : String(r);
    document.body.classList.toggle('rank-filtered', r != null);
    // Spawn blocks and chips depend on the filter: draw the sources again.
    redrawAll();
    if (!visible(S.cur)) {
      var j = nextWhere(S.cur, 1, function () { return true; });
      if (j < 0) j = nextWhere(S.cur, -1, function () { return true; });
      if (j >= 0) S.cur = j;
    }
    if (S.mode === 'read') buildRead();
    go(S.cur);
    say(r == null ? 'showing all ranks' : 'showing rank ' + r + ' only');
  }

  function setRaw(on) {
    S.raw = on;
    $('btn-raw').setAttribute('aria-pressed', on ? 'true' : 'false');
    document.body.classList.toggle('raw', on);
    redrawAll();
    go(S.cur);
  }

  function redrawAll() {
    lists = {};
    clearMarks();
    for (var p in views) views[p].redraw();
  }

  function setMode(m) {
    S.mode = m;
    $('btn-mode-step').setAttribute('aria-pressed', m === 'step' ? 'true' : 'false');
    $('btn-mode-read').setAttribute('aria-pressed', m === 'read' ? 'true' : 'false');
    document.body.classList.toggle('mode-read', m === 'read');
    $('main').hidden = m === 'read';
    $('read').hidden = m !== 'read';
    if (m === 'read') { buildRead(); readMark(true); syncUI(); } else go(S.cur);
    clearTimeout(urlTimer);
    urlTimer = setTimeout(writeUrl, 60);
  }

  // ------------------------------------------------------------- read view

  // The lecture as one document: every rendering in order. The output of a
  // spawn is gathered, rank by rank, where its first step comes.
  var R = { order: null, done: 0, observer: null };

  function readOrder() {
    var out = [], seen = {};
    for (var i = 0; i < T.steps.length; i++) {
      var s = T.steps[i];
      if (s.rank == null) { out.push(i); continue; }
      if (seen[s.spawn]) continue;
      seen[s.spawn] = true;
      out.push(-1 - s.spawn);
    }
    return out;
  }

  function buildRead() {
    var box = $('read');
    if (R.observer) R.observer.disconnect();
    R.order = readOrder();
    R.done = 0;
    var m = T.meta || {};
    box.innerHTML = '<article class="doc"><header class="doc-h"><h1>' + esc(T.lecture || S.name) + '</h1><p class="meta">' +
      esc(metaLine()) + '</p></header><div class="doc-body"></div><div class="read-more" aria-hidden="true"></div></article>';
    R.observer = new IntersectionObserver(function (es) {
      if (es.some(function (e) { return e.isIntersecting; })) readAppend(READ_BATCH);
    }, { root: box, rootMargin: '1500px 0px' });
    R.observer.observe(box.querySelector('.read-more'));
    readAppend(READ_BATCH);
    void m;
  }

  function readAppend(n) {
    var body = $('read').querySelector('.doc-body');
    if (!body || R.done >= R.order.length) return;
    var h = '', end = Math.min(R.order.length, R.done + n);
    for (var k = R.done; k < end; k++) {
      var x = R.order[k];
      if (x >= 0) {
        if (!visible(x)) continue;
        var f = T.steps[x].stack[T.steps[x].stack.length - 1];
        h += '<div class="entry" data-step="' + x + '"><button type="button" class="to-step" data-step="' + x +
          '" title="open this step beside the code">' + esc(basename(f.path)) + ':' + f.line + '</button>' +
          itemHTML(x, '') + '</div>';
      } else {
        var sp = -1 - x;
        h += '<div class="entry spawn-entry">' + spawnReadHTML(sp) + '</div>';
      }
    }
    R.done = end;
    var tmp = document.createElement('div');
    tmp.innerHTML = h;
    hydrate(tmp);
    while (tmp.firstChild) body.appendChild(tmp.firstChild);
    if (R.done >= R.order.length) { var more = $('read').querySelector('.read-more'); if (more) more.remove(); }
  }

  function spawnReadHTML(k) {
    // Longer lists in the read view: it is meant to be read and printed.
    var byRank = IX.spawnRanks[k] || [];
    for (var r = 0; r < byRank.length; r++) {
      if (byRank[r] && !lists['R|' + k + '|' + r])
        lists['R|' + k + '|' + r] = { items: byRank[r], lo: 0, hi: Math.min(byRank[r].length, 2000) };
    }
    var h = spawnHTML(k, 'R');
    var top = T.spawns[k].stack[T.spawns[k].stack.length - 1];
    return '<div class="spawn-from">output of <code>spawn()</code> at ' + esc(loc(top)) + '</div>' + h;
  }

  function readMark(scroll) {
    var box = $('read');
    var old = box.querySelectorAll('.cur-item');
    for (var k = 0; k < old.length; k++) old[k].classList.remove('cur-item');
    // Append until the current step is in the document.
    var s = T.steps[S.cur], want = s.rank == null ? S.cur : -1 - s.spawn;
    var pos = R.order.indexOf(want);
    while (pos >= R.done && R.done < R.order.length) readAppend(READ_BATCH);
    var el = box.querySelector('.item[data-step="' + S.cur + '"]');
    if (el) {
      el.classList.add('cur-item');
      if (scroll && !inView(el, box)) el.scrollIntoView({ block: 'center' });
    }
  }

  function readAll() { if (R.order) while (R.done < R.order.length && R.done < 20000) readAppend(2000); }

  // --------------------------------------------------------------- header

  function metaLine() {
    var m = T.meta || {}, bits = [];
    if (m.backend) bits.push('backend ' + m.backend);
    if (m.gpus != null) bits.push(m.gpus + ' GPU' + (m.gpus === 1 ? '' : 's') +
      (m.gpu_names && m.gpu_names.length ? ' (' + uniq(m.gpu_names).join(', ') + ')' : ''));
    if (m.host) bits.push(m.host);
    if (m.start_time) bits.push(String(m.start_time).replace('T', ' ').replace(/\.\d+/, '').replace('Z', ' UTC'));
    if (m.duration_s != null) bits.push(fmtSeconds(m.duration_s));
    bits.push(T.steps.length + ' steps');
    return bits.join(' · ');
  }

  function uniq(a) { return a.filter(function (x, k) { return a.indexOf(x) === k; }); }

  function drawHeader() {
    var m = T.meta || {};
    var name = T.lecture || S.name;
    $('title').textContent = name;
    document.title = name + ' · lectern';
    var b = $('status-badge');
    var failed = m.status === 'failed';
    if (m.status) {
      b.hidden = false;
      b.textContent = failed ? 'failed' : m.status;
      b.className = 'badge ' + (failed ? 'bad' : 'ok');
    }
    $('meta').textContent = metaLine();
    var dl = '';
    function row(k, v) { if (v != null && v !== '') dl += '<dt>' + esc(k) + '</dt><dd>' + esc(v) + '</dd>'; }
    row('status', m.status);
    row('backend', m.backend);
    row('GPUs', m.gpus != null ? m.gpus + (m.gpu_names && m.gpu_names.length ? ' · ' + uniq(m.gpu_names).join(', ') : '') : null);
    row('host', m.host);
    row('started', m.start_time);
    row('duration', m.duration_s != null ? fmtSeconds(m.duration_s) : null);
    row('command', m.command);
    row('trace', (S.via === 'json' ? '.json' : '.js') + ', ' + T.steps.length + ' steps, ' + Object.keys(T.files).length + ' file' +
      (Object.keys(T.files).length === 1 ? '' : 's'));
    $('run-info').innerHTML = dl;
    // A failed run says so at the top, with a way to its first error.
    if (failed || IX.errors.length) {
      var ban = $('banner'), e = IX.errors[0];
      ban.hidden = false;
      ban.className = 'banner bad';
      ban.innerHTML = (failed ? '<strong>This run failed.</strong> ' : '') + (IX.errors.length ? IX.errors.length + ' error step' +
        (IX.errors.length > 1 ? 's' : '') + '. <button type="button" class="to-step" data-step="' + e + '">First: ' +
        esc(whereText(e)) + '</button>' : 'The trace holds the steps up to the failure.');
    }
    // File tabs.
    var tabs = '';
    IX.files.forEach(function (p) {
      tabs += '<button type="button" role="tab" class="tab" aria-selected="false" tabindex="-1" data-path="' + esc(p) + '" title="' +
        esc(p) + '">' + esc(basename(p)) + '</button>';
    });
    $('file-tabs').innerHTML = tabs;
    $('file-tabs').hidden = IX.files.length < 2;
    // Rank filter.
    if (T.spawns.length) {
      $('rank-filter-wrap').hidden = false;
      $('rank-panel').hidden = false;
      var sel = $('rank-filter');
      IX.ranks.forEach(function (r) {
        var o = document.createElement('option');
        o.value = String(r);
        o.textContent = 'rank ' + r;
        sel.appendChild(o);
      });
    }
    var sc = $('scrub');
    sc.max = T.steps.length;
  }

  // ------------------------------------------------------------------ input

  function onKey(e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    var tag = e.target && e.target.tagName;
    if (tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA') {
      if (!(tag === 'INPUT' && e.target.type === 'range' && /^[a-z?]$/i.test(e.key))) return;
    }
    if ($('help').open) return;
    if (!T || !T.steps.length) return;
    var k = e.key, did = true;
    if (k === 'ArrowRight' && e.shiftKey) move('over');
    else if (k === 'ArrowLeft' && e.shiftKey) move('backOver');
    else if (k === 'ArrowRight' || k === 'l') move('next');
    else if (k === 'ArrowLeft' || k === 'h') move('prev');
    else if (k === 'j') move('over');
    else if (k === 'k') move('backOver');
    else if (k === 'u') move('out');
    else if (k === 'U') move('backOut');
    else if (k === 'Home') go(nav.first());
    else if (k === 'End') go(nav.last());
    else if (k === 'c') setRaw(!S.raw);
    else if (k === 'm') setMode(S.mode === 'read' ? 'step' : 'read');
    else if (k === '?') openHelp();
    else if (k === 'a' && S.rank != null) setRank(null);
    else if (/^[0-9]$/.test(k) && T.spawns.length) setRank(+k);
    else did = false;
    if (did) e.preventDefault();
  }

  function openHelp() {
    var d = $('help');
    if (d.showModal) d.showModal(); else d.setAttribute('open', '');
    $('help-close').focus();
  }

  function onClick(e) {
    var t = e.target;
    if (!t.closest) return;
    var b = t.closest('button');
    if (b) {
      if (b.classList.contains('more')) {
        var key = b.getAttribute('data-list'), L = lists[key], listEl = b.closest('.list');
        if (!L || !listEl) return;
        if (b.getAttribute('data-dir') === 'up') L.lo = Math.max(0, L.lo - LIST_MORE);
        else L.hi = Math.min(L.items.length, L.hi + LIST_MORE);
        redrawList(key, listEl.parentNode);
        applyMarks();
        return;
      }
      if (b.classList.contains('load-img')) {
        var img = document.createElement('img');
        img.src = b.getAttribute('data-src');
        img.alt = b.getAttribute('data-alt');
        img.style.width = b.getAttribute('data-width');
        b.parentNode.appendChild(img);
        b.remove();
        return;
      }
      if (b.classList.contains('frame') || b.classList.contains('to-spawn')) {
        if (S.mode === 'read') setMode('step');
        return showFrame(b.getAttribute('data-path'), +b.getAttribute('data-line'));
      }
      if (b.classList.contains('to-step')) {
        if (S.mode === 'read') setMode('step');
        return go(+b.getAttribute('data-step'));
      }
      if (b.classList.contains('tab')) return showFrame(b.getAttribute('data-path'), 1);
      if (b.hasAttribute('data-rank') && b.classList.contains('chip')) {
        var r = +b.getAttribute('data-rank');
        return setRank(S.rank === r ? null : r);
      }
      return;
    }
    if (t.closest('a')) return;
    if (S.mode !== 'step') return;
    var sel = window.getSelection && String(window.getSelection());
    if (sel) return;
    var item = t.closest('.item[data-step]');
    if (item && $('source').contains(item)) return go(+item.getAttribute('data-step'));
    var ln = t.closest('.ln');
    if (ln && ln.classList.contains('hit')) {
      var f = ln.closest('.file');
      goLine(f.getAttribute('data-path'), +ln.getAttribute('data-line'));
    }
  }

  function bind() {
    document.addEventListener('keydown', onKey);
    document.addEventListener('click', onClick);
    // Images that cannot be found say so instead of showing a broken icon.
    document.addEventListener('error', function (e) {
      var img = e.target;
      if (img && img.tagName === 'IMG' && img.closest('.r-img') && !img.getAttribute('data-broken')) {
        img.setAttribute('data-broken', '');
        var p = document.createElement('p');
        p.className = 'img-missing';
        p.textContent = 'image not found: ' + (img.getAttribute('data-path') || img.src);
        img.parentNode.appendChild(p);
        img.hidden = true;
      }
    }, true);
    $('btn-first').onclick = function () { go(nav.first()); };
    $('btn-last').onclick = function () { go(nav.last()); };
    $('btn-prev').onclick = function () { move('prev'); };
    $('btn-next').onclick = function () { move('next'); };
    $('btn-over').onclick = function () { move('over'); };
    $('btn-out').onclick = function () { move('out'); };
    $('btn-raw').onclick = function () { setRaw(!S.raw); };
    $('btn-help').onclick = openHelp;
    $('btn-mode-step').onclick = function () { if (S.mode !== 'step') setMode('step'); };
    $('btn-mode-read').onclick = function () { if (S.mode !== 'read') setMode('read'); };
    $('scrub').addEventListener('input', function () { go(+this.value - 1); });
    $('rank-filter').addEventListener('change', function () { setRank(this.value === '' ? null : +this.value); });
    $('file-tabs').addEventListener('keydown', function (e) {
      if (e.key !== 'ArrowRight' && e.key !== 'ArrowLeft') return;
      var tabs = Array.prototype.slice.call(this.children), k = tabs.indexOf(document.activeElement);
      if (k < 0) return;
      e.stopPropagation();
      e.preventDefault();
      var nk = (k + (e.key === 'ArrowRight' ? 1 : -1) + tabs.length) % tabs.length;
      tabs[nk].focus();
      showFrame(tabs[nk].getAttribute('data-path'), 1);
    });
    window.addEventListener('beforeprint', function () { if (S.mode === 'read') readAll(); });
  }

  // ------------------------------------------------------------------- start

  function start() {
    var t0 = performance.now();
    bind();
    var p = params();
    if (!p.trace) {
      return fail(null, 'No trace named in the address.', ['Open this page as viewer/index.html?trace=lecture_08 ' +
        '(the name of a file in traces/, without .js), or ?trace=path/to/trace.js.']);
    }
    loadTrace(p.trace, function (trace, file, problem) {
      var t1 = performance.now();
      api.timings.load_ms = t1 - t0;
      if (!trace) return fail(file, problem);
      var errs;
      try { errs = validate(trace); } catch (e) { errs = ['validation failed: ' + e.message]; }
      if (errs.length) return fail(file, 'The file is not a lectern trace the viewer can read:', errs);
      if (!trace.steps.length) return fail(file, 'The trace holds no steps' +
        (trace.meta && trace.meta.status === 'failed' ? ' (the run failed before its first note).' : '.'));
      try {
        T = trace;
        IX = buildIndex(T);
        api.timings.index_ms = performance.now() - t1;
        api.via = S.via;
        document.body.classList.remove('loading');
        drawHeader();
        var rk = p.rank != null && p.rank !== '' ? +p.rank : null;
        if (rk != null && IX.ranks.indexOf(rk) >= 0) { S.rank = rk; $('rank-filter').value = String(rk); document.body.classList.add('rank-filtered'); }
        if (p.code === 'raw') { S.raw = true; $('btn-raw').setAttribute('aria-pressed', 'true'); document.body.classList.add('raw'); }
        var st = parseInt(p.step, 10);
        S.cur = isFinite(st) ? Math.max(0, Math.min(T.steps.length - 1, st - 1)) : 0;
        if (!visible(S.cur)) S.cur = Math.max(0, nextWhere(S.cur, 1, function () { return true; }));
        if (p.mode === 'read') setMode('read'); else go(S.cur);
        api.timings.ready_ms = performance.now();
        api.ready = true;
        if (performance.mark) performance.mark('lectern-ready');
      } catch (e) {
        fail(file, 'The viewer could not show this trace: ' + e.message, e.stack ? [String(e.stack).split('\n')[1] || ''] : []);
        if (window.console) console.error(e);
      }
    });
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
