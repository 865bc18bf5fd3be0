// One call per observation: number the page's elements and describe them as text.
// Every interactive or text element gets a stable id (data-bid), from a DOM-order counter
// kept on the window, so ids survive until the page is reloaded and restart at 1 on a new
// page. Lines look like:  [bid] role "name" value="..." (state)
// Lines start at the first element not above the viewport (scrolling moves the window)
// and stop at the character budget.
(budget) => {
  // not ready yet (a navigation is still loading): the caller waits and asks again
  if (document.readyState === "loading" || !document.body || document.body.dataset.ready !== "1") {
    return null;
  }
  const TEXT_TAGS = new Set(["P", "LI", "TD", "TH", "H1", "H2", "H3", "H4", "LEGEND", "CAPTION", "DT", "DD"]);
  const clean = (s) => (s || "").replace(/\s+/g, " ").trim();
  const clip = (s, n) => (s.length > n ? s.slice(0, n - 1) + "…" : s);
  const quote = (s) => '"' + clip(s, 120).replace(/"/g, "'") + '"';
  if (window.__agentgymNext === undefined) window.__agentgymNext = 1;

  const roleOf = (el) => {
    const explicit = el.getAttribute("role");
    if (explicit) return explicit;
    const tag = el.tagName;
    if (tag === "A") return el.hasAttribute("href") ? "link" : null;
    if (tag === "BUTTON") return "button";
    if (tag === "SELECT") return "combobox";
    if (tag === "TEXTAREA") return "textbox";
    if (tag === "INPUT") {
      const type = (el.getAttribute("type") || "text").toLowerCase();
      if (type === "hidden") return null;
      if (type === "checkbox") return "checkbox";
      if (type === "radio") return "radio";
      if (type === "submit" || type === "button" || type === "reset") return "button";
      if (type === "number") return "spinbutton";
      return "textbox";
    }
    if (/^H[1-4]$/.test(tag)) return "heading";
    if (TEXT_TAGS.has(tag)) return "text";
    return null;
  };
  const nameOf = (el, role) => {
    const aria = el.getAttribute("aria-label");
    if (aria) return clean(aria);
    if (["textbox", "spinbutton", "combobox", "checkbox", "radio"].includes(role)) {
      const label = el.labels && el.labels.length ? clean(el.labels[0].innerText) : "";
      return label || clean(el.getAttribute("placeholder")) || clean(el.getAttribute("name"));
    }
    if (el.tagName === "INPUT") return clean(el.value);
    return clean(el.innerText);
  };
  const visible = (el) => {
    if (el.checkVisibility && !el.checkVisibility()) return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 || r.height > 0;
  };
  const interactive = (role) =>
    ["link", "button", "textbox", "spinbutton", "combobox", "checkbox", "radio"].includes(role);

  const items = [];
  for (const el of document.body ? document.body.querySelectorAll("*") : []) {
    const role = roleOf(el);
    if (!role || !visible(el)) continue;
    // a text block inside a link or button adds nothing the control does not say
    if (!interactive(role) && el.closest("a,button,label")) continue;
    // a paragraph that wraps a form control only repeats the control's label and options
    if (!interactive(role) && el.querySelector("input,select,textarea,button")) continue;
    if (!el.dataset.bid) el.dataset.bid = String(window.__agentgymNext++);
    const name = nameOf(el, role);
    if (!name && !interactive(role)) continue;
    const parts = ["[" + el.dataset.bid + "]", role, quote(name)];
    const state = [];
    if (role === "textbox" || role === "spinbutton") parts.push("value=" + quote(el.value));
    if (role === "combobox") {
      const chosen = el.selectedOptions.length ? clean(el.selectedOptions[0].text) : "";
      parts.push("value=" + quote(chosen));
      const options = Array.from(el.options).map((o) => clean(o.text) + (o.disabled ? " (disabled)" : ""));
      parts.push("options=[" + options.map((o) => quote(o)).join(", ") + "]");
    }
    if ((role === "checkbox" || role === "radio") && el.checked) state.push("checked");
    if (el.disabled) state.push("disabled");
    if (el.required) state.push("required");
    if (state.length) parts.push("(" + state.join(", ") + ")");
    const rect = el.getBoundingClientRect();
    items.push({ line: parts.join(" "), bottom: rect.bottom, bid: el.dataset.bid, role, name });
  }
  const below = items.findIndex((it) => it.bottom >= 0);
  const first = below < 0 ? items.length : below;
  const lines = [];
  let used = 0;
  let last = first;
  for (let i = first; i < items.length; i++) {
    const cost = items[i].line.length + 1;
    if (used + cost > budget) break;
    lines.push(items[i].line);
    used += cost;
    last = i + 1;
  }
  return {
    lines,
    elements: items.map((it) => [it.bid, it.role, it.name]),
    first,
    last,
    total: items.length,
    scrollY: Math.round(window.scrollY),
    title: document.title,
  };
}
