-- sync_stalls: host threads blocked in synchronising calls while the device had work queued
-- precedence: 60
--
-- What it detects: synchronising API calls (names containing "synchronize"/"synchronise":
-- device, queue/stream and event synchronisation) of at least sync_min_ns during which a
-- device was still computing, and after which that device's execution units sat idle for
-- at least sync_gap_min_ns until the next kernel, which the same thread submitted only
-- after the call returned.
-- Why it matters: while the thread waits it cannot prepare or submit the next work, so the
-- device drains its queue and then idles for the wake-up, the host's next call and the
-- submission latency: the pipeline between host and device is broken at every such call.
-- What to do: drop synchronisations that are not needed for correctness; wait on an event
-- for just the result needed, as late as possible; keep the next work queued before
-- waiting.
-- Impact: the execution units' idle period from the end of the work the call waited for
-- to the next kernel (had the host not blocked, the work in between would have been queued
-- and overlapped with the computation).
--
-- Output columns (one row per call and device):
--   ts, dur       the synchronising call
--   track_id, slice_id  the call
--   metric        'device_idle_after_ns'; value = the idle period after the work drained;
--                 threshold = sync_gap_min_ns
--   local_ns      that idle period
--   claim         'idle' from the last work's end to the next work's start

CREATE OR REPLACE TEMP VIEW _sync_stalls_check AS
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM _dev_work WHERE lane = 'eu') THEN 'the trace has no device computation'
    WHEN NOT EXISTS (SELECT 1 FROM _sync_calls) THEN 'the trace records no synchronising API call'
    WHEN NOT EXISTS (SELECT 1 FROM _dev_work WHERE corr_id IS NOT NULL)
        THEN 'no correlation links device work to host threads, so a call cannot be tied to a device'
    END AS reason;

-- candidate calls, against every device (the gap's kernel must come from the same thread)
CREATE OR REPLACE TEMP TABLE _sync_candidates AS
SELECT c.*, d.dev
FROM _sync_calls c CROSS JOIN (SELECT DISTINCT dev FROM _late_gaps) d
WHERE c.dur >= ${sync_min_ns};

-- per (call, device): the gap in the device's execution during which the call returned
-- (a sweep over the gaps' ends and the calls' ends in time order: the first gap ending at
-- or after the call's end)
CREATE OR REPLACE TEMP TABLE _sync_edges AS
WITH gaps AS (SELECT * FROM _late_gaps WHERE idle_end - idle_start >= ${sync_gap_min_ns}),
pts AS (
    SELECT dev, idle_end AS t, 1 AS kind, idle_end AS next_ns, idle_start, CAST(NULL AS BIGINT) AS sync_id
    FROM gaps
    UNION ALL
    SELECT dev, end_ns, 0, CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), slice_id FROM _sync_candidates
),
nxt AS (
    SELECT sync_id, dev, t,
           -- running minimum over what follows (written as a reverse running window)
           min(next_ns) OVER (PARTITION BY dev ORDER BY t DESC, kind DESC ROWS UNBOUNDED PRECEDING) AS next_ns,
           min(idle_start) OVER (PARTITION BY dev ORDER BY t DESC, kind DESC ROWS UNBOUNDED PRECEDING) AS work_end_ns
    FROM pts
)
-- the units must already have been idle when the call returned (a gap starting later is
-- not this call's; skipping shorter gaps is safe for the same reason)
SELECT n.sync_id, n.dev, n.work_end_ns, n.next_ns, g.next_slice, g.ready_ns AS next_ready_ns,
       g.thread_track_id AS next_thread_track_id
FROM nxt n
JOIN gaps g ON g.dev = n.dev AND g.idle_end = n.next_ns
WHERE n.sync_id IS NOT NULL AND n.work_end_ns <= n.t;

SELECT c.ts,
       c.dur,
       c.track_id,
       c.slice_id,
       'device_idle_after_ns' AS metric,
       CAST(e.next_ns - e.work_end_ns AS DOUBLE) AS value,
       CAST(${sync_gap_min_ns} AS DOUBLE) AS threshold,
       printf('%s blocked the thread for %s while device %s was still working; the device then sat idle '
              || 'for %s until the thread submitted again', c.name, _fmt_ns(c.dur), c.dev,
              _fmt_ns(e.next_ns - e.work_end_ns)) AS message,
       e.next_ns - e.work_end_ns AS local_ns,
       c.dev,
       'idle' AS claim_mode,
       e.work_end_ns AS claim_start,
       e.next_ns AS claim_end,
       0.0 AS min_share
FROM _sync_candidates c
JOIN _sync_edges e ON e.sync_id = c.slice_id AND e.dev = c.dev
WHERE e.work_end_ns > c.ts
  AND e.next_ns IS NOT NULL
  AND e.next_thread_track_id = c.track_id
  -- the kernel that ended the gap was submitted only after the call returned (had it been
  -- queued already, the gap was a wait for something else, e.g. a copy)
  AND coalesce(e.next_ready_ns, e.next_ns) >= c.end_ns
  AND e.next_ns - e.work_end_ns >= ${sync_gap_min_ns};
