/* lectern viewer, panels: everything around the source.
 *
 * The header (the lecture's title, the run's facts), the step controls'
 * state, and the side panels: the call stack of the current step, an
 * outline of the notes' headings, the spawns, the run.
 */
(function () {
  'use strict';

  var L = window.lectern, S = L.S, $ = L.$, esc = L.esc;

  // ------------------------------------------------------------- header

  L.metaLine = function () {
    var T = L.T, m = T.meta || {}, bits = [];
    if (m.backend) bits.push('backend ' + m.backend);
    if (m.gpus != null) bits.push(m.gpus + ' GPU' + (m.gpus === 1 ? '' : 's') +
      (m.gpu_names && m.gpu_names.length ? ' (' + L.uniq(m.gpu_names).join(', ') + ')' : ''));
    if (m.host) bits.push(m.host);
    if (m.start_time) bits.push(String(m.start_time).replace('T', ' ').replace(/\.\d+/, '').replace('Z', ' UTC'));
    if (m.duration_s != null) bits.push(L.fmtSeconds(m.duration_s));
    bits.push(T.steps.length + ' steps');
    if (m.modelled_compute === true) bits.push(L.modelledLine());
    return bits.join(' · ');
  };

  // The run's check counts: the trace's meta.checks when it has them (the
  // runtime counts every check there, each rank's, folded or not), else
  // counted from the steps, a folded PASS as the checks it stands for.
  L.checkCounts = function () {
    var mc = L.T.meta && L.T.meta.checks, IX = L.IX;
    if (mc && typeof mc.passed === 'number' && typeof mc.failed === 'number')
      return { passed: mc.passed, failed: mc.failed, notReached: typeof mc.not_reached === 'number' ? mc.not_reached : null };
    var passed = 0;
    IX.checks.passed.forEach(function (i) {
      L.T.steps[i].renderings.forEach(function (r) {
        if (r && r.type === 'check' && r.passed === true) passed += typeof r.folded === 'number' ? r.folded : 1;
      });
    });
    return { passed: passed, failed: IX.checks.failed.length, notReached: null };
  };

  // A run that called model_compute(): how many spans, so that a reader
  // knows some of its figures rest on modelled, not measured, compute.
  L.modelledLine = function () {
    var T = L.T, n = Array.isArray(T.modelled) ? T.modelled.length : 0;
    return 'modelled compute: ' + n + ' span' + (n === 1 ? '' : 's');
  };

  L.drawHeader = function () {
    var T = L.T, IX = L.IX, m = T.meta || {};
    var name = T.lecture || S.name, title = IX.title || name;
    $('title').textContent = title;
    $('lecture-name').textContent = title !== name ? name : '';
    document.title = (title !== name ? title + ' · ' + name : name) + ' · lectern';
    var b = $('status-badge'), failed = m.status === 'failed';
    if (m.status) {
      b.hidden = false;
      b.textContent = failed ? 'failed' : m.status;
      b.className = 'badge ' + (failed ? 'bad' : 'ok');
    }
    // Checks: how many passed and failed (and, where the lecture declared
    // exercises, how many its run never reached), the failed count a button
    // to the first failed check. The counts are the run's own (meta.checks,
    // what the console's last line and --grade's results say): a PASS step
    // folded from several ranks stands for all of them.
    var ck = IX.checks, cb = $('checks-badge'), n = L.checkCounts();
    if (n.passed + n.failed + (n.notReached || 0)) {
      cb.hidden = false;
      cb.className = 'badge checks ' + (n.failed || n.notReached ? 'bad' : 'ok');
      cb.innerHTML = 'checks: <span class="n-pass">' + n.passed + ' passed</span>, ' + (n.failed && ck.failed.length ?
        '<button type="button" class="to-step n-fail" data-step="' + ck.failed[0] + '" title="Go to the first failed check">' +
        n.failed + ' failed</button>' : '<span class="n-fail">' + n.failed + ' failed</span>') +
        (n.notReached != null ? ', <span class="n-unreached">' + n.notReached + ' not reached</span>' : '');
    }
    // Warnings (tensors left alive): a run that passed with them is not all
    // green; the count is a button to the first.
    var wn = IX.warnings, wb = $('warnings-badge');
    if (wn.length) {
      wb.hidden = false;
      wb.innerHTML = '<button type="button" class="to-step" data-step="' + wn[0] + '" title="Go to the first warning">' +
        wn.length + ' warning' + (wn.length > 1 ? 's' : '') + '</button>';
    }
    $('meta').textContent = L.metaLine();
    var dl = '';
    function row(k, v) { if (v != null && v !== '') dl += '<dt>' + esc(k) + '</dt><dd>' + esc(v) + '</dd>'; }
    row('status', m.status);
    if (n.passed + n.failed + (n.notReached || 0))
      row('checks', n.passed + ' passed, ' + n.failed + ' failed' + (n.notReached != null ? ', ' + n.notReached + ' not reached' : ''));
    if (IX.warnings.length) row('warnings', IX.warnings.length + ' (tensors left alive)');
    row('backend', m.backend);
    row('GPUs', m.gpus != null ? m.gpus + (m.gpu_names && m.gpu_names.length ? ' · ' + L.uniq(m.gpu_names).join(', ') : '') : null);
    row('host', m.host);
    row('started', m.start_time);
    row('duration', m.duration_s != null ? L.fmtSeconds(m.duration_s) : null);
    row('command', m.command);
    if (m.modelled_compute === true)
      row('modelled compute', L.modelledLine().replace('modelled compute: ', '') + ' (model_compute): ' +
        'figures that rest on them are modelled, not measured');
    var nf = Object.keys(T.files).length;
    row('trace', (S.via === 'file' ? '.json opened from this computer' : S.via === 'json' ? '.json' : '.js') + ', ' +
      T.steps.length + ' steps, ' + nf + ' file' + (nf === 1 ? '' : 's'));
    $('run-info').innerHTML = dl;
    // A failed run says so at the top, with a way to its first error.
    if (failed || IX.errors.length) {
      var ban = $('banner'), e = IX.errors[0];
      ban.hidden = false;
      ban.className = 'banner bad';
      ban.innerHTML = (failed ? '<strong>This run failed.</strong> ' : '') + (IX.errors.length ? IX.errors.length + ' error step' +
        (IX.errors.length > 1 ? 's' : '') + '. <button type="button" class="to-step" data-step="' + e + '">First: ' +
        esc(whereText(e)) + '</button>' : ck.failed.length ? n.failed + ' check' + (n.failed > 1 ? 's' : '') +
        ' failed. <button type="button" class="to-step" data-step="' + ck.failed[0] + '">First: ' + esc(whereText(ck.failed[0])) +
        '</button>' : 'The trace holds the steps up to the failure.') +
        // ?trace=NAME opened the newest run, which failed: the last good one is a link away.
        (failed && S.goodFile ? ' <span class="banner-good">This is the newest run; <a href="index.html?trace=' +
          encodeURIComponent(S.goodFile) + '">the last run that passed</a> is kept too.</span>' : '');
    }
    // Without DOMPurify notes are shown as their markdown text: say why.
    if (!window.lecternSafe.ready()) {
      $('notice').hidden = false;
      $('notice').textContent = 'Notes are shown as plain markdown: DOMPurify, which checks their HTML before it ' +
        'enters the page, is not installed (run npm ci).';
    }
    var tabs = '';
    IX.files.forEach(function (p) {
      tabs += '<button type="button" role="tab" class="tab" aria-selected="false" tabindex="-1" data-path="' + esc(p) + '" title="' +
        esc(p) + '">' + esc(L.basename(p)) + '</button>';
    });
    $('file-tabs').innerHTML = tabs;
    $('file-tabs').hidden = IX.files.length < 2;
    if (T.spawns.length) {
      $('rank-filter-wrap').hidden = false;
      $('spawn-panel').hidden = false;
      var sel = $('rank-filter');
      IX.ranks.forEach(function (r) {
        var o = document.createElement('option');
        o.value = String(r);
        o.textContent = 'rank ' + r;
        sel.appendChild(o);
      });
    }
    $('scrub').max = T.steps.length;
    drawOutline();
    drawSpawns();
  };

  function whereText(i) {
    var s = L.T.steps[i], f = s.stack[s.stack.length - 1];
    return (s.rank != null ? 'rank ' + s.rank + ' · ' : '') + L.loc(f) + (f.function ? ' (' + f.function + ')' : '');
  }

  // ---------------------------------------------------- the current step

  L.syncUI = function (opts) {
    var T = L.T, i = S.cur, s = T.steps[i], n = T.steps.length;
    $('pos').textContent = 'step ' + (i + 1) + ' / ' + n;
    var sc = $('scrub');
    sc.value = i + 1;
    sc.setAttribute('aria-valuetext', 'step ' + (i + 1) + ' of ' + n);
    sc.style.setProperty('--p', (n > 1 ? (i / (n - 1)) * 100 : 100) + '%');
    $('time').textContent = typeof s.time === 'number' ? 't = ' + L.fmtSeconds(s.time) : '';
    drawStack();
    if (L.drawVars) L.drawVars();   // vars.js: the frame's inspected variables
    if (L.drawLinks) L.drawLinks();   // links.js: the messages and collectives after this step
    if (L.drawMoment) L.drawMoment();   // moment.js: every rank of the spawn at one moment
    if (L.diffActive()) L.drawDiffPanel();   // diff.js: what differs from the other run here
    markSpawns();
    markOutline();
    $('btn-prev').disabled = $('btn-first').disabled = L.navTarget('prev') < 0;
    $('btn-next').disabled = $('btn-last').disabled = L.navTarget('next') < 0;
    $('btn-over').disabled = L.navTarget('over') < 0;
    $('btn-out').disabled = L.navTarget('out') < 0;
    var f = s.stack[s.stack.length - 1];
    L.announce('Step ' + (i + 1) + ' of ' + n + (s.rank != null ? ', rank ' + s.rank : '') + ', ' + L.basename(f.path) +
      ' line ' + f.line + (f.function ? ', in ' + f.function : ''));
    L.queueUrl(!opts || opts.history !== false);
  };

  function drawStack() {
    var T = L.T, s = T.steps[S.cur], st = s.stack, D = s.rank != null ? L.IX.spawnDepth[S.cur] : 0, h = '';
    for (var d = st.length - 1; d >= 0; d--) {
      var f = st[d], isRank = s.rank != null && d >= D;
      h += '<li class="frame-li' + (d === st.length - 1 ? ' inner' : '') + (isRank ? ' in-rank' : '') + '"' +
        (isRank ? ' style="--rc:' + L.rankColor(s.rank) + '"' : '') + '>' +
        '<button type="button" class="frame" data-path="' + esc(f.path) + '" data-line="' + f.line + '" title="' +
        esc(L.loc(f)) + '"><span class="fn">' + esc(f.function || '?') + '</span> <span class="where">' +
        esc(L.basename(f.path)) + ':' + f.line + '</span></button></li>';
      if (s.rank != null && d === D) {
        var sp = T.spawns[s.spawn];
        h += '<li class="spawn-sep" style="--rc:' + L.rankColor(s.rank) + '"><span class="chip" style="--rc:' +
          L.rankColor(s.rank) + '">rank ' + s.rank + '</span> spawned · ' +
          esc(s.world_size != null ? s.world_size : sp.world_size) + ' ranks' + (sp.backend ? ' · ' + esc(sp.backend) : '') + '</li>';
      }
    }
    $('stack').innerHTML = h;
  }

  // ------------------------------------------------------------- outline

  // The headings of the lecture's notes, two levels of them: sections, and
  // subsections shown under the current section only. A heading made again
  // and again (in a loop) is one entry. Moving the step touches only the
  // entries that change.
  var OL = null;

  function drawOutline() {
    var T = L.T, hs = L.IX.headings, wrap = $('outline-panel');
    OL = { steps: [], item: [], top: [], first: [], last: [], cur: -1, open: -1 };
    if (!hs.length) { wrap.hidden = true; return; }
    wrap.hidden = false;
    var top = Math.min.apply(null, hs.map(function (x) { return x.level; }));
    // A single top heading is the lecture's title: the outline starts below it.
    var skip = hs.filter(function (x) { return x.level === top; }).length === 1 && hs.length > 1 ? 1 : 0;
    var base = top + skip, h = '', seen = Object.create(null), n = -1, lastTop = -1;
    hs.forEach(function (x) {
      if (x.level < base) return;
      var f = T.steps[x.step].stack[T.steps[x.step].stack.length - 1], key = f.path + ':' + f.line + ':' + x.text, e;
      if (x.level <= base + 1 && !(key in seen)) {
        e = seen[key] = ++n;
        var sub = x.level > base;
        OL.top.push(sub ? lastTop : n);
        if (!sub) { lastTop = n; OL.first[n] = n + 1; }
        if (lastTop >= 0) OL.last[lastTop] = n;
        h += '<li class="ol-l' + (sub ? 1 : 0) + '"' + (sub && lastTop >= 0 ? ' hidden' : '') + '><button type="button" class="to-step ol-item" ' +
          'data-step="' + x.step + '">' + esc(x.text) + '</button></li>';
      } else {
        e = key in seen ? seen[key] : n;     // deeper headings count for the entry above them
      }
      if (e >= 0) { OL.steps.push(x.step); OL.item.push(e); }
    });
    $('outline').innerHTML = h;
    OL.els = $('outline').children;
  }

  function markOutline() {
    if (!OL || !OL.steps.length) return;
    var p = L.lowerBound(OL.steps, S.cur + 1) - 1, e = p >= 0 ? OL.item[p] : -1;
    if (e === OL.cur) return;
    var els = OL.els, q;
    if (OL.cur >= 0) { els[OL.cur].classList.remove('cur'); els[OL.cur].firstChild.removeAttribute('aria-current'); }
    OL.cur = e;
    var open = e >= 0 ? OL.top[e] : -1;
    if (open !== OL.open) {
      if (OL.open >= 0) for (q = OL.first[OL.open]; q <= OL.last[OL.open]; q++) els[q].hidden = true;
      if (open >= 0) for (q = OL.first[open]; q <= OL.last[open]; q++) els[q].hidden = false;
      OL.open = open;
    }
    if (e < 0) return;
    var cur = els[e], ol = $('outline');
    cur.classList.add('cur');
    cur.firstChild.setAttribute('aria-current', 'true');
    // Keep the current entry in the outline's view (the outline scrolls on its own).
    if (!ol.hidden && ol.scrollHeight > ol.clientHeight) {
      var top = cur.offsetTop - ol.offsetTop;
      if (top < ol.scrollTop || top + cur.offsetHeight > ol.scrollTop + ol.clientHeight)
        ol.scrollTop = Math.max(0, top - ol.clientHeight / 3);
    }
  }
  L.resetOutline = function () { OL = null; };

  // -------------------------------------------------------------- spawns

  function drawSpawns() {
    var T = L.T, IX = L.IX;
    if (!T.spawns.length) return;
    var h = '<ul class="spawn-list">';
    T.spawns.forEach(function (sp, k) {
      var top = sp.stack[sp.stack.length - 1], ws = sp.world_size != null ? sp.world_size : (IX.spawnRanks[k] || []).length;
      var fn = sp.stack.length ? sp.stack[sp.stack.length - 1].function : 'spawn';
      h += '<li data-spawn="' + k + '"><button type="button" class="frame sp-frame" data-path="' + esc(top.path) +
        '" data-line="' + top.line + '"><span class="fn">' + esc(fn || 'spawn') + '</span> <span class="where">' +
        esc(L.basename(top.path)) + ':' + top.line + '</span></button><div class="sp-facts"><b>' + esc(ws) + '</b> rank' +
        (ws == 1 ? '' : 's') + ' · ' + esc(sp.backend || (T.meta && T.meta.backend) || '?') +
        (sp.seconds != null ? ' · ' + esc(L.fmtSeconds(sp.seconds)) : '') + ' · ' + IX.spawnSteps[k].length + ' steps' +
        (sp.status ? ' · ' + esc(L.spawnStatus(sp).text) : '') + '</div></li>';
    });
    h += '</ul><div class="legend" role="group" aria-label="Show one rank">';
    IX.ranks.forEach(function (r) {
      h += '<button type="button" class="chip rank-b" data-rank="' + r + '" style="--rc:' + L.rankColor(r) +
        '" aria-pressed="false">rank ' + r + '</button>';
    });
    $('spawn-info').innerHTML = h + '</div>';
  }

  function markSpawns() {
    var T = L.T;
    if (!T.spawns.length) return;
    var s = T.steps[S.cur], k = s.rank != null ? s.spawn : L.IX.noteSpawn[S.cur];
    var lis = $('spawn-info').querySelectorAll('.spawn-list li');
    for (var q = 0; q < lis.length; q++) lis[q].classList.toggle('cur', +lis[q].getAttribute('data-spawn') === k);
    var bs = $('spawn-info').querySelectorAll('.rank-b');
    for (q = 0; q < bs.length; q++) bs[q].setAttribute('aria-pressed', String(S.rank === +bs[q].getAttribute('data-rank')));
  }

  // ---------------------------------------------------------------- help

  L.openHelp = function () {
    var d = $('help');
    if (d.showModal) d.showModal(); else d.setAttribute('open', '');
    $('help-close').focus();
  };

  L.toggleOutline = function (btn) {
    var open = btn.getAttribute('aria-expanded') !== 'true';
    btn.setAttribute('aria-expanded', String(open));
    $('outline').hidden = !open;
  };
})();
