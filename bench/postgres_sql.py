"""`postgres-simple`: the PostgreSQL peer as it was before issue #16, kept to show what the faithful one changed.

A PostgreSQL control plane after Inkless's first commit function (its
`commit_file_v1` of 2025), written for this harness: one PL/pgSQL call per WAL
file, its batches passed as JSONB, that inserts the file, copies the
partitions' `logs` rows into a temporary table locking them in (topic,
partition) order, checks each batch's producer against `producer_state` (the
last five batches of each producer), assigns its offset from the high
watermark and inserts one `batches` row per batch, then writes the high
watermarks back. FindBatches is one query that counts each partition's batches
and returns the last offset: no object keys, no request-wide byte budget. None
of Inkless's own columns checks, per-partition columns, covering index, table
settings or coalescing (see bench/postgres_inkless_sql.py for those).
"""

from __future__ import annotations

SCHEMA = """
CREATE TABLE logs (
    topic_id UUID NOT NULL,
    partition INT NOT NULL,
    topic_name TEXT NOT NULL,
    log_start_offset BIGINT NOT NULL,
    high_watermark BIGINT NOT NULL,
    PRIMARY KEY (topic_id, partition)
);
CREATE TABLE files (
    file_id BIGSERIAL PRIMARY KEY,
    object_key TEXT UNIQUE NOT NULL,
    format SMALLINT NOT NULL,
    reason TEXT NOT NULL,
    state TEXT NOT NULL,
    uploader_broker_id INT NOT NULL,
    committed_at TIMESTAMPTZ NOT NULL,
    marked_for_deletion_at TIMESTAMPTZ,
    size BIGINT NOT NULL
);
CREATE TABLE batches (
    batch_id BIGSERIAL PRIMARY KEY,
    magic SMALLINT NOT NULL,
    topic_id UUID NOT NULL,
    partition INT NOT NULL,
    base_offset BIGINT NOT NULL,
    last_offset BIGINT NOT NULL,
    file_id BIGINT NOT NULL REFERENCES files (file_id) ON DELETE RESTRICT,
    byte_offset BIGINT NOT NULL,
    byte_size BIGINT NOT NULL,
    timestamp_type SMALLINT NOT NULL,
    log_append_timestamp BIGINT NOT NULL,
    batch_max_timestamp BIGINT NOT NULL,
    CONSTRAINT fk_batches_logs FOREIGN KEY (topic_id, partition) REFERENCES logs (topic_id, partition)
        DEFERRABLE INITIALLY DEFERRED
);
CREATE INDEX batches_by_last_offset_idx ON batches (topic_id, partition, last_offset);
CREATE INDEX batches_by_file ON batches (file_id);
CREATE TABLE producer_state (
    topic_id UUID NOT NULL,
    partition INT NOT NULL,
    producer_id BIGINT NOT NULL,
    row_id BIGSERIAL,
    producer_epoch SMALLINT NOT NULL,
    base_sequence INT NOT NULL,
    last_sequence INT NOT NULL,
    assigned_offset BIGINT NOT NULL,
    batch_max_timestamp BIGINT NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id, row_id)
);
CREATE TYPE commit_batch_response_v1 AS (
    batch_number INT, error TEXT, assigned_base_offset BIGINT, log_start_offset BIGINT,
    duplicate_of_offset BIGINT, batch_timestamp BIGINT
);
"""

COMMIT_FUNCTION = """
CREATE FUNCTION commit_file_v1(
    key_of_file TEXT, file_format SMALLINT, uploader INT, size_of_file BIGINT, commit_time TIMESTAMPTZ,
    batches_json JSONB
) RETURNS SETOF commit_batch_response_v1 LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    stored_file_id BIGINT;
    item RECORD;
    on_log logs%ROWTYPE;
    earlier RECORD;
    base BIGINT;
    end_offset BIGINT;
    newest_sequence BIGINT;
BEGIN
    INSERT INTO files (object_key, format, reason, state, uploader_broker_id, committed_at, size)
    VALUES (key_of_file, file_format, 'produce', 'uploaded', uploader, commit_time, size_of_file)
    RETURNING file_id INTO stored_file_id;

    -- A private copy of the touched partitions, their rows locked in key order (two commits cannot deadlock).
    CREATE TEMPORARY TABLE logs_tmp ON COMMIT DROP AS
        SELECT * FROM logs
        WHERE (topic_id, partition) IN (
            SELECT DISTINCT (j->>'topic_id')::UUID, (j->>'partition')::INT FROM jsonb_array_elements(batches_json) j)
        ORDER BY topic_id, partition
        FOR UPDATE;

    FOR item IN
        SELECT * FROM jsonb_to_recordset(batches_json) AS x(
            batch_number INT, magic SMALLINT, topic_id UUID, partition INT, byte_offset BIGINT, byte_size BIGINT,
            base_offset BIGINT, last_offset BIGINT, timestamp_type SMALLINT, batch_max_timestamp BIGINT,
            producer_id BIGINT, producer_epoch SMALLINT, base_sequence INT, last_sequence INT)
    LOOP
        IF on_log.topic_id IS DISTINCT FROM item.topic_id OR on_log.partition IS DISTINCT FROM item.partition THEN
            SELECT * FROM logs_tmp WHERE topic_id = item.topic_id AND partition = item.partition INTO on_log;
            IF NOT FOUND THEN
                RETURN NEXT (item.batch_number, 'nonexistent_log', NULL, NULL, NULL, -1)::commit_batch_response_v1;
                CONTINUE;
            END IF;
        END IF;
        base := on_log.high_watermark;

        IF item.producer_id > -1 AND item.producer_epoch > -1 THEN
            -- Fenced: a later epoch of the producer has written to the partition.
            IF EXISTS (
                SELECT 1 FROM producer_state
                WHERE topic_id = item.topic_id AND partition = item.partition
                    AND producer_id = item.producer_id AND producer_epoch > item.producer_epoch
            ) THEN
                RETURN NEXT (item.batch_number, 'invalid_producer_epoch', NULL, NULL, NULL, -1)
                    ::commit_batch_response_v1;
                CONTINUE;
            END IF;

            SELECT MAX(last_sequence) INTO newest_sequence FROM producer_state
            WHERE topic_id = item.topic_id AND partition = item.partition
                AND producer_id = item.producer_id AND producer_epoch = item.producer_epoch;

            IF newest_sequence IS NULL THEN
                IF item.base_sequence <> 0 THEN  -- an epoch's first batch starts at sequence 0
                    RETURN NEXT (item.batch_number, 'sequence_out_of_order', NULL, NULL, NULL, -1)
                        ::commit_batch_response_v1;
                    CONTINUE;
                END IF;
            ELSE
                SELECT * FROM producer_state
                WHERE topic_id = item.topic_id AND partition = item.partition
                    AND producer_id = item.producer_id AND producer_epoch = item.producer_epoch
                    AND base_sequence = item.base_sequence AND last_sequence = item.last_sequence
                INTO earlier;
                IF FOUND THEN  -- a retry: the offset the batch got the first time
                    RETURN NEXT (item.batch_number, 'duplicate_batch', NULL, NULL,
                                 earlier.assigned_offset, earlier.batch_max_timestamp)::commit_batch_response_v1;
                    CONTINUE;
                END IF;
                IF (item.base_sequence - 1) <> newest_sequence
                    OR (newest_sequence = 2147483647 AND item.base_sequence <> 0) THEN
                    RETURN NEXT (item.batch_number, 'sequence_out_of_order', NULL, NULL, NULL, -1)
                        ::commit_batch_response_v1;
                    CONTINUE;
                END IF;
            END IF;

            INSERT INTO producer_state (topic_id, partition, producer_id, producer_epoch, base_sequence,
                                        last_sequence, assigned_offset, batch_max_timestamp)
            VALUES (item.topic_id, item.partition, item.producer_id, item.producer_epoch, item.base_sequence,
                    item.last_sequence, base, item.batch_max_timestamp);
            -- Remember five batches per producer, as Kafka does.
            DELETE FROM producer_state
            WHERE topic_id = item.topic_id AND partition = item.partition AND producer_id = item.producer_id
                AND row_id <= (
                    SELECT row_id FROM producer_state
                    WHERE topic_id = item.topic_id AND partition = item.partition AND producer_id = item.producer_id
                    ORDER BY row_id DESC LIMIT 1 OFFSET 5);
        END IF;

        UPDATE logs_tmp
        SET high_watermark = high_watermark + (item.last_offset - item.base_offset + 1)
        WHERE topic_id = item.topic_id AND partition = item.partition
        RETURNING high_watermark INTO end_offset;
        on_log.high_watermark := end_offset;

        INSERT INTO batches (magic, topic_id, partition, base_offset, last_offset, file_id, byte_offset, byte_size,
                             timestamp_type, log_append_timestamp, batch_max_timestamp)
        VALUES (item.magic, item.topic_id, item.partition, base, end_offset - 1, stored_file_id, item.byte_offset,
                item.byte_size, item.timestamp_type, (EXTRACT(EPOCH FROM commit_time) * 1000)::BIGINT,
                item.batch_max_timestamp);

        RETURN NEXT (item.batch_number, 'none', base, on_log.log_start_offset, NULL, item.batch_max_timestamp)
            ::commit_batch_response_v1;
    END LOOP;

    UPDATE logs SET high_watermark = logs_tmp.high_watermark
    FROM logs_tmp
    WHERE logs.topic_id = logs_tmp.topic_id AND logs.partition = logs_tmp.partition;

    IF NOT EXISTS (SELECT 1 FROM batches WHERE file_id = stored_file_id LIMIT 1) THEN
        UPDATE files SET state = 'deleting', marked_for_deletion_at = commit_time WHERE file_id = stored_file_id;
    END IF;
END;
$$;
"""

# FindBatches as one query per call: per partition, how many batches from the asked offset and the last offset.
FIND_BATCHES = """
SELECT r.partition, count(b.last_offset), max(b.last_offset)
FROM unnest(%(partitions)s::INT[], %(offsets)s::BIGINT[], %(limits)s::INT[]) AS r(partition, fetch_offset, max_batches)
LEFT JOIN LATERAL (
    SELECT last_offset FROM batches
    WHERE topic_id = %(topic_id)s AND partition = r.partition AND last_offset >= r.fetch_offset
    ORDER BY last_offset LIMIT r.max_batches
) b ON TRUE
GROUP BY r.partition
"""

# A prebuilt state: `files` files of `per_file` batches over `partitions` partitions of one topic, one
# idempotent producer per partition, its last five batches in producer_state (what commits would leave).
# The part of a prebuilt state both peers share: the files, their batches and the producers' last five batches.
PREFILL_FILES_AND_PRODUCERS = """
INSERT INTO files (file_id, object_key, format, reason, state, uploader_broker_id, committed_at, size)
SELECT f, 'prefill/' || f, 1, 'produce', 'uploaded', 1, now(), %(per_file)s * 1000
FROM generate_series(1, %(files)s) f;
INSERT INTO batches (magic, topic_id, partition, base_offset, last_offset, file_id, byte_offset, byte_size,
                     timestamp_type, log_append_timestamp, batch_max_timestamp)
SELECT 2, %(topic_id)s, i %% %(partitions)s, (i / %(partitions)s) * 10, (i / %(partitions)s) * 10 + 9,
       i / %(per_file)s + 1, (i %% %(per_file)s) * 1000, 1000, 0, 1700000000000, 1700000000000
FROM generate_series(0, %(batches)s - 1) i;
INSERT INTO producer_state (topic_id, partition, producer_id, producer_epoch, base_sequence, last_sequence,
                            assigned_offset, batch_max_timestamp)
SELECT %(topic_id)s, p, 900000000 + p, 0, s * 10, s * 10 + 9, s * 10, 1700000000000
FROM generate_series(0, %(partitions)s - 1) p,
     generate_series(greatest(0, %(batches)s / %(partitions)s - 5), %(batches)s / %(partitions)s - 1) s;
SELECT setval('files_file_id_seq', %(files)s);
"""
PREFILL = (
    """
INSERT INTO logs SELECT %(topic_id)s, p, 'prefill', 0, (%(batches)s / %(partitions)s) * 10
FROM generate_series(0, %(partitions)s - 1) p;
"""
    + PREFILL_FILES_AND_PRODUCERS
)
