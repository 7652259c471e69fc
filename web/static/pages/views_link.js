// The trace page's "Views" button: the aggregate views page (/t/{id}/views, docs/ui.md) of the
// visible range, read from the timeline's URL fragment (#s=&e=, lib/url_state.js).

const button = document.getElementById("open-views");
if (button) {
  button.addEventListener("click", () => {
    const f = new URLSearchParams(location.hash.slice(1)), q = new URLSearchParams({ view: "flame" });
    if (f.get("s")) q.set("start_ns", f.get("s"));
    if (f.get("e")) q.set("end_ns", f.get("e"));
    location.href = `/t/${encodeURIComponent(document.body.dataset.traceId)}/views?${q}`;
  });
}
