// Search box: finds slices by name through the search route, next/previous centre and select each hit.
// Hits are fetched a page at a time as next/previous walks past what is loaded.

const PAGE = 200;

export class Search {
  constructor(api, { input, next, prev, count }, onhit) {
    this.api = api;
    this.input = input;
    this.countEl = count;
    this.onhit = onhit;
    this.q = "";
    this.hits = [];     // loaded hits, in time order
    this.total = 0;
    this.nextOffset = null;
    this.pos = -1;
    this.seq = 0;
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); this.step(e.shiftKey ? -1 : 1); }
      if (e.key === "Escape") input.blur();
    });
    next.addEventListener("click", () => this.step(1));
    prev.addEventListener("click", () => this.step(-1));
  }

  /** Search for `q` (used by summary rows too) and select the first hit. */
  async run(q) {
    this.input.value = q;
    this.q = "";
    await this.step(1);
  }

  async load(q) {
    const seq = ++this.seq;
    this.countEl.textContent = "searching…";
    const r = await this.api.search(q, 0, PAGE);
    if (seq !== this.seq) return false;
    this.q = q;
    this.hits = r.results;
    this.total = r.total;
    this.totalCapped = !!r.total_capped;
    this.nextOffset = r.next_offset;
    this.pos = -1;
    return true;
  }

  async step(dir) {
    const q = this.input.value.trim();
    if (!q) { this.countEl.textContent = ""; return; }
    try {
      if (q !== this.q && !(await this.load(q))) return;
      if (!this.hits.length) { this.countEl.textContent = "no match"; this.countEl.dataset.empty = "1"; return; }
      delete this.countEl.dataset.empty;
      let p = this.pos + dir;
      if (p >= this.hits.length && this.nextOffset !== null) {
        const r = await this.api.search(q, this.nextOffset, PAGE);
        this.hits = this.hits.concat(r.results);
        this.nextOffset = r.next_offset;
      }
      if (p >= this.hits.length) p = 0;           // wrap around to the first hit
      if (p < 0) p = this.hits.length - 1;
      this.pos = p;
      this.countEl.textContent = `${p + 1} / ${this.total}${this.totalCapped ? "+" : ""}`;
      this.onhit(this.hits[p]);
    } catch (e) {
      this.countEl.textContent = `search failed: ${e.message}`;
    }
  }
}
