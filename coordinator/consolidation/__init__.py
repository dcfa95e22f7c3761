"""Object consolidation (DESIGN §4c): ReplaceBatches moves runs of batches into a merged object; GetFileMergeWorkItem
tells the merge job which files to merge."""
