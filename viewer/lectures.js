/* lectern viewer, lectures: the index page shown when no trace is named.
 *
 * viewer/index.html with no ?trace= lists every lecture whose trace is in
 * traces/: its title, its first lines, when and on what machine its trace
 * was made. The list comes from traces/index.js, which
 * scripts/trace_index.py writes after each `make run` (a page opened from
 * file:// can load a script but not read a folder). Everything in it is
 * shown as text, never as HTML.
 */
(function () {
  'use strict';

  var L = window.lectern, $ = L.$, esc = L.esc;

  function machine(e) {
    var parts = [];
    if (e.host) parts.push(e.host);
    if (typeof e.gpus === 'number') parts.push(e.gpus === 1 ? '1 GPU' : e.gpus + ' GPUs');
    if (e.backend && e.backend !== 'none') parts.push(e.backend);
    return parts.join(' · ');
  }

  function when(iso) {
    var d = iso ? new Date(iso) : null;
    if (!d || isNaN(d.getTime())) return '';
    return d.toISOString().slice(0, 16).replace('T', ' ') + ' UTC';
  }

  function entryHtml(e) {
    var name = String(e.name);
    var facts = [when(e.start_time), machine(e),
                 typeof e.duration_s === 'number' ? 'ran ' + L.fmtSeconds(e.duration_s) : '',
                 typeof e.steps === 'number' ? e.steps + ' steps' : ''].filter(Boolean);
    return '<li class="lecture-entry">' +
      '<h2><a href="index.html?trace=' + encodeURIComponent(name) + '">' + esc(e.title || name) + '</a></h2>' +
      '<p class="lecture-file"><code>lectures/' + esc(name) + '.c</code></p>' +
      (e.summary ? '<p class="lecture-summary">' + esc(e.summary) + '</p>' : '') +
      '<p class="lecture-facts">Trace of ' + esc(facts.join(' · ')) + '</p>' +
      (e.failed_run ? '<p class="lecture-failed">A later run failed: <a href="index.html?trace=' +
        encodeURIComponent(name + '.failed') + '">its trace up to the failure</a>.</p>' : '') +
      '</li>';
  }

  function show(index) {
    var list = index && Array.isArray(index.lectures) ? index.lectures.filter(function (e) {
      return e && typeof e.name === 'string' && /^[A-Za-z0-9_.\-]+$/.test(e.name);
    }) : [];
    if (!list.length) return false;
    document.body.classList.remove('loading');
    document.body.classList.add('index-page');
    document.title = 'lectern: lectures';
    $('title').textContent = 'Lectures';
    var box = $('lecture-index');
    box.innerHTML = '<p class="index-intro">Each lecture is a C program in <code>lectures/</code>; running it ' +
      '(<code>make run LECTURE=name</code>, or <code>make run LECTURE=all</code>) writes the trace opened here.</p>' +
      '<ol class="lecture-list">' + list.map(entryHtml).join('') + '</ol>';
    box.hidden = false;
    $('step-view').hidden = true;
    $('read').hidden = true;
    document.querySelector('.controls').hidden = true;
    $('side').hidden = true;
    // Of the header's actions only "Open trace…" and the help mean anything here.
    ['btn-mode-step', 'btn-mode-read', 'btn-raw', 'btn-live'].forEach(function (id) { $(id).hidden = true; });
    L.api.index = list.map(function (e) { return e.name; });
    L.api.ready = true;
    return true;
  }

  // Shows the index, or calls fallback() when there is none to show.
  L.showIndex = function (fallback) {
    L.loadScript(L.ROOT + 'traces/index.js', function () {
      if (!show(window.lecternIndex)) fallback();
    }, fallback);
  };
})();
