// The live page: the tree (a level at a time), a badge on every locked path, the locks and
// the jobs as `GET /events` tells them, and a form to submit a rename; under
// `fsrename demo --serve`, the demo's story as well. Plain DOM, no library.
"use strict";

const PAGE = 200; // children shown at a time under one directory

const state = {
  locks: new Map(), // path -> lock, as `GET /locks` shows it
  jobs: new Map(), // id -> job
  offset: 0, // the server's clock minus ours, from each event's `at`
  open: new Set(), // the directories expanded, kept open when the tree is listed again
  story: [], // the demo's runs: {scenario, steps, verdict, open}, oldest first
  storyEnd: null, // the demo's last note
  progress: new Map(), // the demo's job letter -> its last progress note
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function serverNow() {
  return Date.now() + state.offset;
}

function leaseLeft(lock) {
  let expires = lock.expires_at;
  for (const grant of lock.grants || []) {
    if (grant.expires_at && (!expires || grant.expires_at < expires)) expires = grant.expires_at;
  }
  if (!expires) return "no lease";
  const left = Math.max(0, expires - serverNow());
  return (left / 1000).toFixed(1) + " s";
}

function holders(lock) {
  const names = (lock.grants || []).map((g) => `${g.mode} ${g.holder || g.process_id}`);
  return names.length ? names.join("; ") : lock.holders || "";
}

// `text` cut to fit a badge (the whole of it is in the badge's title and the locks table).
function short(text) {
  return text.length > 40 ? `${text.slice(0, 39)}…` : text;
}

// The holders' names only (the badge shows the lock's mode beside them).
function holderNames(lock) {
  const names = (lock.grants || []).map((g) => g.holder || g.process_id);
  return names.length ? names.join(", ") : lock.holders || "";
}

// ---- the tree ----

// One page of `path`'s entries from the service, from just after `after` on (`null`: from
// the start). Answers `null` if the service wants its token first; throws what went wrong.
async function fetchPage(path, after) {
  const query = new URLSearchParams({ path, depth: "1", limit: String(PAGE) });
  if (after) query.set("after", after);
  const response = await fetch(`/tree?${query}`);
  const answer = await response.json();
  // A wrong token (a cookie from an earlier run of the service, say), or too many of them.
  if (response.status === 401 || response.status === 429) {
    state.refused = answer.error || response.statusText;
    state.refusedStatus = response.status;
    return null;
  }
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

// Lists the first page of `path`'s entries into `list`; false if the service wants its token
// first.
async function loadChildren(path, list) {
  // A list shown already stays until the new one comes (no flicker when the tree is listed
  // again); only the last of several listings under way is shown.
  const generation = (list.generation = (list.generation || 0) + 1);
  if (!list.children.length) list.replaceChildren(el("li", { class: "hint" }, "loading…"));
  let answer;
  try {
    answer = await fetchPage(path, null);
    if (answer === null) {
      list.replaceChildren();
      return false;
    }
  } catch (e) {
    if (list.generation === generation) {
      list.replaceChildren(el("li", { class: "error" }, `cannot list ${path}: ${e.message}`));
    }
    return true;
  }
  if (list.generation !== generation) return true;
  list.replaceChildren();
  appendPage(list, path, answer);
  return true;
}

// Appends a page of entries (in path order, as the service lists them) and, if more follow,
// a button that asks the service for the next page: a directory of any size is read a page
// at a time, never whole.
function appendPage(list, path, answer) {
  const items = answer.entries
    .map((e) => e.doc)
    .filter((doc) => doc.path !== path)
    .map(treeItem);
  list.append(...items);
  if (!answer.next) return;
  const more = el("button", { class: "more", type: "button" }, `show the next ${PAGE}`);
  const row = el("li", {}, more);
  more.addEventListener("click", async () => {
    more.disabled = true;
    const generation = list.generation;
    let next;
    try {
      next = await fetchPage(path, answer.next);
      if (next === null) throw new Error(state.refused);
    } catch (e) {
      more.disabled = false;
      row.append(el("span", { class: "error" }, ` cannot list more of ${path}: ${e.message}`));
      return;
    }
    // Listed again meanwhile: this page follows a list that is no longer shown.
    if (list.generation !== generation) return;
    row.remove();
    const first = list.children.length;
    appendPage(list, path, next);
    // The keyboard's focus goes on to what was added, not back to the top of the page.
    const added = list.children[first];
    const landing = added && added.querySelector("button, [tabindex]");
    if (landing) landing.focus();
  });
  list.append(row);
}

function treeItem(doc) {
  const badges = el("span", { class: "badges", "data-path": doc.path });
  if (doc.kind !== "dir") {
    // Focusable by the page (after "show the next"), not in the Tab order.
    const item = el("li", { role: "treeitem" }, el("div", { class: "node file", tabindex: "-1" }, el("span", {}, doc.name), badges));
    renderBadges(badges);
    return item;
  }
  const group = el("ul", { role: "group", hidden: "" });
  const toggle = el("button", { type: "button", "aria-expanded": "false", "data-path": doc.path }, `▸ ${doc.name}/`);
  const item = el("li", { role: "treeitem" }, el("div", { class: "node" }, toggle, badges), group);
  const show = (open) => {
    toggle.setAttribute("aria-expanded", String(open));
    toggle.textContent = `${open ? "▾" : "▸"} ${doc.name}/`;
    group.hidden = !open;
    if (open) {
      state.open.add(doc.path);
      loadChildren(doc.path, group);
    } else {
      state.open.delete(doc.path);
    }
  };
  toggle.addEventListener("click", () => show(toggle.getAttribute("aria-expanded") !== "true"));
  if (state.open.has(doc.path)) show(true);
  // Listed again while the keyboard was on this directory: it stays there.
  if (state.focused === doc.path) queueMicrotask(() => toggle.focus());
  renderBadges(badges);
  return item;
}

// Lists the tree again after a job changed it; what was expanded and is still there stays
// expanded.
function reloadOpenDirectories() {
  const focused = document.activeElement;
  state.focused = focused && focused.closest("#tree") ? focused.dataset.path : null;
  loadChildren("/", $("tree"));
}

function renderBadges(container) {
  const lock = state.locks.get(container.dataset.path);
  container.replaceChildren();
  if (!lock) return;
  container.append(el("span", {
    class: `badge ${lock.mode}`,
    title: `${lock.lock_type} lock (${lock.mode}) held by ${holders(lock)}`,
  }, `${lock.mode} · ${short(holderNames(lock))} · ${leaseLeft(lock)}`));
  const waiters = lock.waiters || [];
  if (waiters.length) {
    // Who, in order: in the title here, and in the locks table.
    container.append(el("span", {
      class: "badge wait",
      title: waiters.map((w, i) => `${i + 1}. ${w.mode} ${w.holder}`).join("\n"),
    }, `${waiters.length} waiting (first: ${waiters[0].mode})`));
  }
}

function renderAllBadges() {
  for (const container of document.querySelectorAll(".badges")) renderBadges(container);
}

// ---- locks and jobs ----

function renderLocks() {
  const rows = [...state.locks.values()]
    .sort((a, b) => a.path.localeCompare(b.path))
    .map((lock) => el("tr", {},
      el("td", {}, lock.path),
      el("td", {}, `${lock.mode} (${lock.lock_type})`),
      el("td", {}, holders(lock)),
      el("td", {}, leaseLeft(lock)),
      el("td", {}, (lock.waiters || []).map((w, i) => `${i + 1}. ${w.mode} ${w.holder}`).join("; "))));
  $("locks").replaceChildren(...rows);
  $("no-locks").hidden = rows.length > 0;
}

function describe(job) {
  if (job.kind === "delete") return `rm${job.recursive ? " -r" : ""} ${job.path}`;
  return `${job.kind === "copy" ? "cp" : "mv"} ${job.from} → ${job.to}`;
}

function renderJobs() {
  const jobs = [...state.jobs.values()].sort((a, b) => b.submitted_at - a.submitted_at);
  $("jobs").replaceChildren(...jobs.map((job) => {
    const progress = job.progress || { done: 0, total: 0 };
    const bar = el("progress", { max: String(Math.max(progress.total, 1)), value: String(progress.done),
      "aria-label": `${describe(job)}: ${progress.done} of ${progress.total} documents` });
    return el("li", { "data-job": job.id, "data-state": job.state },
      el("div", {}, describe(job), " ", el("span", { class: `state ${job.state}` }, job.state)),
      bar,
      job.waiting_for ? el("div", { class: "hint" }, `waiting for ${job.waiting_for}`) : null,
      job.error ? el("div", { class: "error" }, job.error) : null,
      job.report ? el("div", { class: "hint" }, `${progress.done} documents written`) : null);
  }));
}

function setLocks(locks) {
  state.locks = new Map(locks.map((lock) => [lock.path, lock]));
  renderLocks();
  renderAllBadges();
}

// Keeps `job`; true if it has just finished (the tree may have changed).
function setJob(job) {
  const before = state.jobs.get(job.id);
  state.jobs.set(job.id, job);
  return job.state === "done" && (!before || before.state !== "done");
}

function connect() {
  const events = new EventSource("/events");
  const heard = (data) => {
    state.offset = data.at - Date.now();
    $("status").textContent = "live";
  };
  events.addEventListener("snapshot", (e) => {
    const data = JSON.parse(e.data);
    heard(data);
    state.jobs = new Map();
    for (const job of data.jobs) state.jobs.set(job.id, job);
    setLocks(data.locks);
    renderJobs();
    setStory(data.story);
    // A page opened half-way through the demo opens the directories of the run under way.
    if (state.story.length) reloadOpenDirectories();
  });
  events.addEventListener("note", (e) => {
    const data = JSON.parse(e.data);
    heard(data);
    takeNote(data, true);
  });
  events.addEventListener("locks", (e) => {
    const data = JSON.parse(e.data);
    heard(data);
    setLocks(data.locks);
  });
  events.addEventListener("jobs", (e) => {
    const data = JSON.parse(e.data);
    heard(data);
    // Every job first, then the tree listed again once, however many finished.
    const finished = data.jobs.map(setJob).some(Boolean);
    renderJobs();
    if (finished) reloadOpenDirectories();
  });
  events.addEventListener("error", (e) => {
    if (e.data) {
      const data = JSON.parse(e.data);
      $("status").textContent = `the service could not read the locks: ${data.error}`;
    } else {
      $("status").textContent = "connection lost; reconnecting…";
    }
  });
}

// ---- the demo's story (`fsrename demo --serve`) ----

// Takes one of the demo's notes; `live` when it comes as it happens (not from a snapshot).
function takeNote(note, live) {
  if (note.kind === "progress") {
    state.progress.set(note.job, note);
    renderStoryJobs();
    return;
  }
  const run = state.story[state.story.length - 1];
  if (note.kind === "scenario") {
    if (run) run.open = false;
    state.story.push({ scenario: note, steps: [], verdict: null, open: true });
    state.progress = new Map();
    // The directories where the jobs' locks are: open, so their badges are in view.
    for (const path of note.open || []) state.open.add(path);
  } else if (note.kind === "ready") {
    // Nothing to show but the tree itself.
  } else if (note.kind === "step" && run) {
    run.steps.push(note);
  } else if (note.kind === "verdict" && run) {
    run.verdict = note;
  } else if (note.kind === "end") {
    state.storyEnd = note;
  }
  if (live) {
    renderStory();
    renderStoryJobs();
    // The tree built afresh for a run; a verdict comes once both jobs are over.
    if (note.kind === "ready" || note.kind === "verdict") reloadOpenDirectories();
  }
}

function setStory(notes) {
  state.story = [];
  state.storyEnd = null;
  for (const note of notes || []) takeNote(note, false);
  renderStory();
  renderStoryJobs();
}

function seconds(ms) {
  return `${(ms / 1000).toFixed(1)} s`;
}

// What a run came to, beside its title: whether it lost anything, and whether that is what
// the demo meant to show.
function verdictLabel(verdict) {
  const kept = !verdict.lost;
  const text = `: ${kept ? "nothing lost" : "something lost"}${verdict.ok ? "" : " (NOT what the demo expects)"}`;
  return el("span", { class: `verdict ${kept && verdict.ok ? "ok" : "bad"}` }, text);
}

function renderStory() {
  // The keyboard's place in the story, kept across the rebuild.
  const focused = document.activeElement;
  const focusedRun = focused && focused.closest("#story details") ? focused.closest("#story details").dataset.run : null;
  const shown = state.story.length > 0;
  $("story-panel").hidden = !shown;
  document.querySelector("main").classList.toggle("demo", shown);
  $("story").replaceChildren(...state.story.map((run) => {
    const { scenario, verdict } = run;
    const details = el("details", { "data-run": String(scenario.n) },
      el("summary", {}, `${scenario.n} of ${scenario.of}: ${scenario.title}`,
        verdict ? verdictLabel(verdict) : null),
      el("p", { class: "hint" }, `Expected: ${scenario.expectation}.`),
      el("ol", { class: "steps" }, ...run.steps.map((step) => el("li", {},
        el("span", { class: "when" }, seconds(step.ms)), " ",
        el("span", { class: `job job-${step.job}` }, `job ${step.job}`), " ", step.what))),
      verdict ? el("p", { class: "damage", "data-lost": verdict.lost ? "yes" : "no" },
        el("strong", {}, "What was lost: "), verdict.damage) : null,
      verdict ? el("p", { class: "hint" }, `${verdict.verdict}. Documents: ${verdict.documents[0]} before, ${verdict.documents[1]} after.`) : null);
    details.open = run.open;
    details.addEventListener("toggle", () => { run.open = details.open; });
    return el("li", {}, details);
  }));
  if (state.storyEnd) {
    $("story").append(el("li", { class: "end" }, el("p", { class: state.storyEnd.ok ? "" : "error" }, state.storyEnd.summary)));
  }
  if (focusedRun) {
    const summary = document.querySelector(`#story details[data-run="${focusedRun}"] summary`);
    if (summary) summary.focus();
  }
}

function renderStoryJobs() {
  const run = state.story[state.story.length - 1];
  const jobs = run && !run.verdict ? [...state.progress.values()].sort((a, b) => a.job.localeCompare(b.job)) : [];
  $("story-jobs").replaceChildren(...jobs.map((p) => el("div", { class: "story-job" },
    el("span", {}, `job ${p.job}: ${p.done} of ${p.total} documents moved`),
    el("progress", { max: String(Math.max(p.total, 1)), value: String(p.done), "aria-label": `job ${p.job}: ${p.done} of ${p.total} documents moved` }))));
}

// ---- the form ----

function showError(field, message) {
  const input = $(field);
  if (input) input.setAttribute("aria-invalid", message ? "true" : "false");
  $(`${input ? field : "form"}-error`).textContent = message || "";
}

// The form for the kind chosen: a delete has a path and `recursive` instead of two paths.
function showKind() {
  const kind = $("kind").value;
  const remove = kind === "delete";
  $("from-label").textContent = remove ? "Path" : "From";
  $("to-part").hidden = remove;
  $("recursive-part").hidden = !remove;
  $("submit").textContent = { rename: "Rename", copy: "Copy", delete: "Delete" }[kind];
}

async function submitJob(event) {
  event.preventDefault();
  for (const field of ["from", "to", "form"]) showError(field, "");
  const kind = $("kind").value;
  const [route, body] = kind === "delete"
    ? ["/deletes", { path: $("from").value, recursive: $("recursive").checked }]
    : [kind === "copy" ? "/copies" : "/renames", { from: $("from").value, to: $("to").value }];
  let response, answer;
  try {
    response = await fetch(route, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    answer = await response.json();
  } catch (e) {
    showError("form", `the service did not answer: ${e.message}`);
    return;
  }
  if (response.ok) {
    $("form-error").textContent = "";
    $("from").value = "";
    $("to").value = "";
    return;
  }
  // A delete's `path` is in the first field.
  const named = { from: "from", path: "from", to: "to" }[answer.field];
  const field = named || "form";
  showError(field, answer.error || response.statusText);
  if (named) $(field).focus();
}

// ---- the token, when the service wants one ----

async function start() {
  if (!(await loadChildren("/", $("tree")))) {
    $("status").textContent = "the service wants its token";
    // Too many wrong tokens from here: say for how long (the service's message).
    $("token-error").textContent = state.refusedStatus === 429 ? state.refused : "";
    $("token-form").hidden = false;
    $("token").focus();
    return;
  }
  $("token-form").hidden = true;
  connect();
}

async function submitToken(event) {
  event.preventDefault();
  const input = $("token");
  const body = JSON.stringify({ token: input.value });
  input.value = ""; // never kept, never shown
  let response, answer;
  try {
    response = await fetch("/session", { method: "POST", headers: { "content-type": "application/json" }, body });
    answer = await response.json();
  } catch (e) {
    $("token-error").textContent = `the service did not answer: ${e.message}`;
    return;
  }
  if (!response.ok) {
    input.setAttribute("aria-invalid", "true");
    $("token-error").textContent = answer.error || response.statusText;
    input.focus();
    return;
  }
  input.setAttribute("aria-invalid", "false");
  $("token-error").textContent = "";
  start();
}

document.addEventListener("DOMContentLoaded", () => {
  $("rename-form").addEventListener("submit", submitJob);
  $("kind").addEventListener("change", showKind);
  showKind();
  $("token-form").addEventListener("submit", submitToken);
  start();
  // Leases count down between events.
  setInterval(() => { renderAllBadges(); renderLocks(); }, 1000);
});
