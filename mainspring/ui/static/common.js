// Shared by the pages. Every text from the store is set as text (textContent, text nodes),
// never as markup: a run's goal, errors and answers are anyone's.
"use strict";

const ms = (() => {
  const SVG = "http://www.w3.org/2000/svg";

  // An element with attributes and children (strings become text nodes).
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = String(value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = String(value);
      else node.setAttribute(key, String(value));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  async function api(path) {
    const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
    const body = await response.json().catch(() => ({ error: response.statusText }));
    if (!response.ok) throw new Error(body.error || String(response.status));
    return body;
  }

  async function post(path, body) {
    const response = await fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body || {}),
    });
    const answer = await response.json().catch(() => ({ error: response.statusText }));
    if (!response.ok) throw new Error(answer.error || String(response.status));
    return answer;
  }

  function when(seconds) {
    if (typeof seconds !== "number") return "-";
    const date = new Date(seconds * 1000);
    return date.toLocaleString(undefined, { hour12: false });
  }

  function clock(seconds) {
    if (typeof seconds !== "number") return "-";
    return new Date(seconds * 1000).toLocaleTimeString(undefined, { hour12: false });
  }

  function span(seconds) {
    if (typeof seconds !== "number") return "-";
    if (seconds < 10) return seconds.toFixed(3) + " s";
    if (seconds < 60) return seconds.toFixed(1) + " s";
    const whole = Math.floor(seconds);
    const h = Math.floor(whole / 3600);
    const m = Math.floor((whole % 3600) / 60);
    const s = whole % 60;
    const pad = (n) => String(n).padStart(2, "0");
    return h ? `${h}h${pad(m)}m${pad(s)}s` : `${m}m${pad(s)}s`;
  }

  function badge(status) {
    return el("span", { class: `badge st-${status}`, text: status });
  }

  // What `ls` adds to a running run's status when nobody runs it (L7), or "".
  function owner(run) {
    if (run.no_owner_since != null) return `no owner since ${when(run.no_owner_since)}`;
    return run.owner_gone ? "owner gone: its process ended" : "";
  }

  function say(node, text, isError) {
    node.textContent = text || "";
    node.classList.toggle("error", Boolean(isError));
  }

  return { el, svg, clear, api, post, when, clock, span, badge, owner, say };
})();
