// The code view (run page, approval cards): line numbers and highlight.js's
// colouring. The highlighted tree is built as elements from highlight.js's
// token tree, never through innerHTML: whatever an agent wrote stays text.
import hljs from "./hljs-core.js";
import python from "./hljs-python.js";
import javascript from "./hljs-javascript.js";
import bash from "./hljs-bash.js";
import { h, hiddenCount, revealNodes } from "./dom.js";

hljs.registerLanguage("python", python);
hljs.registerLanguage("javascript", javascript);
hljs.registerLanguage("bash", bash);

const LANG = { python: "python", python3: "python", node: "javascript", javascript: "javascript", js: "javascript",
  bash: "bash", sh: "bash", shell: "bash" };
// past this, the code is shown plain (highlighting is quadratic at worst)
const HIGHLIGHT_MAX = 200 * 1024;

function cssClass(scope) {
  if (scope.startsWith("language:")) return scope.replace("language:", "language-");
  const [first, ...rest] = scope.split(".");
  return [`hljs-${first}`, ...rest.map((x, i) => `${x}${"_".repeat(i + 1)}`)].join(" ");
}

function build(node, parent) {
  for (const c of node.children || []) {
    if (typeof c === "string") parent.append(...revealNodes(c));
    else {
      const span = c.scope ? h("span", { class: cssClass(c.scope) }) : document.createDocumentFragment();
      build(c, span);
      parent.appendChild(span);
    }
  }
}

export function codeView(code, language, label = "Code") {
  code = code || "";
  const lines = code.split("\n");
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  const el = h("code", { class: "hljs" });
  const lang = LANG[language];
  let done = false;
  if (lang && code.length <= HIGHLIGHT_MAX) {
    try {
      const r = hljs.highlight(code, { language: lang, ignoreIllegals: true });
      if (r._emitter && r._emitter.root) { build(r._emitter.root, el); done = true; }
    } catch { /* shown plain */ }
  }
  if (!done) el.append(...revealNodes(code));
  const view = h("div", { class: "code", role: "region", "aria-label": label, tabindex: "0" },
    h("div", { class: "lines", "aria-hidden": "true" }, lines.map((_, i) => i + 1).join("\n")),
    h("pre", {}, el));
  const warn = codeWarnings(code, lines);
  return warn.length ? h("div", { class: "code-checked" },
    h("div", { class: "alert alert-warn code-warning", role: "note" }, h("strong", {}, "Read this code closely: "), warn.join(" ")), view) : view;
}

// What could hide part of CODE from a person reading it before approving
// it: characters that reorder or hide text (shown marked in the view), and
// lines so long that their end is off to the right of the view.
const LONG_LINE = 160;
export function codeWarnings(code, lines = code.split("\n")) {
  const warn = [];
  const hidden = hiddenCount(code);
  if (hidden.count) {
    warn.push(`It has ${hidden.count} invisible character${hidden.count === 1 ? "" : "s"}, marked ⟨U+…⟩ or as control pictures` +
      (hidden.bidi ? ", some of which change the order in which text is displayed: it may run differently from how it reads." : "."));
  }
  const long = [];
  lines.forEach((l, i) => { if (l.length > LONG_LINE) long.push(i + 1); });
  if (long.length) {
    const which = long.slice(0, 5).join(", ") + (long.length > 5 ? ` and ${long.length - 5} more` : "");
    warn.push(`Line${long.length === 1 ? "" : "s"} ${which} ${long.length === 1 ? "is" : "are"} longer than ${LONG_LINE} characters: scroll right to read ${long.length === 1 ? "its" : "their"} end.`);
  }
  return warn;
}
