"""FSx for Lustre and its CSI volume: where shards, compile caches and runs live."""
