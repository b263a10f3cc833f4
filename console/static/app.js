// rmqpy console: a page per route (#/, #/topics, #/topic/NAME, #/groups, #/group/NAME,
// #/messages), each drawn from the JSON API and refreshed every few seconds.
"use strict";

const REFRESH_MS = 3000;
let timer = null;
let charts = [];

// --- helpers -----------------------------------------------------------------------------------
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  };
  const res = await fetch(path, init);
  const data = await res.json().catch(() => ({ error: res.statusText }));
  if (!res.ok) throw new Error(data.error || res.statusText);
  return data;
}

const fmtInt = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));
const fmtRate = (n) => (n ? Number(n).toFixed(1) : "0");
const fmtTime = (ms) => (ms > 0 ? new Date(ms).toLocaleString("sv-SE") : "-");
function fmtBytes(n) {
  n = Number(n || 0);
  for (const unit of ["B", "KiB", "MiB", "GiB"]) {
    if (n < 1024 || unit === "GiB") return unit === "B" ? `${n} B` : `${n.toFixed(1)} ${unit}`;
    n /= 1024;
  }
}
const enc = encodeURIComponent;

function table(columns, rows, testid) {
  return h("table", { "data-testid": testid },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.num ? "num" : null }, c.title)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, columns.map((c) => {
      const v = c.value(r);
      return h("td", { class: c.num ? "num" : null }, v instanceof Node ? v : String(v ?? "-"));
    })))));
}

function section(title, ...content) { return [h("h2", {}, title), ...content]; }
function setStatus(text, bad) {
  const el = document.getElementById("status");
  el.textContent = text;
  el.className = "status" + (bad ? " error" : "");
}
function message(el, text, ok) { el.textContent = text; el.className = ok ? "ok" : "error"; }

// A box whose content is drawn by `load`, again on every refresh when `auto`.
function live(load, auto = true) {
  const box = h("div", {});
  box.auto = auto;
  box.refresh = async () => {
    try {
      const content = await load();
      box.replaceChildren(...[content].flat());
      setStatus("updated " + new Date().toLocaleTimeString("sv-SE"));
    } catch (e) {
      box.replaceChildren(h("p", { class: "error" }, e.message));
      setStatus(e.message, true);
    }
  };
  return box;
}

// --- charts ------------------------------------------------------------------------------------
const PALETTE = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#db2777", "#0891b2"];

function chart(title, pick) {
  const box = h("div", { class: "chart panel" }, h("h3", {}, title));
  const holder = h("div", {});
  box.append(holder);
  let plot = null;
  let names = "";
  box.refresh = async () => {
    const history = await api("/api/history");
    const series = pick(history);
    const keys = Object.keys(series);
    const data = [history.times, ...keys.map((k) => series[k])];
    if (!history.times.length || !keys.length) {
      holder.replaceChildren(h("p", { class: "note" }, "collecting samples..."));
      plot = null;
      return;
    }
    if (!plot || names !== keys.join("\n")) {
      names = keys.join("\n");
      holder.replaceChildren();
      plot = new uPlot({
        width: Math.max(480, holder.clientWidth || 520), height: 220,
        series: [{}, ...keys.map((k, i) => ({ label: k, stroke: PALETTE[i % PALETTE.length], width: 2 }))],
        axes: [{}, { size: 60 }],
      }, data, holder);
      charts.push(plot);
    } else {
      plot.setData(data);
    }
  };
  return box;
}

// --- pages -------------------------------------------------------------------------------------
async function clusterPage() {
  const brokers = live(async () => {
    const { brokers } = await api("/api/cluster");
    return table([
      { title: "cluster", value: (b) => b.cluster },
      { title: "broker", value: (b) => b.broker },
      { title: "id", value: (b) => b.id, num: true },
      { title: "address", value: (b) => b.address },
      { title: "version", value: (b) => b.info.brokerVersionDesc },
      { title: "uptime", value: (b) => b.info.runtime },
      { title: "connections", value: (b) => b.info.connections, num: true },
      { title: "commitlog", value: (b) => fmtBytes(b.info.commitLogMaxOffset), num: true },
      { title: "dispatch behind", value: (b) => fmtBytes(b.info.dispatchBehindBytes), num: true },
    ], brokers, "brokers");
  });
  const charts = h("div", { class: "charts" },
    chart("Messages in per second, by topic", (hs) => hs.in),
    chart("Lag by group (messages)", (hs) => hs.lag));
  return [h("h1", {}, "Cluster"), brokers, ...section("Activity", charts)];
}

async function topicsPage() {
  const result = h("span", {});
  const form = h("form", { class: "inline panel", onsubmit: async (e) => {
    e.preventDefault();
    const f = e.target;
    try {
      const made = await api("/api/topics", { topic: f.topic.value, queues: Number(f.queues.value) });
      message(result, `created ${made.topic} with ${made.queues} queues`, true);
      f.topic.value = "";
      list.refresh();
    } catch (err) { message(result, err.message); }
  } },
  h("label", {}, "new topic", h("input", { name: "topic", id: "new-topic", required: true, placeholder: "Orders" })),
  h("label", {}, "queues", h("input", { name: "queues", id: "new-topic-queues", type: "number", min: 1, max: 1024, value: 8 })),
  h("button", { type: "submit", id: "create-topic" }, "Create"), result);
  const system = h("input", { type: "checkbox", onchange: () => list.refresh() });
  const list = live(async () => {
    const rows = await api("/api/topics" + (system.checked ? "?system=1" : ""));
    return table([
      { title: "topic", value: (t) => h("a", { href: `#/topic/${enc(t.topic)}` }, t.topic) },
      { title: "queues", value: (t) => t.queues, num: true },
      { title: "messages", value: (t) => fmtInt(t.messages), num: true },
      { title: "in/s", value: (t) => fmtRate(t.inRate), num: true },
      { title: "out/s", value: (t) => fmtRate(t.outRate), num: true },
      { title: "perm", value: (t) => t.perm, num: true },
    ], rows, "topics");
  });
  return [h("h1", {}, "Topics"), form, h("label", { class: "note" }, system, " show system topics"), list];
}

async function topicPage(name) {
  const info = live(async () => {
    const t = await api(`/api/topics/${enc(name)}`);
    return [
      h("p", {}, h("span", { "data-testid": "topic-messages" }, `${fmtInt(t.messages)} messages`),
        ` · ${fmtRate(t.inRate)} in/s · ${fmtRate(t.outRate)} out/s · consumed by `,
        t.consumers.length ? t.consumers.map((g) => [h("a", { href: `#/group/${enc(g)}` }, g), " "]) : "no group"),
      table([
        { title: "broker", value: (q) => q.brokerName },
        { title: "queue", value: (q) => q.queueId, num: true },
        { title: "min offset", value: (q) => fmtInt(q.minOffset), num: true },
        { title: "max offset", value: (q) => fmtInt(q.maxOffset), num: true },
        { title: "messages", value: (q) => fmtInt(q.maxOffset - q.minOffset), num: true },
        { title: "last stored", value: (q) => fmtTime(q.lastUpdateTimestamp) },
      ], t.queues, "queues"),
    ];
  });
  const result = h("span", { id: "send-result" });
  const send = h("form", { class: "inline panel", onsubmit: async (e) => {
    e.preventDefault();
    const f = e.target;
    try {
      const sent = await api(`/api/topics/${enc(name)}/messages`,
        { body: f.body.value, tags: f.tags.value, keys: f.keys.value });
      message(result, `sent ${sent.msgId} to queue ${sent.queueId}`, true);
      info.refresh();
    } catch (err) { message(result, err.message); }
  } },
  h("label", {}, "body", h("textarea", { name: "body", id: "send-body" })),
  h("label", {}, "tags", h("input", { name: "tags", id: "send-tags" })),
  h("label", {}, "keys", h("input", { name: "keys", id: "send-keys", placeholder: "order-1 user-7" })),
  h("button", { type: "submit", id: "send" }, "Send"), result);
  return [h("h1", {}, `Topic ${name}`), info, ...section("Send a message", send),
    ...section("Activity", h("div", { class: "charts" },
      chart(`Messages in per second`, (hs) => (name in hs.in ? { [name]: hs.in[name] } : {}))))];
}

async function groupsPage() {
  const list = live(async () => {
    const rows = await api("/api/groups");
    return table([
      { title: "group", value: (g) => h("a", { href: `#/group/${enc(g.group)}` }, g.group) },
      { title: "online", value: (g) => g.online, num: true },
      { title: "model", value: (g) => g.model || "-" },
      { title: "topics", value: (g) => g.topics.join(", ") || "-" },
      { title: "lag", value: (g) => fmtInt(g.lag), num: true },
      { title: "out/s", value: (g) => fmtRate(g.outRate), num: true },
      { title: "retry max", value: (g) => g.retryMaxTimes, num: true },
    ], rows, "groups");
  });
  return [h("h1", {}, "Consumer groups"), list];
}

async function groupPage(name) {
  // the topics it consumes first, then every other topic (a new group may start anywhere)
  const everyTopic = (await api("/api/topics")).map((t) => t.topic);
  const topicChoice = h("select", { name: "topic", id: "reset-topic", required: true });
  const info = live(async () => {
    const g = await api(`/api/groups/${enc(name)}`);
    const topics = [...new Set(g.queues.map((q) => q.topic))].filter((t) => !t.startsWith("%RETRY%"));
    const choices = [...topics, ...everyTopic.filter((t) => !topics.includes(t))];
    if ([...topicChoice.options].map((o) => o.value).join("\n") !== choices.join("\n")) {
      const chosen = topicChoice.value;
      topicChoice.replaceChildren(...choices.map((t) => h("option", { value: t }, t)));
      if (choices.includes(chosen)) topicChoice.value = chosen;
    }
    const members = g.members;
    return [
      h("p", {}, h("span", { "data-testid": "group-lag", class: g.lag > 0 ? "lag-high" : null },
        `lag ${fmtInt(g.lag)}`), ` · ${fmtRate(g.outRate)} consumed/s · `,
        members ? `${members.connections.length} online (${members.messageModel}, ${members.consumeType})` : "no consumer online"),
      table([
        { title: "topic", value: (q) => q.topic },
        { title: "broker", value: (q) => q.brokerName },
        { title: "queue", value: (q) => q.queueId, num: true },
        { title: "broker offset", value: (q) => fmtInt(q.brokerOffset), num: true },
        { title: "consumer offset", value: (q) => fmtInt(q.consumerOffset), num: true },
        { title: "lag", value: (q) => fmtInt(q.lag), num: true },
        { title: "last consumed", value: (q) => fmtTime(q.lastTimestamp) },
      ], g.queues, "progress"),
      ...section("Members", members ? table([
        { title: "client id", value: (c) => c.clientId },
        { title: "address", value: (c) => c.clientAddr },
        { title: "language", value: (c) => c.language },
        { title: "version", value: (c) => c.version, num: true },
      ], members.connections, "members") : h("p", { class: "note" }, "no consumer of this group is online")),
    ];
  });
  const result = h("span", {});
  const reset = h("form", { class: "inline panel", onsubmit: async (e) => {
    e.preventDefault();
    const f = e.target;
    const to = f.where.value === "time" ? new Date(f.time.value).getTime() : Number(f.where.value);
    if (Number.isNaN(to)) return message(result, "pick a time");
    if (!confirm(`Move ${name}'s offsets on ${f.topic.value}? Its consumers go on from there.`)) return;
    try {
      const done = await api(`/api/groups/${enc(name)}/reset`, { topic: f.topic.value, to });
      message(result, `offsets moved: ${done.map((q) => `${q.brokerName}:${q.queueId}→${q.offset}`).join(", ")}`, true);
      info.refresh();
    } catch (err) { message(result, err.message); }
  } },
  h("label", {}, "topic", topicChoice),
  h("label", {}, "to", h("select", { name: "where" },
    h("option", { value: "time" }, "a time"), h("option", { value: "0" }, "the start"),
    h("option", { value: "-1" }, "the end (skip the backlog)"))),
  h("label", {}, "time", h("input", { name: "time", type: "datetime-local", step: 1 })),
  h("button", { type: "submit" }, "Reset offsets"), result);
  const dlqResult = h("span", {});
  const dlq = live(async () => {  // drawn once: a refresh would clear the ticks
    const d = await api(`/api/groups/${enc(name)}/dlq`);
    if (!d.total) return h("p", { class: "note" }, "the dead-letter queue is empty");
    const boxes = [];
    const rows = table([
      { title: "", value: (m) => { const b = h("input", { type: "checkbox", value: m.msgId }); boxes.push(b); return b; } },
      { title: "msgId", value: (m) => m.msgId },
      { title: "topic", value: (m) => m.properties.RETRY_TOPIC || "-" },
      { title: "stored", value: (m) => fmtTime(m.storeTimestamp) },
      { title: "body", value: (m) => (m.body ?? `(${m.bodySize} bytes)`).slice(0, 60) },
    ], d.messages, "dlq");
    const resend = h("button", { onclick: async () => {
      const ids = boxes.filter((b) => b.checked).map((b) => b.value);
      if (!ids.length) return message(dlqResult, "tick the messages to resend");
      try {
        await api(`/api/groups/${enc(name)}/dlq/resend`, { msgIds: ids });
        message(dlqResult, `${ids.length} resent to ${name}`, true);
      } catch (err) { message(dlqResult, err.message); }
    } }, "Resend to the group");
    return [h("p", {}, `${fmtInt(d.total)} messages`), rows, h("p", {}, resend, " ", dlqResult)];
  }, false);
  return [h("h1", {}, `Group ${name}`), info, ...section("Reset offsets", reset),
    ...section("Activity", h("div", { class: "charts" },
      chart("Lag (messages)", (hs) => (name in hs.lag ? { [name]: hs.lag[name] } : {})),
      chart("Consumed per second", (hs) => (name in hs.out ? { [name]: hs.out[name] } : {})))),
    ...section("Dead-letter queue", dlq)];
}

function hex(b64) {
  const bytes = atob(b64);
  let out = "";
  for (let i = 0; i < bytes.length; i += 16) {
    const row = [...bytes.slice(i, i + 16)];
    out += i.toString(16).padStart(8, "0") + "  "
      + row.map((c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join(" ").padEnd(48) + "  "
      + row.map((c) => (c >= " " && c <= "~" ? c : ".")).join("") + "\n";
  }
  return out;
}

function messageCard(m) {
  const pre = h("pre", { "data-testid": "message-body" }, m.body ?? hex(m.bodyBase64));
  let asHex = m.body === null;
  const toggle = h("button", { class: "secondary", onclick: () => {
    asHex = !asHex;
    pre.textContent = asHex ? hex(m.bodyBase64) : (m.body ?? "(not UTF-8 text)");
    toggle.textContent = asHex ? "as text" : "as hex";
  } }, asHex ? "as text" : "as hex");
  const download = `/api/messages/body?topic=${enc(m.topic)}&broker=${enc(m.brokerName)}&queue=${m.queueId}&offset=${m.queueOffset}`;
  const field = (k, v) => h("div", {}, h("b", {}, k), h("span", {}, v));
  const props = Object.entries(m.properties).map(([k, v]) => field(k, v));
  return h("div", { class: "msg", "data-testid": "message" },
    h("div", { class: "head" }, h("span", { class: "pill" }, m.topic),
      h("span", { "data-testid": "message-id" }, m.msgId), toggle,
      h("a", { href: download }, `download (${fmtBytes(m.bodySize)})`)),
    h("div", { class: "grid" },
      field("queue", `${m.brokerName}:${m.queueId} @ ${m.queueOffset}`), field("offsetMsgId", m.offsetMsgId),
      field("tags", m.tags || "-"), field("keys", (m.keys || []).join(" ") || "-"),
      field("born", `${fmtTime(m.bornTimestamp)} from ${m.bornHost}`),
      field("stored", `${fmtTime(m.storeTimestamp)} on ${m.storeHost}`),
      field("reconsume times", m.reconsumeTimes), ...props),
    pre);
}

async function messagesPage() {
  const results = h("div", { id: "results" });
  const by = h("select", { name: "by", id: "lookup-by" },
    ["key", "id", "offset", "time"].map((v) => h("option", { value: v }, `by ${v}`)));
  const form = h("form", { class: "inline panel", onsubmit: async (e) => {
    e.preventDefault();
    const f = e.target;
    const q = new URLSearchParams({ topic: f.topic.value });
    if (by.value === "key") q.set("key", f.value.value);
    if (by.value === "id") q.set("id", f.value.value);
    if (by.value === "offset") { q.set("broker", f.broker.value); q.set("queue", f.queue.value); q.set("offset", f.value.value); }
    if (by.value === "time") q.set("time", String(new Date(f.value.value).getTime()));
    try {
      const found = await api("/api/messages?" + q);
      results.replaceChildren(h("p", { class: "note" }, `${found.length} found`), ...found.map(messageCard));
    } catch (err) { results.replaceChildren(h("p", { class: "error" }, err.message)); }
  } },
  h("label", {}, "look up", by),
  h("label", {}, "topic", h("input", { name: "topic", id: "lookup-topic" })),
  h("label", {}, "key, id, offset or time", h("input", { name: "value", id: "lookup-value", placeholder: "order-1" })),
  h("label", {}, "broker (by offset)", h("input", { name: "broker", value: "broker-a" })),
  h("label", {}, "queue (by offset)", h("input", { name: "queue", type: "number", value: 0, min: 0 })),
  h("button", { type: "submit", id: "lookup" }, "Find"));
  return [h("h1", {}, "Messages"),
    h("p", { class: "note" }, "A time is local, as 2026-11-26T09:00. By id: the msgId a producer got back (give the topic), or an offsetMsgId."),
    form, results];
}

// --- routing -----------------------------------------------------------------------------------
const ROUTES = [
  [/^#\/?$/, "cluster", clusterPage], [/^#\/topics$/, "topics", topicsPage],
  [/^#\/topic\/(.+)$/, "topics", topicPage], [/^#\/groups$/, "groups", groupsPage],
  [/^#\/group\/(.+)$/, "groups", groupPage], [/^#\/messages$/, "messages", messagesPage],
];

async function route() {
  clearInterval(timer);
  charts.forEach((c) => c.destroy());
  charts = [];
  const hash = location.hash || "#/";
  const [re, nav, page] = ROUTES.find(([pattern]) => pattern.test(hash)) || ROUTES[0];
  const arg = (hash.match(re) || [])[1];
  document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active", a.dataset.nav === nav));
  const content = await page(arg ? decodeURIComponent(arg) : undefined);
  const main = document.getElementById("page");
  main.replaceChildren(...content);
  const refreshers = [...main.querySelectorAll("*")].filter((el) => el.refresh);
  refreshers.forEach((el) => el.refresh());
  timer = setInterval(() => refreshers.filter((el) => el.auto !== false).forEach((el) => el.refresh()), REFRESH_MS);
}

window.addEventListener("hashchange", route);
route();
