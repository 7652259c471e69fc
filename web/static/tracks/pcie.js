// PCIe tracks: achieved bandwidth per pixel column (bytes of the transfers drawn, spread over their
// durations) against the link's effective peak per direction. The peak is the server's
// link_peak_bytes_per_s from the metadata's `links` (docs/api.md; computed once, by ingest/pcie.py);
// the UI never derives it. Without it the band has no peak line and says the link peak is unknown.

import { LANE_ACCENT, fmtGbps } from "../lib/util.js";

export const PCIE_GRAPH_PX = 36;
const LABEL_PX = 12; // the top strip of the band holds its label; the graph is below it

/**
 * {gbps, label} of the link's effective peak per direction for a track's device, or null when the server
 * sent no peak for it. `links` maps a device suffix ("" for one device) to {link_gen, link_width,
 * max_payload_bytes, link_peak_bytes_per_s} (docs/api.md); a track's device may be "dev0" where the
 * suffix is "0". The label names the link (generation, width, payload size) when those are known.
 */
export function linkPeak(links, device) {
  if (!links || typeof links !== "object") return null;
  const keys = Object.keys(links);
  if (!keys.length) return null;
  let l = null;
  if (typeof links.link_gen !== "undefined") l = links;                 // a flat object of one link
  else {
    const dev = device === null || device === undefined ? "" : String(device);
    const digits = (dev.match(/(\d+)$/) || [])[1];
    for (const k of [dev, digits, ""]) if (k !== undefined && links[k]) { l = links[k]; break; }
    if (!l && keys.length === 1) l = links[keys[0]];
  }
  if (!l) return null;
  const gbps = Number(l.link_peak_bytes_per_s) / 1e9;
  if (!(gbps > 0)) return null;
  const gen = Number(l.link_gen), width = Number(l.link_width), mps = Number(l.max_payload_bytes) || 0;
  const label = gen && width ? `Gen${gen} x${width}${mps ? `, MPS ${mps}` : ""}` : "link";
  return { gbps, label };
}

/** Bytes per css-px column over the visible window from exact transfers and merged buckets. */
export function bandwidthColumns(pieces, view) {
  const w = Math.max(1, Math.ceil(view.width_css_px));
  const cols = new Float64Array(w);
  const scale = view.width_css_px / view.span_ns, s = view.start_ns;
  let any = false;
  for (const { tile, tt, c0, c1 } of pieces) {
    if (tt.bytes) {
      for (let i = 0; i < tt.n; i++) {
        const b = tt.bytes[i];
        if (!(b > 0)) continue;
        const a = Math.max(tt.ts[i], c0), e = Math.min(tt.ts[i] + tt.dur[i], c1);
        if (e <= a) continue;
        any = true;
        // the share of the slice inside this tile, spread evenly over its pixel columns
        const share = b * (e - a) / Math.max(tt.dur[i], 1);
        const xa = (a - s) * scale, xb = (e - s) * scale;
        if (xb < 0 || xa >= w) continue;
        const perPx = share / Math.max(xb - xa, 1e-9);
        const ia = Math.max(0, Math.floor(xa)), ib = Math.min(w - 1, Math.floor(xb));
        for (let c = ia; c <= ib; c++) cols[c] += perPx * (Math.min(c + 1, xb) - Math.max(c, xa));
      }
    }
    if (tt.m_bytes) {
      const bn = tile.bucket_ns;
      for (let i = 0; i < tt.mn; i++) {
        const b = tt.m_bytes[i];
        if (!(b > 0)) continue;
        const b0 = tile.start_ns + tt.m_bucket[i] * bn;
        if (b0 < c0 || b0 >= c1) continue;
        any = true;
        const c = Math.floor((b0 + bn / 2 - s) * scale);
        if (c >= 0 && c < w) cols[c] += b;
      }
    }
  }
  return any ? cols : null;
}

/** Draw the bandwidth band (GB/s per column) at y..y+h; returns the columns in GB/s for hover. */
export function drawBandwidth(ctx, pieces, view, x0, y, h, peak, theme) {
  const cols = bandwidthColumns(pieces, view);
  ctx.fillStyle = "#f3f8f4";
  ctx.fillRect(x0, y, view.width_css_px, h);
  ctx.font = theme.smallFont;
  ctx.fillStyle = theme.mutedText;
  ctx.textBaseline = "top";
  if (!cols) {
    ctx.fillText("no transfer byte counts in view", x0 + 4, y + 2);
    return null;
  }
  const ns_per_col = view.span_ns / view.width_css_px;
  let maxG = 0;
  for (let i = 0; i < cols.length; i++) { cols[i] /= ns_per_col; if (cols[i] > maxG) maxG = cols[i]; }
  const top = Math.max(maxG, peak ? peak.gbps : 0) || 1;
  const inner = h - LABEL_PX - 2;
  ctx.fillStyle = LANE_ACCENT.pcie;
  ctx.globalAlpha = 0.55;
  ctx.beginPath();
  for (let i = 0; i < cols.length; i++) {
    if (cols[i] <= 0) continue;
    const bh = Math.max(1, cols[i] / top * inner);
    ctx.rect(x0 + i, y + h - 1 - bh, 1, bh);
  }
  ctx.fill();
  ctx.globalAlpha = 1;
  if (peak) {
    const py = Math.round(y + h - 1 - peak.gbps / top * inner) + 0.5;
    ctx.strokeStyle = "#b91c1c";
    ctx.setLineDash([4, 3]);
    ctx.beginPath();
    ctx.moveTo(x0, py);
    ctx.lineTo(x0 + view.width_css_px, py);
    ctx.stroke();
    ctx.setLineDash([]);
  }
  ctx.fillStyle = theme.mutedText;
  const peakText = peak ? ` · link peak ${fmtGbps(peak.gbps)} (${peak.label})` : " · link peak unknown";
  ctx.fillText(`max ${fmtGbps(maxG)}${peakText}`, x0 + 4, y + 1);
  return cols;
}
