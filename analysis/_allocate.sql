-- _allocate: turns every pass's candidates into findings whose impacts never double count.
--
-- Each candidate says how much time fixing it would save locally (local_ns) and where
-- that time sits: claim_mode 'direct' claims [claim_start, claim_end) as it is (e.g. the
-- tail of a kernel that ran longer than its roofline, already checked to be on the
-- critical path); 'idle' claims the parts of [claim_start, claim_end) during which the
-- device's execution units were idle (the device was waiting, so the time is on the
-- critical path); 'idle_head' the same, keeping the first local_ns ns of idle time instead
-- of the last (a delay that pushes the work queued behind it back); 'none' claims nothing
-- (the pass cannot place its waste).
-- Of its claimed time a candidate keeps only the last local_ns ns (the part a fixed
-- version would not have needed). Every nanosecond of the run then goes to at most one
-- candidate: the one first in precedence order (pass precedence, then larger local
-- estimate, then earlier). exclusive_ns = the nanoseconds a candidate won, so the exclusive
-- shares of one trace sum to at most the run's duration (the runner adds impact_ns, the saving
-- if the finding alone is fixed, from a replay: analysis/impact.py).
-- Reads _candidates (built by the runner: pass, precedence + the pass columns).

-- The device whose computation ends last sets the run's end: waste on a device that
-- finished earlier does not lengthen the run (its findings keep impact 0).
CREATE OR REPLACE TEMP TABLE _critical_dev AS
SELECT arg_max(dev, end_ns) AS dev, max(end_ns) AS end_ns FROM _dev_work WHERE lane = 'eu';

CREATE OR REPLACE TEMP TABLE _cand AS
SELECT row_number() OVER (ORDER BY c.precedence, c.local_ns DESC, c.ts, c.slice_id) AS cand_id,
       c.pass, c.cand_row, c.precedence, c.ts, c.slice_id, c.local_ns, c.dev, c.claim_mode, c.claim_start,
       c.claim_end, c.min_share,
       c.dev IS NULL OR k.dev IS NULL OR c.dev = k.dev AS on_critical_dev
FROM _candidates c LEFT JOIN _critical_dev k ON TRUE;

-- The candidates that compete for the same time: on the critical device (and candidates of no device)
-- all of them; a device that finished earlier is a group of its own: its candidates win no exclusive
-- time (their impact stays 0) but a residual pass's min_share is still measured against the findings of
-- higher precedence on that device (a gap there mostly explained by a sync stall is not reported, one
-- that is not is, and its fix counts in the what-if). Each such group's claims are shifted by gshift (a
-- multiple of the claims' whole span) onto a range of their own, so the allocation below stays one pure
-- range join over one time axis (an equality on the group beside the ranges made it a quadratic one);
-- the shift cancels in every length.
CREATE OR REPLACE TEMP TABLE _claim_group AS
WITH span AS (SELECT coalesce(max(claim_end) - min(claim_start), 0) + 1 AS ns, coalesce(max(claim_end), 0) AS hi
              FROM _cand WHERE claim_mode IN ('idle', 'idle_head') AND claim_end > claim_start),
d AS (SELECT dev, row_number() OVER (ORDER BY dev) AS k
      FROM (SELECT DISTINCT dev FROM _cand WHERE NOT on_critical_dev AND min_share > 0 AND dev IS NOT NULL))
-- (none where the shifted times would not fit a BIGINT: those candidates then win nothing, as before)
SELECT d.dev, d.k * 2 * s.ns AS gshift
FROM d, span s
WHERE CAST(s.hi AS DOUBLE) + CAST((SELECT count(*) FROM d) + 1 AS DOUBLE) * 2 * CAST(s.ns AS DOUBLE) < 4e18;

CREATE OR REPLACE TEMP TABLE _claim_raw AS
SELECT cand_id, claim_start AS a, claim_end AS b, local_ns, FALSE AS head
FROM _cand WHERE claim_mode = 'direct' AND claim_end > claim_start AND on_critical_dev
UNION ALL
-- same device and overlapping, as a pure range join on device-offset times (_dev_offset)
SELECT c.cand_id, greatest(c.s, i.s) - c.off + c.gshift, least(c.e, i.e) - c.off + c.gshift, c.local_ns, c.head
FROM (SELECT c.cand_id, c.local_ns, c.claim_start + o.off AS s, c.claim_end + o.off AS e, o.off,
             c.claim_mode = 'idle_head' AS head,
             CASE WHEN c.on_critical_dev THEN 0 ELSE g.gshift END AS gshift
      FROM _cand c JOIN _dev_offset o ON o.dev = c.dev
      LEFT JOIN _claim_group g ON g.dev = c.dev
      WHERE c.claim_mode IN ('idle', 'idle_head') AND c.claim_end > c.claim_start
        AND (c.on_critical_dev OR g.gshift IS NOT NULL)) c
JOIN (SELECT i.idle_start + o.off AS s, i.idle_end + o.off AS e
      FROM _eu_idle i JOIN _dev_offset o ON o.dev = i.dev) i
  ON i.s < c.e AND i.e > c.s;

-- keep the last local_ns ns of each candidate's claim ('idle_head': the first local_ns ns,
-- for a delay that pushes later work back)
CREATE OR REPLACE TEMP TABLE _claim AS
WITH o AS (
    SELECT cand_id, a, b, local_ns, head,
           CASE WHEN head THEN sum(b - a) OVER (PARTITION BY cand_id ORDER BY a ROWS UNBOUNDED PRECEDING)
                ELSE sum(b - a) OVER (PARTITION BY cand_id ORDER BY b DESC ROWS UNBOUNDED PRECEDING) END
             - (b - a) AS before_ns
    FROM _claim_raw
)
SELECT cand_id,
       CASE WHEN head THEN a ELSE greatest(a, b - (local_ns - before_ns)) END AS a,
       CASE WHEN head THEN least(b, a + (local_ns - before_ns)) ELSE b END AS b
FROM o WHERE before_ns < local_ns;

-- elementary segments between all claim boundaries; each goes to the first candidate
CREATE OR REPLACE TEMP TABLE _alloc AS
WITH p AS (SELECT a AS t FROM _claim UNION SELECT b FROM _claim),
seg AS (SELECT t AS t0, lead(t) OVER (ORDER BY t) AS t1 FROM p),
won AS (
    SELECT s.t0, s.t1, min(c.cand_id) AS cand_id
    FROM seg s JOIN _claim c ON c.a <= s.t0 AND c.b >= s.t1
    WHERE s.t1 IS NOT NULL
    GROUP BY s.t0, s.t1
)
SELECT cand_id, sum(t1 - t0) AS alloc_ns FROM won GROUP BY cand_id;

-- candidates with their allocation; min_share drops candidates mostly explained by
-- findings of higher precedence (a residual pass such as launch_gaps sets it)
CREATE OR REPLACE TEMP TABLE _kept AS
SELECT c.*, CAST(CASE WHEN c.on_critical_dev THEN coalesce(a.alloc_ns, 0) ELSE 0 END AS BIGINT) AS impact_ns,
       CASE WHEN c.on_critical_dev THEN coalesce(cl.claimed_ns, 0) ELSE 0 END AS claimed_ns,
       row_number() OVER (PARTITION BY c.pass ORDER BY CASE WHEN c.on_critical_dev THEN coalesce(a.alloc_ns, 0)
                                                        ELSE 0 END DESC, c.local_ns DESC, c.ts)
         AS pass_rank
FROM _cand c
LEFT JOIN _alloc a ON a.cand_id = c.cand_id
LEFT JOIN (SELECT cand_id, sum(b - a) AS claimed_ns FROM _claim GROUP BY cand_id) cl ON cl.cand_id = c.cand_id
WHERE coalesce(a.alloc_ns, 0) >= c.min_share * c.local_ns;

-- The findings (columns exactly as ingest/schema.py FINDINGS).
--   severity: info when the finding has no time on the critical path (off it, not
--   placeable, or on a device that finished early), or when all findings of its pass
--   together have less than report_run_fraction of the run on the critical path (noted,
--   not worth fixing); else error when it alone costs error_run_fraction of the run,
--   warning when its critical-path time is at least warning_min_impact_ns (even when that
--   time is already counted under a finding of higher precedence: both causes are real,
--   fixing either helps, and the impact is counted once), else info.
CREATE OR REPLACE TEMP TABLE _findings AS
WITH k AS (
    SELECT *, sum(claimed_ns) OVER (PARTITION BY pass) AS pass_claimed_ns FROM _kept
),
w AS (
    SELECT k.*, c.dur, c.track_id, c.metric, c.value, c.threshold, c.message
    FROM k JOIN _candidates c ON c.pass = k.pass AND c.cand_row = k.cand_row
    WHERE k.pass_rank <= ${max_findings_per_pass}
)
SELECT pass,
       CASE WHEN claimed_ns <= 0 OR pass_claimed_ns < ${report_run_fraction} * (SELECT run_ns FROM _run) THEN 'info'
            WHEN impact_ns >= ${error_run_fraction} * (SELECT run_ns FROM _run) THEN 'error'
            WHEN claimed_ns >= ${warning_min_impact_ns} THEN 'warning'
            ELSE 'info' END AS severity,
       ts, dur, track_id, slice_id, metric, value, threshold, impact_ns AS exclusive_ns, local_ns,
       message || CASE
           WHEN claim_mode = 'none' THEN
               '; cannot be placed on the critical path from this trace (local estimate '
               || _fmt_ns(local_ns) || ')'
           WHEN impact_ns = 0 AND claimed_ns > 0 THEN
               '; its critical-path time is already counted by a finding of higher precedence (local estimate '
               || _fmt_ns(local_ns) || ')'
           WHEN NOT on_critical_dev THEN
               printf('; not on the critical path: device %s finished before the run''s last device %s '
                      || '(local estimate %s)', dev, (SELECT dev FROM _critical_dev), _fmt_ns(local_ns))
           WHEN impact_ns = 0 AND claim_mode IN ('idle', 'idle_head') THEN
               '; not on the critical path: the execution units were busy meanwhile (local estimate '
               || _fmt_ns(local_ns) || ')'
           WHEN impact_ns = 0 THEN
               '; not on the critical path: what followed waited for the host anyway (local estimate '
               || _fmt_ns(local_ns) || ')'
           WHEN impact_ns < local_ns THEN
               '; ' || _fmt_ns(impact_ns) || ' of that ' || _fmt_ns(local_ns) || ' is on the critical path (the rest'
               || ' overlaps device work or time a finding of higher precedence already counts)'
           ELSE '; costs ' || _fmt_ns(impact_ns) || ' on the critical path' END AS message
FROM w;
