"""What crosses the volume: the node cache, the fetch pool ahead of the consumer, listings and staging copies."""
