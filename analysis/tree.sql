-- Span-tree table macros over the `spans` view (DESIGN.md section 5), created by tailcut.analysis.Dataset.
--
-- A trace's spans are laid out in pre-order, so a span's descendants are exactly the spans with
-- span_index in (its span_index, its subtree_end]: one range predicate, no recursion. That holds when the
-- trace was written in one piece. A trace that also has a late batch (tree columns computed over the late
-- spans alone), or a file written before the tree columns existed, does not have a consistent layout; for
-- such a trace the macros walk parent_span_id with a recursive CTE instead (the *_recursive twins, which
-- are also what the nested-set path is tested against). The walk follows parent_span_id wherever the
-- parent is in the trace (a late span is flagged is_orphan in its own batch, yet its parent exists); a
-- span whose parent never arrived is the root of its own subtree, and a corrupt parent cycle stops after
-- 1000 steps.

-- Whether a trace's nested-set columns can be trusted: one pre-order index per span, 0..n-1.
CREATE OR REPLACE MACRO nested_layout_ok(n, indexed, distinct_indexes, max_index, bounded) AS
    n > 0 AND indexed = n AND distinct_indexes = n AND max_index = n - 1 AND bounded = n;

CREATE OR REPLACE MACRO tree_is_nested(tid) AS (
    SELECT nested_layout_ok(count(*), count(span_index), count(DISTINCT span_index), max(span_index),
                            count(subtree_end))
    FROM spans WHERE trace_id = tid
);

CREATE OR REPLACE MACRO descendants_recursive(tid, sid) AS TABLE
WITH RECURSIVE
    trace AS MATERIALIZED (SELECT * FROM spans WHERE trace_id = tid),
    walk(span_id, distance) AS (
        SELECT span_id, 0 FROM trace WHERE span_id = sid
        UNION ALL
        SELECT c.span_id, w.distance + 1
        FROM trace c JOIN walk w ON c.parent_span_id = w.span_id
        WHERE w.distance < 1000
    ),
    nearest AS (SELECT span_id, min(distance) AS distance FROM walk WHERE span_id <> sid GROUP BY span_id)
SELECT t.*, n.distance FROM trace t JOIN nearest n USING (span_id)
ORDER BY n.distance, t.start_time, t.span_id;

CREATE OR REPLACE MACRO ancestors_recursive(tid, sid) AS TABLE
WITH RECURSIVE
    trace AS MATERIALIZED (SELECT * FROM spans WHERE trace_id = tid),
    walk(span_id, parent_span_id, distance) AS (
        SELECT span_id, parent_span_id, 0 FROM trace WHERE span_id = sid
        UNION ALL
        SELECT p.span_id, p.parent_span_id, w.distance + 1
        FROM trace p JOIN walk w ON p.span_id = w.parent_span_id
        WHERE w.distance < 1000
    ),
    nearest AS (SELECT span_id, min(distance) AS distance FROM walk WHERE span_id <> sid GROUP BY span_id)
SELECT t.*, n.distance FROM trace t JOIN nearest n USING (span_id)
ORDER BY n.distance DESC;

-- The public macros read the trace once, then take the nested-set range or, when the layout cannot be
-- trusted, walk parent_span_id (the walk's first step is empty for a well-laid-out trace).
CREATE OR REPLACE MACRO descendants(tid, sid) AS TABLE
WITH RECURSIVE
    trace AS MATERIALIZED (SELECT * FROM spans WHERE trace_id = tid),
    layout AS (
        SELECT nested_layout_ok(count(*), count(span_index), count(DISTINCT span_index), max(span_index),
                                count(subtree_end)) AS nested
        FROM trace
    ),
    anchor AS (SELECT span_index, subtree_end, depth FROM trace WHERE span_id = sid LIMIT 1),
    walk(span_id, distance) AS (
        SELECT span_id, 0 FROM trace, layout WHERE span_id = sid AND NOT layout.nested
        UNION ALL
        SELECT c.span_id, w.distance + 1
        FROM trace c JOIN walk w ON c.parent_span_id = w.span_id
        WHERE w.distance < 1000
    ),
    nearest AS (SELECT span_id, min(distance) AS distance FROM walk WHERE span_id <> sid GROUP BY span_id)
SELECT t.*, t.depth - a.depth AS distance
FROM trace t, anchor a, layout
WHERE layout.nested AND t.span_index > a.span_index AND t.span_index <= a.subtree_end
UNION ALL BY NAME
SELECT t.*, n.distance FROM trace t JOIN nearest n USING (span_id)
ORDER BY distance, start_time, span_id;

CREATE OR REPLACE MACRO ancestors(tid, sid) AS TABLE
WITH RECURSIVE
    trace AS MATERIALIZED (SELECT * FROM spans WHERE trace_id = tid),
    layout AS (
        SELECT nested_layout_ok(count(*), count(span_index), count(DISTINCT span_index), max(span_index),
                                count(subtree_end)) AS nested
        FROM trace
    ),
    anchor AS (SELECT span_index, depth FROM trace WHERE span_id = sid LIMIT 1),
    walk(span_id, parent_span_id, distance) AS (
        SELECT span_id, parent_span_id, 0 FROM trace, layout WHERE span_id = sid AND NOT layout.nested
        UNION ALL
        SELECT p.span_id, p.parent_span_id, w.distance + 1
        FROM trace p JOIN walk w ON p.span_id = w.parent_span_id
        WHERE w.distance < 1000
    ),
    nearest AS (SELECT span_id, min(distance) AS distance FROM walk WHERE span_id <> sid GROUP BY span_id)
SELECT t.*, a.depth - t.depth AS distance
FROM trace t, anchor a, layout
WHERE layout.nested AND t.span_index < a.span_index AND a.span_index <= t.subtree_end
UNION ALL BY NAME
SELECT t.*, n.distance FROM trace t JOIN nearest n USING (span_id)
ORDER BY distance DESC;

-- One row: the path from the trace's root (or the orphan subtree's root) down to the span.
CREATE OR REPLACE MACRO span_path(tid, sid) AS TABLE
WITH chain AS (
    SELECT span_id, name, kind, distance FROM ancestors(tid, sid)
    UNION ALL
    SELECT span_id, name, kind, 0 AS distance FROM spans WHERE trace_id = tid AND span_id = sid
)
SELECT
    tid AS trace_id,
    sid AS span_id,
    list(span_id ORDER BY distance DESC) AS span_ids,
    list(name ORDER BY distance DESC) AS names,
    list(kind ORDER BY distance DESC) AS kinds,
    string_agg(name, ' > ' ORDER BY distance DESC) AS path,
    (count(*) - 1)::INTEGER AS depth
FROM chain
HAVING count(*) > 0;
