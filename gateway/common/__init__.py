"""What the processes share: the shared-memory board and its metric words, the records of the
ring, the control channel between worker and sequencer, the stall pulse and the process figures."""
