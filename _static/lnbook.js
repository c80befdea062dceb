// The book's own script (Jupyter Book includes every .js of _static/ in every page).
//
// Inline code (a test's path in a Machine check: tests/folding/test_fold.py::test_a_long_name) may break after
// "/", ".", "::" and "_" (a <wbr>, which copying the path leaves out); lnbook.css lets it break anywhere only where
// a part is longer than the line.
document.addEventListener("DOMContentLoaded", () => {
  for (const code of document.querySelectorAll("code.literal")) {
    if (code.closest("pre")) continue;
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    const nodes = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) nodes.push(node);
    for (const node of nodes) {
      const parts = node.nodeValue.split(/(?<=::|[\/._](?!:))/);
      if (parts.length < 2) continue;
      const pieces = document.createDocumentFragment();
      parts.forEach((part, n) => {
        if (n > 0) pieces.appendChild(document.createElement("wbr"));
        pieces.appendChild(document.createTextNode(part));
      });
      node.parentNode.replaceChild(pieces, node);
    }
  }
});
