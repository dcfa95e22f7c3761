"""The peer design's schema and commit function, as Aiven's Inkless builds its PostgreSQL control plane.

Modelled on Inkless's `commit_file_v1` (storage/inkless, db/migration): one
server-side PL/pgSQL call per WAL file that inserts the file, copies the
partitions' `logs` rows into a temporary table locking them FOR UPDATE in a
fixed (topic, partition) order (no deadlocks between concurrent commits),
then per batch checks idempotence against `producer_state` (the last five
batches of each producer), assigns the offset from the high watermark and
inserts the batch, and finally writes the high watermarks back. All in the
caller's single transaction: one WAL flush per commit.
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
    arg_object_key TEXT, arg_format SMALLINT, arg_uploader_broker_id INT, arg_file_size BIGINT,
    arg_now TIMESTAMPTZ, arg_requests JSONB
) RETURNS SETOF commit_batch_response_v1 LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    l_new_file_id BIGINT;
    l_request RECORD;
    l_log logs%ROWTYPE;
    l_duplicate RECORD;
    l_assigned_offset BIGINT;
    l_new_high_watermark BIGINT;
    l_last_sequence_in_producer_epoch BIGINT;
BEGIN
    INSERT INTO files (object_key, format, reason, state, uploader_broker_id, committed_at, size)
    VALUES (arg_object_key, arg_format, 'produce', 'uploaded', arg_uploader_broker_id, arg_now, arg_file_size)
    RETURNING file_id INTO l_new_file_id;

    -- Lock the partitions' rows in a fixed order (no deadlocks) and work on a temporary copy.
    CREATE TEMPORARY TABLE logs_tmp ON COMMIT DROP AS
        SELECT * FROM logs
        WHERE (topic_id, partition) IN (
            SELECT DISTINCT (r->>'topic_id')::UUID, (r->>'partition')::INT FROM jsonb_array_elements(arg_requests) r)
        ORDER BY topic_id, partition
        FOR UPDATE;

    FOR l_request IN
        SELECT * FROM jsonb_to_recordset(arg_requests) AS x(
            batch_number INT, magic SMALLINT, topic_id UUID, partition INT, byte_offset BIGINT, byte_size BIGINT,
            base_offset BIGINT, last_offset BIGINT, timestamp_type SMALLINT, batch_max_timestamp BIGINT,
            producer_id BIGINT, producer_epoch SMALLINT, base_sequence INT, last_sequence INT)
    LOOP
        IF l_log.topic_id IS DISTINCT FROM l_request.topic_id
            OR l_log.partition IS DISTINCT FROM l_request.partition THEN
            SELECT * FROM logs_tmp WHERE topic_id = l_request.topic_id AND partition = l_request.partition
            INTO l_log;
            IF NOT FOUND THEN
                RETURN NEXT (l_request.batch_number, 'nonexistent_log', NULL, NULL, NULL, -1)::commit_batch_response_v1;
                CONTINUE;
            END IF;
        END IF;

        l_assigned_offset = l_log.high_watermark;

        IF l_request.producer_id > -1 AND l_request.producer_epoch > -1 THEN
            IF EXISTS (
                SELECT 1 FROM producer_state
                WHERE topic_id = l_request.topic_id AND partition = l_request.partition
                    AND producer_id = l_request.producer_id AND producer_epoch > l_request.producer_epoch
            ) THEN
                RETURN NEXT (l_request.batch_number, 'invalid_producer_epoch', NULL, NULL, NULL, -1)
                    ::commit_batch_response_v1;
                CONTINUE;
            END IF;

            SELECT MAX(last_sequence) INTO l_last_sequence_in_producer_epoch
            FROM producer_state
            WHERE topic_id = l_request.topic_id AND partition = l_request.partition
                AND producer_id = l_request.producer_id AND producer_epoch = l_request.producer_epoch;

            IF l_last_sequence_in_producer_epoch IS NULL THEN
                IF l_request.base_sequence <> 0 THEN
                    RETURN NEXT (l_request.batch_number, 'sequence_out_of_order', NULL, NULL, NULL, -1)
                        ::commit_batch_response_v1;
                    CONTINUE;
                END IF;
            ELSE
                SELECT * FROM producer_state
                WHERE topic_id = l_request.topic_id AND partition = l_request.partition
                    AND producer_id = l_request.producer_id AND producer_epoch = l_request.producer_epoch
                    AND base_sequence = l_request.base_sequence AND last_sequence = l_request.last_sequence
                INTO l_duplicate;
                IF FOUND THEN
                    RETURN NEXT (l_request.batch_number, 'duplicate_batch', NULL, NULL,
                                 l_duplicate.assigned_offset, l_duplicate.batch_max_timestamp)
                        ::commit_batch_response_v1;
                    CONTINUE;
                END IF;
                IF (l_request.base_sequence - 1) <> l_last_sequence_in_producer_epoch
                    OR (l_last_sequence_in_producer_epoch = 2147483647 AND l_request.base_sequence <> 0) THEN
                    RETURN NEXT (l_request.batch_number, 'sequence_out_of_order', NULL, NULL, NULL, -1)
                        ::commit_batch_response_v1;
                    CONTINUE;
                END IF;
            END IF;

            INSERT INTO producer_state (topic_id, partition, producer_id, producer_epoch, base_sequence,
                                        last_sequence, assigned_offset, batch_max_timestamp)
            VALUES (l_request.topic_id, l_request.partition, l_request.producer_id, l_request.producer_epoch,
                    l_request.base_sequence, l_request.last_sequence, l_assigned_offset,
                    l_request.batch_max_timestamp);
            -- Keep only the last 5 (Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN).
            DELETE FROM producer_state
            WHERE topic_id = l_request.topic_id AND partition = l_request.partition
                AND producer_id = l_request.producer_id
                AND row_id <= (
                    SELECT row_id FROM producer_state
                    WHERE topic_id = l_request.topic_id AND partition = l_request.partition
                        AND producer_id = l_request.producer_id
                    ORDER BY row_id DESC LIMIT 1 OFFSET 5);
        END IF;

        UPDATE logs_tmp
        SET high_watermark = high_watermark + (l_request.last_offset - l_request.base_offset + 1)
        WHERE topic_id = l_request.topic_id AND partition = l_request.partition
        RETURNING high_watermark INTO l_new_high_watermark;
        l_log.high_watermark = l_new_high_watermark;

        INSERT INTO batches (magic, topic_id, partition, base_offset, last_offset, file_id, byte_offset, byte_size,
                             timestamp_type, log_append_timestamp, batch_max_timestamp)
        VALUES (l_request.magic, l_request.topic_id, l_request.partition, l_assigned_offset,
                l_new_high_watermark - 1, l_new_file_id, l_request.byte_offset, l_request.byte_size,
                l_request.timestamp_type, (EXTRACT(EPOCH FROM arg_now) * 1000)::BIGINT,
                l_request.batch_max_timestamp);

        RETURN NEXT (l_request.batch_number, 'none', l_assigned_offset, l_log.log_start_offset, NULL,
                     l_request.batch_max_timestamp)::commit_batch_response_v1;
    END LOOP;

    UPDATE logs SET high_watermark = logs_tmp.high_watermark
    FROM logs_tmp
    WHERE logs.topic_id = logs_tmp.topic_id AND logs.partition = logs_tmp.partition;

    IF NOT EXISTS (SELECT 1 FROM batches WHERE file_id = l_new_file_id LIMIT 1) THEN
        UPDATE files SET state = 'deleting', marked_for_deletion_at = arg_now WHERE file_id = l_new_file_id;
    END IF;
END;
$$;
"""

# Inkless answers FindBatches with one query per fetch: the partitions' batches from the asked offsets.
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
PREFILL = """
INSERT INTO logs SELECT %(topic_id)s, p, 'prefill', 0, (%(batches)s / %(partitions)s) * 10
FROM generate_series(0, %(partitions)s - 1) p;
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
