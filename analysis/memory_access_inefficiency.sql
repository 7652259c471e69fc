-- memory_access_inefficiency: kernels that move far more memory than they use, or crawl
-- precedence: 70
--
-- What it detects, from the per-kernel counter deltas a range profiler records on each
-- kernel (args bytes_requested, bytes_fetched, flops):
--   (a) kernels that fetched at least mem_amplification_threshold times the bytes their
--       loads asked for (strided or scattered access pulls whole access granules of which
--       a few bytes are used), while bandwidth-bound (fetching at >= half the bandwidth);
--   (b) kernels bound by neither: under mem_low_bw_fraction of the memory bandwidth while
--       their compute needs under half their time (latency-bound access).
-- Peaks come from the trace itself (a roofline fitted to what the device showed): the
-- memory bandwidth is the best bytes_fetched / duration any kernel of the device reached,
-- a unit's compute peak the best flops / duration of its kernels that are not
-- bandwidth-bound (unknown when it has none; then compute time counts as 0).
-- Why it matters: a memory-bound kernel's time is its traffic; amplified traffic is
-- directly longer kernels.
-- What to do: make accesses contiguous (change the layout, transpose once, coalesce the
-- loads, use vector loads), or stage reused data in on-chip memory.
-- Impact: the kernel's time beyond its roofline at full efficiency,
-- max(requested / bandwidth, flops / compute peak), claimed at the kernel's end -- unless
-- the device's units then went idle until the host submitted more work (the host was the
-- bottleneck: the excess is off the critical path, impact 0), except when a host thread
-- was blocked in a synchronising call across the kernel's end (waiting for this kernel).
--
-- Output columns (one row per kernel):
--   ts, dur, track_id, slice_id  the kernel
--   metric        'fetch_amplification' (a) or 'hbm_efficiency' (b); value and threshold
--   local_ns      duration beyond the roofline at full efficiency
--   claim         'direct' over the last local_ns of the kernel when on the critical path

CREATE OR REPLACE TEMP TABLE _kernel_counters AS
WITH j AS (
    -- one typed parse of the args for all three counters (non-numbers become NULL)
    SELECT s.slice_id, s.track_id, t.dev, s.ts, s.ts + s.dur AS end_ns, s.dur, s.name,
           json_transform(s.args, '{"bytes_requested": "DOUBLE", "bytes_fetched": "DOUBLE", "flops": "DOUBLE"}') AS v
    FROM slices s JOIN _track_dev t ON t.track_id = s.track_id
    WHERE t.lane = 'eu' AND s.dur > 0 AND s.depth = 0 AND s.args LIKE '%bytes_fetched%'
)
SELECT slice_id, track_id, dev, ts, end_ns, dur, name,
       v.bytes_requested AS requested, v.bytes_fetched AS fetched, coalesce(v.flops, 0) AS flops
FROM j;

CREATE OR REPLACE TEMP VIEW _memory_access_inefficiency_check AS
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM _dev_work WHERE lane = 'eu') THEN 'the trace has no device computation'
    WHEN NOT EXISTS (SELECT 1 FROM _kernel_counters WHERE requested > 0 AND fetched > 0)
        THEN 'no kernel records its bytes requested and fetched (per-kernel counter deltas)'
    END AS reason;

-- the device's memory bandwidth: the best fetched bytes per second any of its kernels
-- reached; a kernel reaching at least half of it is bandwidth-bound. Compute peak per unit:
-- the best flops per second of the unit's other (not bandwidth-bound) kernels, when any.
CREATE OR REPLACE TEMP TABLE _kernel_roofline AS
WITH k AS (SELECT * FROM _kernel_counters WHERE requested > 0 AND fetched > 0),
bw AS (SELECT dev, max(fetched * 1e9 / dur) AS mem_Bps FROM k GROUP BY dev),
kb AS (SELECT k.*, bw.mem_Bps, fetched * 1e9 / dur >= 0.5 * bw.mem_Bps AS bw_bound FROM k JOIN bw ON bw.dev = k.dev),
fl AS (SELECT track_id, max(flops * 1e9 / dur) AS flops_ps FROM kb WHERE NOT bw_bound AND flops > 0 GROUP BY track_id)
SELECT kb.*, fl.flops_ps,
       fetched * 1e9 / mem_Bps AS mem_ns,
       CASE WHEN fl.flops_ps > 0 THEN flops * 1e9 / fl.flops_ps ELSE 0 END AS compute_ns,
       greatest(requested * 1e9 / mem_Bps,
                CASE WHEN fl.flops_ps > 0 THEN flops * 1e9 / fl.flops_ps ELSE 0 END) AS ideal_ns
FROM kb
LEFT JOIN fl ON fl.track_id = kb.track_id
WHERE (fetched / requested >= ${mem_amplification_threshold} AND bw_bound)
   OR (fetched * 1e9 / dur < ${mem_low_bw_fraction} * mem_Bps AND fl.flops_ps > 0
       AND CASE WHEN fl.flops_ps > 0 THEN flops * 1e9 / fl.flops_ps ELSE 0 END < 0.5 * dur);

-- kernels after which the device's units went idle until the host submitted more: their
-- excess is off the critical path, unless a host thread was blocked in a synchronising
-- call across the kernel's end (the host was waiting for this very kernel)
-- (a call spans the kernel's end when, among the calls that began before it, the latest
-- end reaches it: a running maximum over the calls in start order, looked up with an ASOF
-- join; an anti-join on the two inequalities ran as a merge join over all call pairs)
CREATE OR REPLACE TEMP TABLE _mem_host_bound AS
WITH h AS (
    SELECT k.slice_id, k.end_ns
    FROM _kernel_roofline k JOIN _late_gaps g ON g.dev = k.dev AND g.idle_start = k.end_ns
),
sc AS (
    -- default RANGE frame: calls starting at the same instant share one running maximum
    SELECT ts, max(end_ns) OVER (ORDER BY ts) AS run_max_end FROM _sync_calls
)
SELECT h.slice_id
FROM h ASOF LEFT JOIN sc ON h.end_ns > sc.ts
WHERE sc.run_max_end IS NULL OR sc.run_max_end < h.end_ns;

CREATE OR REPLACE TEMP TABLE _mem_rows AS
SELECT *,
       fetched / requested AS amplification,
       fetched * 1e9 / dur / mem_Bps AS efficiency,
       CASE WHEN fetched / requested >= ${mem_amplification_threshold}
            THEN least(dur, mem_ns) - ideal_ns
            ELSE dur - ideal_ns END AS excess_ns,
       slice_id NOT IN (SELECT slice_id FROM _mem_host_bound) AS critical
FROM _kernel_roofline;

SELECT ts,
       dur,
       track_id,
       slice_id,
       CASE WHEN amplification >= ${mem_amplification_threshold} THEN 'fetch_amplification'
            ELSE 'hbm_efficiency' END AS metric,
       CASE WHEN amplification >= ${mem_amplification_threshold} THEN amplification ELSE efficiency END AS value,
       CASE WHEN amplification >= ${mem_amplification_threshold} THEN ${mem_amplification_threshold}
            ELSE ${mem_low_bw_fraction} END AS threshold,
       CASE WHEN amplification >= ${mem_amplification_threshold}
            THEN printf('%s fetched %.1fx the bytes it requested (%s for %s) while memory-bound; at full '
                        || 'efficiency it would take about %s instead of %s', name, amplification,
                        _fmt_bytes(fetched), _fmt_bytes(requested), _fmt_ns(ideal_ns), _fmt_ns(dur))
            ELSE printf('%s reached %.0f%% of the memory bandwidth (%.0f GB/s) while memory-bound; at full '
                        || 'efficiency it would take about %s instead of %s', name, 100 * efficiency,
                        mem_Bps / 1e9, _fmt_ns(ideal_ns), _fmt_ns(dur)) END AS message,
       CAST(excess_ns AS BIGINT) AS local_ns,
       dev,
       'direct' AS claim_mode,
       CAST(CASE WHEN critical THEN end_ns - excess_ns ELSE end_ns END AS BIGINT) AS claim_start,
       end_ns AS claim_end,
       0.0 AS min_share
FROM _mem_rows
WHERE excess_ns >= ${mem_min_excess_ns};
