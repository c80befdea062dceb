// The book's own script (Jupyter Book includes every .js of _static/ in every page).
//
// Inline code (a test's path in a Machine check: tests/folding/test_fold.py::test_a_long_name) may break after
// "/", ".", "::" and "_" (a <wbr>, which copying the path leaves out); lnbook.css lets it break anywhere only where
// a part is longer than the line. An arrow "->" (`Linear(1, N) -> PLN -> Linear(N, 1)`) is kept on one line, in a
// span.lnbook-nobreak (its text, as copied, unchanged).
document.addEventListener("DOMContentLoaded", () => {
  for (const code of document.querySelectorAll("code.literal")) {
    if (code.closest("pre")) continue;
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    const nodes = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) nodes.push(node);
    for (const node of nodes) {
      const parts = node.nodeValue.split(/(?<=::|[\/._](?!:))/);
      if (parts.length < 2 && !node.nodeValue.includes("->")) continue;
      const pieces = document.createDocumentFragment();
      parts.forEach((part, n) => {
        if (n > 0) pieces.appendChild(document.createElement("wbr"));
        for (const bit of part.split(/(->)/)) {
          if (bit === "->") {  // an arrow stays whole: the browser breaks after a hyphen ("PLN -" / "> Linear", issue 33)
            const arrow = document.createElement("span");
            arrow.className = "lnbook-nobreak";
            arrow.textContent = bit;
            pieces.appendChild(arrow);
          } else if (bit) pieces.appendChild(document.createTextNode(bit));
        }
      });
      node.parentNode.replaceChild(pieces, node);
    }
  }
});

// Inline math and the punctuation around it stay on one line: MathJax typesets a formula as an atomic inline box, and
// the browser may break a line between that box and the text after it, leaving a lone ")" or "." at the start of the
// next line ("(|o| > 1" / ")", issue 33). Each inline formula (Sphinx's span.math, which MathJax typesets in place)
// is put, with the opening brackets just before it and the punctuation just after it, in a span that does not wrap
// (lnbook.book.site_check reports punctuation cut off from its formula).
document.addEventListener("DOMContentLoaded", () => {
  const before = /[(\[{\u201c\u2018]+$/, after = /^[)\]}.,;:!?\u201d\u2019]+/;
  for (const math of document.querySelectorAll("span.math")) {
    if (math.closest("div.math, .lnbook-math-nobreak, pre")) continue;
    const next = math.nextSibling, prev = math.previousSibling;
    const tail = next && next.nodeType === Node.TEXT_NODE ? next.nodeValue.match(after) : null;
    const head = prev && prev.nodeType === Node.TEXT_NODE ? prev.nodeValue.match(before) : null;
    if (!tail && !head) continue;
    const keep = document.createElement("span");
    keep.className = "lnbook-math-nobreak";
    math.parentNode.insertBefore(keep, math);
    if (head) {
      prev.nodeValue = prev.nodeValue.slice(0, prev.nodeValue.length - head[0].length);
      keep.appendChild(document.createTextNode(head[0]));
    }
    keep.appendChild(math);
    if (tail) {
      next.nodeValue = next.nodeValue.slice(tail[0].length);
      keep.appendChild(document.createTextNode(tail[0]));
    }
  }
});

// The primary sidebar opens scrolled so that the current page's entry shows: pydata-sphinx-theme (scrollToActive)
// scrolls it to a pixel offset (the entry a quarter down, or the offset stored by the last page), which cut the first
// visible entry in half at the sidebar's top edge ("Initialisation" on chapter 5's page, read 32b item 12; at this
// width the theme's top bar is hidden by lnbook.css, so nothing covers the entry: it is scrolled past). Once the page
// has loaded (after the theme's own scroll), the sidebar scrolls back to the top of that entry, so every entry it shows
// is whole; the current page's entry stays in view (the move is less than one entry).
window.addEventListener("load", () => {
  const sidebar = document.querySelector("div.bd-sidebar");
  if (!sidebar || sidebar.scrollTop <= 0) return;
  const edge = sidebar.getBoundingClientRect().top;
  for (const entry of sidebar.querySelectorAll("nav.bd-docs-nav p.caption, nav.bd-docs-nav li > a")) {
    const box = entry.getBoundingClientRect();
    if (box.height === 0 || box.bottom <= edge + 1) continue;  // hidden, or above the edge
    if (box.top < edge - 1) sidebar.scrollTop = Math.max(0, Math.floor(sidebar.scrollTop - (edge - box.top)));
    break;
  }
});
