// The track filter's language (docs/ui.md "Track control"): whitespace-separated terms, all of which a
// track must match. A bare word matches the track's name or its group (process, device) name, ignoring
// case; `key:value` matches one field; `-term` excludes; `key:a,b` matches either value; "quoted words"
// keep their spaces. A word whose prefix is not a known key (`aten::mm`) is plain text.

import { LANE_TITLES } from "../lib/util.js";

// lanes grouped by where they run: `lane:host`, `lane:device`
const LANE_ALIASES = { host: ["cpu", "driver"], device: ["pcie", "eu"], gpu: ["pcie", "eu"] };

const low = (v) => (v === null || v === undefined ? "" : String(v).toLowerCase());

/** Does the lane `lane` answer to the filter value `v` (its key's prefix, a word of its title, an alias)? */
function laneIs(lane, v) {
  if (LANE_ALIASES[v]) return LANE_ALIASES[v].includes(lane);
  return lane.startsWith(v) || low(LANE_TITLES[lane]).split(/\s+/).some((w) => w.startsWith(v));
}

// key -> (track, lower-cased value) -> bool; numeric ids match exactly, names by substring
const FIELDS = {
  name: (t, v) => low(t.name).includes(v),
  lane: (t, v) => laneIs(t.lane, v),
  // a merged job's device is "rank 2/0": dev:0 is device 0 of every rank, dev:"rank 2/0" one of them
  dev: (t, v) => t.device !== null && t.device !== undefined && (low(t.device) === v || low(t.device).split("/").pop().trim() === v),
  // a merged job's ranks are its groups ("rank 3"), their devices "rank 3/..."
  rank: (t, v) => low(t.group_name) === `rank ${v}` || low(t.device).startsWith(`rank ${v}/`),
  proc: (t, v) => low(t.process) === v || low(t.group_name).includes(v),
  thread: (t, v) => low(t.thread) === v || low(t.name).includes(v),
  group: (t, v) => low(t.group_name).includes(v),
  id: (t, v) => low(t.track_id) === v,
};
const ALIASES = { device: "dev", process: "proc", pid: "proc", tid: "thread", track: "id" };
const TEXT = (t, v) => low(t.name).includes(v) || low(t.group_name).includes(v);

export const FILTER_KEYS = Object.keys(FIELDS);

/** Parse filter text into {text, terms: [{key, values, neg}]}; never throws (unknown keys are text). */
export function parseTrackFilter(text) {
  const terms = [];
  const src = String(text || "");
  for (const m of src.matchAll(/(-?)(?:([A-Za-z]+):)?("([^"]*)"?|\S*)/g)) {
    if (!m[0]) continue;
    const neg = m[1] === "-";
    let key = m[2] ? m[2].toLowerCase() : null;
    let raw = m[4] !== undefined ? m[4] : m[3];
    key = ALIASES[key] || key;
    if (key && !FIELDS[key]) { raw = `${m[2]}:${raw}`; key = null; } // e.g. aten::mm
    const values = (key ? raw.split(",") : [raw]).map((v) => v.trim().toLowerCase()).filter((v) => v !== "");
    if (!values.length) continue; // "lane:" while typing, or a lone "-"
    terms.push({ key, values, neg });
  }
  return { text: src.trim(), terms };
}

/** Whether track `t` passes a parsed filter (no terms: every track does). */
export function trackMatches(filter, t) {
  for (const term of filter.terms) {
    const f = term.key ? FIELDS[term.key] : TEXT;
    const hit = term.values.some((v) => f(t, v));
    if (hit === term.neg) return false;
  }
  return true;
}
