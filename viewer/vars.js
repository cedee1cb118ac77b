/* lectern viewer, vars: inspect(x)'s values, and the variables panel.
 *
 * An "inspect" rendering (docs/trace-format.md) is one variable's value at
 * one step: a number, or a tensor (whole up to 256 elements; larger ones as
 * min / max / mean / norm and a picture of block means). This file draws
 * them, wherever they appear (in place of their line, in a rank's column,
 * in read mode under the note they follow), and fills the variables panel
 * beside the call stack:
 *
 *   - the variables the current frame inspected up to the current step, by
 *     name, each with the step its value last changed at (a button to it);
 *     a value that changed at this step is marked, in words too;
 *   - under a spawn, one column per rank, the same name on one row.
 *
 * A tensor of up to 16 x 16 is a matrix of cells shaded by value (blue
 * below zero, red above, white at zero); 1-D is one row. The numbers are
 * the cells' text, for a screen reader a table; on the screen they show
 * in a readout under the matrix when a cell is hovered or focused. The
 * matrix is one tab stop: arrow keys, Home and End move between cells.
 */
(function () {
  'use strict';

  var L = window.lectern, S = L.S, $ = L.$, esc = L.esc;
  var MAT = 16;              // the largest side drawn cell by cell
  var WALK = 20000;          // steps looked back for a frame's variables

  // ------------------------------------------------------------- numbers

  function num(v) {
    if (v == null) return 'NaN or inf';
    if (typeof v !== 'number') return String(v);
    if (Number.isInteger(v) && Math.abs(v) < 1e15) return String(v);
    var a = Math.abs(v);
    return a !== 0 && (a < 1e-4 || a >= 1e6) ? v.toExponential(4) : String(+v.toPrecision(6));
  }

  // Shading: white at 0, red (178, 24, 43) at +m, blue (33, 102, 172) at -m;
  // the text colour is black or white, whichever contrasts more (never
  // below 4.5:1 on any of these backgrounds).
  function shade(v, m) {
    if (v == null || !m) return 'background:#e3e1dc;color:#1c2128';
    var t = Math.max(-1, Math.min(1, v / m)), a = Math.abs(t);
    var to = t >= 0 ? [178, 24, 43] : [33, 102, 172];
    var c = to.map(function (x) { return Math.round(255 + (x - 255) * a); });
    var lum = c.map(function (x) { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
    var Y = 0.2126 * lum[0] + 0.7152 * lum[1] + 0.0722 * lum[2];
    var white = 1.05 / (Y + 0.05), black = (Y + 0.05) / 0.05;
    return 'background:rgb(' + c.join(',') + ');color:' + (white > black ? '#fff' : '#000');
  }

  function absMax(vs) {
    var m = 0;
    for (var k = 0; k < vs.length; k++) if (typeof vs[k] === 'number' && Math.abs(vs[k]) > m) m = Math.abs(vs[k]);
    return m;
  }

  // rows x cols cells; label(k) says what cell k is ("[1, 2]").
  function matrixHTML(vals, rows, cols, caption, label, scale) {
    var m = scale || absMax(vals), h = '<div class="tmat-wrap"><table class="tmat" data-cols="' + cols + '"><caption class="sr-only">' +
      esc(caption) + '</caption><tbody>';
    for (var i = 0; i < rows; i++) {
      h += '<tr>';
      for (var j = 0; j < cols; j++) {
        var k = i * cols + j, v = vals[k];
        h += '<td tabindex="' + (k === 0 ? 0 : -1) + '" data-at="' + esc(label(i, j)) + '" style="' + shade(v, m) +
          '"><span class="tv">' + esc(num(v)) + '</span></td>';
      }
      h += '</tr>';
    }
    return h + '</tbody></table><p class="tm-read" aria-hidden="true">&nbsp;</p></div>';
  }

  // Block means of a whole tensor too large for a matrix, as the runtime
  // makes them for larger ones (trace/inspect.c).
  function picture(vals, rows, cols, pr, pc) {
    var out = [];
    for (var i = 0; i < pr; i++) {
      var r0 = Math.floor(i * rows / pr), r1 = Math.floor((i + 1) * rows / pr);
      for (var j = 0; j < pc; j++) {
        var c0 = Math.floor(j * cols / pc), c1 = Math.floor((j + 1) * cols / pc), s = 0, n = 0;
        for (var a = r0; a < r1; a++) for (var b = c0; b < c1; b++) {
          var x = vals[a * cols + b];
          if (typeof x === 'number') { s += x; n++; }
        }
        out.push(n ? s / n : null);
      }
    }
    return out;
  }

  function summary(vals) {
    var mn = Infinity, mx = -Infinity, s = 0, q = 0, n = 0;
    vals.forEach(function (x) {
      if (typeof x !== 'number') return;
      mn = Math.min(mn, x); mx = Math.max(mx, x); s += x; q += x * x; n++;
    });
    return n ? { min: mn, max: mx, mean: s / n, norm: Math.sqrt(q) } : { min: null, max: null, mean: null, norm: null };
  }

  function shapeText(r) {
    return Array.isArray(r.shape) ? r.shape.join(' × ') || 'scalar' : '?';
  }

  // The largest |value| of a tensor rendering (0 for a number): ranks' values
  // of one name are shaded on one scale, so that equal colours are equal numbers.
  function scaleOf(r) {
    if (!r || r.kind !== 'tensor') return 0;
    if (Array.isArray(r.values)) return absMax(r.values);
    return Math.max(Math.abs(r.min || 0), Math.abs(r.max || 0));
  }

  // The value of one inspect rendering, as HTML; `scale` (optional) is the
  // |value| drawn at full colour.
  L.valueHTML = function (r, scale) {
    if (!r || typeof r !== 'object') return '';
    if (r.kind !== 'tensor') return '<code class="iv-num">' + esc(r.value == null ? r.data || '' : String(r.value)) + '</code>';
    var sh = Array.isArray(r.shape) ? r.shape : [], rows = sh.length >= 2 ? sh[0] : 1;
    var cols = sh.length >= 2 ? (r.numel || 0) / (rows || 1) : sh[0] || 0;
    var head = '<span class="iv-shape">' + esc(shapeText(r)) + ' · ' + esc(r.device || '?') + '</span>';
    var what = 'tensor ' + shapeText(r);
    if (Array.isArray(r.values)) {
      if (!r.values.length) return '<div class="iv-t">' + head + ' <span class="iv-empty">(empty)</span></div>';
      if (rows <= MAT && cols <= MAT || rows === 1 && sh.length < 2)
        return '<div class="iv-t">' + head + matrixHTML(r.values, rows, cols, what + ', every value', function (i, j) {
          return sh.length >= 2 ? '[' + i + ', ' + j + ']' : '[' + j + ']';
        }, scale) + '</div>';
      var pr = Math.min(rows, MAT), pc = Math.min(cols, MAT);
      return tensorSummaryHTML(head, what, summary(r.values), picture(r.values, rows, cols, pr, pc), pr, pc, rows, cols, scale);
    }
    var p = r.picture || {}, ps = Array.isArray(p.shape) ? p.shape : [];
    var ppr = ps.length >= 2 ? ps[0] : 1, ppc = ps.length >= 2 ? ps[1] : ps[0] || 0;
    return tensorSummaryHTML(head, what, r, Array.isArray(p.values) ? p.values : [], ppr, ppc, rows, cols, scale);
  };

  function tensorSummaryHTML(head, what, sm, pic, pr, pc, rows, cols, scale) {
    var h = '<div class="iv-t">' + head + '<dl class="iv-sum">';
    ['min', 'max', 'mean', 'norm'].forEach(function (k) { h += '<dt>' + k + '</dt><dd>' + esc(num(sm[k])) + '</dd>'; });
    h += '</dl>';
    if (pic.length && pr && pc) h += matrixHTML(pic, pr, pc, what + ': means of ' + pr + ' × ' + pc + ' blocks', function (i, j) {
      var r0 = Math.floor(i * rows / pr), r1 = Math.floor((i + 1) * rows / pr) - 1;
      var c0 = Math.floor(j * cols / pc), c1 = Math.floor((j + 1) * cols / pc) - 1;
      return 'mean of ' + (rows > 1 ? 'rows ' + r0 + '–' + r1 + ', ' : '') + (cols > 1 ? 'elements ' : 'element ') +
        c0 + (c1 > c0 ? '–' + c1 : '');
    }, scale).replace('class="tmat"', 'class="tmat pic"');
    return h + '</div>';
  }

  // The rendering in place of its line, in a rank's column, in read mode.
  L.inspectHTML = function (r) {
    return '<div class="r-inspect"><span class="iv-name"><span class="iv-kw">inspect</span> <code>' + esc(r.name || '?') +
      '</code></span> ' + L.valueHTML(r) + '</div>';
  };

  // ------------------------------------------------------- matrix keys

  function cellMoved(td) {
    var wrap = td.closest('.tmat-wrap'), out = wrap && wrap.querySelector('.tm-read');
    if (out) out.textContent = td.getAttribute('data-at') + ' = ' + td.textContent;
  }
  document.addEventListener('focusin', function (e) {
    var td = e.target.closest && e.target.closest('.tmat td');
    if (!td) return;
    var cells = td.closest('table').querySelectorAll('td');
    for (var k = 0; k < cells.length; k++) cells[k].tabIndex = cells[k] === td ? 0 : -1;
    cellMoved(td);
  });
  document.addEventListener('mouseover', function (e) {
    var td = e.target.closest && e.target.closest('.tmat td');
    if (td) cellMoved(td);
  });
  document.addEventListener('keydown', function (e) {
    var td = e.target.closest && e.target.closest('.tmat td');
    if (!td) return;
    var tb = td.closest('table'), cells = tb.querySelectorAll('td'), cols = +tb.getAttribute('data-cols') || 1;
    var k = Array.prototype.indexOf.call(cells, td), to = -1;
    if (e.key === 'ArrowRight') to = k + 1;
    else if (e.key === 'ArrowLeft') to = k - 1;
    else if (e.key === 'ArrowDown') to = k + cols;
    else if (e.key === 'ArrowUp') to = k - cols;
    else if (e.key === 'Home') to = k - k % cols;
    else if (e.key === 'End') to = k - k % cols + cols - 1;
    else return;
    // The viewer's own keys (arrows step) stay off while inside a matrix.
    e.preventDefault();
    e.stopPropagation();
    if (to >= 0 && to < cells.length) cells[to].focus();
  }, true);

  // ---------------------------------------------------- the frame's variables

  function inspectOf(s) {
    var r = s.renderings && s.renderings[0];
    return r && r.type === 'inspect' ? r : null;
  }

  function sameValue(a, b) {
    function key(r) {
      return JSON.stringify([r.kind, r.value, r.shape, r.device, r.values, r.min, r.max, r.mean, r.norm, r.picture]);
    }
    return key(a) === key(b);
  }

  // {ranks: [null] or [0, 1, ...], names: [...], at: {rank: {name: {step, changed}}}}
  // for the frame of step i: the inspect steps made in that function's call
  // (its stack above it agrees: path, function and line; the function
  // itself: path and function), by rank, newest first.
  L.frameVars = function (i) {
    var T = L.T, s = T.steps[i], d = s.stack.length, sp = s.rank != null ? s.spawn : null;
    var closed = {}, found = {}, first = {};
    function inFrame(t) {
      if (t.stack.length < d) return false;
      for (var q = 0; q < d; q++) {
        var a = t.stack[q], b = s.stack[q];
        if (a.path !== b.path || a.function !== b.function || (q < d - 1 && a.line !== b.line)) return false;
      }
      return true;
    }
    for (var k = i; k >= 0 && k > i - WALK; k--) {
      var t = T.steps[k], tsp = t.rank != null ? t.spawn : null;
      if (tsp !== sp) { if (sp != null) break; continue; }
      var rk = String(t.rank);
      if (closed[rk]) continue;
      if (!inFrame(t)) { closed[rk] = true; continue; }
      var r = t.stack.length === d ? inspectOf(t) : null;
      if (!r) continue;
      var per = found[rk] = found[rk] || {};
      (per[r.name] = per[r.name] || []).push(k);
      first[r.name] = k;
    }
    var names = Object.keys(first).sort(function (a, b) { return first[a] - first[b]; });
    // spawnRanks: spawn -> rank -> [steps] (model.js); a rank with no step has none.
    var ranks = [null];
    if (sp != null) {
      ranks = [];
      (L.IX.spawnRanks[sp] || []).forEach(function (st, rk) { if (st) ranks.push(rk); });
    }
    var at = {};
    ranks.forEach(function (rk) {
      var per = found[String(rk)] || {}, o = at[String(rk)] = {};
      Object.keys(per).forEach(function (n) {
        var ks = per[n], changed = ks[0];
        for (var q = 1; q < ks.length && sameValue(inspectOf(T.steps[ks[q]]), inspectOf(T.steps[ks[0]])); q++) changed = ks[q];
        o[n] = { step: ks[0], changed: changed };
      });
    });
    return { ranks: ranks, names: names, at: at };
  };

  L.hasInspect = function () {
    if (L.IX.hasInspect == null) L.IX.hasInspect = L.T.steps.some(function (s) { return !!inspectOf(s); });
    return L.IX.hasInspect;
  };

  function cellHTML(v, scale) {
    if (!v) return '<td class="v-none"><span class="sr-only">not inspected</span><span aria-hidden="true">–</span></td>';
    var r = inspectOf(L.T.steps[v.step]), now = v.changed === S.cur;
    return '<td class="v-cell' + (now ? ' v-changed' : '') + '">' + L.valueHTML(r, scale) + '<div class="v-at">' +
      (now ? '<strong class="v-now">changed at this step</strong>' :
        '<button type="button" class="to-step" data-step="' + v.changed + '" title="Go to the step where it changed">changed at step ' +
        (v.changed + 1) + '</button>') + '</div></td>';
  }

  L.drawVars = function () {
    var panel = $('vars-panel');
    if (!panel) return;
    if (!L.hasInspect()) { panel.hidden = true; return; }
    panel.hidden = false;
    var fv = L.frameVars(S.cur), box = $('vars');
    var s = L.T.steps[S.cur], f = s.stack[s.stack.length - 1];
    if (!fv.names.length) {
      box.innerHTML = '<p class="v-empty">No variable inspected in ' + esc(f.function || 'this function') + ' so far.</p>';
      return;
    }
    var multi = fv.ranks[0] != null, h = '<table class="vars"><caption class="sr-only">Variables inspected in ' +
      esc(f.function || '?') + (multi ? ', one column per rank' : '') + '</caption>';
    if (multi) {
      h += '<thead><tr><th scope="col">name</th>';
      fv.ranks.forEach(function (rk) {
        h += '<th scope="col" style="--rc:' + L.rankColor(rk) + '"><span class="chip" style="--rc:' + L.rankColor(rk) +
          '">rank ' + rk + '</span></th>';
      });
      h += '</tr></thead>';
    }
    h += '<tbody>';
    fv.names.forEach(function (n) {
      h += '<tr><th scope="row"><code>' + esc(n) + '</code></th>';
      var scale = 0;
      fv.ranks.forEach(function (rk) {
        var v = fv.at[String(rk)][n];
        if (v) scale = Math.max(scale, scaleOf(inspectOf(L.T.steps[v.step])));
      });
      fv.ranks.forEach(function (rk) { h += cellHTML(fv.at[String(rk)][n], scale); });
      h += '</tr>';
    });
    box.innerHTML = h + '</tbody></table>';
  };
})();
