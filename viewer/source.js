/* lectern viewer, source: the lecture's files drawn as lines.
 *
 * A line that made notes shows them in place of its code, and a note
 * written over several lines replaces its whole statement (model.js finds
 * where it ends). A spawn() line keeps its code; under it, one block per
 * spawn it made, ranks side by side (ranks.js). A line of rank code shows
 * which ranks ran it, spawn by spawn.
 *
 * Files can be long and traces large: lines are drawn in chunks of CHUNK as
 * they come near the visible area, and a line that made many notes shows a
 * window of them around the current one.
 */
(function () {
  'use strict';

  var L = window.lectern, S = L.S, esc = L.esc, $ = L.$;

  var CHUNK = 20;                 // source lines drawn at a time
  var MAX_DRAWN = 30;             // chunks kept drawn per file; the oldest unseen go back to placeholders
  var LIST_CAP = 8;               // notes shown per line before "show more"
  var LIST_MORE = 50;             // how many more a "show more" click adds
  var LINE_PX = 21, ITEM_PX = 46, ROW_PX = 44; // height guesses for chunks not drawn yet
  L.LIST_MORE = LIST_MORE;

  L.views = Object.create(null);  // path -> FileView
  L.lists = Object.create(null);  // list key -> {items, lo, hi}

  // ---------------------------------------------------- windows of notes

  // A list is the steps shown at one place (a line's notes). Only a window
  // [lo, hi) of those shown (rank filter, "as it happened") is in the page.
  function shownOf(items) {
    if (S.rank == null && !S.live) return items;
    return items.filter(L.shown);
  }

  function list(key, items) {
    var l = L.lists[key];
    if (!l) l = L.lists[key] = { items: items, lo: 0, hi: LIST_CAP };
    return l;
  }

  L.listHTML = function (key, items, cls) {
    var l = list(key, items), vis = shownOf(items), n = vis.length;
    l.hi = Math.min(Math.max(l.hi, l.lo + 1), n);
    l.lo = Math.max(0, Math.min(l.lo, n - 1));
    var h = '<div class="list" data-list="' + esc(key) + '">';
    if (l.lo > 0) h += '<button type="button" class="more" data-list="' + esc(key) + '" data-dir="up">show ' +
      Math.min(l.lo, LIST_MORE) + ' earlier (' + l.lo + ' hidden)</button>';
    for (var k = l.lo; k < l.hi; k++) h += L.itemHTML(vis[k], cls);
    if (l.hi < n) h += '<button type="button" class="more" data-list="' + esc(key) + '" data-dir="down">show ' +
      Math.min(n - l.hi, LIST_MORE) + ' more (' + (n - l.hi) + ' hidden)</button>';
    return h + '</div>';
  };

  // Make sure step i is inside the window of list key; redraw it if needed.
  function listReveal(key, i, container) {
    var l = L.lists[key];
    if (!l) return;
    var vis = shownOf(l.items), p = L.lowerBound(vis, i);
    if (p >= l.lo && p < l.hi) return;
    l.lo = Math.max(0, p - (LIST_CAP >> 1));
    l.hi = Math.min(vis.length, l.lo + LIST_CAP);
    L.redrawList(key, container);
  }

  L.moreList = function (key, up, listEl) {
    var l = L.lists[key];
    if (!l || !listEl) return;
    if (up) l.lo = Math.max(0, l.lo - LIST_MORE); else l.hi = l.hi + LIST_MORE;
    L.redrawList(key, listEl.parentNode);
  };

  L.redrawList = function (key, container) {
    var el = container && container.querySelector('.list[data-list="' + L.cssEsc(key) + '"]');
    if (!el) return;
    var tmp = document.createElement('div');
    tmp.innerHTML = L.listHTML(key, L.lists[key].items, '');
    var fresh = tmp.firstChild;
    el.parentNode.replaceChild(fresh, el);
    L.hydrate(fresh);
  };

  // ------------------------------------------------------- syntax colours

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

  // ------------------------------------------------------------- a file

  function FileView(path) {
    var IX = L.IX;
    this.path = path;
    var text = L.T.files[path];
    this.missing = typeof text !== 'string';
    if (this.missing) text = '';
    var lines = text.split('\n');
    if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
    this.lines = lines;
    this.hl = null;
    this.own = IX.own[path] || new Map();
    this.rankAt = IX.rankAt[path] || new Map();
    this.spawnAt = IX.spawnAt[path] || new Map();
    this.any = IX.any[path] || new Map();
    // Continuation lines of multi-line notes: line -> the line the note starts on.
    this.headOf = new Int32Array(lines.length + 2);
    var self = this;
    this.own.forEach(function (steps, ln) {
      if (self.spawnAt.has(ln)) return;
      var end = L.stmtEnd(path, ln);
      for (var k = ln + 1; k <= end && k <= lines.length; k++) {
        if (self.own.has(k) || self.rankAt.has(k) || self.spawnAt.has(k)) break;
        self.headOf[k] = ln;
      }
    });
    // A chunk drawn alone (it holds a mark of the current step) must not put
    // a note's heading in the page without the heading it sits under: a
    // skipped level reads, to a screen reader navigating by headings, as a
    // missing section. Drawing a chunk draws first the chunks holding the
    // parents of its headings (the nearest heading above of a lower level).
    this.parentChunks = {};
    var hs = [], last = [];
    IX.headings.forEach(function (h) {
      var st = L.T.steps[h.step].stack, f = st[st.length - 1];
      if (f.path === path) hs.push({ line: f.line, level: h.level, step: h.step });
    });
    hs.sort(function (a, b) { return a.line - b.line || a.step - b.step; });
    // A file's notes may start below a heading of another file (an included
    // section's "###" under the lecture's "##"). Shown alone, after the
    // page's h1, its top heading would skip a level: this file's headings
    // are read one level up per level skipped (aria-level), as the page
    // shows them. Read mode, where the other file's heading precedes, keeps
    // the notes' own levels.
    var top = 7;
    this.headSteps = Object.create(null);
    hs.forEach(function (h) { self.headSteps[h.step] = true; });
    hs.forEach(function (h) {
      var p = null;
      for (var q = 1; q < h.level; q++) if (last[q] && (!p || last[q].line > p.line)) p = last[q];
      if (!p && h.level < top) top = h.level;
      last[h.level] = h;
      last.length = h.level + 1;
      var c = ((h.line - 1) / CHUNK) | 0, pc = p ? ((p.line - 1) / CHUNK) | 0 : c, list = self.parentChunks[c];
      if (pc !== c && (!list || list.indexOf(pc) < 0)) (self.parentChunks[c] = list || []).push(pc);
    });
    this.headShift = top < 7 ? Math.max(0, top - 2) : 0;
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
      if (!S.raw && this.headOf[ln]) continue;
      h += o && !this.spawnAt.has(ln) ? Math.min(o.length, LIST_CAP) * ITEM_PX : LINE_PX;
      var sp = !S.raw && this.spawnAt.get(ln);
      if (sp) for (var k = 0; k < sp.length; k++) h += 60 + Math.min(40, L.IX.spawnSteps[sp[k]].length) * ROW_PX / 2;
    }
    return h;
  };

  FileView.prototype.codeHTML = function (ln) {
    if (this.hl === null) this.hl = highlightLines(this.lines.join('\n')) || false;
    var src = this.hl ? this.hl[ln - 1] : esc(this.lines[ln - 1]);
    return '<code class="code">' + (src === '' ? ' ' : src) + '</code>';
  };

  // Whether line ln shows notes now (not in raw mode, some of them shown).
  FileView.prototype.showsNotes = function (ln) {
    var own = this.own.get(ln);
    if (!own || S.raw) return false;
    if (S.rank == null && !S.live) return true;
    for (var k = 0; k < own.length; k++) if (L.shown(own[k])) return true;
    return false;
  };

  FileView.prototype.lineHTML = function (ln) {
    var head = this.headOf[ln];
    if (head && this.showsNotes(head)) {
      // Part of a note's statement, shown above as the note.
      return '<div class="ln cont" data-line="' + ln + '" hidden></div>';
    }
    var own = this.own.get(ln), ranks = this.rankAt.get(ln), spawns = this.spawnAt.get(ln);
    var cls = 'ln', body = '', marks = '', gut = '<span class="no">' + ln + '</span>';
    if (own || ranks || this.any.has(ln)) cls += ' hit';
    var notes = this.showsNotes(ln);
    if (spawns && !S.raw) {
      // The spawn() call stays in view; its notes (an error, say) under it,
      // then one block per spawn it made.
      cls += ' spawnline';
      body += this.codeHTML(ln);
      if (notes) body += L.listHTML('L|' + this.path + '|' + ln, own, '');
      for (var k = 0; k < spawns.length; k++) body += L.spawnHTML(spawns[k], 'S');
    } else if (notes) {
      cls += ' notes';
      body += L.listHTML('L|' + this.path + '|' + ln, own, '');
      var end = L.stmtEnd(this.path, ln);
      if (end > ln && this.headOf[ln + 1] === ln) gut += '<span class="to">–' + Math.min(end, this.lines.length) + '</span>';
    } else {
      body += this.codeHTML(ln);
      if (own) marks += '<span class="mark-notes" title="' + own.length + ' note' + (own.length > 1 ? 's' : '') + '">●</span>';
      if (spawns) marks += '<span class="mark-spawn" title="spawn">⑂</span>';
    }
    if (ranks && !S.raw) {
      cls += ' rankline';
      body += L.rankChips(ranks);
    }
    return '<div class="' + cls + '" data-line="' + ln + '"><div class="gut">' + gut + marks + '</div><div class="body">' +
      body + '</div></div>';
  };

  FileView.prototype.draw = function (c) {
    var ch = this.chunks[c];
    if (!ch || ch.drawn) return;
    ch.drawn = true;
    var parents = this.parentChunks[c];
    if (parents) for (var q = 0; q < parents.length; q++) this.draw(parents[q]);
    var a = c * CHUNK + 1, b = Math.min(this.lines.length, (c + 1) * CHUNK), h = '';
    for (var ln = a; ln <= b; ln++) h += this.lineHTML(ln);
    ch.el.innerHTML = h;
    ch.el.style.height = '';
    // Drawn chunks off screen skip style, layout and paint.
    ch.el.style.containIntrinsicSize = 'auto ' + ch.guess + 'px';
    ch.el.classList.add('drawn');
    var kids = ch.el.children;
    for (var k = 0; k < kids.length; k++) this.lineEl[a + k] = kids[k];
    this.levelHeadings(ch.el);
    L.hydrate(ch.el);
    this.drawn.push(c);
    if (this.drawn.length > MAX_DRAWN) this.evict();
    // Marks of the current step that fall in the new chunk (unless the chunk
    // is being drawn by the marking itself).
    if (S.file === this.path && !marking) L.applyMarks();
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

  // Draws line ln again (and the lines of its statement) if it is drawn.
  FileView.prototype.redrawLine = function (ln) {
    var last = Math.max(ln, this.own.has(ln) ? L.stmtEnd(this.path, ln) : ln);
    for (var k = ln; k <= last && k <= this.lines.length; k++) {
      var old = this.lineEl[k];
      if (!old || !old.parentNode) continue;
      var tmp = document.createElement('div');
      tmp.innerHTML = this.lineHTML(k);
      var fresh = tmp.firstChild;
      old.parentNode.replaceChild(fresh, old);
      this.lineEl[k] = fresh;
      this.levelHeadings(fresh);
      L.hydrate(fresh);
    }
  };

  // The headings of this file's notes in el, one level up per level the
  // file's top heading skips (headShift, set in the constructor).
  FileView.prototype.levelHeadings = function (el) {
    if (!this.headShift) return;
    var hs = el.querySelectorAll('.item[data-step] > .r-md > h1, .item[data-step] > .r-md > h2, .item[data-step] > .r-md > h3, ' +
      '.item[data-step] > .r-md > h4, .item[data-step] > .r-md > h5, .item[data-step] > .r-md > h6');
    for (var q = 0; q < hs.length; q++) {
      if (!this.headSteps[hs[q].parentNode.parentNode.getAttribute('data-step')]) continue;
      hs[q].setAttribute('aria-level', Math.max(2, +hs[q].tagName.charAt(1) - this.headShift));
    }
  };

  // Long walks through a big trace would otherwise leave every chunk drawn;
  // keep the DOM small by undrawing the least recently used chunks that are
  // not near the visible area and hold no mark of the current step.
  FileView.prototype.evict = function () {
    var keep = {};
    [marked.line, marked.frame, marked.rankLine].concat(marked.items, marked.onstack).forEach(function (e) {
      var ch = e && e.closest && e.closest('.chunk');
      if (ch) keep[ch.getAttribute('data-chunk')] = true;
    });
    // ...nor the chunk of a parent heading of a chunk that stays drawn.
    for (var d = 0; d < this.drawn.length; d++)
      (this.parentChunks[this.drawn[d]] || []).forEach(function (pc) { keep[pc] = true; });
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

  L.view = function (path) {
    return L.views[path] || (L.views[path] = new FileView(path));
  };

  L.showFile = function (path) {
    if (S.file === path) return L.view(path);
    var v = L.view(path), src = $('source');
    if (!v.el.parentNode) src.appendChild(v.el);
    for (var p in L.views) L.views[p].el.hidden = p !== path;
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
  };

  L.redrawAll = function () {
    L.lists = Object.create(null);
    clearMarks();
    for (var p in L.views) L.views[p].build();
  };

  // "As it happened": the steps between the old and the new current step
  // appear or disappear; draw their lines again (or everything, for a jump).
  L.liveRedraw = function (from, to) {
    var lo = Math.min(from, to) + 1, hi = Math.max(from, to), T = L.T, IX = L.IX;
    if (hi - lo > 300) { L.redrawAll(); return; }
    var todo = {};
    function add(path, line) { (todo[path] || (todo[path] = {}))[line] = true; }
    for (var i = lo; i <= hi; i++) {
      var s = T.steps[i], inner = s.stack[s.stack.length - 1];
      if (s.rank == null && IX.noteSpawn[i] < 0) { add(inner.path, inner.line); continue; }
      var k = s.rank == null ? IX.noteSpawn[i] : s.spawn, top = T.spawns[k].stack[T.spawns[k].stack.length - 1];
      add(top.path, top.line);
      if (s.rank != null && s.stack.length > IX.spawnDepth[i]) add(inner.path, inner.line);
    }
    clearMarks();
    Object.keys(todo).forEach(function (path) {
      var v = L.views[path];
      if (v) Object.keys(todo[path]).forEach(function (ln) { v.redrawLine(+ln); });
    });
  };

  // ------------------------------------------------------ the current step

  // Where a step is shown: a lecture note at its line; a spawn's note in its
  // spawn's header and a rank's step in its spawn's grid, both under the
  // spawn() line.
  L.stepTarget = function (i) {
    var T = L.T, IX = L.IX, s = T.steps[i], st = s.stack, inner = st[st.length - 1];
    var k = s.rank != null ? s.spawn : IX.noteSpawn[i];
    if (k < 0 || k == null) return { path: inner.path, line: inner.line, key: 'L|' + inner.path + '|' + inner.line };
    var top = T.spawns[k].stack[T.spawns[k].stack.length - 1];
    var rankCode = s.rank != null && st.length > IX.spawnDepth[i];
    return { path: top.path, line: top.line, spawn: k,
             rankPath: rankCode ? inner.path : null, rankLine: rankCode ? inner.line : 0 };
  };

  var marked = { line: null, items: [], onstack: [], frame: null, rankLine: null, chip: null, sec: null };

  function clearMarks() {
    if (marked.line) { marked.line.removeAttribute('aria-current'); marked.line.classList.remove('cur'); }
    marked.items.forEach(function (e) { e.classList.remove('cur-item'); });
    marked.onstack.forEach(function (e) { e.classList.remove('onstack'); });
    if (marked.frame) marked.frame.classList.remove('frame-sel');
    if (marked.rankLine) { marked.rankLine.classList.remove('rank-here'); marked.rankLine.style.removeProperty('--rc'); }
    if (marked.chip) marked.chip.classList.remove('now');
    if (marked.sec) L.unmarkSpawn(marked.sec);
    marked = { line: null, items: [], onstack: [], frame: null, rankLine: null, chip: null, sec: null };
  }
  L.clearMarks = clearMarks;

  // Highlight the current step in the file on screen: its line, its note or
  // grid cell, the call sites of the outer frames, a rank's line of code.
  var marking = false;
  L.applyMarks = function () {
    if (!L.views[S.file]) return;
    marking = true;
    try { markCurrent(); } finally { marking = false; }
  };

  function markCurrent() {
    var i = S.cur, t = L.stepTarget(i), s = L.T.steps[i], v = L.views[S.file];
    clearMarks();
    var le = t.path === S.file ? v.line(t.line) : null;
    if (le) {
      le.setAttribute('aria-current', 'step');
      le.classList.add('cur');
      marked.line = le;
      if (t.spawn == null) {
        listReveal(t.key, i, le);
        var it = le.querySelector('.item[data-step="' + i + '"]');
        if (it) { it.classList.add('cur-item'); marked.items.push(it); }
      } else {
        var sec = le.querySelector('.spawn[data-spawn="' + t.spawn + '"]');
        if (sec) {
          var cell = L.markSpawn(sec, t.spawn, i);
          marked.sec = sec;
          if (cell) { cell.classList.add('cur-item'); marked.items.push(cell); }
        }
      }
    }
    // A rank's step: its line of rank code, in the rank's colour.
    if (t.rankPath === S.file) {
      var rl = v.line(t.rankLine);
      if (rl && rl !== le) {
        rl.classList.add('rank-here');
        rl.style.setProperty('--rc', L.rankColor(s.rank));
        marked.rankLine = rl;
        var chip = rl.querySelector('.chip[data-spawn="' + s.spawn + '"][data-r="' + s.rank + '"]');
        if (chip) { chip.classList.add('now'); marked.chip = chip; }
      }
    }
    // Call sites of the outer frames, like a debugger's stack.
    var st = s.stack, D = s.rank != null ? L.IX.spawnDepth[i] : 0, upto = s.rank != null ? D - 1 : st.length - 1;
    for (var d = 0; d < upto; d++) {
      if (st[d].path !== S.file) continue;
      var oe = v.line(st[d].line);
      if (oe && oe !== le) { oe.classList.add('onstack'); marked.onstack.push(oe); }
    }
    if (S.frameSel && S.frameSel.path === S.file) {
      var fe = v.line(S.frameSel.line);
      if (fe) { fe.classList.add('frame-sel'); marked.frame = fe; }
    }
  }

  L.marked = function () { return marked; };

  // Keep the current step in the upper third of the source pane: scroll
  // when it is above the top, below the first third or cut off at the
  // bottom, so that it comes to a fifth of the way down (below the sticky
  // header of a spawn grid). A step taller than the pane starts at its top.
  L.scrollToCurrent = function () {
    var target = marked.items[0] || marked.line;
    if (!target) return;
    var box = $('source'), b = box.getBoundingClientRect(), r = target.getBoundingClientRect();
    var H = box.clientHeight, top = r.top - b.top, sticky = 0;
    var head = target.closest('.spawn') && target.closest('.spawn').querySelector('thead');
    if (head) {
      // A spawn's header sticks to the top of the pane while its grid scrolls
      // by. In a narrow pane it wraps (the call, its facts and buttons, the
      // spawn's note), and a header taller than a quarter of the pane would
      // keep every row of the grid out of the pane's upper third: then only
      // the rank labels stick (.tall-head), the rest scrolls away.
      var tall = head.getBoundingClientRect().height > H / 4;
      head.parentNode.classList.toggle('tall-head', tall);
      // What actually sticks over the target, down to its bottom: it sticks
      // below the pane's top padding (top: 0 is the content edge), so it
      // covers that padding plus its own height. Nothing when the target is
      // in the header itself (the spawn's note).
      var stuck = head.contains(target) ? null : tall ? head.querySelector('.sp-cols') : head;
      if (stuck) sticky = (parseFloat(getComputedStyle(box).paddingTop) || 0) + stuck.getBoundingClientRect().height;
      r = target.getBoundingClientRect();   /* the class may have moved it */
      top = r.top - b.top;
    }
    var lo = sticky + 4, hi = H / 3;
    var cut = r.bottom - b.top > H - 8 && r.height < H * 0.6;
    if (top >= lo && top <= hi && !cut) return;
    var want = r.height > H * 0.6 ? sticky + 8 : Math.max(H * 0.2, sticky + 12);
    box.scrollTop += top - want;
  };
})();
