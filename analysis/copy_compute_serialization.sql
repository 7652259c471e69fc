-- copy_compute_serialization: copies that wait behind computation they do not need
-- precedence: 60
--
-- What it detects: host-to-device copies that run back to back after computation on the
-- same submission queue (driver queue, or stream in traces without driver records) --
-- within a chain of queue items each starting at most serial_max_gap_ns after the previous
-- one ended, that contains a kernel before the copy -- although the copy had been
-- submitted at least serial_min_wait_ns before it started. A host-to-device copy cannot
-- consume a kernel's results, so the order came from sharing the queue, not from the data.
-- Why it matters: the DMA engines and the execution units are separate; a copy queued
-- behind kernels waits for them and then makes the next kernel wait for it, so copy time
-- and compute time add up instead of overlapping.
-- What to do: issue copies on their own queue/stream (double-buffer the input), and order
-- them against the kernels with events only where the data requires it.
-- Impact: the part of the copy that could have run earlier (the smaller of its duration
-- and how long it waited after being submitted), on the critical path only where the
-- device's execution units were idle during the copy.
--
-- Output columns (one row per copy):
--   ts, dur       the copy
--   track_id, slice_id  the copy
--   metric        'queued_behind_compute_ns'; value = start - submission;
--                 threshold = serial_min_wait_ns
--   local_ns      min(duration, start - submission)
--   claim         'idle' over the copy

CREATE OR REPLACE TEMP TABLE _queued_work AS
SELECT w.slice_id, w.track_id, w.dev, w.lane, w.ts, w.end_ns, w.dur, w.bytes, w.direction, r.ready_ns,
       CASE WHEN st.lane = 'driver' THEN 'queue:' || CAST(r.src_track_id AS VARCHAR)
            ELSE 'stream:' || w.dev || ':' || json_extract_string(w.args, '$.stream') END AS queue_key
FROM _dev_work w
JOIN _ready r ON r.slice_id = w.slice_id
JOIN _track_dev st ON st.track_id = r.src_track_id;

CREATE OR REPLACE TEMP VIEW _copy_compute_serialization_check AS
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM _dev_work WHERE lane = 'pcie')
        THEN 'the trace has no DMA transfers'
    WHEN NOT EXISTS (SELECT 1 FROM _dev_work WHERE lane = 'eu') THEN 'the trace has no device computation'
    WHEN NOT EXISTS (SELECT 1 FROM _queued_work WHERE queue_key IS NOT NULL)
        THEN 'no device work is linked to the queue or stream it was submitted on'
    END AS reason;

-- per queue in order: the previous item's end; a chain breaks where an item starts more
-- than serial_max_gap_ns after the previous one ended; a copy is behind compute when the
-- latest kernel on its queue started after its chain's latest break
CREATE OR REPLACE TEMP TABLE _serial_rows AS
WITH q AS (
    SELECT *, lag(end_ns) OVER (PARTITION BY queue_key ORDER BY ts, slice_id) AS prev_end
    FROM _queued_work WHERE queue_key IS NOT NULL
),
c AS (
    SELECT *,
           max(CASE WHEN prev_end IS NULL OR ts - prev_end > ${serial_max_gap_ns} THEN ts END)
             OVER (PARTITION BY queue_key ORDER BY ts, slice_id ROWS UNBOUNDED PRECEDING) AS chain_start,
           max(CASE WHEN lane = 'eu' THEN ts END)
             OVER (PARTITION BY queue_key ORDER BY ts, slice_id ROWS UNBOUNDED PRECEDING) AS last_kernel_ts
    FROM q
)
SELECT * FROM c
WHERE lane = 'pcie' AND direction = 'h2d'
  AND last_kernel_ts >= chain_start
  AND ts - prev_end <= ${serial_max_gap_ns}
  AND ts - ready_ns >= ${serial_min_wait_ns};

SELECT ts,
       dur,
       track_id,
       slice_id,
       'queued_behind_compute_ns' AS metric,
       CAST(ts - ready_ns AS DOUBLE) AS value,
       CAST(${serial_min_wait_ns} AS DOUBLE) AS threshold,
       printf('H2D copy of %s waited %s behind computation on the same queue although it was submitted '
              || 'already; on its own queue it could have overlapped with the compute', _fmt_bytes(bytes),
              _fmt_ns(ts - ready_ns)) AS message,
       least(dur, ts - ready_ns) AS local_ns,
       dev,
       'idle' AS claim_mode,
       ts AS claim_start,
       end_ns AS claim_end,
       0.0 AS min_share
FROM _serial_rows;
