// One run: its plan as a graph coloured by step state, the steps with their durations,
// errors and tracebacks, agent tasks with their inner steps, questions, workers, memory, a
// timeline of the durable history, and the controls. Live: every history entry arrives over
// server-sent events (the browser resumes after the last one with Last-Event-ID) and the
// view is read again.
"use strict";

(() => {
  const STEP_STATES = ["pending", "running", "succeeded", "failed", "skipped", "cancelled", "stopped"];
  const COLUMN = 190;
  const ROW = 64;
  const BOX_W = 150;
  const BOX_H = 44;
  const PAD = 12;
  const TIMELINE_MOST = 2000;

  const runId = decodeURIComponent(location.pathname.replace(/^\/runs\//, ""));
  const base = "/api/runs/" + encodeURIComponent(runId);
  const message = document.getElementById("message");
  const live = document.getElementById("live");
  const opened = new Set(); // tracebacks the user opened stay open across refreshes
  let view = null;
  let pending = null;
  let shown = null; // the view on screen: the page is rebuilt only when it changed

  document.getElementById("run-id").textContent = runId;
  document.title = "mainspring: " + runId;

  // -- the graph ---------------------------------------------------------------------------

  function legend() {
    const box = ms.clear(document.getElementById("legend"));
    for (const state of STEP_STATES) {
      box.append(ms.el("span", { class: `key st-${state}` }, ms.el("i", {}), state));
    }
  }

  function graph(plan) {
    const root = ms.clear(document.getElementById("graph"));
    if (!plan) {
      root.setAttribute("width", 300);
      root.setAttribute("height", 30);
      root.append(ms.svg("text", { x: 4, y: 20, class: "empty", text: "no plan yet" }));
      return;
    }
    const width = PAD * 2 + Math.max(1, plan.columns) * COLUMN - (COLUMN - BOX_W);
    const height = PAD * 2 + Math.max(1, plan.rows) * ROW - (ROW - BOX_H);
    root.setAttribute("width", width);
    root.setAttribute("height", height);
    root.setAttribute("viewBox", `0 0 ${width} ${height}`);
    const defs = ms.svg("defs");
    const marker = ms.svg("marker", {
      id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse",
    });
    marker.append(ms.svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }));
    defs.append(marker);
    root.append(defs);
    const at = {};
    for (const step of plan.steps) {
      at[step.id] = { x: PAD + step.depth * COLUMN, y: PAD + step.row * ROW };
    }
    // Each edge from the right of its step to the left of the next, through a waypoint
    // (a slot no box takes) in each layer it skips: every curve stays in a gap between
    // columns and every straight piece in a free slot, so no edge crosses a box.
    const edges = ms.svg("g", { class: "edges" });
    const middle = (row) => PAD + row * ROW + BOX_H / 2;
    for (const edge of plan.edges) {
      const from = at[edge.from];
      const to = at[edge.to];
      if (!from || !to) continue;
      const points = [[from.x + BOX_W, from.y + BOX_H / 2]];
      edge.via.forEach((row, i) => {
        const left = from.x + (i + 1) * COLUMN;
        points.push([left, middle(row)], [left + BOX_W, middle(row)]);
      });
      points.push([to.x, to.y + BOX_H / 2]);
      let d = `M ${points[0][0]} ${points[0][1]}`;
      for (let i = 1; i < points.length; i++) {
        const [x1, y1] = points[i - 1];
        const [x2, y2] = points[i];
        if (i % 2 === 0) {
          d += ` L ${x2} ${y2}`; // across a free slot
        } else {
          const mid = (x1 + x2) / 2;
          d += ` C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`; // through a gap between columns
        }
      }
      edges.append(ms.svg("path", {
        d, class: "edge", "marker-end": "url(#arrow)", "data-from": edge.from, "data-to": edge.to,
      }));
    }
    root.append(edges);
    for (const step of plan.steps) {
      const { x, y } = at[step.id];
      const node = ms.svg("g", {
        class: `step st-${step.status}`, "data-step": step.id, "data-status": step.status,
        transform: `translate(${x} ${y})`, tabindex: 0,
      });
      node.append(ms.svg("title", { text: `${step.id}: ${step.kind} ${step.target}, ${step.status}` }));
      node.append(ms.svg("rect", { width: BOX_W, height: BOX_H, rx: 6, ry: 6 }));
      node.append(ms.svg("text", { x: 8, y: 18, class: "name", text: clip(step.id, 20) }));
      const detail = `${step.kind} ${step.target}` + (step.seconds != null ? ` · ${ms.span(step.seconds)}` : "");
      node.append(ms.svg("text", { x: 8, y: 35, class: "detail", text: clip(detail, 26) }));
      node.addEventListener("click", () => {
        const row = document.querySelector(`#steps tr[data-step="${CSS.escape(step.id)}"]`);
        if (row) row.scrollIntoView({ behavior: "smooth", block: "center" });
      });
      root.append(node);
    }
  }

  function clip(text, most) {
    text = String(text);
    return text.length > most ? text.slice(0, most - 1) + "\u2026" : text;
  }

  // -- tables and lists ----------------------------------------------------------------------

  function traceback(key, label, text) {
    if (!text) return null;
    const box = ms.el("details", { class: "traceback", open: opened.has(key) });
    box.addEventListener("toggle", () => (box.open ? opened.add(key) : opened.delete(key)));
    box.append(ms.el("summary", { text: label }), ms.el("pre", { text }));
    return box;
  }

  function steps(plan) {
    const body = ms.clear(document.querySelector("#steps tbody"));
    if (!plan) return;
    for (const step of plan.steps) {
      const error = ms.el("td", { class: "error" });
      if (step.error) error.append(ms.el("div", { class: "pre", text: step.error }));
      error.append(traceback(`step:${step.id}`, "traceback", step.traceback) || "");
      for (const attempt of step.attempts) {
        const label = `attempt ${attempt.attempt ?? "?"}` + (attempt.error ? `: ${attempt.error}` : "");
        error.append(traceback(`step:${step.id}:${attempt.attempt}`, label, attempt.traceback) ||
          ms.el("div", { class: "note", text: label }));
      }
      body.append(ms.el(
        "tr", { "data-step": step.id, "data-status": step.status },
        ms.el("td", { text: step.id }),
        ms.el("td", { text: step.kind }),
        ms.el("td", { text: step.target }),
        ms.el("td", {}, ms.badge(step.status)),
        ms.el("td", { text: ms.span(step.seconds) }),
        ms.el("td", { text: step.depends_on.join(", ") || "-" }),
        error,
      ));
    }
  }

  function facts(v) {
    const box = ms.clear(document.getElementById("facts"));
    const s = v.summary;
    const usage = v.usage;
    const rows = [
      ["goal", v.goal],
      ["steps", `${s.steps_done} of ${s.steps_total} finished` +
        Object.entries(s.steps).map(([k, n]) => `, ${n} ${k}`).join("")],
      ["calls", `${s.calls_used}` + (v.max_calls != null ? ` of ${v.max_calls}` : "")],
      ["usage", `${(usage.input_tokens + usage.output_tokens).toLocaleString()} tokens, cost ${usage.cost}`],
      ["lease", (v.lease ? `${v.lease.owner} until ${ms.when(v.lease.expires_at)} (epoch ${v.lease.epoch})` : "free") +
        (ms.owner(s) ? ` (${ms.owner(s)})` : "")],
      ["updated", ms.when(s.updated_at)],
    ];
    if (v.deadline_at != null) rows.push(["deadline", ms.when(v.deadline_at)]);
    if (v.pending) rows.push(["waiting for", v.pending.kind + (v.pending.budget ? ` (${v.pending.budget.budget} budget)` : "")]);
    const list = ms.el("dl");
    for (const [key, value] of rows) list.append(ms.el("dt", { text: key }), ms.el("dd", { text: value }));
    box.append(list);
  }

  function question(v) {
    const box = document.getElementById("question-box");
    const asked = v.pending && v.pending.kind === "clarification";
    box.hidden = !asked;
    if (!asked) return;
    const from = v.pending.agent_task_id ? ` (agent task ${v.pending.agent_task_id})` : "";
    document.getElementById("question-text").textContent = (v.pending.question || "(no text)") + from;
    // An answer is stored already: another would be refused (busy), so none is offered.
    const answered = Boolean(v.pending.answered);
    document.getElementById("answer-form").hidden = answered;
    const stored = document.getElementById("answer-stored");
    stored.hidden = !answered;
    stored.textContent = !answered ? "" : v.lease
      ? "An answer is stored: the run takes it at its next heartbeat."
      : "An answer is stored. Nothing runs this run now: it waits for a runtime to pick it up " +
        "(a runtime open on the store that recovers runs, or Resume).";
  }

  function tasks(v) {
    const box = ms.clear(document.getElementById("tasks"));
    if (!v.tasks.length) box.append(ms.el("p", { class: "note", text: "no agent tasks" }));
    if (v.tasks_unreadable) {
      box.append(ms.el("p", { class: "note warn", text: `${v.tasks_unreadable} unreadable agent task records not shown` }));
    }
    for (const task of v.tasks) {
      const head = ms.el("div", { class: "task-head" },
        ms.el("strong", { text: task.id }), " ", ms.badge(task.state),
        ms.el("span", { class: "note", text: ` agent ${task.agent_id}, step ${task.step_id}, attempt ${task.attempt}, ` +
          `calls ${task.calls}, ${task.tokens.toLocaleString()} tokens, cost ${task.cost}, ${ms.span(task.seconds)}` }));
      const finished = ["completed", "failed", "cancelled"].includes(task.state);
      if (!finished) {
        const stop = ms.el("button", { type: "button", class: "small", "data-task": task.id, text: "Stop task" });
        stop.addEventListener("click", () => control(`/api/tasks/${encodeURIComponent(task.id)}/stop`, { cascade: false }, `stop ${task.id}`));
        head.append(" ", stop);
      }
      const card = ms.el("div", { class: "task", "data-task": task.id }, head);
      if (task.interruption) {
        card.append(ms.el("p", { class: "note", text: `interrupted: ${task.interruption.kind} at ${ms.when(task.interruption.at)}` }));
      }
      if (task.question) {
        card.append(ms.el("p", { class: "pre" }, ms.el("em", { text: "asks: " }), task.question,
          task.answered_at ? ms.el("span", { class: "note", text: ` (answered ${ms.when(task.answered_at)})` }) : null));
      }
      const inner = ms.el("ol", { class: "inner" });
      for (const step of task.inner_steps) {
        inner.append(ms.el("li", { "data-inner": step.id },
          ms.badge(step.status), " ", step.id, " ",
          ms.el("span", { class: "note", text: ms.span(step.seconds) }),
          step.error ? ms.el("div", { class: "error pre", text: step.error }) : null));
      }
      card.append(ms.el("div", { class: "note", text: `inner steps: ${task.inner_steps_done} done` +
        (task.inner_steps_total ? ` of ${task.inner_steps_total}` : "") +
        (task.inner_omitted ? `, ${task.inner_omitted} older not kept` : "") }), inner);
      if (task.failure) {
        card.append(ms.el("p", { class: "error pre", text: `${task.failure.code}: ${task.failure.message}` }));
        card.append(traceback(`task:${task.id}`, "traceback", task.failure.traceback) || "");
      }
      if (task.findings.length) {
        const list = ms.el("ul", { class: "plain" });
        for (const f of task.findings) list.append(ms.el("li", {}, ms.el("code", { text: f.id }), ` ${f.status}: `, f.claim));
        card.append(ms.el("div", { class: "note", text: "findings" }), list);
      }
      for (const line of task.diagnostics) card.append(ms.el("p", { class: "note", text: line }));
      box.append(card);
    }
  }

  function workers(v) {
    const box = ms.clear(document.getElementById("workers"));
    const w = v.workers;
    if (!w.workers.length && !w.tasks.length) {
      box.append(ms.el("p", { class: "note", text: "no external workers in this run" }));
    }
    if (w.workers.length) {
      const table = ms.el("table", { class: "grid" },
        ms.el("thead", {}, ms.el("tr", {}, ...["worker", "generation", "status", "agent", "task"].map((h) => ms.el("th", { text: h })))));
      const body = ms.el("tbody");
      for (const worker of w.workers) {
        body.append(ms.el("tr", {},
          ms.el("td", { text: worker.id }), ms.el("td", { text: worker.generation }),
          ms.el("td", {}, ms.badge(worker.status)), ms.el("td", { text: worker.agent_id ?? "-" }),
          ms.el("td", { text: worker.task_id ?? "-" })));
      }
      table.append(body);
      box.append(table);
    }
    if (w.tasks.length) {
      const list = ms.el("ul", { class: "plain" });
      for (const t of w.tasks) list.append(ms.el("li", { text: `${t.id}: ${t.state} on ${t.worker_id ?? "-"} (step ${t.step_id ?? "-"})` }));
      box.append(ms.el("div", { class: "note", text: "worker tasks" }), list);
    }
    if (w.trail.length) {
      const list = ms.el("ol", { class: "plain" });
      for (const e of w.trail) list.append(ms.el("li", { text: `${ms.clock(e.at)} #${e.seq} ${e.worker_id} g${e.generation} ${e.event} ${e.status}` + (e.detail ? ` ${e.detail}` : "") }));
      box.append(ms.el("div", { class: "note", text: `trail (last ${w.trail.length} of ${w.trail_total})` }), list);
    }
    if (w.unreadable) box.append(ms.el("p", { class: "note warn", text: `${w.unreadable} worker records cannot be read` }));
  }

  function memory(v) {
    const box = ms.clear(document.getElementById("memory"));
    if (!v.memory) {
      box.append(ms.el("p", { class: "note", text: "this store keeps no memory" }));
      return;
    }
    if (!v.memory.facts.length) {
      box.append(ms.el("p", { class: "note", text: "this run remembered no facts (what it read is not recorded)" }));
      return;
    }
    box.append(ms.el("p", { class: "note", text: `${v.memory.this_run} remembered by this run, then the others ` +
      `of the scopes it remembered in (${v.memory.scopes.join(", ")})` + (v.memory.more ? `; the first ${v.memory.facts.length} shown` : "") }));
    const list = ms.el("ul", { class: "plain" });
    for (const f of v.memory.facts) {
      list.append(ms.el("li", { class: f.this_run ? "own" : "" },
        ms.el("code", { text: f.id }), ` ${f.scope}/${f.domain} ${f.confidence.toFixed(2)}` +
        (f.expired ? " expired" : "") + (f.superseded ? " superseded" : "") + ": ",
        f.text));
    }
    box.append(list);
  }

  function audit(v) {
    const box = ms.clear(document.getElementById("audit"));
    for (const c of v.controls) {
      box.append(ms.el("li", { text: `${ms.when(c.at)} ${c.action} by ${c.by}` + (c.reason ? `: ${c.reason}` : "") }));
    }
    for (const c of v.checkpoints) {
      box.append(ms.el("li", { class: "note", text: `${ms.when(c.at)} checkpoint: plan v${c.plan_version}, ${c.steps_done} steps done` }));
    }
  }

  function buttons(v) {
    const status = v.summary.status;
    document.getElementById("btn-pause").disabled = v.terminal || status === "paused";
    document.getElementById("btn-cancel").disabled = v.terminal;
    const resume = document.getElementById("btn-resume");
    resume.disabled = v.terminal;
    resume.title = v.can_resume ? "resume the run here, with the code --app names"
      : "resuming runs your code: start the view with mainspring ui --app module:attr";
    resume.classList.toggle("unavailable", !v.can_resume);
  }

  function render(v) {
    view = v;
    const status = document.getElementById("status");
    status.textContent = v.summary.status;
    status.className = `badge st-${v.summary.status}`;
    document.getElementById("plan-version").textContent = v.plan ? `${v.plan.id} v${v.plan.version}` : "";
    facts(v);
    question(v);
    graph(v.plan);
    const failure = document.getElementById("run-failure");
    failure.hidden = !v.failure;
    failure.textContent = v.failure ? `the run failed: ${v.failure.error || v.failure.error_type}` : "";
    steps(v.plan);
    tasks(v);
    workers(v);
    memory(v);
    audit(v);
    buttons(v);
  }

  async function refresh() {
    pending = null;
    try {
      const fresh = await ms.api(base);
      const key = JSON.stringify({ ...fresh, now: 0 });
      if (key !== shown) {
        shown = key;
        render(fresh);
      }
    } catch (error) {
      ms.say(message, "cannot read the run: " + error.message, true);
    }
  }

  function soon() {
    if (pending === null) pending = setTimeout(refresh, 150);
  }

  // -- the timeline, live ----------------------------------------------------------------------

  function entryText(e) {
    const parts = [e.kind];
    if (e.status) parts.push(e.was ? `${e.was} \u2192 ${e.status}` : e.status);
    if (e.plan_version != null) parts.push(`plan v${e.plan_version}`);
    if (e.worker_id) parts.push(`worker ${e.worker_id}`);
    if (e.step_id) parts.push(`step ${e.step_id}`);
    if (e.task_id) parts.push(`task ${e.task_id}`);
    if (e.generation != null) parts.push(`generation ${e.generation}`);
    if (e.reason) parts.push(`reason ${e.reason}`);
    if (e.agent_id) parts.push(`agent ${e.agent_id}`);
    if (e.state) parts.push(e.state);
    if (e.action) parts.push(e.action);
    if (e.kind === "pending") parts.push(`pending ${e.pending || "-"}`);
    if (e.done != null) parts.push(`${e.done}/${e.total} steps done`);
    else if (e.total != null) parts.push(`${e.total} steps`);
    if (e.inner_done != null) parts.push(`${e.inner_done} inner steps`);
    if (e.calls_used != null) parts.push(`${e.calls_used} calls`);
    return parts.join("  ");
  }

  function follow() {
    const timeline = document.getElementById("timeline");
    const source = new EventSource(base + "/events?after=0");
    source.addEventListener("open", () => {
      live.textContent = "live";
      live.classList.remove("down");
    });
    source.addEventListener("error", () => {
      live.textContent = "reconnecting";
      live.classList.add("down");
    });
    source.addEventListener("entry", (event) => {
      let entry;
      try {
        entry = JSON.parse(event.data);
      } catch {
        return;
      }
      timeline.append(ms.el("li", { "data-seq": entry.seq, "data-kind": entry.kind },
        ms.el("span", { class: "seq", text: entry.seq }), " ",
        ms.el("span", { class: "note", text: ms.clock(entry.at) }), " ",
        entryText(entry)));
      while (timeline.children.length > TIMELINE_MOST) timeline.removeChild(timeline.firstChild);
      soon();
    });
  }

  // -- controls --------------------------------------------------------------------------------

  async function control(path, body, what) {
    ms.say(message, `${what}\u2026`);
    try {
      const done = await ms.post(path, body);
      const said = done.summary || done.status || done.state || "done";
      ms.say(message, `${what}: ${said}`);
    } catch (error) {
      ms.say(message, `${what}: ${error.message}`, true);
    }
    refresh();
  }

  const reason = () => document.getElementById("reason").value.slice(0, 4000);
  document.getElementById("btn-pause").addEventListener("click", () => control(base + "/pause", { reason: reason() }, "pause"));
  document.getElementById("btn-cancel").addEventListener("click", () => {
    if (confirm(`Cancel ${runId} for good?`)) control(base + "/cancel", { reason: reason() }, "cancel");
  });
  document.getElementById("btn-resume").addEventListener("click", () => {
    if (view && !view.can_resume) {
      ms.say(message, "resume: resuming runs your code (tools, agents): start the view with `mainspring ui --app module:attr`, as for `mainspring resume`", true);
      return;
    }
    control(base + "/resume", {}, "resume");
  });
  document.getElementById("answer-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const box = document.getElementById("answer-text");
    const text = box.value;
    if (!text.trim()) return;
    box.value = "";
    control(base + "/answer", { text }, "answer");
  });

  legend();
  refresh();
  follow();
})();
