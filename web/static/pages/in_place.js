// The list page opens a trace in place: while it idles it loads and evaluates the trace page's modules
// (loadTracePageAhead); a trace dropped on it, or a row's link clicked, then takes the trace page's HTML, styles
// and URL and runs its main() (pages/trace.js). That spares the navigation, the page's parse and its modules'
// evaluation: 0.1-0.2 s of a drop's time to its first tile on this machine (docs/performance.md, forty-sixth
// stop). A failure before the page is swapped is a plain navigation instead.

import { el } from "../lib/util.js";

let tracePage = null; // Promise of pages/trace.js, once asked
let opening = null; // the URL being opened in place
let shownPath = location.pathname; // the path of the page this document shows
let following = false;

/** Whether this document shows the trace list (not yet a trace opened in place). */
export const isListPage = () => document.body.classList.contains("index-page");

/** The list page: load the trace page's modules while idle, so a trace opens in place. */
export function loadTracePageAhead() {
  const load = () => {
    tracePage = import("./trace.js");
    tracePage.catch(() => { tracePage = null; });
  };
  if (window.requestIdleCallback) requestIdleCallback(load, { timeout: 2000 });
  else setTimeout(load, 200);
}

/** A page that can open a trace in place, or be one opened so (pages/trace.js): the list and the trace opened
 * from it share this document's history entries, so a step back or forward to another path loads that page. */
export function followHistory() {
  if (following) return;
  following = true;
  addEventListener("popstate", () => { if (location.pathname !== shownPath) location.reload(); });
}

/** Open the trace page at `url` (`/t/{id}`): in place from the list page once its modules are asked for, else
 * by a navigation. A second open while one is under way: the same URL is the same open (a double click); another
 * navigates. */
export function openTracePage(url) {
  if (opening === url) return;
  if (opening || !tracePage || !isListPage()) {
    location.assign(url);
    return;
  }
  opening = url;
  openInPlace(url).catch(() => location.assign(url));
}

async function openInPlace(url) {
  const [page, res] = await Promise.all([tracePage, fetch(url)]);
  if (!res.ok) throw new Error(`${url}: ${res.status}`);
  const doc = new DOMParser().parseFromString(await res.text(), "text/html");
  await addStyles(doc);
  history.pushState(null, "", url);
  shownPath = location.pathname;
  document.title = doc.title; // (after the new entry: the list's entry keeps its own title)
  scrollTo(0, 0);
  document.body.replaceWith(document.adoptNode(doc.body)); // (its scripts do not run: main() below is theirs)
  page.main();
}

/** The stylesheets of `doc` this page lacks, added in its order; resolves once each has loaded or failed. */
function addStyles(doc) {
  const have = new Set([...document.querySelectorAll('link[rel="stylesheet"]')].map((l) => l.href));
  const loads = [];
  for (const l of doc.querySelectorAll('head link[rel="stylesheet"]')) {
    const href = new URL(l.getAttribute("href"), location.href).href;
    if (have.has(href)) continue;
    const link = el("link", { rel: "stylesheet", href });
    loads.push(new Promise((done) => { link.onload = done; link.onerror = done; }));
    document.head.append(link);
  }
  return Promise.all(loads);
}
