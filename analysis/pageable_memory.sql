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
-- Impact (a saving, never more): the copy's DMA time (first chunk's start to the last one's
-- end; before that the call may just wait for earlier work in its queue) minus the time the
-- same bytes take from pinned memory, L + bytes / B (B: the link peak from the trace's link
-- configuration, else the best large pinned copy of the trace; L: the fixed cost per
-- transfer, _common.sql _xfer_model); 0 without a reference bandwidth. How long the device
-- waited while the call blocked its thread is said in the message, not counted: a pinned
-- copy that the thread then waits on blocks it too, and late work after the call is
-- launch_gaps' to report. On the critical path only where the execution units sat idle
-- during the DMA.
--
-- Output columns (one row per pageable copy):
--   ts, dur       the copy from its host call's start to the later of the call's return and
--                 its last chunk's end
--   track_id      the transfer's PCIe track; slice_id its first DMA slice
--   metric        'achieved_GBps'; value = bytes / DMA span; threshold = the pinned reference GB/s
--   local_ns      DMA span minus the pinned-memory estimate (>= 0)
--   claim         'idle' over the DMA span

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
       m.peak_Bps, m.latency_ns, m.bw_source,
       CASE WHEN m.peak_Bps IS NULL THEN NULL ELSE m.latency_ns + p.bytes * 1e9 / m.peak_Bps END AS pinned_ns
FROM _pageable_copies p
LEFT JOIN _origin o ON o.slice_id = p.first_slice
LEFT JOIN _xfer_model m ON m.dev = p.dev AND m.direction = p.direction;

-- how long the device's units waited for work its thread could only submit after this
-- blocking call returned: the late gaps of the same device and thread inside the call. The
-- late gaps of one device are disjoint, so the gap time inside [call_ts, call_end) is
-- G(call_end) - G(call_ts), with G(t) the gap time before t: a running sum per (device,
-- thread) and an ASOF join on the last gap starting at or before t (n log n; a range join
-- would pair every long call with every gap inside it).
CREATE OR REPLACE TEMP TABLE _pageable_gap_sums AS
SELECT dev, thread_track_id, idle_start AS s, idle_end AS e,
       coalesce(sum(idle_end - idle_start) OVER (PARTITION BY dev, thread_track_id ORDER BY idle_start
                                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before_ns
FROM _late_gaps WHERE thread_track_id IS NOT NULL;

CREATE OR REPLACE TEMP TABLE _pageable_blocked AS
WITH c AS (
    SELECT copy_key, dev, direction, call_track_id, call_ts, call_end_ns
    FROM _pageable_calls WHERE call_track_id IS NOT NULL
),
at_start AS (
    SELECT c.*, coalesce(g.before_ns + least(c.call_ts - g.s, g.e - g.s), 0) AS g_start
    FROM c ASOF LEFT JOIN _pageable_gap_sums g
      ON g.dev = c.dev AND g.thread_track_id = c.call_track_id AND g.s <= c.call_ts
),
at_end AS (
    SELECT a.*, coalesce(g.before_ns + least(a.call_end_ns - g.s, g.e - g.s), 0) AS g_end
    FROM at_start a ASOF LEFT JOIN _pageable_gap_sums g
      ON g.dev = a.dev AND g.thread_track_id = a.call_track_id AND g.s <= a.call_end_ns
)
SELECT dev, direction, copy_key, sum(g_end - g_start) AS blocked_ns
FROM at_end
GROUP BY dev, direction, copy_key
HAVING sum(g_end - g_start) > 0;

CREATE OR REPLACE TEMP VIEW _pageable_memory_rows AS
SELECT p.*, coalesce(b.blocked_ns, 0) AS blocked_ns,
       greatest(coalesce(p.dma_end - p.dma_start - p.pinned_ns, 0), 0) AS excess_ns
FROM _pageable_calls p
LEFT JOIN _pageable_blocked b ON b.dev = p.dev AND b.direction = p.direction AND b.copy_key = p.copy_key;

SELECT copy_start AS ts,
       copy_end - copy_start AS dur,
       track_id,
       first_slice AS slice_id,
       'achieved_GBps' AS metric,
       bytes / greatest(dma_end - dma_start, 1) AS value,
       peak_Bps / 1e9 AS threshold,
       printf('pageable %s copy of %s (%d DMA chunk%s): %s of DMA at %.2f GB/s, in a call of %s', upper(direction),
              _fmt_bytes(bytes), n_chunks, CASE WHEN n_chunks = 1 THEN '' ELSE 's' END,
              _fmt_ns(dma_end - dma_start), bytes / greatest(dma_end - dma_start, 1), _fmt_ns(copy_end - copy_start))
         || CASE WHEN pinned_ns IS NULL THEN '; no pinned reference bandwidth in this trace, so no saving is claimed'
                 ELSE printf('; from pinned memory the DMA would take about %s (reference: %s, %.2f GB/s):'
                             || ' saving up to %s', _fmt_ns(pinned_ns),
                             CASE bw_source WHEN 'link' THEN 'link peak' ELSE 'best pinned copy' END,
                             peak_Bps / 1e9, _fmt_ns(excess_ns)) END
         || CASE WHEN blocked_ns > 0
                 THEN printf('; the call also blocked its thread while the device waited %s for its next work'
                             || ' (not counted here: see launch_gaps)', _fmt_ns(blocked_ns))
                 ELSE '' END
         AS message,
       CAST(excess_ns AS BIGINT) AS local_ns,
       dev,
       CASE WHEN pinned_ns IS NULL THEN 'none' ELSE 'idle' END AS claim_mode,
       dma_start AS claim_start,
       dma_end AS claim_end,
       0.0 AS min_share
FROM _pageable_memory_rows;
