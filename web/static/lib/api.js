// Client of the JSON/binary API documented in docs/api.md. Every error becomes an Error whose message is
// the server's error.message (or a description of what went wrong on the way).

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** The API's error for a failed response: its error.message, else the status line. */
export async function errorFrom(r) {
  let code = "http_" + r.status, message = `${r.status} ${r.statusText}`;
  try {
    const j = await r.json();
    if (j && j.error) { code = j.error.code || code; message = j.error.message || message; }
  } catch (_) { /* not JSON: keep the status line */ }
  return new ApiError(r.status, code, message);
}

export async function getJson(url, opts = {}) {
  const r = await fetch(url, opts);
  if (!r.ok) throw await errorFrom(r);
  return r.json();
}

export class Api {
  constructor(trace_id) {
    this.id = trace_id;
    this.base = `/api/traces/${encodeURIComponent(trace_id)}`;
    this.live = false;
  }

  /** Read a capture that is still running: metadata, tiles, slices and search from /api/live/{id}. */
  goLive() {
    this.live = true;
    this.dataBase = `/api/live/${encodeURIComponent(this.id)}`;
  }

  /** The capture stopped and was published under the same id: read it as any trace from now on. */
  goFinal() { this.live = false; }

  get data() { return this.live ? this.dataBase : this.base; }

  meta() { return getJson(this.data); }

  tileUrl(level, index, group) {
    const q = group ? `?group=${encodeURIComponent(group)}` : "";
    return `${this.data}/tiles/${level}/${index}${q}`;
  }

  slice(slice_id) { return getJson(`${this.data}/slices/${encodeURIComponent(slice_id)}`); }

  search(q, offset = 0, limit = 100) {
    const p = new URLSearchParams({ q, offset: String(offset), limit: String(limit) });
    return getJson(`${this.data}/search?${p}`);
  }

  aggregate(start_ns, end_ns, track_ids) {
    if (this.live) return Promise.reject(new Error("area aggregation is available once the capture stops"));
    return getJson(`${this.base}/aggregate`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ start_ns: Math.round(start_ns), end_ns: Math.round(end_ns), tracks: track_ids }),
    });
  }

  // while live there are no findings yet (the passes run when the capture stops, then the page shows them)
  findings() { return this.live ? Promise.resolve({ findings: [], live: true }) : getJson(`${this.base}/findings`); }
  summary() {
    if (this.live) return Promise.reject(new Error("the summary is computed once the capture stops"));
    return getJson(`${this.base}/summary`);
  }

  /** Slices per depth and the deepest launch call of each track (what a deep track folds). */
  depths() { return this.live ? Promise.resolve({ tracks: [] }) : getJson(`${this.base}/depths`); }
  /** {state, version, passes: [{pass, status, reason, n_findings, impact_ns, ...}]} */
  analysis() { return getJson(`${this.base}/analysis`); }
  /** Findings grouped by pass, then by slice name; `v` (the analysis version) keeps caches honest. */
  findingsGroups(v) { return getJson(`${this.base}/findings/groups${v ? `?v=${encodeURIComponent(v)}` : ""}`); }
  findingsAt(v) { return getJson(`${this.base}/findings${v ? `?v=${encodeURIComponent(v)}` : ""}`); }
  /** The analysis status event stream's URL (server-sent events, {state, version}). */
  analysisEventsUrl() { return `${this.base}/analysis/events`; }
}

export function listTraces() { return getJson("/api/traces"); }
