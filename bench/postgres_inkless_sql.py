"""The `postgres` peer's SQL: a PostgreSQL control plane that does the work Aiven's Inkless does (August 2026).

Written for this harness from Inkless's published design (its control-plane
documentation and the behaviour its migrations describe); no Inkless file or
SQL text is copied (Inkless is AGPL-licensed). What it models, as of Inkless's
main branch on 2026-08-21:

- Schema: every column typed by a domain that checks its range; `logs` carries
  the per-partition byte size, diskless start offset, remote log start offset
  and earliest batch timestamp; `batches` references `logs` (deferred) and
  `files`, and has a covering index on (topic, partition, last offset) plus an
  index on the file; `files` has a partial index for the cleaner. `logs` is
  stored with fillfactor 70 and per-table autovacuum settings on every table.
- Commit (Inkless's `commit_file_v2`, coalescing on, the default since
  2026-08-21): one call per WAL file in the caller's transaction. It inserts the
  file, copies the partitions' `logs` rows into a temporary table while locking
  them in (topic, partition) order, then checks each batch's producer (epoch,
  duplicates among the last five, sequence order), moves the partition's high
  watermark and byte size in the copy, and grows a run of accepted batches of
  one partition that are byte-adjacent in the file; each run becomes one
  `batches` row. It writes the copy back, fills the earliest batch timestamp of
  partitions that have none, and marks the file for deletion if no batch was
  stored. One answer per batch, in request order.
- FindBatches (Inkless's `find_batches_v2` with the request-level
  minimum-one-message rule): per requested partition in request order, the
  partition's `logs` row (unknown partition, offset out of range), then its
  batches joined to `files` for the object key, in offset order, collected into
  an array of batch records until the partition's or the request's byte budget
  is spent (the request's first batch is always returned).
"""

from __future__ import annotations

from bench.postgres_sql import PREFILL_FILES_AND_PRODUCERS

MODEL = (
    "peer model: Inkless's PostgreSQL control plane as of 2026-08-21 (commit_file_v2 with batch coalescing, "
    "find_batches_v2 with request-level byte budgets, schema through migration V27)"
)

SCHEMA = """
-- Value domains. Each column checks what it may hold, so every write pays the checks a real deployment pays.
CREATE DOMAIN d_broker_id AS INT NOT NULL;
CREATE DOMAIN d_topic_id AS UUID NOT NULL;
CREATE DOMAIN d_topic_name AS VARCHAR(255) NOT NULL;
CREATE DOMAIN d_partition AS INT NOT NULL CHECK (VALUE >= 0);
CREATE DOMAIN d_magic AS SMALLINT NOT NULL CHECK (VALUE BETWEEN 0 AND 2);
CREATE DOMAIN d_format AS SMALLINT NOT NULL CHECK (VALUE BETWEEN 1 AND 3);
CREATE DOMAIN d_offset_or_null AS BIGINT CHECK (VALUE >= 0);
CREATE DOMAIN d_offset AS d_offset_or_null CHECK (VALUE IS NOT NULL);
CREATE DOMAIN d_offset_or_minus_one AS BIGINT CHECK (VALUE IS NOT NULL AND VALUE >= -1);
CREATE DOMAIN d_byte_offset AS BIGINT NOT NULL CHECK (VALUE >= 0);
CREATE DOMAIN d_byte_size AS BIGINT NOT NULL CHECK (VALUE >= 0);
CREATE DOMAIN d_object_key AS VARCHAR(1024) NOT NULL;
CREATE DOMAIN d_timestamp_type AS SMALLINT NOT NULL CHECK (VALUE BETWEEN -1 AND 1);
CREATE DOMAIN d_timestamp AS BIGINT NOT NULL CHECK (VALUE >= -5);
CREATE DOMAIN d_timestamp_or_null AS BIGINT CHECK (VALUE >= -5);
CREATE DOMAIN d_producer_id AS BIGINT NOT NULL CHECK (VALUE >= -1);
CREATE DOMAIN d_producer_epoch AS SMALLINT NOT NULL CHECK (VALUE >= -1);
CREATE DOMAIN d_sequence AS INT NOT NULL CHECK (VALUE >= -1);

CREATE TYPE file_reason AS ENUM ('produce', 'merge');
CREATE TYPE file_state AS ENUM ('uploaded', 'deleting');

-- One row per partition, updated by every commit that touches it: room on each page keeps those updates HOT.
CREATE TABLE logs (
    topic_id d_topic_id,
    partition d_partition,
    topic_name d_topic_name,
    log_start_offset d_offset,
    high_watermark d_offset,
    byte_size d_byte_size DEFAULT 0,
    diskless_start_offset d_offset DEFAULT 0,
    remote_log_start_offset d_offset_or_null DEFAULT NULL,
    earliest_batch_timestamp d_timestamp_or_null,
    PRIMARY KEY (topic_id, partition)
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0
);

CREATE TABLE files (
    file_id BIGSERIAL PRIMARY KEY,
    object_key d_object_key UNIQUE,
    format d_format,
    reason file_reason NOT NULL,
    state file_state NOT NULL,
    uploader_broker_id d_broker_id,
    committed_at TIMESTAMPTZ,
    marked_for_deletion_at TIMESTAMPTZ,
    size d_byte_size
) WITH (
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 10000,
    autovacuum_vacuum_cost_limit = 2000
);
-- What the file cleaner scans: the files marked for deletion, oldest first.
CREATE INDEX files_deleting_by_marked_at ON files (marked_for_deletion_at) WHERE state = 'deleting';

CREATE TABLE batches (
    batch_id BIGSERIAL PRIMARY KEY,
    magic d_magic,
    topic_id d_topic_id,
    partition d_partition,
    base_offset d_offset,
    last_offset d_offset,
    file_id BIGINT NOT NULL,
    byte_offset d_byte_offset,
    byte_size d_byte_size,
    timestamp_type d_timestamp_type,
    log_append_timestamp d_timestamp,
    batch_max_timestamp d_timestamp,
    -- Deferred: a partition may be deleted before its batches are.
    FOREIGN KEY (topic_id, partition) REFERENCES logs (topic_id, partition)
        ON DELETE NO ACTION ON UPDATE CASCADE DEFERRABLE INITIALLY DEFERRED,
    FOREIGN KEY (file_id) REFERENCES files (file_id) ON DELETE RESTRICT ON UPDATE CASCADE
) WITH (
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 10000,
    autovacuum_vacuum_cost_limit = 2000
);
-- Reads walk a partition in offset order; the included columns serve retention scans without the heap.
CREATE INDEX batches_partition_last_offset_covering ON batches (topic_id, partition, last_offset)
    INCLUDE (base_offset, byte_size, timestamp_type, batch_max_timestamp, log_append_timestamp);
CREATE INDEX batches_file ON batches (file_id);

-- The last five batches of each producer on each partition (Kafka keeps five for duplicate detection).
CREATE TABLE producer_state (
    topic_id d_topic_id,
    partition d_partition,
    producer_id d_producer_id,
    row_id BIGSERIAL,
    producer_epoch d_producer_epoch,
    base_sequence d_sequence,
    last_sequence d_sequence,
    assigned_offset d_offset,
    batch_max_timestamp d_timestamp,
    PRIMARY KEY (topic_id, partition, producer_id, row_id)
) WITH (
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 10000,
    autovacuum_vacuum_cost_limit = 2000
);

-- The broker sends a file's batches as one array of these, sorted by partition.
CREATE TYPE commit_request AS (
    magic d_magic,
    topic_id d_topic_id,
    partition d_partition,
    byte_offset d_byte_offset,
    byte_size d_byte_size,
    base_offset d_offset,
    last_offset d_offset,
    timestamp_type d_timestamp_type,
    batch_max_timestamp d_timestamp,
    producer_id d_producer_id,
    producer_epoch d_producer_epoch,
    base_sequence d_sequence,
    last_sequence d_sequence
);
CREATE TYPE commit_outcome AS ENUM (
    'none', 'nonexistent_log', 'invalid_producer_epoch', 'sequence_out_of_order', 'duplicate_batch'
);
CREATE TYPE commit_answer AS (
    topic_id d_topic_id,
    partition d_partition,
    log_start_offset d_offset_or_null,
    assigned_base_offset d_offset_or_null,
    batch_timestamp d_timestamp,
    outcome commit_outcome
);

CREATE TYPE fetch_request AS (
    topic_id d_topic_id,
    partition d_partition,
    starting_offset BIGINT,
    max_partition_fetch_bytes INT
);
CREATE TYPE batch_coordinates AS (
    magic d_magic,
    topic_id d_topic_id,
    topic_name d_topic_name,
    partition d_partition,
    byte_offset d_byte_offset,
    byte_size d_byte_size,
    base_offset d_offset,
    last_offset d_offset,
    log_append_timestamp d_timestamp,
    batch_max_timestamp d_timestamp,
    timestamp_type d_timestamp_type
);
CREATE TYPE found_batch AS (
    batch_id BIGINT,
    object_key d_object_key,
    coordinates batch_coordinates
);
CREATE TYPE fetch_error AS ENUM ('offset_out_of_range', 'unknown_topic_or_partition');
CREATE TYPE fetch_answer AS (
    topic_id d_topic_id,
    partition d_partition,
    log_start_offset d_offset_or_minus_one,
    high_watermark d_offset_or_minus_one,
    batches found_batch[],
    error fetch_error
);
"""

FUNCTIONS = """
-- Kafka's rule for a batch's timestamp: the append time under LogAppendTime (type 1), else the producer's max.
CREATE FUNCTION effective_timestamp(kind d_timestamp_type, max_timestamp d_timestamp, append_timestamp d_timestamp)
RETURNS d_timestamp LANGUAGE plpgsql IMMUTABLE AS $body$
BEGIN
    IF kind = 1 THEN
        RETURN append_timestamp;
    END IF;
    RETURN max_timestamp;
END;
$body$;

-- One stored row for a run of batches (a run of one is a single batch).
CREATE FUNCTION store_batch_run(
    run_file_id BIGINT, run_magic d_magic, run_topic_id d_topic_id, run_partition d_partition,
    run_base_offset d_offset, run_last_offset d_offset, run_byte_offset d_byte_offset, run_byte_size d_byte_size,
    run_timestamp_type d_timestamp_type, run_append_timestamp d_timestamp, run_max_timestamp d_timestamp
) RETURNS VOID LANGUAGE plpgsql VOLATILE AS $body$
BEGIN
    INSERT INTO batches (magic, topic_id, partition, base_offset, last_offset, file_id, byte_offset, byte_size,
                         timestamp_type, log_append_timestamp, batch_max_timestamp)
    VALUES (run_magic, run_topic_id, run_partition, run_base_offset, run_last_offset, run_file_id, run_byte_offset,
            run_byte_size, run_timestamp_type, run_append_timestamp, run_max_timestamp);
END;
$body$;

CREATE FUNCTION peer_commit_file(
    new_object_key d_object_key, new_format d_format, uploader d_broker_id, new_file_size d_byte_size,
    commit_time TIMESTAMPTZ, requests commit_request[]
) RETURNS SETOF commit_answer LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    stored_file_id BIGINT;
    append_ms BIGINT := (EXTRACT(EPOCH FROM commit_time) * 1000)::BIGINT;
    batch RECORD;
    current_log logs%ROWTYPE;
    base d_offset_or_null;
    next_offset d_offset_or_null;
    newest_sequence BIGINT;
    earlier RECORD;
    -- The run being gathered: accepted batches of one partition, each starting in the file where the last ended.
    gathering BOOLEAN := FALSE;
    run_topic_id UUID;
    run_partition INT;
    run_magic SMALLINT;
    run_timestamp_type SMALLINT;
    run_base BIGINT;
    run_last BIGINT;
    run_byte_offset BIGINT;
    run_byte_size BIGINT;
    run_max_timestamp BIGINT;
BEGIN
    INSERT INTO files (object_key, format, reason, state, uploader_broker_id, committed_at, size)
    VALUES (new_object_key, new_format, 'produce', 'uploaded', uploader, commit_time, new_file_size)
    RETURNING file_id INTO stored_file_id;

    -- The loop works on a private copy of the partitions' rows and writes it back once at the end. Taking the
    -- row locks in (topic, partition) order means two commits never wait for each other in a cycle.
    DROP TABLE IF EXISTS commit_logs;
    CREATE TEMPORARY TABLE commit_logs ON COMMIT DROP AS
        SELECT l.*
        FROM logs l
        WHERE (l.topic_id, l.partition) IN (SELECT r.topic_id, r.partition FROM unnest(requests) r)
        ORDER BY l.topic_id, l.partition
        FOR UPDATE;

    FOR batch IN SELECT * FROM unnest(requests) LOOP
        -- Batches arrive grouped by partition: look the partition up only when it changes.
        IF current_log.topic_id IS DISTINCT FROM batch.topic_id
            OR current_log.partition IS DISTINCT FROM batch.partition THEN
            SELECT * INTO current_log FROM commit_logs c
            WHERE c.topic_id = batch.topic_id AND c.partition = batch.partition;
            IF NOT FOUND THEN
                RETURN NEXT (batch.topic_id, batch.partition, NULL, NULL, -1, 'nonexistent_log')::commit_answer;
                CONTINUE;
            END IF;
        END IF;
        base := current_log.high_watermark;

        IF batch.producer_id >= 0 AND batch.producer_epoch >= 0 THEN
            -- A later epoch of this producer has written here: this one is fenced.
            PERFORM 1 FROM producer_state s
            WHERE s.topic_id = batch.topic_id AND s.partition = batch.partition
                AND s.producer_id = batch.producer_id AND s.producer_epoch > batch.producer_epoch
            LIMIT 1;
            IF FOUND THEN
                RETURN NEXT (batch.topic_id, batch.partition, NULL, NULL, -1, 'invalid_producer_epoch')::commit_answer;
                CONTINUE;
            END IF;

            SELECT max(s.last_sequence) INTO newest_sequence FROM producer_state s
            WHERE s.topic_id = batch.topic_id AND s.partition = batch.partition
                AND s.producer_id = batch.producer_id AND s.producer_epoch = batch.producer_epoch;
            IF newest_sequence IS NULL THEN
                -- The epoch's first batch starts its sequence at zero.
                IF batch.base_sequence <> 0 THEN
                    RETURN NEXT (batch.topic_id, batch.partition, NULL, NULL, -1, 'sequence_out_of_order')
                        ::commit_answer;
                    CONTINUE;
                END IF;
            ELSE
                -- A retry of a batch still remembered: answer with the offset it was given then.
                SELECT s.assigned_offset, s.batch_max_timestamp INTO earlier FROM producer_state s
                WHERE s.topic_id = batch.topic_id AND s.partition = batch.partition
                    AND s.producer_id = batch.producer_id AND s.producer_epoch = batch.producer_epoch
                    AND s.base_sequence = batch.base_sequence AND s.last_sequence = batch.last_sequence;
                IF FOUND THEN
                    RETURN NEXT (batch.topic_id, batch.partition, current_log.log_start_offset,
                                 earlier.assigned_offset, earlier.batch_max_timestamp, 'duplicate_batch')
                        ::commit_answer;
                    CONTINUE;
                END IF;
                -- Otherwise it must continue the sequence (which wraps to zero after the largest INT).
                IF batch.base_sequence <> (CASE WHEN newest_sequence = 2147483647 THEN 0
                                                ELSE newest_sequence + 1 END) THEN
                    RETURN NEXT (batch.topic_id, batch.partition, NULL, NULL, -1, 'sequence_out_of_order')
                        ::commit_answer;
                    CONTINUE;
                END IF;
            END IF;

            INSERT INTO producer_state (topic_id, partition, producer_id, producer_epoch, base_sequence,
                                        last_sequence, assigned_offset, batch_max_timestamp)
            VALUES (batch.topic_id, batch.partition, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                    batch.last_sequence, base, batch.batch_max_timestamp);
            -- Forget all but the producer's five newest batches here.
            DELETE FROM producer_state s
            WHERE s.topic_id = batch.topic_id AND s.partition = batch.partition AND s.producer_id = batch.producer_id
                AND s.row_id < (
                    SELECT min(newest.row_id) FROM (
                        SELECT k.row_id FROM producer_state k
                        WHERE k.topic_id = batch.topic_id AND k.partition = batch.partition
                            AND k.producer_id = batch.producer_id
                        ORDER BY k.row_id DESC
                        LIMIT 5
                    ) newest
                );
        END IF;

        UPDATE commit_logs c
        SET high_watermark = c.high_watermark + (batch.last_offset - batch.base_offset + 1),
            byte_size = c.byte_size + batch.byte_size
        WHERE c.topic_id = batch.topic_id AND c.partition = batch.partition
        RETURNING c.high_watermark INTO next_offset;
        current_log.high_watermark := next_offset;

        -- A rejected batch still takes bytes in the file, so byte adjacency also proves that no rejected batch
        -- lies between two accepted ones: their offsets follow each other too.
        IF gathering AND run_topic_id = batch.topic_id AND run_partition = batch.partition
            AND run_magic = batch.magic AND run_timestamp_type = batch.timestamp_type
            AND batch.byte_offset = run_byte_offset + run_byte_size THEN
            run_last := next_offset - 1;
            run_byte_size := run_byte_size + batch.byte_size;
            run_max_timestamp := greatest(run_max_timestamp, batch.batch_max_timestamp);
        ELSE
            IF gathering THEN
                PERFORM store_batch_run(stored_file_id, run_magic, run_topic_id, run_partition, run_base, run_last,
                                        run_byte_offset, run_byte_size, run_timestamp_type, append_ms,
                                        run_max_timestamp);
            END IF;
            gathering := TRUE;
            run_topic_id := batch.topic_id;
            run_partition := batch.partition;
            run_magic := batch.magic;
            run_timestamp_type := batch.timestamp_type;
            run_base := base;
            run_last := next_offset - 1;
            run_byte_offset := batch.byte_offset;
            run_byte_size := batch.byte_size;
            run_max_timestamp := batch.batch_max_timestamp;
        END IF;

        RETURN NEXT (batch.topic_id, batch.partition, current_log.log_start_offset, base, batch.batch_max_timestamp,
                     'none')::commit_answer;
    END LOOP;
    IF gathering THEN
        PERFORM store_batch_run(stored_file_id, run_magic, run_topic_id, run_partition, run_base, run_last,
                                run_byte_offset, run_byte_size, run_timestamp_type, append_ms, run_max_timestamp);
    END IF;

    UPDATE logs l
    SET high_watermark = c.high_watermark, byte_size = c.byte_size
    FROM commit_logs c
    WHERE l.topic_id = c.topic_id AND l.partition = c.partition;

    -- A partition without an earliest batch timestamp (new, or never filled) takes its oldest batch's.
    UPDATE logs l
    SET earliest_batch_timestamp = (
        SELECT effective_timestamp(b.timestamp_type, b.batch_max_timestamp, b.log_append_timestamp)
        FROM batches b
        WHERE b.topic_id = l.topic_id AND b.partition = l.partition
        ORDER BY b.topic_id, b.partition, b.last_offset
        LIMIT 1
    )
    WHERE l.earliest_batch_timestamp IS NULL
        AND (l.topic_id, l.partition) IN (SELECT r.topic_id, r.partition FROM unnest(requests) r);

    -- Nothing of the file was stored (every batch refused): it may be deleted.
    IF NOT EXISTS (SELECT 1 FROM batches b WHERE b.file_id = stored_file_id) THEN
        UPDATE files SET state = 'deleting', marked_for_deletion_at = commit_time WHERE file_id = stored_file_id;
    END IF;
END;
$body$;

CREATE FUNCTION peer_find_batches(
    requests fetch_request[], fetch_max_bytes INT, max_batches_per_partition INT DEFAULT 0
) RETURNS SETOF fetch_answer LANGUAGE plpgsql STABLE AS $body$
DECLARE
    wanted RECORD;
    stored RECORD;
    request_bytes BIGINT := 0;
    partition_bytes BIGINT;
    partition_count INT;
    collected found_batch[];
BEGIN
    FOR wanted IN
        SELECT q.topic_id, q.partition, q.starting_offset, q.max_partition_fetch_bytes,
               l.topic_name, l.log_start_offset, l.high_watermark,
               CASE
                   WHEN l.topic_id IS NULL THEN 'unknown_topic_or_partition'::fetch_error
                   WHEN q.starting_offset < l.log_start_offset OR q.starting_offset > l.high_watermark
                       THEN 'offset_out_of_range'::fetch_error
               END AS error
        FROM unnest(requests) WITH ORDINALITY AS q(topic_id, partition, starting_offset, max_partition_fetch_bytes,
                                                    position)
        LEFT JOIN logs l ON l.topic_id = q.topic_id AND l.partition = q.partition
        ORDER BY q.position
    LOOP
        IF wanted.error IS NOT NULL THEN
            RETURN NEXT (wanted.topic_id, wanted.partition, coalesce(wanted.log_start_offset, -1),
                         coalesce(wanted.high_watermark, -1), NULL, wanted.error)::fetch_answer;
            CONTINUE;
        END IF;
        collected := ARRAY[]::found_batch[];
        partition_bytes := 0;
        partition_count := 0;
        -- Read in offset order along the covering index and stop at the budget: the cost follows the answer.
        FOR stored IN
            SELECT b.batch_id, f.object_key, b.magic, b.topic_id, b.partition, b.byte_offset, b.byte_size,
                   b.base_offset, b.last_offset, b.log_append_timestamp, b.batch_max_timestamp, b.timestamp_type
            FROM batches b
            JOIN files f ON f.file_id = b.file_id
            WHERE b.topic_id = wanted.topic_id AND b.partition = wanted.partition
                AND b.last_offset >= wanted.starting_offset AND b.base_offset < wanted.high_watermark
            ORDER BY b.last_offset
        LOOP
            -- The request's first batch always goes out (Kafka grants one message per request, not per
            -- partition); after it, a batch is added only while both the partition and the request have room.
            EXIT WHEN request_bytes > 0 AND (partition_bytes >= wanted.max_partition_fetch_bytes
                                             OR request_bytes >= fetch_max_bytes);
            collected := collected || ROW(stored.batch_id, stored.object_key,
                                          ROW(stored.magic, stored.topic_id, wanted.topic_name, stored.partition,
                                              stored.byte_offset, stored.byte_size, stored.base_offset,
                                              stored.last_offset, stored.log_append_timestamp,
                                              stored.batch_max_timestamp, stored.timestamp_type)::batch_coordinates
                                          )::found_batch;
            partition_bytes := partition_bytes + stored.byte_size;
            request_bytes := request_bytes + stored.byte_size;
            partition_count := partition_count + 1;
            EXIT WHEN max_batches_per_partition > 0 AND partition_count >= max_batches_per_partition;
        END LOOP;
        RETURN NEXT (wanted.topic_id, wanted.partition, wanted.log_start_offset, wanted.high_watermark, collected, NULL)
            ::fetch_answer;
    END LOOP;
END;
$body$;
"""

# A prebuilt state: `files` files of `per_file` batches over `partitions` partitions of one topic (one batch of
# a partition per file, so nothing coalesces), one idempotent producer per partition with its last five batches.
PREFILL = (
    """
INSERT INTO logs (topic_id, partition, topic_name, log_start_offset, high_watermark, byte_size,
                  earliest_batch_timestamp)
SELECT %(topic_id)s, p, 'prefill', 0, (%(batches)s / %(partitions)s) * 10, (%(batches)s / %(partitions)s) * 1000,
       1700000000000
FROM generate_series(0, %(partitions)s - 1) p;
"""
    + PREFILL_FILES_AND_PRODUCERS
)
