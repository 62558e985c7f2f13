-- The rules every argument of batchq's API keeps, stated once for SQL. Package
-- queue checks the same rules in Go, with the same limits and the same error
-- text (TestSQLRulesMatchGo compares them), so a job is refused alike from Go,
-- the CLI and any SQL client.
--
-- A refusal raises an error whose SQLSTATE names the rule's class
-- (docs/sql-api.md lists them), whose COLUMN names the field, and whose
-- DETAIL is a JSON object {"index", "field", "rule"}: index is the job's
-- 1-based place in a multi-job call, 0 for a single job.

-- The limits. Within them no key, ledger or round of the fair order can
-- overflow (docs/design/fair-order.md, "Ranges").
CREATE OR REPLACE FUNCTION batchq.max_cost() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN 1000000000;
CREATE OR REPLACE FUNCTION batchq.max_name_bytes() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN 256;
CREATE OR REPLACE FUNCTION batchq.max_attempts_limit() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN 1000;
-- Payloads and results count as PostgreSQL prints them (jsonb as text).
CREATE OR REPLACE FUNCTION batchq.max_payload_bytes() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN 1048576;
CREATE OR REPLACE FUNCTION batchq.max_result_bytes() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN 1048576;
-- New keys stay at or below 2^62: enqueue refuses a tenant whose ledger
-- (cum) or last round would pass it (ledger_full), until its queue drains.
-- A re-key or a fold moves queued keys past it by at most a backlog's cost
-- over a share (2^31 jobs of 10^9 over a share of 1: 2.1 × 10^18), so no
-- ledger, round or sum of them reaches 2^63.
CREATE OR REPLACE FUNCTION batchq.key_ceiling() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN 4611686018427387904;

-- zero_time is Go's zero time.Time, which the array API (batchq.enqueue)
-- takes for "no deadline", as the Go client sends it. Any other time is a
-- deadline, checked by its rules.
CREATE OR REPLACE FUNCTION batchq.zero_time() RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN '0001-01-01 00:00:00+00'::timestamptz;

-- quote writes s as a JSON string, as package queue quotes names in errors
-- (encoding/json without HTML escaping, which also escapes U+2028 and
-- U+2029), with the C1 controls (U+0080-U+009F) and the bidirectional
-- controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) written
-- as \uNNNN too: raw, one could break an error's line, or show the rest of
-- it in another order than it holds. Most names hold none: one match.
CREATE OR REPLACE FUNCTION batchq.quote(s text) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (SELECT CASE
        WHEN q.j !~ '[\u0080-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]' THEN q.j
        ELSE (SELECT string_agg(CASE WHEN x.c ~ '[\u0080-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]'
                                     THEN '\u' || lpad(to_hex(ascii(x.c)), 4, '0')
                                     ELSE x.c END, '' ORDER BY x.n)
              FROM regexp_split_to_table(q.j, '') WITH ORDINALITY AS x (c, n))
        END
        FROM (SELECT coalesce(to_json(s)::text, 'null') AS j) q);

-- json_shown writes a JSON value given in a call's arguments for an error
-- message, as the CLI shows a line's field: up to 40 characters, then
-- "...". A number longer than that (1e400 prints its 401 digits) is written
-- with an exponent instead, to 16 significant digits: 1e+400.
CREATE OR REPLACE FUNCTION batchq.json_shown(value jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN length(value::text) <= 40 THEN value::text
        WHEN jsonb_typeof(value) = 'number'
            THEN regexp_replace(btrim(to_char(value::text::numeric, '9.999999999999999EEEE')),
                                '\.?0*e', 'e')
        ELSE left(value::text, 40) || '...'
    END;

-- rfc3339 writes t as Go's time.RFC3339Nano does in UTC. Go counts years
-- as astronomers do (1 BC is year 0, 2 BC year -1), where to_char's YYYY
-- is the BC year itself.
CREATE OR REPLACE FUNCTION batchq.rfc3339(t timestamptz) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE
        WHEN t IS NULL THEN 'null'
        WHEN NOT isfinite(t) THEN t::text
        ELSE CASE WHEN t AT TIME ZONE 'UTC' >= '0001-01-01 00:00:00' THEN to_char(t AT TIME ZONE 'UTC', 'YYYY')
                  WHEN to_char(t AT TIME ZONE 'UTC', 'YYYY')::integer = 1 THEN '0000'
                  ELSE '-' || lpad((to_char(t AT TIME ZONE 'UTC', 'YYYY')::integer - 1)::text, 4, '0') END
             || to_char(t AT TIME ZONE 'UTC', '-MM-DD"T"HH24:MI:SS')
             || coalesce('.' || nullif(rtrim(to_char(extract(microseconds FROM t AT TIME ZONE 'UTC')::bigint % 1000000,
                                                     'FM000000'), '0'), ''), '')
             || 'Z'
    END;

-- go_duration writes d as Go's time.Duration String does (1h30m0s, 1.5s,
-- 250ms, -1s), months counted as 30 days.
CREATE OR REPLACE FUNCTION batchq.go_duration(d interval) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (SELECT CASE
        WHEN u.us = 0 THEN '0s'
        WHEN abs(u.us) < 1000 THEN u.sign || abs(u.us) || 'µs'
        WHEN abs(u.us) < 1000000 THEN u.sign || trim_scale(abs(u.us) / 1000.0) || 'ms'
        ELSE u.sign
             || CASE WHEN abs(u.us) >= 3600000000 THEN div(abs(u.us), 3600000000)::text || 'h' ELSE '' END
             || CASE WHEN abs(u.us) >= 60000000 THEN (div(abs(u.us), 60000000) % 60)::text || 'm' ELSE '' END
             || trim_scale((abs(u.us) % 60000000) / 1000000.0) || 's'
        END
        FROM (SELECT (extract(epoch FROM d) * 1000000)::numeric(40, 0) AS us,
                     CASE WHEN d < interval '0' THEN '-' ELSE '' END AS sign) u);

-- name_error is the rule for a tenant's, kind's, unique key's or quota key's
-- name: 1 to 256 bytes without control characters. NULL when s keeps it,
-- else {sqlstate, field, rule}.
CREATE OR REPLACE FUNCTION batchq.name_error(field text, s text) RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE
        WHEN s IS NULL OR s = '' THEN ARRAY['BQ100', field, 'must not be empty']
        WHEN octet_length(s) > batchq.max_name_bytes() THEN
            ARRAY['BQ100', field, format('must be at most %s bytes (got %s)', batchq.max_name_bytes(), octet_length(s))]
        WHEN s ~ '[\x01-\x1f\x7f]' THEN
            ARRAY['BQ100', field, format('must not contain control characters (got %s)', batchq.quote(s))]
    END;

-- queue_name_error is the rule for a queue's name in a job.
CREATE OR REPLACE FUNCTION batchq.queue_name_error(s text) RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE WHEN s IS NULL OR s !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$' THEN
        ARRAY['BQ100', 'queue', format('must name a queue: 1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit (got %s)',
                                  batchq.quote(s))]
    END;

-- mixed_interval_error is the rule a ttl or delay of parts with different
-- signs breaks ('-1 mon 31 days', '1 day -86399 seconds'), else NULL. Such an
-- interval compares as positive (a month as 30 days, a day as 24 hours) but
-- may land before the time it is added to: on most dates '-10 mon 300 days'
-- does, and '1 day -86399 seconds' does across a change to summer time.
-- One expression, no sub-select, and STABLE as its text is (an interval's
-- text follows IntervalStyle), so that PostgreSQL inlines it into the rules
-- of each job.
CREATE OR REPLACE FUNCTION batchq.mixed_interval_error(field text, d interval) RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE
        WHEN extract(year FROM d) * 12 + extract(month FROM d) < 0 OR extract(day FROM d) < 0
             OR extract(hour FROM d) * 3600 + extract(minute FROM d) * 60 + extract(second FROM d) < 0 THEN
            ARRAY['BQ103', field, format('must not mix positive and negative parts, which would add up differently on different dates (got %s)',
                                         d::text)]
    END;

-- job_error is NULL for a job that keeps every rule, else {sqlstate, field,
-- rule} for the first rule it breaks, in the order queue.NewJob's are
-- checked. kind is 'default' for none; deadline NULL and ttl NULL or 0 for
-- none (the queue's TTL); max_attempts NULL or 0 for the queue's; payload NULL for {};
-- unique_key NULL or '' for none; now is the time the deadline must be
-- after.
CREATE OR REPLACE FUNCTION batchq.job_error(tenant text, kind text, cost bigint, deadline timestamptz,
                                            ttl interval, max_attempts integer, payload jsonb, unique_key text,
                                            now timestamptz)
    RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN coalesce(
        batchq.name_error('tenant', tenant),
        batchq.name_error('kind', kind),
        CASE WHEN cost IS NULL OR cost < 1 OR cost > batchq.max_cost() THEN
            ARRAY['BQ101', 'cost', format('must be in 1..%s (got %s)', batchq.max_cost(), coalesce(cost::text, 'null'))]
        END,
        CASE
            WHEN ttl < interval '0' THEN
                ARRAY['BQ103', 'ttl', format('must be > 0 (got %s)', batchq.go_duration(ttl))]
            WHEN ttl >= interval '0' AND batchq.mixed_interval_error('ttl', ttl) IS NOT NULL THEN
                batchq.mixed_interval_error('ttl', ttl)
            WHEN ttl > interval '0' AND deadline IS NOT NULL THEN
                ARRAY['BQ103', 'deadline', 'give a deadline or a ttl, not both']
            WHEN ttl > interval '0' AND extract(epoch FROM ttl) >= extract(epoch FROM '10000-01-01 00:00:00+00'::timestamptz - now) THEN
                ARRAY['BQ103', 'deadline', 'must be before year 10000']
            WHEN deadline <= now THEN
                ARRAY['BQ103', 'deadline', format('must be in the future (got %s, now %s)', batchq.rfc3339(deadline), batchq.rfc3339(now))]
            WHEN deadline >= '10000-01-01 00:00:00+00' THEN
                ARRAY['BQ103', 'deadline', 'must be before year 10000']
        END,
        CASE WHEN max_attempts < 0 OR max_attempts > batchq.max_attempts_limit() THEN
            ARRAY['BQ101', 'max_attempts', format('must be in 1..%s, or 0 for the queue''s setting (got %s)',
                                                  batchq.max_attempts_limit(), max_attempts)]
        END,
        CASE WHEN octet_length(payload::text) > batchq.max_payload_bytes() THEN
            ARRAY['BQ102', 'payload', format('must be at most %s bytes as jsonb text (got %s)',
                                             batchq.max_payload_bytes(), octet_length(payload::text))]
        END,
        CASE WHEN unique_key <> '' THEN batchq.name_error('unique_key', unique_key) END);

-- run_at_error is the rule for when a job may first run: NULL when run_at,
-- delay and the deadline keep it, else {sqlstate, field, rule}. run_at NULL
-- (or before year 2) and delay NULL or 0 mean "now"; a run_at in the past
-- means now too. The deadline is the job's (NULL: run_at plus ttl, or plus
-- the queue's TTL, which is after it); it must come after run_at, or the
-- job could never run. Checked after job_error, in the order queue.NewJob's
-- are.
CREATE OR REPLACE FUNCTION batchq.run_at_error(run_at timestamptz, delay interval, deadline timestamptz,
                                               ttl interval)
    RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE
        WHEN delay < interval '0' THEN
            ARRAY['BQ103', 'delay', format('must be >= 0 (got %s)', batchq.go_duration(delay))]
        WHEN delay >= interval '0' AND batchq.mixed_interval_error('delay', delay) IS NOT NULL THEN
            batchq.mixed_interval_error('delay', delay)
        WHEN delay > interval '0' AND run_at >= '0002-01-01' THEN
            ARRAY['BQ103', 'run_at', 'give a run_at or a delay, not both']
        WHEN run_at >= '10000-01-01 00:00:00+00' THEN
            ARRAY['BQ103', 'run_at', 'must be before year 10000']
        WHEN delay > interval '0'
             AND extract(epoch FROM delay) >= extract(epoch FROM '10000-01-01 00:00:00+00'::timestamptz - statement_timestamp()) THEN
            ARRAY['BQ103', 'delay', 'must end before year 10000']
        WHEN deadline IS NOT NULL AND deadline <= coalesce(CASE WHEN run_at >= '0002-01-01' THEN run_at END,
                                                           statement_timestamp() + delay) THEN
            ARRAY['BQ103', 'deadline', format('must be after run_at (got %s, run_at %s)', batchq.rfc3339(deadline),
                  batchq.rfc3339(coalesce(CASE WHEN run_at >= '0002-01-01' THEN run_at END,
                                          statement_timestamp() + delay)))]
        WHEN ttl > interval '0' AND extract(epoch FROM ttl) >= extract(epoch FROM '10000-01-01 00:00:00+00'::timestamptz
                 - coalesce(CASE WHEN run_at >= '0002-01-01' THEN run_at END, statement_timestamp() + delay,
                            statement_timestamp())) THEN
            ARRAY['BQ103', 'deadline', 'must be before year 10000']
    END;

-- raise_invalid_job raises what job_error found, for the job at p_index
-- (0 for a call of one job).
CREATE OR REPLACE FUNCTION batchq.raise_invalid_job(p_index integer, p_error text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = p_error[1],
        -- A field is one of a job's names, or a JSON key enqueue_jobs does
        -- not know, which is quoted: raw, it could break the line.
        MESSAGE = 'batchq: invalid job' || CASE WHEN p_index > 0 THEN ' ' || p_index ELSE '' END
                  || ': ' || CASE WHEN p_error[2] ~ '^[a-z_]{1,64}$' THEN p_error[2] ELSE batchq.quote(p_error[2]) END
                  || ': ' || p_error[3],
        COLUMN = CASE WHEN p_error[2] ~ '^[a-z_]{1,64}$' THEN p_error[2] ELSE batchq.quote(p_error[2]) END,
        DETAIL = jsonb_build_object('index', p_index, 'field', p_error[2], 'rule', p_error[3])::text;
END
$$;

-- raise_invalid_argument raises BQ101 for an argument of a worker's or an
-- operator's call that breaks its rule.
CREATE OR REPLACE FUNCTION batchq.raise_invalid_argument(p_function text, p_field text, p_rule text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'BQ101',
        MESSAGE = format('batchq: %s: %s: %s', p_function, p_field, p_rule),
        COLUMN = p_field,
        DETAIL = jsonb_build_object('index', 0, 'field', p_field, 'rule', p_rule)::text;
END
$$;

-- check_queue_argument refuses a queue argument that cannot name a queue,
-- for the worker's and the operator's calls (p_function names the call).
CREATE OR REPLACE FUNCTION batchq.check_queue_argument(p_function text, p_queue text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_error text[] := batchq.queue_name_error(p_queue);
BEGIN
    IF v_error IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = v_error[1],
            MESSAGE = format('batchq: %s: %s: %s', p_function, v_error[2], v_error[3]),
            COLUMN = v_error[2],
            DETAIL = jsonb_build_object('index', 0, 'field', v_error[2], 'rule', v_error[3])::text;
    END IF;
END
$$;

-- raise_unknown_queue raises BQ201 unless the queue exists. STABLE, so that
-- called from a report it sees the queues as the report's query does.
CREATE OR REPLACE FUNCTION batchq.raise_unknown_queue(p_queue text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM batchq.queues q WHERE q.name = p_queue) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BQ201',
            MESSAGE = format('batchq: unknown queue: %s', batchq.quote(p_queue)),
            DETAIL = jsonb_build_object('queue', p_queue)::text;
    END IF;
END
$$;

-- check_queue refuses a queue argument that cannot name a queue (BQ100) or
-- names none (BQ201), for the reports, whose queue is a filter: asked about
-- a queue with its name wrong, they would answer that it holds nothing.
CREATE OR REPLACE FUNCTION batchq.check_queue(p_function text, p_queue text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    PERFORM batchq.check_queue_argument(p_function, p_queue);
    PERFORM batchq.raise_unknown_queue(p_queue);
END
$$;
