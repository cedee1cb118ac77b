/* lectern viewer: a trace is data, never code.
 *
 * Traces travel: a classmate's homework, a published lecture, a file attached
 * to a question. Whoever wrote one can put anything in it, so everything a
 * trace carries goes into the page through this file:
 *
 *   - a note's HTML (md4c's rendering of its markdown) goes through DOMPurify
 *     with an allow-list of exactly what md4c produces: headings, paragraphs,
 *     lists, tables, code, emphasis, links, images. Scripts, event handlers,
 *     iframe, object, style, SVG and MathML never get through;
 *   - every address (a link in a note, an image in a note, a link or image
 *     rendering) is kept only when it is http:, https:, a relative path or a
 *     '#' anchor. javascript:, data:, file: and the rest are dropped;
 *   - everything else (text renderings, file names, function names, errors)
 *     is escaped as text by the code that draws it, with esc() below.
 *
 * DOMPurify is an npm package (npm ci) loaded from ../node_modules like the
 * viewer's other libraries. Where it is missing, notes are shown as their
 * plain markdown text, never as unchecked HTML.
 *
 * Exposes window.lecternSafe = { esc, url, html, ready }.
 */
(function () {
  'use strict';

  var ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  function esc(s) { return String(s).replace(/[&<>"']/g, function (c) { return ESC[c]; }); }

  // What a URL parser ignores (leading and trailing spaces and control
  // characters, tabs and newlines anywhere) or what could hide a scheme:
  // removed before the check so that "java\tscript:" reads as "javascript:".
  var IGNORED = /[\u0000-\u0020\u007f-\u009f\u00a0\u1680\u180e\u2000-\u2029\u205f\u3000\ufeff]/g;
  var SCHEME = /^[a-z][a-z0-9+.\-]*:/i;

  // The address to use, or null when it is not one a trace may carry:
  // http:, https:, '#...', or a relative path (not '//host/...', which names
  // another host: from file:// that can be a network share).
  function url(u) {
    if (typeof u !== 'string') return null;
    var v = u.replace(IGNORED, '');
    if (v === '') return null;
    if (/^https?:/i.test(v)) return u;
    if (SCHEME.test(v)) return null;
    if (/^[\/\\]{2}/.test(v)) return null;
    return u;
  }

  // What md4c writes (CommonMark + GitHub tables, strikethrough, task lists,
  // autolinks) and nothing else.
  var TAGS = ['h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'p', 'br', 'hr', 'em', 'strong', 'del', 'u', 'code', 'pre',
              'blockquote', 'ul', 'ol', 'li', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'a', 'img', 'input'];
  var ATTRS = ['href', 'title', 'src', 'alt', 'align', 'start', 'class', 'type', 'checked', 'disabled'];
  // md4c's classes: a code block's language, task list items. Any other class
  // could borrow the viewer's own look (an error box, a hidden element).
  var CLASS_OK = /^(language-[A-Za-z0-9_+#.-]+|task-list-item|task-list-item-checkbox)$/;

  var purifier = null;
  function purify() {
    if (purifier !== null) return purifier;
    var D = window.DOMPurify;
    if (!D || typeof D !== 'function' || !D.isSupported) return (purifier = false);
    // Our own instance, so that these hooks touch no other user of DOMPurify.
    purifier = D(window);
    purifier.addHook('uponSanitizeAttribute', function (node, ev) {
      var name = ev.attrName, v = ev.attrValue;
      if (name === 'href' || name === 'src') {
        if (url(v) === null) ev.keepAttr = false;
      } else if (name === 'class') {
        var ok = String(v).split(/\s+/).filter(function (c) { return CLASS_OK.test(c); });
        if (ok.length) ev.attrValue = ok.join(' '); else ev.keepAttr = false;
      } else if (name === 'align') {
        if (!/^(left|center|right)$/i.test(v)) ev.keepAttr = false;
      } else if (name === 'type' || name === 'checked' || name === 'disabled') {
        if (node.nodeName !== 'INPUT' || (name === 'type' && String(v).toLowerCase() !== 'checkbox')) ev.keepAttr = false;
      }
    });
    // Set once: sanitize() then skips reading the configuration on every call.
    purifier.setConfig(CONFIG);
    purifier.addHook('afterSanitizeAttributes', function (node) {
      // A task list's box: shown, never used.
      if (node.nodeName === 'INPUT') { node.setAttribute('type', 'checkbox'); node.setAttribute('disabled', ''); }
    });
    return purifier;
  }

  var CONFIG = {
    ALLOWED_TAGS: TAGS,
    ALLOWED_ATTR: ATTRS,
    ALLOW_DATA_ATTR: false,
    ALLOW_ARIA_ATTR: false,
    ALLOW_UNKNOWN_PROTOCOLS: false,
    // Belt and braces: named even though the allow-list leaves them out.
    FORBID_TAGS: ['script', 'style', 'iframe', 'frame', 'object', 'embed', 'svg', 'math', 'form', 'base', 'link',
                  'meta', 'template', 'noscript'],
    FORBID_ATTR: ['style', 'id', 'name', 'srcset', 'action', 'formaction', 'xlink:href'],
    // http(s), '#' and relative paths; the hook above applies url() as well.
    ALLOWED_URI_REGEXP: /^(?:https?:|(?![a-z][a-z0-9+.\-]*:))/i
  };

  // A note's HTML, made safe; null when DOMPurify is not there (the caller
  // then shows the markdown as text).
  function html(s) {
    var p = purify();
    if (!p) return null;
    return p.sanitize(String(s));
  }

  window.lecternSafe = {
    esc: esc,
    url: url,
    html: html,
    ready: function () { return !!purify(); }
  };
})();
