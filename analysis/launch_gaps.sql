-- launch_gaps: the device idle because the host or driver submitted the next work late
-- precedence: 90
--
-- What it detects: periods of at least launch_gap_min_ns during which none of a device's
-- execution units computed, ending with a kernel the host submitted only after the units
-- had run out of work (its submission, reached through the correlation-chain flows,
-- arrived after the idle period began). (A kernel submitted in time that waited for a
-- copy is the copy's problem: see the transfer passes.)
-- Why it matters: the device is the expensive part; time it waits for the host to issue
-- the next kernel or copy is lost outright.
-- What to do: move host work (Python overhead, data preparation, allocation) off the
-- submission path, submit further ahead (deeper queues, CUDA-graph-like replay), or fuse
-- small kernels so fewer launches are needed.
-- Impact: the whole idle period (had the work been queued in time the device would have
-- started it when the previous work ended). This pass is residual: a gap mostly explained
-- by a finding of higher precedence (a synchronising call, a slow copy) is not reported.
--
-- Output columns (one row per gap):
--   ts, dur       the idle period
--   track_id, slice_id  the work that ended it
--   metric        'idle_ns'; value = the gap; threshold = launch_gap_min_ns
--   local_ns      the gap
--   claim         'idle' over the gap

CREATE OR REPLACE TEMP VIEW _launch_gaps_check AS
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM _dev_work WHERE lane = 'eu') THEN 'the trace has no device computation'
    WHEN NOT EXISTS (SELECT 1 FROM _ready)
        THEN 'no flow links device work to the host calls that submitted it, so late submission cannot be told apart'
    END AS reason;

CREATE OR REPLACE TEMP TABLE _launch_gap_rows AS
SELECT g.dev, g.next_slice AS slice_id, w.track_id, g.idle_end AS ts, g.idle_start, w.name, g.ready_ns
FROM _late_gaps g
JOIN slices w ON w.slice_id = g.next_slice
WHERE g.idle_end - g.idle_start >= ${launch_gap_min_ns};

SELECT g.idle_start AS ts,
       g.ts - g.idle_start AS dur,
       g.track_id,
       g.slice_id,
       'idle_ns' AS metric,
       CAST(g.ts - g.idle_start AS DOUBLE) AS value,
       CAST(${launch_gap_min_ns} AS DOUBLE) AS threshold,
       printf('device %s idle for %s before %s on %s: the call that submitted it returned %s after the device'
              || ' ran out of work, and the work started %s after that (launch latency); queued before the device'
              || ' ran dry it would have started at once, so all %s idle is the saving',
              g.dev, _fmt_ns(g.ts - g.idle_start), g.name, t.track_name, _fmt_ns(g.ready_ns - g.idle_start),
              _fmt_ns(g.ts - g.ready_ns), _fmt_ns(g.ts - g.idle_start))
         AS message,
       g.ts - g.idle_start AS local_ns,
       g.dev,
       'idle' AS claim_mode,
       g.idle_start AS claim_start,
       g.ts AS claim_end,
       0.5 AS min_share
FROM _launch_gap_rows g JOIN _track_dev t ON t.track_id = g.track_id;
