/* lectern viewer, render: one step's renderings as HTML.
 *
 * Everything from the trace goes through safe.js: esc() for text, url() for
 * addresses, html() (DOMPurify) for a note's HTML. Plots are drawn by
 * vega-embed once their element is in the page (hydrate()); images can be
 * clicked to see them large.
 */
(function () {
  'use strict';

  var L = window.lectern, SAFE = window.lecternSafe, esc = L.esc;
  var VEGA_SCRIPTS = ['vega/build/vega.min.js', 'vega-lite/build/vega-lite.min.js',
                      'vega-embed/build/vega-embed.min.js'];

  // ------------------------------------------------------------- addresses

  function host(u) { try { return new URL(u).host.replace(/^www\./, ''); } catch (e) { return ''; } }

  // What a link says when it has no title: the last part of its path (with
  // the query when that part says little, like YouTube's "watch").
  function urlTail(u) {
    try {
      var x = new URL(u), segs = x.pathname.split('/').filter(Boolean), last = segs.length ? segs[segs.length - 1] : '';
      try { last = decodeURIComponent(last); } catch (e) { /* keep it encoded */ }
      if (last.length < 8 && x.search) last += x.search;
      if (last.length > 60) last = last.slice(0, 58) + '…';
      return last;
    } catch (e) { return String(u); }
  }
  L.urlTail = urlTail;

  // A figure's file name as words: "lecture_08_all_gather.svg" -> "all gather".
  function figureName(src) {
    var b = L.basename(String(src).split(/[?#]/)[0]).replace(/\.[a-z0-9]+$/i, '').replace(/^lecture_\d+_/, '');
    return b.replace(/[_-]+/g, ' ').trim() || 'figure';
  }

  function imgWidth(w) {
    if (typeof w === 'number' && w > 0 && w <= 1) return (w * 100) + '%';
    return '100%';
  }

  // ------------------------------------------------------------ renderings

  function whereText(i) {
    var s = L.T.steps[i], f = s.stack[s.stack.length - 1];
    return (s.rank != null ? 'rank ' + s.rank + ' · ' : '') + L.loc(f) + (f.function ? ' (' + f.function + ')' : '');
  }

  // A note's HTML through DOMPurify, once per note text: a line's notes are
  // drawn again as the source scrolls, and loops write the same note again
  // and again. null without DOMPurify (the note is then shown as its text).
  var noteCache = new Map();
  function noteHTML(html) {
    var h = noteCache.get(html);
    if (h === undefined) {
      if (noteCache.size > 50000) noteCache.clear();
      h = SAFE.html(html);
      noteCache.set(html, h);
    }
    return h;
  }

  L.renderingHTML = function (r, i, j) {
    if (!r || typeof r !== 'object') return '<div class="r-unknown">rendering ' + j + ' is not an object</div>';
    switch (r.type) {
      case 'markdown':
        var safe = typeof r.html === 'string' ? noteHTML(r.html) : null;
        if (safe !== null) return '<div class="r-md">' + safe + '</div>';
        return '<div class="r-md r-plain">' + esc(r.data == null ? '' : r.data) + '</div>';
      case 'text':
        if (r.command == null) return '<pre class="r-text">' + esc(r.data == null ? '' : r.data) + '</pre>';
        var bad = r.exit_status != null && r.exit_status !== 0;
        // Command output keeps its lines and scrolls sideways: focusable, so a
        // keyboard can scroll it too.
        return '<div class="r-cmd"><div class="cmd-h"><span class="prompt" aria-hidden="true">$</span> <code>' +
          esc(r.command) + '</code>' + (r.exit_status != null ? ' <span class="exit' + (bad ? ' bad' : '') + '">exit ' +
          esc(r.exit_status) + '</span>' : '') + '</div><pre class="r-text" tabindex="0">' +
          esc(r.data == null ? '' : r.data) + '</pre></div>';
      case 'image':
        return imageHTML(r);
      case 'link':
        if (SAFE.url(r.url) === null) return '<div class="r-link blocked"><span class="see">see</span> ' +
          '<span class="blocked-url">' + esc(r.url) + '</span> <span class="why">(not an http(s) link: not opened)</span></div>';
        var title = typeof r.title === 'string' && r.title.trim() ? r.title : urlTail(r.url) || host(r.url);
        return '<div class="r-link"><a href="' + esc(r.url) + '" target="_blank" rel="noopener noreferrer">' +
          '<span class="see">see</span> <span class="lt">' + esc(title) + '</span> <span class="host">' + esc(host(r.url)) +
          '</span> <span aria-hidden="true">↗</span><span class="sr-only"> (opens in a new tab)</span></a></div>';
      case 'plot':
        // Room for the chart before it is drawn, so that what follows does
        // not jump when it is (Vega-Lite's default height is 200 px; axes
        // and title take about 60 more).
        var ph = r.spec && typeof r.spec.height === 'number' && r.spec.height > 0 && r.spec.height < 2000 ? r.spec.height : 200;
        return '<figure class="r-plot" data-s="' + i + '" data-r="' + j + '" style="min-height:' + (ph + 60) + 'px">' +
          '<span class="plot-wait">plot</span></figure>';
      case 'check':
        return checkHTML(r);
      case 'table':
        return tableHTML(r, i, j);
      case 'inspect':
        return L.inspectHTML ? L.inspectHTML(r) : '<pre class="r-text">' + esc(r.data == null ? '' : r.data) + '</pre>';
      case 'predict':
        return L.predictHTML ? L.predictHTML(r, i, j) : '<div class="r-unknown">a question (predict.js is missing)</div>';
      case 'warning':
        return '<div class="r-warning"><div class="warn-h"><strong>Warning</strong> · ' + esc(whereText(i)) + '</div>' +
          '<pre>' + esc(r.data == null ? '' : r.data) + '</pre></div>';
      case 'error':
        if (r.expected === true)
          return '<div class="r-error r-expected"><div class="err-h"><strong>Caught, as expected</strong> · ' + esc(whereText(i)) +
            '</div><pre>' + esc(r.data == null ? '' : r.data) + '</pre></div>';
        return '<div class="r-error"><div class="err-h"><strong>Error</strong> · ' + esc(whereText(i)) + '</div>' +
          '<pre>' + esc(r.data == null ? '' : r.data) + '</pre></div>';
      default:
        return '<div class="r-unknown">unknown rendering type ' + esc(JSON.stringify(r.type)) + '</div>';
    }
  };

  // A table(): the values are data. A cell shows its text (the value
  // through the column's format) and sorts by its value: numbers as
  // numbers, text as text, a missing number (NaN in the lecture) last. Each
  // header is a button (click, Enter or Space) cycling the column's order
  // ascending, descending, as recorded; aria-sort says which.
  var tableSort = {};   // 'step:rendering' -> {col, dir}
  function cellText(r, row, c) {
    var d = Array.isArray(r.display) && Array.isArray(r.display[row]) ? r.display[row][c] : undefined;
    if (d != null) return String(d);
    var v = r.rows[row][c];
    return v == null ? '' : String(v);
  }
  function tableOrder(r, st) {
    var order = r.rows.map(function (_, k) { return k; });
    if (!st) return order;
    order.sort(function (a, b) {
      var x = r.rows[a][st.col], y = r.rows[b][st.col];
      var xm = x == null || x === '', ym = y == null || y === '';
      if (xm || ym) return xm === ym ? a - b : xm ? 1 : -1;   // missing values last either way
      var d = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
      return (d || a - b) * (d ? st.dir : 1);
    });
    return order;
  }
  function tableHTML(r, i, j) {
    var cols = Array.isArray(r.columns) ? r.columns : [];
    if (!cols.length || !Array.isArray(r.rows)) return '<div class="r-unknown">a table with no columns or rows</div>';
    var st = tableSort[i + ':' + j], h = '<div class="r-table-wrap"><table class="r-table" data-s="' + i + '" data-r="' + j + '">';
    if (typeof r.caption === 'string' && r.caption) h += '<caption>' + esc(r.caption) + '</caption>';
    h += '<thead><tr>';
    cols.forEach(function (c, k) {
      var num = c && c.kind === 'number', name = c && c.name != null ? String(c.name) : 'column ' + (k + 1);
      var sort = st && st.col === k ? (st.dir > 0 ? 'ascending' : 'descending') : 'none';
      h += '<th scope="col"' + (num ? ' class="num"' : '') + ' aria-sort="' + sort + '"><button type="button" class="tsort" data-col="' +
        k + '">' + esc(name) + (c && c.unit ? ' <span class="unit">(' + esc(c.unit) + ')</span>' : '') +
        '<span class="sort-mark" aria-hidden="true">' + (sort === 'ascending' ? ' ▲' : sort === 'descending' ? ' ▼' : ' ↕') +
        '</span></button></th>';
    });
    h += '</tr></thead><tbody>';
    tableOrder(r, st).forEach(function (row) {
      if (!Array.isArray(r.rows[row])) return;
      h += '<tr>';
      for (var k = 0; k < cols.length; k++)
        h += '<td' + (cols[k] && cols[k].kind === 'number' ? ' class="num"' : '') + '>' + esc(cellText(r, row, k)) + '</td>';
      h += '</tr>';
    });
    return h + '</tbody></table></div>';
  }
  // A header's button: next order for its column, the table drawn again in
  // place, the focus kept on the same header.
  L.sortTable = function (b) {
    var t = b.closest('table.r-table'), i = +t.getAttribute('data-s'), j = +t.getAttribute('data-r');
    var col = +b.getAttribute('data-col'), key = i + ':' + j, st = tableSort[key];
    if (!st || st.col !== col) tableSort[key] = { col: col, dir: 1 };
    else if (st.dir > 0) st.dir = -1;
    else delete tableSort[key];
    var r = L.T.steps[i].renderings[j], box = document.createElement('div');
    box.innerHTML = tableHTML(r, i, j);
    var fresh = box.firstChild;
    t.parentNode.replaceWith(fresh);
    var nb = fresh.querySelector('button[data-col="' + col + '"]');
    if (nb) nb.focus();
  };

  // A check as a badge (passed or failed, in words as well as colour), what
  // it checked, and the numbers that decided it. Every field is the trace's
  // and goes in as text.
  // Three significant digits, like C's %.3g: 0.5, 0.0909, 1e-5.
  function num(x) {
    if (typeof x !== 'number' || !isFinite(x)) return '?';
    if (x === 0) return '0';
    var a = Math.abs(x), s = a < 1e-3 || a >= 1e5 ? x.toExponential(2) : x.toPrecision(3);
    return s.replace(/(\.\d*?)0+(?=e|$)/, '$1').replace(/\.(?=e|$)/, '').replace('e+', 'e');
  }
  function at(a) { return Array.isArray(a) ? '[' + a.map(function (v) { return esc(v); }).join(', ') + ']' : ''; }
  function checkHTML(r) {
    var ok = r.passed === true, nums = [];
    if (typeof r.max_abs === 'number') nums.push('max abs diff ' + num(r.max_abs) + (r.max_abs_at ? ' at ' + at(r.max_abs_at) : '') +
      (typeof r.actual_at_max === 'number' ? ' (actual ' + esc(r.actual_at_max) + ', expected ' + esc(r.expected_at_max) + ')' : ''));
    if (typeof r.max_rel === 'number') nums.push('max rel diff ' + num(r.max_rel) + (r.max_rel_at ? ' at ' + at(r.max_rel_at) : ''));
    if (typeof r.rtol === 'number' || typeof r.atol === 'number') nums.push('rtol ' + num(r.rtol) + ', atol ' + num(r.atol));
    if (!ok && typeof r.bad === 'number' && r.bad > 0) nums.push(esc(r.bad) + ' of ' + esc(r.numel) + ' outside' +
      (r.first_bad_at ? ', first at ' + at(r.first_bad_at) : '') + (r.nonfinite ? ', ' + esc(r.nonfinite) + ' NaN or infinite' : ''));
    if (Array.isArray(r.bad_ranges) && r.bad_ranges.length) nums.push('wrong elements ' + r.bad_ranges.map(function (p) {
      return Array.isArray(p) ? (p[0] === p[1] ? esc(p[0]) : esc(p[0]) + '–' + esc(p[1])) : '';
    }).join(', ') + (r.bad_runs > r.bad_ranges.length ? ' and ' + esc(r.bad_runs - r.bad_ranges.length) + ' more' : ''));
    if (typeof r.reason === 'string') nums.push(esc(r.reason));
    return '<div class="r-check ' + (ok ? 'pass' : 'fail') + '"><span class="check-badge">' + (ok ? '✓ pass' : '✗ fail') +
      '</span> <span class="check-what">' + esc(r.what == null ? '' : r.what) + '</span>' +
      (nums.length ? ' <span class="check-nums">' + nums.join(' · ') + '</span>' : '') + '</div>';
  }

  // A local figure at its share of the page, but never narrower than its own
  // width where there is room (hydrate() sets that once it has loaded); a
  // click shows it large. A figure on the web is a link and a button: the
  // page loads nothing from elsewhere by itself.
  function imageHTML(r) {
    var w = imgWidth(r.width), alt = typeof r.alt === 'string' && r.alt ? r.alt : 'Figure: ' + figureName(r.src || '');
    if (SAFE.url(r.src) === null) return '<p class="img-missing">image not shown: ' + esc(JSON.stringify(r.src)) +
      ' is not an http(s) address or a path</p>';
    if (r.remote || /^[a-z][a-z0-9+.-]*:/i.test(r.src || '')) {
      var h = host(r.src);
      return '<div class="r-img remote"><span class="ext-tag">figure on the web</span> <a href="' + esc(r.src) +
        '" target="_blank" rel="noopener noreferrer">' + esc(urlTail(r.src)) + ' <span class="host">' + esc(h) +
        '</span><span class="sr-only"> (opens in a new tab)</span></a> <button type="button" class="load-img" data-src="' +
        esc(r.src) + '" data-width="' + esc(w) + '" data-alt="' + esc(alt) + '">show it here (loads from ' + esc(h) +
        ')</button></div>';
    }
    return '<figure class="r-img"><button type="button" class="zoom" style="width:' + esc(w) + '" aria-label="Enlarge. ' +
      esc(alt) + '"><img src="' + esc(L.ROOT + r.src) + '" alt="' + esc(alt) + '" data-path="' + esc(r.src) + '"></button></figure>';
  }

  L.itemHTML = function (i, cls) {
    var s = L.T.steps[i], rs = s.renderings, h = '';
    for (var j = 0; j < rs.length; j++) h += L.renderingHTML(rs[j], i, j);
    var err = L.IX.errors.length && rs.some(function (r) { return r && r.type === 'error' && r.expected !== true; });
    var style = s.rank != null ? ' style="--rc:' + L.rankColor(s.rank) + '"' : '';
    // Compared with another run (diff.js): what differs here, said first.
    var tag = L.diffActive() ? L.diffTag(i) : '';
    return '<div class="item' + (cls ? ' ' + cls : '') + (err ? ' has-error' : '') + (i === L.S.cur ? ' cur-item' : '') +
      (tag ? ' diff-differs' : '') + '" data-step="' + i + '"' + style + '>' + tag + h + '</div>';
  };

  // After HTML is in the page: relative addresses in notes are relative to
  // the repository root, links open in a new tab, figures get their size,
  // plots are drawn.
  L.hydrate = function (root) {
    var as = root.querySelectorAll('.r-md a[href], .r-md img[src]');
    for (var k = 0; k < as.length; k++) {
      var a = as[k], attr = a.tagName === 'A' ? 'href' : 'src', v = a.getAttribute(attr);
      var absolute = /^[a-z][a-z0-9+.-]*:/i.test(v) || v.charAt(0) === '#' || v.charAt(0) === '/';
      if (!absolute && !a.hasAttribute('data-fixed')) { a.setAttribute(attr, L.ROOT + v); a.setAttribute('data-fixed', ''); }
      if (attr === 'href' && v.charAt(0) !== '#') { a.target = '_blank'; a.rel = 'noopener noreferrer'; }
    }
    var imgs = root.querySelectorAll('.r-img img:not([data-sized])');
    for (k = 0; k < imgs.length; k++) sizeFigure(imgs[k]);
    var plots = root.querySelectorAll('.r-plot:not([data-drawn])');
    for (k = 0; k < plots.length; k++) drawPlot(plots[k]);
    if (L.hydrateTwins) L.hydrateTwins(root);   // twin.js: an open twin's charts
  };

  function sizeFigure(img) {
    img.setAttribute('data-sized', '');
    var box = img.closest('.zoom') || img;
    function fit() {
      var w = img.naturalWidth;
      // An SVG without width and height (only a viewBox) has no size of its
      // own: Chromium reports its default 300 px. Such a drawing is taken to
      // be meant for a column's width, about 600 px.
      if (w === 300 && /\.svg$/i.test(img.getAttribute('data-path') || '')) w = 600;
      if (w) box.style.minWidth = 'min(100%, ' + w + 'px)';
    }
    if (img.complete) fit(); else img.addEventListener('load', fit, { once: true });
  }

  // ----------------------------------------------------------------- zoom

  L.zoom = function (img) {
    var d = L.$('zoom'), big = L.$('zoom-img');
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    L.$('zoom-cap').textContent = img.alt;
    // Twice its own size, within the window; SVG stays sharp.
    var w = img.naturalWidth || img.width;
    big.style.width = 'min(94vw, ' + Math.max(w * 2, 600) + 'px)';
    d.showModal();
    L.$('zoom-close').focus();
  };

  // ----------------------------------------------------------------- plots

  var vegaState = null; // null, 'loading', 'ok', 'missing'
  var vegaWaiting = [];
  function withVega(cb) {
    if (vegaState === 'ok' || vegaState === 'missing') return cb(vegaState === 'ok');
    vegaWaiting.push(cb);
    if (vegaState === 'loading') return;
    vegaState = 'loading';
    var n = 0;
    (function next() {
      if (n === VEGA_SCRIPTS.length) return finish(typeof window.vegaEmbed === 'function' && !!window.vega);
      L.loadScript(L.ROOT + 'node_modules/' + VEGA_SCRIPTS[n++], next, function () { finish(false); });
    })();
    function finish(ok) {
      vegaState = ok ? 'ok' : 'missing';
      var w = vegaWaiting; vegaWaiting = [];
      w.forEach(function (f) { f(ok); });
    }
  }

  L.withVega = withVega;   // twin.js draws its simulated timelines with the same Vega

  // A plot spec is data too. vega-embed lets a spec's usermeta.embedOptions
  // override the page's options (turning on "view source" with HTML of its
  // own, or the expression compiler): the spec goes in without it. With
  // ast: true Vega's expressions are evaluated by vega-embed's interpreter,
  // never compiled to functions, and the loader refuses every URL: a plot
  // draws the data it carries and fetches nothing.
  var noLoader = null;
  function plotOptions() {
    if (!noLoader) {
      noLoader = window.vega.loader();
      noLoader.sanitize = function (uri) {
        return Promise.reject(new Error('a plot in a trace reads no files or URLs (' + uri + ')'));
      };
    }
    return { actions: { export: true, source: false, compiled: false, editor: false }, renderer: 'svg',
             ast: true, loader: noLoader };
  }
  L.plotOptions = plotOptions;

  // The spec without usermeta; a Vega-Lite spec of an older major version
  // (lectures written for v5) is drawn by the Vega-Lite the page has, which
  // reads them, without a warning per plot.
  function plotSpec(spec) {
    var out = {};
    for (var k in spec) if (Object.prototype.hasOwnProperty.call(spec, k) && k !== 'usermeta') out[k] = spec[k];
    var vl = window.vegaLite && String(window.vegaLite.version || '').split('.')[0];
    if (vl && typeof out.$schema === 'string' && /\/schema\/vega-lite\/v\d+(\.[\d.]+)?\.json$/.test(out.$schema))
      out.$schema = out.$schema.replace(/v\d+(\.[\d.]+)?\.json$/, 'v' + vl + '.json');
    return out;
  }

  function drawPlot(el) {
    el.setAttribute('data-drawn', '');
    var r = L.T.steps[+el.getAttribute('data-s')].renderings[+el.getAttribute('data-r')];
    withVega(function (ok) {
      if (ok && (!r.spec || typeof r.spec !== 'object' || Array.isArray(r.spec))) {
        plotFallback(el, r, 'the plot specification is not a JSON object');
      } else if (ok) {
        el.innerHTML = '';
        window.vegaEmbed(el, plotSpec(r.spec), plotOptions()).then(function () {
          // vega-embed's menu opens with a <summary> holding only an icon.
          var sm = el.querySelectorAll('summary');
          for (var k = 0; k < sm.length; k++) sm[k].setAttribute('aria-label', 'Save the plot');
          modelledCaption(el, r);
        }, function (e) { plotFallback(el, r, 'the plot could not be drawn: ' + e.message); });
      } else {
        plotFallback(el, r, 'plots need vega-embed (run npm ci); its data:');
      }
    });
  }

  // A chart with spans of modelled compute (chart_span_modelled: "modelled":
  // true in its data) says in words, under it, which bars are modelled: a
  // reader who does not hover a bar or read the legend still learns that
  // they are time the lecture said a device computed, not arithmetic that
  // was measured. The words are the viewer's own; only the counts come from
  // the trace.
  function modelledCaption(el, r) {
    var values = r.spec && r.spec.data && Array.isArray(r.spec.data.values) ? r.spec.data.values : [];
    var n = values.filter(function (v) { return v && v.modelled === true; }).length;
    if (!n || el.querySelector('.modelled-note')) return;
    var cap = document.createElement('figcaption');
    cap.className = 'modelled-note';
    cap.innerHTML = '<span class="modelled-key" aria-hidden="true"></span><strong>Modelled compute:</strong> ' +
      (n === values.length ? 'every bar' : n + ' of ' + values.length + ' bars') +
      ' (pale, dashed outline) ' + (n === 1 ? 'is' : 'are') + ' time the lecture said a device computed ' +
      '(<code>model_compute</code>), not arithmetic that was measured.';
    el.appendChild(cap);
  }

  function plotFallback(el, r, why) {
    el.classList.add('plot-missing');
    el.innerHTML = '<p>' + esc(why) + '</p><pre class="r-text">' + esc(JSON.stringify(r.spec, null, 1).slice(0, 4000)) + '</pre>';
    modelledCaption(el, r);
  }
})();
