-- The fleet's shared throttle state (batchq.quota), written only through
-- save_quota, which checks what it stores.

-- The longest pause a quota key may be stopped for: the throttle's limit on
-- Config.MaxRetryAfter (a day), and five minutes for the clocks between a
-- worker and the database.
CREATE OR REPLACE FUNCTION batchq.max_quota_pause() RETURNS interval
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN interval '24 hours 5 minutes';

-- quota_time reads one of the state's times: RFC 3339 text, as Go writes
-- time.Time; NULL for the zero time, which means unset.
CREATE OR REPLACE FUNCTION batchq.quota_time(v jsonb) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    t timestamptz;
BEGIN
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(v) <> 'string'
       OR (v #>> '{}') !~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BQ300', MESSAGE = format('must be an RFC 3339 time (got %s)', v::text);
    END IF;
    -- Nanoseconds are more than timestamptz keeps: the state's times are whole microseconds.
    t := regexp_replace(v #>> '{}', '(\.\d{6})\d+', '\1')::timestamptz;
    RETURN nullif(t, '0001-01-01 00:00:00+00');
END
$$;

-- quota_number reads one of the state's integers.
CREATE OR REPLACE FUNCTION batchq.quota_number(v jsonb, p_min numeric, p_max numeric) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(v) <> 'number' OR v::text::numeric <> trunc(v::text::numeric)
       OR v::text::numeric NOT BETWEEN p_min AND p_max THEN
        RAISE EXCEPTION USING ERRCODE = 'BQ300', MESSAGE = format('must be a whole number in %s..%s (got %s)', p_min, p_max, v::text);
    END IF;
    RETURN v::text::numeric::bigint;
END
$$;

-- quota_flag reads one of the state's booleans.
CREATE OR REPLACE FUNCTION batchq.quota_flag(v jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
        RETURN false;
    END IF;
    IF jsonb_typeof(v) <> 'boolean' THEN
        RAISE EXCEPTION USING ERRCODE = 'BQ300', MESSAGE = format('must be true or false (got %s)', v::text);
    END IF;
    RETURN v::text::boolean;
END
$$;

-- quota_fields refuses an object with a key it does not list.
CREATE OR REPLACE FUNCTION batchq.quota_fields(v jsonb, p_keys text[]) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    k text;
BEGIN
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
        RETURN;
    END IF;
    IF jsonb_typeof(v) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'BQ300', MESSAGE = format('must be a JSON object (got %s)', jsonb_typeof(v));
    END IF;
    SELECT f INTO k FROM jsonb_object_keys(v) AS f WHERE f <> ALL (p_keys) ORDER BY f LIMIT 1;
    IF k IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BQ300', MESSAGE = format('%s is not a field of it', batchq.quote(k));
    END IF;
END
$$;

-- save_quota saves a quota key's throttle state: the key's first save when
-- p_version is NULL (false when another process saved it first), else only
-- if nobody saved it since it was read at p_version (false when someone
-- did: decide again on what they saved). The state must be what package
-- throttle writes (throttle.State as JSON), and may not stop the key for
-- longer than max_quota_pause; the columns beside it, which operators read,
-- are taken from it.
CREATE OR REPLACE FUNCTION batchq.save_quota(p_key text, p_version bigint, p_state jsonb) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c_unit constant text[] := ARRAY['observed', 'limit', 'has_limit', 'remaining', 'sent_at', 'received_at',
                                    'has_reset', 'reset_from', 'reset_at', 'interactive', 'interactive_since'];
    c_max  constant numeric := 9223372036854775807;
    v_error  text[] := batchq.name_error('quota key', p_key);
    v_field  text;
    v_name   text;
    v_unit   jsonb;
    v_cols   bigint[] := '{NULL,NULL,NULL,NULL}';
    v_resets timestamptz[] := '{NULL,NULL}';
    v_seen   timestamptz;
    v_paused timestamptz;
    v_pause  interval;
    v_n      integer;
    v_was    timestamptz;
    v_ver    bigint;
BEGIN
    IF v_error IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = v_error[1], COLUMN = 'key',
            MESSAGE = format('batchq: save quota: key: %s', v_error[3]),
            DETAIL = jsonb_build_object('index', 0, 'field', 'key', 'rule', v_error[3])::text;
    END IF;
    BEGIN
        v_field := 'state';
        IF octet_length(p_state::text) > 65536 THEN
            RAISE EXCEPTION USING ERRCODE = 'BQ300', MESSAGE = 'must be at most 65536 bytes as jsonb text';
        END IF;
        -- A JSON null is no state, as SQL's NULL is none: quota_fields
        -- lets it through for the fields that may be null, not for the
        -- whole state.
        IF p_state IS NULL OR jsonb_typeof(p_state) = 'null' THEN
            RAISE EXCEPTION USING ERRCODE = 'BQ300', MESSAGE = 'must be a JSON object (got null)';
        END IF;
        PERFORM batchq.quota_fields(p_state, ARRAY['requests', 'tokens', 'admitted', 'paused_until', 'backoff',
                                                   'backoff_at', 'probe_at', 'probe_sent']);
        FOR i IN 1 .. 2 LOOP
            v_field := (ARRAY['requests', 'tokens'])[i];
            v_unit := p_state -> v_field;
            PERFORM batchq.quota_fields(v_unit, c_unit);
            v_field := v_field || '.limit';
            v_cols[2 * i - 1] := batchq.quota_number(v_unit -> 'limit', -c_max, c_max);
            v_field := (ARRAY['requests', 'tokens'])[i] || '.remaining';
            v_cols[2 * i] := batchq.quota_number(v_unit -> 'remaining', -c_max, c_max);
            v_field := (ARRAY['requests', 'tokens'])[i] || '.interactive';
            PERFORM batchq.quota_number(v_unit -> 'interactive', -c_max, c_max);
            -- Every field is checked, whatever observed says: the throttle
            -- reads them all.
            FOREACH v_name IN ARRAY ARRAY['observed', 'has_limit', 'has_reset'] LOOP
                v_field := (ARRAY['requests', 'tokens'])[i] || '.' || v_name;
                PERFORM batchq.quota_flag(v_unit -> v_name);
            END LOOP;
            FOREACH v_name IN ARRAY ARRAY['sent_at', 'received_at', 'reset_from', 'reset_at', 'interactive_since'] LOOP
                v_field := (ARRAY['requests', 'tokens'])[i] || '.' || v_name;
                PERFORM batchq.quota_time(v_unit -> v_name);
            END LOOP;
            v_field := (ARRAY['requests', 'tokens'])[i];
            IF batchq.quota_flag(v_unit -> 'observed') THEN
                IF NOT batchq.quota_flag(v_unit -> 'has_limit') THEN
                    v_cols[2 * i - 1] := NULL;
                END IF;
                IF batchq.quota_flag(v_unit -> 'has_reset') THEN
                    v_resets[i] := batchq.quota_time(v_unit -> 'reset_at');
                END IF;
                v_seen := greatest(v_seen, batchq.quota_time(v_unit -> 'received_at'));
            ELSE
                v_cols[2 * i - 1] := NULL;
                v_cols[2 * i] := NULL;
            END IF;
        END LOOP;
        v_field := 'admitted';
        IF p_state ? 'admitted' AND jsonb_typeof(p_state -> 'admitted') NOT IN ('array', 'null') THEN
            RAISE EXCEPTION USING ERRCODE = 'BQ300', MESSAGE = 'must be an array';
        END IF;
        SELECT count(*) INTO v_n FROM jsonb_array_elements(coalesce(nullif(p_state -> 'admitted', 'null'), '[]')) a;
        IF v_n > 64 THEN
            RAISE EXCEPTION USING ERRCODE = 'BQ300', MESSAGE = format('must hold at most 64 entries (got %s)', v_n);
        END IF;
        PERFORM batchq.quota_fields(a, ARRAY['at', 'calls', 'tokens']), batchq.quota_time(a -> 'at'),
                batchq.quota_number(a -> 'calls', -c_max, c_max), batchq.quota_number(a -> 'tokens', -c_max, c_max)
        FROM jsonb_array_elements(coalesce(nullif(p_state -> 'admitted', 'null'), '[]')) a;
        v_field := 'backoff';
        PERFORM batchq.quota_number(p_state -> 'backoff', 0, extract(epoch FROM batchq.max_quota_pause()) * 1e9);
        v_field := 'backoff_at';
        PERFORM batchq.quota_time(p_state -> 'backoff_at');
        v_field := 'probe_at';
        PERFORM batchq.quota_time(p_state -> 'probe_at');
        v_field := 'probe_sent';
        PERFORM batchq.quota_time(p_state -> 'probe_sent');
        v_field := 'paused_until';
        v_paused := batchq.quota_time(p_state -> 'paused_until');
    EXCEPTION WHEN SQLSTATE 'BQ300' OR invalid_datetime_format OR datetime_field_overflow THEN
        v_field := CASE WHEN v_field = 'state' THEN 'state' ELSE 'state.' || v_field END;
        RAISE EXCEPTION USING ERRCODE = 'BQ300', COLUMN = 'state',
            MESSAGE = format('batchq: save quota %s: %s: %s', batchq.quote(p_key), v_field, SQLERRM),
            DETAIL = jsonb_build_object('index', 0, 'field', v_field, 'rule', SQLERRM)::text;
    END;
    v_pause := v_paused - clock_timestamp();
    IF v_pause > batchq.max_quota_pause() THEN
        RAISE EXCEPTION USING ERRCODE = 'BQ301', COLUMN = 'state',
            MESSAGE = format('batchq: save quota %s: state.paused_until: must be at most %s from now (got %s, %s from now)',
                             batchq.quote(p_key), batchq.max_quota_pause(), batchq.rfc3339(v_paused), v_pause),
            DETAIL = jsonb_build_object('index', 0, 'field', 'state.paused_until', 'rule',
                                       format('must be at most %s from now (got %s, %s from now)', batchq.max_quota_pause(),
                                              batchq.rfc3339(v_paused), v_pause))::text;
    END IF;

    IF p_version IS NULL THEN
        INSERT INTO batchq.quota (key, state, requests_limit, requests_remaining, requests_reset_at, tokens_limit,
                                  tokens_remaining, tokens_reset_at, paused_until, observed_at)
        VALUES (p_key, p_state, v_cols[1], v_cols[2], v_resets[1], v_cols[3], v_cols[4], v_resets[2], v_paused, v_seen)
        ON CONFLICT (key) DO NOTHING;
    ELSE
        -- The pause as saved at p_version: a save that succeeds replaces
        -- exactly that row, as any save in between bumps the version.
        SELECT q.paused_until, q.version INTO v_was, v_ver FROM batchq.quota q WHERE q.key = p_key;
        UPDATE batchq.quota q
        SET state = p_state, version = q.version + 1,
            requests_limit = v_cols[1], requests_remaining = v_cols[2], requests_reset_at = v_resets[1],
            tokens_limit = v_cols[3], tokens_remaining = v_cols[4], tokens_reset_at = v_resets[2],
            paused_until = v_paused, observed_at = v_seen, updated_at = now()
        WHERE q.key = p_key AND q.version = p_version;
    END IF;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Only a 429 moves the pause later: record it, and forget those of more
    -- than a day ago.
    IF v_paused > coalesce(CASE WHEN v_ver = p_version THEN v_was END, '-infinity') THEN
        INSERT INTO batchq.quota_pauses (key, paused_until) VALUES (p_key, v_paused);
        DELETE FROM batchq.quota_pauses p WHERE p.key = p_key AND p.at < now() - interval '1 day';
    END IF;
    RETURN true;
END
$$;
