"""What a checkpoint's tables hold: the layer explained, positions measured."""
