// The runs list: filters (status, text), live. It follows every run's durable history over
// server-sent events from the moment the page opened (the browser resumes after the last
// entry with Last-Event-ID) and reads the list again when something was committed; a slow
// refresh besides catches what changes with time alone (a lease that lapses). The table is
// rebuilt only when it changed.
"use strict";

(() => {
  const STATUSES = [
    "planned", "running", "paused", "waiting_for_input", "waiting_for_clarification",
    "waiting_for_approval", "waiting_for_budget", "completed", "failed", "cancelled",
  ];
  const REFRESH_MS = 30000; // time alone changes a lease's holder; commits come as events
  const SOON_MS = 150; // entries come in bursts: one read for a burst
  const statusBox = document.getElementById("filter-status");
  const textBox = document.getElementById("filter-text");
  const body = document.querySelector("#runs tbody");
  const live = document.getElementById("live");
  const message = document.getElementById("message");
  let timer = null;
  let pending = null;
  let shown = null; // what the table shows now: rebuilt only when it changed

  for (const status of STATUSES) statusBox.append(ms.el("option", { value: status, text: status }));
  const start = new URLSearchParams(location.search);
  if (STATUSES.includes(start.get("status"))) statusBox.value = start.get("status");
  textBox.value = (start.get("q") || "").slice(0, 200);

  function steps(run) {
    const extra = ["failed", "skipped", "cancelled", "stopped"]
      .filter((s) => run.steps[s])
      .map((s) => `${run.steps[s]} ${s}`);
    const cell = `${run.steps.succeeded || 0}/${run.steps_total}`;
    return extra.length ? `${cell} (${extra.join(", ")})` : cell;
  }

  function row(run) {
    const link = ms.el("a", { href: "/runs/" + encodeURIComponent(run.id), text: run.id });
    const status = ms.badge(run.status);
    return ms.el(
      "tr",
      { "data-run": run.id, "data-status": run.status },
      ms.el("td", {}, link),
      ms.el("td", {}, status, run.pending ? ms.el("span", { class: "note", text: ` (${run.pending})` }) : null,
        ms.owner(run) ? ms.el("span", { class: "note", text: ` (${ms.owner(run)})` }) : null),
      ms.el("td", { class: "goal", text: run.goal }),
      ms.el("td", { text: steps(run) }),
      ms.el("td", { text: run.calls_used }),
      ms.el("td", { text: run.tokens.toLocaleString() }),
      ms.el("td", { text: run.cost }),
      ms.el("td", { text: run.lease_owner || "-" }),
      ms.el("td", { text: ms.when(run.updated_at) }),
    );
  }

  async function refresh() {
    clearTimeout(timer);
    clearTimeout(pending);
    pending = null;
    const query = new URLSearchParams();
    if (statusBox.value) query.set("status", statusBox.value);
    if (textBox.value) query.set("q", textBox.value.slice(0, 200));
    try {
      const view = await ms.api("/api/runs?" + query.toString());
      const now = JSON.stringify(view.runs);
      if (now !== shown) {
        shown = now;
        ms.clear(body);
        for (const run of view.runs) body.append(row(run));
      }
      document.getElementById("empty").hidden = view.runs.length > 0;
      const bad = document.getElementById("unreadable");
      bad.hidden = view.unreadable.length === 0;
      bad.textContent = view.unreadable.length
        ? `${view.unreadable.length} records cannot be read (mainspring doctor): ` +
          view.unreadable.map((p) => p.id).join(", ")
        : "";
      ms.say(message, view.more ? `${view.more} older runs not shown` : "");
      live.textContent = "live, read " + ms.clock(view.now);
      live.classList.remove("down");
    } catch (error) {
      live.textContent = "cannot reach the view: " + error.message;
      live.classList.add("down");
    }
    timer = setTimeout(refresh, REFRESH_MS);
  }

  function soon() {
    if (pending === null) pending = setTimeout(refresh, SOON_MS);
  }

  function follow() {
    const source = new EventSource("/api/events?after=end");
    source.addEventListener("entry", soon);
    source.addEventListener("open", soon); // (re)connected: what came meanwhile is read
    source.addEventListener("error", () => {
      live.textContent = "reconnecting";
      live.classList.add("down");
    });
  }

  function filtered() {
    const query = new URLSearchParams();
    if (statusBox.value) query.set("status", statusBox.value);
    if (textBox.value) query.set("q", textBox.value);
    history.replaceState(null, "", query.toString() ? "?" + query.toString() : location.pathname);
    refresh();
  }

  statusBox.addEventListener("change", filtered);
  textBox.addEventListener("input", filtered);
  document.getElementById("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    filtered();
  });
  refresh();
  follow();
})();
