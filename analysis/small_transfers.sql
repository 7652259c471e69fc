-- small_transfers: bursts of transfers so small that their fixed cost dominates
-- precedence: 30
--
-- What it detects: runs of at least small_min_burst transfers on one device and direction,
-- each closer than small_burst_gap_ns to the previous one, whose size S is so small that a
-- transfer reaches under small_bw_fraction of the link's bandwidth B by the model
-- S / (L + S/B) (L: the per-transfer fixed cost, estimated from the trace). With f =
-- small_bw_fraction that is S < f / (1 - f) x L x B: at f = 0.5, under L x B bytes.
-- Pageable copies are left to pageable_memory.
-- Why it matters: every transfer pays L (descriptor, doorbell, first round trip) and a host
-- API call; a thousand 4 KiB copies spend most of their time in fixed costs.
-- What to do: gather the pieces into one buffer and copy once (or use one larger
-- transfer per step), or keep the data resident on the device.
-- Impact: the burst's wall time minus the same bytes as one transfer (L + total / B), on
-- the critical path only where the device's execution units were idle during the burst.
--
-- Output columns (one row per burst):
--   ts, dur       first transfer's start to last transfer's end
--   track_id, slice_id  the first transfer
--   metric        'achieved_GBps' over the burst (bytes / summed transfer time);
--                 threshold = f x B in GB/s
--   local_ns      burst wall time minus the batched estimate
--   claim         'idle' over the burst

CREATE OR REPLACE TEMP VIEW _small_transfers_check AS
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM _xfer) THEN 'the trace has no transfers with a byte count'
    WHEN NOT EXISTS (SELECT 1 FROM _xfer_model)
        THEN 'no link bandwidth: the trace records no link configuration and no large copy to infer it from'
    END AS reason;

CREATE OR REPLACE TEMP TABLE _small_xfer AS
WITH s AS (
    SELECT x.slice_id, x.track_id, x.dev, x.direction, x.ts, x.end_ns, x.dur, x.bytes,
           m.peak_Bps, m.latency_ns
    FROM _xfer x
    JOIN _xfer_model m ON m.dev = x.dev AND m.direction = x.direction
    WHERE coalesce(x.host_mem, '') <> 'pageable'
      AND x.bytes < ${small_bw_fraction} / (1 - ${small_bw_fraction}) * m.latency_ns * m.peak_Bps / 1e9
),
o AS (
    SELECT *,
           max(end_ns) OVER (PARTITION BY dev, direction ORDER BY ts, slice_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM s
)
SELECT *,
       sum(CASE WHEN prev_end IS NULL OR ts - prev_end > ${small_burst_gap_ns} THEN 1 ELSE 0 END)
         OVER (PARTITION BY dev, direction ORDER BY ts, slice_id ROWS UNBOUNDED PRECEDING) AS burst
FROM o;

CREATE OR REPLACE TEMP VIEW _small_bursts AS
SELECT dev, direction, burst,
       count(*) AS n, sum(bytes) AS bytes, sum(dur) AS busy_ns,
       min(ts) AS start_ns, max(end_ns) AS end_ns,
       arg_min(slice_id, ts) AS first_slice, arg_min(track_id, ts) AS track_id,
       any_value(peak_Bps) AS peak_Bps, any_value(latency_ns) AS latency_ns,
       any_value(latency_ns) + sum(bytes) * 1e9 / any_value(peak_Bps) AS batched_ns
FROM _small_xfer
GROUP BY dev, direction, burst
HAVING count(*) >= ${small_min_burst};

SELECT start_ns AS ts,
       end_ns - start_ns AS dur,
       track_id,
       first_slice AS slice_id,
       'achieved_GBps' AS metric,
       bytes / greatest(busy_ns, 1) AS value,
       ${small_bw_fraction} * peak_Bps / 1e9 AS threshold,
       printf('%d small %s transfers (%s each on average, %s in all) ran at %.2f GB/s: each pays a fixed '
              || 'cost of about %s against a link of %.1f GB/s; as one transfer about %s',
              n, upper(direction), _fmt_bytes(bytes / n), _fmt_bytes(bytes), bytes / greatest(busy_ns, 1),
              _fmt_ns(latency_ns), peak_Bps / 1e9, _fmt_ns(batched_ns)) AS message,
       CAST(greatest(0, end_ns - start_ns - batched_ns) AS BIGINT) AS local_ns,
       dev,
       'idle' AS claim_mode,
       start_ns AS claim_start,
       end_ns AS claim_end,
       0.0 AS min_share
FROM _small_bursts;
