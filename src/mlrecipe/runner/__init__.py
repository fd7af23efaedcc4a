"""The release state machine: steps in order, one persisted state record per release."""
