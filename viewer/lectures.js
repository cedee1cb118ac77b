/* lectern viewer, lectures: the index page shown when no trace is named.
 *
 * viewer/index.html with no ?trace= lists every lecture whose trace is in
 * traces/: its title, its first lines, when and on what machine its trace
 * was made. The lists come from traces/local/index.js (the lectures run
 * here: `make run` writes there and scripts/trace_index.py lists them) and
 * traces/index.js (the traces the repository ships); a page opened from
 * file:// can load a script but not read a folder. A lecture in both is
 * listed once, with the local run, as ?trace=NAME opens it. Everything in
 * the lists is shown as text, never as HTML.
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

  // "Sitting 5", or "Sittings 3 (Part 1) and 6 (Part 2)": the classes of
  // the course that read it (scripts/trace_index.py, docs/course.md).
  function sittings(e) {
    var list = Array.isArray(e.sittings) ? e.sittings.filter(function (s) {
      return s && typeof s.n === 'number' && isFinite(s.n);
    }) : [];
    if (!list.length) return '';
    var each = list.map(function (s) {
      return String(s.n) + (typeof s.part === 'string' && s.part ? ' (' + s.part + ')' : '');
    });
    return (list.length === 1 ? 'Sitting ' : 'Sittings ') +
      (each.length > 1 ? each.slice(0, -1).join(', ') + ' and ' + each[each.length - 1] : each[0]) + ' of the course';
  }

  function entryHtml(e) {
    var name = String(e.name);
    var facts = [when(e.start_time), machine(e),
                 typeof e.duration_s === 'number' ? 'ran ' + L.fmtSeconds(e.duration_s) : '',
                 typeof e.steps === 'number' ? e.steps + ' steps' : ''].filter(Boolean);
    return '<li class="lecture-entry">' +
      '<h2><a href="index.html?trace=' + encodeURIComponent(name) + '">' + esc(e.title || name) + '</a></h2>' +
      (sittings(e) ? '<p class="lecture-sitting">' + esc(sittings(e)) + '</p>' : '') +
      '<p class="lecture-file"><code>lectures/' + esc(name) + '.c</code></p>' +
      (e.summary ? '<p class="lecture-summary">' + esc(e.summary) + '</p>' : '') +
      '<p class="lecture-facts">' + (e.local ? 'Your run: ' : 'Trace of ') + esc(facts.join(' · ')) + '</p>' +
      (e.has_good === false ? '<p class="lecture-failed"><span class="state bad">failed</span> Its only run ' +
        'failed: the link opens its trace up to the failure.</p>' :
       e.failed_run ? '<p class="lecture-failed"><span class="state bad">failed</span> Its newest run failed: ' +
        'the link opens it, up to the failure (the last run that passed is linked from its banner).</p>' : '') +
      '</li>';
  }

  function entries(index) {
    return index && Array.isArray(index.lectures) ? index.lectures.filter(function (e) {
      return e && typeof e.name === 'string' && /^[A-Za-z0-9_.\-]+$/.test(e.name);
    }) : [];
  }

  // A local run replaces the shipped trace of the same name. Listed in the
  // series' reading order ("order", scripts/trace_index.py), then by name.
  function readingOrder(e) {
    return typeof e.order === 'number' && isFinite(e.order) ? e.order : Infinity;
  }

  function merge(local, shipped) {
    var seen = {}, list = [];
    entries(local).forEach(function (e) { e.local = true; seen[e.name] = 1; list.push(e); });
    entries(shipped).forEach(function (e) { if (!seen[e.name]) list.push(e); });
    return list.sort(function (a, b) {
      var oa = readingOrder(a), ob = readingOrder(b);
      if (oa !== ob) return oa < ob ? -1 : 1;
      return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
    });
  }

  function show(list) {
    if (!list.length) return false;
    document.body.classList.remove('loading');
    document.body.classList.add('index-page');
    document.title = 'lectern: lectures';
    $('title').textContent = 'Lectures';
    var box = $('lecture-index');
    box.innerHTML = '<p class="index-intro">Each lecture is a C program in <code>lectures/</code>; running it ' +
      '(<code>make run LECTURE=name</code>, or <code>make run LECTURE=all</code>) writes the trace opened here. ' +
      'They are listed in the order a course reads them, one sitting (class) each, lecture_08 in two ' +
      '(<code>docs/course.md</code>).</p>' +
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
    // Each index.js sets window.lecternIndex: take it before the next loads.
    function take(then) {
      return function () { var x = window.lecternIndex; window.lecternIndex = null; then(x); };
    }
    L.loadScript(L.ROOT + 'traces/local/index.js', take(function (local) {
      L.loadScript(L.ROOT + 'traces/index.js', take(function (shipped) {
        if (!show(merge(local, shipped))) fallback();
      }), take(function () { if (!show(merge(local, null))) fallback(); }));
    }), take(function () {
      L.loadScript(L.ROOT + 'traces/index.js', take(function (shipped) {
        if (!show(merge(null, shipped))) fallback();
      }), fallback);
    }));
  };
})();
