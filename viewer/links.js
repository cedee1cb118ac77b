/* lectern viewer, links: who talked to whom (docs/trace-format.md,
 * spawns[i].messages and .collectives).
 *
 * On a rank's step, the "Messages" panel lists the calls that rank made
 * after this step and before its next one: a receive says where its message
 * came from ("from rank 0, line 42"), a send where it went, each a button
 * that goes to the partner's step; a collective says which ranks took part
 * and who arrived last, measured. After such a jump a "back" button (and
 * the key b) returns; f follows the first link. In the spawn's side-by-side
 * columns the partners' steps of the current one are marked with a glyph
 * and an outline, and their cells say so to a screen reader.
 */
(function () {
  'use strict';

  var L = window.lectern, S = L.S, $ = L.$, esc = L.esc;

  var forT = null;   // the trace the index below was made for
  var at = null;     // step index -> [{kind, me, other(s), ...}]
  var back = null;   // {from, to}: the jump to undo with "back"
  var linked = [];   // cells marked as the current step's partners
  // A step followed by a loop of calls (a bucket's all-reduce per
  // parameter) has thousands: the first few are listed and marked, the rest
  // counted (drawing 3,000 took 0.6 s a step in bench/viewer_bench.py).
  var SHOWN = 8;

  // A side [rank, site, step, start, end], spelled out. Its step is the
  // file's index: model.js put some ranks' steps in rank order.
  function side(sp, x) {
    var site = x[1] != null && sp.link_sites ? sp.link_sites[x[1]] : null, fs = L.IX.fileStep;
    var step = x[2] == null ? null : fs && x[2] >= 0 && x[2] < fs.length ? fs[x[2]] : x[2];
    return { rank: x[0], site: site || {}, step: step, start: x[3], end: x[4] };
  }

  function add(i, item) {
    if (i == null) return;
    (at[i] || (at[i] = [])).push(item);
  }

  function index() {
    if (forT === L.T && at) return;
    forT = L.T;
    at = Object.create(null);
    back = null;
    (L.T.spawns || []).forEach(function (sp) {
      (sp.messages || []).forEach(function (m) {
        if (!Array.isArray(m.from) || !Array.isArray(m.to)) return;
        var a = side(sp, m.from), b = side(sp, m.to);
        add(a.step, { kind: 'send', bytes: m.bytes, me: a, other: b });
        add(b.step, { kind: 'recv', bytes: m.bytes, me: b, other: a });
      });
      (sp.collectives || []).forEach(function (c) {
        if (!Array.isArray(c.calls)) return;
        var calls = c.calls.map(function (x) { return side(sp, x); });
        calls.forEach(function (me) { add(me.step, { kind: 'coll', c: c, me: me, calls: calls }); });
      });
    });
  }

  L.linksAt = function (i) { index(); return at[i] || []; };

  function where(x) {
    return 'rank ' + x.rank + (x.site.line ? ', line ' + x.site.line : '');
  }

  function goButton(x, words) {
    if (x.step == null || !L.T.steps[x.step]) return esc(where(x));
    return '<button type="button" class="link-go" data-step="' + x.step + '" aria-label="' + esc(words + ': go to ' +
      where(x) + ', step ' + (x.step + 1)) + '">' + esc(where(x)) + '</button>';
  }

  function ms(s) { return L.fmtSeconds(Math.max(0, s)); }

  function itemHTML(it) {
    var me = it.me, call = me.site.call || '?', line = me.site.line ? ' (line ' + me.site.line + ')' : '';
    if (it.kind === 'send')
      return '<li><code>' + esc(call) + '</code>' + esc(line) + ' of ' + esc(it.bytes) + ' bytes to ' +
        goButton(it.other, 'received there') + '</li>';
    if (it.kind === 'recv')
      return '<li><code>' + esc(call) + '</code>' + esc(line) + ' of ' + esc(it.bytes) + ' bytes from ' +
        goButton(it.other, 'sent there') + '</li>';
    var c = it.c, first = Infinity, last = null;
    it.calls.forEach(function (x) { if (x.start < first) first = x.start; if (!last || x.start > last.start) last = x; });
    var ranks = it.calls.map(function (x) { return x.rank; }).join(', ');
    var h = '<li><code>' + esc(call) + '</code>' + esc(line) + ' on ranks ' + esc(ranks) +
      (c.world ? ' (all)' : '') + ', ' + esc(c.bytes) + ' bytes' + (c.incomplete ? ', <strong>not every member made it</strong>' : '');
    if (last && it.calls.length > 1) {
      h += '. Arrived last: ' + (last.rank === me.rank ? '<strong>this rank</strong>' : goButton(last, 'arrived last')) +
        ', ' + esc(ms(last.start - first)) + ' after the first';
      if (last.rank !== me.rank) h += '; this rank waited ' + esc(ms(last.start - me.start)) + ' for it';
    }
    return h + '.</li>';
  }

  function unmark() {
    linked.forEach(function (e) { e.classList.remove('linked'); var t = e.querySelector('.link-sr'); if (t) t.remove(); });
    linked = [];
  }

  // The partners' cells in the spawn's columns: outlined, a glyph, and words.
  function markPartners(items) {
    unmark();
    items.forEach(function (it) {
      var others = it.kind === 'coll' ? it.calls.filter(function (x) { return x.rank !== it.me.rank; }) : [it.other];
      others.forEach(function (x) {
        if (x.step == null) return;
        var cells = document.querySelectorAll('.spawn .cell .item[data-step="' + x.step + '"]');
        for (var q = 0; q < cells.length; q++) {
          var e = cells[q];
          e.classList.add('linked');
          var t = document.createElement('span');
          t.className = 'link-sr sr-only';
          t.textContent = it.kind === 'coll' ? ' (in the same collective as the current step)' :
            it.kind === 'send' ? ' (received the current step\'s message)' : ' (sent the current step\'s message)';
          e.appendChild(t);
          linked.push(e);
        }
      });
    });
  }

  L.drawLinks = function () {
    var panel = $('links-panel');
    if (!panel || !L.T) return;
    index();
    var all = S.mode === 'read' ? [] : L.linksAt(S.cur), items = all.slice(0, SHOWN);
    markPartners(items);
    var hasBack = back && back.to === S.cur;
    if (!items.length && !hasBack) { panel.hidden = true; return; }
    panel.hidden = false;
    var h = items.length ? '<ul class="links">' + items.map(itemHTML).join('') + '</ul>' : '';
    if (all.length > items.length)
      h += '<p class="links-more">and ' + (all.length - items.length) + ' more calls before this rank\'s next step.</p>';
    if (hasBack) h += '<p><button type="button" class="link-back" aria-label="Back to step ' + (back.from + 1) + ' (b)">' +
      '&larr; back to step ' + (back.from + 1) + '</button></p>';
    $('links-info').innerHTML = h;
  };

  L.followLink = function (to) {
    var from = S.cur;
    if (to == null) {
      var items = L.linksAt(from), it = items[0];
      if (!it) return L.tell('No message or collective after this step.');
      var x = it.kind === 'coll' ? it.calls.filter(function (y) { return y.rank !== it.me.rank; })[0] : it.other;
      if (!x || x.step == null) return L.tell('Its partner made no step to go to.');
      to = x.step;
    }
    // A rank filter that hides the partner is lifted: the jump shows it.
    if (S.rank != null && L.T.steps[to] && L.T.steps[to].rank !== S.rank) L.setRank(null);
    L.go(to);
    back = { from: from, to: to };
    L.drawLinks();
  };

  L.linkBack = function () {
    if (!back || back.to !== S.cur) return L.tell('Nothing to go back to.');
    var b = back;
    back = null;
    L.go(b.from);
  };

  document.addEventListener('click', function (e) {
    var b = e.target.closest && e.target.closest('.link-go, .link-back');
    if (!b) return;
    if (b.classList.contains('link-back')) L.linkBack();
    else L.followLink(+b.getAttribute('data-step'));
  });
})();
