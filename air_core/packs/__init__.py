"""Packs (`air-data pack`, `air_core.pack`): small files in Parquet shards, their layout, store, plan and reads."""
