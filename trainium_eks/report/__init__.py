"""The review synth prints: what a deploy builds, runs and costs (with the list prices it reads)."""
