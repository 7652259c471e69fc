-- pageable_memory: copies between the device and pageable host memory
-- precedence: 10
--
-- What it detects: DMA transfers whose host side is pageable memory (host_mem =
-- 'pageable'), grouped per copy call (the chunks of one staged copy share a correlation
-- id).
-- Why it matters: the device cannot DMA from pageable pages, so the runtime stages the
-- data through a pinned bounce buffer in chunks, on the CPU, synchronously: the copy runs
-- well below link speed, blocks the calling thread and cannot overlap with compute.
-- What to do: allocate the buffer in pinned (page-locked) memory, or copy through a
-- persistent pinned staging buffer you manage, and use the asynchronous copy.
-- Impact: the larger of (a) the copy's own time (first DMA chunk's start to the last one's
-- end; before that the call may just wait for earlier work in its queue) minus the time
-- the same bytes take from pinned memory (L + bytes / B, B the reference bandwidth) and
-- (b) how long the device's execution units waited, during the call, for
-- work that the blocked thread could only submit after the call returned (a pinned copy
-- is asynchronous: the thread would have gone on submitting); on the critical path only
-- where the execution units sat idle during the call or the copy.
--
-- Output columns (one row per pageable copy):
--   ts, dur       the copy from its host call's start to the later of the call's return and
--                 its last chunk's end
--   track_id      the transfer's PCIe track; slice_id its first DMA slice
--   metric        'achieved_GBps'; value = bytes / DMA span; threshold = the pinned reference GB/s
--   local_ns      max(DMA span minus the pinned-memory estimate, blocked wait)
--   claim         'idle' over the call and the copy

CREATE OR REPLACE TEMP VIEW _pageable_memory_check AS
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM _xfer) THEN 'the trace has no transfers with a byte count'
    WHEN NOT EXISTS (SELECT 1 FROM _xfer WHERE host_mem IS NOT NULL)
        THEN 'no transfer in this trace records whether its host memory is pageable or pinned'
    END AS reason;

CREATE OR REPLACE TEMP TABLE _pageable_copies AS
WITH x AS (
    SELECT x.*, coalesce(x.corr_id, -1 - x.slice_id) AS copy_key
    FROM _xfer x
    WHERE x.host_mem = 'pageable'
)
SELECT dev, direction, copy_key,
       min(ts) AS dma_start, max(end_ns) AS dma_end, sum(bytes) AS bytes, count(*) AS n_chunks,
       arg_min(slice_id, ts) AS first_slice, arg_min(track_id, ts) AS track_id
FROM x GROUP BY dev, direction, copy_key
HAVING sum(bytes) >= ${pageable_min_bytes};

CREATE OR REPLACE TEMP TABLE _pageable_calls AS
SELECT p.*,
       least(p.dma_start, coalesce(o.call_ts, p.dma_start)) AS copy_start,
       greatest(p.dma_end, coalesce(o.call_end_ns, p.dma_end)) AS copy_end,
       o.call_ts, o.call_end_ns, o.call_track_id,
       m.peak_Bps, m.latency_ns,
       CASE WHEN m.peak_Bps IS NULL THEN NULL ELSE m.latency_ns + p.bytes * 1e9 / m.peak_Bps END AS pinned_ns
FROM _pageable_copies p
LEFT JOIN _origin o ON o.slice_id = p.first_slice
LEFT JOIN _xfer_model m ON m.dev = p.dev AND m.direction = p.direction;

-- how long the device's units waited for work its thread could only submit after this
-- blocking call returned: late gaps of the same device and thread overlapping the call
-- (a range join on times shifted per (device, thread))
CREATE OR REPLACE TEMP TABLE _pageable_keys AS
SELECT dev, thread_track_id,
       row_number() OVER (ORDER BY dev, thread_track_id) * CAST(1125899906842624 AS BIGINT)
         - (SELECT run_start_ns FROM _run) AS off
FROM (SELECT DISTINCT dev, call_track_id AS thread_track_id FROM _pageable_calls WHERE call_track_id IS NOT NULL);

CREATE OR REPLACE TEMP TABLE _pageable_blocked AS
WITH c AS (
    SELECT p.copy_key, p.dev, p.direction, p.call_ts + k.off AS s, p.call_end_ns + k.off AS e
    FROM _pageable_calls p JOIN _pageable_keys k ON k.dev = p.dev AND k.thread_track_id = p.call_track_id
),
g AS (
    SELECT g.idle_start + k.off AS s, g.idle_end + k.off AS e
    FROM _late_gaps g JOIN _pageable_keys k ON k.dev = g.dev AND k.thread_track_id = g.thread_track_id
)
SELECT c.dev, c.direction, c.copy_key, sum(least(c.e, g.e) - greatest(c.s, g.s)) AS blocked_ns
FROM c JOIN g ON g.s < c.e AND g.e > c.s
GROUP BY c.dev, c.direction, c.copy_key;

CREATE OR REPLACE TEMP VIEW _pageable_memory_rows AS
SELECT p.*, coalesce(b.blocked_ns, 0) AS blocked_ns,
       greatest(coalesce(p.dma_end - p.dma_start - p.pinned_ns, 0), coalesce(b.blocked_ns, 0)) AS excess_ns
FROM _pageable_calls p
LEFT JOIN _pageable_blocked b ON b.dev = p.dev AND b.direction = p.direction AND b.copy_key = p.copy_key;

SELECT copy_start AS ts,
       copy_end - copy_start AS dur,
       track_id,
       first_slice AS slice_id,
       'achieved_GBps' AS metric,
       bytes / greatest(dma_end - dma_start, 1) AS value,
       peak_Bps / 1e9 AS threshold,
       printf('pageable %s copy of %s (%d DMA chunk%s) took %s at %.2f GB/s', upper(direction),
              _fmt_bytes(bytes), n_chunks, CASE WHEN n_chunks = 1 THEN '' ELSE 's' END,
              _fmt_ns(copy_end - copy_start), bytes / greatest(dma_end - dma_start, 1))
         || CASE WHEN pinned_ns IS NULL THEN '; no pinned reference bandwidth in this trace'
                 ELSE printf('; from pinned memory about %s at %.2f GB/s', _fmt_ns(pinned_ns), peak_Bps / 1e9) END
         || CASE WHEN blocked_ns > 0
                 THEN printf('; the call blocked its thread while the device waited %s for its next work',
                             _fmt_ns(blocked_ns))
                 ELSE '' END
         AS message,
       CAST(excess_ns AS BIGINT) AS local_ns,
       dev,
       CASE WHEN pinned_ns IS NULL AND blocked_ns = 0 THEN 'none' ELSE 'idle' END AS claim_mode,
       copy_start AS claim_start,
       copy_end AS claim_end,
       0.0 AS min_share
FROM _pageable_memory_rows;
