"""Programs that start a training job on the cluster (the tools image runs them)."""
