/* lectern viewer, predict: predict(question, measured, unit)'s questions.
 *
 * A "predict" rendering (docs/trace-format.md) is a question whose answer
 * the lecture measured just before asking it. It is drawn, wherever it
 * appears (in place of its line, in a rank's column, in read mode), as the
 * question, a number field labelled "Your answer (unit)" and a Reveal
 * button; the measured value stays out of the page until the reader
 * reveals it, with the button or with Enter in the field (with or without
 * an answer). The result then says how close the answer was, in a
 * polite live region so that a screen reader reads it out:
 *
 *     measured 12.3 GB/s; your answer 10 is 19% low
 *
 * The source pane draws its lines again as they scroll, so what the reader
 * typed and revealed is kept here, per step and rendering, and each drawing
 * starts from it. It is kept for the page's session (sessionStorage, when
 * the browser allows it; memory otherwise) and goes nowhere else.
 */
(function () {
  'use strict';

  var L = window.lectern, SAFE = window.lecternSafe, esc = L.esc;
  var seq = 0;               // ids of the drawn elements, unique in the page
  var mem = {};              // key -> {a: answer text, shown: revealed?}

  // ------------------------------------------------------------- numbers

  // The measured value as a reader wants it: integers whole, others to 4
  // significant digits, very small or large ones with an exponent.
  function fmt(v) {
    if (typeof v !== 'number' || !isFinite(v)) return '?';
    if (Number.isInteger(v) && Math.abs(v) < 1e15) return String(v);
    var a = Math.abs(v);
    if (a < 1e-4 || a >= 1e15) return v.toExponential(3).replace(/\.?0+e/, 'e').replace('e+', 'e');
    return String(+v.toPrecision(4));
  }
  L.predictFmt = fmt;

  // How far answer a is from the measured m, in words.
  function closeness(a, m) {
    var d = a - m;
    if (d === 0) return 'is exactly right';
    if (m === 0) return 'is ' + fmt(Math.abs(d)) + (d > 0 ? ' too high' : ' too low');
    var ratio = a / m;
    if (ratio >= 2) return 'is ' + String(+ratio.toPrecision(2)) + ' times too high';
    if (ratio > 0 && ratio <= 0.5) return 'is ' + String(+(m / a).toPrecision(2)) + ' times too low';
    var pct = Math.round(Math.abs(d) / Math.abs(m) * 100);
    if (pct === 0) return 'is within 0.5%';
    return 'is ' + pct + '% ' + (d > 0 ? 'high' : 'low');
  }

  // The result line for rendering r and the answer's text (maybe empty).
  L.predictResult = function (r, text) {
    var unit = typeof r.unit === 'string' && r.unit ? ' ' + r.unit : '';
    var out = 'measured ' + fmt(r.value) + unit;
    var t = String(text == null ? '' : text).trim(), a = t === '' ? NaN : Number(t);
    if (isFinite(a)) out += '; your answer ' + t + ' ' + closeness(a, r.value);
    else if (t !== '') out += '; your answer "' + t + '" is not a number';
    return out;
  };

  // -------------------------------------------------------------- memory

  function key(i, j) {
    var T = L.T, m = T && T.meta || {};
    return 'lectern-predict:' + (T && T.lecture || '') + ':' + (m.start_time || '') + ':' + i + ':' + j;
  }
  function load(i, j) {
    var k = key(i, j);
    if (mem[k]) return mem[k];
    var st = { a: '', shown: false };
    try {
      var got = JSON.parse(window.sessionStorage.getItem(k) || 'null');
      if (got && typeof got === 'object') st = { a: typeof got.a === 'string' ? got.a : '', shown: got.shown === true };
    } catch (e) { /* no storage (file:// in some browsers): memory only */ }
    return (mem[k] = st);
  }
  function save(i, j, st) {
    var k = key(i, j);
    mem[k] = st;
    try { window.sessionStorage.setItem(k, JSON.stringify(st)); } catch (e) { /* memory only */ }
  }

  // ----------------------------------------------------------- rendering

  L.predictHTML = function (r, i, j) {
    var st = load(i, j), id = 'pr' + (++seq);
    var q = typeof r.html === 'string' ? SAFE.html(r.html) : null;
    var unit = typeof r.unit === 'string' && r.unit ? ' (' + esc(r.unit) + ')' : '';
    return '<div class="r-predict' + (st.shown ? ' revealed' : '') + '" data-s="' + i + '" data-r="' + j + '">' +
      '<div class="pr-q" id="' + id + '-q"><span class="pr-kw">Predict</span>' +
      (q !== null ? '<div class="r-md">' + q + '</div>' : '<div class="r-md r-plain">' + esc(r.question == null ? '' : r.question) + '</div>') +
      '</div><div class="pr-row"><label class="pr-label" for="' + id + '-a">Your answer' + unit + '</label> ' +
      '<input type="number" step="any" class="pr-answer" id="' + id + '-a" aria-describedby="' + id + '-q" value="' +
      esc(st.a) + '"> <button type="button" class="pr-reveal"' + (st.shown ? ' hidden' : '') + '>Reveal' +
      '<span class="sr-only"> the measured value</span></button></div>' +
      '<p class="pr-result" aria-live="polite">' + (st.shown ? esc(L.predictResult(r, st.a)) : '') + '</p></div>';
  };

  // Reveals (again, with the answer as it is now) the rendering drawn in box.
  function reveal(box, fromButton) {
    var i = +box.getAttribute('data-s'), j = +box.getAttribute('data-r');
    var s = L.T && L.T.steps[i], r = s && s.renderings[j];
    if (!r) return;
    var inp = box.querySelector('.pr-answer'), st = { a: inp ? inp.value : '', shown: true };
    // A number field holds "" while its text is not a number.
    if (inp && inp.validity && inp.validity.badInput) st.a = '';
    save(i, j, st);
    var text = L.predictResult(r, st.a);
    var all = document.querySelectorAll('.r-predict[data-s="' + i + '"][data-r="' + j + '"]');
    for (var k = 0; k < all.length; k++) {
      var b = all[k], other = b.querySelector('.pr-answer');
      b.classList.add('revealed');
      if (other && other !== inp) other.value = st.a;
      var btn = b.querySelector('.pr-reveal');
      if (btn) btn.hidden = true;
      b.querySelector('.pr-result').textContent = text;
    }
    // The button is gone: the focus goes to the answer, where Enter compares again.
    if (fromButton && inp) inp.focus({ preventScroll: true });
  }

  function remember(inp) {
    var box = inp.closest('.r-predict');
    if (!box) return;
    var i = +box.getAttribute('data-s'), j = +box.getAttribute('data-r'), st = load(i, j);
    save(i, j, { a: inp.value, shown: st.shown });
  }

  document.addEventListener('click', function (e) {
    var b = e.target.closest && e.target.closest('.pr-reveal');
    if (b) reveal(b.closest('.r-predict'), true);
  });
  document.addEventListener('keydown', function (e) {
    var inp = e.target.closest && e.target.closest('.pr-answer');
    if (!inp || e.key !== 'Enter') return;
    e.preventDefault();
    reveal(inp.closest('.r-predict'), false);
  });
  document.addEventListener('input', function (e) {
    if (e.target.classList && e.target.classList.contains('pr-answer')) remember(e.target);
  });
})();
