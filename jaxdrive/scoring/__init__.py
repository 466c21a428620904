"""The main job: stream scenes, score every proposal on device, write resumable parquet shards, summarise."""
