-- What a run list shows of a run beside the run, so that a list neither
-- loads a run's documents (its result is up to megabytes) nor parses them
-- in the store (the SQL both backends speak has no JSON functions):
-- result_summary is the JSON of the result's small fields, NULL while the
-- run has no result; the counts of its previews and skipped files; the
-- skill it ran. Written with the run (skill) and at its end (the rest).
ALTER TABLE runs ADD COLUMN result_summary TEXT;
ALTER TABLE runs ADD COLUMN preview_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN skipped_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN skill_name TEXT;
ALTER TABLE runs ADD COLUMN skill_version TEXT;
UPDATE runs SET result_summary = CASE WHEN json_valid(result) THEN json_object(
        'exit_code', json_extract(result, '$.exit_code'), 'signal', json_extract(result, '$.signal'),
        'reason', json_extract(result, '$.reason'), 'stdout_bytes', json_extract(result, '$.stdout_bytes'),
        'stderr_bytes', json_extract(result, '$.stderr_bytes'), 'wall_ms', json_extract(result, '$.wall_ms'),
        'cpu_ms', json_extract(result, '$.cpu_ms'), 'peak_memory_bytes', json_extract(result, '$.peak_memory_bytes'),
        'stdout_truncated', json(CASE WHEN json_extract(result, '$.stdout_truncated') THEN 'true' ELSE 'false' END),
        'stderr_truncated', json(CASE WHEN json_extract(result, '$.stderr_truncated') THEN 'true' ELSE 'false' END))
    ELSE '{}' END
    WHERE result IS NOT NULL;
UPDATE runs SET preview_count = CASE WHEN json_valid(previews) THEN json_array_length(previews) ELSE 0 END,
    skipped_count = CASE WHEN json_valid(skipped) THEN json_array_length(skipped) ELSE 0 END;
UPDATE runs SET skill_name = json_extract(inputs, '$.skill.name'), skill_version = json_extract(inputs, '$.skill.version')
    WHERE json_valid(inputs) AND json_type(inputs, '$.skill.name') = 'text';
