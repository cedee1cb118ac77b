/* lectern viewer, trace: reading a trace and checking it.
 *
 * Three ways in:
 *   ?trace=NAME      ../traces/local/NAME.js (what `make run` wrote), else
 *                    ../traces/NAME.js (the trace the repository ships), from
 *                    file:// (a page on disk cannot fetch(), it can load a
 *                    script); the .json twins over http (read as data);
 *   ?trace=PATH      that .js or .json file: only on the page's own origin
 *                    over http, only a file on disk from file://;
 *   a .json file     picked with "Open trace…" or dropped on the page, read
 *                    with FileReader: data, never run. The safe way to open
 *                    a trace from someone else, and it works from file://.
 * A .js trace is a script: opening one runs it (docs/trace-format.md).
 */
(function () {
  'use strict';

  var L = window.lectern, S = L.S;

  L.params = function () {
    var p = new URLSearchParams(location.search);
    return { trace: p.get('trace'), step: p.get('step'), rank: p.get('rank'), mode: p.get('mode'),
             code: p.get('code'), live: p.get('live'),
             diff: p.get('diff'), rtol: p.get('rtol') };
  };

  var SCHEME = /^[a-z][a-z0-9+.\-]*:/i;

  function traceSource(arg) {
    var isPath = /\.(js|json)$/i.test(arg) || arg.indexOf('/') >= 0 || SCHEME.test(arg);
    // By name: the trace `make run` wrote (traces/local/, not tracked), else
    // the one the repository ships (traces/).
    if (!isPath) return { key: arg, js: L.ROOT + 'traces/local/' + arg + '.js', json: L.ROOT + 'traces/local/' + arg + '.json',
                          fallback: { key: arg, js: L.ROOT + 'traces/' + arg + '.js', json: L.ROOT + 'traces/' + arg + '.json' } };
    var base = L.basename(arg).replace(/\.(js|json)$/i, '');
    if (/\.json$/i.test(arg)) return { key: base, js: null, json: arg };
    return { key: base, js: arg.replace(/\.js$/i, '') + '.js', json: null };
  }

  // Why the address a ?trace= names may not be read, or null. Over http only
  // the page's own origin: a link must not make the page show (or, for a
  // .js, run) a stranger's file on the student's server. From file:// only
  // files on disk.
  function refused(where) {
    var u;
    try { u = new URL(where, location.href); } catch (e) { return 'it is not an address the viewer can read'; }
    var http = /^https?:$/.test(location.protocol);
    if (http && u.origin !== location.origin)
      return 'it is not on this page\'s own site (' + location.origin + '): over http the viewer reads traces ' +
        'only from the site that serves it';
    if (!http && u.protocol !== location.protocol)
      return 'it is not a file on this computer (' + u.protocol + '): a page opened from disk reads traces only from disk';
    return null;
  }

  function loadViaScript(src, key, done) {
    var before = window.lecternTraces ? Object.keys(window.lecternTraces) : [];
    var syntaxError = null;
    // A syntax error in the script is reported to window.onerror, not to the
    // script element; catch it so the page can say what went wrong. From
    // file:// the browser hides the details ("Script error.", no file name):
    // say so, and how to see them.
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
    L.loadScript(src, function () {
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
      done(null, src, 'the file could not be read: it is missing, or the path is wrong.', true);
    });
  }

  // The trace a ?trace= names: done(trace, file, problem). A name is looked
  // for in traces/local/ first; when that file is missing, in traces/. In
  // each folder the newest run wins: NAME.failed (a run that failed writes
  // it and leaves NAME alone; a good run deletes it) when it is there and
  // not older than NAME, with S.goodFile set to NAME's file when there is
  // one, so the banner can link the last good run.
  L.loadTrace = function (arg, done) {
    var src = traceSource(arg);
    if (!src.fallback) return loadFrom(src, arg, done);
    newestIn(src, arg, function (t, file, problem, missing) {
      if (!t && missing) return newestIn(src.fallback, arg, done);
      done(t, file, problem);
    });
  };

  function failedTwin(src) {
    return { key: src.key + '.failed', js: src.js.replace(/\.js$/, '.failed.js'),
             json: src.json.replace(/\.json$/, '.failed.json') };
  }

  function started(t) {
    var s = t && t.meta && t.meta.start_time, d = s ? Date.parse(s) : NaN;
    return isNaN(d) ? -Infinity : d;
  }

  function newestIn(src, arg, done) {
    S.goodFile = null;
    loadFrom(src, arg, function (good, goodFile, goodProblem, goodMissing) {
      loadFrom(failedTwin(src), arg, function (bad, badFile, badProblem, badMissing) {
        if (bad && (!good || started(bad) > started(good))) {
          S.name = src.key;
          if (good) S.goodFile = goodFile;
          return done(bad, badFile);
        }
        S.name = src.key;
        if (good || !goodMissing) return done(good, goodFile, goodProblem, goodMissing);
        if (!badMissing) return done(bad, badFile, badProblem);
        done(null, goodFile, goodProblem, true);
      });
    });
  }

  function loadFrom(src, arg, done) {
    S.name = src.key;
    var http = /^https?:$/.test(location.protocol);
    var useJson = src.json && (http || !src.js);
    var no = refused(useJson ? src.json : src.js);
    if (no) return done(null, arg, 'Refused: ' + no + '. To look at a trace from elsewhere, save its .json file ' +
      'and open it with "Open trace…".');
    if (useJson && !http) return done(null, src.json, 'a .json trace cannot be read from file:// by its address ' +
      '(the browser forbids it): open it with "Open trace…" or drop it on the page, or serve the page with make view.');
    if (useJson) {
      // Over http the trace is read as data, never as a script.
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
        done(null, src.json, 'the file could not be read' + (e && e.status ? ' (HTTP ' + e.status + ')' : '') + '.', e && e.status === 404);
      });
      return;
    }
    S.via = 'script';
    loadViaScript(src.js, src.key, done);
  }

  // A file picked or dropped: read as text, parsed as JSON.
  L.readTraceFile = function (f, done) {
    S.name = String(f.name).replace(/\.json$/i, '');
    if (!/\.json$/i.test(f.name)) {
      return done(null, f.name, /\.js$/i.test(f.name) ?
        'A .js trace is a script: opening it here would mean running it. Open its .json twin instead.' :
        'Only a .json trace opens here.');
    }
    var rd = new FileReader();
    rd.onload = function () {
      var t;
      try { t = JSON.parse(rd.result); } catch (e) { return done(null, f.name, 'the file is not valid JSON: ' + e.message); }
      S.via = 'file';
      done(t, f.name);
    };
    rd.onerror = function () { done(null, f.name, 'the file could not be read' + (rd.error ? ': ' + rd.error.message : '.')); };
    rd.readAsText(f);
  };

  // Checks what the viewer relies on and names the first problems found.
  L.validate = function (t) {
    var errs = [], more = 0, isInt = L.isInt;
    function err(m) { if (errs.length < 8) errs.push(m); else more++; }
    if (!t || typeof t !== 'object' || Array.isArray(t)) return ['the trace is not a JSON object'];
    if (t.version !== 1) err('"version" is ' + JSON.stringify(t.version) + ', this viewer reads version 1');
    if (!t.files || typeof t.files !== 'object' || Array.isArray(t.files)) err('"files" (path -> source text) is missing');
    if (!Array.isArray(t.steps)) { err('"steps" is missing or not a list'); return errs; }
    if (t.spawns != null && !Array.isArray(t.spawns)) err('"spawns" is not a list');
    var nsp = Array.isArray(t.spawns) ? t.spawns.length : 0;
    for (var k = 0; k < nsp; k++) {
      var sp = t.spawns[k];
      if (!sp || !Array.isArray(sp.stack) || !sp.stack.length) err('spawns[' + k + '].stack is missing or empty');
      else if (sp.stack.some(function (f) { return !f || typeof f.path !== 'string' || !isInt(f.line); }))
        err('spawns[' + k + '].stack has a frame without a path or line');
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
  };
})();
