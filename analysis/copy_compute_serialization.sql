-- copy_compute_serialization: copies queued between computations that do not need them
-- precedence: 50
--
-- What it detects: copies that sit between computations on one submission queue (driver
-- queue, or stream in traces without driver records): in a chain of queue items each
-- starting at most serial_max_gap_ns after the previous one ended, with a kernel before and
-- a kernel after the copy. A host-to-device copy must also have been submitted at least
-- serial_min_wait_ns before it started (it waited for compute it cannot need: a copy from
-- the host does not read kernel results); a device-to-host copy reads results that are
-- finished, and the compute after it does not need it. The order came from sharing the
-- queue, not from the data.
-- Why it matters: the DMA engines and the execution units are separate; a copy queued
-- behind kernels waits for them and then makes the next kernel wait for it, so copy time
-- and compute time add up instead of overlapping.
-- What to do: issue copies on their own queue/stream (double-buffer the input), and order
-- them against the kernels with events only where the data requires it.
-- Impact: the part of the copy that could have overlapped computation (host-to-device:
-- the smaller of its duration and how long it waited after being submitted;
-- device-to-host: all of it), on the critical path only where the device's execution
-- units were idle during the copy.
--
-- Output columns (one row per copy):
--   ts, dur       the copy
--   track_id, slice_id  the copy
--   metric        'queued_behind_compute_ns'; value = start - submission;
--                 threshold = serial_min_wait_ns
--   local_ns      H2D: min(duration, start - submission); D2H: duration
--   claim         'idle' over the copy

-- Only queues that carry both kernels and copies can serialise them. Driver queues: the
-- doorbells of one queue flow both to transfers (dma) and to execution (exec), told from
-- the flows alone; without driver records (Kineto): the stream arg of the work, per device.
CREATE OR REPLACE TEMP TABLE _mixed_queues AS
SELECT 'queue:' || CAST(src_track_id AS VARCHAR) AS queue_key, src_track_id, CAST(NULL AS VARCHAR) AS stream_key
FROM _ready WHERE kind IN ('dma', 'exec')
GROUP BY src_track_id HAVING count(DISTINCT kind) = 2
UNION ALL
SELECT 'stream:' || w.dev || ':' || json_extract_string(s.args, '$.stream') AS queue_key, NULL, NULL
FROM _ready r JOIN _dev_work w ON w.slice_id = r.slice_id JOIN slices s ON s.slice_id = r.slice_id
WHERE r.kind = 'launch'
GROUP BY 1 HAVING count(DISTINCT w.lane) = 2;

-- the device work of those queues, narrow (the windows below sort all of it; the kept copies'
-- other columns come from _dev_work)
CREATE OR REPLACE TEMP TABLE _queued_work AS
SELECT w.slice_id, w.lane = 'eu' AS eu, w.ts, w.end_ns, least(r.ready_ns, w.ts) AS ready_ns,
       'queue:' || CAST(r.src_track_id AS VARCHAR) AS queue_key
FROM _ready r
JOIN _dev_work w ON w.slice_id = r.slice_id
WHERE r.kind IN ('dma', 'exec') AND r.src_track_id IN (SELECT src_track_id FROM _mixed_queues)
UNION ALL
SELECT w.slice_id, w.lane = 'eu', w.ts, w.end_ns, least(r.ready_ns, w.ts),
       'stream:' || w.dev || ':' || json_extract_string(s.args, '$.stream')
FROM _ready r
JOIN _dev_work w ON w.slice_id = r.slice_id
JOIN slices s ON s.slice_id = r.slice_id
WHERE r.kind = 'launch' AND EXISTS (SELECT 1 FROM _mixed_queues WHERE queue_key LIKE 'stream:%');

CREATE OR REPLACE TEMP VIEW _copy_compute_serialization_check AS
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM _dev_work WHERE lane = 'pcie')
        THEN 'the trace has no DMA transfers'
    WHEN NOT EXISTS (SELECT 1 FROM _dev_work WHERE lane = 'eu') THEN 'the trace has no device computation'
    WHEN NOT EXISTS (SELECT 1 FROM _ready)
        THEN 'no device work is linked to the queue or stream it was submitted on'
    END AS reason;

-- per queue in order (ts, slice_id), numbered pos: a chain breaks (brk) where an item starts
-- more than serial_max_gap_ns after the previous one ended, or has no previous one; a copy
-- sits between computations when its chain has a kernel before it (the last kernel at or after
-- the chain's start) and one after it (the next kernel before the next break). The windows
-- carry only keys and positions, the copies' own columns are joined back for the few rows
-- kept: a window's sort holds every column it is given, for every item of the queue. The
-- next kernel and break are found in descending order, a frame that streams (a frame running
-- to UNBOUNDED FOLLOWING does not: 8x slower at 800 k items).
CREATE OR REPLACE TEMP TABLE _serial_rows AS
WITH q AS (
    SELECT queue_key, slice_id, eu,
           coalesce(ts - lag(end_ns) OVER w > ${serial_max_gap_ns}, true) AS brk,
           row_number() OVER w AS pos
    FROM _queued_work WHERE queue_key IN (SELECT queue_key FROM _mixed_queues)
    WINDOW w AS (PARTITION BY queue_key ORDER BY ts, slice_id)
),
c AS (
    SELECT slice_id, eu, brk,
           max(CASE WHEN brk THEN pos END) OVER before AS chain_pos,
           max(CASE WHEN eu THEN pos END) OVER before AS last_kernel_pos,
           min(CASE WHEN eu THEN pos END) OVER after AS next_kernel_pos,
           min(CASE WHEN brk THEN pos END) OVER after AS next_break_pos
    FROM q
    WINDOW before AS (PARTITION BY queue_key ORDER BY pos ROWS UNBOUNDED PRECEDING),
           after AS (PARTITION BY queue_key ORDER BY pos DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
)
SELECT w.slice_id, w.track_id, w.dev, w.lane, w.ts, w.end_ns, w.dur, w.bytes, w.direction, q.ready_ns
FROM c
JOIN _queued_work q ON q.slice_id = c.slice_id
JOIN _dev_work w ON w.slice_id = c.slice_id
WHERE NOT c.eu AND NOT c.brk
  AND c.last_kernel_pos >= c.chain_pos
  AND c.next_kernel_pos < coalesce(c.next_break_pos, 9223372036854775807)
  -- a device-to-host copy reads finished results; a host-to-device copy must have been
  -- ready while it waited
  AND (w.direction <> 'h2d' OR w.ts - q.ready_ns >= ${serial_min_wait_ns});

SELECT ts,
       dur,
       track_id,
       slice_id,
       'queued_behind_compute_ns' AS metric,
       CAST(ts - ready_ns AS DOUBLE) AS value,
       CAST(${serial_min_wait_ns} AS DOUBLE) AS threshold,
       CASE WHEN direction = 'h2d'
            THEN printf('H2D copy of %s waited %s behind computation on the same queue although it was '
                        || 'submitted already, and the computation after it waited for it; on its own queue '
                        || 'it could have overlapped with the compute', _fmt_bytes(bytes), _fmt_ns(ts - ready_ns))
            ELSE printf('%s copy of %s ran between computations on their queue, which waited for it; on its '
                        || 'own queue it could have overlapped with the compute', upper(direction),
                        _fmt_bytes(bytes)) END AS message,
       CASE WHEN direction = 'h2d' THEN least(dur, ts - ready_ns) ELSE dur END AS local_ns,
       dev,
       'idle' AS claim_mode,
       ts AS claim_start,
       end_ns AS claim_end,
       0.0 AS min_share
FROM _serial_rows;
