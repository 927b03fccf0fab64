// The gateway console: a small single-page front end over the admin REST API (/api/v1).
// No build step and no framework. Every value from the server is set as text (never as HTML).
"use strict";

const API = "/api/v1";
const AUTH_KEY = "gateway-console-auth";
const REFRESH_MS = 2000;
let refreshTimer = null;
let lastOverview = null;

// --- the API ------------------------------------------------------------------------------------

async function call(method, path, body) {
  // X-Requested-With: the server then leaves out its Basic challenge (no browser login dialog).
  const headers = { Authorization: sessionStorage.getItem(AUTH_KEY) || "", "X-Requested-With": "XMLHttpRequest" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const answer = await fetch(API + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (answer.status === 401) { logout("Your login was refused."); throw new Error("unauthorized"); }
  const text = await answer.text();
  const document = text ? JSON.parse(text) : null;
  if (!answer.ok) throw new Error((document && document.detail) ? JSON.stringify(document.detail) : answer.statusText);
  return document;
}

const enc = encodeURIComponent;

// --- building the page --------------------------------------------------------------------------

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value !== undefined && value !== null) node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function table(id, columns, rows) {
  return el("table", { id },
    el("thead", {}, el("tr", {}, columns.map(c => el("th", {}, c.title)))),
    el("tbody", {}, rows.map(row => el("tr", {}, columns.map(c => {
      const value = c.value(row);
      return el("td", c.numeric ? { class: "num" } : {}, value instanceof Node ? value : String(value ?? ""));
    })))));
}

function show(...nodes) {
  const view = document.getElementById("view");
  view.replaceChildren(...nodes);
}

function failure(error) {
  return el("p", { class: "error", id: "error" }, String(error.message || error));
}

function text(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "object" ? (value.base64 !== undefined ? "base64:" + value.base64 : JSON.stringify(value)) : String(value);
}

// --- views --------------------------------------------------------------------------------------

async function overview() {
  const now = Date.now();
  const data = await call("GET", "/overview");
  const previous = lastOverview;
  lastOverview = { at: now, data };
  const rate = (meter, field) => {
    if (!previous) return "…";
    const before = previous.data.meters.find(m => m.tenant === meter.tenant && m.namespace === meter.namespace);
    const seconds = (now - previous.at) / 1000;
    return before && seconds > 0 ? ((meter[field] - before[field]) / seconds).toFixed(1) : "…";
  };
  const card = (id, title, value) => el("div", { class: "card", id }, el("div", {}, title), el("div", { class: "value" }, value));
  const connections = Object.values(data.connections).reduce((a, b) => a + b, 0);
  show(el("h1", { id: "overview" }, "Overview"),
    el("div", { class: "cards" },
      card("card-tenants", "Tenants", data.tenants), card("card-namespaces", "Namespaces", data.namespaces),
      card("card-connections", "Connections", connections),
      card("card-kafka", "Kafka connections", data.connections.kafka || 0),
      card("card-amqp", "AMQP connections", data.connections.amqp || 0)),
    el("h2", {}, "Rates by namespace"),
    table("rates", [
      { title: "Namespace", value: m => el("a", { href: `#/ns/${enc(m.tenant)}/${enc(m.namespace)}` }, `${m.tenant}/${m.namespace}`) },
      { title: "Published msg/s", value: m => rate(m, "published_messages"), numeric: true },
      { title: "Published B/s", value: m => rate(m, "published_bytes"), numeric: true },
      { title: "Dispatched B/s", value: m => rate(m, "dispatched_bytes"), numeric: true },
      { title: "Published (total)", value: m => m.published_messages, numeric: true },
    ], data.meters));
}

async function tenants() {
  const names = await call("GET", "/tenants");
  const rows = [];
  for (const tenant of names) rows.push({ tenant, namespaces: await call("GET", `/tenants/${enc(tenant)}/namespaces`) });
  const message = el("p", { id: "form-message" });
  const createTenant = el("form", { class: "inline", id: "tenant-form", onsubmit: async event => {
    event.preventDefault();
    try { await call("PUT", `/tenants/${enc(event.target.tenant.value)}`); route(); } catch (e) { message.replaceChildren(failure(e)); }
  } }, el("label", {}, "Tenant", el("input", { name: "tenant", id: "tenant-name", required: "" })),
     el("button", { type: "submit", id: "tenant-create" }, "Create tenant"));
  const createNamespace = el("form", { class: "inline", id: "namespace-form", onsubmit: async event => {
    event.preventDefault();
    const form = event.target;
    try {
      await call("PUT", `/tenants/${enc(form.tenant.value)}/namespaces/${enc(form.namespace.value)}`);
      location.hash = `#/ns/${enc(form.tenant.value)}/${enc(form.namespace.value)}`;
    } catch (e) { message.replaceChildren(failure(e)); }
  } }, el("label", {}, "Tenant", el("select", { name: "tenant", id: "ns-tenant" }, names.map(t => el("option", { value: t }, t)))),
     el("label", {}, "Namespace", el("input", { name: "namespace", id: "ns-name", required: "" })),
     el("button", { type: "submit", id: "ns-create" }, "Create namespace"));
  show(el("h1", {}, "Tenants and namespaces"), createTenant, createNamespace, message,
    table("tenants", [
      { title: "Tenant", value: r => r.tenant },
      { title: "Namespaces", value: r => el("span", {}, r.namespaces.map(ns =>
          el("a", { href: `#/ns/${enc(r.tenant)}/${enc(ns)}`, style: "margin-right:1em" }, ns))) },
    ], rows));
}

async function namespace(tenant, ns) {
  const base = `/tenants/${enc(tenant)}/namespaces/${enc(ns)}`;
  const [info, topics, queues, subscriptions] = await Promise.all([
    call("GET", base), call("GET", `${base}/topics?limit=200`), call("GET", `${base}/queues`), call("GET", `${base}/subscriptions`)]);
  const consumers = list => list.map(c => `${c.client_id || "?"} @ ${c.address || "?"}` + (c.partitions && c.partitions.length ? ` [${c.partitions}]` : "")).join(", ");
  show(el("h1", { id: "namespace-title" }, `Namespace ${tenant}/${ns}`),
    el("p", { class: "muted" }, `${info.topics} topics, ${info.queues} queues, ${info.groups} groups; policies: ${JSON.stringify(info.policies)}`),
    el("h2", {}, `Topics (${topics.total}${topics.total > topics.topics.length ? ", first " + topics.topics.length : ""})`),
    table("topics", [
      { title: "Topic", value: t => el("a", { href: `#/topic/${enc(tenant)}/${enc(ns)}/${enc(t.name)}` }, t.name) },
      { title: "Partitions", value: t => t.partitions, numeric: true },
    ], topics.topics),
    el("h2", {}, "Queues"),
    table("queues", [
      { title: "Queue", value: q => q.name }, { title: "Messages", value: q => q.messages, numeric: true },
      { title: "Consumers", value: q => consumers(q.consumers) },
      { title: "Browse", value: q => el("a", { href: `#/topic/${enc(tenant)}/${enc(ns)}/${enc(q.topic)}` }, "messages") },
    ], queues),
    el("h2", {}, "Subscriptions"),
    table("subscriptions", [
      { title: "Topic", value: s => s.topic }, { title: "Kind", value: s => s.kind }, { title: "Name", value: s => s.name ?? "(no group)" },
      { title: "Backlog", value: s => s.partitions.reduce((sum, p) => sum + p.backlog, 0), numeric: true },
      { title: "Consumers", value: s => consumers(s.consumers) },
    ], subscriptions));
}

async function topic(tenant, ns, name) {
  const base = `/tenants/${enc(tenant)}/namespaces/${enc(ns)}/topics/${enc(name)}`;
  const info = await call("GET", base);
  const search = new URLSearchParams(sessionStorage.getItem("gateway-console-search") || "");
  const latest = [];
  if (search.toString()) {
    latest.push(...(await call("GET", `${base}/messages?${search}&limit=50`)).messages);
  } else {
    for (const p of info.partitions) {   // the newest 20 of each partition
      const offset = Math.max(p.start_offset, p.end_offset - 20);
      latest.push(...(await call("GET", `${base}/messages?partition=${p.partition}&offset=${offset}&limit=20`)).messages);
    }
  }
  const form = el("form", { class: "inline", id: "search-form", onsubmit: event => {
    event.preventDefault();
    const wanted = new URLSearchParams();
    for (const field of ["key", "header", "message_id", "offset"]) if (event.target[field].value) wanted.set(field, event.target[field].value);
    sessionStorage.setItem("gateway-console-search", wanted.toString());
    route();
  } }, ["key", "header", "message_id", "offset"].map(f => el("label", {}, f.replace("_", " "),
        el("input", { name: f, value: search.get(f) || "", placeholder: f === "header" ? "name:value" : "" }))),
     el("button", { type: "submit" }, "Find"),
     el("button", { type: "button", onclick: () => { sessionStorage.removeItem("gateway-console-search"); route(); } }, "Newest"));
  show(el("h1", { id: "topic-title" }, `Topic ${tenant}/${ns}/${name}`),
    table("partitions", [
      { title: "Partition", value: p => p.partition, numeric: true }, { title: "Start", value: p => p.start_offset, numeric: true },
      { title: "End", value: p => p.end_offset, numeric: true }, { title: "Bytes", value: p => p.size_bytes, numeric: true },
    ], info.partitions),
    el("h2", {}, "Messages"), form,
    table("messages", [
      { title: "Partition", value: m => m.partition, numeric: true }, { title: "Offset", value: m => m.offset, numeric: true },
      { title: "Time", value: m => new Date(m.timestamp_ms).toISOString() }, { title: "Protocol", value: m => m.protocol },
      { title: "Key", value: m => text(m.key) }, { title: "Value", value: m => el("span", { class: "mono message-value" }, text(m.value)) },
      { title: "Headers / properties", value: m => text(m.amqp || m.headers) },
    ], latest.sort((a, b) => b.timestamp_ms - a.timestamp_ms || b.offset - a.offset)));
}

async function users() {
  const list = await call("GET", "/users");
  const grants = await call("GET", "/permissions");
  const message = el("p", { id: "form-message" });
  const form = el("form", { class: "inline", id: "user-form", onsubmit: async event => {
    event.preventDefault();
    const f = event.target;
    const body = { password: f.password.value, tenant: f.tenant.value || undefined, namespace: f.namespace.value || undefined,
                   tags: f.tags.value ? f.tags.value.split(",").map(t => t.trim()) : [] };
    try { await call("PUT", `/users/${enc(f.name.value)}`, body); route(); } catch (e) { message.replaceChildren(failure(e)); }
  } }, el("label", {}, "Name", el("input", { name: "name", required: "" })),
     el("label", {}, "Password", el("input", { name: "password", type: "password", required: "" })),
     el("label", {}, "Tenant", el("input", { name: "tenant", placeholder: "public" })),
     el("label", {}, "Namespace", el("input", { name: "namespace", placeholder: "default" })),
     el("label", {}, "Tags", el("input", { name: "tags", placeholder: "administrator" })),
     el("button", { type: "submit" }, "Create user"));
  show(el("h1", {}, "Users"), form, message, table("users", [
    { title: "Name", value: u => u.name }, { title: "Lands in", value: u => `${u.tenant}/${u.namespace}` },
    { title: "Tags", value: u => u.tags.join(", ") },
    { title: "Permissions", value: u => u.permissions === null ? "its own namespace" : u.permissions.map(p => `${p.tenant}/${p.namespace}`).join(", ") },
    { title: "", value: u => el("button", { type: "button", onclick: async () => {
        if (confirm(`Delete user ${u.name}? Its connections are closed.`)) { await call("DELETE", `/users/${enc(u.name)}`); route(); }
      } }, "Delete") },
  ], list), ...permissions(grants));
}

// A grant governs Kafka and AMQP alike, and reaches open connections at once (docs/SECURITY.md).
function permissions(grants) {
  const message = el("p", { id: "grant-message" });
  const path = g => `/permissions/${enc(g.tenant)}/${enc(g.namespace)}/${enc(g.user)}`;
  const form = el("form", { class: "inline", id: "grant-form", onsubmit: async event => {
    event.preventDefault();
    const f = event.target;
    const grant = { user: f.user.value, tenant: f.tenant.value, namespace: f.namespace.value };
    const body = { configure: f.configure.value, write: f.write.value, read: f.read.value };
    try { await call("PUT", path(grant), body); route(); } catch (e) { message.replaceChildren(failure(e)); }
  } }, ["user", "tenant", "namespace"].map(name => el("label", {}, name, el("input", { name, required: "" }))),
     ["configure", "write", "read"].map(name => el("label", {}, name, el("input", { name, value: ".*" }))),
     el("button", { type: "submit" }, "Grant"));
  return [el("h2", {}, "Permissions"), form, message, table("permissions", [
    { title: "User", value: g => g.user }, { title: "Namespace", value: g => `${g.tenant}/${g.namespace}` },
    { title: "Configure", value: g => el("span", { class: "mono" }, g.configure) },
    { title: "Write", value: g => el("span", { class: "mono" }, g.write) },
    { title: "Read", value: g => el("span", { class: "mono" }, g.read) },
    { title: "", value: g => el("button", { type: "button", onclick: async () => {
        if (confirm(`Revoke ${g.user}'s permissions on ${g.tenant}/${g.namespace}?`)) { await call("DELETE", path(g)); route(); }
      } }, "Revoke") },
  ], grants)];
}

async function connections() {
  const list = await call("GET", "/connections");
  show(el("h1", {}, "Connections"), table("connections", [
    { title: "Id", value: c => c.id, numeric: true }, { title: "Protocol", value: c => c.protocol },
    { title: "Address", value: c => c.address }, { title: "User", value: c => c.user ?? "" },
    { title: "Namespace", value: c => c.tenant ? `${c.tenant}/${c.namespace}` : "" }, { title: "Client", value: c => c.client_id ?? "" },
    { title: "Fetching", value: c => Object.entries(c.fetching).map(([t, p]) => `${t} [${p}]`).join(", ") },
    { title: "", value: c => el("button", { type: "button", onclick: async () => { await call("DELETE", `/connections/${c.id}`); route(); } }, "Close") },
  ], list));
}

// --- routing, login -----------------------------------------------------------------------------

const ROUTES = [
  [/^#\/overview$/, overview, true], [/^#\/tenants$/, tenants, false], [/^#\/users$/, users, false],
  [/^#\/connections$/, connections, true], [/^#\/ns\/([^/]+)\/([^/]+)$/, namespace, true],
  [/^#\/topic\/([^/]+)\/([^/]+)\/([^/]+)$/, topic, true],
];

async function route() {
  clearTimeout(refreshTimer);
  if (!sessionStorage.getItem(AUTH_KEY)) return logout();
  document.getElementById("login").hidden = true;
  document.getElementById("nav").hidden = false;
  document.getElementById("who").textContent = loggedInUser();
  const hash = location.hash || "#/overview";
  const found = ROUTES.find(([pattern]) => pattern.test(hash));
  if (!found) { location.hash = "#/overview"; return; }
  const [pattern, view, refreshes] = found;
  const args = pattern.exec(hash).slice(1).map(decodeURIComponent);
  try {
    await view(...args);
  } catch (error) {
    if (error.message !== "unauthorized") show(failure(error));
    return;
  }
  // Views of live state refresh themselves; forms do not (they would lose what is being typed).
  if (refreshes) refreshTimer = setTimeout(() => { if (location.hash === hash || (!location.hash && hash === "#/overview")) route(); }, REFRESH_MS);
}

function loggedInUser() {
  const auth = sessionStorage.getItem(AUTH_KEY) || "";
  try { return decodeURIComponent(escape(atob(auth.replace(/^Basic /, "")))).split(":")[0]; } catch (e) { return ""; }
}

function logout(reason) {
  sessionStorage.removeItem(AUTH_KEY);
  clearTimeout(refreshTimer);
  document.getElementById("nav").hidden = true;
  document.getElementById("view").replaceChildren();
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = reason || "";
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login").addEventListener("submit", async event => {
    event.preventDefault();
    const user = document.getElementById("login-user").value;
    const password = document.getElementById("login-password").value;
    sessionStorage.setItem(AUTH_KEY, "Basic " + btoa(unescape(encodeURIComponent(`${user}:${password}`))));
    try {
      await call("GET", "/tenants");
    } catch (error) {
      if (sessionStorage.getItem(AUTH_KEY)) logout(String(error.message));
      return;
    }
    location.hash = location.hash || "#/overview";
    route();
  });
  document.getElementById("logout").addEventListener("click", () => logout());
  window.addEventListener("hashchange", route);
  route();
});
