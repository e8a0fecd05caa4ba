"""One module per `batchgate` verb; see gate.cli."""
