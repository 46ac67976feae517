"""The sequencer process: the only writer of event ids and the ring (process), the per-client
ledger of stream places, and the capsule it holds, embedded or upstream (capsule/)."""
