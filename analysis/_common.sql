-- _common: helper tables every pass shares (private: names start with _).
-- Built once per run, before any pass, on a read-only connection to the trace; they
-- live in the connection's temp schema and vanish with it. Times are absolute ns.

-- Text helpers for messages.
CREATE OR REPLACE TEMP MACRO _fmt_ns(x) AS
    CASE WHEN x IS NULL THEN '?'
         WHEN abs(x) < 1000 THEN printf('%d ns', CAST(x AS BIGINT))
         WHEN abs(x) < 1000000 THEN printf('%.1f us', x / 1e3)
         WHEN abs(x) < 1000000000 THEN printf('%.2f ms', x / 1e6)
         ELSE printf('%.3f s', x / 1e9) END;
CREATE OR REPLACE TEMP MACRO _fmt_bytes(x) AS
    CASE WHEN x IS NULL THEN '?'
         WHEN x < 1024 THEN printf('%d B', CAST(x AS BIGINT))
         WHEN x < 1048576 THEN printf('%.1f KiB', x / 1024.0)
         WHEN x < 1073741824 THEN printf('%.1f MiB', x / 1048576.0)
         ELSE printf('%.2f GiB', x / 1073741824.0) END;

-- The run: [run_start_ns, run_end_ns) from trace_meta.
--   run_start_ns, run_end_ns: first and last instant of the trace; run_ns: their difference.
CREATE OR REPLACE TEMP TABLE _run AS
SELECT CAST(max(CASE WHEN key = 'start_ns' THEN value END) AS BIGINT) AS run_start_ns,
       CAST(max(CASE WHEN key = 'end_ns' THEN value END) AS BIGINT) AS run_end_ns,
       CAST(max(CASE WHEN key = 'end_ns' THEN value END) AS BIGINT)
         - CAST(max(CASE WHEN key = 'start_ns' THEN value END) AS BIGINT) AS run_ns
FROM trace_meta;

-- Tracks with the device they belong to.
--   dev: the accelerator a device-side track belongs to (device column, else its group).
CREATE OR REPLACE TEMP TABLE _track_dev AS
SELECT track_id, lane, name AS track_name, coalesce(device, group_name) AS dev
FROM tracks;

-- Device work: execution (lane eu) and DMA transfers (lane pcie) with a duration.
--   slice_id, track_id, dev, lane, ts, end_ns, dur, bytes, direction, host_mem, corr_id (names and
--   args stay in slices: passes join them for the few rows that need them).
CREATE OR REPLACE TEMP TABLE _dev_work AS
SELECT s.slice_id, s.track_id, t.dev, t.lane, s.ts, s.ts + s.dur AS end_ns, s.dur,
       s.bytes, s.direction, s.host_mem, s.corr_id
FROM slices s JOIN _track_dev t ON t.track_id = s.track_id
WHERE t.lane IN ('eu', 'pcie') AND s.dur > 0 AND s.depth = 0;

-- When each piece of device work was handed to the device: the latest end of the slices
-- whose launch, dma or exec flow points at it (the driver's doorbell, or the API call when the
-- trace has no driver records). Users clamp it to the work's own start (a runtime call
-- may return after its kernel began).
--   slice_id, ready_ns, src_slice (the submitting slice that arrived last), src_track_id,
--   kind (of that flow: dma ends at a transfer, exec at execution, launch at either).
CREATE OR REPLACE TEMP TABLE _ready AS
SELECT f.dst_slice AS slice_id,
       max(s.ts + s.dur) AS ready_ns,
       arg_max(s.slice_id, s.ts + s.dur) AS src_slice,
       arg_max(s.track_id, s.ts + s.dur) AS src_track_id,
       arg_max(f.kind, s.ts + s.dur) AS kind
FROM flows f
JOIN slices s ON s.slice_id = f.src_slice
WHERE f.kind IN ('launch', 'dma', 'exec') AND f.dst_slice IS NOT NULL
GROUP BY f.dst_slice;

-- Transfers: DMA copies with a byte count.
CREATE OR REPLACE TEMP VIEW _xfer AS
SELECT * FROM _dev_work WHERE lane = 'pcie' AND bytes > 0;

-- PCIe link configuration per device from trace_meta (link_gen, link_width,
-- max_payload_bytes; keys suffixed ':<device>' when a trace holds several devices).
--   dev (NULL: applies to every device), gen, width, mps_bytes.
CREATE OR REPLACE TEMP TABLE _link_cfg AS
WITH kv AS (
    SELECT CASE WHEN strpos(key, ':') > 0 THEN substr(key, strpos(key, ':') + 1) END AS dev,
           CASE WHEN strpos(key, ':') > 0 THEN substr(key, 1, strpos(key, ':') - 1) ELSE key END AS k,
           TRY_CAST(value AS DOUBLE) AS v
    FROM trace_meta
)
SELECT dev,
       max(CASE WHEN k = 'link_gen' THEN v END) AS gen,
       max(CASE WHEN k = 'link_width' THEN v END) AS width,
       max(CASE WHEN k = 'max_payload_bytes' THEN v END) AS mps_bytes
FROM kv WHERE k IN ('link_gen', 'link_width', 'max_payload_bytes')
GROUP BY dev;

-- Effective per-direction peak of each device's link from its configuration:
-- raw rate per lane x width x line encoding (8b/10b Gen1-2, 128b/130b Gen3-5, 236/256
-- FLIT Gen6) x TLP efficiency MPS / (MPS + header bytes).
--   dev, link_peak_Bps.
CREATE OR REPLACE TEMP TABLE _link_peak AS
WITH devs AS (SELECT DISTINCT dev FROM _dev_work),
cfg AS (
    SELECT d.dev,
           coalesce(s.gen, g.gen) AS gen,
           coalesce(s.width, g.width) AS width,
           coalesce(s.mps_bytes, g.mps_bytes, 256) AS mps_bytes
    FROM devs d
    -- ingesters suffix the keys with the device name or its index ('dev0' or '0')
    LEFT JOIN _link_cfg s ON s.dev = d.dev OR 'dev' || s.dev = d.dev
    LEFT JOIN (SELECT * FROM _link_cfg WHERE dev IS NULL) g ON TRUE
)
SELECT dev,
       CASE CAST(gen AS INTEGER) WHEN 1 THEN 2.5e9 WHEN 2 THEN 5e9 WHEN 3 THEN 8e9
            WHEN 4 THEN 16e9 WHEN 5 THEN 32e9 WHEN 6 THEN 64e9 END / 8.0
       * width
       * CASE WHEN gen <= 2 THEN 0.8 WHEN gen <= 5 THEN 128.0 / 130.0 ELSE 236.0 / 256.0 END
       * mps_bytes / (mps_bytes + CASE WHEN gen >= 6 THEN ${flit_tlp_overhead_bytes}
                                       ELSE ${tlp_overhead_bytes} END) AS link_peak_Bps
FROM cfg WHERE gen BETWEEN 1 AND 6 AND width > 0;

-- Reference bandwidth per device and direction: the link peak where the trace records the
-- link, else the best bandwidth achieved by large non-pageable copies (documented
-- assumption: a large pinned copy runs at the link's practical peak).
--   dev, direction, peak_Bps, bw_source ('link' | 'achieved').
CREATE OR REPLACE TEMP TABLE _bw AS
WITH dirs AS (SELECT DISTINCT dev, direction FROM _xfer WHERE direction IN ('h2d', 'd2h')),
best AS (
    SELECT dev, direction, max(bytes * 1e9 / dur) AS best_Bps
    FROM _xfer
    WHERE bytes >= ${reference_min_bytes} AND coalesce(host_mem, '') <> 'pageable'
    GROUP BY dev, direction
)
SELECT d.dev, d.direction,
       coalesce(l.link_peak_Bps, b.best_Bps, a.best_Bps) AS peak_Bps,
       CASE WHEN l.link_peak_Bps IS NOT NULL THEN 'link' ELSE 'achieved' END AS bw_source
FROM dirs d
LEFT JOIN _link_peak l ON l.dev = d.dev
LEFT JOIN best b ON b.dev = d.dev AND b.direction = d.direction
-- PCIe is full duplex with the same peak each way: the other direction's best serves
LEFT JOIN (SELECT dev, max(best_Bps) AS best_Bps FROM best GROUP BY dev) a ON a.dev = d.dev
WHERE coalesce(l.link_peak_Bps, b.best_Bps, a.best_Bps) IS NOT NULL;

-- Fixed cost per transfer L (dev, direction): the parameter when set, else what the
-- shortest non-pageable transfer took beyond its bytes (duration - bytes / B; the
-- shortest one is the most latency-dominated and the least likely to have shared the
-- link), capped at max_latency_ns.
--   dev, direction, peak_Bps, bw_source, latency_ns.
CREATE OR REPLACE TEMP TABLE _xfer_model AS
SELECT b.dev, b.direction, b.peak_Bps, b.bw_source,
       CASE WHEN ${assumed_latency_ns} > 0 THEN ${assumed_latency_ns}
            ELSE least(${max_latency_ns},
                       greatest(0, coalesce(arg_min(x.dur - x.bytes * 1e9 / b.peak_Bps, x.dur), 0))) END
         AS latency_ns
FROM _bw b
LEFT JOIN _xfer x ON x.dev = b.dev AND x.direction = b.direction AND coalesce(x.host_mem, '') <> 'pageable'
GROUP BY b.dev, b.direction, b.peak_Bps, b.bw_source;

-- Every device's times shifted into a disjoint range of its own (off = a big per-device
-- stride minus the run start): an interval join "same device and overlapping" then needs
-- only inequalities, which run as a sort-based range join instead of a hash join on the
-- device followed by a cross product.
--   dev, off.
CREATE OR REPLACE TEMP TABLE _dev_offset AS
SELECT dev, row_number() OVER (ORDER BY dev) * CAST(1125899906842624 AS BIGINT)
            - (SELECT run_start_ns FROM _run) AS off
FROM (SELECT DISTINCT dev FROM _track_dev WHERE dev IS NOT NULL);

-- Gaps in each device's execution: from a sweep over its execution units' work in time
-- order, a kernel that starts after everything before it ended closes a gap.
--   dev, idle_start (when the units ran out of work), idle_end, next_slice (the work that
--   ended the gap).
CREATE OR REPLACE TEMP TABLE _eu_gaps AS
WITH k AS (
    SELECT dev, slice_id, ts,
           max(end_ns) OVER (PARTITION BY dev ORDER BY ts, end_ns, slice_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max_end
    FROM _dev_work WHERE lane = 'eu'
)
SELECT dev, prev_max_end AS idle_start, ts AS idle_end, slice_id AS next_slice FROM k WHERE ts > prev_max_end;

-- Idle periods of each device's execution units within the run (the gaps, plus the time
-- before its first and after its last work): the critical-path exposure of anything the
-- device waits for (a copy during which no unit computes delays the run; one that
-- overlaps computation does not).
--   dev, idle_start, idle_end.
CREATE OR REPLACE TEMP TABLE _eu_idle AS
WITH devs AS (SELECT DISTINCT dev FROM _dev_work),
span AS (SELECT dev, min(ts) AS first_ns, max(end_ns) AS last_ns FROM _dev_work WHERE lane = 'eu' GROUP BY dev),
edges AS (
    SELECT d.dev, (SELECT run_start_ns FROM _run) AS idle_start,
           coalesce(s.first_ns, (SELECT run_end_ns FROM _run)) AS idle_end
    FROM devs d LEFT JOIN span s ON s.dev = d.dev
    UNION ALL
    SELECT dev, last_ns, (SELECT run_end_ns FROM _run) FROM span
)
SELECT dev, idle_start, idle_end FROM _eu_gaps
UNION ALL
SELECT dev, idle_start, idle_end FROM edges WHERE idle_end > idle_start;

-- Gaps that end with a kernel the host submitted only after the units had run out of work
-- (the device waited for the host), at least as long as launch_gaps or sync_stalls report.
--   dev, idle_start, idle_end, next_slice, ready_ns, and below thread_track_id (the thread
--   that submitted the kernel).
CREATE OR REPLACE TEMP TABLE _late_gaps AS
SELECT g.dev, g.idle_start, g.idle_end, g.next_slice, least(r.ready_ns, g.idle_end) AS ready_ns
FROM _eu_gaps g
JOIN _ready r ON r.slice_id = g.next_slice
WHERE least(r.ready_ns, g.idle_end) > g.idle_start
  AND g.idle_end - g.idle_start >= least(${launch_gap_min_ns}, ${sync_gap_min_ns});

-- The host API call that submitted a piece of device work: the earliest CPU slice with
-- its correlation id (a runtime gives a call, its driver submission and its device work one
-- id). Only for the work that needs it -- kernels submitted late that end a gap long enough
-- to report, and the first DMA of each pageable copy -- so the join never pairs all device
-- work with all calls.
--   slice_id, call_slice, call_ts, call_end_ns, call_track_id.
CREATE OR REPLACE TEMP TABLE _origin AS
WITH ids AS (
    SELECT next_slice AS slice_id FROM _late_gaps
    UNION
    SELECT arg_min(slice_id, ts) FROM _dev_work
    WHERE lane = 'pcie' AND host_mem = 'pageable' GROUP BY coalesce(corr_id, -1 - slice_id)
),
w AS (SELECT d.slice_id, d.corr_id FROM _dev_work d JOIN ids ON ids.slice_id = d.slice_id WHERE d.corr_id IS NOT NULL)
SELECT w.slice_id, arg_min(c.slice_id, c.ts) AS call_slice, min(c.ts) AS call_ts,
       arg_min(c.ts + c.dur, c.ts) AS call_end_ns, arg_min(c.track_id, c.ts) AS call_track_id
FROM w
JOIN slices c ON c.corr_id = w.corr_id
WHERE c.track_id IN (SELECT track_id FROM _track_dev WHERE lane = 'cpu')
GROUP BY w.slice_id;

-- the submitting thread of each late gap's kernel
CREATE OR REPLACE TEMP TABLE _late_gaps AS
SELECT g.*, o.call_track_id AS thread_track_id
FROM _late_gaps g LEFT JOIN _origin o ON o.slice_id = g.next_slice;

-- Synchronising API calls: CPU slices whose name contains "synchronize"/"synchronise"
-- (device, queue/stream and event synchronisation).
--   slice_id, track_id, ts, end_ns, dur, name.
CREATE OR REPLACE TEMP TABLE _sync_calls AS
SELECT s.slice_id, s.track_id, s.ts, s.ts + s.dur AS end_ns, s.dur, s.name
FROM slices s
WHERE s.track_id IN (SELECT track_id FROM _track_dev WHERE lane = 'cpu')
  AND (lower(s.name) LIKE '%synchronize%' OR lower(s.name) LIKE '%synchronise%');
