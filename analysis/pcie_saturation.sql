-- pcie_saturation: link directions running at their limit while transfers queue up on them
-- precedence: 40
--
-- What it detects: windows during which one direction of a PCIe link -- a device's own
-- link, or a switch uplink that several devices share -- carries at least
-- saturation_fraction of its effective peak (raw rate x encoding x TLP efficiency at the
-- link's Max Payload Size), and during which the transfers on it took at least
-- saturation_min_stretch times their unloaded time L + S/B. The load comes from the PCIe
-- utilisation counters where the trace has them (counter tracks named "PCIe H2D/D2H
-- utilisation (<link>)", in % of the effective peak; a counter on a switch applies to
-- every device behind it), else from the transfers themselves: each transfer's bytes
-- spread over its data phase (its duration after the fixed cost L), summed per device
-- and direction.
-- Why it matters: a saturated link serialises everything that crosses it; transfers wait
-- for each other, and the device waits for the transfers.
-- What to do: spread transfers over time (prefetch earlier, overlap with compute), move
-- less data (keep it resident, compress, lower precision), avoid several devices loading
-- through one switch uplink at the same moment, or check the link trains at its full
-- generation and width.
-- Impact: the delay the transfers in the window suffered beyond their unloaded time (the
-- union of the last (duration - unloaded) ns of each), on the critical path only where
-- the device's execution units were idle, i.e. where the delay held up dependent work.
--
-- Output columns (one row per saturated window and device):
--   ts, dur       the window
--   track_id, slice_id  the most delayed transfer in it
--   metric        'link_utilisation_pct'; value = mean utilisation over the window;
--                 threshold = saturation_fraction x 100
--   local_ns      union of the transfers' delays
--   claim         'idle' over the window and its transfers

CREATE OR REPLACE TEMP TABLE _util_counters AS
SELECT t.track_id, coalesce(t.device, t.group_name) AS link_dev,
       CASE WHEN t.name LIKE '%H2D%' THEN 'h2d' WHEN t.name LIKE '%D2H%' THEN 'd2h' END AS direction,
       t.name LIKE '%uplink%' OR coalesce(t.device, t.group_name) LIKE 'switch%' AS shared
FROM tracks t
WHERE t.lane = 'counter' AND t.name LIKE 'PCIe %utilisation%' AND t.unit = '%'
  AND (t.name LIKE '%H2D%' OR t.name LIKE '%D2H%');

CREATE OR REPLACE TEMP VIEW _pcie_saturation_check AS
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM _xfer) THEN 'the trace has no transfers with a byte count'
    WHEN NOT EXISTS (SELECT 1 FROM _util_counters) AND NOT EXISTS (SELECT 1 FROM _link_peak)
        THEN 'neither PCIe utilisation counters nor the link configuration (link_gen, link_width) are in the '
             || 'trace, so the link''s peak is unknown'
    END AS reason;

-- transfers with their unloaded time and delay
CREATE OR REPLACE TEMP TABLE _sat_xfer AS
SELECT x.slice_id, x.track_id, x.dev, x.direction, x.ts, x.end_ns, x.dur, x.bytes, m.peak_Bps,
       least(m.latency_ns, x.dur / 2) AS lat_ns,
       m.latency_ns + x.bytes * 1e9 / m.peak_Bps AS unloaded_ns,
       greatest(0, x.dur - (m.latency_ns + x.bytes * 1e9 / m.peak_Bps)) AS delay_ns
FROM _xfer x JOIN _xfer_model m ON m.dev = x.dev AND m.direction = x.direction
WHERE x.direction IN ('h2d', 'd2h');

-- saturated stretches: (link_dev, direction, shared, start, end, utilisation x time)
CREATE OR REPLACE TEMP TABLE _sat_segments AS
WITH samples AS (
    SELECT u.link_dev, u.direction, u.shared, c.ts,
           lag(c.ts) OVER (PARTITION BY c.track_id ORDER BY c.ts) AS prev_ts, c.value AS pct
    FROM counters c JOIN _util_counters u ON u.track_id = c.track_id
),
from_counters AS (
    SELECT link_dev, direction, shared, prev_ts AS seg_start, ts AS seg_end, pct
    FROM samples WHERE prev_ts IS NOT NULL AND pct >= 100 * ${saturation_fraction}
),
ev AS (
    SELECT dev, direction, ts + lat_ns AS t, bytes * 1e9 / (dur - lat_ns) AS d_Bps FROM _sat_xfer WHERE dur > lat_ns
    UNION ALL
    SELECT dev, direction, end_ns, -(bytes * 1e9 / (dur - lat_ns)) FROM _sat_xfer WHERE dur > lat_ns
),
level AS (
    SELECT dev, direction, t, sum(d_Bps) AS d_Bps FROM ev GROUP BY dev, direction, t
),
steps AS (
    SELECT dev, direction, t AS seg_start,
           lead(t) OVER (PARTITION BY dev, direction ORDER BY t) AS seg_end,
           sum(d_Bps) OVER (PARTITION BY dev, direction ORDER BY t ROWS UNBOUNDED PRECEDING) AS Bps
    FROM level
),
from_transfers AS (
    SELECT s.dev AS link_dev, s.direction, FALSE AS shared, s.seg_start, s.seg_end, 100 * s.Bps / l.link_peak_Bps AS pct
    FROM steps s JOIN _link_peak l ON l.dev = s.dev
    WHERE s.seg_end > s.seg_start AND s.Bps >= ${saturation_fraction} * l.link_peak_Bps
)
SELECT * FROM from_counters
UNION ALL
SELECT * FROM from_transfers WHERE NOT EXISTS (SELECT 1 FROM _util_counters);

-- adjacent saturated stretches merge into windows
CREATE OR REPLACE TEMP TABLE _sat_windows AS
WITH o AS (
    SELECT *,
           max(seg_end) OVER (PARTITION BY link_dev, direction ORDER BY seg_start, seg_end
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM _sat_segments
),
g AS (
    SELECT *,
           sum(CASE WHEN prev_end IS NULL OR seg_start > prev_end THEN 1 ELSE 0 END)
             OVER (PARTITION BY link_dev, direction ORDER BY seg_start, seg_end ROWS UNBOUNDED PRECEDING) AS win
    FROM o
)
SELECT link_dev, direction, bool_or(shared) AS shared, win,
       min(seg_start) AS win_start, max(seg_end) AS win_end,
       sum(pct * (seg_end - seg_start)) / sum(seg_end - seg_start) AS mean_pct
FROM g GROUP BY link_dev, direction, win;

-- transfers overlapping each window (all devices behind a shared uplink)
CREATE OR REPLACE TEMP TABLE _sat_members AS
SELECT w.link_dev, w.direction, w.win, w.win_start, w.win_end, w.mean_pct, w.shared, x.*
FROM _sat_windows w
JOIN _sat_xfer x ON x.direction = w.direction AND x.ts < w.win_end AND x.end_ns > w.win_start
WHERE w.shared
UNION ALL
-- a device's own link: same device, same direction and overlapping, as a range join on
-- times shifted per device (_dev_offset) and per direction
SELECT w.link_dev, w.direction, w.win, w.win_start, w.win_end, w.mean_pct, w.shared,
       x.slice_id, x.track_id, x.dev, x.direction, x.ts, x.end_ns, x.dur, x.bytes, x.peak_Bps, x.lat_ns,
       x.unloaded_ns, x.delay_ns
FROM (SELECT w.*, w.win_start + o.off + CASE WHEN w.direction = 'd2h' THEN CAST(562949953421312 AS BIGINT) ELSE 0 END AS s,
             w.win_end + o.off + CASE WHEN w.direction = 'd2h' THEN CAST(562949953421312 AS BIGINT) ELSE 0 END AS e
      FROM _sat_windows w JOIN _dev_offset o ON o.dev = w.link_dev WHERE NOT w.shared) w
JOIN (SELECT x.*, x.ts + o.off + CASE WHEN x.direction = 'd2h' THEN CAST(562949953421312 AS BIGINT) ELSE 0 END AS s,
             x.end_ns + o.off + CASE WHEN x.direction = 'd2h' THEN CAST(562949953421312 AS BIGINT) ELSE 0 END AS e
      FROM _sat_xfer x JOIN _dev_offset o ON o.dev = x.dev) x
  ON x.s < w.e AND x.e > w.s;

-- the union of the delay tails per window and device
CREATE OR REPLACE TEMP TABLE _sat_delay AS
WITH tails AS (
    SELECT link_dev, direction, win, dev, end_ns - delay_ns AS a, end_ns AS b
    FROM _sat_members WHERE delay_ns > 0
),
o AS (
    SELECT *, max(b) OVER (PARTITION BY link_dev, direction, win, dev ORDER BY a, b
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_b
    FROM tails
)
SELECT link_dev, direction, win, dev,
       sum(b - greatest(a, coalesce(prev_b, a))) FILTER (WHERE b > coalesce(prev_b, a)) AS delay_union_ns
FROM o GROUP BY link_dev, direction, win, dev;

CREATE OR REPLACE TEMP TABLE _sat_rows AS
SELECT m.link_dev, m.direction, m.win, m.dev, any_value(m.shared) AS shared,
       any_value(m.mean_pct) AS mean_pct,
       least(any_value(m.win_start), min(m.ts)) AS start_ns, greatest(any_value(m.win_end), max(m.end_ns)) AS end_ns,
       count(*) AS n, sum(m.bytes) AS bytes, sum(m.dur) / sum(m.unloaded_ns) AS stretch,
       arg_max(m.slice_id, m.delay_ns) AS worst_slice, arg_max(m.track_id, m.delay_ns) AS track_id,
       coalesce(any_value(d.delay_union_ns), 0) AS delay_union_ns
FROM _sat_members m
LEFT JOIN _sat_delay d ON d.link_dev = m.link_dev AND d.direction = m.direction AND d.win = m.win AND d.dev = m.dev
GROUP BY m.link_dev, m.direction, m.win, m.dev
HAVING sum(m.dur) >= ${saturation_min_stretch} * sum(m.unloaded_ns);

SELECT start_ns AS ts,
       end_ns - start_ns AS dur,
       track_id,
       worst_slice AS slice_id,
       'link_utilisation_pct' AS metric,
       mean_pct AS value,
       100 * ${saturation_fraction} AS threshold,
       printf('%s %s link ran at %.0f%% of its effective peak for %s; %d transfers of device %s (%s) took %.1fx '
              || 'their unloaded time', CASE WHEN shared THEN 'shared ' || link_dev ELSE 'device ' || link_dev END,
              upper(direction), mean_pct, _fmt_ns(end_ns - start_ns), n, dev, _fmt_bytes(bytes), stretch)
         AS message,
       CAST(delay_union_ns AS BIGINT) AS local_ns,
       dev,
       'idle' AS claim_mode,
       start_ns AS claim_start,
       end_ns AS claim_end,
       0.0 AS min_share
FROM _sat_rows;
