-- redundant_transfers: the same host data copied to the same device again, unchanged
-- precedence: 20
--
-- What it detects: host-to-device copy calls whose source buffer, size and contents tag
-- (args host_buffer and content_hash, which an instrumented runtime records on the copy
-- call) equal those of an earlier copy to the same device: the device already holds
-- those bytes.
-- Why it matters: the repeated copy occupies the link and, when the device waits for it,
-- the whole run; it is pure waste.
-- What to do: keep the data resident on the device (cache it across steps) and copy only
-- what changed.
-- Impact: the repeated copy's whole transfer time (first DMA start to last DMA end), on the
-- critical path only where the device's execution units were idle during it or during the
-- transfers queued back to back behind it on its submission queue (they waited for it).
--
-- Output columns (one row per repeated copy):
--   ts, dur       the copy's transfer, first DMA start to last DMA end
--   track_id, slice_id  its first DMA transfer
--   metric        'repeat_count'; value = how many times these contents were copied so far;
--                 threshold = 1
--   local_ns      the copy's duration
--   claim         'idle_head' over the copy and the transfers chained behind it on its queue
--                 (the first local_ns of idle time: the delay it pushed onto them)

CREATE OR REPLACE TEMP TABLE _tagged_copies AS
WITH calls AS (
    SELECT s.slice_id AS call_slice, s.ts AS call_ts, s.corr_id,
           json_extract_string(s.args, '$.host_buffer') AS host_buffer,
           json_extract_string(s.args, '$.content_hash') AS content_hash
    FROM slices s JOIN _track_dev t ON t.track_id = s.track_id
    WHERE t.lane = 'cpu' AND s.corr_id IS NOT NULL AND s.args LIKE '%content_hash%'
)
SELECT c.call_slice, c.host_buffer, c.content_hash, x.dev,
       min(x.ts) AS start_ns, max(x.end_ns) AS end_ns,
       sum(x.bytes) AS bytes, arg_min(x.slice_id, x.ts) AS first_slice, arg_min(x.track_id, x.ts) AS track_id,
       arg_max(x.slice_id, x.end_ns) AS last_slice
FROM calls c JOIN _xfer x ON x.corr_id = c.corr_id
WHERE x.direction = 'h2d' AND c.host_buffer IS NOT NULL AND c.content_hash IS NOT NULL
GROUP BY c.call_slice, c.call_ts, c.host_buffer, c.content_hash, x.dev;

CREATE OR REPLACE TEMP VIEW _redundant_transfers_check AS
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM _xfer WHERE direction = 'h2d') THEN 'the trace has no host-to-device copies'
    WHEN NOT EXISTS (SELECT 1 FROM _tagged_copies)
        THEN 'no copy records its source buffer and a contents tag (args host_buffer, content_hash)'
    END AS reason;

CREATE OR REPLACE TEMP TABLE _redundant_rows AS
WITH o AS (
    SELECT *,
           row_number() OVER (PARTITION BY dev, host_buffer, content_hash, bytes ORDER BY start_ns, call_slice)
             AS nth,
           first_value(start_ns) OVER (PARTITION BY dev, host_buffer, content_hash, bytes
                                       ORDER BY start_ns, call_slice) AS first_ns
    FROM _tagged_copies
)
SELECT * FROM o WHERE nth > 1 AND bytes >= ${redundant_min_bytes};

-- transfers queued back to back behind a repeated copy on its queue waited for it: the
-- device's wait during them is the repeated copy's doing too (chains of transfers per
-- submission queue, each starting within serial_max_gap_ns of the previous one's end)
CREATE OR REPLACE TEMP TABLE _xfer_chains AS
WITH q AS (
    SELECT x.slice_id, x.ts, x.end_ns, r.src_track_id AS queue_id,
           lag(x.end_ns) OVER (PARTITION BY r.src_track_id ORDER BY x.ts, x.slice_id) AS prev_end
    FROM _xfer x JOIN _ready r ON r.slice_id = x.slice_id
),
c AS (
    SELECT *, max(CASE WHEN prev_end IS NULL OR ts - prev_end > ${serial_max_gap_ns} THEN ts END)
                OVER (PARTITION BY queue_id ORDER BY ts, slice_id ROWS UNBOUNDED PRECEDING) AS chain_start
    FROM q
)
SELECT slice_id, max(end_ns) OVER (PARTITION BY queue_id, chain_start) AS chain_end FROM c;

SELECT start_ns AS ts,
       end_ns - start_ns AS dur,
       track_id,
       first_slice AS slice_id,
       'repeat_count' AS metric,
       CAST(nth - 1 AS DOUBLE) AS value,
       1.0 AS threshold,
       printf('H2D copy of %s from host buffer %s repeats an identical copy (same contents tag %s) '
              || 'made %s earlier: device %s already holds these bytes', _fmt_bytes(bytes), host_buffer,
              content_hash, _fmt_ns(start_ns - first_ns), dev) AS message,
       end_ns - start_ns AS local_ns,
       dev,
       'idle_head' AS claim_mode,
       start_ns AS claim_start,
       greatest(end_ns, coalesce(ch.chain_end, end_ns)) AS claim_end,
       0.0 AS min_share
FROM _redundant_rows r LEFT JOIN _xfer_chains ch ON ch.slice_id = r.last_slice;
