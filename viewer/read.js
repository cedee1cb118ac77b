/* lectern viewer, read: the lecture as one document.
 *
 * Every lecture note in order; a spawn's output, ranks side by side, where
 * the spawn comes. Entries are added in batches as the reader scrolls (and
 * all at once before printing). "As it happened", the document ends at the
 * current step.
 */
(function () {
  'use strict';

  var L = window.lectern, S = L.S, $ = L.$, esc = L.esc;
  var READ_BATCH = 400;      // entries appended at a time

  var R = { order: null, done: 0, observer: null };
  L.resetRead = function () {
    if (R.observer) R.observer.disconnect();
    R = { order: null, done: 0, observer: null };
  };

  // Step numbers for notes, -1 - k for spawn k (at its note or first step).
  function readOrder() {
    var T = L.T, IX = L.IX, out = [], seen = {}, end = S.live ? S.cur : T.steps.length - 1;
    for (var i = 0; i <= end; i++) {
      var s = T.steps[i], k = s.rank != null ? s.spawn : IX.noteSpawn[i];
      if (k == null || k < 0) { out.push(i); continue; }
      if (seen[k]) continue;
      seen[k] = true;
      out.push(-1 - k);
    }
    return out;
  }

  L.buildRead = function () {
    var box = $('read');
    if (R.observer) R.observer.disconnect();
    R.order = readOrder();
    R.done = 0;
    box.innerHTML = '<article class="doc"><header class="doc-h"><p class="doc-name">' + esc(L.T.lecture || S.name) +
      '</p><p class="meta">' + esc(L.metaLine()) + '</p></header><div class="doc-body"></div>' +
      '<div class="read-more" aria-hidden="true"></div></article>';
    R.observer = new IntersectionObserver(function (es) {
      if (es.some(function (e) { return e.isIntersecting; })) readAppend(READ_BATCH);
    }, { root: box, rootMargin: '1500px 0px' });
    R.observer.observe(box.querySelector('.read-more'));
    readAppend(READ_BATCH);
  };

  function readAppend(n) {
    var T = L.T, body = $('read').querySelector('.doc-body');
    if (!body || R.done >= R.order.length) return;
    var h = '', end = Math.min(R.order.length, R.done + n);
    for (var k = R.done; k < end; k++) {
      var x = R.order[k];
      if (x >= 0) {
        if (!L.visible(x)) continue;
        var f = T.steps[x].stack[T.steps[x].stack.length - 1];
        // inspect(x): inline, under the note it follows.
        var isVar = T.steps[x].renderings[0] && T.steps[x].renderings[0].type === 'inspect';
        h += '<div class="entry' + (isVar ? ' entry-var' : '') + '" data-step="' + x + '"><button type="button" class="to-step" data-step="' + x +
          '" title="open this step beside the code">' + esc(L.basename(f.path)) + ':' + f.line + '</button>' +
          L.itemHTML(x, '') + '</div>';
      } else {
        h += '<div class="entry spawn-entry">' + L.spawnHTML(-1 - x, 'R') + '</div>';
      }
    }
    R.done = end;
    var tmp = document.createElement('div');
    tmp.innerHTML = h;
    L.hydrate(tmp);
    while (tmp.firstChild) body.appendChild(tmp.firstChild);
    if (R.done >= R.order.length) { var more = $('read').querySelector('.read-more'); if (more) more.remove(); }
  }

  L.readMark = function (scroll) {
    var T = L.T, IX = L.IX, box = $('read');
    var old = box.querySelectorAll('.cur-item');
    for (var q = 0; q < old.length; q++) old[q].classList.remove('cur-item');
    var secs = box.querySelectorAll('.spawn');
    for (q = 0; q < secs.length; q++) L.unmarkSpawn(secs[q]);
    // Append until the current step is in the document.
    var s = T.steps[S.cur], k = s.rank != null ? s.spawn : IX.noteSpawn[S.cur];
    var want = k == null || k < 0 ? S.cur : -1 - k, pos = R.order.indexOf(want);
    while (pos >= R.done && R.done < R.order.length) readAppend(READ_BATCH);
    var el = null;
    if (want >= 0) el = box.querySelector('.entry > .item[data-step="' + S.cur + '"]');
    else {
      var sec = box.querySelector('.spawn[data-spawn="' + k + '"]');
      if (sec) el = L.markSpawn(sec, k, S.cur);
    }
    if (!el) return;
    el.classList.add('cur-item');
    if (!scroll) return;
    var b = box.getBoundingClientRect(), r = el.getBoundingClientRect(), H = box.clientHeight;
    if (r.top < b.top + 8 || r.top > b.top + H / 3 || (r.bottom > b.bottom - 8 && r.height < H * 0.6))
      box.scrollTop += r.top - b.top - H * 0.2;
  };

  L.readAll = function () { if (R.order) while (R.done < R.order.length && R.done < 20000) readAppend(2000); };
})();
